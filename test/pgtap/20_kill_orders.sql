/*
 * Kill orders: kill_frame, retry_frame, eat_frame, kill_job and
 * set_host_state('down' | 'repair') on running frames never release them
 * (doc/design.md, invariant 2).  Each turns the frame's proc into a
 * kill order: the proc is 'killing' with its reason, its time and the
 * frame state wanted on release; the frame stays 'running' and keeps its
 * proc; the host's idle capacity and every cap in frameq.usage still count
 * it; owns(proc) becomes false.  A later order replaces the wanted state
 * but keeps the time of the first; a kill order is never withdrawn.
 *
 * What releases a kill order, and with which reason, is 21_kill_release.sql.
 */
BEGIN;
\ir include/helpers.psql

SELECT plan(39);

SELECT * FROM fqtest.farm('t20', cores => '{8,4,4}') \gset
SELECT frameq.create_folder('t20show', 't20f', 50, 4) AS folder \gset
SELECT frameq.create_limit('t20.lic', 10) AS lim \gset

/*
 * Job a (4 frames) and job k (3 frames, one left waiting) run on h1, in
 * folder t20f under limit t20.lic; job d runs on h2 and job r on h3.  Jobs
 * are submitted and booked one after the other so that each host gets
 * exactly the frames named here.
 */
SELECT frameq.submit($${"show": "t20show", "folder": "t20f", "name": "t20-a", "max_cores": 6,
	"layers": [{"name": "l", "command": "c", "range": "1-4", "memory": "1GB", "limits": ["t20.lic"]}]}$$) AS ja \gset
CREATE TEMP TABLE b ON COMMIT DROP AS SELECT * FROM frameq.reserve('t20-h1', :'tok1', :epoch1, 4);
SELECT frameq.submit($${"show": "t20show", "name": "t20-d",
	"layers": [{"name": "l", "command": "c", "range": "1-2", "memory": "1GB"}]}$$) AS jd \gset
INSERT INTO b SELECT * FROM frameq.reserve('t20-h2', :'tok2', :epoch2);
SELECT frameq.submit($${"show": "t20show", "name": "t20-r",
	"layers": [{"name": "l", "command": "c", "range": "1", "memory": "1GB"}]}$$) AS jr \gset
INSERT INTO b SELECT * FROM frameq.reserve('t20-h3', :'tok3', :epoch3);
SELECT frameq.submit($${"show": "t20show", "folder": "t20f", "name": "t20-k",
	"layers": [{"name": "l", "command": "c", "range": "1-3", "memory": "1GB", "limits": ["t20.lic"]}]}$$) AS jk \gset
INSERT INTO b SELECT * FROM frameq.reserve('t20-h1', :'tok1', :epoch1, 2);

SELECT proc AS pa1, frame AS fa1 FROM b WHERE job = :ja AND frame_number = 1 \gset
SELECT proc AS pa2, frame AS fa2 FROM b WHERE job = :ja AND frame_number = 2 \gset
SELECT proc AS pa3, frame AS fa3 FROM b WHERE job = :ja AND frame_number = 3 \gset
SELECT proc AS pa4, frame AS fa4 FROM b WHERE job = :ja AND frame_number = 4 \gset
SELECT proc AS pk1, frame AS fk1 FROM b WHERE job = :jk AND frame_number = 1 \gset
SELECT proc AS pk2, frame AS fk2 FROM b WHERE job = :jk AND frame_number = 2 \gset
SELECT id AS fk3 FROM frameq.frame WHERE job = :jk AND number = 3 \gset
SELECT proc AS pd1, frame AS fd1 FROM b WHERE job = :jd AND frame_number = 1 \gset
SELECT proc AS pd2, frame AS fd2 FROM b WHERE job = :jd AND frame_number = 2 \gset
SELECT proc AS pr1, frame AS fr1 FROM b WHERE job = :jr \gset

SELECT results_eq($$SELECT job, count(*)::int FROM b GROUP BY job ORDER BY job$$,
				  format($$VALUES (%s::bigint, 4), (%s::bigint, 2), (%s::bigint, 1), (%s::bigint, 2)$$, :ja, :jd, :jr, :jk),
				  'the fixture runs 4 frames of a and 2 of k on h1, 2 of d on h2, 1 of r on h3');
SELECT is((SELECT state FROM frameq.frame WHERE id = :fk3), 'waiting', 'frame 3 of job k is waiting');

