/*
 * Bulk actions (doc/reference.md, Bulk actions): retry_frames, eat_frames
 * and kill_frames act on every task of a job, or of one of its layers, in
 * the states asked for, each task exactly as the single-frame action does
 * (the same end state, counters, version, kill order), and return how many
 * tasks they acted on.  Every refusal has its SQLSTATE, names the argument
 * and changes nothing, validation coming before any action.
 */
BEGIN;
\ir include/helpers.psql

SELECT plan(91);

SELECT * FROM fqtest.farm('t65', cores => '{2}', memory => '{8589934592}') \gset

/* job j: layer a 1-6, layer b 1-4; a1 a2 run, a3 a4 b1 b2 b3 are dead, a5 a6 b4 wait */
SELECT frameq.submit($${"show": "t65show", "name": "t65-j", "layers": [
	{"name": "a", "command": "c", "range": "1-6"},
	{"name": "b", "command": "c", "range": "1-4"}]}$$) AS job \gset
SELECT id AS la FROM frameq.layer WHERE job = :job AND name = 'a' \gset
SELECT id AS lb FROM frameq.layer WHERE job = :job AND name = 'b' \gset
SELECT count(*) FROM frameq.reserve('t65-h1', :'tok1', :epoch1, 2) \g /dev/null
SELECT frameq.kill_frame(id, 'fixture') FROM frameq.frame
 WHERE (layer = :la AND number IN (3, 4)) OR (layer = :lb AND number IN (1, 2, 3)) \g /dev/null

CREATE TEMP VIEW t65 AS
SELECT l.name || f.number AS task, f.state, f.retries, p.state AS proc_state, p.want_state, p.kill_reason
  FROM frameq.frame f JOIN frameq.layer l ON l.id = f.layer LEFT JOIN frameq.proc p ON p.frame = f.id
 WHERE f.job = :job;
GRANT SELECT ON t65 TO PUBLIC;

SELECT results_eq($$SELECT task, state FROM t65 ORDER BY task$$,
	$$VALUES ('a1', 'running'), ('a2', 'running'), ('a3', 'dead'), ('a4', 'dead'), ('a5', 'waiting'),
			 ('a6', 'waiting'), ('b1', 'dead'), ('b2', 'dead'), ('b3', 'dead'), ('b4', 'waiting')$$,
	'the fixture: a1 a2 run, a3 a4 b1 b2 b3 are dead, a5 a6 b4 wait');

-- ------------------------------------------------------------------ refusals

SELECT * FROM fqtest.refuses($$SELECT frameq.retry_frames(NULL)$$, '22004', 'job must not be null',
	'retry_frames(NULL) raises 22004');
SELECT * FROM fqtest.refuses($$SELECT frameq.retry_frames(-1)$$, '42704', 'job -1 does not exist',
	'retry_frames of an unknown job raises 42704');
SELECT * FROM fqtest.refuses(format($$SELECT frameq.retry_frames(%s, 'nope')$$, :job), '42704',
	'job % has no layer "nope"', 'retry_frames of an unknown layer raises 42704 naming it');
SELECT * FROM fqtest.refuses(format($$SELECT frameq.retry_frames(%s, repeat('x', 101))$$, :job), '54000',
	'layer is too large: 101 characters, at most 100', 'a layer name past 100 characters raises 54000');
SELECT * FROM fqtest.refuses(format($$SELECT frameq.retry_frames(%s, NULL, NULL)$$, :job), '22004',
	'states must not be null', 'retry_frames with null states raises 22004');
SELECT * FROM fqtest.refuses(format($$SELECT frameq.retry_frames(%s, NULL, '{}')$$, :job), '22023',
	'states must not be empty', 'retry_frames with no states raises 22023');
SELECT * FROM fqtest.refuses(format($$SELECT frameq.retry_frames(%s, NULL, '{dead,bogus}')$$, :job), '22023',
	'states: retry_frames does not act on "bogus" tasks', 'an unknown state raises 22023 naming states, even after a good one');
SELECT * FROM fqtest.refuses(format($$SELECT frameq.retry_frames(%s, NULL, '{dead,NULL}')$$, :job), '22004',
	'states must not contain null', 'a null state raises 22004');
SELECT * FROM fqtest.refuses(format($$SELECT frameq.retry_frames(%s, NULL, array_fill('dead'::text, ARRAY[11]))$$, :job),
	'54000', 'states is too large: 11 elements, at most 10', 'more than 10 states raises 54000');
