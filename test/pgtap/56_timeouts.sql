/*
 * Issue 15, the paths: a task past its timeout (the worker's step
 * _time_out) and a render silent past its timeout_no_output (heartbeat's
 * report) become real kill orders: the frame stays running and booked
 * until a proof of death releases it; the run then ends 'timeout' or
 * 'stalled', whatever the proof, and the failure uses up a retry (dead,
 * or eaten, once none is left).  An operator's later order replaces
 * frameq's.  _time_out reads only running procs that are due.
 *
 * What a deadline is set to at booking is 55_timeout_fields.sql; what a
 * report may hold, 57_heartbeat_report.sql.
 */
BEGIN;
\ir include/helpers.psql

SELECT plan(52);

SELECT * FROM fqtest.farm('t56', cores => '{8,8}') \gset

/* run reasons: the three new ones are accepted by the run table */
SELECT ok(pg_get_constraintdef(oid) LIKE '%''timeout''%''stalled''%''oom''%',
		  'the run table''s reasons include timeout, stalled and oom')
  FROM pg_constraint WHERE conrelid = 'frameq.run'::regclass AND conname = 'run_reason_check';

-- ------------------------------------------------------- timeout

SELECT frameq.submit($${"show": "t56show", "name": "hang", "max_retries": 1,
	"layers": [{"name": "l", "command": "c", "range": "1", "timeout": 60}]}$$) AS hang \gset
SELECT proc AS p1, frame AS f1 FROM frameq.reserve('t56-h1', :'tok1', :epoch1, 1) \gset
SELECT timeout_at AS due1 FROM frameq.proc WHERE id = :p1 \gset

SELECT is(frameq._time_out(now()), 0::bigint, 'a task before its deadline is left alone');
SELECT is(frameq._time_out(:'due1'::timestamptz - interval '1 millisecond'), 0::bigint,
		  '... up to its deadline');
SELECT is(frameq._time_out(:'due1'), 1::bigint, 'at its deadline it is timed out');
SELECT results_eq(format($$SELECT state, kill_cause, want_state, kill_reason LIKE 'timeout: %%',
								  kill_at IS NOT NULL
							 FROM frameq.proc WHERE id = %s$$, :p1),
				  $$VALUES ('killing', 'timeout', 'waiting', true, true)$$,
				  'it is a kill order: cause timeout, wanting waiting (a retry is left)');
SELECT results_eq(format($$SELECT state, retries FROM frameq.frame WHERE id = %s$$, :f1),
				  $$VALUES ('running', 0)$$, 'the frame is still running and booked');
SELECT is((SELECT idle_cores FROM frameq.hosts WHERE name = 't56-h1'), 7.00,
		  'the host still counts its core');
SELECT is((SELECT reason FROM frameq.run WHERE proc = :p1), NULL, 'the run has not ended');
SELECT is(frameq._time_out(:'due1'::timestamptz + interval '1 hour'), 0::bigint,
		  'a kill order is not timed out again');
SELECT ok(:p1 = ANY (kill), 'the next heartbeat, listing it, is told to kill it')
  FROM frameq.heartbeat('t56-h1', :'tok1', :epoch1, ARRAY[:p1]::bigint[]);
SELECT is((SELECT state FROM frameq.proc WHERE id = :p1), 'killing', '... and does not release it');

/* the render ends, even with exit 0: it was killed for its timeout */
SELECT is(frameq.complete('t56-h1', :'tok1', :epoch1, :p1, 0), 'accepted', 'its completion is accepted');
SELECT results_eq(format($$SELECT reason, end_state, exit_status, kill_reason LIKE 'timeout: %%'
							 FROM frameq.run WHERE proc = %s$$, :p1),
				  $$VALUES ('timeout', 'waiting', 0, true)$$,
				  'the run ends with reason timeout, the frame back to waiting');
SELECT results_eq(format($$SELECT state, retries FROM frameq.frame WHERE id = %s$$, :f1),
				  $$VALUES ('waiting', 1)$$, 'the timeout used up a retry');

/* its second run times out too, with no retry left: dead, on a heartbeat's proof */
SELECT proc AS p2 FROM frameq.reserve('t56-h1', :'tok1', :epoch1, 1) \gset
SELECT is(frameq._time_out((SELECT timeout_at FROM frameq.proc WHERE id = :p2)), 1::bigint,
		  'the second run times out');
SELECT is((SELECT want_state FROM frameq.proc WHERE id = :p2), 'dead', 'with no retry left it wants dead');
SELECT ok(NOT (:p2 = ANY (kill)), 'a heartbeat not listing it confirms its death')
  FROM frameq.heartbeat('t56-h1', :'tok1', :epoch1, ARRAY[]::bigint[]);
