/*
 * Issue 16, set_layer(job, layer, changes): every editable field, checked
 * as submit checks it (22023 / 54000 / 42704, naming changes.<field>, and
 * nothing changed), JSON null giving a field its default (following the
 * job for a field that has a job-level value), running tasks keeping
 * their booking while later bookings follow, the dispatch queue queued
 * anew so that check() stays clean and no waiting frame is passed over,
 * a paused layer booking nothing until resumed, raised tasks taken back
 * to their layer's memory, finished and killed jobs, and permissions.
 */
BEGIN;
\ir include/helpers.psql

SELECT plan(123);

SELECT * FROM fqtest.farm('t60', cores => '{8,8}', memory => '{8589934592,17179869184}') \gset
SELECT frameq.create_limit('t60lim', 5) AS _ \gset
SELECT frameq.submit($${"show": "t60show", "name": "j", "timeout": "2h", "retry_delay": 7,
	"layers": [{"name": "a", "command": "render #FRAME#", "range": "1-20", "memory": "1GB"},
			   {"name": "b", "command": "comp #FRAME#", "range": "1-4", "timeout": 60}]}$$) AS job \gset
SELECT id AS la FROM frameq.layer WHERE job = :job AND name = 'a' \gset
SELECT id AS lb FROM frameq.layer WHERE job = :job AND name = 'b' \gset
/* a layer's editable fields and its limits, as one text */
CREATE FUNCTION pg_temp.layer(id bigint) RETURNS text LANGUAGE sql AS $$
	SELECT row_to_json(l)::text || coalesce((SELECT string_agg(ll.limit_id::text, ',') FROM frameq.layer_limit ll
											 WHERE ll.layer = l.id), '')
	  FROM frameq.layer l WHERE l.id = $1 $$;
CREATE FUNCTION pg_temp.clean() RETURNS bigint LANGUAGE sql AS $$ SELECT count(*) FROM frameq.check() $$;
CREATE FUNCTION pg_temp.set(changes text) RETURNS text LANGUAGE sql AS $$
	SELECT format('SELECT frameq.set_layer(%s, ''a'', %L)',
				  (SELECT max(id) FROM frameq.job WHERE name = 'j'), changes) $$;
CREATE FUNCTION pg_temp.booked(host text, tok text, epoch bigint, n int) RETURNS text LANGUAGE sql AS $$
	SELECT coalesce(string_agg(format('%s/%s:%s:%s', l.name, b.frame_number, b.cores, b.memory), ' '
							   ORDER BY b.frame_number), '')
	  FROM frameq.reserve(host, tok, epoch, n) b JOIN frameq.layer l ON l.id = b.layer $$;

/* 1: every field, one at a time */
SELECT lives_ok(pg_temp.set('{"cores": 2, "threadable": true, "cores_max": 4}'), 'cores, threadable, cores_max');
SELECT is((SELECT (min_cc, max_cc, threadable)::text FROM frameq.layer WHERE id = :la), '(200,400,t)',
	'cores 2, cores_max 4, threadable');
SELECT lives_ok(pg_temp.set('{"memory": "2GB", "gpus": 0, "gpu_memory": 0}'), 'memory, gpus, gpu_memory');
SELECT is((SELECT memory FROM frameq.layer WHERE id = :la), 2147483648::bigint, 'memory 2 GB');
SELECT lives_ok(pg_temp.set('{"tags": ["fast", "linux"], "limits": ["t60lim"]}'), 'tags and limits');
SELECT is((SELECT tags FROM frameq.layer WHERE id = :la), '{fast,linux}'::text[], 'tags set');
SELECT is((SELECT array_agg(lm.name) FROM frameq.layer_limit ll JOIN frameq.limits lm ON lm.id = ll.limit_id
			WHERE ll.layer = :la), '{t60lim}'::text[], 'limits set');
SELECT lives_ok(pg_temp.set('{"dispatch_order": 5, "env": {"A": "1"}, "command": "r2 #FRAME#"}'),
	'dispatch_order, env, command');
SELECT is((SELECT (dispatch_order, env, command)::text FROM frameq.layer WHERE id = :la),
	'(5,"{""A"": ""1""}","r2 #FRAME#")', 'dispatch_order, env and command set');
