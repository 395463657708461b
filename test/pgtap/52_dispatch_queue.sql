/*
 * The dispatch queue (sql/src/dispatch.sql, doc/design-notes-dispatch.md)
 * follows every way a frame becomes bookable or stops being so: a layer
 * that ran dry leaves it and comes back when a frame is retried; a paused
 * job's rows are tidied and come back on resume; a priority change is
 * followed on the next call; check() says so when a waiting frame's layer
 * has no row.
 */
BEGIN;
\ir include/helpers.psql

SELECT plan(13);

SELECT frameq.create_allocation('t52') \g /dev/null
SELECT frameq.create_show('t52') \g /dev/null
SELECT frameq.set_subscription('t52', 't52', 100000, 100000) \g /dev/null
SELECT frameq.register_host('t52-h', 't52', 100, 1099511627776) AS tok \gset
SELECT epoch AS e FROM frameq.attach('t52-h', :'tok', 'b') \gset

CREATE FUNCTION fqtest.queued(job bigint) RETURNS int LANGUAGE sql AS $$
	SELECT count(*)::int FROM frameq.dispatch_queue q WHERE q.job = queued.job
$$;

-- ------------------------------------ a dry layer leaves, a retry brings it back

SELECT frameq.submit('{"show": "t52", "name": "a", "priority": 5,
	"layers": [{"name": "l", "command": "c", "range": "1-2", "tags": ["x", "y"]}]}') AS job_a \gset
SELECT is(fqtest.queued(:job_a), 2, 'a layer asking for two tags is queued once per tag');
SELECT is((SELECT count(*)::int FROM frameq.reserve('t52-h', :'tok', :e, 10)), 0,
		  'a host without those tags books nothing');
UPDATE frameq.host SET tags = '{y}' WHERE name = 't52-h';
SELECT is((SELECT count(*)::int FROM frameq.reserve('t52-h', :'tok', :e, 10)), 2,
		  'a host with one of them books both frames, once each');
SELECT is(fqtest.queued(:job_a), 0, 'the call that found the layer dry removed its rows');
SELECT frameq.complete('t52-h', :'tok', :e, p.id, 0) FROM frameq.proc p WHERE p.job = :job_a \g /dev/null
SELECT frameq.retry_frame(f.id) FROM frameq.frame f WHERE f.job = :job_a AND f.number = 2 \g /dev/null
SELECT is(fqtest.queued(:job_a), 2, 'retry_frame queues the layer again');
SELECT is((SELECT array_agg(frame_number) FROM frameq.reserve('t52-h', :'tok', :e, 10)), '{2}'::int[],
		  'and the retried frame is booked');

-- ----------------------------------------------- pause, resume, priority

SELECT frameq.submit('{"show": "t52", "name": "b", "priority": 9,
	"layers": [{"name": "l", "command": "c", "range": "1-3"}]}') AS job_b \gset
SELECT frameq.submit('{"show": "t52", "name": "c", "priority": 8,
	"layers": [{"name": "l", "command": "c", "range": "1-3"}]}') AS job_c \gset
SELECT frameq.set_job(:job_b, paused => true) \g /dev/null
SELECT is((SELECT array_agg(DISTINCT job) FROM frameq.reserve('t52-h', :'tok', :e, 1)),
		  ARRAY[:job_c]::bigint[], 'a paused job is passed, the next one booked');
SELECT is(fqtest.queued(:job_b), 0, 'the paused job''s stale rows were tidied');
SELECT frameq.set_job(:job_b, paused => false) \g /dev/null
SELECT is((SELECT array_agg(DISTINCT job) FROM frameq.reserve('t52-h', :'tok', :e, 1)),
		  ARRAY[:job_b]::bigint[], 'resumed, it is queued again and comes first');
SELECT frameq.set_job(:job_b, priority => 1) \g /dev/null
SELECT is((SELECT array_agg(DISTINCT job) FROM frameq.reserve('t52-h', :'tok', :e, 1)),
		  ARRAY[:job_c]::bigint[], 'after its priority drops below the other job''s, the other comes first');

SELECT is((SELECT count(*)::int FROM frameq.check()), 0, 'check() finds nothing wrong');

-- --------------------------------------------------- check() sees a lost row

DELETE FROM frameq.dispatch_queue WHERE job = :job_c;
SELECT results_eq(
	$$SELECT invariant FROM frameq.check()$$,
	$$VALUES ('no waiting frame is passed over'::text)$$,
	'check() names a layer with waiting frames and no dispatch queue row');
SELECT is((SELECT array_agg(DISTINCT job) FROM frameq.reserve('t52-h', :'tok', :e, 1)),
		  ARRAY[:job_b]::bigint[], '(and such a layer is indeed passed over)');

SELECT * FROM finish();
ROLLBACK;