SELECT results_eq(format($$SELECT reason, end_state, exit_status FROM frameq.run WHERE proc = %s$$, :p2),
				  $$VALUES ('timeout', 'dead', NULL::int)$$,
				  'the run ends timeout (not killed), the frame dead');
SELECT results_eq(format($$SELECT f.state, f.retries, j.state FROM frameq.frame f
							 JOIN frameq.job j ON j.id = f.job WHERE f.id = %s$$, :f1),
				  $$VALUES ('dead', 2, 'finished')$$, 'the frame is dead and its job finished');

/* auto_eat: eaten; a job's timeout for a layer without one; a proof by confirm_host_dead */
SELECT frameq.submit($${"show": "t56show", "name": "eat", "max_retries": 0, "auto_eat": true,
	"timeout": "30s", "layers": [{"name": "l", "command": "c", "range": "1"}]}$$) AS eat \gset
SELECT proc AS p3, frame AS f3 FROM frameq.reserve('t56-h2', :'tok2', :epoch2, 1) \gset
SELECT is((SELECT timeout_at - booked_at FROM frameq.proc WHERE id = :p3), interval '30 seconds',
		  'a layer without a timeout takes its job''s');
SELECT is(frameq._time_out(now() + interval '31 seconds'), 1::bigint, 'it times out');
SELECT is((SELECT want_state FROM frameq.proc WHERE id = :p3), 'eaten', 'auto_eat: it wants eaten');
SELECT frameq.confirm_host_dead('t56-h2');
SELECT results_eq(format($$SELECT r.reason, r.end_state, f.state, f.retries FROM frameq.run r
							 JOIN frameq.frame f ON f.id = r.frame WHERE r.proc = %s$$, :p3),
				  $$VALUES ('timeout', 'eaten', 'eaten', 1)$$,
				  'confirm_host_dead proves its death: reason timeout, the frame eaten, a retry used');
SELECT frameq.attach('t56-h2', :'tok2', 'boot-2') \g /dev/null
SELECT frameq.set_host_state('t56-h2', 'up');
SELECT epoch AS epoch2 FROM frameq.host WHERE name = 't56-h2' \gset

/* an operator's order replaces a timeout's: no retry, the operator's reason */
SELECT frameq.submit($${"show": "t56show", "name": "op", "timeout": 10,
	"layers": [{"name": "l", "command": "c", "range": "1-2"}]}$$) AS op \gset
SELECT proc AS p4, frame AS f4 FROM frameq.reserve('t56-h1', :'tok1', :epoch1, 1) \gset
SELECT proc AS p5, frame AS f5 FROM frameq.reserve('t56-h1', :'tok1', :epoch1, 1) \gset
SELECT frameq.kill_frame(:f5, 'not wanted');
SELECT is(frameq._time_out(now() + interval '1 minute'), 1::bigint,
		  'of two procs past their deadline, only the running one is timed out');
SELECT results_eq(format($$SELECT id, kill_cause, kill_reason FROM frameq.proc WHERE id IN (%s, %s)
							 ORDER BY id = %s DESC$$, :p4, :p5, :p4),
				  format($$VALUES (%s::bigint, 'timeout', 'timeout: still running %s s after its booking'),
								  (%s, NULL, 'not wanted')$$,
						 :p4, (SELECT round(date_part('epoch', now() + interval '1 minute' - booked_at))
								 FROM frameq.proc WHERE id = :p4), :p5),
				  'the operator''s kill order keeps its reason and no cause');
SELECT frameq.retry_frame(:f4);
SELECT results_eq(format($$SELECT state, kill_cause, kill_reason, want_state FROM frameq.proc WHERE id = %s$$, :p4),
				  $$VALUES ('killing', NULL::text, 'retried by operator', 'waiting')$$,
				  'retry_frame on a timed-out proc replaces the order and its cause');
SELECT is(frameq.complete('t56-h1', :'tok1', :epoch1, :p4, 143, 15), 'accepted', 'the render ends');
SELECT results_eq(format($$SELECT r.reason, f.state, f.retries FROM frameq.run r
							 JOIN frameq.frame f ON f.id = r.frame WHERE r.proc = %s$$, :p4),
				  $$VALUES ('killed', 'waiting', 0)$$,
				  'the release follows the operator''s order: killed, no retry used');
