/*
 * Issue 16, the metrics view (frameq 0.6.0): every series' value on a
 * small farm whose every number is known, before and after the worker's
 * lease expiry (the task and run counts as the worker's _count_live and
 * _count_history leave them); series names and labels as Prometheus wants them, one row
 * per series; readable by frameq_reader.
 */
BEGIN;
\ir include/helpers.psql

SELECT plan(44);

CREATE FUNCTION pg_temp.m(name text, labels jsonb DEFAULT '{}') RETURNS float8 LANGUAGE sql AS $$
	SELECT x.value FROM frameq.metrics x WHERE x.name = $1 AND x.labels = $2 $$;

/* hosts of 8, 4 and 2 cores; the third in repair; a fourth retired */
SELECT * FROM fqtest.farm('t76', cores => '{8,4,2}') \gset
SELECT frameq.set_host_state('t76-h3', 'repair');
SELECT frameq.register_host('t76-gone', 't76.pool', 8, 17179869184) AS _ \gset
SELECT frameq.retire_host('t76-gone') AS _ \gset

/* a: five frames of 2 cores, no retries: three booked on h1; one succeeds, one dies */
SELECT frameq.submit($${"show": "t76show", "name": "a", "max_retries": 0,
	"layers": [{"name": "l", "command": "c #FRAME#", "range": "1-5", "cores": 2}]}$$) AS a \gset
SELECT array_agg(proc ORDER BY frame_number) AS ap FROM frameq.reserve('t76-h1', :'tok1', :epoch1, 3) \gset
SELECT is(frameq.complete('t76-h1', :'tok1', :epoch1, (:'ap'::bigint[])[1], 0), 'accepted', 'a frame 1 succeeds');
SELECT is(frameq.complete('t76-h1', :'tok1', :epoch1, (:'ap'::bigint[])[2], 1), 'accepted', 'a frame 2 fails: dead');
/* b: two frames held by a; c: three frames, paused */
SELECT frameq.submit(format($${"show": "t76show", "name": "b", "after_jobs": [%s],
	"layers": [{"name": "l", "command": "c", "range": "1-2"}]}$$, :a)::jsonb) AS b \gset
SELECT frameq.submit($${"show": "t76show", "name": "c", "paused": true,
	"layers": [{"name": "l", "command": "c", "range": "1-3"}]}$$) AS c \gset
/* d: first in line; its one frame fails and waits an hour for its retry */
SELECT frameq.submit($${"show": "t76show", "name": "d", "priority": 10, "max_retries": 1,
	"retry_delay": "1h", "layers": [{"name": "l", "command": "c", "range": "1"}]}$$) AS d \gset
SELECT proc AS dp FROM frameq.reserve('t76-h2', :'tok2', :epoch2, 1) \gset
SELECT is(frameq.complete('t76-h2', :'tok2', :epoch2, :dp, 1), 'accepted', 'd frame 1 fails: delayed');
/* a's frame 3 is ordered killed; a has waited 100 s */
SELECT frameq.kill_frame((SELECT frame FROM frameq.proc WHERE id = (:'ap'::bigint[])[3]), 'wrong');
UPDATE frameq.job SET submitted_at = now() - interval '100 s' WHERE id = :a;

/* the count's time is a whole second of the clock between these two */
SELECT floor(extract(epoch FROM clock_timestamp())) AS t0 \gset
SELECT is(frameq._count_history(), 8::bigint, 'the worker''s count writes its rows: one run reason, six task states, its time');
SELECT is(frameq._count_live(), 6::bigint, 'the worker''s live count writes its rows: four states, delayed, its time');
SELECT extract(epoch FROM clock_timestamp()) AS t1 \gset
/* the age is now() less the count's time; now() is this file's transaction start */
SELECT ok(extract(epoch FROM now()) - pg_temp.m('frameq_frames_age_seconds') BETWEEN :t0 AND :t1,
	'live counts just now (the age is from the count''s time)');
SELECT is(pg_temp.m('frameq_frames', '{"state": "waiting"}'), 6::float8,
	'frames waiting: a 4-5, c 1-3 (paused), d 1 (delayed)');
SELECT is(pg_temp.m('frameq_frames', '{"state": "depend"}'), 2::float8, 'frames depend: b''s two');
SELECT is(pg_temp.m('frameq_frames', '{"state": "running"}'), 1::float8, 'frames running: a 3');
SELECT is(pg_temp.m('frameq_frames', '{"state": "dead"}'), 1::float8, 'frames dead: a 2');
SELECT is(pg_temp.m('frameq_delayed_frames'), 1::float8, 'frames delayed: d 1');
SELECT is((SELECT string_agg(format('%s=%s', labels->>'state', value), ' ' ORDER BY labels->>'state')
			 FROM frameq.metrics WHERE name = 'frameq_frames_counted'),
	'dead=1 depend=2 eaten=0 running=1 succeeded=1 waiting=6', 'frames counted by the worker, every state');
SELECT ok(extract(epoch FROM now()) - pg_temp.m('frameq_counted_age_seconds') BETWEEN :t0 AND :t1,
	'counted just now (the age is from the count''s time)');
