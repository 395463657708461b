/*
 * Requeue exit codes and retry delays (doc/reference.md, submit's
 * requeue_exit_codes, requeue_delay, max_requeues, retry_delay; "Delayed
 * tasks"): the fields' defaults and checks (every refusal names its field
 * and changes nothing); a run that exits with a requeue code ends
 * completed with its status and sends its task back to waiting without
 * using a retry, delayed; past max_requeues such an exit is an ordinary
 * failure; a retried failure is delayed by retry_delay; a delayed task is
 * waiting to its users but never booked, and is bookable once the
 * worker's step (frameq._delays_ended, run here by hand: the worker cannot
 * see this transaction) has ended its delay; retry_frame ends a delay,
 * kill_frame and eat_frame clear it, depend_job and drop_depends keep
 * it; check() reports no delayed task, but does report one the worker
 * left delayed long past its time.
 *
 * Time does not pass inside a test: a delay is made to have ended by
 * moving its task's not_before into the past (pg_temp.elapse), which is
 * what the worker's step compares with the clock.
 */
BEGIN;
\ir include/helpers.psql

SELECT plan(184);

SELECT * FROM fqtest.farm('t55', cores => '{64}') \gset

/* submit a job of one layer of frames 1-n in show t55show; extra job and layer fields */
/* one host fails these jobs many times: host_failure_limit 0, so it is never blocked for them */
CREATE FUNCTION pg_temp.job(name text, n int, job jsonb DEFAULT '{}', layer jsonb DEFAULT '{}')
RETURNS bigint LANGUAGE sql AS $$
	SELECT frameq.submit(jsonb_build_object('show', 't55show', 'name', name, 'host_failure_limit', 0,
		'layers', jsonb_build_array(jsonb_build_object('name', 'l', 'command', 'c',
			'range', '1-' || n) || layer)) || job)
$$;
/* book everything host 1 can take: "job:number" of each task booked, in order */
CREATE FUNCTION pg_temp.book(tok text, epoch bigint) RETURNS text
LANGUAGE sql AS $$
	SELECT coalesce(string_agg(j.name || ':' || b.frame_number, ',' ORDER BY j.name, b.frame_number), '')
	  FROM frameq.reserve('t55-h1', tok, epoch, 100) b JOIN frameq.job j ON j.id = b.job
$$;
/* the task of a job's frame number */
CREATE FUNCTION pg_temp.task(job bigint, number int) RETURNS bigint
LANGUAGE sql AS $$ SELECT f.id FROM frameq.frame f WHERE f.job = task.job AND f.number = task.number $$;
/* report the task's proc ended with this exit status (and signal) */
CREATE FUNCTION pg_temp.ends(tok text, epoch bigint, task bigint, status int, signal int DEFAULT 0)
RETURNS text LANGUAGE sql AS $$
	SELECT frameq.complete('t55-h1', tok, epoch, p.id, status, signal)
	  FROM frameq.proc p WHERE p.frame = task
$$;
/* state, retries, requeues, and whether delayed, of a task */
CREATE FUNCTION pg_temp.st(task bigint) RETURNS text
LANGUAGE sql AS $$
	SELECT format('%s retries %s requeues %s%s', f.state, f.retries, f.requeues,
				  CASE WHEN f.not_before IS NOT NULL THEN ' delayed' ELSE '' END)
	  FROM frameq.frame f WHERE f.id = task
$$;
/* the task's delay, counted from the end of its last run, in whole seconds */
CREATE FUNCTION pg_temp.delay(task bigint) RETURNS int
LANGUAGE sql AS $$
	SELECT floor(extract(epoch FROM f.not_before - r.ended_at))::int
	  FROM frameq.frame f
	  JOIN LATERAL (SELECT x.ended_at FROM frameq.run x WHERE x.frame = f.id
					 ORDER BY x.started_at DESC LIMIT 1) r ON true
	 WHERE f.id = task