/* what the farm holds before any kill order: every cap and host, as usage shows it */
CREATE TEMP VIEW t20_usage AS
SELECT string_agg(format('%s %s: %s/%s cores, %s/%s gpus, %s/%s running', kind, name, used_cores,
						 max_cores, used_gpus, max_gpus, running, max_running), E'\n' ORDER BY kind, name) AS usage
  FROM frameq.usage WHERE name LIKE 't20%';
CREATE TEMP VIEW t20_hosts AS
SELECT string_agg(format('%s %s idle %s cores %s memory, running %s', name, state, idle_cores, idle_memory, running),
				  E'\n' ORDER BY name) AS hosts
  FROM frameq.hosts WHERE name LIKE 't20-%';
SELECT usage AS usage_before FROM t20_usage \gset
SELECT hosts AS hosts_before FROM t20_hosts \gset

SELECT is(:'usage_before',
		  concat_ws(E'\n',
			'folder t20f: 6.00/50.00 cores, 0/4 gpus, 6/ running',
			'host t20-h1: 6.00/8.00 cores, 0/0 gpus, 6/ running',
			'host t20-h2: 2.00/4.00 cores, 0/0 gpus, 2/ running',
			'host t20-h3: 1.00/4.00 cores, 0/0 gpus, 1/ running',
			'job t20-a: 4.00/6.00 cores, 0/ gpus, 4/ running',
			'job t20-d: 2.00/ cores, 0/ gpus, 2/ running',
			'job t20-k: 2.00/ cores, 0/ gpus, 2/ running',
			'job t20-r: 1.00/ cores, 0/ gpus, 1/ running',
			'limit t20.lic: 6.00/ cores, 0/ gpus, 6/10 running',
			'subscription t20show@t20.pool: 9.00/100.00 cores, 0/ gpus, 9/ running'),
		  'before the kill orders usage counts 9 procs: 6 on h1, 2 on h2, 1 on h3, in every cap');
SELECT results_eq(format($$SELECT id, frameq.owns(id, frameq._run_secret(id)) FROM frameq.proc WHERE id IN (%s, %s, %s, %s, %s, %s, %s, %s, %s) ORDER BY id$$,
						 :pa1, :pa2, :pa3, :pa4, :pk1, :pk2, :pd1, :pd2, :pr1),
				  format($$SELECT x, true FROM unnest(ARRAY[%s, %s, %s, %s, %s, %s, %s, %s, %s]::bigint[]) x ORDER BY x$$,
						 :pa1, :pa2, :pa3, :pa4, :pk1, :pk2, :pd1, :pd2, :pr1),
				  'owns() is true for each of the nine live procs');

-- --------------------------------------------------------- the kill orders

SELECT clock_timestamp() AS t_orders \gset
SELECT lives_ok(format($$SELECT frameq.kill_frame(%s, 'bad render')$$, :fa1), 'kill_frame on a running frame succeeds');
SELECT lives_ok(format($$SELECT frameq.retry_frame(%s)$$, :fa2), 'retry_frame on a running frame succeeds');
SELECT lives_ok(format($$SELECT frameq.eat_frame(%s)$$, :fa3), 'eat_frame on a running frame succeeds');
SELECT lives_ok(format($$SELECT frameq.kill_job(%s, 'cancelled by production')$$, :jk), 'kill_job on a job with running frames succeeds');
SELECT lives_ok($$SELECT frameq.set_host_state('t20-h2', 'down')$$, 'set_host_state down on a host with running frames succeeds');
SELECT lives_ok($$SELECT frameq.set_host_state('t20-h3', 'repair')$$, 'set_host_state repair on a host with running frames succeeds');
SELECT clock_timestamp() AS t_after \gset