SELECT is(pg_temp.m('frameq_jobs', '{"state": "active"}'), 3::float8, 'jobs active: a, b, d');
SELECT is(pg_temp.m('frameq_jobs', '{"state": "paused"}'), 1::float8, 'jobs paused: c');
SELECT is(pg_temp.m('frameq_jobs', '{"state": "finished"}'), 0::float8, 'jobs finished: none');
SELECT is(pg_temp.m('frameq_running_frames', '{"show": "t76show"}'), 1::float8, 'running frames of the show');
SELECT is(pg_temp.m('frameq_running_cores', '{"show": "t76show"}'), 2::float8, 'running cores of the show');
SELECT is(pg_temp.m('frameq_oldest_waiting_seconds', '{"show": "t76show"}'), 100::float8,
	'oldest waiting: a, submitted 100 s ago (c is paused)');
SELECT is(pg_temp.m('frameq_hosts', '{"state": "up"}'), 2::float8, 'hosts up: h1, h2 (not the retired one)');
SELECT is(pg_temp.m('frameq_hosts', '{"state": "down"}'), 0::float8, 'hosts down: none');
SELECT is(pg_temp.m('frameq_hosts', '{"state": "repair"}'), 1::float8, 'hosts in repair: h3');
SELECT is(pg_temp.m('frameq_cores', '{"state": "idle"}'), 10::float8, 'idle cores of up hosts: 6 + 4');
SELECT is(pg_temp.m('frameq_cores', '{"state": "used"}'), 2::float8, 'used cores of up hosts: a 3');
SELECT is(pg_temp.m('frameq_hosts', '{"state": "drain"}'), 0::float8, 'hosts draining: none, the series is there');
/* a drained host's booked cores are still used; its free ones are not bookable */
SELECT frameq.set_host_state('t76-h1', 'drain') AS _ \gset
SELECT is(pg_temp.m('frameq_cores', '{"state": "used"}'), 2::float8, 'used cores with h1 draining: still a 3');
SELECT is(pg_temp.m('frameq_cores', '{"state": "idle"}'), 4::float8, 'idle cores with h1 draining: h2''s 4');
SELECT is(pg_temp.m('frameq_hosts', '{"state": "drain"}'), 1::float8, 'hosts draining: h1');
SELECT frameq.set_host_state('t76-h1', 'up') AS _ \gset
SELECT is(pg_temp.m('frameq_kill_orders'), 1::float8, 'kill orders: a 3');
SELECT is(pg_temp.m('frameq_runs_ended_total', '{"reason": "completed"}'), 3::float8,
	'runs ended completed: a 1, a 2, d 1');
SELECT is((SELECT sum(value) FROM frameq.metrics WHERE name = 'frameq_runs_ended_total'), 3::float8,
	'no run ended otherwise');
SELECT is((SELECT count(*)::int FROM frameq.metrics WHERE name = 'frameq_runs_ended_total'), 9,
	'every reason has its series, zero or not');
SELECT is(pg_temp.m('frameq_lease_expired_total'), 0::float8, 'no lease expired');
SELECT is(pg_temp.m('frameq_jobs_pruned_total'), 0::float8, 'no job pruned');

/* the worker's lease expiry, a day on: every host's lease is lost, a 3's proc goes host_lost */
SELECT is(frameq._expire_leases(clock_timestamp() - interval '1 day', clock_timestamp() + interval '1 day'),
	3::bigint, 'three leases expire');
SELECT frameq._count_history() + frameq._count_live() AS _ \gset
SELECT is(pg_temp.m('frameq_lease_expired_total'), 3::float8, 'frameq_lease_expired_total counts them');
SELECT is(pg_temp.m('frameq_runs_ended_total', '{"reason": "host_lost"}'), 1::float8,
	'runs ended host_lost: a 3');
SELECT is(pg_temp.m('frameq_hosts', '{"state": "down"}'), 2::float8, 'hosts down: h1, h2');
SELECT is(pg_temp.m('frameq_hosts', '{"state": "up"}'), 0::float8, 'hosts up: none');
SELECT is(pg_temp.m('frameq_kill_orders'), 0::float8, 'no kill order left');
SELECT is(pg_temp.m('frameq_running_cores', '{"show": "t76show"}'), 0::float8, 'no core running');

/* the shape Prometheus needs */
SELECT is((SELECT count(*)::int FROM frameq.metrics
			WHERE name !~ '^frameq_[a-z_]+$' OR jsonb_typeof(labels) <> 'object'), 0,
	'every name is frameq_ and snake case; labels are objects');
SELECT is((SELECT count(*)::int FROM (SELECT name, labels FROM frameq.metrics
									  GROUP BY 1, 2 HAVING count(*) > 1) x), 0,
	'one row per series');
SET LOCAL ROLE frameq_reader;
SELECT ok((SELECT count(*) FROM frameq.metrics) > 0, 'frameq_reader reads metrics');
RESET ROLE;

SELECT * FROM finish();
ROLLBACK;