$$;
/* time passes for this task: its delay ended a second ago */
CREATE FUNCTION pg_temp.elapse(task bigint) RETURNS void
LANGUAGE sql AS $$
	UPDATE frameq.frame SET not_before = clock_timestamp() - interval '1 second' WHERE id = task
$$;
/* the layer's dispatch queue rows */
CREATE FUNCTION pg_temp.queued(job bigint) RETURNS int
LANGUAGE sql AS $$ SELECT count(*)::int FROM frameq.dispatch_queue q WHERE q.job = queued.job $$;

-- ------------------------------------------------------------ the fields

SELECT pg_temp.job('plain', 1) AS j_plain \gset
SELECT results_eq(format('SELECT requeue_exit_codes, requeue_delay, max_requeues, retry_delay FROM frameq.job WHERE id = %s', :j_plain),
	$$VALUES (NULL::int[], NULL::int, NULL::int, NULL::int)$$,
	'a job that gives no requeue field stores none (NULL: the defaults)');
SELECT results_eq(format('SELECT requeue_exit_codes, requeue_delay, max_requeues, retry_delay FROM frameq.layer WHERE job = %s', :j_plain),
	$$VALUES (NULL::int[], NULL::int, NULL::int, NULL::int)$$,
	'its layer stores none either (NULL: the job''s value)');
SELECT results_eq(format('SELECT requeues, not_before FROM frameq.frame WHERE job = %s', :j_plain),
	$$VALUES (0, NULL::timestamptz)$$, 'a new task has no requeue and no delay');
SELECT ok(ARRAY['frame', 'job', 'layer', 'frame_number', 'state', 'retries', 'attempts', 'proc', 'host',
				'proc_state', 'frame_spec', 'last_line', 'progress', 'last_output_at', 'requeues', 'not_before']
		  <@ ARRAY(SELECT column_name::text FROM information_schema.columns
					WHERE table_schema = 'frameq' AND table_name = 'frames'),
	'the frames view shows requeues and not_before');
SELECT is((SELECT (array_agg(attname::text ORDER BY attnum))[11:13] FROM pg_attribute
			WHERE attrelid = 'frameq.job_progress'::regclass AND attnum > 0),
	'{frames_total,paused_reason,delayed}'::text[], 'job_progress gains delayed after frames_total and paused_reason');

SELECT frameq.submit($${"show": "t55show", "name": "fields",
	"requeue_exit_codes": [75, 3], "requeue_delay": "2m", "max_requeues": 5, "retry_delay": 10,
	"layers": [{"name": "a", "command": "c", "range": "1"},
			   {"name": "b", "command": "c", "range": "1", "requeue_exit_codes": [],
				"requeue_delay": 0, "max_requeues": 0, "retry_delay": "1h30m"},
			   {"name": "c", "command": "c", "range": "1", "requeue_exit_codes": [255, 1],
				"requeue_delay": "1d", "max_requeues": 1000, "retry_delay": "30d"}]}$$) AS j_fields \gset
SELECT results_eq(format('SELECT requeue_exit_codes, requeue_delay, max_requeues, retry_delay FROM frameq.job WHERE id = %s', :j_fields),
	$$VALUES ('{75,3}'::int[], 120, 5, 10)$$,
	'the job''s fields are stored: codes as given, "2m" as 120 seconds, a number as seconds');
SELECT results_eq(format('SELECT name, requeue_exit_codes, requeue_delay, max_requeues, retry_delay FROM frameq.layer WHERE job = %s ORDER BY name', :j_fields),
	$$VALUES ('a', NULL::int[], NULL::int, NULL::int, NULL::int),
			 ('b', '{}'::int[], 0, 0, 5400),
			 ('c', '{255,1}'::int[], 86400, 1000, 2592000)$$,
	'each layer stores its own values ([] and 0 are values), or none; "1h30m", "1d" and "30d" in seconds');

