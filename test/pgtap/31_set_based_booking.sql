/*
 * reserve() books the frames it takes from one layer with one UPDATE of the
 * frames and one INSERT of their procs; the proc insert trigger runs once
 * per statement and takes the host's room and opens the run records for
 * all of them.  A direct INSERT of several procs is checked the same way:
 * the host's room is taken for their sum, or the statement is refused.
 * proc and run carry no foreign keys; what the keys would guard, a frame
 * or host vanishing or renumbered under them, triggers refuse instead.
 */
BEGIN;
\ir include/helpers.psql

SELECT plan(43);

SELECT * FROM fqtest.farm('t31', cores => '{32,3}', memory => '{68719476736,17179869184}') \gset

SELECT frameq.submit($${"show": "t31show", "name": "many",
	"layers": [{"name": "l", "command": "c #FRAME#", "range": "1-40", "memory": "1GB"}]}$$) AS j_many \gset
SELECT frameq.submit($${"show": "t31show", "name": "direct", "paused": true,
	"layers": [{"name": "l", "command": "c", "range": "1-4"}]}$$) AS j_direct \gset
SELECT frameq.submit($${"show": "t31show", "name": "huge", "paused": true,
	"layers": [{"name": "l", "command": "c", "range": "1-3"}]}$$) AS j_huge \gset

-- count the statements that insert procs
CREATE TABLE fqtest.proc_inserts (n int NOT NULL);
INSERT INTO fqtest.proc_inserts VALUES (0);
CREATE FUNCTION fqtest.count_proc_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	UPDATE fqtest.proc_inserts SET n = n + 1;
	RETURN NULL;
END
$$;
CREATE TRIGGER zz_count AFTER INSERT ON frameq.proc
	FOR EACH STATEMENT EXECUTE FUNCTION fqtest.count_proc_insert();

-- ------------------------------------------------ reserve(max_frames 16)

CREATE TEMP TABLE b AS SELECT * FROM frameq.reserve('t31-h1', :'tok1', :epoch1, 16);
SELECT is((SELECT count(*)::int FROM b), 16, 'reserve(max_frames 16) books 16 frames');
SELECT is((SELECT n FROM fqtest.proc_inserts), 1, 'its 16 procs are inserted by one statement');
SELECT is((SELECT array_agg(frame_number ORDER BY frame_number) FROM b),
		  (SELECT array_agg(g) FROM generate_series(1, 16) g),
		  'they are frames 1 to 16, in frame order');
SELECT is((SELECT count(DISTINCT proc)::int FROM b), 16, 'each has its own run token');
SELECT is((SELECT (idle_cc, idle_memory) FROM frameq.host WHERE id = :host1),
		  (1600, 68719476736 - 16 * 1073741824::bigint),
		  'the host''s idle cores and memory dropped by the 16 frames'' sum');
SELECT is((SELECT count(*)::int FROM frameq.run r JOIN b ON b.proc = r.proc
			WHERE r.ended_at IS NULL AND r.host = :host1 AND r.cores_cc = 100),
		  16, 'every booking has an open run record on the host');
SELECT is((SELECT count(*)::int FROM frameq.frame WHERE job = :j_many AND state = 'running'
			 AND attempts = 1),
		  16, 'the 16 frames are running, one attempt each');
SELECT is((SELECT (used_cc, running) FROM frameq.ledger() WHERE kind = 'job' AND id = :j_many),
		  (1600, 16), 'the ledger charged the job once per frame');
SELECT is_empty('SELECT * FROM frameq.check()', 'check() is clean after a 16-frame reserve');

-- --------------------------------------- a direct INSERT of several procs

/*
 * A direct INSERT of procs for frames N1 and N2 of a job, as reserve() would
 * make them (the frames are started in the same statement): job, N1, N2,
 * proc id base (plus the frame number), host, epoch, show, allocation, cores_cc
 */
\set insert_two 'WITH f AS (UPDATE frameq.frame fr SET state = $q$running$q$, attempts = attempts + 1, version = version + 1 WHERE fr.job = %1$s AND fr.number IN (%2$s, %3$s) RETURNING fr.id, fr.job, fr.layer, fr.number) INSERT INTO frameq.proc (id, frame, host, epoch, job, layer, show, allocation, cores_cc, memory, gpus, gpu_memory) SELECT %4$s + f.number, f.id, %5$s, %6$s, f.job, f.layer, %7$s, %8$s, %9$s, 0, 0, 0 FROM f'

