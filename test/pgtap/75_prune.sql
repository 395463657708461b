/*
 * Issue 16, prune() (frameq 0.6.0): it removes the jobs that ended
 * (finished or killed) longer ago than its argument, with their layers,
 * tasks, runs and dependencies, and returns how many jobs; it keeps a
 * killed job whose kill orders still run (a live proc), a prerequisite of
 * a job not yet ended, a killed job still waiting on a prerequisite not
 * yet ended, and a job that ended too recently; the runs it removes still
 * count in frameq_runs_ended_total (the worker's count, _count_history,
 * adds what prune removed); bad arguments are refused with their
 * SQLSTATE and change nothing; only frameq_admin may call it.
 */
BEGIN;
\ir include/helpers.psql

SELECT plan(33);

SELECT * FROM fqtest.farm('t75', cores => '{8}') \gset
/* book every bookable frame on the host and complete each with exit 0; returns how many */
CREATE FUNCTION pg_temp.run_all(tok text, epoch bigint) RETURNS int LANGUAGE plpgsql AS $$
DECLARE
	b record;
	n int := 0;
BEGIN
	FOR b IN SELECT * FROM frameq.reserve('t75-h1', tok, epoch, 100) LOOP
		PERFORM frameq.complete('t75-h1', tok, epoch, b.proc, 0);
		n := n + 1;
	END LOOP;
	RETURN n;
END $$;
CREATE FUNCTION pg_temp.submit(name text, range text, extra jsonb DEFAULT '{}') RETURNS bigint
LANGUAGE sql AS $$
	SELECT frameq.submit(jsonb_build_object('show', 't75show', 'name', name,
		'layers', jsonb_build_array(jsonb_build_object('name', 'l', 'command', 'c #FRAME#',
															'range', range))) || extra) $$;
CREATE FUNCTION pg_temp.rows_of(j bigint) RETURNS text LANGUAGE sql AS $$
	SELECT format('job %s layers %s frames %s runs %s depends %s',
		(SELECT count(*) FROM frameq.job WHERE id = j),
		(SELECT count(*) FROM frameq.layer WHERE job = j),
		(SELECT count(*) FROM frameq.frame WHERE job = j),
		(SELECT count(*) FROM frameq.run WHERE job = j),
		(SELECT count(*) FROM frameq.depend WHERE job = j OR on_job = j)) $$;
CREATE FUNCTION pg_temp.age(j bigint, ago interval) RETURNS void LANGUAGE sql AS $$
	UPDATE frameq.job SET finished_at = clock_timestamp() - ago WHERE id = j $$;

/* old: finished two days ago, two frames, two runs */
SELECT pg_temp.submit('old', '1-2') AS old \gset
SELECT is(pg_temp.run_all(:'tok1', :epoch1), 2, 'old: both frames ran');
SELECT is((SELECT state FROM frameq.job WHERE id = :old), 'finished', 'old is finished');
SELECT pg_temp.age(:old, '2 days');

/* recent: finished an hour ago */
SELECT pg_temp.submit('recent', '1') AS recent \gset
SELECT is(pg_temp.run_all(:'tok1', :epoch1), 1, 'recent: its frame ran');
SELECT pg_temp.age(:recent, '1 hour');

/* prereq (finished) of dependent (active, its frame waiting) */
SELECT pg_temp.submit('prereq', '1') AS prereq \gset
SELECT pg_temp.submit('dependent', '1', jsonb_build_object('after_jobs', jsonb_build_array(:prereq))) AS dependent \gset
SELECT is(pg_temp.run_all(:'tok1', :epoch1), 1, 'prereq: its frame ran, the dependent''s did not');
SELECT is((SELECT state FROM frameq.job WHERE id = :prereq), 'finished', 'prereq is finished');
SELECT pg_temp.age(:prereq, '2 days');

/* held: killed while waiting on a paused (never ended) job */
SELECT pg_temp.submit('held_on', '1', '{"paused": true}') AS held_on \gset
SELECT pg_temp.submit('held', '1', jsonb_build_object('after_jobs', jsonb_build_array(:held_on))) AS held \gset
SELECT frameq.kill_job(:held, 'not wanted');
SELECT pg_temp.age(:held, '2 days');

/* busy: killed with its render still running (a kill order); first in line, before dependent */
SELECT pg_temp.submit('busy', '1', '{"priority": 10}') AS busy \gset
SELECT proc AS busy_proc FROM frameq.reserve('t75-h1', :'tok1', :epoch1, 1) \gset
SELECT frameq.kill_job(:busy, 'stop');
SELECT pg_temp.age(:busy, '2 days');
SELECT is((SELECT state FROM frameq.proc WHERE id = :busy_proc), 'killing', 'busy''s proc is a kill order');

SELECT frameq._count_history() AS _ \gset
SELECT value AS completed_before FROM frameq.metrics
 WHERE name = 'frameq_runs_ended_total' AND labels->>'reason' = 'completed' \gset
