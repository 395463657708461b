/*
 * check(): no rows on a healthy farm, and one row naming the invariant for
 * each kind of corruption a superuser can cause behind frameq's back.
 * Each corruption is made in a savepoint and rolled back, and check() is
 * clean again afterwards.  No proc is released in this transaction, so the
 * ledger never reads high here (see 08_complete.sql).
 */
BEGIN;
\ir include/helpers.psql

SELECT plan(21);

SELECT * FROM fqtest.farm('t14') \gset
SELECT frameq.create_folder('t14show', 'f') AS folder \gset
SELECT frameq.create_limit('t14.lic', 10) AS lim \gset
SELECT frameq.submit($${"show": "t14show", "folder": "f", "name": "chk",
	"layers": [{"name": "l", "command": "c", "range": "1-4", "limits": ["t14.lic"]}]}$$) AS job \gset

SELECT is_empty('SELECT * FROM frameq.check()', 'check() is clean on a farm with nothing running');
SELECT is((SELECT count(*)::int FROM frameq.reserve('t14-h1', :'tok1', :epoch1, 3)), 3, 'three of the four frames are booked');
SELECT is_empty('SELECT * FROM frameq.check()', 'check() is clean on a healthy farm with work running');

SELECT id AS f_waiting FROM frameq.frame WHERE job = :job AND state = 'waiting' \gset
SELECT p.id AS p1, p.frame AS f1 FROM frameq.proc p WHERE p.job = :job ORDER BY p.frame LIMIT 1 \gset

-- host capacity that does not match its procs
SAVEPOINT corrupt;
UPDATE frameq.host SET idle_cc = idle_cc - 100 WHERE id = :host1;
SELECT results_eq($$SELECT invariant FROM frameq.check()$$, $$VALUES ('accounting is exact')$$,
				  'a host whose idle cores disagree with its procs breaks "accounting is exact"');
SELECT alike((SELECT detail FROM frameq.check()), 'host t14-h1:%', 'the row names the host');
ROLLBACK TO SAVEPOINT corrupt;
SELECT is_empty('SELECT * FROM frameq.check()', 'check() is clean again after the rollback');

-- a running frame without a proc
UPDATE frameq.frame SET state = 'running' WHERE id = :f_waiting;
SELECT results_eq($$SELECT invariant, detail FROM frameq.check()$$,
				  format($$VALUES ('one run at a time', 'frame %s is running but has no proc')$$, :f_waiting),
				  'a running frame without a proc breaks "one run at a time"');
ROLLBACK TO SAVEPOINT corrupt;

-- a proc whose frame is not running
UPDATE frameq.frame SET state = 'waiting' WHERE id = :f1;
SELECT results_eq($$SELECT invariant, detail FROM frameq.check()$$,
				  format($$VALUES ('one run at a time', 'proc %s holds frame %s, which is waiting')$$, :p1, :f1),
				  'a proc holding a waiting frame breaks "one run at a time"');
ROLLBACK TO SAVEPOINT corrupt;

-- a live proc without an open run record
UPDATE frameq.run SET ended_at = clock_timestamp(), reason = 'operator' WHERE proc = :p1;
SELECT results_eq($$SELECT invariant, detail FROM frameq.check()$$,
				  format($$VALUES ('every attempt is visible', 'proc %s has no open run record')$$, :p1),
				  'a live proc whose run record is closed breaks "every attempt is visible"');
ROLLBACK TO SAVEPOINT corrupt;

-- an open run record without a proc
INSERT INTO frameq.run (proc, frame, job, host, epoch, cores_cc, memory, gpus, started_at)
VALUES (777, :f_waiting, :job, :host1, :epoch1, 100, 0, 0, clock_timestamp());
SELECT results_eq($$SELECT invariant, detail FROM frameq.check()$$,
				  $$VALUES ('every attempt is visible', 'run 777 is open but its proc is gone')$$,
				  'an open run record without a proc breaks "every attempt is visible"');
ROLLBACK TO SAVEPOINT corrupt;

-- a finished job with live frames
UPDATE frameq.job SET state = 'finished' WHERE id = :job;
SELECT ok((SELECT count(*) = 4 AND bool_and(invariant = 'job state') FROM frameq.check()),
		  'a finished job with running and waiting frames breaks "job state", once per live frame');
ROLLBACK TO SAVEPOINT corrupt;

-- caps exceeded by procs booked after the cap was set
UPDATE frameq.job SET max_cc = 100, caps_changed_at = '2000-01-01' WHERE id = :job;
SELECT results_eq($$SELECT invariant, split_part(detail, ',', 1) FROM frameq.check()$$,
				  format($$VALUES ('hard caps', 'job %s uses 300 cc and 0 gpus')$$, :job),
				  'a job over a cap that predates its bookings breaks "hard caps"');
