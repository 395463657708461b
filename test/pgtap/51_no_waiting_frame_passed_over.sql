/*
 * No waiting frame is passed over (issue 12; doc/design-notes-dispatch.md):
 * however many jobs come before it in policy order with nothing the host
 * can book (every frame running, a tag, memory or gpus the host lacks, a
 * job or folder cap reached, a show at its burst), reserve() books a frame
 * the host can run on its first call.  On 0.1.0 each shape books nothing:
 * the walk counted those jobs against frameq.max_jobs_examined and stopped.
 *
 * Each scenario has its own allocation, so that its hosts see only its own
 * work.  Each fills the farm at the default setting, then makes the call
 * under test with frameq.max_jobs_examined lowered to 20 and 25 jobs
 * ahead: the same shape as the default 1,000 and 1,100 jobs.  The first
 * scenario runs the issue's own reproduction at the default.
 */
BEGIN;
\ir include/helpers.psql

SELECT plan(21);

/* n one-frame jobs of a show at a priority, each with the given extra spec keys */
CREATE FUNCTION fqtest.jobs(show text, n int, priority int, layer jsonb DEFAULT '{}',
							job jsonb DEFAULT '{}') RETURNS bigint[]
LANGUAGE sql AS $$
	SELECT array_agg(frameq.submit(jsonb_build_object('show', show, 'name', format('j%s', i),
			   'priority', priority, 'layers',
			   jsonb_build_array(jsonb_build_object('name', 'l', 'command', 'c', 'range', '1')
								 || layer)) || job) ORDER BY i)
	  FROM generate_series(1, n) i
$$;

-- -------------------- the issue's reproduction, at the default setting

SELECT frameq.create_allocation('t51.repro') \g /dev/null
SELECT frameq.create_show('t51repro') \g /dev/null
SELECT frameq.set_subscription('t51repro', 't51.repro', 100000, 100000) \g /dev/null
SELECT frameq.register_host('t51-big', 't51.repro', 5000, 1099511627776) AS tok_big \gset
SELECT is(current_setting('frameq.max_jobs_examined'), '1000', 'max_jobs_examined is at its default');
SELECT fqtest.jobs('t51repro', 1100, 10) \g /dev/null
-- attached after the submits: on a loaded machine they can take longer than a lease
SELECT epoch AS e_big FROM frameq.attach('t51-big', :'tok_big', 'b') \gset
SELECT is((SELECT count(*)::int FROM frameq.reserve('t51-big', :'tok_big', :e_big, 1000)), 1000,
		  'one call books 1,000 of 1,100 one-frame jobs');
SELECT frameq.submit('{"show": "t51repro", "name": "low", "priority": 1,
	"layers": [{"name": "l", "command": "c", "range": "1-5"}]}') AS low_job \gset
SELECT is((SELECT count(*)::int FROM frameq.reserve('t51-big', :'tok_big', :e_big, 100)), 100,
		  'the next call books the 100 waiting priority-10 jobs behind the 1,000 running ones');
SELECT is((SELECT array_agg(b.job) FROM frameq.reserve('t51-big', :'tok_big', :e_big, 100) b),
		  ARRAY[:low_job, :low_job, :low_job, :low_job, :low_job]::bigint[],
		  'and the one after that the 5 frames of the priority-1 job');

-- ------------------------------ more jobs than the bound, all running

SELECT frameq.create_allocation('t51.running') \g /dev/null
SELECT frameq.create_show('t51running') \g /dev/null
SELECT frameq.set_subscription('t51running', 't51.running', 100000, 100000) \g /dev/null
SELECT frameq.register_host('t51-r1', 't51.running', 100, 1099511627776) AS tok_r1 \gset
SELECT frameq.register_host('t51-r2', 't51.running', 100, 1099511627776) AS tok_r2 \gset
SELECT epoch AS e_r1 FROM frameq.attach('t51-r1', :'tok_r1', 'b') \gset
SELECT epoch AS e_r2 FROM frameq.attach('t51-r2', :'tok_r2', 'b') \gset
SELECT fqtest.jobs('t51running', 25, 10) \g /dev/null
SELECT is((SELECT count(*)::int FROM frameq.reserve('t51-r1', :'tok_r1', :e_r1, 100)), 25,
		  'host 1 books every frame of 25 jobs');