SELECT is(frameq._duration('"90s"', 'x'), 90, '"90s" is 90 seconds');
SELECT is(frameq._duration('"2h"', 'x'), 7200, '"2h" is 7200 seconds');
SELECT is(frameq._duration('"1d2h3m4s"', 'x'), 93784, '"1d2h3m4s" adds its units');
SELECT is(frameq._duration('45', 'x'), 45, 'a number is seconds');
SELECT is(frameq._duration('null', 'x'), NULL, 'a JSON null is no value');

SELECT pg_temp.job('bad', 1) AS j_bad \gset
SELECT frameq.kill_job(:j_bad, 'only there to count rows') AS _ \gset
-- every refusal, at the job's level and at a layer's, names the field and changes nothing
SELECT fqtest.refuses(format($$SELECT frameq.submit('{"show": "t55show", "name": "x", %s "layers": [{"name": "l", "command": "c", "range": "1" %s}]}')$$,
						   CASE WHEN lvl = 'job' THEN v || ',' ELSE '' END,
						   CASE WHEN lvl = 'layer' THEN ',' || v ELSE '' END),
					  code,
					  CASE WHEN lvl = 'job' THEN 'spec.' ELSE 'spec.layers[0].' END || field || pattern,
					  format('%s %s (%s level) is refused with %s', field, v, lvl, code))
  FROM (VALUES
		('requeue_exit_codes', '"requeue_exit_codes": 75', '22023', ' must be an array%'),
		('requeue_exit_codes', '"requeue_exit_codes": [0]', '22023', ' must be an array of exit statuses from 1 to 255'),
		('requeue_exit_codes', '"requeue_exit_codes": [256]', '22023', ' must be an array of exit statuses from 1 to 255'),
		('requeue_exit_codes', '"requeue_exit_codes": [7.5]', '22023', ' must be an array of exit statuses from 1 to 255'),
		('requeue_exit_codes', '"requeue_exit_codes": ["75"]', '22023', ' must be an array of exit statuses from 1 to 255'),
		('requeue_exit_codes', '"requeue_exit_codes": [75, 3, 75]', '22023', ' lists an exit status more than once'),
		('requeue_exit_codes', '"requeue_exit_codes": [' || (SELECT string_agg(g::text, ',') FROM generate_series(1, 33) g) || ']',
		 '54000', ' is too large: 33 codes, at most 32'),
		('requeue_delay', '"requeue_delay": -1', '22023', ' must be a duration%'),
		('requeue_delay', '"requeue_delay": 1.5', '22023', ' must be a duration%'),
		('requeue_delay', '"requeue_delay": "90x"', '22023', ' must be a duration%'),
		('requeue_delay', '"requeue_delay": ""', '22023', ' must be a duration%'),
		('requeue_delay', '"requeue_delay": "30m1h"', '22023', ' must be a duration%'),
		('requeue_delay', '"requeue_delay": true', '22023', ' must be a duration%'),
		('requeue_delay', '"requeue_delay": "' || repeat('1', 70) || 's"', '54000', ' is too large: 71 characters, at most 64'),
		('requeue_delay', '"requeue_delay": "366d"', '54000', ' is too large: "366d", at most 365 days%'),
		('requeue_delay', '"requeue_delay": 31536001', '54000', ' is too large: 31536001, at most 365 days%'),
		('max_requeues', '"max_requeues": -1', '22023', ' must be a whole number from 0 to 1000, not -1'),
		('max_requeues', '"max_requeues": 2.5', '22023', ' must be a whole number from 0 to 1000, not 2.5'),
		('max_requeues', '"max_requeues": "5"', '22023', ' must be a number'),
		('max_requeues', '"max_requeues": 1001', '54000', ' must be a whole number from 0 to 1000, not 1001'),
		('retry_delay', '"retry_delay": -5', '22023', ' must be a duration%'),
		('retry_delay', '"retry_delay": "5 s"', '22023', ' must be a duration%'),
		('retry_delay', '"retry_delay": "999999999d"', '54000', ' is too large%')) v(field, v, code, pattern)
 CROSS JOIN (VALUES ('job'), ('layer')) l(lvl);

-- ------------------------------------------------------------ requeue

