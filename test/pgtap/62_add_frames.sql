/*
 * Issue 16, add_frames(job, layer, range): new tasks numbered and chunked
 * like the layer, booked after the layer's others in number order; a
 * number the layer has is refused (23505, naming it), as are a killed job
 * (55000), a layer with frame-by-frame dependencies not yet met (0A000),
 * a malformed range (22023) and a job past submit's bound (54000), each
 * changing nothing; a finished job is active again; a held layer's new
 * tasks are held, and a prerequisite layer's new tasks hold its
 * dependents.
 */
BEGIN;
\ir include/helpers.psql

SELECT plan(45);

SELECT * FROM fqtest.farm('t62', cores => '{8}') \gset
SELECT frameq.submit($${"show": "t62show", "name": "j",
	"layers": [{"name": "a", "command": "c #FRAME#", "range": "1-3"},
			   {"name": "k", "command": "c #FRAMESPEC#", "range": "1-10", "chunk": 4}]}$$) AS job \gset
SELECT id AS la FROM frameq.layer WHERE job = :job AND name = 'a' \gset
SELECT id AS lk FROM frameq.layer WHERE job = :job AND name = 'k' \gset
CREATE FUNCTION pg_temp.tasks(layer bigint) RETURNS text LANGUAGE sql AS $$
	SELECT string_agg(format('%s%s:%s', f.number, coalesce('=' || array_to_string(f.numbers, ','), ''), f.state),
					  ' ' ORDER BY f.number)
	  FROM frameq.frame f WHERE f.layer = $1 $$;
CREATE FUNCTION pg_temp.clean() RETURNS bigint LANGUAGE sql AS $$ SELECT count(*) FROM frameq.check() $$;

SELECT is((SELECT chunk FROM frameq.layer WHERE id = :lk), 4, 'the layer keeps its chunk');

/* 1: numbering and chunking */
SELECT is(frameq.add_frames(:job, 'a', '4-6'), 3, 'three tasks added to layer a');
SELECT is(pg_temp.tasks(:la), '1:waiting 2:waiting 3:waiting 4:waiting 5:waiting 6:waiting', 'numbered 4 to 6');
SELECT is(frameq.add_frames(:job, 'k', '11-20'), 3, 'three tasks of chunk 4 added to layer k');
SELECT is(pg_temp.tasks(:lk),
	'1=1,2,3,4:waiting 5=5,6,7,8:waiting 9=9,10:waiting 11=11,12,13,14:waiting 15=15,16,17,18:waiting 19=19,20:waiting',
	'cut into tasks of 4 frame numbers, like the layer');
SELECT is(frameq.add_frames(:job, 'a', '0,-2'), 2, 'numbers below the layer''s');
SELECT is(pg_temp.clean(), 0::bigint, 'check() is clean (queue rows and dispatch hints)');
SELECT is((SELECT string_agg(b.frame_number::text, ' ' ORDER BY b.frame_number)
			 FROM frameq.reserve('t62-h1', :'tok1', :epoch1, 3) b), '-2 0 1',
	'the new tasks are booked in number order with the others');
SELECT is(pg_temp.clean(), 0::bigint, 'check() is clean');

/* 2: refusals, nothing changed */
SELECT * FROM fqtest.refuses(format('SELECT frameq.add_frames(%s, %L, %L)', :job, 'a', '6-8'), '23505',
	'range: frame 6 is in layer "a" of job % already', 'a number the layer has');
SELECT * FROM fqtest.refuses(format('SELECT frameq.add_frames(%s, %L, %L)', :job, 'k', '30,12'), '23505',
	'range: frame 12 is in layer "k" of job % already', 'a number inside one of the layer''s chunks');
SELECT * FROM fqtest.refuses(format('SELECT frameq.add_frames(%s, %L, %L)', :job, 'a', '8,8'), '22023',
	'range lists a frame more than once', 'a number twice');
SELECT * FROM fqtest.refuses(format('SELECT frameq.add_frames(%s, %L, %L)', :job, 'a', '9-x'), '22023',
	'range has a malformed item%', 'a malformed range');
SELECT * FROM fqtest.refuses(format('SELECT frameq.add_frames(%s, %L, %L)', :job, 'a', '100-1000099'), '54000',
	'range is too large%1000000 frames in all', 'past submit''s bound on a job''s frames');
SELECT * FROM fqtest.refuses(format('SELECT frameq.add_frames(%s, %L, %L)', :job, 'zz', '50'), '42704',
	'layer "zz" does not exist in job %', 'an unknown layer');
SELECT * FROM fqtest.refuses(format('SELECT frameq.add_frames(%s, %L, NULL)', :job, 'a'), '22023',
	'range must be a frame range%', 'no range');

