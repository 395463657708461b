/*
 * Every attempt is visible (doc/design.md, invariant 8): one frame is
 * taken through every way a run can end, and each run record keeps its
 * host, its times, its exit status or signal and why it ended.  The frame
 * counts every run in attempts, and in retries only its own failures
 * (complete() with a non-zero exit status or signal): the infrastructure
 * endings (host_lost, host_rebooted, lost_by_agent, an operator's retry or
 * confirm_host_dead) never use up a retry, so they never make a frame dead
 * that would otherwise have run again.
 */
BEGIN;
\ir include/helpers.psql

SELECT plan(25);

SELECT * FROM fqtest.farm('t25', cores => '{4,4}', memory => '{8589934592}') \gset
/* only this test's hosts may expire here: leave every other host's lease alone */
UPDATE frameq.host SET last_renewal_at = clock_timestamp() WHERE name NOT LIKE 't25-%' AND lease_expires_at IS NOT NULL;

SELECT frameq.submit($${"show": "t25show", "name": "t25-one", "max_retries": 5,
	"layers": [{"name": "l", "command": "c", "range": "1"}]}$$) AS job \gset
SELECT id AS f FROM frameq.frame WHERE job = :job \gset
CREATE TEMP TABLE procs (n serial, proc bigint) ON COMMIT DROP;

CREATE TEMP VIEW t25_frame AS
SELECT fr.state, fr.retries, fr.attempts, (SELECT count(*)::int FROM frameq.runs r WHERE r.frame = fr.frame) AS runs
  FROM frameq.frames fr WHERE fr.frame = :f;

-- 1: the frame itself fails
INSERT INTO procs (proc) SELECT proc FROM frameq.reserve('t25-h1', :'tok1', :epoch1, 1);
SELECT is(frameq.complete('t25-h1', :'tok1', :epoch1, (SELECT proc FROM procs WHERE n = 1), 1, 0, 1048576), 'accepted',
		  'attempt 1 exits 1');
SELECT results_eq($$SELECT * FROM t25_frame$$,
				  $$SELECT 'waiting'::text, 1, 1, 1$$, 'a failure of the frame itself uses a retry: 1 retry, 1 attempt');

-- 2: its host loses its lease
INSERT INTO procs (proc) SELECT proc FROM frameq.reserve('t25-h1', :'tok1', :epoch1, 1);
UPDATE frameq.host SET last_renewal_at = clock_timestamp() - frameq.lease_period() - interval '1 second' WHERE id = :host1;
SELECT is(frameq._expire_leases('-infinity'), 1::bigint, 'attempt 2: h1''s lease expires');
SELECT results_eq($$SELECT * FROM t25_frame$$, $$SELECT 'waiting'::text, 1, 2, 2$$,
				  'host_lost does not use a retry: 1 retry, 2 attempts');

-- 3: the next host reboots
INSERT INTO procs (proc) SELECT proc FROM frameq.reserve('t25-h2', :'tok2', :epoch2, 1);
SELECT epoch AS epoch2 FROM frameq.attach('t25-h2', :'tok2', 'boot-2') \gset
SELECT results_eq($$SELECT * FROM t25_frame$$, $$SELECT 'waiting'::text, 1, 3, 3$$,
				  'attempt 3: host_rebooted does not use a retry: 1 retry, 3 attempts');

-- 4: the agent loses the booking
INSERT INTO procs (proc) SELECT proc FROM frameq.reserve('t25-h2', :'tok2', :epoch2, 1);
SELECT frameq.heartbeat('t25-h2', :'tok2', :epoch2, '{}') \g /dev/null
SELECT frameq.heartbeat('t25-h2', :'tok2', :epoch2, '{}') \g /dev/null
SELECT results_eq($$SELECT * FROM t25_frame$$, $$SELECT 'waiting'::text, 1, 4, 4$$,
				  'attempt 4: lost_by_agent does not use a retry: 1 retry, 4 attempts');