SELECT results_eq(
	format($$SELECT f.id, f.state, p.id, p.state, p.kill_reason, p.want_state
			   FROM frameq.frame f LEFT JOIN frameq.proc p ON p.frame = f.id
			  WHERE f.job IN (%s, %s, %s, %s) ORDER BY f.id$$, :ja, :jk, :jd, :jr),
	format($$VALUES (%s::bigint, 'running', %s::bigint, 'killing', 'bad render', 'dead'),
					(%s, 'running', %s, 'killing', 'retried by operator', 'waiting'),
					(%s, 'running', %s, 'killing', 'eaten by operator', 'eaten'),
					(%s, 'running', %s, 'running', NULL, NULL),
					(%s, 'running', %s, 'killing', 'host set down', 'waiting'),
					(%s, 'running', %s, 'killing', 'host set down', 'waiting'),
					(%s, 'running', %s, 'killing', 'host set repair', 'waiting'),
					(%s, 'running', %s, 'killing', 'cancelled by production', 'dead'),
					(%s, 'running', %s, 'killing', 'cancelled by production', 'dead'),
					(%s, 'dead', NULL, NULL, NULL, NULL)$$,
		   :fa1, :pa1, :fa2, :pa2, :fa3, :pa3, :fa4, :pa4, :fd1, :pd1, :fd2, :pd2, :fr1, :pr1,
		   :fk1, :pk1, :fk2, :pk2, :fk3),
	'every running frame keeps its proc and stays running; each proc is a kill order with its reason and wanted end state');
SELECT is((SELECT count(*)::int FROM frameq.proc WHERE state = 'killing' AND host IN (:host1, :host2, :host3)
			  AND kill_at BETWEEN :'t_orders' AND :'t_after' AND kill_sent_at IS NULL), 8,
		  'the eight kill orders carry the time they were given, and none has been sent yet');
SELECT results_eq(format($$SELECT proc_state, count(*)::int FROM frameq.frames WHERE job IN (%s, %s, %s, %s) AND proc IS NOT NULL GROUP BY proc_state ORDER BY 1$$,
						 :ja, :jk, :jd, :jr),
				  $$VALUES ('killing', 8), ('running', 1)$$,
				  'the frames view shows eight procs killing and one running');
SELECT is((SELECT count(*)::int FROM frameq.run r WHERE r.frame IN (:fa1, :fa2, :fa3, :fa4, :fk1, :fk2, :fd1, :fd2, :fr1) AND r.ended_at IS NULL), 9,
		  'the nine run records are all still open');
SELECT is((SELECT sum(retries + attempts)::int FROM frameq.frame WHERE job IN (:ja, :jk, :jd, :jr)), 9,
		  'no retry was used and no attempt added: the nine bookings are the only attempts');

SELECT is((SELECT usage FROM t20_usage), :'usage_before',
		  'every cap in frameq.usage still counts all nine procs, kill orders included');
SELECT is((SELECT hosts FROM t20_hosts),
		  concat_ws(E'\n', 't20-h1 up idle 2.00 cores 10737418240 memory, running 6',
						   't20-h2 down idle 2.00 cores 15032385536 memory, running 2',
						   't20-h3 repair idle 3.00 cores 16106127360 memory, running 1'),
		  'the hosts keep the cores and memory of their kill orders; h2 is down and h3 in repair');
SELECT results_eq(format($$SELECT kind, used_cc, running FROM frameq.ledger()
						   WHERE (kind, id) IN (('job', %s), ('job', %s), ('folder', %s), ('limit', %s)) ORDER BY kind, id$$,
						 :ja, :jk, :folder, :lim),
				  $$VALUES ('folder', 600, 6), ('job', 400, 4), ('job', 200, 2), ('limit', 600, 6)$$,
				  'the ledger still charges jobs a and k, their folder and their limit for every proc');

SELECT results_eq(format($$SELECT id, frameq.owns(id, frameq._run_secret(id)) FROM frameq.proc WHERE id IN (%s, %s, %s, %s, %s, %s, %s, %s, %s) ORDER BY id$$,
						 :pa1, :pa2, :pa3, :pa4, :pk1, :pk2, :pd1, :pd2, :pr1),
				  format($$SELECT x, x = %s FROM unnest(ARRAY[%s, %s, %s, %s, %s, %s, %s, %s, %s]::bigint[]) x ORDER BY x$$,
						 :pa4, :pa1, :pa2, :pa3, :pa4, :pk1, :pk2, :pd1, :pd2, :pr1),
				  'owns() is false for every kill order and still true for the one proc left running');
SELECT ok(NOT frameq.owns(NULL, frameq._run_secret(NULL)) AND NOT frameq.owns(1, frameq._run_secret(1)), 'owns() is false for a null or unknown proc');

SELECT results_eq(format($$SELECT state, finished_at IS NOT NULL FROM frameq.job WHERE id = %s$$, :jk),
				  $$VALUES ('killed', true)$$, 'kill_job marks the job killed at once');
