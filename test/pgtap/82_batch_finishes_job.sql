/*
 * A complete_many() that ends a job's last tasks (doc/reference.md,
 * complete_many): the job is finished in the same transaction, once, as
 * one complete() per task would have left it; a batch over two jobs
 * finishes the one whose last tasks it ends and only that one; a batch
 * whose last task goes back to waiting (a failure with a retry left)
 * finishes nothing.  complete_many() asks whether a job has ended once,
 * after the batch's last release of it (src/release.c, settle_reports).
 *
 * A trigger of the test's own counts the jobs' transitions to finished.
 * The file is one transaction (BEGIN ... ROLLBACK).
 */
BEGIN;
\ir include/helpers.psql

SELECT plan(22);

CREATE TABLE fqtest.finishes (job bigint, finished_at timestamptz);
CREATE FUNCTION fqtest.count_finish() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO fqtest.finishes VALUES (NEW.id, NEW.finished_at);
	RETURN NULL;
END
$$;
CREATE TRIGGER t81_count_finish AFTER UPDATE OF state ON frameq.job
	FOR EACH ROW WHEN (NEW.state = 'finished') EXECUTE FUNCTION fqtest.count_finish();

SELECT * FROM fqtest.farm('t81', cores => '{8}') \gset

-- ------------------------------------------------ one batch ends a job's last tasks

/* job "last" of 4 tasks, and a job that waits for it (after_jobs) */
SELECT frameq.submit($${"show": "t81show", "name": "last", "priority": 90,
	"layers": [{"name": "l", "command": "c", "range": "1-4", "memory": "1GB"}]}$$) AS last \gset
SELECT frameq.submit(format($${"show": "t81show", "name": "after-last", "priority": 10, "after_jobs": [%s],
	"layers": [{"name": "l", "command": "c", "range": "1-3", "memory": "1GB"}]}$$, :last)::jsonb) AS after_last \gset
CREATE TEMP TABLE b1 AS SELECT proc FROM frameq.reserve('t81-h1', :'tok1', :epoch1, 8);
SELECT is((SELECT count(*)::int FROM b1 JOIN frameq.proc p ON p.id = b1.proc WHERE p.job = :last), 4,
		  'the host runs the 4 tasks of "last" (its dependent is held)');

SELECT is(frameq.complete_many('t81-h1', :'tok1', :epoch1, (SELECT array_agg(proc ORDER BY proc DESC) FROM b1),
								'{0, 0, 0, 0}'),
		  '{accepted,accepted,accepted,accepted}', 'one batch reports all four');
SELECT is((SELECT state FROM frameq.job WHERE id = :last), 'finished', 'the job is finished');
SELECT ok((SELECT finished_at IS NOT NULL FROM frameq.job WHERE id = :last), 'with its finished_at');
SELECT is((SELECT count(*)::int FROM fqtest.finishes WHERE job = :last), 1, 'finished once, in this transaction');
SELECT results_eq(format($$SELECT state, count(*)::int FROM frameq.frames WHERE job = %s GROUP BY 1$$, :last),
				  $$VALUES ('succeeded'::text, 4)$$, 'its four tasks succeeded');
SELECT results_eq(format($$SELECT state, count(*)::int FROM frameq.frames WHERE job = %s GROUP BY 1$$, :after_last),
				  $$VALUES ('waiting'::text, 3)$$,
				  'and the job that waited for it is free in the same transaction (its 3 tasks waiting)');
SELECT is((SELECT count(*)::int FROM frameq.check()), 0, 'check() finds nothing wrong');

-- ------------------------------------------------ a batch over two jobs, one of which ends

/*
 * Jobs "two" (2 tasks, priority 80) and "more" (6 tasks, priority 70): the
 * host books 6, both of "two" and 4 of "more" ("after-last" paused).
 */
SELECT frameq.set_job(:after_last, paused => true) \g /dev/null
SELECT frameq.submit($${"show": "t81show", "name": "two", "priority": 80,
	"layers": [{"name": "l", "command": "c", "range": "1-2", "memory": "1GB"}]}$$) AS two \gset
SELECT frameq.submit($${"show": "t81show", "name": "more", "priority": 70,
	"layers": [{"name": "l", "command": "c", "range": "1-6", "memory": "1GB"}]}$$) AS more \gset
CREATE TEMP TABLE b2 AS
	SELECT proc, job FROM frameq.reserve('t81-h1', :'tok1', :epoch1, 6);
SELECT results_eq($$SELECT job, count(*)::int FROM b2 GROUP BY 1 ORDER BY 1$$,
				  format($$VALUES (%s::bigint, 2), (%s, 4)$$, :two, :more),
				  'the host runs both tasks of "two" and 4 of the 6 of "more"');

SELECT is(frameq.complete_many('t81-h1', :'tok1', :epoch1, (SELECT array_agg(proc ORDER BY proc) FROM b2),
								'{0, 0, 0, 0, 0, 0}'),
		  '{accepted,accepted,accepted,accepted,accepted,accepted}', 'one batch reports the six');
SELECT is((SELECT state FROM frameq.job WHERE id = :two), 'finished', '"two" is finished');
SELECT is((SELECT count(*)::int FROM fqtest.finishes WHERE job = :two), 1, 'once');
SELECT is((SELECT state FROM frameq.job WHERE id = :more), 'active', '"more", with 2 tasks waiting, is not');
SELECT is((SELECT count(*)::int FROM fqtest.finishes WHERE job = :more), 0, 'and was never finished');
SELECT results_eq(format($$SELECT state, count(*)::int FROM frameq.frames WHERE job = %s GROUP BY 1 ORDER BY 1$$, :more),
				  $$VALUES ('succeeded'::text, 4), ('waiting', 2)$$, 'its tasks: 4 succeeded, 2 waiting');

-- ------------------------------------------------ a last task back to waiting finishes nothing

/*
 * The last 2 tasks of "more" end in one batch, one of them failing with
 * its retries left: it is waiting again, so the job goes on; the same
 * task's next success, by complete(), finishes it.
 */
CREATE TEMP TABLE b3 AS SELECT proc FROM frameq.reserve('t81-h1', :'tok1', :epoch1, 2);
SELECT is((SELECT count(*)::int FROM b3 JOIN frameq.proc p ON p.id = b3.proc WHERE p.job = :more), 2,
		  'the host runs the last 2 tasks of "more"');
SELECT is(frameq.complete_many('t81-h1', :'tok1', :epoch1, (SELECT array_agg(proc ORDER BY proc) FROM b3), '{0, 1}'),
		  '{accepted,accepted}', 'one succeeds, one fails');
SELECT is((SELECT state FROM frameq.job WHERE id = :more), 'active', 'the job goes on');
SELECT is((SELECT count(*)::int FROM fqtest.finishes WHERE job = :more), 0, 'unfinished');
SELECT proc AS again FROM frameq.reserve('t81-h1', :'tok1', :epoch1, 1) \gset
SELECT is(frameq.complete('t81-h1', :'tok1', :epoch1, :again, 0), 'accepted', 'its retry succeeds');
SELECT is((SELECT count(*)::int FROM fqtest.finishes WHERE job = :more), 1, 'and complete() finishes the job, once');
SELECT is((SELECT count(*)::int FROM frameq.check()), 0, 'check() finds nothing wrong');

SELECT * FROM finish();
ROLLBACK;
