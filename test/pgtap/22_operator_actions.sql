/*
 * Operator actions on frames that are not running act at once
 * (doc/design.md, States and transitions, Frame): kill_frame makes a
 * waiting frame dead, retry_frame puts a dead, eaten or succeeded frame
 * back in the queue (and reactivates a finished job), eat_frame eats a
 * waiting or dead frame, kill_job kills the job's waiting frames and marks
 * it killed so nothing of it is booked.  A frame already in the state an
 * action leads to is left alone.  Every refusal has its SQLSTATE and
 * leaves everything as it was; a refusal on a running frame does not leave
 * a kill order behind either.
 */
BEGIN;
\ir include/helpers.psql

SELECT plan(92);

SELECT * FROM fqtest.farm('t22', cores => '{2}', memory => '{8589934592}') \gset

/* job ops: frames 1 and 2 succeed, frame 3 runs, 4 to 7 wait */
SELECT frameq.submit($${"show": "t22show", "name": "t22-ops",
	"layers": [{"name": "l", "command": "c", "range": "1-7"}]}$$) AS job \gset
SELECT id AS f1 FROM frameq.frame WHERE job = :job AND number = 1 \gset
SELECT id AS f2 FROM frameq.frame WHERE job = :job AND number = 2 \gset
SELECT id AS fr FROM frameq.frame WHERE job = :job AND number = 3 \gset
SELECT id AS f4 FROM frameq.frame WHERE job = :job AND number = 4 \gset
SELECT id AS f5 FROM frameq.frame WHERE job = :job AND number = 5 \gset
SELECT id AS f6 FROM frameq.frame WHERE job = :job AND number = 6 \gset
SELECT frameq.complete('t22-h1', :'tok1', :epoch1, proc, 0) FROM frameq.reserve('t22-h1', :'tok1', :epoch1, 2) \g /dev/null
SELECT proc AS pr FROM frameq.reserve('t22-h1', :'tok1', :epoch1, 1) \gset

SELECT results_eq(format($$SELECT number, state FROM frameq.frame WHERE job = %s ORDER BY number$$, :job),
				  $$VALUES (1, 'succeeded'), (2, 'succeeded'), (3, 'running'), (4, 'waiting'), (5, 'waiting'), (6, 'waiting'), (7, 'waiting')$$,
				  'the fixture: frames 1 and 2 succeeded, frame 3 runs, 4 to 7 wait');
SELECT is((SELECT count(*)::int FROM frameq.run WHERE job = :job), 3, 'three runs so far');

-- ------------------------------------------------------------------ kill_frame

SELECT lives_ok(format($$SELECT frameq.kill_frame(%s, 'not needed')$$, :f4), 'kill_frame on a waiting frame succeeds');
SELECT results_eq(format($$SELECT state, retries, attempts FROM frameq.frame WHERE id = %s$$, :f4),
				  $$VALUES ('dead', 0, 0)$$, 'the waiting frame is dead at once, with no attempt or retry counted');
SELECT is((SELECT count(*)::int FROM frameq.run WHERE frame = :f4), 0, 'killing a waiting frame leaves no run record');
SELECT fqtest.state() AS before \gset
SELECT lives_ok(format($$SELECT frameq.kill_frame(%s, 'again')$$, :f4), 'kill_frame on a dead frame is not an error');
SELECT is(fqtest.state(), :'before', 'and changes nothing');
SELECT * FROM fqtest.refuses(format($$SELECT frameq.kill_frame(%s, 'too late')$$, :f1), '55000',
	'frame % is succeeded: there is nothing to kill', 'kill_frame on a succeeded frame raises 55000');

-- ------------------------------------------------------------------ eat_frame

SELECT lives_ok(format($$SELECT frameq.eat_frame(%s)$$, :f5), 'eat_frame on a waiting frame succeeds');
SELECT is((SELECT state FROM frameq.frame WHERE id = :f5), 'eaten', 'the waiting frame is eaten at once');
SELECT lives_ok(format($$SELECT frameq.eat_frame(%s)$$, :f4), 'eat_frame on a dead frame succeeds');
SELECT is((SELECT state FROM frameq.frame WHERE id = :f4), 'eaten', 'the dead frame is eaten at once');
SELECT fqtest.state() AS before \gset
SELECT lives_ok(format($$SELECT frameq.eat_frame(%s)$$, :f5), 'eat_frame on an eaten frame is not an error');
SELECT is(fqtest.state(), :'before', 'and changes nothing');
SELECT * FROM fqtest.refuses(format($$SELECT frameq.eat_frame(%s)$$, :f2), '55000',
	'frame % succeeded: there is nothing to eat', 'eat_frame on a succeeded frame raises 55000');