SELECT frameq.complete('t56-h1', :'tok1', :epoch1, :p5, 143, 15) \g /dev/null
SELECT is((SELECT reason FROM frameq.run WHERE proc = :p5), 'killed', 'the operator''s kill is killed');
SELECT frameq.kill_frame(:f4, 'done with it') \g /dev/null
SELECT is_empty('SELECT * FROM frameq.check()', 'check() is clean after the timeouts');

-- ------------------------------------------------------- stalled

SELECT frameq.submit($${"show": "t56show", "name": "quiet", "max_retries": 2,
	"timeout_no_output": "10m",
	"layers": [{"name": "own", "command": "c", "range": "1", "timeout_no_output": 300},
			   {"name": "follows", "command": "c", "range": "1"}]}$$) AS quiet \gset
CREATE TEMP TABLE b ON COMMIT DROP AS SELECT * FROM frameq.reserve('t56-h2', :'tok2', :epoch2, 2);
SELECT b.proc AS s1, b.frame AS sf1 FROM b JOIN frameq.layer l ON l.id = b.layer WHERE l.name = 'own' \gset
SELECT b.proc AS s2, b.frame AS sf2 FROM b JOIN frameq.layer l ON l.id = b.layer WHERE l.name = 'follows' \gset
SELECT is(cardinality(kill), 0, 'a report within the limits orders nothing killed')
  FROM frameq.heartbeat('t56-h2', :'tok2', :epoch2, ARRAY[:s1, :s2]::bigint[],
						jsonb_build_array(
							jsonb_build_object('proc', :s1, 'idle', 300, 'last_line', 'Fra 5 | 40%', 'progress', 40),
							jsonb_build_object('proc', :s2, 'idle', 599.5)));
SELECT results_eq(format($$SELECT proc, proc_state, last_line, progress,
								  round(date_part('epoch', now() - last_output_at) / 10)
							 FROM frameq.frames WHERE job = %s ORDER BY proc = %s DESC$$, :quiet, :s1),
				  format($$VALUES (%s::bigint, 'running', 'Fra 5 | 40%%', 40::real, 30::float8),
								  (%s, 'running', NULL, NULL, 60)$$, :s1, :s2),
				  'the frames view shows the running tasks'' last line, progress and last output');
SELECT is(kill, ARRAY[:s1]::bigint[], 'a report past the layer''s own limit makes a kill order, returned at once')
  FROM frameq.heartbeat('t56-h2', :'tok2', :epoch2, ARRAY[:s1, :s2]::bigint[],
						jsonb_build_array(jsonb_build_object('proc', :s1, 'idle', 301),
										  jsonb_build_object('proc', :s2, 'idle', 600)));
SELECT results_eq(format($$SELECT state, kill_cause, want_state, kill_reason FROM frameq.proc WHERE id = %s$$, :s1),
				  $$VALUES ('killing', 'stalled', 'waiting', 'stalled: no output for 301 s, limit 300 s')$$,
				  'it is ordered killed as stalled, wanting waiting');
SELECT is((SELECT state FROM frameq.proc WHERE id = :s2), 'running',
		  'the layer following its job''s 10 minutes is not stalled at exactly 600 s');
SELECT results_eq(format($$SELECT state, retries FROM frameq.frame WHERE id = %s$$, :sf1),
				  $$VALUES ('running', 0)$$, 'the stalled frame stays running until its death is proven');
SELECT is(kill, ARRAY(SELECT unnest(ARRAY[:s1, :s2]::bigint[]) ORDER BY 1),
		  'past the job''s limit the other is stalled too')
  FROM frameq.heartbeat('t56-h2', :'tok2', :epoch2, ARRAY[:s1, :s2]::bigint[],
						'[{"proc": 0, "idle": 1}]'::jsonb || jsonb_build_array(jsonb_build_object('proc', :s2, 'idle', 600.5)));
SELECT is(frameq.complete('t56-h2', :'tok2', :epoch2, :s1, 0, 9), 'accepted', 'the stalled render is killed');
SELECT ok(NOT (:s2 = ANY (kill)), 'and the other confirmed by a heartbeat')
  FROM frameq.heartbeat('t56-h2', :'tok2', :epoch2, ARRAY[]::bigint[]);
SELECT results_eq(format($$SELECT r.reason, r.end_state, f.state, f.retries FROM frameq.run r
							 JOIN frameq.frame f ON f.id = r.frame WHERE r.proc IN (%s, %s) ORDER BY r.proc = %s DESC$$,
						 :s1, :s2, :s1),
				  $$VALUES ('stalled', 'waiting', 'waiting', 1), ('stalled', 'waiting', 'waiting', 1)$$,
				  'both runs end stalled, their frames back to waiting with a retry used');
