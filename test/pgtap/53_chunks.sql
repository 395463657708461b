/*
 * Layer chunks (doc/reference.md, submit's "chunk"): a layer's frame
 * numbers, in range order, are cut into tasks of chunk numbers, the last
 * possibly shorter.  A task is one frame row (number = its first number,
 * numbers = all of them, NULL for one), booked as one proc charged once,
 * run as one command whose #FRAME_START#, #FRAME_END# and #FRAMESPEC#
 * name its numbers, and retried, killed and eaten whole.  The frames view
 * shows each task's frame_spec; job_progress counts tasks and, in
 * frames_total, frame numbers.  A bad chunk is refused with the field
 * named and nothing written; the command bound counts the new tokens.
 */
BEGIN;
\ir include/helpers.psql

SELECT plan(62);

SELECT * FROM fqtest.farm('t53', cores => '{16}') \gset

-- ------------------------------------------------------- tasks and specs

SELECT frameq.submit($${
	"show": "t53show", "name": "t53-specs", "paused": true,
	"layers": [
		{"name": "plain",    "command": "r", "range": "1-10",    "chunk": 3},
		{"name": "stepped",  "command": "r", "range": "1-20x2",  "chunk": 3},
		{"name": "unsorted", "command": "r", "range": "7,3,1,2", "chunk": 2},
		{"name": "whole",    "command": "r", "range": "1-5",     "chunk": 100},
		{"name": "negative", "command": "r", "range": "-6--1",   "chunk": 3},
		{"name": "single",   "command": "r", "range": "5",       "chunk": 3},
		{"name": "mixed",    "command": "r", "range": "1,2,3,5", "chunk": 4},
		{"name": "default",  "command": "r", "range": "1-3"},
		{"name": "one",      "command": "r", "range": "1-3",     "chunk": 1}
	]}$$) AS specs \gset

CREATE FUNCTION fqtest.tasks(job bigint, layer_name text)
RETURNS TABLE (number int, numbers int[], frame_spec text)
LANGUAGE sql AS $$
	SELECT f.number, f.numbers, v.frame_spec
	  FROM frameq.frame f
	  JOIN frameq.layer l ON l.id = f.layer
	  JOIN frameq.frames v ON v.frame = f.id
	 WHERE l.job = tasks.job AND l.name = layer_name
	 ORDER BY f.id
$$;

SELECT results_eq(format($$SELECT * FROM fqtest.tasks(%s, 'plain')$$, :specs),
	$$VALUES (1, '{1,2,3}'::int[], '1-3'), (4, '{4,5,6}', '4-6'), (7, '{7,8,9}', '7-9'),
			 (10, NULL, '10')$$,
	'"1-10" in chunks of 3: tasks 1-3, 4-6, 7-9 and 10 (one number: numbers NULL)');
SELECT results_eq(format($$SELECT * FROM fqtest.tasks(%s, 'stepped')$$, :specs),
	$$VALUES (1, '{1,3,5}'::int[], '1-5x2'), (7, '{7,9,11}', '7-11x2'),
			 (13, '{13,15,17}', '13-17x2'), (19, NULL, '19')$$,
	'"1-20x2" in chunks of 3: tasks 1-5x2, 7-11x2, 13-17x2 and 19');
SELECT results_eq(format($$SELECT * FROM fqtest.tasks(%s, 'unsorted')$$, :specs),
	$$VALUES (7, '{7,3}'::int[], '7,3'), (1, '{1,2}', '1-2')$$,
	'"7,3,1,2" in chunks of 2 keeps range order: tasks "7,3" (frame number 7) and "1-2"');
SELECT results_eq(format($$SELECT * FROM fqtest.tasks(%s, 'whole')$$, :specs),
	$$VALUES (1, '{1,2,3,4,5}'::int[], '1-5')$$,
	'a chunk larger than the range makes one task of all its numbers');
SELECT results_eq(format($$SELECT * FROM fqtest.tasks(%s, 'negative')$$, :specs),
	$$VALUES (-6, '{-6,-5,-4}'::int[], '-6--4'), (-3, '{-3,-2,-1}', '-3--1')$$,
	'negative numbers are written plainly: "-6--4", "-3--1"');
SELECT results_eq(format($$SELECT * FROM fqtest.tasks(%s, 'single')$$, :specs),
	$$VALUES (5, NULL::int[], '5')$$,
	'a one-frame range in chunks of 3 is one task of one number');
SELECT results_eq(format($$SELECT * FROM fqtest.tasks(%s, 'mixed')$$, :specs),
	$$VALUES (1, '{1,2,3,5}'::int[], '1,2,3,5')$$,
	'numbers that are not one run are listed: "1,2,3,5"');
