/*
 * The audit trail of the editing and bulk actions (frameq 0.6.0):
 * set_layer, set_job with changes (once, whichever form is called),
 * add_frames, retry_frames, eat_frames and kill_frames each leave one row
 * per call, naming the job and the layer acted on, with their arguments
 * and how many tasks they acted on; an env value given to set_layer is
 * kept as its name only; a refused call leaves no row.
 */
BEGIN;
\ir include/helpers.psql

SELECT plan(10);

SELECT * FROM fqtest.farm('t71', cores => '{8}') \gset
SELECT frameq.submit($${"show": "t71show", "name": "j", "max_retries": 0,
	"layers": [{"name": "l", "command": "c", "range": "1-4"}]}$$) AS job \gset
SELECT id AS layer FROM frameq.layer WHERE job = :job \gset
CREATE FUNCTION pg_temp.since(mark bigint) RETURNS TABLE (action text, job bigint, layer bigint, detail jsonb)
LANGUAGE sql AS $$ SELECT a.action, a.job, a.layer, a.detail FROM frameq.actions a WHERE a.id > mark ORDER BY a.id $$;
SELECT coalesce(max(id), 0) AS mark FROM frameq.actions \gset

SELECT frameq.set_layer(:job, 'l', '{"memory": "2GB", "env": {"SECRET_KEY": "hunter2"}}') \g /dev/null
SELECT results_eq(format('SELECT * FROM pg_temp.since(%s)', :mark),
	format($$VALUES ('set_layer', %s::bigint, %s::bigint,
					 '{"layer": "l", "changes": {"memory": "2GB", "env": ["SECRET_KEY"]}}'::jsonb)$$, :job, :layer),
	'set_layer: one row, its job and layer, its changes with the env value reduced to its name');

SELECT coalesce(max(id), 0) AS mark FROM frameq.actions \gset
SELECT frameq.set_job(:job, priority => 7) \g /dev/null
SELECT frameq.set_job(:job, '{"max_dead_frames": 3}'::jsonb) \g /dev/null
SELECT results_eq(format('SELECT * FROM pg_temp.since(%s)', :mark),
	format($$VALUES ('set_job', %1$s::bigint, NULL::bigint, '{"changes": {"priority": 7}}'::jsonb),
					('set_job', %1$s, NULL, '{"changes": {"max_dead_frames": 3}}'::jsonb)$$, :job),
	'set_job: one row per call, either form, holding the changes');

SELECT coalesce(max(id), 0) AS mark FROM frameq.actions \gset
SELECT is(frameq.add_frames(:job, 'l', '5-6'), 2, 'two tasks added');
SELECT results_eq(format('SELECT * FROM pg_temp.since(%s)', :mark),
	format($$VALUES ('add_frames', %s::bigint, %s::bigint, '{"layer": "l", "range": "5-6", "tasks": 2}'::jsonb)$$,
		   :job, :layer),
	'add_frames: one row with the range and the tasks added');

/* three tasks fail for good (max_retries 0); then the bulk actions */
SELECT count(*) AS _ FROM (SELECT frameq.complete('t71-h1', :'tok1', :epoch1, b.proc, 1)
	FROM frameq.reserve('t71-h1', :'tok1', :epoch1, 3) b) x \gset
SELECT coalesce(max(id), 0) AS mark FROM frameq.actions \gset
SELECT is(frameq.retry_frames(:job, 'l'), 3, 'retry_frames retried the three dead tasks');
SELECT is(frameq.kill_frames(:job, NULL, 'wrong camera'), 6, 'kill_frames killed the six waiting tasks');
SELECT is(frameq.eat_frames(:job), 6, 'eat_frames ate the six dead tasks');
SELECT results_eq(format('SELECT * FROM pg_temp.since(%s)', :mark),
	format($$VALUES ('retry_frames', %1$s::bigint, %2$s::bigint, '{"layer": "l", "states": ["dead"], "tasks": 3}'::jsonb),
					('kill_frames', %1$s, NULL, '{"layer": null, "reason": "wrong camera", "tasks": 6}'::jsonb),
					('eat_frames', %1$s, NULL, '{"layer": null, "states": ["dead"], "tasks": 6}'::jsonb)$$,
		   :job, :layer),
	'each bulk action: one row per call, with the layer if given, its arguments and the tasks acted on');

/* a refused call leaves nothing */
SELECT coalesce(max(id), 0) AS mark FROM frameq.actions \gset
SELECT fqtest.throws_like(format($$SELECT frameq.set_layer(%s, 'l', '{"memory": -1}')$$, :job), '22023', NULL,
	'a refused set_layer');
SELECT is((SELECT count(*)::int FROM pg_temp.since(:mark)), 0, 'leaves no row');

SELECT * FROM finish();
ROLLBACK;
