/*
 * Issue 15, the retry after an OOM (frameq 0.6.0): complete(..., oom =>
 * true) raises the task's memory to 1.5 times its booking or its peak,
 * whichever is more, capped by the largest host that could run it; the
 * task is then booked only at that size, by hosts with that much free,
 * from a dispatch queue row of its own, and never by a host that has only
 * the layer's size free; frames.memory shows the requirement; a peak above
 * the largest host makes the task dead with frames.dead_reason saying so,
 * whatever its retries; retry_frame clears the reason and keeps the size;
 * a raise no higher than the layer's own leaves frame.memory NULL; check()
 * stays clean throughout, and reports a raised task that lost its row.
 */
BEGIN;
\ir include/helpers.psql

SELECT plan(32);

/* hosts of 1, 4 and 6 GiB; a fourth, retired, of 64 GiB must not count */
SELECT * FROM fqtest.farm('t59', cores => '{8,8,8}',
						  memory => '{1073741824,4294967296,6442450944}') \gset
SELECT frameq.register_host('t59-gone', 't59.pool', 8, 68719476736) AS _ \gset
SELECT frameq.retire_host('t59-gone') AS _ \gset
SELECT frameq.submit($${"show": "t59show", "name": "j", "max_retries": 3,
	"layers": [{"name": "l", "command": "c #FRAME#", "range": "1-3", "memory": "1GB"}]}$$) AS job \gset
SELECT id AS layer FROM frameq.layer WHERE job = :job \gset
CREATE FUNCTION pg_temp.f(n int) RETURNS bigint LANGUAGE sql AS $$
	SELECT id FROM frameq.frame WHERE job = (SELECT max(id) FROM frameq.job WHERE name = 'j') AND number = n $$;
CREATE FUNCTION pg_temp.p(n int) RETURNS bigint LANGUAGE sql AS $$
	SELECT id FROM frameq.proc WHERE frame = pg_temp.f(n) $$;
CREATE FUNCTION pg_temp.task(n int) RETURNS text LANGUAGE sql AS $$
	SELECT format('%s retries %s memory %s', f.state, f.retries, f.memory)
	  FROM frameq.frame f WHERE f.id = pg_temp.f(n) $$;
CREATE FUNCTION pg_temp.clean() RETURNS bigint LANGUAGE sql AS $$
	SELECT count(*) FROM frameq.check() $$;
CREATE FUNCTION pg_temp.booked(host text, tok text, epoch bigint, n int) RETURNS text
LANGUAGE sql AS $$
	SELECT coalesce(string_agg(format('%s:%s', b.frame_number, b.memory), ' ' ORDER BY b.frame_number), '')
	  FROM frameq.reserve(host, tok, epoch, n) b $$;

/* 1: frame 1 on the 4 GiB host, killed for memory at a peak of 1.2 GiB */
SELECT is(pg_temp.booked('t59-h2', :'tok2', :epoch2, 1), '1:1073741824', 'frame 1 booked at 1 GiB');
SELECT is(frameq.complete('t59-h2', :'tok2', :epoch2, pg_temp.p(1), 137, 9, 1288490189, true),
	'accepted', 'reported killed for memory');
SELECT is(pg_temp.task(1), 'waiting retries 1 memory 1610612736',
	'raised to 1.5 times its booking (more than its peak), a retry used');
SELECT is((SELECT memory FROM frameq.frames WHERE frame = pg_temp.f(1)), 1610612736::bigint,
	'frames.memory shows the raised requirement');
SELECT is((SELECT memory FROM frameq.frames WHERE frame = pg_temp.f(2)), 1073741824::bigint,
	'and the layer''s for a task never raised');
SELECT is((SELECT reason FROM frameq.run WHERE proc = (SELECT max(proc) FROM frameq.run r
		   WHERE r.frame = pg_temp.f(1))), 'oom', 'its run ended oom');
SELECT is((SELECT count(*)::int FROM frameq.dispatch_queue WHERE layer = :layer AND memory = 1610612736),
	1, 'the raised size has a queue row of its own');
SELECT is(pg_temp.clean(), 0::bigint, 'check() is clean');

/* 2: the 1 GiB host books the layer's size only: frame 2, never frame 1 */
SELECT is(pg_temp.booked('t59-h1', :'tok1', :epoch1, 3), '2:1073741824',
	'a host with only the layer''s size free books a task of that size, not the raised one');

/* 3: the 4 GiB host books frame 3 and the raised frame 1, at its raised size */
SELECT is(pg_temp.booked('t59-h2', :'tok2', :epoch2, 3), '1:1610612736 3:1073741824',
	'a host with room books the raised task at its size');
SELECT is((SELECT memory FROM frameq.proc WHERE id = pg_temp.p(1)), 1610612736::bigint,
	'its proc holds the raised size');
SELECT is((SELECT idle_memory FROM frameq.host WHERE name = 't59-h2'), 4294967296 - 1610612736 - 1073741824,
	'and the host gave that much of its memory');