SELECT frameq.set_job(:j_plain, paused => true) AS _ \gset
SELECT frameq.set_job(:j_fields, paused => true) AS _ \gset
SELECT pg_temp.job('rq', 1, '{"requeue_exit_codes": [75], "requeue_delay": 60, "max_requeues": 2, "max_retries": 1}') AS j_rq \gset
SELECT pg_temp.task(:j_rq, 1) AS t_rq \gset
SELECT is(pg_temp.book(:'tok1', :epoch1), 'rq:1', 'the requeue job''s task is booked');
SELECT is(pg_temp.ends(:'tok1', :epoch1, :t_rq, 75), 'accepted', 'its render exits 75, a requeue code');
SELECT is(pg_temp.st(:t_rq), 'waiting retries 0 requeues 1 delayed',
	'the task is waiting again, delayed, with one requeue and no retry used');
SELECT is(pg_temp.delay(:t_rq), 60, 'its delay is the job''s requeue_delay, 60 s from the end of its run');
SELECT results_eq(format('SELECT reason, exit_status, exit_signal, end_state FROM frameq.runs WHERE frame = %s', :t_rq),
	$$VALUES ('completed', 75, 0, 'waiting')$$, 'its run ended completed, with status 75, to waiting');
SELECT results_eq(format('SELECT state, requeues, not_before IS NOT NULL FROM frameq.frames WHERE frame = %s', :t_rq),
	$$VALUES ('waiting', 1, true)$$, 'the frames view shows it waiting, with its requeue and its not_before');
SELECT results_eq(format('SELECT waiting, delayed FROM frameq.job_progress WHERE job = %s', :j_rq),
	$$VALUES (1::bigint, 1::bigint)$$, 'job_progress counts it waiting, and delayed');
SELECT is(pg_temp.book(:'tok1', :epoch1), '', 'a delayed task is not booked');
SELECT is(pg_temp.queued(:j_rq), 0, 'and its layer, with nothing bookable, has left the dispatch queue');
SELECT is_empty('SELECT * FROM frameq.check()', 'check() reports nothing: a delayed task is not passed over');
SELECT pg_temp.elapse(:t_rq) AS _ \gset
SELECT is(pg_temp.book(:'tok1', :epoch1), '', 'once its time has come it is still not booked before the worker''s step');
SELECT is(frameq._delays_ended(), 1::bigint, 'the worker''s step ends one delay');
SELECT is(pg_temp.st(:t_rq), 'waiting retries 0 requeues 1', 'the task is waiting and no longer delayed');
SELECT is(pg_temp.queued(:j_rq), 1, 'its layer is queued again');
SELECT is(frameq._delays_ended(), 0::bigint, 'the next round has nothing to do');
SELECT is_empty('SELECT * FROM frameq.check()', 'check() reports nothing');
SELECT is(pg_temp.book(:'tok1', :epoch1), 'rq:1', 'the task is booked again');
SELECT is(pg_temp.ends(:'tok1', :epoch1, :t_rq, 75), 'accepted', 'it exits 75 again');
SELECT is(pg_temp.st(:t_rq), 'waiting retries 0 requeues 2 delayed', 'a second requeue: max_requeues is 2');
SELECT frameq._end_delay(ARRAY[:t_rq]::bigint[]) AS _ \gset
SELECT is(pg_temp.book(:'tok1', :epoch1), 'rq:1', 'booked a third time');
SELECT is(pg_temp.ends(:'tok1', :epoch1, :t_rq, 75), 'accepted', 'it exits 75 a third time');
SELECT is(pg_temp.st(:t_rq), 'waiting retries 1 requeues 2',
	'past max_requeues, 75 is an ordinary failure: a retry used, no requeue counted, no delay (retry_delay 0)');