SELECT lives_ok(pg_temp.set($${"timeout": "1h30m", "timeout_no_output": 600, "progress_pattern": "([0-9]+)%",
	"requeue_exit_codes": [3, 4], "requeue_delay": "1m", "max_requeues": 9, "retry_delay": 0}$$),
	'timeouts, progress_pattern, requeue and retry fields');
SELECT is((SELECT (timeout, timeout_no_output, progress_pattern, requeue_exit_codes, requeue_delay,
				   max_requeues, retry_delay)::text FROM frameq.layer WHERE id = :la),
	'(5400,600,"([0-9]+)%","{3,4}",60,9,0)', 'each stored as submit stores it');
SELECT lives_ok(pg_temp.set('{}'), 'an empty change changes nothing');
SELECT is(pg_temp.clean(), 0::bigint, 'check() is clean');

/* 2: null: follow the job again, or submit's default */
SELECT lives_ok(pg_temp.set($${"timeout": null, "timeout_no_output": null, "requeue_exit_codes": null,
	"requeue_delay": null, "max_requeues": null, "retry_delay": null, "progress_pattern": null}$$),
	'null for the fields with a job-level value');
SELECT is((SELECT (timeout, timeout_no_output, progress_pattern, requeue_exit_codes, requeue_delay,
				   max_requeues, retry_delay)::text FROM frameq.layer WHERE id = :la),
	'(,,,,,,)', 'the layer follows its job again');
SELECT lives_ok(pg_temp.set($${"cores": null, "threadable": null, "cores_max": null, "memory": null,
	"tags": null, "limits": null, "dispatch_order": null, "env": null}$$), 'null for the others');
SELECT is((SELECT (min_cc, max_cc, threadable, memory, tags, dispatch_order, env)::text
			 FROM frameq.layer WHERE id = :la), '(100,100,f,0,{},0,{})',
	'submit''s defaults: 1 core, no memory, no tags, its place in the job, no env');
SELECT is((SELECT count(*)::int FROM frameq.layer_limit WHERE layer = :la), 0, 'no limits');
SELECT is(pg_temp.clean(), 0::bigint, 'check() is clean');

/* 3: validation: code, field named, nothing changed */
SELECT pg_temp.layer(:la) AS before \gset
SELECT * FROM fqtest.refuses(pg_temp.set('[1]'), '22023', 'changes must be a JSON object', 'not an object');
SELECT * FROM fqtest.refuses(pg_temp.set('{"colour": 1}'), '22023', 'changes.colour is not a known field%',
	'an unknown field');
SELECT * FROM fqtest.refuses(pg_temp.set('{"range": "1-5"}'), '22023', 'changes.range cannot be edited',
	'range is not edited (add_frames)');
SELECT * FROM fqtest.refuses(pg_temp.set('{"name": "x"}'), '22023', 'changes.name cannot be edited',
	'name is not edited');
SELECT * FROM fqtest.refuses(pg_temp.set('{"memory": "lots"}'), '22023', 'changes.memory must be a size%',
	'a malformed memory');
SELECT * FROM fqtest.refuses(pg_temp.set('{"memory": "2PB"}'), '54000', 'changes.memory is too large%',
	'a memory past its bound');
SELECT * FROM fqtest.refuses(pg_temp.set('{"cores": 0}'), '22023', 'changes.cores must be positive%',
	'zero cores');
SELECT * FROM fqtest.refuses(pg_temp.set('{"cores": 200000}'), '54000', 'changes.cores is too large%',
	'cores past the bound');
SELECT * FROM fqtest.refuses(pg_temp.set('{"cores_max": 4}'), '22023',
	'changes.cores_max above the layer''s cores needs "threadable": true', 'cores_max without threadable');
SELECT * FROM fqtest.refuses(pg_temp.set('{"cores": 4, "threadable": true, "cores_max": 2}'), '22023',
	'changes.cores_max must not be below%', 'cores_max below cores');
SELECT * FROM fqtest.refuses(pg_temp.set('{"gpus": 2000}'), '54000', 'changes.gpus must be a whole number%',
	'gpus past the bound');
SELECT * FROM fqtest.refuses(pg_temp.set('{"gpus": "two"}'), '22023', 'changes.gpus must be a number',
	'gpus not a number');