SELECT is(pg_temp.clean(), 0::bigint, 'check() is clean');

/* 4: killed again, peak 5 GiB: raised to its peak */
SELECT is(frameq.complete('t59-h2', :'tok2', :epoch2, pg_temp.p(1), 137, 9, 5368709120, true),
	'accepted', 'killed for memory again');
SELECT is(pg_temp.task(1), 'waiting retries 2 memory 5368709120', 'raised to its peak, above 1.5 times');
SELECT is(pg_temp.booked('t59-h2', :'tok2', :epoch2, 3), '',
	'the 4 GiB host (3 GiB free) cannot take it');
SELECT is(pg_temp.booked('t59-h3', :'tok3', :epoch3, 3), '1:5368709120', 'the 6 GiB host takes it');

/* 5: a peak above the largest host that could run it: dead, saying why, retries left or not */
SELECT is(frameq.complete('t59-h3', :'tok3', :epoch3, pg_temp.p(1), 137, 9, 7516192768, true),
	'accepted', 'killed for memory at a peak of 7 GiB');
SELECT is(pg_temp.task(1), 'dead retries 3 memory 8053063680',
	'dead though it had a retry left; its requirement is 1.5 times its booking');
SELECT is((SELECT dead_reason FROM frameq.frames WHERE frame = pg_temp.f(1)),
	'killed for memory: its peak of 7516192768 bytes is more than the largest host that could run it has (6442450944)',
	'frames.dead_reason says why (the retired 64 GiB host does not count)');
SELECT is(pg_temp.clean(), 0::bigint, 'check() is clean');

/* 6: retry_frame: the reason goes, the size stays; the task waits for a host that big */
SELECT frameq.retry_frame(pg_temp.f(1)) AS _ \gset
SELECT is(pg_temp.task(1) || ' ' || coalesce((SELECT dead_reason FROM frameq.frames WHERE frame = pg_temp.f(1)), '-'),
	'waiting retries 0 memory 8053063680 -', 'retry_frame clears the reason and keeps the raised size');
SELECT is(pg_temp.booked('t59-h3', :'tok3', :epoch3, 3), '', 'no host books it while none is that big');
SELECT is(pg_temp.clean(), 0::bigint, 'check() is clean with the task waiting');

/* 7: a raise capped at the layer's own size (as big as the largest host) leaves frame.memory NULL */
SELECT frameq.submit($${"show": "t59show", "name": "k", "max_retries": 3,
	"layers": [{"name": "full", "command": "c", "range": "1", "memory": 6442450944}]}$$) AS job2 \gset
SELECT b.proc AS kproc, b.frame AS kframe FROM frameq.reserve('t59-h3', :'tok3', :epoch3, 2) b
 WHERE b.job = :job2 \gset
SELECT is(frameq.complete('t59-h3', :'tok3', :epoch3, :kproc, 137, 9, 6000000000, true),
	'accepted', 'a 6 GiB layer killed for memory');
SELECT is((SELECT format('%s %s', f.state, f.memory) FROM frameq.frame f WHERE f.id = :kframe),
	'waiting ', 'the largest host caps its raise at its own size: frame.memory stays NULL');
SELECT is((SELECT memory FROM frameq.frames WHERE frame = :kframe), 6442450944::bigint,
	'frames.memory shows the layer''s');
SELECT is(pg_temp.clean(), 0::bigint, 'check() is clean');

/* 8: no peak reported: 1.5 times the booking; retries used up: dead for them, no reason */
SELECT frameq.submit($${"show": "t59show", "name": "m", "max_retries": 0,
	"layers": [{"name": "l", "command": "c", "range": "1", "memory": "1GB"}]}$$) AS job3 \gset
SELECT b.proc AS mproc, b.frame AS mframe FROM frameq.reserve('t59-h2', :'tok2', :epoch2, 4) b
 WHERE b.job = :job3 \gset
SELECT is(frameq.complete('t59-h2', :'tok2', :epoch2, :mproc, 137, 9, NULL, true), 'accepted',
	'oom with no peak reported, no retries left');
SELECT is((SELECT format('%s %s %s', state, memory, dead_reason) FROM frameq.frame WHERE id = :mframe),
	'dead 1610612736 ', 'dead for its retries, with no reason of memory, its requirement raised 1.5 times');

/* 9: check() reports a raised waiting task whose size's row is gone */
SELECT frameq.retry_frame(:mframe) AS _ \gset
DELETE FROM frameq.dispatch_queue WHERE layer = (SELECT layer FROM frameq.frame WHERE id = :mframe)
   AND memory = 1610612736;
SELECT ok((SELECT count(*) FROM frameq.check() c WHERE c.invariant = 'no waiting frame is passed over'
			AND c.detail LIKE '%raised to 1610612736 bytes%') > 0,
	'check() reports a raised task without a row of its size');
SELECT is(pg_temp.booked('t59-h2', :'tok2', :epoch2, 4), '',
	'(and reserve() indeed cannot find it)');

SELECT * FROM finish();
ROLLBACK;