SELECT * FROM fqtest.refuses(format($$SELECT frameq.eat_frames(%s, NULL, '{dead,succeeded}')$$, :job), '22023',
	'states: eat_frames does not act on "succeeded" tasks', 'eat_frames refuses succeeded tasks, as eat_frame does');
SELECT * FROM fqtest.refuses(format($$SELECT frameq.eat_frames(%s, 'nope')$$, :job), '42704',
	'job % has no layer "nope"', 'eat_frames of an unknown layer raises 42704');
SELECT * FROM fqtest.refuses($$SELECT frameq.kill_frames(-1)$$, '42704', 'job -1 does not exist',
	'kill_frames of an unknown job raises 42704');
SELECT * FROM fqtest.refuses(format($$SELECT frameq.kill_frames(%s, NULL, '')$$, :job), '22023',
	'reason must not be empty', 'kill_frames with an empty reason raises 22023');
SELECT * FROM fqtest.refuses(format($$SELECT frameq.kill_frames(%s, NULL, repeat('r', 501))$$, :job), '54000',
	'reason is too large%', 'kill_frames with a reason past 500 characters raises 54000');

-- ------------------------------------------------------------------ retry_frames

SELECT is(frameq.retry_frames(:job, 'b'), 3, 'retry_frames of layer b acts on its 3 dead tasks');
SELECT results_eq($$SELECT task, state FROM t65 WHERE state = 'dead' ORDER BY task$$,
	$$VALUES ('a3', 'dead'), ('a4', 'dead')$$, 'layer a''s dead tasks are left alone');
SELECT is(frameq.retry_frames(:job), 2, 'retry_frames of the job acts on the 2 left');
SELECT is((SELECT count(*)::int FROM t65 WHERE state = 'waiting'), 8, 'all 8 tasks that are not running wait');
SELECT is(check_count, 0, 'check() finds nothing wrong')
  FROM (SELECT count(*)::int AS check_count FROM frameq.check()) c;
SELECT fqtest.state() AS before \gset
SELECT is(frameq.retry_frames(:job), 0, 'retry_frames with no dead task acts on none');
SELECT is(fqtest.state(), :'before', 'and changes nothing');

SELECT is(frameq.retry_frames(:job, 'a', '{running}'), 2, 'retry_frames of running tasks acts on both');
SELECT results_eq($$SELECT task, state, proc_state, want_state, kill_reason FROM t65 WHERE proc_state IS NOT NULL ORDER BY task$$,
	$$VALUES ('a1', 'running', 'killing', 'waiting', 'retried by operator'),
			 ('a2', 'running', 'killing', 'waiting', 'retried by operator')$$,
	'each is a kill order wanting waiting, as retry_frame gives');
SELECT frameq.heartbeat('t65-h1', :'tok1', :epoch1, '{}') \g /dev/null
SELECT results_eq($$SELECT task, state, retries FROM t65 WHERE task IN ('a1', 'a2') ORDER BY task$$,
	$$VALUES ('a1', 'waiting', 0), ('a2', 'waiting', 0)$$, 'once the kills are confirmed they wait again');

/* a delayed task: retry_frames with waiting ends its delay, as retry_frame does */
UPDATE frameq.frame SET not_before = clock_timestamp() + interval '1 hour'
 WHERE layer = :lb AND number IN (1, 2);
SELECT is(frameq.retry_frames(:job, NULL, '{waiting}'), 2, 'retry_frames of waiting tasks acts on the 2 delayed ones only');
SELECT is((SELECT count(*)::int FROM frameq.frame WHERE job = :job AND not_before IS NOT NULL), 0,
	'their delay has ended');

-- ------------------------------------------------------------------ kill_frames

SELECT count(*) FROM frameq.reserve('t65-h1', :'tok1', :epoch1, 2) \g /dev/null
SELECT is(frameq.kill_frames(:job, 'b', 'wrong camera'), 4, 'kill_frames of layer b acts on its 4 waiting tasks');
SELECT is((SELECT count(*)::int FROM t65 WHERE task LIKE 'b%' AND state = 'dead'), 4, 'they are dead at once');
SELECT is((SELECT count(*)::int FROM frameq.run r JOIN frameq.frame f ON f.id = r.frame WHERE f.layer = :lb), 0,
	'with no run record, as kill_frame leaves none');