SELECT is(pg_temp.book(:'tok1', :epoch1), 'rq:1', 'a retry with no delay is booked at once');
SELECT is(pg_temp.ends(:'tok1', :epoch1, :t_rq, 75), 'accepted', 'it exits 75 a fourth time');
SELECT is(pg_temp.st(:t_rq), 'dead retries 2 requeues 2', 'no retries left: dead, and not delayed');
SELECT results_eq(format('SELECT reason, exit_status, end_state FROM frameq.runs WHERE frame = %s ORDER BY started_at', :t_rq),
	$$VALUES ('completed', 75, 'waiting'), ('completed', 75, 'waiting'), ('completed', 75, 'waiting'),
			 ('completed', 75, 'dead')$$, 'four runs, each completed with status 75');
SELECT is((SELECT state FROM frameq.job WHERE id = :j_rq), 'finished', 'the job is finished');
SELECT lives_ok(format('SELECT frameq.retry_frame(%s)', :t_rq), 'retry_frame of the dead task');
SELECT is(pg_temp.st(:t_rq), 'waiting retries 0 requeues 0', 'a retry from a final state gives back its retries and its requeues');
SELECT frameq.kill_job(:j_rq, 'done with it') AS _ \gset

-- which exits are requeues
SELECT pg_temp.job('which', 6, '{"requeue_exit_codes": [75, 3], "requeue_delay": 0, "retry_delay": 0}') AS j_which \gset
SELECT is(pg_temp.book(:'tok1', :epoch1), 'which:1,which:2,which:3,which:4,which:5,which:6', 'six tasks booked');
SELECT pg_temp.ends(:'tok1', :epoch1, pg_temp.task(:j_which, 1), 3) AS _ \gset
SELECT is(pg_temp.st(pg_temp.task(:j_which, 1)), 'waiting retries 0 requeues 1',
	'exit 3, the second code: a requeue; requeue_delay 0: not delayed');
SELECT pg_temp.ends(:'tok1', :epoch1, pg_temp.task(:j_which, 2), 1) AS _ \gset
SELECT is(pg_temp.st(pg_temp.task(:j_which, 2)), 'waiting retries 1 requeues 0', 'exit 1, not a code: a retry');
SELECT pg_temp.ends(:'tok1', :epoch1, pg_temp.task(:j_which, 3), 75, 9) AS _ \gset
SELECT is(pg_temp.st(pg_temp.task(:j_which, 3)), 'waiting retries 1 requeues 0',
	'status 75 with a signal: the render was killed by a signal, a retry');
SELECT frameq.kill_frame(pg_temp.task(:j_which, 4), 't55 kill') AS _ \gset
SELECT pg_temp.ends(:'tok1', :epoch1, pg_temp.task(:j_which, 4), 75) AS _ \gset
SELECT results_eq(format('SELECT state, requeues, reason FROM frameq.frames f JOIN frameq.runs r USING (frame) WHERE f.frame = %s', pg_temp.task(:j_which, 4)),
	$$VALUES ('dead', 0, 'killed')$$, 'a kill order confirmed by an exit of 75: killed, not requeued');
UPDATE frameq.job SET requeue_exit_codes = '{42}' WHERE id = :j_which;
SELECT pg_temp.ends(:'tok1', :epoch1, pg_temp.task(:j_which, 5), 42) AS _ \gset
SELECT is(pg_temp.st(pg_temp.task(:j_which, 5)), 'waiting retries 0 requeues 1',
	'a layer without codes follows its job''s current ones (42 since the submit)');
SELECT pg_temp.ends(:'tok1', :epoch1, pg_temp.task(:j_which, 6), 75) AS _ \gset
SELECT is(pg_temp.st(pg_temp.task(:j_which, 6)), 'waiting retries 1 requeues 0', 'and no longer 75');
SELECT frameq.kill_job(:j_which, 'done with it') AS _ \gset

SELECT frameq.submit($${"show": "t55show", "name": "layered", "requeue_exit_codes": [75],
	"layers": [{"name": "none", "command": "c", "range": "1", "requeue_exit_codes": []},
			   {"name": "never", "command": "c", "range": "1", "max_requeues": 0},
			   {"name": "dflt", "command": "c", "range": "1"},
			   {"name": "own", "command": "c", "range": "1", "requeue_exit_codes": [9], "requeue_delay": "5m"}]}$$)
	AS j_layered \gset