/* two procs of 2 cores each do not fit a host with 3 idle cores together */
SELECT * FROM fqtest.refuses(format(:'insert_two', :j_direct, 1, 2, 931000, :host2, :epoch2, :show, :alloc, 200),
	'FQ005', 'host % has no room for the procs inserted',
	'a direct INSERT of two procs that fit the host only one at a time is refused with FQ005');

/*
 * Three procs whose memory adds up past the largest bigint (to 2^64 + 2):
 * their sum must not wrap around to 2 bytes and fit.
 */
SELECT * FROM fqtest.refuses(format($$WITH f AS (UPDATE frameq.frame fr SET state = 'running', attempts = attempts + 1, version = version + 1 WHERE fr.job = %s RETURNING fr.id, fr.job, fr.layer, fr.number) INSERT INTO frameq.proc (id, frame, host, epoch, job, layer, show, allocation, cores_cc, memory, gpus, gpu_memory) SELECT 933000 + f.number, f.id, %s, %s, f.job, f.layer, %s, %s, 1, 6148914691236517206, 0, 0 FROM f$$,
		:j_huge, :host2, :epoch2, :show, :alloc),
	'FQ005', 'host % has no room for the procs inserted',
	'a direct INSERT of procs whose memory adds up past any bigint is refused with FQ005');

SELECT fqtest.attempt(format(:'insert_two', :j_direct, 3, 4, 932000, :host2, :epoch2, :show, :alloc, 100))
	AS two_insert \gset
SELECT is(:'two_insert'::text, 'ok', 'a direct INSERT of two procs that fit together is accepted');
SELECT is((SELECT idle_cc FROM frameq.host WHERE id = :host2), 100,
		  'the host''s idle cores dropped by both procs');
SELECT is((SELECT count(*)::int FROM frameq.run WHERE proc IN (932003, 932004) AND ended_at IS NULL),
		  2, 'both directly inserted procs have an open run record');
SELECT is((SELECT (used_cc, running) FROM frameq.ledger() WHERE kind = 'job' AND id = :j_direct),
		  (200, 2), 'both directly inserted procs are charged to their job');
SELECT is_empty('SELECT * FROM frameq.check()', 'check() is clean after a two-proc direct INSERT');

/* the host has one idle core left: reserve() books one more frame */
SELECT is((SELECT count(*)::int
			 FROM frameq.reserve('t31-h2', :'tok2', :epoch2, 16)), 1,
		  'a host with one idle core left books one more frame');
SELECT is_empty('SELECT * FROM frameq.check()', 'check() is clean at the end');

-- ------------------------------------------- charges taken before the claim

/*
 * reserve() charges the caps for as many frames as fit before it takes the
 * frames: what the layer did not have is given back, and a cap that binds
 * stops it at the cap.
 */
SELECT frameq.register_host('t31-h3', 't31.pool', 64, 68719476736) AS tok3 \gset
SELECT epoch AS epoch3 FROM frameq.attach('t31-h3', :'tok3', 'boot-1') \gset
SELECT id AS host3 FROM frameq.host WHERE name = 't31-h3' \gset
SELECT frameq.set_job(:j_many, paused => true) \g /dev/null
SELECT frameq.submit($${"show": "t31show", "name": "two", "priority": 90,
	"layers": [{"name": "l", "command": "c", "range": "1-2"}]}$$) AS j_two \gset
SELECT frameq.submit($${"show": "t31show", "name": "capped", "priority": 80, "max_cores": 3,
	"layers": [{"name": "l", "command": "c", "range": "1-10"}]}$$) AS j_capped \gset
CREATE TEMP TABLE b3 AS SELECT * FROM frameq.reserve('t31-h3', :'tok3', :epoch3, 16);
SELECT is((SELECT array_agg(job ORDER BY job, frame_number) FROM b3),
		  ARRAY[:j_two, :j_two, :j_capped, :j_capped, :j_capped]::bigint[],
		  'a 16-frame reserve takes the 2 frames of one job and 3 of a job capped at 3 cores');
SELECT is((SELECT (used_cc, running) FROM frameq.ledger() WHERE kind = 'job' AND id = :j_two),
		  (200, 2), 'the job with 2 frames is charged for 2, not for the 16 asked for');
SELECT is((SELECT (used_cc, running) FROM frameq.ledger() WHERE kind = 'job' AND id = :j_capped),
		  (300, 3), 'the capped job is charged up to its cap');