SELECT * FROM fqtest.refuses(format($$SELECT frameq.kill_frame(%s, 'x')$$, :f5), '55000',
	'frame % is eaten: there is nothing to kill', 'kill_frame on an eaten frame raises 55000');

-- ------------------------------------------------------------------ retry_frame

SELECT lives_ok(format($$SELECT frameq.retry_frame(%s)$$, :f4), 'retry_frame on an eaten frame succeeds');
SELECT results_eq(format($$SELECT state, retries, attempts FROM frameq.frame WHERE id = %s$$, :f4),
				  $$VALUES ('waiting', 0, 0)$$, 'the eaten frame waits again at once, with no attempt or retry counted');
SELECT frameq.kill_frame(:f6, 'x') \g /dev/null
SELECT lives_ok(format($$SELECT frameq.retry_frame(%s)$$, :f6), 'retry_frame on a dead frame succeeds');
SELECT is((SELECT state FROM frameq.frame WHERE id = :f6), 'waiting', 'the dead frame waits again');
SELECT lives_ok(format($$SELECT frameq.retry_frame(%s)$$, :f1), 'retry_frame on a succeeded frame succeeds');
SELECT results_eq(format($$SELECT state, retries, attempts FROM frameq.frame WHERE id = %s$$, :f1),
				  $$VALUES ('waiting', 0, 1)$$, 'the succeeded frame waits again, its one attempt still counted');
SELECT is((SELECT count(*)::int FROM frameq.run WHERE frame = :f1), 1, 'its run record is kept');
SELECT fqtest.state() AS before \gset
SELECT lives_ok(format($$SELECT frameq.retry_frame(%s)$$, :f6), 'retry_frame on a waiting frame is not an error');
SELECT is(fqtest.state(), :'before', 'and changes nothing');
SELECT is((SELECT string_agg(frame_number::text, ',' ORDER BY frame_number) FROM frameq.reserve('t22-h1', :'tok1', :epoch1)),
		  '1', 'the retried frames are bookable again: the host''s one free core gets the lowest, frame 1');

-- -------------------------------------------- a job finishes, and retry reopens it

SELECT frameq.submit($${"show": "t22show", "name": "t22-fin",
	"layers": [{"name": "l", "command": "c", "range": "1-2"}]}$$) AS jfin \gset
SELECT id AS g1 FROM frameq.frame WHERE job = :jfin AND number = 1 \gset
SELECT id AS g2 FROM frameq.frame WHERE job = :jfin AND number = 2 \gset
SELECT frameq.eat_frame(:g1) \g /dev/null
SELECT is((SELECT state FROM frameq.job WHERE id = :jfin), 'active', 'a job with one frame eaten and one waiting is active');
SELECT frameq.kill_frame(:g2, 'x') \g /dev/null
SELECT results_eq(format($$SELECT state, finished_at IS NOT NULL FROM frameq.job WHERE id = %s$$, :jfin),
				  $$VALUES ('finished', true)$$, 'killing its last waiting frame finishes the job');
SELECT frameq.retry_frame(:g2) \g /dev/null
SELECT results_eq(format($$SELECT state, finished_at IS NULL FROM frameq.job WHERE id = %s$$, :jfin),
				  $$VALUES ('active', true)$$, 'retrying a frame of the finished job makes it active again');
SELECT frameq.eat_frame(:g2) \g /dev/null
SELECT is((SELECT state FROM frameq.job WHERE id = :jfin), 'finished', 'eating that frame finishes the job again');
SELECT * FROM fqtest.refuses(format($$SELECT frameq.kill_job(%s, 'x')$$, :jfin), '55000',
	'job % is finished: there is nothing to kill', 'kill_job on a finished job raises 55000');

-- ------------------------------------------------------------------ kill_job

SELECT frameq.submit($${"show": "t22show", "name": "t22-kj", "priority": 10,
	"layers": [{"name": "l", "command": "c", "range": "1-3"}]}$$) AS jk \gset