CREATE TEMP TABLE lt ON COMMIT DROP AS
SELECT l.name, f.id FROM frameq.frame f JOIN frameq.layer l ON l.id = f.layer WHERE f.job = :j_layered;
SELECT is(pg_temp.book(:'tok1', :epoch1), 'layered:1,layered:1,layered:1,layered:1', 'four layers, one task each, booked');
SELECT is(string_agg(pg_temp.ends(:'tok1', :epoch1, id, CASE WHEN name = 'own' THEN 9 ELSE 75 END), ','),
	'accepted,accepted,accepted,accepted', 'three exit 75, the one with its own codes exits 9') FROM lt;
SELECT results_eq('SELECT name, pg_temp.st(id), pg_temp.delay(id) FROM lt ORDER BY name',
	$$VALUES ('dflt', 'waiting retries 0 requeues 1 delayed', 30),
			 ('never', 'waiting retries 1 requeues 0', NULL),
			 ('none', 'waiting retries 1 requeues 0', NULL),
			 ('own', 'waiting retries 0 requeues 1 delayed', 300)$$,
	'[] overrides the job''s codes, max_requeues 0 never requeues, the default delay is 30 s, a layer''s own codes and delay apply');
SELECT frameq.kill_job(:j_layered, 'done with it') AS _ \gset
SELECT is((SELECT count(*)::int FROM frameq.frame WHERE job = :j_layered AND not_before IS NOT NULL), 0,
	'kill_job clears the delays of the tasks it kills');

-- ------------------------------------------------------------ retry_delay

SELECT pg_temp.job('rd', 2, '{"retry_delay": "2m", "max_retries": 1}') AS j_rd \gset
SELECT pg_temp.task(:j_rd, 1) AS t_rd1, pg_temp.task(:j_rd, 2) AS t_rd2 \gset
SELECT is(pg_temp.book(:'tok1', :epoch1), 'rd:1,rd:2', 'both tasks of the retry-delay job booked');
SELECT pg_temp.ends(:'tok1', :epoch1, :t_rd1, 1) AS _ \gset
SELECT pg_temp.ends(:'tok1', :epoch1, :t_rd2, 0, 11) AS _ \gset
SELECT is(pg_temp.st(:t_rd1), 'waiting retries 1 requeues 0 delayed', 'a failure with retries left waits, delayed');
SELECT is(pg_temp.delay(:t_rd1), 120, 'for retry_delay, 120 s');
SELECT is(pg_temp.st(:t_rd2), 'waiting retries 1 requeues 0 delayed', 'a signal is a failure too, delayed the same');
SELECT is(pg_temp.book(:'tok1', :epoch1), '', 'neither is booked before its time');
SELECT is_empty('SELECT * FROM frameq.check()', 'check() reports nothing');
SELECT pg_temp.elapse(:t_rd1) AS _ \gset
SELECT is(frameq._delays_ended(), 1::bigint, 'the worker ends the one delay whose time has come');
SELECT is(pg_temp.book(:'tok1', :epoch1), 'rd:1', 'that task is booked, the other is not');
SELECT is(pg_temp.ends(:'tok1', :epoch1, :t_rd1, 1), 'accepted', 'it fails again');
SELECT is(pg_temp.st(:t_rd1), 'dead retries 2 requeues 0', 'its last failure leaves it dead, with no delay');
SELECT lives_ok(format('SELECT frameq.retry_frame(%s)', :t_rd2), 'retry_frame of the delayed task');
SELECT is(pg_temp.st(:t_rd2), 'waiting retries 1 requeues 0', 'ends its delay at once, and leaves its retries as they were');
SELECT is(pg_temp.book(:'tok1', :epoch1), 'rd:2', 'it is booked at once');
SELECT is(pg_temp.ends(:'tok1', :epoch1, :t_rd2, 0), 'accepted', 'and succeeds');
SELECT is((SELECT state FROM frameq.job WHERE id = :j_rd), 'finished', 'the job is finished');