SELECT is_empty('SELECT * FROM frameq.check()', 'check() is clean after the stalls');
SELECT frameq.kill_job(:quiet, 'done with it') \g /dev/null

/* a job with no limit is never stalled; a kill order is not stalled again */
SELECT frameq.submit($${"show": "t56show", "name": "nolimit",
	"layers": [{"name": "l", "command": "c", "range": "1-2"}]}$$) AS nolimit \gset
DELETE FROM b;
INSERT INTO b SELECT * FROM frameq.reserve('t56-h2', :'tok2', :epoch2, 2);
SELECT proc AS n1, frame AS nf1 FROM b WHERE job = :nolimit AND frame_number = 1 \gset
SELECT proc AS n2, frame AS nf2 FROM b WHERE job = :nolimit AND frame_number = 2 \gset
SELECT frameq.kill_frame(:nf2, 'by hand');
SELECT is(kill, ARRAY[:n2]::bigint[], 'without a limit a render may be silent for ever')
  FROM frameq.heartbeat('t56-h2', :'tok2', :epoch2, ARRAY[:n1, :n2]::bigint[],
						jsonb_build_array(jsonb_build_object('proc', :n1, 'idle', 1000000000),
										  jsonb_build_object('proc', :n2, 'idle', 1000000000)));
SELECT results_eq(format($$SELECT id, state, kill_cause FROM frameq.proc WHERE id IN (%s, %s) ORDER BY id = %s DESC$$,
						 :n1, :n2, :n1),
				  format($$VALUES (%s::bigint, 'running', NULL::text), (%s, 'killing', NULL)$$, :n1, :n2),
				  'neither is stalled: one has no limit, the other is an operator''s kill order');

-- ------------------------------------------------------- the worker's step reads only what is due

/* 2,000 running procs with a deadline, none due: the step reads the index range only */
SELECT frameq.submit($${"show": "t56show", "name": "many", "timeout": "1d",
	"layers": [{"name": "l", "command": "c", "range": "1-2000", "cores": 0.01}]}$$) AS many \gset
SELECT frameq.register_host('t56-big', 't56.pool', 100, 17179869184) AS tokbig \gset
SELECT epoch AS epochbig FROM frameq.attach('t56-big', :'tokbig', 'boot-1') \gset
SELECT count(*) FROM (SELECT frameq.reserve('t56-big', :'tokbig', :epochbig, 1000)
					  FROM generate_series(1, 2)) r \g /dev/null
SELECT is((SELECT count(*)::int FROM frameq.proc WHERE job = :many AND timeout_at IS NOT NULL), 2000,
		  '2,000 procs run with a deadline');
ANALYZE frameq.proc;
CREATE FUNCTION pg_temp.explain_due() RETURNS SETOF text LANGUAGE plpgsql AS $$
BEGIN
	RETURN QUERY EXPLAIN (COSTS OFF)
		SELECT y.id FROM frameq.proc y
		 WHERE y.state = 'running' AND y.timeout_at <= now() + interval '1 hour'
		 ORDER BY y.timeout_at LIMIT 1000;
END
$$;
SELECT ok(string_agg(x, E'\n') LIKE '%Index Scan using proc_timeout_due%',
		  'the step finds due procs through the partial index proc_timeout_due')
  FROM pg_temp.explain_due() x;
SELECT is(frameq._time_out(now() + interval '1 hour'), 0::bigint, 'none of them is due');
SELECT is(frameq._time_out(now() + interval '2 days'), 1000::bigint,
		  'once all are due, a round orders at most 1,000 killed');
SELECT is(frameq._time_out(now() + interval '2 days'), 1000::bigint, 'the next round the rest');
SELECT is((SELECT count(*)::int FROM frameq.proc WHERE job = :many AND kill_cause = 'timeout'), 2000,
		  'all 2,000 are kill orders');

/* a step of the wall clock moves the deadlines of running procs, not of kill orders */
UPDATE frameq.proc SET timeout_at = now() + interval '1 minute' WHERE id = :n1;
SELECT is(frameq._shift_deadlines(interval '1 hour'), 1::bigint, '_shift_deadlines moves the running deadlines');
SELECT is((SELECT timeout_at FROM frameq.proc WHERE id = :n1), now() + interval '61 minutes',
		  'by the jump');
SELECT is_empty('SELECT * FROM frameq.check()', 'check() is clean at the end');

SELECT * FROM finish();
ROLLBACK;
