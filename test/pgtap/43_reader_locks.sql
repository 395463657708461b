/*
 * A reader never keeps a lock that stops bookings or releases.  Reading
 * frameq.ledger(), frameq.usage or frameq.check() when the caps ledger is
 * invalid (as after every server start; frameq._ledger_reset() makes it
 * so here) rebuilds the ledger under ShareRowExclusiveLock on frameq.proc,
 * and must let that lock go once the ledger is valid: the reader's
 * transaction keeps nothing stronger than the AccessShareLock of its read
 * (src/ledger.c, "Why releasing early is safe").
 */
BEGIN;
SELECT plan(9);

/* a subscription, so that frameq.usage has a row that reads the ledger */
SELECT frameq.create_allocation('t43.pool') \g /dev/null
SELECT frameq.create_show('t43show') \g /dev/null
SELECT frameq.set_subscription('t43show', 't43.pool', 100, 100) \g /dev/null

\set proc_locks 'SELECT string_agg(DISTINCT mode, $$,$$ ORDER BY mode) FROM pg_locks WHERE pid = pg_backend_pid() AND relation = $$frameq.proc$$::regclass'

SELECT frameq._ledger_reset();
SET LOCAL ROLE frameq_reader;
SELECT ok((SELECT count(*) >= 0 FROM frameq.ledger()), 'frameq_reader reads ledger() while the ledger is invalid');
RESET ROLE;
SELECT is(frameq._ledger_ensure(), false, 'that read rebuilt the ledger');
SELECT is((:proc_locks), 'AccessShareLock', 'and the reader holds only AccessShareLock on frameq.proc');

SELECT frameq._ledger_reset();
SET LOCAL ROLE frameq_reader;
SELECT ok((SELECT count(*) >= 0 FROM frameq.usage), 'frameq_reader reads frameq.usage while the ledger is invalid');
RESET ROLE;
SELECT is(frameq._ledger_ensure(), false, 'that read rebuilt the ledger');
SELECT is((:proc_locks), 'AccessShareLock', 'and the reader holds only AccessShareLock on frameq.proc');

SELECT frameq._ledger_reset();
SET LOCAL ROLE frameq_reader;
SELECT ok((SELECT count(*) >= 0 FROM frameq.check()), 'frameq_reader runs check() while the ledger is invalid');
RESET ROLE;
SELECT is(frameq._ledger_ensure(), false, 'that call rebuilt the ledger');
SELECT is((:proc_locks), 'AccessShareLock', 'and the reader holds only AccessShareLock on frameq.proc');

SELECT * FROM finish();
ROLLBACK;