SELECT results_eq(format($$SELECT * FROM fqtest.tasks(%s, 'default')$$, :specs),
	$$VALUES (1, NULL::int[], '1'), (2, NULL, '2'), (3, NULL, '3')$$,
	'without chunk every frame number is its own task, numbers NULL');
SELECT results_eq(format($$SELECT * FROM fqtest.tasks(%s, 'one')$$, :specs),
	$$VALUES (1, NULL::int[], '1'), (2, NULL, '2'), (3, NULL, '3')$$,
	'chunk 1 is the default');
SELECT results_eq(
	$$SELECT frameq._frame_spec(7, NULL), frameq._frame_spec(7, '{7,3}'), frameq._frame_spec(1, '{1,2}'),
			 frameq._frame_spec(10, '{10,5,0}'), frameq._frame_spec(1, '{1,4,7,11}'),
			 frameq._frame_spec(-2, '{-2,0,2}'), frameq._frame_spec(4, '{4,4}')$$,
	$$VALUES ('7', '7,3', '1-2', '10,5,0', '1,4,7,11', '-2-2x2', '4,4')$$,
	'_frame_spec: a number, a list, a run of step 1, never a descending or uneven run, "x" only past step 1');
SELECT results_eq(
	format($$SELECT total, waiting, frames_total FROM frameq.job_progress WHERE job = %s$$, :specs),
	'VALUES (21::bigint, 21::bigint, 46::bigint)',
	'job_progress counts 21 tasks (total, by state) and 46 frame numbers (frames_total)');
/* the columns up to these (later versions append theirs after) */
SELECT is(
	(SELECT (array_agg(attname::text ORDER BY attnum))[1:11] FROM pg_attribute
	  WHERE attrelid = 'frameq.frames'::regclass AND attnum > 0),
	'{frame,job,layer,frame_number,state,retries,attempts,proc,host,proc_state,frame_spec}'::text[],
	'the frames view gains frame_spec after its earlier columns');
SELECT is(
	(SELECT (array_agg(attname::text ORDER BY attnum))[1:11] FROM pg_attribute
	  WHERE attrelid = 'frameq.job_progress'::regclass AND attnum > 0),
	'{job,name,state,total,waiting,depend,running,succeeded,dead,eaten,frames_total}'::text[],
	'job_progress gains frames_total after its earlier columns');
SELECT ok(has_column_privilege('frameq_reader', 'frameq.frames', 'frame_spec', 'SELECT')
		  AND has_column_privilege('frameq_reader', 'frameq.job_progress', 'frames_total', 'SELECT'),
	'frameq_reader may read frame_spec and frames_total');

-- ------------------------------------------------------- booking

SELECT frameq.submit($${
	"show": "t53show", "name": "t53-book", "priority": 10,
	"layers": [
		{"name": "a", "command": "r #FRAME# #ZFRAME# #FRAME_START# #FRAME_END# #FRAMESPEC# #JOB# #LAYER#",
		 "range": "1-10", "chunk": 3, "cores": 2},
		{"name": "c", "command": "c #FRAME_START#..#FRAME_END# [#FRAMESPEC#] #FRAME#",
		 "range": "7,3,1,2", "chunk": 2}
	]}$$) AS job \gset

CREATE TEMP TABLE booked AS
SELECT * FROM frameq.reserve('t53-h1', :'tok1', :epoch1, 100);

SELECT results_eq(
	$$SELECT frame_number, command, cores FROM booked ORDER BY layer, frame_number$$,
	$$VALUES (1, 'r 1 0001 1 3 1-3 t53-book a', 2.00::numeric),
			 (4, 'r 4 0004 4 6 4-6 t53-book a', 2.00),
			 (7, 'r 7 0007 7 9 7-9 t53-book a', 2.00),
			 (10, 'r 10 0010 10 10 10 t53-book a', 2.00),
			 (1, 'c 1..2 [1-2] 1', 1.00),
			 (7, 'c 7..3 [7,3] 7', 1.00)$$,
	'each task is booked once, its command naming its first and last numbers (range order) and its spec');
SELECT results_eq(
	format($$SELECT count(*)::int, count(DISTINCT frame)::int FROM frameq.proc WHERE job = %s$$, :job),
	'VALUES (6, 6)',
	'one proc per task: 6 procs for the 14 frame numbers');
SELECT results_eq(
	format($$SELECT used_cores, running FROM frameq.usage WHERE kind = 'job' AND id = %s$$, :job),
	'VALUES (10.00::numeric(12,2), 6)',
	'usage charges each task''s cores once: 4 x 2 + 2 x 1 = 10 cores, 6 running');
SELECT results_eq(
	format($$SELECT used_cc::bigint, running::bigint FROM frameq.ledger() WHERE kind = 'job' AND id = %s$$, :job),
	'VALUES (1000::bigint, 6::bigint)',
	'the ledger holds 1000 cc for the job''s 6 procs');