SELECT id AS k1 FROM frameq.frame WHERE job = :jk AND number = 1 \gset
SELECT frameq.eat_frame(:k1) \g /dev/null
SELECT lives_ok(format($$SELECT frameq.kill_job(%s, 'client cancelled')$$, :jk), 'kill_job on a job with waiting frames succeeds');
SELECT results_eq(format($$SELECT state, total, waiting, running, dead, eaten FROM frameq.job_progress WHERE job = %s$$, :jk),
				  $$VALUES ('killed', 3::bigint, 0::bigint, 0::bigint, 2::bigint, 1::bigint)$$,
				  'the job is killed: its two waiting frames are dead, the eaten one stays eaten');
SELECT * FROM fqtest.refuses(format($$SELECT frameq.retry_frame(%s)$$, :k1), '55000',
	'frame % belongs to a killed job', 'retry_frame on a frame of a killed job raises 55000');
SELECT * FROM fqtest.refuses(format($$SELECT frameq.set_job(%s, paused => false)$$, :jk), '55000',
	NULL, 'a killed job cannot be resumed (55000)');
SELECT fqtest.state() AS before \gset
SELECT lives_ok(format($$SELECT frameq.kill_job(%s, 'again')$$, :jk), 'kill_job on a killed job is not an error');
SELECT is(fqtest.state(), :'before', 'and changes nothing');
SELECT frameq.complete('t22-h1', :'tok1', :epoch1, id, 0) FROM frameq.proc WHERE host = :host1 AND frame = :f1 \g /dev/null
SELECT is((SELECT count(*)::int FROM frameq.reserve('t22-h1', :'tok1', :epoch1) r WHERE r.job = :jk), 0,
		  'the killed job, despite its higher priority, gets nothing booked');

-- ---------------------------------------------- refusals, on idle and running frames

SELECT * FROM fqtest.refuses($$SELECT frameq.kill_frame(NULL, 'x')$$, '22004', 'frame must not be null', 'kill_frame(NULL) raises 22004');
SELECT * FROM fqtest.refuses($$SELECT frameq.kill_frame(999999999999, 'x')$$, '42704', 'frame 999999999999 does not exist',
	'kill_frame of an unknown frame raises 42704');
SELECT * FROM fqtest.refuses(format($$SELECT frameq.kill_frame(%s, NULL)$$, :fr), '22004', 'reason must not be null',
	'kill_frame of a running frame with a null reason raises 22004 and orders nothing killed');
SELECT * FROM fqtest.refuses(format($$SELECT frameq.kill_frame(%s, '')$$, :fr), '22023', NULL,
	'kill_frame with an empty reason raises 22023');
SELECT * FROM fqtest.refuses(format($$SELECT frameq.kill_frame(%s, repeat('x', 501))$$, :fr), '54000', NULL,
	'kill_frame with a reason of 501 characters raises 54000');
SELECT * FROM fqtest.refuses($$SELECT frameq.retry_frame(NULL)$$, '22004', NULL, 'retry_frame(NULL) raises 22004');
SELECT * FROM fqtest.refuses($$SELECT frameq.retry_frame(999999999999)$$, '42704', NULL, 'retry_frame of an unknown frame raises 42704');
SELECT * FROM fqtest.refuses($$SELECT frameq.eat_frame(NULL)$$, '22004', NULL, 'eat_frame(NULL) raises 22004');
SELECT * FROM fqtest.refuses($$SELECT frameq.eat_frame(999999999999)$$, '42704', NULL, 'eat_frame of an unknown frame raises 42704');
SELECT * FROM fqtest.refuses($$SELECT frameq.kill_job(NULL, 'x')$$, '22004', 'job must not be null', 'kill_job(NULL) raises 22004');
SELECT * FROM fqtest.refuses($$SELECT frameq.kill_job(999999999999, 'x')$$, '42704', 'job 999999999999 does not exist',
	'kill_job of an unknown job raises 42704');
SELECT * FROM fqtest.refuses(format($$SELECT frameq.kill_job(%s, NULL)$$, :job), '22004', NULL,
	'kill_job of a job with a running frame and a null reason raises 22004 and kills nothing');
