/*
 * check() and the release path: no frame may be waiting or terminal while a
 * proc for it exists (a release that skipped the proc, or a frame moved
 * behind the proc's back), whether the proc runs or is a kill order; and
 * the opposite, a proc deleted without its release.  Each corruption is
 * made as superuser with frameq's triggers switched off
 * (session_replication_role = replica) in a savepoint, then rolled back.
 * check() is clean with kill orders outstanding and after every kind of
 * release in this same transaction (it counts the pending releases).
 */
BEGIN;
\ir include/helpers.psql

SELECT plan(17);

SELECT * FROM fqtest.farm('t27') \gset
SELECT frameq.submit($${"show": "t27show", "name": "t27-job",
	"layers": [{"name": "l", "command": "c", "range": "1-8"}]}$$) AS job \gset
SELECT proc AS p1, frame AS f1 FROM frameq.reserve('t27-h1', :'tok1', :epoch1, 1) \gset
SELECT proc AS p2, frame AS f2 FROM frameq.reserve('t27-h1', :'tok1', :epoch1, 1) \gset
SELECT proc AS p3, frame AS f3 FROM frameq.reserve('t27-h1', :'tok1', :epoch1, 1) \gset
SELECT frameq.kill_frame(:f3, 'bad render') \g /dev/null

SELECT is_empty('SELECT * FROM frameq.check()', 'check() is clean with two procs running and one kill order');

SAVEPOINT corrupt;
SET LOCAL session_replication_role = replica;
UPDATE frameq.frame SET state = 'waiting' WHERE id = :f1;
SET LOCAL session_replication_role = origin;
SELECT results_eq($$SELECT invariant, detail FROM frameq.check() WHERE invariant = 'one run at a time'$$,
				  format($$VALUES ('one run at a time', 'proc %s holds frame %s, which is waiting')$$, :p1, :f1),
				  'a running proc whose frame is waiting breaks "one run at a time"');
ROLLBACK TO SAVEPOINT corrupt;

SET LOCAL session_replication_role = replica;
UPDATE frameq.frame SET state = 'succeeded' WHERE id = :f1;
SET LOCAL session_replication_role = origin;
SELECT results_eq($$SELECT invariant, detail FROM frameq.check()$$,
				  format($$VALUES ('one run at a time', 'proc %s holds frame %s, which is succeeded')$$, :p1, :f1),
				  'a running proc whose frame succeeded breaks "one run at a time", and only that');
ROLLBACK TO SAVEPOINT corrupt;

SET LOCAL session_replication_role = replica;
UPDATE frameq.frame SET state = 'dead' WHERE id = :f3;
SET LOCAL session_replication_role = origin;
SELECT results_eq($$SELECT invariant, detail FROM frameq.check()$$,
				  format($$VALUES ('one run at a time', 'proc %s holds frame %s, which is dead')$$, :p3, :f3),
				  'a kill order whose frame is already dead breaks "one run at a time"');
ROLLBACK TO SAVEPOINT corrupt;

SET LOCAL session_replication_role = replica;
UPDATE frameq.frame SET state = 'eaten' WHERE id = :f3;
SET LOCAL session_replication_role = origin;
SELECT results_eq($$SELECT invariant, detail FROM frameq.check()$$,
				  format($$VALUES ('one run at a time', 'proc %s holds frame %s, which is eaten')$$, :p3, :f3),
				  'a kill order whose frame is eaten breaks "one run at a time"');
ROLLBACK TO SAVEPOINT corrupt;

SET LOCAL session_replication_role = replica;
UPDATE frameq.frame SET state = 'dead' WHERE id IN (:f1, :f2);
SET LOCAL session_replication_role = origin;
SELECT is((SELECT count(*)::int FROM frameq.check() WHERE invariant = 'one run at a time'), 2,
		  'two such procs are two rows');
ROLLBACK TO SAVEPOINT corrupt;
SELECT is_empty('SELECT * FROM frameq.check()', 'check() is clean again after the rollbacks');

/* a proc deleted without its release: the frame is left running with nobody on it */
SET LOCAL session_replication_role = replica;
DELETE FROM frameq.proc WHERE id = :p2;
SET LOCAL session_replication_role = origin;
SELECT set_eq($$SELECT invariant || ': ' || split_part(detail, ':', 1) FROM frameq.check()$$,
			  format($$VALUES ('one run at a time: frame %s is running but has no proc'),
							  ('every attempt is visible: run %s is open but its proc is gone'),
							  ('accounting is exact: subscription %s/%s'), ('accounting is exact: job %s/0'),
							  ('accounting is exact: host t27-h1')$$,
					 :f2, :p2, :show, :alloc, :job),
			  'a proc deleted behind the release path leaves a running frame without a proc, an open run, and a ledger and host that still count it');
ROLLBACK TO SAVEPOINT corrupt;
RELEASE SAVEPOINT corrupt;

-- ------------------------------------------ real releases keep check() clean

SELECT is((SELECT kill FROM frameq.heartbeat('t27-h1', :'tok1', :epoch1, ARRAY[:p1, :p2]::bigint[])), '{}'::bigint[],
		  'a heartbeat that no longer lists the kill order confirms it');
SELECT is_empty('SELECT * FROM frameq.check()', 'check() is clean after a kill confirmed by heartbeat');
SELECT is(frameq.complete('t27-h1', :'tok1', :epoch1, :p1, 0), 'accepted', 'complete of a running proc');
SELECT is_empty('SELECT * FROM frameq.check()', 'check() is clean after a completion');
SELECT frameq.eat_frame(:f2) \g /dev/null
SELECT proc AS p4 FROM frameq.reserve('t27-h1', :'tok1', :epoch1, 1) \gset
SELECT frameq.attach('t27-h1', :'tok1', 'boot-2') \g /dev/null
SELECT is_empty('SELECT * FROM frameq.check()', 'check() is clean after a reboot released a kill order and a running proc');
SELECT epoch AS epoch1 FROM frameq.host WHERE id = :host1 \gset
SELECT frameq.reserve('t27-h1', :'tok1', :epoch1, 2) \g /dev/null
SELECT frameq.confirm_host_dead('t27-h1') \g /dev/null
SELECT is_empty('SELECT * FROM frameq.check()', 'check() is clean after confirm_host_dead');
SELECT results_eq(format($$SELECT state, count(*)::int FROM frameq.frame WHERE job = %s GROUP BY state ORDER BY state$$, :job),
				  $$VALUES ('dead', 1), ('eaten', 1), ('succeeded', 1), ('waiting', 5)$$,
				  'the job''s frames: one dead, one eaten, one succeeded, five waiting, none running');
SELECT is((SELECT count(*)::int FROM frameq.proc WHERE host = :host1), 0, 'and no proc is left');
SELECT is((SELECT count(*)::int FROM frameq.run WHERE job = :job AND ended_at IS NULL), 0, 'and every run is closed');

SELECT * FROM finish();
ROLLBACK;
