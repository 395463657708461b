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

SELECT plan(6);

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

SELECT * FROM finish();
ROLLBACK;
