/*
 * The caps ledger across whole transactions: ROLLBACK undoes a booking's
 * charge, COMMIT applies a release (and only COMMIT does), and PREPARE
 * TRANSACTION is refused with 0A000 once a transaction has booked or
 * released procs (the ledger's per-transaction log lives in the session and
 * would be lost; src/ledger.c).
 *
 * Unlike the other files this one is NOT wrapped in a transaction: it has
 * to commit, roll back and prepare.  So:
 *  - its fixture is committed, under names starting with t13, and deleted
 *    again at the end (a run that stops half-way leaves it behind; test/run
 *    uses a fresh cluster every time);
 *  - nothing inside the transactions that are prepared touches pgTAP (whose
 *    temporary tables would make PREPARE fail for a reason of its own);
 *  - the refused PREPARE prints its ERROR on stderr; ON_ERROR_STOP is off
 *    for that statement only, and psql's LAST_ERROR_SQLSTATE and
 *    LAST_ERROR_MESSAGE carry the error to the assertions.
 */
\set ON_ERROR_STOP 1
SELECT plan(29);

SELECT frameq.create_allocation('t13.pool') AS alloc \gset
SELECT frameq.create_show('t13show') AS show \gset
SELECT frameq.set_subscription('t13show', 't13.pool', 100, 100) \g /dev/null
SELECT frameq.register_host('t13-h1', 't13.pool', 8, 17179869184) AS tok \gset
SELECT id AS host FROM frameq.host WHERE name = 't13-h1' \gset
SELECT epoch FROM frameq.attach('t13-h1', :'tok', 'boot-1') \gset
SELECT frameq.submit($${"show": "t13show", "name": "prep",
	"layers": [{"name": "l", "command": "c", "range": "1-4"}]}$$) AS job \gset

\set job_ledger 'SELECT used_cc, running FROM frameq.ledger() WHERE kind = $q$job$q$ AND id = ' :job

-- ------------------------------------------------------------- ROLLBACK

BEGIN;
SELECT count(*) AS booked FROM frameq.reserve('t13-h1', :'tok', :epoch, 2) \gset
SELECT used_cc AS charged FROM frameq.ledger() WHERE kind = 'job' AND id = :job \gset
ROLLBACK;

SELECT is(:booked::int, 2, 'a transaction books two frames');
SELECT is(:charged::int, 200, 'inside it, the ledger charges the job 200 centicores');
SELECT is_empty(:'job_ledger', 'after ROLLBACK the ledger holds nothing for the job');
SELECT results_eq(format($$SELECT count(*) FILTER (WHERE state = 'waiting')::int, sum(attempts)::int FROM frameq.frame WHERE job = %s$$, :job),
				  'VALUES (4, 0)', 'after ROLLBACK every frame is waiting with no attempt');
SELECT is((SELECT idle_cc FROM frameq.host WHERE id = :host), 800, 'after ROLLBACK the host is entirely idle');

-- ------------------------------------------------- PREPARE of a booking

BEGIN;
SELECT count(*) AS booked FROM frameq.reserve('t13-h1', :'tok', :epoch, 1) \gset
\set ON_ERROR_STOP 0
PREPARE TRANSACTION 't13_booked';
\set ON_ERROR_STOP 1
ROLLBACK;

SELECT is(:booked::int, 1, 'a transaction books one frame');
SELECT is(:'LAST_ERROR_SQLSTATE'::text, '0A000', 'PREPARE TRANSACTION after a booking is refused with 0A000');
SELECT alike(:'LAST_ERROR_MESSAGE'::text, '%frameq%', 'the refusal is frameq''s own');
SELECT is((SELECT count(*)::int FROM pg_prepared_xacts WHERE gid = 't13_booked'), 0,
		  'no prepared transaction is left behind');
SELECT is_empty(:'job_ledger', 'the refused booking left nothing in the ledger');
SELECT results_eq(format($$SELECT count(*) FILTER (WHERE state = 'waiting')::int, sum(attempts)::int FROM frameq.frame WHERE job = %s$$, :job),
				  'VALUES (4, 0)', 'the refused booking left every frame waiting with no attempt');