SELECT is(frameq.kill_frames(:job, 'a'), 6, 'kill_frames of layer a acts on its 4 waiting and 2 running tasks');
SELECT results_eq($$SELECT task, state, proc_state, want_state, kill_reason FROM t65 WHERE task LIKE 'a%' ORDER BY task$$,
	$$VALUES ('a1', 'running', 'killing', 'dead', 'killed by operator'),
			 ('a2', 'running', 'killing', 'dead', 'killed by operator'),
			 ('a3', 'dead', NULL, NULL, NULL), ('a4', 'dead', NULL, NULL, NULL),
			 ('a5', 'dead', NULL, NULL, NULL), ('a6', 'dead', NULL, NULL, NULL)$$,
	'waiting ones are dead, running ones are kill orders wanting dead, with the default reason');
SELECT is((SELECT state FROM frameq.job WHERE id = :job), 'active', 'the job stays active while its kills are pending');
SELECT frameq.heartbeat('t65-h1', :'tok1', :epoch1, '{}') \g /dev/null
SELECT is((SELECT count(*)::int FROM t65 WHERE state = 'dead'), 10, 'once confirmed, all 10 tasks are dead');
SELECT is((SELECT state FROM frameq.job WHERE id = :job), 'finished', 'and the job is finished');

-- ------------------------------------------------------------------ eat_frames

SELECT is(frameq.eat_frames(:job, 'b'), 4, 'eat_frames of layer b eats its 4 dead tasks');
SELECT is((SELECT string_agg(task || ':' || state, ',' ORDER BY task) FROM t65 WHERE task LIKE 'b%'),
	'b1:eaten,b2:eaten,b3:eaten,b4:eaten', 'they are eaten');
SELECT is(frameq.retry_frames(:job, NULL, '{eaten}'), 4, 'retry_frames of eaten tasks acts on the 4');
SELECT is((SELECT state FROM frameq.job WHERE id = :job), 'active', 'and reopens the finished job');
SELECT is(frameq.retry_frames(:job, 'a', '{dead,eaten,succeeded}'), 6, 'retry_frames of several states acts on each');
SELECT count(*) FROM frameq.reserve('t65-h1', :'tok1', :epoch1, 2) \g /dev/null
SELECT frameq.complete('t65-h1', :'tok1', :epoch1, p.id, 0) FROM frameq.proc p WHERE p.job = :job \g /dev/null
SELECT count(*) FROM frameq.reserve('t65-h1', :'tok1', :epoch1, 1) \g /dev/null
SELECT results_eq($$SELECT state, count(*)::int FROM t65 GROUP BY state ORDER BY state$$,
	$$VALUES ('running', 1), ('succeeded', 2), ('waiting', 7)$$, 'two succeeded, one runs, seven wait');
SELECT is(frameq.eat_frames(:job, NULL, '{waiting,running}'), 8, 'eat_frames of waiting and running tasks acts on the 8');
SELECT results_eq($$SELECT state, proc_state, want_state, kill_reason FROM t65 WHERE proc_state IS NOT NULL$$,
	$$VALUES ('running', 'killing', 'eaten', 'eaten by operator')$$, 'the running one is a kill order wanting eaten');
SELECT frameq.heartbeat('t65-h1', :'tok1', :epoch1, '{}') \g /dev/null
SELECT results_eq($$SELECT state, count(*)::int FROM t65 GROUP BY state ORDER BY state$$,
	$$VALUES ('eaten', 8), ('succeeded', 2)$$, 'once confirmed, eight are eaten and two succeeded');
SELECT is((SELECT state FROM frameq.job WHERE id = :job), 'finished', 'and the job is finished again');
SELECT is(frameq.retry_frames(:job, NULL, '{succeeded}'), 2, 'retry_frames of succeeded tasks acts on the 2');
SELECT results_eq($$SELECT state, count(*)::int FROM t65 GROUP BY state ORDER BY state$$,
	$$VALUES ('eaten', 8), ('waiting', 2)$$, 'they wait again');
SELECT is((SELECT state FROM frameq.job WHERE id = :job), 'active', 'and the job is active');
SELECT is(check_count, 0, 'check() finds nothing wrong')
  FROM (SELECT count(*)::int AS check_count FROM frameq.check()) c;

-- --------------------------------------- the same as the single-frame actions

/* two identical jobs: single-frame actions on one, bulk actions on the other */
SELECT frameq.submit($${"show": "t65show", "name": "t65-one", "paused": true,
	"layers": [{"name": "l", "command": "c", "range": "1-5"}, {"name": "m", "command": "c", "range": "1-2"}]}$$) AS one \gset
SELECT frameq.submit($${"show": "t65show", "name": "t65-many", "paused": true,
	"layers": [{"name": "l", "command": "c", "range": "1-5"}, {"name": "m", "command": "c", "range": "1-2"}]}$$) AS many \gset
