/*
 * frame has no foreign keys to job and layer (schema.sql); what they
 * guarded is kept per statement (procs.sql, "What frame's keys would
 * guard"): an INSERT whose frames name a missing layer, a missing job or a
 * layer of another job is refused whole with 23503; a frame's job and
 * layer cannot change (23000); a layer that frames name can be neither
 * deleted, nor renumbered, nor moved to another job, and its job neither
 * deleted nor renumbered (23503); job and layer are not truncated while
 * frames exist (0A000).  Each refusal changes nothing.  A job deleted
 * with its frames and layers, in one transaction or one statement, goes;
 * submit still works, and check() reports a frame whose layer is missing
 * or of another job.
 */
BEGIN;
\ir include/helpers.psql

SELECT plan(41);

SELECT * FROM fqtest.farm('t59', cores => '{8}') \gset

SELECT frameq.submit($${"show": "t59show", "name": "pipe",
	"layers": [{"name": "render", "command": "r #FRAME#", "range": "1-20"},
			   {"name": "comp", "command": "c #FRAME#", "range": "1-20", "after_frames": ["render"]}]}$$)
	AS job \gset
SELECT frameq.submit($${"show": "t59show", "name": "other",
	"layers": [{"name": "l", "command": "c", "range": "1-3"}]}$$) AS other \gset
SELECT id AS render FROM frameq.layer WHERE job = :job AND name = 'render' \gset
SELECT id AS comp FROM frameq.layer WHERE job = :job AND name = 'comp' \gset
SELECT id AS other_layer FROM frameq.layer WHERE job = :other \gset

-- ------------------------------------------------------- submit still works

SELECT is((SELECT count(*)::int FROM frameq.frame WHERE job = :job AND layer = :render AND state = 'waiting'),
		  20, 'submit wrote the first layer''s 20 tasks, waiting');
SELECT is((SELECT count(*)::int FROM frameq.frame WHERE job = :job AND layer = :comp
			AND state = 'depend' AND deps_left = 1),
		  20, 'and the second layer''s 20, each waiting for one task');
SELECT is((SELECT count(*)::int FROM frameq.dispatch_queue WHERE layer = :render), 1,
		  'the first layer is queued');
SELECT is((SELECT array_agg(conname::text ORDER BY conname) FROM pg_constraint
			WHERE conrelid = 'frameq.frame'::regclass AND contype = 'f'),
		  NULL, 'frame has no foreign key');
SELECT is_empty('SELECT * FROM frameq.check()', 'check() is clean after the submits');

-- ------------------------------------ an INSERT's frames: checked at once

SELECT * FROM fqtest.refuses(format(
	'INSERT INTO frameq.frame (job, layer, number) VALUES (%s, 987654321, 1)', :job),
	'23503', 'a frame names layer 987654321, which does not exist',
	'a frame naming a layer that does not exist is refused with 23503');
SELECT * FROM fqtest.refuses(format(
	'INSERT INTO frameq.frame (job, layer, number) VALUES (987654321, %s, 101)', :render),
	'23503', 'a frame names job 987654321, which does not exist',
	'a frame naming a job that does not exist is refused with 23503');
SELECT * FROM fqtest.refuses(format(
	'INSERT INTO frameq.frame (job, layer, number) VALUES (%s, %s, 101)', :other, :render),
	'23503', format('a frame names job %s and layer %s, which is of job %s', :other, :render, :job),
	'a frame naming a layer of another job is refused with 23503');