SELECT * FROM fqtest.refuses(pg_temp.set('{"tags": ["a b"]}'), '22023', 'changes.tags%', 'a malformed tag');
SELECT * FROM fqtest.refuses(pg_temp.set('{"limits": ["nope"]}'), '42704',
	'changes.limits: limit "nope" does not exist', 'an unknown limit');
SELECT * FROM fqtest.refuses(pg_temp.set('{"dispatch_order": 1.5}'), '22023', 'changes.dispatch_order%',
	'a fractional dispatch_order');
SELECT * FROM fqtest.refuses(pg_temp.set('{"env": {"1X": "a"}}'), '22023', 'changes.env must map%',
	'a malformed env');
SELECT * FROM fqtest.refuses(pg_temp.set('{"command": ""}'), '22023', 'changes.command must be a non-empty string',
	'an empty command');
SELECT * FROM fqtest.refuses(pg_temp.set('{"timeout": 0}'), '22023', 'changes.timeout must be a duration above 0%',
	'a timeout of 0');
SELECT * FROM fqtest.refuses(pg_temp.set('{"timeout": "400d"}'), '54000', 'changes.timeout is too large%',
	'a timeout past 365 days');
SELECT * FROM fqtest.refuses(pg_temp.set('{"timeout_no_output": "soon"}'), '22023',
	'changes.timeout_no_output must be a duration%', 'a malformed timeout_no_output');
SELECT * FROM fqtest.refuses(pg_temp.set('{"progress_pattern": "(["}'), '22023',
	'changes.progress_pattern is not a valid regular expression%', 'a bad progress_pattern');
SELECT * FROM fqtest.refuses(pg_temp.set('{"requeue_exit_codes": [0]}'), '22023',
	'changes.requeue_exit_codes must be an array of exit statuses%', 'an exit code out of range');
SELECT * FROM fqtest.refuses(pg_temp.set('{"max_requeues": 5000}'), '54000', 'changes.max_requeues%',
	'max_requeues past the bound');
SELECT * FROM fqtest.refuses(pg_temp.set('{"retry_delay": -1}'), '22023', 'changes.retry_delay must be a duration%',
	'a negative retry_delay');
SELECT * FROM fqtest.refuses(pg_temp.set('{"paused": "yes"}'), '22023', 'changes.paused must be a boolean',
	'paused not a boolean');
SELECT * FROM fqtest.refuses(format('SELECT frameq.set_layer(%s, %L, %L)', :job, 'zz', '{}'), '42704',
	'layer "zz" does not exist in job %', 'an unknown layer');
SELECT * FROM fqtest.refuses(format('SELECT frameq.set_layer(%s, %L, %L)', -1, 'a', '{}'), '42704',
	'job -1 does not exist', 'an unknown job');
SELECT is(pg_temp.layer(:la), :'before', 'no refused change touched the layer');

/* 4: running tasks keep their booking; later ones follow; the queue follows (no stale row books) */
SELECT is(pg_temp.booked('t60-h1', :'tok1', :epoch1, 2), 'a/1:1.00:0 a/2:1.00:0', 'two frames at 1 core');
SELECT lives_ok(pg_temp.set('{"cores": 2, "memory": "3GB"}'), 'cores and memory changed together');
SELECT is((SELECT string_agg(format('%s:%s', cores_cc, memory), ' ' ORDER BY frame) FROM frameq.proc
			WHERE layer = :la), '100:0 100:0', 'the running tasks keep their booking');
SELECT is(pg_temp.booked('t60-h1', :'tok1', :epoch1, 1), 'a/3:2.00:3221225472',
	'the next booking has the new cores and memory together');
SELECT is((SELECT count(*)::int FROM frameq.dispatch_queue WHERE layer = :la
			AND (min_cc, memory) = (200, 3221225472)), 1, 'the layer has a row of its new values');
SELECT is(pg_temp.clean(), 0::bigint, 'check() is clean');
/* a host that fitted only the old size: the old row is tidied, the layer not booked */
SELECT lives_ok(pg_temp.set('{"memory": "12GB"}'), 'memory above the 8 GB host');
SELECT is(pg_temp.booked('t60-h1', :'tok1', :epoch1, 1), 'b/1:1.00:0',
	'the 8 GB host books layer b, nothing of a');