SELECT is((SELECT count(*)::int FROM frameq.proc WHERE job = :job), 0, 'the refused booking left no proc');

-- the refusal is about frameq's work, not PREPARE as such
BEGIN;
UPDATE frameq.job SET priority = 7 WHERE id = :job;
PREPARE TRANSACTION 't13_plain';
COMMIT PREPARED 't13_plain';
SELECT is((SELECT priority FROM frameq.job WHERE id = :job), 7,
		  'a transaction that neither books nor releases can be prepared and committed');

-- ---------------------------------------- COMMIT of a booking, then release

SELECT proc AS p1 FROM frameq.reserve('t13-h1', :'tok', :epoch, 1) \gset
SELECT results_eq(:'job_ledger', 'VALUES (100, 1)', 'a committed booking is in the ledger');

BEGIN;
SELECT frameq.complete('t13-h1', :'tok', :epoch, :p1, 0) AS outcome \gset
\set ON_ERROR_STOP 0
PREPARE TRANSACTION 't13_released';
\set ON_ERROR_STOP 1
ROLLBACK;

SELECT is(:'outcome'::text, 'accepted', 'a transaction completes the proc');
SELECT is(:'LAST_ERROR_SQLSTATE'::text, '0A000', 'PREPARE TRANSACTION after a release is refused with 0A000');
SELECT ok(frameq.owns(:p1, frameq._run_secret(:p1)), 'the proc whose release could not be prepared is still live');
SELECT results_eq(:'job_ledger', 'VALUES (100, 1)', 'the refused release left the ledger charge in place');

BEGIN;
SELECT frameq.complete('t13-h1', :'tok', :epoch, :p1, 0) AS outcome \gset
ROLLBACK;
SELECT is(:'outcome'::text, 'accepted', 'another transaction completes the proc, then rolls back');
SELECT ok(frameq.owns(:p1, frameq._run_secret(:p1)), 'after ROLLBACK of the release the proc is live again');
SELECT results_eq(:'job_ledger', 'VALUES (100, 1)', 'after ROLLBACK of the release the ledger still charges it');
SELECT is((SELECT idle_cc FROM frameq.host WHERE id = :host), 700, 'after ROLLBACK of the release the host still gives it a core');

BEGIN;
SELECT is(frameq.complete('t13-h1', :'tok', :epoch, :p1, 0), 'accepted', 'a third transaction completes the proc');
SELECT results_eq(:'job_ledger', 'VALUES (100, 1)', 'until it commits, the ledger still charges the proc');
COMMIT;
SELECT is_empty(:'job_ledger', 'after COMMIT the ledger no longer charges the proc');
SELECT is((SELECT state FROM frameq.frame f JOIN frameq.run r ON r.frame = f.id WHERE r.proc = :p1), 'succeeded',
		  'after COMMIT the frame has succeeded');
SELECT is((SELECT idle_cc FROM frameq.host WHERE id = :host), 800, 'after COMMIT the host is entirely idle');
SELECT is_empty('SELECT * FROM frameq.check()', 'check() finds nothing wrong after the commit');

SELECT is(frameq.complete('t13-h1', :'tok', :epoch, :p1, 0), 'duplicate',
		  'the same report after the commit is a duplicate');

SELECT * FROM finish();

-- --------------------------------------------------------------- cleanup
DELETE FROM frameq.proc WHERE job = :job;
DELETE FROM frameq.run WHERE job = :job;
DELETE FROM frameq.frame WHERE job = :job;
DELETE FROM frameq.layer WHERE job = :job;
DELETE FROM frameq.job WHERE id = :job;
DELETE FROM frameq.host WHERE id = :host;
DELETE FROM frameq.subscription WHERE show = :show;
DELETE FROM frameq.show WHERE id = :show;
DELETE FROM frameq.allocation WHERE id = :alloc;