SELECT is((SELECT idle_cc FROM frameq.host WHERE id = :host1), 600, 'the host has 6 of its 16 cores left');
SELECT results_eq(
	format($$SELECT total, running, frames_total FROM frameq.job_progress WHERE job = %s$$, :job),
	'VALUES (6::bigint, 6::bigint, 14::bigint)',
	'job_progress: 6 tasks running, 14 frame numbers');
SELECT is_empty('SELECT * FROM frameq.check()', 'check() finds nothing wrong with chunked tasks running');

SELECT frame AS t1 FROM booked WHERE command LIKE 'r 1 %' \gset
SELECT frame AS t4 FROM booked WHERE command LIKE 'r 4 %' \gset
SELECT frame AS t7 FROM booked WHERE command LIKE 'r 7 %' \gset
SELECT frame AS t10 FROM booked WHERE command LIKE 'r 10 %' \gset
SELECT proc AS p1 FROM booked WHERE frame = :t1 \gset
SELECT proc AS p4 FROM booked WHERE frame = :t4 \gset
SELECT proc AS p7 FROM booked WHERE frame = :t7 \gset

-- ------------------------------------------------------- operator actions on a task

/* 1-3 succeeds, then retry_frame puts the whole task back */
SELECT is(frameq.complete('t53-h1', :'tok1', :epoch1, :p1, 0), 'accepted', 'task 1-3 completes as one');
SELECT results_eq(format($$SELECT state, attempts, numbers FROM frameq.frame WHERE id = %s$$, :t1),
	$$VALUES ('succeeded', 1, '{1,2,3}'::int[])$$, 'all of 1-3 succeeded in one attempt');
SELECT lives_ok(format('SELECT frameq.retry_frame(%s)', :t1), 'retry_frame on a succeeded task');
SELECT results_eq(format($$SELECT state, retries, numbers FROM frameq.frame WHERE id = %s$$, :t1),
	$$VALUES ('waiting', 0, '{1,2,3}'::int[])$$, 'the whole task 1-3 waits again, still one row');
SELECT results_eq(
	format($$SELECT frame_number, command FROM frameq.reserve('t53-h1', %L, %s, 1)$$, :'tok1', :epoch1),
	$$VALUES (1, 'r 1 0001 1 3 1-3 t53-book a')$$,
	'the retried task books again with the same command');

/* a running task: kill_frame orders its one proc killed; the release kills all of it */
SELECT lives_ok(format($$SELECT frameq.kill_frame(%s, 'bad chunk')$$, :t4), 'kill_frame on a running task');
SELECT results_eq(format($$SELECT state, want_state FROM frameq.proc WHERE frame = %s$$, :t4),
	$$VALUES ('killing', 'dead')$$, 'its one proc is a kill order wanting the task dead');
SELECT is(frameq.complete('t53-h1', :'tok1', :epoch1, :p4, -1, 9), 'accepted', 'the killed render of 4-6 ends');
SELECT results_eq(format($$SELECT state, numbers FROM frameq.frame WHERE id = %s$$, :t4),
	$$VALUES ('dead', '{4,5,6}'::int[])$$, 'task 4-6 is dead as a whole');
SELECT lives_ok(format('SELECT frameq.eat_frame(%s)', :t4), 'eat_frame on the dead task');
SELECT is((SELECT state FROM frameq.frame WHERE id = :t4), 'eaten', 'task 4-6 is eaten as a whole');

/* retry_frame on a running task: a kill order wanting it waiting */
SELECT lives_ok(format('SELECT frameq.retry_frame(%s)', :t7), 'retry_frame on a running task');
SELECT is(frameq.complete('t53-h1', :'tok1', :epoch1, :p7, -1, 9), 'accepted', 'the killed render of 7-9 ends');
SELECT results_eq(format($$SELECT state, numbers FROM frameq.frame WHERE id = %s$$, :t7),
	$$VALUES ('waiting', '{7,8,9}'::int[])$$, 'task 7-9 waits again as a whole');
SELECT lives_ok(format('SELECT frameq.eat_frame(%s)', :t7), 'eat_frame on a waiting task');
SELECT is((SELECT state FROM frameq.frame WHERE id = :t7), 'eaten', 'task 7-9 is eaten');
SELECT results_eq(
	format($$SELECT total, running, succeeded, eaten, frames_total FROM frameq.job_progress WHERE job = %s$$, :job),
	'VALUES (6::bigint, 4::bigint, 0::bigint, 2::bigint, 14::bigint)',
	'job_progress counts the tasks by state');
SELECT is((SELECT idle_cc FROM frameq.host WHERE id = :host1), 1000,
	'the released tasks gave back their cores once each: 6 of 16 cores used');