-- 5: an operator retries it while it runs
INSERT INTO procs (proc) SELECT proc FROM frameq.reserve('t25-h2', :'tok2', :epoch2, 1);
SELECT frameq.retry_frame(:f) \g /dev/null
SELECT frameq.heartbeat('t25-h2', :'tok2', :epoch2, '{}') \g /dev/null
SELECT results_eq($$SELECT * FROM t25_frame$$, $$SELECT 'waiting'::text, 1, 5, 5$$,
				  'attempt 5: an operator''s retry does not use a retry: 1 retry, 5 attempts');

-- 6: an operator declares its host dead
INSERT INTO procs (proc) SELECT proc FROM frameq.reserve('t25-h2', :'tok2', :epoch2, 1);
SELECT frameq.confirm_host_dead('t25-h2') \g /dev/null
SELECT results_eq($$SELECT * FROM t25_frame$$, $$SELECT 'waiting'::text, 1, 6, 6$$,
				  'attempt 6: confirm_host_dead does not use a retry: 1 retry, 6 attempts');

-- 7: the frame is killed by a signal; 8: it succeeds
SELECT epoch AS epoch1 FROM frameq.attach('t25-h1', :'tok1', 'boot-1') \gset
INSERT INTO procs (proc) SELECT proc FROM frameq.reserve('t25-h1', :'tok1', :epoch1, 1);
SELECT is(frameq.complete('t25-h1', :'tok1', :epoch1, (SELECT proc FROM procs WHERE n = 7), 0, 11), 'accepted',
		  'attempt 7 ends with signal 11');
SELECT results_eq($$SELECT * FROM t25_frame$$, $$SELECT 'waiting'::text, 2, 7, 7$$,
				  'a signal is a failure of the frame itself: 2 retries, 7 attempts');
INSERT INTO procs (proc) SELECT proc FROM frameq.reserve('t25-h1', :'tok1', :epoch1, 1);
SELECT is(frameq.complete('t25-h1', :'tok1', :epoch1, (SELECT proc FROM procs WHERE n = 8), 0, 0, 2097152), 'accepted',
		  'attempt 8 exits 0');
SELECT results_eq($$SELECT * FROM t25_frame$$, $$SELECT 'succeeded'::text, 2, 8, 8$$,
				  'the frame succeeded after 8 attempts, 2 of them its own failures');
SELECT is((SELECT state FROM frameq.job WHERE id = :job), 'finished', 'its job is finished');

-- ------------------------------------------------------------- the record

SELECT is((SELECT count(*)::int FROM procs), 8, 'eight bookings were made');
SELECT results_eq($$SELECT p.n, r.host, r.reason, r.exit_status, r.exit_signal, r.max_rss, r.end_state
					  FROM procs p JOIN frameq.runs r ON r.proc = p.proc ORDER BY p.n$$,
				  $$VALUES (1, 't25-h1', 'completed', 1, 0, 1048576::bigint, 'waiting'),
						   (2, 't25-h1', 'host_lost', NULL, NULL, NULL, 'waiting'),
						   (3, 't25-h2', 'host_rebooted', NULL, NULL, NULL, 'waiting'),
						   (4, 't25-h2', 'lost_by_agent', NULL, NULL, NULL, 'waiting'),
						   (5, 't25-h2', 'killed', NULL, NULL, NULL, 'waiting'),
						   (6, 't25-h2', 'operator', NULL, NULL, NULL, 'waiting'),
						   (7, 't25-h1', 'completed', 0, 11, NULL, 'waiting'),
						   (8, 't25-h1', 'completed', 0, 0, 2097152, 'succeeded')$$,
				  'each run names its host, why it ended, its exit status, signal and rss, and the state it left the frame in');
SELECT is((SELECT kill_reason FROM frameq.runs r JOIN procs p ON p.proc = r.proc WHERE p.n = 5), 'retried by operator',
		  'the run ended by the operator''s retry keeps the kill order''s reason');
