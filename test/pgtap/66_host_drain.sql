/*
 * set_host_state(host, 'drain') (doc/reference.md, set_host_state): the
 * host books nothing new, its running tasks are not killed and finish as
 * they would, and it stays drained (through a completion, a re-attach, a
 * lost lease) until it is set up, when it books again.
 */
BEGIN;
\ir include/helpers.psql

SELECT plan(23);

SELECT * FROM fqtest.farm('t66', cores => '{2}') \gset
SELECT frameq.submit($${"show": "t66show", "name": "t66-job",
	"layers": [{"name": "l", "command": "c", "range": "1-6"}]}$$) AS job \gset
SELECT proc AS p1, frame AS f1 FROM frameq.reserve('t66-h1', :'tok1', :epoch1, 1) \gset
SELECT proc AS p2, frame AS f2 FROM frameq.reserve('t66-h1', :'tok1', :epoch1, 1) \gset

SELECT * FROM fqtest.refuses($$SELECT frameq.set_host_state('t66-h1', 'drained')$$, '22023',
	'state must be up, down, repair or drain, not drained', 'an unknown state raises 22023 naming drain among the states');

SELECT lives_ok($$SELECT frameq.set_host_state('t66-h1', 'drain')$$, 'set_host_state drain succeeds');
SELECT results_eq($$SELECT state, down_reason, running FROM frameq.hosts WHERE name = 't66-h1'$$,
	$$VALUES ('drain', 'operator', 2)$$, 'the hosts view shows it drained by the operator, still running 2');
SELECT is((SELECT count(*)::int FROM frameq.proc WHERE host = :host1 AND state = 'running'), 2,
	'its running tasks got no kill order');
SELECT is((SELECT count(*)::int FROM frameq.proc WHERE state = 'killing'), 0, 'no kill order anywhere');
SELECT is((SELECT count(*)::int FROM frameq.complete('t66-h1', :'tok1', :epoch1, :p1, 0)), 1,
	'a running task completes as it would');
SELECT is((SELECT state FROM frameq.frame WHERE id = :f1), 'succeeded', 'its frame succeeded');
SELECT is((SELECT reason FROM frameq.run WHERE proc = :p1), 'completed', 'its run ended completed');
SELECT is((SELECT count(*)::int FROM frameq.reserve('t66-h1', :'tok1', :epoch1)), 0,
	'the drained host books nothing, with a core free and 4 frames waiting');
SELECT is((SELECT count(*)::int FROM frameq.frame WHERE job = :job AND state = 'waiting'), 4, 'they still wait');
SELECT lives_ok(format($$SELECT frameq.heartbeat('t66-h1', %L, %s, ARRAY[%s]::bigint[])$$, :'tok1', :epoch1, :p2),
	'its heartbeat renews the lease');
SELECT is((SELECT kill FROM frameq.heartbeat('t66-h1', :'tok1', :epoch1, ARRAY[:p2]::bigint[])), '{}'::bigint[],
	'and gives no kill order');
SELECT frameq.complete('t66-h1', :'tok1', :epoch1, :p2, 0) \g /dev/null
SELECT results_eq($$SELECT state, running FROM frameq.hosts WHERE name = 't66-h1'$$,
	$$VALUES ('drain', 0)$$, 'with its last task done it stays drained, running nothing');
SELECT is((SELECT count(*)::int FROM frameq.reserve('t66-h1', :'tok1', :epoch1)), 0, 'and still books nothing');
SELECT is(check_count, 0, 'check() finds nothing wrong') FROM (SELECT count(*)::int AS check_count FROM frameq.check()) c;

/* neither a re-attach nor a lost lease brings it back */
SELECT epoch AS epoch2 FROM frameq.attach('t66-h1', :'tok1', 'boot-1') \gset
SELECT is((SELECT state FROM frameq.host WHERE id = :host1), 'drain', 'a re-attach leaves it drained');
UPDATE frameq.host SET last_renewal_at = clock_timestamp() WHERE name NOT LIKE 't66-%' AND lease_expires_at IS NOT NULL;
UPDATE frameq.host SET last_renewal_at = clock_timestamp() - frameq.lease_period() - interval '1 second' WHERE id = :host1;
SELECT is(frameq._expire_leases('-infinity'), 1::bigint, 'its lease expires');
SELECT results_eq($$SELECT state, down_reason FROM frameq.host WHERE name = 't66-h1'$$,
	$$VALUES ('drain', 'operator')$$, 'and it is still drained, not down for a lost lease');
SELECT epoch AS epoch3 FROM frameq.attach('t66-h1', :'tok1', 'boot-1') \gset
SELECT is((SELECT count(*)::int FROM frameq.reserve('t66-h1', :'tok1', :epoch3)), 0, 'attached again it books nothing');

/* up: it books again */
SELECT lives_ok($$SELECT frameq.set_host_state('t66-h1', 'up')$$, 'set_host_state up succeeds');
SELECT results_eq($$SELECT state, down_reason FROM frameq.hosts WHERE name = 't66-h1'$$,
	$$VALUES ('up', NULL::text)$$, 'the host is up');
SELECT is((SELECT count(*)::int FROM frameq.reserve('t66-h1', :'tok1', :epoch3)), 2, 'and books again: its 2 cores');

SELECT * FROM finish();
ROLLBACK;