SELECT is_empty('SELECT * FROM frameq.check()', 'check() finds nothing wrong after the operator actions');

-- ------------------------------------------------------- refusals

CREATE FUNCTION fqtest.chunk_spec(chunk jsonb, command text DEFAULT 'r #FRAME#',
								  range text DEFAULT '1-10') RETURNS text
LANGUAGE sql AS $$
	SELECT jsonb_build_object('show', 't53show', 'name', 't53-bad',
		'layers', jsonb_build_array(
			jsonb_build_object('name', 'ok', 'command', 'r', 'range', '1-3'),
			jsonb_build_object('name', 'l', 'command', command, 'range', range, 'chunk', chunk)))::text
$$;

SELECT * FROM fqtest.refuses(format('SELECT frameq.submit(%L)', fqtest.chunk_spec('"3"')), '22023',
	'spec.layers[1].chunk must be a number', 'a chunk given as a string is refused with 22023');
SELECT * FROM fqtest.refuses(format('SELECT frameq.submit(%L)', fqtest.chunk_spec('true')), '22023',
	'spec.layers[1].chunk must be a number', 'a boolean chunk is refused with 22023');
SELECT * FROM fqtest.refuses(format('SELECT frameq.submit(%L)', fqtest.chunk_spec('2.5')), '22023',
	'spec.layers[1].chunk must be a whole number from 1 to 100000, not 2.5',
	'a chunk that is not whole is refused with 22023');
SELECT * FROM fqtest.refuses(format('SELECT frameq.submit(%L)', fqtest.chunk_spec('0')), '22023',
	'spec.layers[1].chunk must be a whole number from 1 to 100000, not 0',
	'chunk 0 is refused with 22023');
SELECT * FROM fqtest.refuses(format('SELECT frameq.submit(%L)', fqtest.chunk_spec('-2')), '22023',
	'spec.layers[1].chunk must be a whole number from 1 to 100000, not -2',
	'a negative chunk is refused with 22023');
SELECT * FROM fqtest.refuses(format('SELECT frameq.submit(%L)', fqtest.chunk_spec('100001')), '54000',
	'spec.layers[1].chunk must be a whole number from 1 to 100000, not 100001',
	'a chunk past 100000 is refused with 54000');
SELECT * FROM fqtest.refuses(format('SELECT frameq.submit(%L)', fqtest.chunk_spec('1e12')), '54000',
	'spec.layers[1].chunk must be a whole number from 1 to 100000, not %',
	'a chunk past int is refused with 54000');
SELECT lives_ok(format('SELECT frameq.submit(%L)', fqtest.chunk_spec('100000')),
	'chunk 100000 is accepted');

/*
 * The command bound counts #FRAMESPEC# by the layer's longest spec: 3000
 * numbers in the order 2,1,4,3,... are no run, so one task of them all is
 * written as a list of 13,892 bytes (9 + 90 x 2 + 900 x 3 + 2001 x 4
 * digits, 2999 commas); five tokens make 69,460 bytes.
 */
SELECT string_agg(n::text, ',' ORDER BY (n + 1) / 2, n DESC) AS zigzag
  FROM generate_series(1, 3000) n \gset
SELECT is(frameq._frame_spec(2, (SELECT array_agg(x::int) FROM regexp_split_to_table(:'zigzag', ',') x)),
	:'zigzag', 'the zigzag range is written back as its list');
SELECT * FROM fqtest.refuses(format('SELECT frameq.submit(%L)',
		fqtest.chunk_spec('3000', repeat('#FRAMESPEC#', 5), :'zigzag')), '54000',
	'spec.layers[1].command is too large: 69460 bytes once its tokens are expanded, at most 65536',
	'#FRAMESPEC# counted by the longest spec: a command past 64 kB once expanded is refused');
SELECT lives_ok(format('SELECT frameq.submit(%L)',
		fqtest.chunk_spec('2', repeat('#FRAMESPEC#', 5), :'zigzag')),
	'the same command is accepted in chunks of 2, whose specs are short');
SELECT is(frameq._expanded_length('#FRAME_START#-#FRAME_END# #FRAMESPEC#', 'j', 'l', -10, 7, 12),
	20::bigint, '#FRAME_START# and #FRAME_END# count as wide as the widest number, #FRAMESPEC# as the longest spec');
SELECT is(frameq._expanded_length('#FRAMESPEC##FRAMESPEC#', 'j', 'l', 1, 100), 6::bigint,
	'without a spec length #FRAMESPEC# counts as wide as a number');

SELECT is_empty('SELECT * FROM frameq.check()', 'check() finds nothing wrong at the end');

SELECT * FROM finish();
ROLLBACK;