SELECT is(:completed_before::int, 4, 'four runs completed so far (old 2, recent, prereq)');

/* bad arguments: refused, nothing changed */
SELECT fqtest.state() AS before \gset
SELECT throws_ok('SELECT frameq.prune(NULL)', '22004', 'finished_before must not be null',
	'a null finished_before is refused');
SELECT throws_ok($$SELECT frameq.prune('-1 second')$$, '22023', NULL,
	'a negative finished_before is refused');
SELECT throws_like($$SELECT frameq.prune('-1 second')$$, '%finished_before must not be negative%',
	'naming the field');
SELECT throws_ok($$SELECT frameq.prune('101 years')$$, '54000', NULL,
	'finished_before past 100 years is refused');
SELECT throws_like($$SELECT frameq.prune('101 years')$$, '%finished_before is past its bound%',
	'naming the field and the bound');
SELECT is(fqtest.state(), :'before', 'the refused calls changed nothing');

/* prune what ended more than a day ago */
SELECT is(frameq.prune('1 day'), 1::bigint, 'prune(1 day) removes one job');
SELECT is(pg_temp.rows_of(:old), 'job 0 layers 0 frames 0 runs 0 depends 0',
	'old is gone with its layer, frames and runs');
SELECT is(pg_temp.rows_of(:recent), 'job 1 layers 1 frames 1 runs 1 depends 0',
	'recent (ended an hour ago) stays');
SELECT is(pg_temp.rows_of(:prereq), 'job 1 layers 1 frames 1 runs 1 depends 1',
	'prereq stays: its dependent has not ended');
SELECT is(pg_temp.rows_of(:held), 'job 1 layers 1 frames 1 runs 0 depends 1',
	'held stays: it waits on a job that has not ended');
SELECT is(pg_temp.rows_of(:busy), 'job 1 layers 1 frames 1 runs 1 depends 0',
	'busy stays: its proc still runs');
SELECT frameq._count_history() AS _ \gset
SELECT is((SELECT value FROM frameq.metrics WHERE name = 'frameq_runs_ended_total'
			AND labels->>'reason' = 'completed'), :completed_before::float8,
	'frameq_runs_ended_total{reason="completed"}, counted again, did not go down');
SELECT is((SELECT value FROM frameq.metrics WHERE name = 'frameq_jobs_pruned_total'), 1::float8,
	'frameq_jobs_pruned_total counts it');
SELECT is((SELECT count(*)::int FROM frameq.check()), 0, 'check() is clean');

/* what held them ends: the render is confirmed dead, the dependent and held_on finish or die */
SELECT is(frameq.complete('t75-h1', :'tok1', :epoch1, :busy_proc, 0, 9), 'accepted',
	'busy''s render ends');
SELECT frameq.kill_job(:dependent, 'done with it');
SELECT frameq.kill_job(:held_on, 'done with it');
SELECT is(frameq.prune('1 day'), 3::bigint, 'now prereq, held and busy go');
SELECT is(pg_temp.rows_of(:busy), 'job 0 layers 0 frames 0 runs 0 depends 0', 'busy is gone');
SELECT is((SELECT count(*)::int FROM frameq.depend WHERE :prereq IN (job, on_job) OR :held IN (job, on_job)),
	0, 'and their dependencies');
/* the worker's batches: at most max_jobs, and no more tasks than max_tasks, but at least one job */
SELECT is(frameq._prune_batch(clock_timestamp(), 10, 1), 1::bigint,
	'a batch with a budget of 1 task still takes one whole job');
SELECT is(frameq._prune_batch(clock_timestamp() - interval '1 day', 10, 1000), 0::bigint,
	'a batch finds nothing that ended before its cutoff');
CREATE ROLE t75_admin IN ROLE frameq_admin;
SET LOCAL ROLE t75_admin;
SELECT is(frameq.prune('0'), 2::bigint, 'prune(0), by a frameq_admin, removes every ended job left');
RESET ROLE;
SELECT is((SELECT count(*)::int FROM frameq.job WHERE show = :show), 0, 'no job of the show is left');
SELECT frameq._count_history() AS _ \gset
SELECT is((SELECT value FROM frameq.metrics WHERE name = 'frameq_runs_ended_total'
			AND labels->>'reason' = 'completed'), :completed_before::float8,
	'frameq_runs_ended_total{reason="completed"} still did not go down');
SELECT is((SELECT value FROM frameq.metrics WHERE name = 'frameq_runs_ended_total'
			AND labels->>'reason' = 'killed'), 1::float8, 'nor the killed run''s');

/* who may prune */
SET LOCAL ROLE frameq_reader;
SELECT throws_ok($$SELECT frameq.prune('1 day')$$, '42501', NULL, 'frameq_reader may not prune');
RESET ROLE;

SELECT * FROM finish();
ROLLBACK;