SELECT is(pg_temp.booked('t60-h2', :'tok2', :epoch2, 1), 'a/4:2.00:12884901888', 'the 16 GB host does');
SELECT is((SELECT count(*)::int FROM frameq.dispatch_queue WHERE layer = :la AND memory <> 12884901888), 0,
	'the rows of old sizes are gone (tidied by the bookings that met them)');
/* smaller again: hosts that read only small size classes find it */
SELECT lives_ok(pg_temp.set('{"memory": "1GB", "cores": 1}'), 'smaller again');
SELECT is(pg_temp.booked('t60-h1', :'tok1', :epoch1, 1), 'a/5:1.00:1073741824',
	'a host with little room left books it at once');
SELECT is(pg_temp.clean(), 0::bigint, 'check() is clean');

/* 5: tags: a host without the new tag passes over the old row and tidies it */
SELECT lives_ok(pg_temp.set('{"tags": ["gpu-farm"]}'), 'a tag no host has');
SELECT is(pg_temp.booked('t60-h1', :'tok1', :epoch1, 1), 'b/2:1.00:0',
	'the host books layer b, not a (whose old untagged row it met)');
SELECT is((SELECT count(*)::int FROM frameq.dispatch_queue WHERE layer = :la AND tag = ''), 0,
	'the old untagged row is gone');
SELECT is((SELECT count(*)::int FROM frameq.dispatch_queue WHERE layer = :la AND tag = 'gpu-farm'), 1,
	'the new tag''s row is there');
SELECT lives_ok(pg_temp.set('{"tags": null}'), 'no tags again');
SELECT is(pg_temp.clean(), 0::bigint, 'check() is clean');

/* 6: a paused layer books nothing; its running tasks go on; resuming queues it */
SELECT lives_ok(pg_temp.set('{"paused": true}'), 'layer a paused');
SELECT is(pg_temp.booked('t60-h2', :'tok2', :epoch2, 4), 'b/3:1.00:0 b/4:1.00:0',
	'only layer b is booked');
SELECT is((SELECT count(*)::int FROM frameq.proc WHERE layer = :la), 5, 'layer a''s running tasks go on');
SELECT is((SELECT count(*)::int FROM frameq.dispatch_queue WHERE layer = :la), 0,
	'the paused layer''s rows are gone');
SELECT is(pg_temp.clean(), 0::bigint, 'check() is clean with a paused layer that has waiting frames');
SELECT lives_ok(pg_temp.set('{"paused": false}'), 'layer a resumed');
SELECT is((SELECT count(*)::int FROM frameq.dispatch_queue WHERE layer = :la), 1, 'resuming queued it');
SELECT is(pg_temp.booked('t60-h2', :'tok2', :epoch2, 1), 'a/6:1.00:1073741824', 'and it books again');
SELECT is(pg_temp.clean(), 0::bigint, 'check() is clean');

/* 7: raised tasks: memory raised to at least a task's raised memory takes it back to the layer's */
UPDATE frameq.frame SET memory = 2147483648 WHERE layer = :la AND number = 7;
UPDATE frameq.frame SET memory = 6442450944 WHERE layer = :la AND number = 8;
SELECT frameq._queue_layers(ARRAY[:la::bigint]) AS _ \gset
SELECT is(pg_temp.clean(), 0::bigint, 'two raised waiting tasks, each with its row');
SELECT lives_ok(pg_temp.set('{"memory": "4GB"}'), 'layer memory raised to 4 GB');
SELECT is((SELECT string_agg(format('%s:%s', number, memory), ' ' ORDER BY number) FROM frameq.frame
			WHERE layer = :la AND number IN (7, 8)), '7: 8:6442450944',
	'the task raised to 2 GB follows its layer again; the one raised to 6 GB keeps it');
SELECT is(pg_temp.clean(), 0::bigint, 'check() is clean');
SELECT is(pg_temp.booked('t60-h1', :'tok1', :epoch1, 1), 'a/7:1.00:4294967296',
	'task 7 is booked at the layer''s memory, in number order');

/* 7b: an edit while the job is paused: resuming the job queues the new values, not a paused layer */
SELECT frameq.set_job(:job, paused => true) AS _ \gset
SELECT lives_ok(pg_temp.set('{"cores": 3}'), 'cores changed while the job is paused');
SELECT frameq.set_layer(:job, 'b', '{"paused": true}') AS _ \gset
SELECT frameq.set_job(:job, paused => false) AS _ \gset
SELECT is((SELECT count(*)::int FROM frameq.dispatch_queue q JOIN frameq.job j ON j.id = q.job
			WHERE q.layer = :la AND q.min_cc = 300 AND q.memory = 4294967296 AND q.priority = j.priority), 1,
	'the resumed job''s layer has a row of its new cores');