CREATE TEMP VIEW t65_same AS
SELECT f.job, l.name, f.number, f.state, f.retries, f.requeues, f.version, f.not_before, f.dead_reason
  FROM frameq.frame f JOIN frameq.layer l ON l.id = f.layer;
SELECT frameq.kill_frame(f.id, 'x') FROM frameq.frame f JOIN frameq.layer l ON l.id = f.layer
 WHERE f.job = :one AND l.name = 'l' AND f.number <= 4 \g /dev/null
SELECT is(frameq.kill_frames(:many, 'l', 'x'), 5, 'kill_frames acts on the 5 waiting tasks of layer l');
SELECT frameq.kill_frame(f.id, 'x') FROM frameq.frame f JOIN frameq.layer l ON l.id = f.layer
 WHERE f.job = :one AND l.name = 'l' AND f.number = 5 \g /dev/null
SELECT is((SELECT string_agg(format('%s %s %s %s %s %s %s', name, number, state, retries, requeues, version, dead_reason), ',' ORDER BY name, number) FROM t65_same WHERE job = :many),
		  (SELECT string_agg(format('%s %s %s %s %s %s %s', name, number, state, retries, requeues, version, dead_reason), ',' ORDER BY name, number) FROM t65_same WHERE job = :one),
		  'kill_frames leaves each task as kill_frame does');
SELECT frameq.retry_frame(f.id) FROM frameq.frame f WHERE f.job = :one AND f.state = 'dead' \g /dev/null
SELECT is(frameq.retry_frames(:many), 5, 'retry_frames acts on the 5 dead tasks');
SELECT is((SELECT string_agg(format('%s %s %s %s %s %s %s', name, number, state, retries, requeues, version, not_before), ',' ORDER BY name, number) FROM t65_same WHERE job = :many),
		  (SELECT string_agg(format('%s %s %s %s %s %s %s', name, number, state, retries, requeues, version, not_before), ',' ORDER BY name, number) FROM t65_same WHERE job = :one),
		  'retry_frames leaves each task as retry_frame does');
SELECT frameq.eat_frame(f.id) FROM frameq.frame f WHERE f.job = :one \g /dev/null
SELECT is(frameq.eat_frames(:many, NULL, '{waiting}'), 7, 'eat_frames acts on the 7 waiting tasks');
SELECT is((SELECT string_agg(format('%s %s %s %s %s %s', name, number, state, retries, requeues, version), ',' ORDER BY name, number) FROM t65_same WHERE job = :many),
		  (SELECT string_agg(format('%s %s %s %s %s %s', name, number, state, retries, requeues, version), ',' ORDER BY name, number) FROM t65_same WHERE job = :one),
		  'eat_frames leaves each task as eat_frame does');
SELECT is((SELECT state FROM frameq.job WHERE id = :many), (SELECT state FROM frameq.job WHERE id = :one),
		  'and the job as eat_frame does (finished)');

-- ------------------------------------------- tasks a dependency still holds

/* layer b waits for layer a: retried tasks of b are depend, not waiting; a's tasks wait */
SELECT frameq.submit($${"show": "t65show", "name": "t65-deps", "paused": true, "layers": [
	{"name": "a", "command": "c", "range": "1-2"},
	{"name": "b", "command": "c", "range": "1-3", "after": ["a"]}]}$$) AS deps \gset
SELECT is(frameq.kill_frames(:deps), 5, 'kill_frames of a job with a dependency kills its 2 waiting and 3 depend tasks');
SELECT is(frameq.retry_frames(:deps, 'b'), 3, 'retry_frames of layer b acts on its 3 dead tasks');
SELECT is((SELECT string_agg(f.state, ',' ORDER BY f.number) FROM frameq.frame f JOIN frameq.layer l ON l.id = f.layer
			WHERE f.job = :deps AND l.name = 'b'), 'depend,depend,depend', 'they are held by the dependency: depend');
SELECT is(frameq.retry_frames(:deps, 'a'), 2, 'retry_frames of layer a acts on its 2');
SELECT is((SELECT string_agg(f.state, ',' ORDER BY f.number) FROM frameq.frame f JOIN frameq.layer l ON l.id = f.layer
			WHERE f.job = :deps AND l.name = 'a'), 'waiting,waiting', 'they wait');
SELECT is(check_count, 0, 'check() finds nothing wrong (every waiting task''s layer is queued)')
  FROM (SELECT count(*)::int AS check_count FROM frameq.check()) c;

/*
 * The gate's memo ends with the bulk move: later in the same transaction,
 * a task of the same layer released to waiting after depend_job raised
 * the layer's count is held (depend), not let through.
 */
