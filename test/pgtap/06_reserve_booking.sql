/*
 * reserve(): what one booking is.  The booking row the agent gets (command
 * tokens expanded), the proc row, the run record that exists from the
 * moment of booking, the frame's attempts, the host's idle capacity and the
 * caps ledger, all to the exact number.
 */
BEGIN;
\ir include/helpers.psql

SELECT plan(20);

SELECT * FROM fqtest.farm('t06', gpus => 2, gpu_memory => 8589934592) \gset
-- 8 cores, 16 GiB, 2 gpus with 8 GiB
SELECT frameq.submit($${"show": "t06show", "name": "shot010", "layers": [
	{"name": "beauty", "range": "7,12345", "cores": 1.5, "memory": "2GB", "gpus": 1, "gpu_memory": "1GB",
	 "command": "render -f #FRAME# -z #ZFRAME# -j #JOB# -l #LAYER# #frame# ##FRAME##",
	 "env": {"SHOT": "010"}}]}$$) AS job \gset
SELECT id AS layer FROM frameq.layer WHERE job = :job \gset
SELECT id AS frame7 FROM frameq.frame WHERE job = :job AND number = 7 \gset
SELECT id AS frame12345 FROM frameq.frame WHERE job = :job AND number = 12345 \gset

CREATE TEMP TABLE booked ON COMMIT DROP AS
SELECT * FROM frameq.reserve('t06-h1', :'tok1', :epoch1);
SELECT proc AS proc7 FROM booked WHERE frame_number = 7 \gset

SELECT is((SELECT count(*)::int FROM booked), 2, 'reserve books both frames of the layer');
SELECT results_eq(
	$$SELECT frame, job, layer, frame_number, cores, memory, gpus, gpu_memory, env FROM booked ORDER BY frame_number$$,
	format($$VALUES (%s::bigint, %s::bigint, %s::bigint, 7, 1.50, 2147483648::bigint, 1, 1073741824::bigint, '{"SHOT": "010"}'::jsonb),
					(%s::bigint, %s::bigint, %s::bigint, 12345, 1.50, 2147483648::bigint, 1, 1073741824::bigint, '{"SHOT": "010"}'::jsonb)$$,
		   :frame7, :job, :layer, :frame12345, :job, :layer),
	'each booking names its frame, job, layer and number, with the layer''s resources (1.5 cores) and env');
SELECT results_eq(
	$$SELECT command FROM booked ORDER BY frame_number$$,
	$$VALUES ('render -f 7 -z 0007 -j shot010 -l beauty #frame# #7#'),
			 ('render -f 12345 -z 12345 -j shot010 -l beauty #frame# #12345#')$$,
	'#FRAME#, #ZFRAME# (padded to 4), #JOB# and #LAYER# are expanded; nothing else is');

-- the proc
SELECT bag_eq($$SELECT id FROM frameq.proc$$, $$SELECT proc FROM booked$$,
			  'the booking''s proc column is the id of the proc row (the run token)');
SELECT ok((SELECT bool_and(proc > 0) AND count(DISTINCT proc) = 2 FROM booked),
		  'the two run tokens are positive and different');
SELECT results_eq(
	format($$SELECT host, epoch, job, layer, show, folder, allocation, limits, cores_cc, memory, gpus,
				   gpu_memory, state, kill_reason, kill_at, want_state
			  FROM frameq.proc WHERE id = %s$$, :proc7),
	format($$VALUES (%s, %s::bigint, %s::bigint, %s::bigint, %s, NULL::int, %s, '{}'::int[], 150,
					 2147483648::bigint, 1, 1073741824::bigint, 'running', NULL::text, NULL::timestamptz, NULL::text)$$,
		   :host1, :epoch1, :job, :layer, :show, :alloc),
	'the proc records host, epoch, keys and 150 centicores, and is running without a kill order');
SELECT ok(frameq.owns(:proc7, frameq._run_secret(:proc7)), 'owns() is true for the live proc');