SELECT frameq.submit('{"show": "t51running", "name": "waiting", "priority": 1,
	"layers": [{"name": "l", "command": "c", "range": "1"}]}') AS running_low \gset
SET LOCAL frameq.max_jobs_examined = 20;
SELECT is((SELECT array_agg(job) FROM frameq.reserve('t51-r2', :'tok_r2', :e_r2, 1)),
		  ARRAY[:running_low]::bigint[],
		  'with 25 jobs all running ahead (max_jobs_examined 20), the first call books the waiting frame');
RESET frameq.max_jobs_examined;

-- ------------------------------- jobs that need a tag the host lacks

SELECT frameq.create_allocation('t51.tags') \g /dev/null
SELECT frameq.create_show('t51tags') \g /dev/null
SELECT frameq.set_subscription('t51tags', 't51.tags', 100000, 100000) \g /dev/null
SELECT frameq.register_host('t51-linux', 't51.tags', 100, 1099511627776, 0, 0, '{linux}') AS tok_t \gset
SELECT epoch AS e_t FROM frameq.attach('t51-linux', :'tok_t', 'b') \gset
SELECT fqtest.jobs('t51tags', 25, 10, '{"tags": ["windows"]}') \g /dev/null
SELECT frameq.submit('{"show": "t51tags", "name": "linux", "priority": 1,
	"layers": [{"name": "l", "command": "c", "range": "1", "tags": ["linux", "mac"]}]}') AS tags_low \gset
SET LOCAL frameq.max_jobs_examined = 20;
SELECT is((SELECT array_agg(job) FROM frameq.reserve('t51-linux', :'tok_t', :e_t, 5)),
		  ARRAY[:tags_low]::bigint[],
		  'with 25 windows-only jobs ahead, a linux host books the linux frame on its first call');
RESET frameq.max_jobs_examined;

-- -------------------------------- jobs that need more memory than it has

SELECT frameq.create_allocation('t51.memory') \g /dev/null
SELECT frameq.create_show('t51memory') \g /dev/null
SELECT frameq.set_subscription('t51memory', 't51.memory', 100000, 100000) \g /dev/null
SELECT frameq.register_host('t51-small', 't51.memory', 100, 17179869184) AS tok_m \gset
SELECT epoch AS e_m FROM frameq.attach('t51-small', :'tok_m', 'b') \gset
SELECT fqtest.jobs('t51memory', 25, 10, '{"memory": "64GB"}') \g /dev/null
SELECT frameq.submit('{"show": "t51memory", "name": "fits", "priority": 1,
	"layers": [{"name": "l", "command": "c", "range": "1", "memory": "8GB"}]}') AS mem_low \gset
SET LOCAL frameq.max_jobs_examined = 20;
SELECT is((SELECT array_agg(job) FROM frameq.reserve('t51-small', :'tok_m', :e_m, 5)),
		  ARRAY[:mem_low]::bigint[],
		  'with 25 jobs needing 64 GB ahead, a 16 GB host books the 8 GB frame on its first call');
RESET frameq.max_jobs_examined;

-- ------------------------------------- jobs that need gpus it does not have

SELECT frameq.create_allocation('t51.gpus') \g /dev/null
SELECT frameq.create_show('t51gpus') \g /dev/null
SELECT frameq.set_subscription('t51gpus', 't51.gpus', 100000, 100000) \g /dev/null
SELECT frameq.register_host('t51-cpu', 't51.gpus', 100, 1099511627776) AS tok_c \gset
SELECT frameq.register_host('t51-gpu', 't51.gpus', 100, 1099511627776, 2, 17179869184) AS tok_g \gset
SELECT epoch AS e_c FROM frameq.attach('t51-cpu', :'tok_c', 'b') \gset
SELECT epoch AS e_g FROM frameq.attach('t51-gpu', :'tok_g', 'b') \gset
SELECT fqtest.jobs('t51gpus', 25, 10, '{"gpus": 1}') AS gpu_jobs \gset
SELECT frameq.submit('{"show": "t51gpus", "name": "cpu", "priority": 1,
	"layers": [{"name": "l", "command": "c", "range": "1"}]}') AS gpu_low \gset