-- operator actions and dependencies on delayed tasks
SELECT pg_temp.job('ops', 3, '{"retry_delay": 3600}') AS j_ops \gset
SELECT is(pg_temp.book(:'tok1', :epoch1), 'ops:1,ops:2,ops:3', 'three tasks booked');
SELECT is(string_agg(pg_temp.ends(:'tok1', :epoch1, pg_temp.task(:j_ops, n), 1), ','),
	'accepted,accepted,accepted', 'all three exit 1') FROM generate_series(1, 3) n;
SELECT is(string_agg(pg_temp.st(pg_temp.task(:j_ops, n)), ', ' ORDER BY n), 'waiting retries 1 requeues 0 delayed, waiting retries 1 requeues 0 delayed, waiting retries 1 requeues 0 delayed',
	'all three failed and wait an hour') FROM generate_series(1, 3) n;
SELECT frameq.kill_frame(pg_temp.task(:j_ops, 1), 't55') AS _ \gset
SELECT frameq.eat_frame(pg_temp.task(:j_ops, 2)) AS _ \gset
SELECT results_eq(format('SELECT frame_number, state, not_before FROM frameq.frames WHERE job = %s AND frame_number < 3 ORDER BY 1', :j_ops),
	$$VALUES (1, 'dead', NULL::timestamptz), (2, 'eaten', NULL::timestamptz)$$,
	'kill_frame and eat_frame of a delayed task end it, and its delay');
SELECT pg_temp.job('ops-prereq', 1) AS j_pre \gset
SELECT frameq.set_job(:j_pre, paused => true) AS _ \gset
SELECT frameq.depend_job(:j_ops, :j_pre) AS _ \gset
SELECT is(pg_temp.st(pg_temp.task(:j_ops, 3)), 'depend retries 1 requeues 0 delayed',
	'depend_job holds the delayed task, which keeps its delay');
SELECT is_empty('SELECT * FROM frameq.check()', 'check() reports nothing');
SELECT frameq.drop_depends(:j_ops) AS _ \gset
SELECT is(pg_temp.st(pg_temp.task(:j_ops, 3)), 'waiting retries 1 requeues 0 delayed',
	'drop_depends makes it waiting again, still delayed');
SELECT is(pg_temp.book(:'tok1', :epoch1), '', 'and not booked');
SELECT is(pg_temp.queued(:j_ops), 0, 'its layer is not queued for it');
SELECT is(frameq._delays_ended(), 0::bigint, 'the worker leaves it: its time has not come');
SELECT pg_temp.elapse(pg_temp.task(:j_ops, 3)) AS _ \gset
SELECT is(frameq._delays_ended(), 1::bigint, 'and ends its delay once it has');
SELECT is(pg_temp.book(:'tok1', :epoch1), 'ops:3', 'then it is booked');
SELECT pg_temp.ends(:'tok1', :epoch1, pg_temp.task(:j_ops, 3), 0) AS _ \gset

-- ------------------------------------------------------------ what reserve reads

SELECT is((SELECT pg_get_expr(indpred, indrelid) FROM pg_index WHERE indexrelid = 'frameq.frame_waiting'::regclass),
	'((state = ''waiting''::text) AND (not_before IS NULL) AND (memory IS NULL))',
	'the index reserve() takes frames from holds no delayed task (nor one an OOM raised: 0.6.0)');