-- the run record, from the moment of booking
SELECT results_eq(
	format($$SELECT r.frame, r.job, r.host, r.epoch, r.cores_cc, r.memory, r.gpus, r.started_at = p.booked_at,
				   r.ended_at IS NULL, r.reason IS NULL, r.exit_status IS NULL
			  FROM frameq.run r JOIN frameq.proc p ON p.id = r.proc WHERE r.proc = %s$$, :proc7),
	format($$VALUES (%s::bigint, %s::bigint, %s, %s::bigint, 150, 2147483648::bigint, 1, true, true, true, true)$$,
		   :frame7, :job, :host1, :epoch1),
	'the proc has an open run record from the moment it is booked');
SELECT is((SELECT count(*)::int FROM frameq.run r JOIN booked b ON b.proc = r.proc), 2,
		  'there is one run record per booking');

-- the frames
SELECT results_eq(
	format('SELECT state, attempts, retries, version FROM frameq.frame WHERE job = %s ORDER BY number', :job),
	$$VALUES ('running', 1, 0, 1::bigint), ('running', 1, 0, 1::bigint)$$,
	'both frames are running with one attempt and no retries');
SELECT results_eq(
	format($$SELECT frame_number, state, proc, host, proc_state FROM frameq.frames WHERE job = %s AND frame_number = 7$$, :job),
	format($$VALUES (7, 'running', %s::bigint, 't06-h1', 'running')$$, :proc7),
	'the frames view shows the proc and host of a running frame');

-- the host, exactly
SELECT results_eq(
	format('SELECT idle_cc, idle_memory, idle_gpus, idle_gpu_memory FROM frameq.host WHERE id = %s', :host1),
	$$VALUES (500, 12884901888::bigint, 0, 6442450944::bigint)$$,
	'the host''s idle capacity drops by exactly 3 cores, 4 GiB, 2 gpus and 2 GiB of gpu memory');
SELECT results_eq(
	$$SELECT idle_cores, running FROM frameq.hosts WHERE name = 't06-h1'$$,
	$$VALUES (5.00::numeric(12,2), 2)$$, 'the hosts view shows 5 idle cores and 2 running procs');

-- the ledger and the usage view
SELECT results_eq(
	format($$SELECT kind, used_cc, used_gpus, running FROM frameq.ledger()
			  WHERE (kind = 'job' AND id = %s) OR (kind = 'subscription' AND id = %s AND id2 = %s)
			  ORDER BY kind$$, :job, :show, :alloc),
	$$VALUES ('job', 300, 2, 2), ('subscription', 300, 2, 2)$$,
	'the ledger charges the job and the subscription 300 centicores, 2 gpus, 2 procs');
SELECT results_eq(
	format($$SELECT kind, used_cores, used_gpus, running FROM frameq.usage
			  WHERE (kind = 'job' AND id = %s) OR (kind = 'subscription' AND id = %s) OR (kind = 'host' AND id = %s)
			  ORDER BY kind$$, :job, :show, :host1),
	$$VALUES ('host', 3.00::numeric(12,2), 2, 2), ('job', 3.00, 2, 2), ('subscription', 3.00, 2, 2)$$,
	'the usage view reports 3 cores, 2 gpus and 2 procs for the host, the job and the subscription');
SELECT is_empty('SELECT * FROM frameq.check()', 'check() finds nothing wrong after the booking');

-- a second attempt gets a fresh token and a second run record
DELETE FROM frameq.proc WHERE id = :proc7;
SELECT is((SELECT count(*)::int FROM frameq.reserve('t06-h1', :'tok1', :epoch1, 1)), 1,
		  'the released frame is booked again');
SELECT results_eq(
	format('SELECT state, attempts, retries FROM frameq.frame WHERE id = %s', :frame7),
	$$VALUES ('running', 2, 0)$$, 'the frame''s second booking is its second attempt, with no retry used');
SELECT isnt((SELECT id FROM frameq.proc WHERE frame = :frame7), :proc7::bigint,
			'the second booking of a frame gets a new run token');
SELECT results_eq(
	format('SELECT count(*)::int, count(*) FILTER (WHERE ended_at IS NULL)::int FROM frameq.run WHERE frame = %s', :frame7),
	'VALUES (2, 1)', 'the frame has two run records, of which only the new one is open');

SELECT * FROM finish();
ROLLBACK;
