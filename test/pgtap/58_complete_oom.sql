/*
 * Issue 15, complete()'s oom argument (frameq 0.5.0): a render its agent
 * killed for memory, or that the kernel killed with proof, ends its run
 * with reason oom and uses up a retry like any failure of the render,
 * whatever its exit status (even 0); it counts against the host for the
 * job; a pending kill order still wins (reason killed, no retry); oom false
 * or absent changes nothing; the seven-argument call of older agents still
 * works.  (Raising the task's memory for its next run is not built yet.)
 */
BEGIN;
\ir include/helpers.psql

SELECT plan(12);

SELECT * FROM fqtest.farm('t58', cores => '{8}') \gset
SELECT frameq.submit($${"show": "t58show", "name": "j", "max_retries": 1,
	"layers": [{"name": "l", "command": "c", "range": "1-5"}]}$$) AS job \gset
CREATE TEMP TABLE booked AS
	SELECT b.frame_number AS n, b.proc, b.frame FROM frameq.reserve('t58-h1', :'tok1', :epoch1, 5) b;
SELECT is((SELECT count(*)::int FROM booked), 5, 'five tasks booked');

CREATE FUNCTION pg_temp.p(n int) RETURNS bigint LANGUAGE sql AS $$ SELECT proc FROM booked WHERE booked.n = p.n $$;
CREATE FUNCTION pg_temp.f(n int) RETURNS bigint LANGUAGE sql AS $$ SELECT frame FROM booked WHERE booked.n = f.n $$;
CREATE FUNCTION pg_temp.run(n int) RETURNS text LANGUAGE sql AS $$
	SELECT format('%s %s/%s %s', r.reason, r.exit_status, r.exit_signal, r.max_rss)
	  FROM frameq.run r WHERE r.proc = pg_temp.p(n)
$$;
CREATE FUNCTION pg_temp.task(n int) RETURNS text LANGUAGE sql AS $$
	SELECT format('%s retries %s', state, retries) FROM frameq.frame WHERE id = pg_temp.f(n)
$$;

/* 1: the agent's enforcement kill: SIGKILL, oom */
SELECT is(frameq.complete('t58-h1', :'tok1', :epoch1, pg_temp.p(1), 137, 9, 3000000000, true),
	'accepted', 'complete with oom => true is accepted');
SELECT is(pg_temp.run(1), 'oom 137/9 3000000000', 'the run ends oom, with its exit and peak memory');
SELECT is(pg_temp.task(1), 'waiting retries 1', 'it used up a retry, and the task goes back to waiting');

/* 2: an oom with exit 0 is no success */
SELECT is(frameq.complete('t58-h1', :'tok1', :epoch1, pg_temp.p(2), 0, 0, 10, oom => true),
	'accepted', 'an oom report with exit status 0');
SELECT is(pg_temp.task(2) || ' / ' || pg_temp.run(2), 'waiting retries 1 / oom 0/0 10',
	'is a failure too: reason oom, a retry used');

/* 3: oom false, and the seven-argument call, are as before */
SELECT is(frameq.complete('t58-h1', :'tok1', :epoch1, pg_temp.p(3), 0, 0, 10, false), 'accepted', 'oom => false');
SELECT is(pg_temp.task(3) || ' / ' || pg_temp.run(3), 'succeeded retries 0 / completed 0/0 10',
	'with oom false, exit 0 succeeds');
SELECT is(frameq.complete('t58-h1', :'tok1', :epoch1, pg_temp.p(4), 1, 0, 10), 'accepted',
	'the seven-argument call of an older agent');
SELECT is(pg_temp.task(4) || ' / ' || pg_temp.run(4), 'waiting retries 1 / completed 1/0 10',
	'is an ordinary failure');

/* 4: a pending kill order wins */
SELECT frameq.kill_frame(pg_temp.f(5), 'wrong frame') AS _ \gset
SELECT frameq.complete('t58-h1', :'tok1', :epoch1, pg_temp.p(5), 137, 9, 10, true) AS _ \gset
SELECT is(pg_temp.task(5) || ' / ' || pg_temp.run(5), 'dead retries 0 / killed 137/9 10',
	'a render with a kill order pending ends killed, where the kill wanted, no retry used, even with oom');

/* the failures on this host: 1, 2 (oom) and 4 */
SELECT is((SELECT failures FROM frameq.job_host_failure WHERE job = :job), 3,
	'each oom counts against the host for the job, as the ordinary failure does');

SELECT * FROM finish();
ROLLBACK;