SET LOCAL frameq.max_jobs_examined = 20;
SELECT is((SELECT array_agg(job) FROM frameq.reserve('t51-cpu', :'tok_c', :e_c, 5)),
		  ARRAY[:gpu_low]::bigint[],
		  'with 25 GPU-only jobs ahead, a CPU host books the CPU frame on its first call');
RESET frameq.max_jobs_examined;
SELECT is((SELECT array_agg(job ORDER BY job) FROM frameq.reserve('t51-gpu', :'tok_g', :e_g, 5)),
		  (:'gpu_jobs'::bigint[])[1:2],
		  'a host with 2 gpus books the first two GPU jobs, in policy order');

-- ------------------------------------------------ jobs at their job cap

SELECT frameq.create_allocation('t51.jobcap') \g /dev/null
SELECT frameq.create_show('t51jobcap') \g /dev/null
SELECT frameq.set_subscription('t51jobcap', 't51.jobcap', 100000, 100000) \g /dev/null
SELECT frameq.register_host('t51-jc1', 't51.jobcap', 100, 1099511627776) AS tok_jc1 \gset
SELECT frameq.register_host('t51-jc2', 't51.jobcap', 100, 1099511627776) AS tok_jc2 \gset
SELECT epoch AS e_jc1 FROM frameq.attach('t51-jc1', :'tok_jc1', 'b') \gset
SELECT epoch AS e_jc2 FROM frameq.attach('t51-jc2', :'tok_jc2', 'b') \gset
SELECT fqtest.jobs('t51jobcap', 25, 10, '{"range": "1-2"}', '{"max_cores": 1}') \g /dev/null
SELECT is((SELECT count(*)::int FROM frameq.reserve('t51-jc1', :'tok_jc1', :e_jc1, 100)), 25,
		  'host 1 books one frame of each of 25 jobs capped at one core');
SELECT frameq.submit('{"show": "t51jobcap", "name": "free", "priority": 1,
	"layers": [{"name": "l", "command": "c", "range": "1"}]}') AS jobcap_low \gset
SET LOCAL frameq.max_jobs_examined = 20;
SELECT is((SELECT array_agg(job) FROM frameq.reserve('t51-jc2', :'tok_jc2', :e_jc2, 5)),
		  ARRAY[:jobcap_low]::bigint[],
		  'with 25 jobs at their cap ahead, each with a waiting frame, the first call books the free job');
RESET frameq.max_jobs_examined;

-- --------------------------------------------- jobs in a folder at its cap

SELECT frameq.create_allocation('t51.foldercap') \g /dev/null
SELECT frameq.create_show('t51foldercap') \g /dev/null
SELECT frameq.set_subscription('t51foldercap', 't51.foldercap', 100000, 100000) \g /dev/null
SELECT frameq.create_folder('t51foldercap', 'one', 1) AS folder_one \gset
SELECT frameq.register_host('t51-fc1', 't51.foldercap', 100, 1099511627776) AS tok_fc1 \gset
SELECT frameq.register_host('t51-fc2', 't51.foldercap', 100, 1099511627776) AS tok_fc2 \gset
SELECT epoch AS e_fc1 FROM frameq.attach('t51-fc1', :'tok_fc1', 'b') \gset
SELECT epoch AS e_fc2 FROM frameq.attach('t51-fc2', :'tok_fc2', 'b') \gset
SELECT fqtest.jobs('t51foldercap', 25, 10, '{}', '{"folder": "one"}') \g /dev/null
SELECT is((SELECT count(*)::int FROM frameq.reserve('t51-fc1', :'tok_fc1', :e_fc1, 100)), 1,
		  'host 1 books one frame of the folder capped at one core');
SELECT frameq.submit('{"show": "t51foldercap", "name": "free", "priority": 1,
	"layers": [{"name": "l", "command": "c", "range": "1"}]}') AS foldercap_low \gset
SET LOCAL frameq.max_jobs_examined = 20;
SELECT is((SELECT array_agg(job) FROM frameq.reserve('t51-fc2', :'tok_fc2', :e_fc2, 5)),
		  ARRAY[:foldercap_low]::bigint[],
		  'with 24 waiting jobs of a folder at its cap ahead, the first call books the free job');
RESET frameq.max_jobs_examined;

