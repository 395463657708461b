/*
 * Review of complete_many() and of a booking after the same
 * transaction's releases (doc/reference.md, "Reporting and booking in one
 * transaction"): every cap a reserve() checks counts the transaction's own
 * releases as done, the subscription's burst as much as a job's cores.
 *
 * The file is one transaction (BEGIN ... ROLLBACK), as the agent's path is.
 */
BEGIN;
\ir include/helpers.psql

SELECT plan(21);

-- ------------------------------------------------ a show at its burst

/*
 * Show t79burst may use 2 cores in its allocation (burst 2) and runs two
 * 1-core frames on h1: it is at its burst.  h1 reports both and books in
 * the same transaction: the 2 cores its reports freed are its to book.
 */
SELECT frameq.create_allocation('t79.burst') \g /dev/null
SELECT frameq.create_show('t79burst') AS s_burst \gset
SELECT frameq.set_subscription('t79burst', 't79.burst', 2, 2) \g /dev/null
SELECT frameq.register_host('t79-b1', 't79.burst', 8, 68719476736) AS tok_b1 \gset
SELECT frameq.register_host('t79-b2', 't79.burst', 8, 68719476736) AS tok_b2 \gset
SELECT epoch AS e_b1 FROM frameq.attach('t79-b1', :'tok_b1', 'b') \gset
SELECT epoch AS e_b2 FROM frameq.attach('t79-b2', :'tok_b2', 'b') \gset
SELECT frameq.submit($${"show": "t79burst", "name": "burst",
	"layers": [{"name": "l", "command": "c", "range": "1-10", "cores": 1}]}$$) AS jb \gset
CREATE TEMP TABLE burst_procs AS SELECT proc FROM frameq.reserve('t79-b1', :'tok_b1', :e_b1, 4);
SELECT is((SELECT count(*)::int FROM burst_procs), 2, 'the show books 2 one-core frames: its burst');

SELECT is(frameq.complete_many('t79-b1', :'tok_b1', :e_b1, (SELECT array_agg(proc ORDER BY proc) FROM burst_procs),
								'{0, 0}'),
		  '{accepted,accepted}', 'h1 reports both');
SELECT is((SELECT count(*)::int FROM frameq.reserve('t79-b1', :'tok_b1', :e_b1, 4)), 2,
		  'and books, in the same transaction, 2 frames into the burst its reports freed');
SELECT is((SELECT count(*)::int FROM frameq.reserve('t79-b1', :'tok_b1', :e_b1, 4)), 0,
		  'and not one more');
SELECT is((SELECT count(*)::int FROM frameq.reserve('t79-b2', :'tok_b2', :e_b2, 4)), 0,
		  'another host books nothing of the show');
SELECT is((SELECT count(*)::int FROM frameq.check()), 0, 'check() finds nothing wrong');

-- ------------------------------------------------ savepoints and blocks

/*
 * Job "capped" (max_cores 2) runs two 1-core frames on c1, its cap.  Its
 * own releases count for a booking only while they stand: undone with a
 * savepoint, they free nothing; a booking undone leaves them to book again.
 */
SELECT frameq.create_allocation('t79.cap') \g /dev/null
SELECT frameq.create_show('t79cap') \g /dev/null
SELECT frameq.set_subscription('t79cap', 't79.cap', 100, 100) \g /dev/null
SELECT frameq.register_host('t79-c1', 't79.cap', 8, 68719476736) AS tok_c1 \gset
SELECT epoch AS e_c1 FROM frameq.attach('t79-c1', :'tok_c1', 'b') \gset
SELECT frameq.submit($${"show": "t79cap", "name": "capped", "max_cores": 2,
	"layers": [{"name": "l", "command": "c", "range": "1-20", "cores": 1}]}$$) AS jc \gset
CREATE TEMP TABLE cap1 AS SELECT proc FROM frameq.reserve('t79-c1', :'tok_c1', :e_c1, 8);
SELECT is((SELECT count(*)::int FROM cap1), 2, 'the capped job books its 2 cores');

SAVEPOINT s1;
SELECT is(frameq.complete_many('t79-c1', :'tok_c1', :e_c1, (SELECT array_agg(proc) FROM cap1), '{0, 0}'),
		  '{accepted,accepted}', 'both reported, in a savepoint');
SAVEPOINT s2;
SELECT is((SELECT count(*)::int FROM frameq.reserve('t79-c1', :'tok_c1', :e_c1, 8)), 2,
		  'a booking inside it uses their 2 cores');
RELEASE SAVEPOINT s2;
ROLLBACK TO SAVEPOINT s1;
SELECT is((SELECT used_cores FROM frameq.usage WHERE kind = 'job' AND id = :jc), 2.00,
		  'the savepoint rolled back: the ledger counts the 2 old procs, not the 2 new ones');
SELECT is((SELECT count(*)::int FROM frameq.reserve('t79-c1', :'tok_c1', :e_c1, 8)), 0,
		  'and the reports are undone: nothing to book');

SELECT is(frameq.complete_many('t79-c1', :'tok_c1', :e_c1, (SELECT array_agg(proc) FROM cap1), '{0, 0}'),
		  '{accepted,accepted}', 'both reported again, outside any savepoint');
SAVEPOINT s3;
SELECT is((SELECT count(*)::int FROM frameq.reserve('t79-c1', :'tok_c1', :e_c1, 8)), 2, 'a booking of 2');
ROLLBACK TO SAVEPOINT s3;
SELECT is((SELECT used_cores FROM frameq.usage WHERE kind = 'job' AND id = :jc), 2.00,
		  'undone: the ledger counts the 2 reported procs until the commit');
SELECT set_config('t79.tok', :'tok_c1', true), set_config('t79.epoch', :'e_c1', true) \g /dev/null
DO $$
BEGIN
	PERFORM count(*) FROM frameq.reserve('t79-c1', current_setting('t79.tok'), current_setting('t79.epoch')::bigint, 8);
	RAISE EXCEPTION 'undo' USING ERRCODE = 'P0001';
EXCEPTION WHEN raise_exception THEN
	NULL;
END
$$;
SELECT is((SELECT used_cores FROM frameq.usage WHERE kind = 'job' AND id = :jc), 2.00,
		  'a booking in a block that failed is undone too');
CREATE TEMP TABLE cap2 AS SELECT proc FROM frameq.reserve('t79-c1', :'tok_c1', :e_c1, 8);
SELECT is((SELECT count(*)::int FROM cap2), 2, 'the reports still stand: 2 booked');
SELECT is((SELECT count(*)::int FROM frameq.reserve('t79-c1', :'tok_c1', :e_c1, 8)), 0, 'and no more');
SELECT is((SELECT count(*)::int FROM frameq.proc WHERE job = :jc), 2, 'the job has 2 procs');
SELECT is((SELECT count(*)::int FROM frameq.check()), 0, 'check() finds nothing wrong');

/*
 * The ledger reset after the transaction's releases: its next booking
 * must not trust its own log nor rebuild around its own writes.
 */
SELECT is(frameq.complete_many('t79-c1', :'tok_c1', :e_c1, (SELECT array_agg(proc) FROM cap2), '{0, 0}'),
		  '{accepted,accepted}', 'the 2 new procs reported');
SELECT frameq._ledger_reset() \g /dev/null
SELECT throws_ok(format($$SELECT count(*) FROM frameq.reserve('t79-c1', %L, %s, 8)$$, :'tok_c1', :e_c1),
				 'FQ003', NULL, 'a booking after a reset in the same transaction is refused (FQ003), not made');

SELECT * FROM finish();
ROLLBACK;