ROLLBACK TO SAVEPOINT corrupt;
UPDATE frameq.folder SET max_gpus = 0, max_cc = 200, changed_at = '2000-01-01' WHERE id = :folder;
SELECT results_eq($$SELECT invariant FROM frameq.check()$$, $$VALUES ('hard caps')$$,
				  'a folder over a cap that predates its bookings breaks "hard caps"');
ROLLBACK TO SAVEPOINT corrupt;
UPDATE frameq.subscription SET burst_cc = 200, changed_at = '2000-01-01' WHERE show = :show;
SELECT results_eq($$SELECT invariant FROM frameq.check()$$, $$VALUES ('hard caps')$$,
				  'a subscription over a burst that predates its bookings breaks "hard caps"');
ROLLBACK TO SAVEPOINT corrupt;
UPDATE frameq.limits SET max_running = 2, changed_at = '2000-01-01' WHERE id = :lim;
SELECT results_eq($$SELECT invariant, detail FROM frameq.check()$$,
				  $$VALUES ('hard caps', 'limit t14.lic has 3 running, max_running is 2')$$,
				  'a limit over a max_running that predates its bookings breaks "hard caps"');
ROLLBACK TO SAVEPOINT corrupt;

-- lowering a cap the proper way is not a violation
SELECT frameq.set_job(:job, max_cores => 1) \g /dev/null
SELECT frameq.set_limit('t14.lic', 1) \g /dev/null
SELECT is_empty('SELECT * FROM frameq.check()', 'caps lowered through the API below usage are not reported');
ROLLBACK TO SAVEPOINT corrupt;

-- a proc inserted with frameq's triggers switched off
SET LOCAL session_replication_role = replica;
INSERT INTO frameq.proc (id, frame, host, epoch, job, layer, show, folder, allocation, limits, cores_cc, memory, gpus, gpu_memory)
SELECT 888, f.id, :host1, :epoch1, f.job, f.layer, :show, :folder, :alloc, ARRAY[:lim], 100, 0, 0, 0
  FROM frameq.frame f WHERE f.id = :f_waiting;
UPDATE frameq.frame SET state = 'running' WHERE id = :f_waiting;
SET LOCAL session_replication_role = origin;
SELECT set_eq($$SELECT invariant || ': ' || split_part(detail, ':', 1) FROM frameq.check()$$,
			  format($$VALUES ('accounting is exact: subscription %s/%s'), ('accounting is exact: folder %s/0'),
							  ('accounting is exact: job %s/0'), ('accounting is exact: limit %s/0'),
							  ('accounting is exact: host t14-h1'), ('every attempt is visible: proc 888 has no open run record')$$,
					 :show, :alloc, :folder, :job, :lim),
			  'a proc that bypassed the triggers is reported against the ledger of its subscription, folder, job and limit, its host and its run record');
SELECT ok((SELECT bool_and(detail LIKE '%ledger has 300 cc%procs sum to 400 cc%')
			 FROM frameq.check() WHERE detail NOT LIKE 'host%' AND invariant = 'accounting is exact'),
		  'each ledger row shows 300 centicores charged against 400 held by procs');
ROLLBACK TO SAVEPOINT corrupt;
SELECT is_empty('SELECT * FROM frameq.check()', 'check() is clean again at the end');

-- check() reads the ledger as the farm's one source of usage
SELECT results_eq(
	format($$SELECT kind, used_cc, running FROM frameq.ledger()
			  WHERE (kind, id, id2) IN (('subscription', %s, %s), ('folder', %s, 0), ('job', %s, 0), ('limit', %s, 0))
			  ORDER BY kind$$, :show, :alloc, :folder, :job, :lim),
	$$VALUES ('folder', 300, 3), ('job', 300, 3), ('limit', 300, 3), ('subscription', 300, 3)$$,
	'the ledger charges the subscription, folder, job and limit exactly the three live procs');
SELECT results_eq(
	format($$SELECT kind, used_cores, running FROM frameq.usage
			  WHERE (kind, id) IN (('subscription', %s), ('folder', %s), ('job', %s), ('limit', %s), ('host', %s))
			  ORDER BY kind$$, :show, :folder, :job, :lim, :host1),
	$$VALUES ('folder', 3.00::numeric(12,2), 3), ('host', 3.00, 3), ('job', 3.00, 3), ('limit', 3.00, 3), ('subscription', 3.00, 3)$$,
	'usage reports 3 cores and 3 procs for each capped entity and the host');

SELECT * FROM finish();
ROLLBACK;