SELECT frameq.submit($${"show": "t65show", "name": "t65-memo", "max_retries": 3, "priority": 1000,
	"layers": [{"name": "l", "command": "c", "range": "1-3"}]}$$) AS memo \gset
SELECT frameq.submit($${"show": "t65show", "name": "t65-memo-pre", "paused": true,
	"layers": [{"name": "l", "command": "c", "range": "1"}]}$$) AS memo_pre \gset
SELECT proc AS memo_proc FROM frameq.reserve('t65-h1', :'tok1', :epoch1, 1) WHERE job = :memo \gset
SELECT frameq.kill_frame(f.id, 'x') FROM frameq.frame f WHERE f.job = :memo AND f.state = 'waiting' \g /dev/null
SELECT is(frameq.retry_frames(:memo), 2, 'retry_frames of the 2 dead tasks of a layer with one running');
SELECT frameq.depend_job(:memo, :memo_pre) \g /dev/null
SELECT is((SELECT count(*)::int FROM frameq.frame WHERE job = :memo AND state = 'depend'), 2,
	'depend_job in the same transaction holds them');
SELECT frameq.complete('t65-h1', :'tok1', :epoch1, :memo_proc, 1) \g /dev/null
SELECT is((SELECT count(*)::int FROM frameq.frame WHERE job = :memo AND state = 'depend'), 3,
	'and the running one, failed and released for a retry, is held too, not waiting');

-- ------------------------------------------------------------------ a killed job

SELECT frameq.submit($${"show": "t65show", "name": "t65-killed",
	"layers": [{"name": "l", "command": "c", "range": "1-3"}]}$$) AS killed \gset
SELECT frameq.kill_job(:killed, 'gone') \g /dev/null
SELECT * FROM fqtest.refuses(format($$SELECT frameq.retry_frames(%s)$$, :killed), '55000',
	'job % is killed: its tasks cannot run again', 'retry_frames of a killed job raises 55000');
SELECT * FROM fqtest.refuses(format($$SELECT frameq.retry_frames(%s, NULL, '{dead,running}')$$, :killed), '55000',
	'job % is killed: its tasks cannot run again', 'with running tasks asked for too, and no kill order is left');
SELECT is(frameq.eat_frames(:killed), 3, 'eat_frames of a killed job''s dead tasks eats them, as eat_frame does');

-- ------------------------------------------------------------------ permissions

CREATE ROLE t65_bob NOLOGIN IN ROLE frameq_submit;
CREATE FUNCTION fqtest.as_bob(sql text) RETURNS text
LANGUAGE plpgsql AS $$
BEGIN
	SET LOCAL ROLE t65_bob;
	EXECUTE sql;
	RESET ROLE;
	RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
	RETURN SQLSTATE || ': ' || SQLERRM;
END
$$;
GRANT EXECUTE ON FUNCTION fqtest.as_bob(text) TO PUBLIC;
GRANT USAGE ON SCHEMA fqtest TO PUBLIC;
SELECT frameq.kill_frames(:job) \g /dev/null
SELECT fqtest.state() AS before \gset
SELECT is(left(fqtest.as_bob(format($$SELECT frameq.retry_frames(%s)$$, :job)), 5), '42501',
	'a submitter without a grant of the show cannot retry_frames');
SELECT is(left(fqtest.as_bob(format($$SELECT frameq.eat_frames(%s)$$, :job)), 5), '42501', 'nor eat_frames');
SELECT is(left(fqtest.as_bob(format($$SELECT frameq.kill_frames(%s)$$, :job)), 5), '42501', 'nor kill_frames');
SELECT is(fqtest.state(), :'before', 'and nothing changed');
SELECT frameq.grant_show('t65show', 't65_bob') \g /dev/null
SELECT is(fqtest.as_bob(format($$SELECT frameq.retry_frames(%s)$$, :job)), 'ok', 'with the grant it can');
SELECT is((SELECT count(*)::int FROM t65 WHERE state = 'waiting'), 2, 'and the job''s 2 dead tasks wait again');
SELECT ok(NOT has_function_privilege('frameq_reader', 'frameq.retry_frames(bigint, text, text[])', 'EXECUTE')
		  AND NOT has_function_privilege('frameq_agent', 'frameq.kill_frames(bigint, text, text)', 'EXECUTE')
		  AND has_function_privilege('frameq_admin', 'frameq.eat_frames(bigint, text, text[])', 'EXECUTE'),
	'readers and agents may not act in bulk, admins may');

SELECT * FROM finish();
ROLLBACK;