SELECT pg_temp.job('order', 3, '{"retry_delay": 600}') AS j_order \gset
SELECT is(pg_temp.book(:'tok1', :epoch1), 'order:1,order:2,order:3', 'three tasks booked');
SELECT pg_temp.ends(:'tok1', :epoch1, pg_temp.task(:j_order, 1), 1) AS _ \gset
SELECT pg_temp.ends(:'tok1', :epoch1, pg_temp.task(:j_order, 2), 1) AS _ \gset
SELECT pg_temp.ends(:'tok1', :epoch1, pg_temp.task(:j_order, 3), 1) AS _ \gset
UPDATE frameq.frame SET not_before = clock_timestamp() - interval '3 seconds' WHERE id = pg_temp.task(:j_order, 3);
UPDATE frameq.frame SET not_before = clock_timestamp() - interval '2 seconds' WHERE id = pg_temp.task(:j_order, 1);
SELECT is(frameq._delays_ended(), 2::bigint, 'the worker ends the two delays whose time has come, not the third');
SELECT is(pg_temp.book(:'tok1', :epoch1), 'order:1,order:3', 'both are booked, the task between them not');

-- what a booking and the worker's round read with many delayed tasks: a
-- layer of 2,001 tasks, 2,000 delayed ahead of the one bookable (frame
-- 2001), counted in this transaction's statistics of frameq.frame
SELECT frameq.set_job(:j_order, paused => true) AS _ \gset
SELECT pg_temp.job('many', 2001) AS j_many \gset
UPDATE frameq.frame SET not_before = clock_timestamp() + interval '1 hour'
 WHERE job = :j_many AND number <= 2000;
-- with the indexes and statistics a vacuumed farm has: in the test
-- cluster the partial indexes are bloated by what earlier tests wrote and
-- rolled back (hundreds of pages for a few live entries), which makes the
-- planner take the table's unique (layer, number) index instead, and the
-- plans reserve() keeps for its session were made when the table held a
-- few rows; rebuilding the indexes and ANALYZE plan them again as a farm's
REINDEX INDEX frameq.frame_waiting;
REINDEX INDEX frameq.frame_delayed;
ANALYZE frameq.frame;
CREATE FUNCTION pg_temp.frame_reads() RETURNS bigint
LANGUAGE sql AS $$
	SELECT coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0)
	  FROM pg_stat_xact_user_tables WHERE relid = 'frameq.frame'::regclass
$$;
SELECT pg_temp.frame_reads() AS reads \gset
SELECT is(frameq._delays_ended(), 0::bigint, 'the worker''s step, with 2,000 delayed tasks none of which is due...');
SELECT cmp_ok(pg_temp.frame_reads() - :reads, '<=', 2::bigint, '... reads no frame row');
SELECT pg_temp.frame_reads() AS reads \gset
SELECT is(pg_temp.book(:'tok1', :epoch1), 'many:2001', 'a booking past 2,000 delayed tasks of the layer...');
SELECT cmp_ok(pg_temp.frame_reads() - :reads, '<=', 10::bigint, '... reads none of them');

-- a direct INSERT of a delayed task is refused
SELECT fqtest.refuses(format('INSERT INTO frameq.proc (id, frame, host, epoch, job, layer, show, folder, allocation, cores_cc, memory, gpus, gpu_memory)'
							 ' SELECT 42, f.id, %s, %s, f.job, f.layer, j.show, j.folder, %s, 100, 0, 0, 0'
							 '   FROM frameq.frame f JOIN frameq.job j ON j.id = f.job WHERE f.id = %s',
							 :host1, :epoch1, :alloc, pg_temp.task(:j_order, 2)),
	'55000', 'frame % is delayed until % and cannot be booked yet',
	'a superuser''s direct INSERT of a proc for a delayed task is refused');

-- check() reports a delay the worker has left unended long past its time
UPDATE frameq.frame SET not_before = clock_timestamp() - interval '2 minutes' WHERE id = pg_temp.task(:j_order, 2);
SELECT results_eq('SELECT invariant, detail LIKE ''task % is still delayed, 00:02:0%'' FROM frameq.check()',
	$$VALUES ('no waiting frame is passed over', true)$$,
	'check() reports a task still delayed two minutes after its time');
SELECT is(frameq._delays_ended(), 1::bigint, 'the worker''s step ends it');
SELECT is_empty('SELECT * FROM frameq.check()', 'and check() reports nothing');

SELECT * FROM finish();
ROLLBACK;
