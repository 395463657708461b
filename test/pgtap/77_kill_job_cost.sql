/*
 * kill_job costs what the job holds, not its square: each live task is
 * killed as kill_frame would kill it, but set-based, and whether the job
 * is done is asked once, not after every task (which read past every task
 * already killed: 16 minutes for a job of 1,000,000 waiting tasks).  The
 * buffers a kill_job of 4,000 waiting tasks touches (EXPLAIN BUFFERS, its
 * nested statements included) are at most 6 times those of one of 1,000:
 * 4 is linear, 16 quadratic.  Counted, not timed.
 */
BEGIN;
\ir include/helpers.psql

SELECT plan(5);

SELECT * FROM fqtest.farm('t77', cores => '{8}') \gset
SELECT frameq.submit($${"show": "t77show", "name": "small",
	"layers": [{"name": "l", "command": "c", "range": "1-1000"}]}$$) AS small \gset
SELECT frameq.submit($${"show": "t77show", "name": "big",
	"layers": [{"name": "l", "command": "c", "range": "1-4000"}]}$$) AS big \gset
CREATE FUNCTION pg_temp.blocks(sql text) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
	plan json;
BEGIN
	EXECUTE 'EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) ' || sql INTO plan;
	RETURN (plan -> 0 -> 'Plan' ->> 'Shared Hit Blocks')::bigint
		 + (plan -> 0 -> 'Plan' ->> 'Shared Read Blocks')::bigint;
END
$$;
SELECT pg_temp.blocks(format($$SELECT frameq.kill_job(%s, 'scale test')$$, :small)) AS b_small \gset
SELECT pg_temp.blocks(format($$SELECT frameq.kill_job(%s, 'scale test')$$, :big)) AS b_big \gset
SELECT is((SELECT count(*)::int FROM frameq.frame WHERE job = :small AND state = 'dead'), 1000,
	'the small job''s 1,000 tasks are dead');
SELECT is((SELECT count(*)::int FROM frameq.frame WHERE job = :big AND state = 'dead'), 4000,
	'the big job''s 4,000 tasks are dead');
SELECT is((SELECT state FROM frameq.job WHERE id = :big), 'killed', 'the job is killed');
SELECT cmp_ok(:b_big::numeric / :b_small, '<=', 6::numeric,
	format('kill_job of 4,000 tasks touched %s buffers, of 1,000 %s: linear, not quadratic', :b_big, :b_small));
SELECT is((SELECT detail FROM frameq.actions WHERE action = 'kill_job' AND job = :big),
	'{"frames": 4000, "reason": "scale test"}'::jsonb, 'the audit trail counts the tasks it killed');

SELECT * FROM finish();
ROLLBACK;