SELECT ok((SELECT bool_and(r.started_at < r.ended_at AND r.frame = :f) FROM frameq.runs r JOIN procs p ON p.proc = r.proc),
		  'every run has a start before its end, and names the frame');
SELECT ok((SELECT bool_and(a.ended_at <= b.started_at) FROM frameq.runs a JOIN procs pa ON pa.proc = a.proc
			 JOIN procs pb ON pb.n = pa.n + 1 JOIN frameq.runs b ON b.proc = pb.proc),
		  'each attempt started only after the previous one ended: one run at a time');
SELECT results_eq($$SELECT p.n, r.epoch FROM procs p JOIN frameq.runs r ON r.proc = p.proc ORDER BY p.n$$,
				  $$VALUES (1, 1::bigint), (2, 1), (3, 1), (4, 2), (5, 2), (6, 2), (7, 3), (8, 3)$$,
				  'each run records the lease epoch it was booked under');
SELECT is((SELECT count(DISTINCT proc)::int FROM procs), 8, 'the eight run tokens are all different');

-- ---------------------------- infrastructure never turns a retry into a death

SELECT frameq.submit($${"show": "t25show", "name": "t25-two", "max_retries": 1,
	"layers": [{"name": "l", "command": "c", "range": "1"}]}$$) AS job2 \gset
SELECT frameq.submit($${"show": "t25show", "name": "t25-eat", "max_retries": 0, "auto_eat": true,
	"layers": [{"name": "l", "command": "c", "range": "1"}]}$$) AS job3 \gset
SELECT id AS f2 FROM frameq.frame WHERE job = :job2 \gset
SELECT id AS f3 FROM frameq.frame WHERE job = :job3 \gset

SELECT frameq.complete('t25-h1', :'tok1', :epoch1, proc, 1) FROM frameq.reserve('t25-h1', :'tok1', :epoch1, 1) \g /dev/null
SELECT frameq.reserve('t25-h1', :'tok1', :epoch1, 2) \g /dev/null
SELECT epoch AS epoch1 FROM frameq.attach('t25-h1', :'tok1', 'boot-3') \gset
SELECT results_eq(format($$SELECT job, state, retries, attempts FROM frameq.frame WHERE id IN (%s, %s) ORDER BY job$$, :f2, :f3),
				  format($$VALUES (%s::bigint, 'waiting', 1, 2), (%s::bigint, 'waiting', 0, 1)$$, :job2, :job3),
				  'a frame at its last retry, and one with none, both wait again after their host reboots');
SELECT proc AS pa FROM frameq.reserve('t25-h1', :'tok1', :epoch1, 2) WHERE job = :job2 \gset
SELECT results_eq(format($$SELECT job, state FROM frameq.frame WHERE id IN (%s, %s) ORDER BY job$$, :f2, :f3),
				  format($$VALUES (%s::bigint, 'running'), (%s::bigint, 'running')$$, :job2, :job3),
				  'both are booked again');
SELECT frameq.complete('t25-h1', :'tok1', :epoch1, id, 1) FROM frameq.proc WHERE host = :host1 ORDER BY id \g /dev/null
SELECT results_eq(format($$SELECT job, state, retries, attempts FROM frameq.frame WHERE id IN (%s, %s) ORDER BY job$$, :f2, :f3),
				  format($$VALUES (%s::bigint, 'dead', 2, 3), (%s::bigint, 'eaten', 1, 2)$$, :job2, :job3),
				  'their own next failure ends them: dead after max_retries + 1 failures, or eaten with auto_eat');
SELECT results_eq(format($$SELECT reason, count(*)::int FROM frameq.runs WHERE frame IN (%s, %s) GROUP BY reason ORDER BY reason$$, :f2, :f3),
				  $$VALUES ('completed', 3), ('host_rebooted', 2)$$,
				  'their five runs: three failures reported by the host, two ended by the reboot');
SELECT is_empty('SELECT * FROM frameq.check()', 'check() is clean at the end');

SELECT * FROM finish();
ROLLBACK;