SELECT * FROM fqtest.refuses(format(
	'INSERT INTO frameq.frame (job, layer, number)
	 SELECT %s, %s, n FROM generate_series(101, 150) n
	 UNION ALL SELECT %s, %s, 151', :job, :render, :job, :other_layer),
	'23503', 'a frame names job %, which is of job %',
	'an INSERT of 51 frames of which one names a layer of another job is refused whole');
SELECT * FROM fqtest.refuses(format(
	'COPY frameq.frame (job, layer, number) FROM PROGRAM %L',
	format('printf "%s\t%s\t101\n"', :job, 987654321)),
	'23503', 'a frame names layer 987654321, which does not exist',
	'COPY is checked too');

INSERT INTO frameq.frame (job, layer, number)
SELECT :job, :render, n FROM generate_series(101, 103) n;
SELECT is((SELECT count(*)::int FROM frameq.frame WHERE layer = :render AND number > 100 AND state = 'waiting'),
		  3, 'a direct INSERT of frames naming their job''s layer is taken');

-- ------------------------------------------- a frame's job and layer stay

SELECT * FROM fqtest.refuses(format('UPDATE frameq.frame SET job = %s WHERE layer = %s AND number = 1', :other, :render),
	'23000', 'column "job" of a frame cannot be changed',
	'UPDATE of a frame''s job is refused with 23000');
SELECT * FROM fqtest.refuses(format('UPDATE frameq.frame SET layer = %s WHERE layer = %s AND number = 101', :comp, :render),
	'23000', 'column "layer" of a frame cannot be changed',
	'UPDATE of a frame''s layer to another layer of its job is refused with 23000');
UPDATE frameq.frame SET job = job, layer = layer WHERE layer = :render AND number = 3;
SELECT pass('an UPDATE that sets a frame''s job and layer to what they are is taken');

-- --------------------- a layer and a job that frames name stay as they are

SELECT * FROM fqtest.refuses(format('DELETE FROM frameq.layer WHERE id = %s', :comp),
	'23503', format('layer %s is named by frames', :comp),
	'a layer with frames cannot be deleted (23503)');
SELECT * FROM fqtest.refuses(format('UPDATE frameq.layer SET id = id + 1000000 WHERE id = %s', :render),
	'23503', format('layer %s is named by frames', :render),
	'a layer with frames cannot take another id (23503)');
SELECT * FROM fqtest.refuses(format('UPDATE frameq.layer SET job = %s WHERE id = %s', :other, :render),
	'23503', format('layer %s is named by frames', :render),
	'a layer with frames cannot move to another job (23503)');
SELECT * FROM fqtest.refuses(format('DELETE FROM frameq.job WHERE id = %s', :job),
	'23503', NULL, 'a job with frames cannot be deleted (23503, by its layers'' key)');
SELECT * FROM fqtest.refuses(format('UPDATE frameq.job SET id = id + 1000000 WHERE id = %s', :job),
	'23503', NULL, 'a job with frames cannot take another id (23503)');
SELECT * FROM fqtest.refuses(format(
	'WITH l AS (DELETE FROM frameq.layer WHERE job = %s) DELETE FROM frameq.job WHERE id = %s', :job, :job),
	'23503', 'layer % is named by frames', 'a job deleted with its layers but not its frames is refused');
SELECT * FROM fqtest.refuses('TRUNCATE frameq.layer CASCADE', '0A000', 'cannot truncate frameq.layer: frames name its rows',
	'TRUNCATE ... CASCADE of layer is refused with 0A000 while frames exist');
SELECT * FROM fqtest.refuses('TRUNCATE frameq.job CASCADE', '0A000', 'cannot truncate frameq.%',
	'TRUNCATE ... CASCADE of job is refused with 0A000 while frames exist');
SELECT * FROM fqtest.refuses('TRUNCATE frameq.layer', '0A000', NULL,
	'TRUNCATE of layer is refused with 0A000');

-- ------------------------- a job deleted with its frames, in one statement

WITH f AS (DELETE FROM frameq.frame WHERE job = :other),
	 d AS (DELETE FROM frameq.dispatch_queue WHERE job = :other),
	 l AS (DELETE FROM frameq.layer WHERE job = :other)
DELETE FROM frameq.job WHERE id = :other;
SELECT is((SELECT count(*)::int FROM frameq.job WHERE id = :other)
		  + (SELECT count(*)::int FROM frameq.layer WHERE job = :other)
		  + (SELECT count(*)::int FROM frameq.frame WHERE job = :other),
		  0, 'one statement deleting a job, its layers and its frames (none ran) deletes them');

-- ------------------------- check() reports frames whose layer is not theirs

SET LOCAL session_replication_role = replica;
INSERT INTO frameq.frame (job, layer, number, state) VALUES (:job, 987654321, 1, 'succeeded');
INSERT INTO frameq.frame (job, layer, number, state) VALUES (:job + 1000000, :render, 999, 'succeeded');
SET LOCAL session_replication_role = origin;
SELECT bag_eq($$SELECT invariant, regexp_replace(detail, '\d+', 'N', 'g') FROM frameq.check()$$,
			  $$VALUES ('job state', 'frame N names layer N, which does not exist'),
					   ('job state', 'frame N is of job N but names layer N, which is of job N')$$,
			  'check() reports a frame whose layer is missing, and one whose layer is of another job');

SELECT * FROM finish();
ROLLBACK;