SELECT results_eq(format($$SELECT state, total, waiting, running, dead FROM frameq.job_progress WHERE job = %s$$, :jk),
				  $$VALUES ('killed', 3::bigint, 0::bigint, 2::bigint, 1::bigint)$$,
				  'job k: its waiting frame is dead at once, its two running frames still run');
SELECT is((SELECT count(*)::int FROM frameq.run WHERE frame = :fk3), 0, 'the waiting frame killed at once never had a run');
SELECT results_eq($$SELECT state, down_reason FROM frameq.host WHERE name IN ('t20-h2', 't20-h3') ORDER BY name$$,
				  $$VALUES ('down', 'operator'), ('repair', 'operator')$$,
				  'the operator''s down and repair are recorded as such');
SELECT results_eq(format($$SELECT epoch, lease_expires_at > clock_timestamp() FROM frameq.host WHERE id IN (%s, %s) ORDER BY id$$, :host2, :host3),
				  format($$VALUES (%s::bigint, true), (%s::bigint, true)$$, :epoch2, :epoch3),
				  'taking a host down keeps its epoch and its lease, so its agent still hears the kill orders');
SELECT is_empty('SELECT * FROM frameq.check()', 'check() is clean with eight kill orders outstanding');

-- ----------------------------------------- later orders, and no withdrawal

SELECT kill_at AS pa2_kill_at FROM frameq.proc WHERE id = :pa2 \gset
SELECT frameq.kill_frame(:fa2, 'changed my mind') \g /dev/null
SELECT results_eq(format($$SELECT state, kill_reason, want_state, kill_at = %L FROM frameq.proc WHERE id = %s$$, :'pa2_kill_at', :pa2),
				  $$VALUES ('killing', 'changed my mind', 'dead', true)$$,
				  'a later kill_frame replaces the wanted state and reason of a retry, and keeps the first order''s time');
SELECT frameq.eat_frame(:fa2) \g /dev/null
SELECT is((SELECT want_state FROM frameq.proc WHERE id = :pa2), 'eaten', 'a later eat_frame wants it eaten');
SELECT frameq.retry_frame(:fa2) \g /dev/null
SELECT is((SELECT want_state FROM frameq.proc WHERE id = :pa2), 'waiting', 'a later retry_frame wants it waiting again');
SELECT is((SELECT count(*)::int FROM frameq.proc WHERE frame = :fa2), 1, 'the frame still has its one proc');

SELECT frameq.set_host_state('t20-h1', 'down') \g /dev/null
SELECT results_eq(format($$SELECT id, want_state, kill_reason FROM frameq.proc WHERE id IN (%s, %s, %s) ORDER BY id$$, :pa1, :pa3, :pa4),
				  format($$SELECT * FROM (VALUES (%s::bigint, 'dead', 'bad render'), (%s, 'eaten', 'eaten by operator'),
												(%s, 'waiting', 'host set down')) v ORDER BY 1$$, :pa1, :pa3, :pa4),
				  'taking h1 down orders its last running proc killed, and leaves the wanted state of earlier orders alone');
SELECT frameq.set_host_state('t20-h1', 'up') \g /dev/null
SELECT results_eq(format($$SELECT h.state, h.down_reason, (SELECT count(*)::int FROM frameq.proc p WHERE p.host = h.id AND p.state = 'killing')
						   FROM frameq.host h WHERE h.id = %s$$, :host1),
				  $$VALUES ('up', NULL, 6)$$,
				  'bringing h1 back up withdraws none of its six kill orders');

SELECT * FROM fqtest.refuses(format($$UPDATE frameq.proc SET state = 'running', want_state = NULL, kill_at = NULL, kill_reason = NULL WHERE id = %s$$, :pa4),
	'23000', 'a kill order cannot be withdrawn', 'even a superuser cannot turn a kill order back into a running proc (23000)');
SELECT * FROM fqtest.refuses(format($$UPDATE frameq.proc SET want_state = NULL WHERE id = %s$$, :pa4),
	'23514', NULL, 'a kill order must keep its wanted end state (23514)');

SELECT is((SELECT count(*)::int FROM frameq.reserve('t20-h1', :'tok1', :epoch1)), 0,
		  'h1 has two idle cores but books nothing: nothing of the killed job is left waiting');
SELECT is((SELECT usage FROM t20_usage), :'usage_before', 'after all of this, usage is exactly what it was before the first kill order');
SELECT is_empty('SELECT * FROM frameq.check()', 'check() is clean at the end');

SELECT * FROM finish();
ROLLBACK;