SELECT is((SELECT idle_cc FROM frameq.host WHERE id = :host3), 6400 - 500,
		  'the host gave up the room of 5 frames');
SELECT is_empty('SELECT * FROM frameq.check()', 'check() is clean after charges were given back');

/* more than 32 frames from one layer: 32 per statement, then the rest */
SELECT frameq.set_job(:j_two, paused => true) \g /dev/null
SELECT frameq.set_job(:j_capped, paused => true) \g /dev/null
SELECT frameq.submit($${"show": "t31show", "name": "forty", "priority": 70,
	"layers": [{"name": "l", "command": "c", "range": "1-40"}]}$$) AS j_forty \gset
SELECT frameq.register_host('t31-h4', 't31.pool', 64, 68719476736) AS tok4 \gset
SELECT epoch AS epoch4 FROM frameq.attach('t31-h4', :'tok4', 'boot-1') \gset
UPDATE fqtest.proc_inserts SET n = 0;
SELECT is((SELECT array_agg(frame_number ORDER BY frame_number)
			 FROM frameq.reserve('t31-h4', :'tok4', :epoch4, 40)),
		  (SELECT array_agg(g) FROM generate_series(1, 40) g),
		  'reserve(max_frames 40) books all 40 frames of a layer');
SELECT is((SELECT n FROM fqtest.proc_inserts), 2, 'in two statements: 32 frames, then 8');
SELECT is_empty('SELECT * FROM frameq.check()', 'check() is clean after a 40-frame reserve');

-- ------------------------------- what foreign keys would guard, kept

/* proc and run carry no foreign keys; their frame and host are guarded */
SELECT * FROM fqtest.refuses(format(
	$$INSERT INTO frameq.proc (id, frame, host, epoch, job, layer, show, allocation,
							   cores_cc, memory, gpus, gpu_memory)
	  SELECT 933001, 987654321, %s, %s, %s, l.id, %s, %s, 100, 0, 0, 0
	    FROM frameq.layer l WHERE l.job = %s$$,
	:host2, :epoch2, :j_direct, :show, :alloc, :j_direct),
	'23503', 'proc 933001 names frame 987654321 and host %, and one of them does not exist',
	'a direct INSERT of a proc naming a frame that does not exist is refused with 23503');
SELECT * FROM fqtest.refuses(format(
	$$INSERT INTO frameq.proc (id, frame, host, epoch, job, layer, show, allocation,
							   cores_cc, memory, gpus, gpu_memory)
	  SELECT 933002, f.id, 987654, 0, f.job, f.layer, %s, %s, 100, 0, 0, 0
	    FROM frameq.frame f WHERE f.job = %s AND f.number = 1$$,
	:show, :alloc, :j_direct),
	'23503', 'proc 933002 names frame % and host 987654, and one of them does not exist',
	'a direct INSERT of a proc naming a host that does not exist is refused with 23503');
SELECT * FROM fqtest.refuses(format('DELETE FROM frameq.host WHERE id = %s', :host1),
	'23503', 'host % is named by a proc or a run record',
	'a host with procs cannot be deleted');
SELECT * FROM fqtest.refuses(format('DELETE FROM frameq.frame WHERE job = %s AND number = 1', :j_many),
	'23503', 'frame % is named by a proc or a run record',
	'a frame with a proc cannot be deleted');
SELECT * FROM fqtest.refuses(format('UPDATE frameq.frame SET id = id + 1000000000 WHERE job = %s AND number = 2', :j_many),
	'23503', 'frame % is named by a proc or a run record',
	'a frame with a proc cannot take another id');
SELECT * FROM fqtest.refuses('TRUNCATE frameq.host CASCADE', '0A000', 'cannot truncate frameq.host%',
	'frameq.host cannot be truncated');
SELECT * FROM fqtest.refuses('TRUNCATE frameq.job CASCADE', '0A000', 'cannot truncate frameq.%',
	'frameq.frame cannot be truncated, not even by a cascade');
SELECT frameq.register_host('t31-spare', 't31.pool', 1, 1073741824) \g /dev/null
DELETE FROM frameq.host WHERE name = 't31-spare';
SELECT is((SELECT count(*)::int FROM frameq.host WHERE name = 't31-spare'), 0,
		  'a host that never ran anything can be deleted');

SELECT * FROM finish();
ROLLBACK;