-- ------ a show at its burst next to a show below its share, caps ahead

SELECT frameq.create_allocation('t51.shows') \g /dev/null
SELECT frameq.create_show('t51burst') \g /dev/null
SELECT frameq.create_show('t51ahead') \g /dev/null
SELECT frameq.create_show('t51below') \g /dev/null
-- burst: at its burst of 1 core; ahead: 25 of 1,000 cores, so first; below: 1 of 10
SELECT frameq.set_subscription('t51burst', 't51.shows', 1, 1) \g /dev/null
SELECT frameq.set_subscription('t51ahead', 't51.shows', 1000, 100000) \g /dev/null
SELECT frameq.set_subscription('t51below', 't51.shows', 10, 100000) \g /dev/null
SELECT frameq.register_host('t51-s1', 't51.shows', 100, 1099511627776) AS tok_s1 \gset
SELECT frameq.register_host('t51-s2', 't51.shows', 100, 1099511627776) AS tok_s2 \gset
SELECT epoch AS e_s1 FROM frameq.attach('t51-s1', :'tok_s1', 'b') \gset
SELECT epoch AS e_s2 FROM frameq.attach('t51-s2', :'tok_s2', 'b') \gset
SELECT fqtest.jobs('t51burst', 25, 10, '{"range": "1-2"}') \g /dev/null
SELECT fqtest.jobs('t51ahead', 25, 10, '{"range": "1-2"}', '{"max_cores": 1}') \g /dev/null
SELECT frameq.submit('{"show": "t51below", "name": "below", "priority": 1, "max_cores": 1,
	"layers": [{"name": "l", "command": "c", "range": "1-2"}]}') AS below_job \gset
SELECT is((SELECT count(*)::int FROM frameq.reserve('t51-s1', :'tok_s1', :e_s1, 100)), 27,
		  'host 1 books one frame of each capped job, one of the show below and the burst show''s one core');
SELECT frameq.set_job(:below_job, clear_caps => true) \g /dev/null
SELECT results_eq(
	$$SELECT name, used_cores::int FROM frameq.usage
	   WHERE kind = 'subscription' AND name LIKE 't51%@t51.shows' ORDER BY 1$$,
	$$VALUES ('t51ahead@t51.shows'::text, 25), ('t51below@t51.shows', 1), ('t51burst@t51.shows', 1)$$,
	'the burst show is at its burst; the show ahead uses 25 of its 1,000 cores, the show below 1 of its 10');
SET LOCAL frameq.max_jobs_examined = 20;
SELECT is((SELECT array_agg(job) FROM frameq.reserve('t51-s2', :'tok_s2', :e_s2, 5)),
		  ARRAY[:below_job]::bigint[],
		  'with a show at its burst and 25 capped jobs of a show ahead, the first call books the show below its share');
RESET frameq.max_jobs_examined;

-- ------------------------------------------ the bound counts only real work

SELECT frameq.create_allocation('t51.bound') \g /dev/null
SELECT frameq.create_show('t51bound') \g /dev/null
SELECT frameq.set_subscription('t51bound', 't51.bound', 100000, 100000) \g /dev/null
SELECT frameq.register_host('t51-b', 't51.bound', 100, 1099511627776) AS tok_b \gset
SELECT epoch AS e_b FROM frameq.attach('t51-b', :'tok_b', 'b') \gset
SET LOCAL frameq.max_jobs_examined = 3;
SELECT fqtest.jobs('t51bound', 5, 10) \g /dev/null
SELECT is((SELECT count(*)::int FROM frameq.reserve('t51-b', :'tok_b', :e_b, 100)), 3,
		  'max_jobs_examined still bounds the jobs one call books from');
SELECT is((SELECT count(*)::int FROM frameq.reserve('t51-b', :'tok_b', :e_b, 100)), 2,
		  'and the next call books the rest');

SELECT is((SELECT count(*)::int FROM frameq.check()), 0, 'check() finds nothing wrong');
SELECT is((SELECT count(*)::int FROM frameq.dispatch_queue q JOIN frameq.show s ON s.id = q.show
			WHERE s.name = 't51running' AND q.job <> :running_low), 0,
		  'the layers of the 25 jobs with every frame running have left the dispatch queue');

SELECT * FROM finish();
ROLLBACK;