SELECT * FROM fqtest.refuses(format($$SELECT frameq.kill_job(%s, '')$$, :job), '22023', NULL, 'kill_job with an empty reason raises 22023');
SELECT * FROM fqtest.refuses($$SELECT frameq.set_host_state(NULL, 'down')$$, '22004', NULL, 'set_host_state of a null host raises 22004');
SELECT * FROM fqtest.refuses($$SELECT frameq.set_host_state('t22-nope', 'down')$$, '42704', 'host "t22-nope" is not registered',
	'set_host_state of an unknown host raises 42704');
SELECT * FROM fqtest.refuses($$SELECT frameq.set_host_state('t22-h1', 'off')$$, '22023', 'state must be up, down, repair or drain, not off',
	'set_host_state to an unknown state raises 22023 and orders nothing killed');
SELECT * FROM fqtest.refuses($$SELECT frameq.set_host_state('t22-h1', NULL)$$, '22004', NULL, 'set_host_state to a null state raises 22004');
SELECT * FROM fqtest.refuses($$SELECT frameq.confirm_host_dead(NULL)$$, '22004', NULL, 'confirm_host_dead(NULL) raises 22004');
SELECT * FROM fqtest.refuses($$SELECT frameq.confirm_host_dead('t22-nope')$$, '42704', 'host "t22-nope" is not registered',
	'confirm_host_dead of an unknown host raises 42704');
SELECT results_eq(format($$SELECT state, frameq.owns(id, frameq._run_secret(id)) FROM frameq.proc WHERE id = %s$$, :pr), $$VALUES ('running', true)$$,
				  'after all the refusals the running frame''s proc is still a plain running proc');

-- ------------------------------------------------------------- host states

SELECT frameq.complete('t22-h1', :'tok1', :epoch1, id, 0) FROM frameq.proc WHERE host = :host1 AND id <> :pr \g /dev/null
SELECT frameq.set_host_state('t22-h1', 'repair') \g /dev/null
SELECT results_eq($$SELECT state, down_reason FROM frameq.host WHERE name = 't22-h1'$$, $$VALUES ('repair', 'operator')$$,
				  'set_host_state repair puts the host in repair');
SELECT is((SELECT count(*)::int FROM frameq.reserve('t22-h1', :'tok1', :epoch1)), 0, 'a host in repair books nothing');
SELECT frameq.set_host_state('t22-h1', 'down') \g /dev/null
SELECT is((SELECT count(*)::int FROM frameq.reserve('t22-h1', :'tok1', :epoch1)), 0, 'a host that is down books nothing');
SELECT frameq.set_host_state('t22-h1', 'up') \g /dev/null
SELECT results_eq($$SELECT state, down_reason FROM frameq.host WHERE name = 't22-h1'$$, $$VALUES ('up', NULL)$$,
				  'set_host_state up brings the host back up');
SELECT is((SELECT state FROM frameq.proc WHERE id = :pr), 'killing', 'but the kill order given when it went into repair stays');
SELECT is((SELECT count(*)::int FROM frameq.reserve('t22-h1', :'tok1', :epoch1)), 1,
		  'once up again it books into its one free core (the other is still held by the kill order)');

SELECT ok(NOT has_function_privilege('frameq_agent', 'frameq.kill_frame(bigint,text)', 'EXECUTE')
		  AND NOT has_function_privilege('frameq_agent', 'frameq.retry_frame(bigint)', 'EXECUTE')
		  AND NOT has_function_privilege('frameq_agent', 'frameq.eat_frame(bigint)', 'EXECUTE')
		  AND NOT has_function_privilege('frameq_agent', 'frameq.kill_job(bigint,text)', 'EXECUTE')
		  AND NOT has_function_privilege('frameq_agent', 'frameq.set_host_state(text,text)', 'EXECUTE')
		  AND NOT has_function_privilege('frameq_agent', 'frameq.confirm_host_dead(text)', 'EXECUTE'),
		  'host agents may not call any operator action');
SELECT ok(has_function_privilege('frameq_admin', 'frameq.kill_frame(bigint,text)', 'EXECUTE')
		  AND has_function_privilege('frameq_admin', 'frameq.confirm_host_dead(text)', 'EXECUTE'),
		  'frameq_admin may');
SELECT is_empty('SELECT * FROM frameq.check()', 'check() is clean at the end');

SELECT * FROM finish();
ROLLBACK;