SELECT is((SELECT count(*)::int FROM frameq.dispatch_queue q JOIN frameq.job j ON j.id = q.job
			WHERE q.layer = :lb AND q.priority = j.priority), 0, 'its paused layer got none');
SELECT is(pg_temp.clean(), 0::bigint, 'check() is clean');
SELECT frameq.set_layer(:job, 'b', '{"paused": false}') AS _ \gset
/* a booking that meets only a row of old values queues the current ones before it tidies the old */
DELETE FROM frameq.dispatch_queue WHERE layer = :la AND memory = 4294967296;
SELECT is((SELECT count(*)::int FROM frameq.proc p
			WHERE p.host = :host1 AND frameq.complete('t60-h1', :'tok1', :epoch1, p.id, 0) = 'accepted'),
	7, 'the 8 GB host''s renders end');
INSERT INTO frameq.dispatch_queue (show, tag, gpu, priority, job, dispatch_order, layer, min_cc, memory,
								   gpus, gpu_memory, mem_class, core_class)
SELECT j.show, '', false, j.priority, j.id, 0, :la, 100, 4294967296, 0, 0,
	   frameq._memory_class(4294967296), frameq._cores_class(100)
  FROM frameq.job j WHERE j.id = :job;
SELECT is(pg_temp.booked('t60-h1', :'tok1', :epoch1, 1), 'a/9:3.00:4294967296',
	'the old row books at the layer''s current values');
SELECT is((SELECT string_agg(format('%s:%s', q.min_cc, q.memory), ',' ORDER BY q.memory)
			 FROM frameq.dispatch_queue q WHERE q.layer = :la), '300:4294967296,300:6442450944',
	'and is replaced by a row of them (the raised task''s row stays)');
SELECT is(pg_temp.clean(), 0::bigint, 'check() is clean');

/* 8: a finished job: paused and resources may change; a killed job refuses */
SELECT frameq.kill_job(:job, 't60 done') AS _ \gset
SELECT * FROM fqtest.refuses(pg_temp.set('{"memory": "1GB"}'), '55000', 'job % is killed: set_layer refuses it',
	'a killed job''s layer is not edited');
SELECT frameq.submit($${"show": "t60show", "name": "k",
	"layers": [{"name": "a", "command": "c", "range": "1"}]}$$) AS job2 \gset
UPDATE frameq.job SET state = 'finished', finished_at = now() WHERE id = :job2;
UPDATE frameq.frame SET state = 'succeeded' WHERE job = :job2;
SELECT lives_ok(format('SELECT frameq.set_layer(%s, ''a'', ''{"memory": "2GB", "paused": true}'')', :job2),
	'a finished job''s layer may be edited');
SELECT is((SELECT (memory, paused)::text FROM frameq.layer WHERE job = :job2), '(2147483648,t)', 'and is');
SELECT is(pg_temp.clean(), 0::bigint, 'check() is clean');

/* 9: permissions: as set_job */
CREATE ROLE t60_artist NOLOGIN IN ROLE frameq_submit;
SELECT frameq.submit($${"show": "t60show", "name": "m",
	"layers": [{"name": "a", "command": "c", "range": "1-2"}]}$$) AS job3 \gset
SET ROLE t60_artist;
SELECT throws_ok(format('SELECT frameq.set_layer(%s, ''a'', ''{"memory": 1}'')', :job3), '42501', NULL,
	'a submitter without the show''s grant may not');
RESET ROLE;
SELECT frameq.grant_show('t60show', 't60_artist') AS _ \gset
SET ROLE t60_artist;
SELECT lives_ok(format('SELECT frameq.set_layer(%s, ''a'', ''{"memory": 1}'')', :job3),
	'with the grant it may');
RESET ROLE;
SELECT ok(NOT has_function_privilege('frameq_agent', 'frameq.set_layer(bigint, text, jsonb)', 'EXECUTE'),
	'an agent may not');

SELECT * FROM finish();
ROLLBACK;