/* 3: a finished job is active again; a killed one refuses */
SELECT frameq.submit($${"show": "t62show", "name": "f",
	"layers": [{"name": "a", "command": "c", "range": "1"}]}$$) AS jf \gset
UPDATE frameq.frame SET state = 'succeeded' WHERE job = :jf;
UPDATE frameq.job SET state = 'finished', finished_at = now() WHERE id = :jf;
SELECT is(frameq.add_frames(:jf, 'a', '2'), 1, 'a task added to a finished job');
SELECT is((SELECT (state, finished_at IS NULL)::text FROM frameq.job WHERE id = :jf), '(active,t)',
	'the job is active again');
SELECT is((SELECT count(*)::int FROM frameq.dispatch_queue q JOIN frameq.layer l ON l.id = q.layer
			WHERE l.job = :jf), 1, 'and its layer is queued');
SELECT is(pg_temp.clean(), 0::bigint, 'check() is clean');
SELECT frameq.kill_job(:jf, 't62') AS _ \gset
SELECT * FROM fqtest.refuses(format('SELECT frameq.add_frames(%s, %L, %L)', :jf, 'a', '3'), '55000',
	'job % is killed: add_frames refuses it', 'a killed job');

/* 4: dependencies */
SELECT frameq.submit($${"show": "t62show", "name": "d",
	"layers": [{"name": "p", "command": "c", "range": "1-2"},
			   {"name": "q", "command": "c", "range": "1-2", "after": ["p"]},
			   {"name": "r", "command": "c", "range": "1-2", "after_frames": ["p"]}]}$$) AS jd \gset
SELECT is(frameq.add_frames(:jd, 'q', '3'), 1, 'a task added to a layer that waits for another');
SELECT is((SELECT state FROM frameq.frame f JOIN frameq.layer l ON l.id = f.layer
			WHERE l.job = :jd AND l.name = 'q' AND f.number = 3), 'depend', 'it is held like its layer''s');
SELECT * FROM fqtest.refuses(format('SELECT frameq.add_frames(%s, %L, %L)', :jd, 'r', '3'), '0A000',
	'layer "r" of job % has frame-by-frame dependencies not yet met', 'a layer that waits frame by frame');
SELECT * FROM fqtest.refuses(format('SELECT frameq.add_frames(%s, %L, %L)', :jd, 'p', '3'), '0A000',
	'layer "p" of job % has frame-by-frame dependencies not yet met', 'a layer waited for frame by frame');
SELECT is(frameq.drop_depends(:jd, 'r'), 2, 'r''s frame-by-frame dependencies dropped (its two tasks freed)');
SELECT is(frameq.add_frames(:jd, 'p', '3'), 1, 'then a task may be added to p');
SELECT is((SELECT prereq FROM frameq.frame f JOIN frameq.layer l ON l.id = f.layer
			WHERE l.job = :jd AND l.name = 'p' AND f.number = 3), true,
	'and it holds q, which waits for all of p');
UPDATE frameq.frame f SET state = 'succeeded' FROM frameq.layer l
 WHERE l.id = f.layer AND l.job = :jd AND l.name = 'p' AND f.number IN (1, 2);
SELECT is((SELECT count(*)::int FROM frameq.frame f JOIN frameq.layer l ON l.id = f.layer
			WHERE l.job = :jd AND l.name = 'q' AND f.state = 'depend'), 3,
	'p''s first two tasks done: q still waits for the new one');
UPDATE frameq.frame f SET state = 'succeeded' FROM frameq.layer l
 WHERE l.id = f.layer AND l.job = :jd AND l.name = 'p' AND f.number = 3;
SELECT is((SELECT count(*)::int FROM frameq.frame f JOIN frameq.layer l ON l.id = f.layer
			WHERE l.job = :jd AND l.name = 'q' AND f.state = 'waiting'), 3,
	'the new task done: q''s three tasks are free');
SELECT is(pg_temp.clean(), 0::bigint, 'check() is clean');

/* 5: a paused layer takes new tasks and books none of them */
SELECT frameq.set_layer(:job, 'a', '{"paused": true}') AS _ \gset
SELECT is(frameq.add_frames(:job, 'a', '7'), 1, 'a task added to a paused layer');
SELECT is((SELECT count(*)::int FROM frameq.reserve('t62-h1', :'tok1', :epoch1, 5) b WHERE b.layer = :la), 0,
	'a booking takes none of the paused layer''s tasks');
SELECT is((SELECT count(*)::int FROM frameq.dispatch_queue WHERE layer = :la), 0,
	'and the paused layer''s rows are gone (the new tasks wrote none)');
SELECT is(pg_temp.clean(), 0::bigint, 'check() is clean');

SELECT * FROM finish();
ROLLBACK;
