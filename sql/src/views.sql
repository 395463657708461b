
/*
 * ---------------------------------------------------------------------
 * views.sql: what readers see (frameq_reader).
 * ---------------------------------------------------------------------
 */

/*
 * every frame row (a task: one frame number, or a chunk of them), with its
 * proc and host while it runs, and what its agent last reported of the
 * render (heartbeat); frame_number is the task's first number; not_before
 * is set while a waiting task is delayed (a requeue or a retry delay), as
 * it was set: the worker clears it within a round of that time; memory is
 * what the task needs now (its layer's, or more once a retry after an OOM
 * raised it); dead_reason says why a dead task is dead when its retries
 * did not run out (it fits no host)
 */
CREATE VIEW frameq.frames AS
SELECT f.id AS frame, f.job, f.layer, f.number AS frame_number, f.state, f.retries,
	   f.attempts, p.id AS proc, h.name AS host, p.state AS proc_state,
	   frameq._frame_spec(f.number, f.numbers) AS frame_spec,
	   p.last_line, p.progress, p.last_output_at, f.requeues, f.not_before,
	   GREATEST(l.memory, f.memory) AS memory, f.dead_reason
  FROM frameq.frame f
  JOIN frameq.layer l ON l.id = f.layer
  LEFT JOIN frameq.proc p ON p.frame = f.id
  LEFT JOIN frameq.host h ON h.id = p.host;

/*
 * each job's tasks by state, and how many frame numbers they hold; while
 * the job is paused, why: max_dead_frames if it paused itself, else
 * 'operator' (set_job, or submitted paused); delayed: how many of the
 * waiting ones are delayed (frames.not_before); the job's show (0.6.0)
 */
CREATE VIEW frameq.job_progress AS
SELECT j.id AS job, j.name, j.state,
	   count(f.id) AS total,
	   count(f.id) FILTER (WHERE f.state = 'waiting') AS waiting,
	   count(f.id) FILTER (WHERE f.state = 'depend') AS depend,
	   count(f.id) FILTER (WHERE f.state = 'running') AS running,
	   count(f.id) FILTER (WHERE f.state = 'succeeded') AS succeeded,
	   count(f.id) FILTER (WHERE f.state = 'dead') AS dead,
	   count(f.id) FILTER (WHERE f.state = 'eaten') AS eaten,
	   count(f.id) + coalesce(sum(pg_catalog.cardinality(f.numbers) - 1), 0) AS frames_total,
	   CASE WHEN j.state = 'paused' THEN coalesce(j.paused_reason, 'operator') END AS paused_reason,
	   count(f.id) FILTER (WHERE f.state = 'waiting' AND f.not_before IS NOT NULL) AS delayed,
	   (SELECT s.name FROM frameq.show s WHERE s.id = j.show) AS show
  FROM frameq.job j
  LEFT JOIN frameq.frame f ON f.job = j.id
 GROUP BY j.id;

/*
 * Hosts blocked for a job by its host_failure_limit (src/limits.c): the
 * failed runs counted there, and since when the host gets none of the
 * job's tasks.  unblock_host() lifts a block.
 */
CREATE VIEW frameq.job_host_blocks AS
SELECT b.job, h.name AS host, b.failures, b.blocked_at AS since
  FROM frameq.job_host_failure b
  JOIN frameq.host h ON h.id = b.host
 WHERE b.blocked_at IS NOT NULL;

/* what each host, subscription, folder, live job and limit uses, against its cap */
CREATE VIEW frameq.usage AS
WITH l AS (SELECT * FROM frameq.ledger())
SELECT 'host'::text AS kind, h.id::bigint AS id, h.name,
	   ((h.cores_cc - h.idle_cc) / 100.0)::numeric(12,2) AS used_cores, (h.cores_cc / 100.0)::numeric(12,2) AS max_cores,
	   h.gpus - h.idle_gpus AS used_gpus, h.gpus AS max_gpus,
	   (SELECT count(*) FROM frameq.proc p WHERE p.host = h.id)::int AS running,
	   NULL::int AS max_running
  FROM frameq.host h
UNION ALL
SELECT 'subscription', s.show, sh.name || '@' || a.name,
	   (coalesce(l.used_cc, 0) / 100.0)::numeric(12,2), (s.burst_cc / 100.0)::numeric(12,2),
	   coalesce(l.used_gpus, 0), NULL, coalesce(l.running, 0), NULL
  FROM frameq.subscription s
  JOIN frameq.show sh ON sh.id = s.show
  JOIN frameq.allocation a ON a.id = s.allocation
  LEFT JOIN l ON l.kind = 'subscription' AND l.id = s.show AND l.id2 = s.allocation
UNION ALL
SELECT 'folder', f.id, f.name,
	   (coalesce(l.used_cc, 0) / 100.0)::numeric(12,2), (f.max_cc / 100.0)::numeric(12,2),
	   coalesce(l.used_gpus, 0), f.max_gpus, coalesce(l.running, 0), NULL
  FROM frameq.folder f
  LEFT JOIN l ON l.kind = 'folder' AND l.id = f.id
UNION ALL
SELECT 'job', j.id, j.name,
	   (coalesce(l.used_cc, 0) / 100.0)::numeric(12,2), (j.max_cc / 100.0)::numeric(12,2),
	   coalesce(l.used_gpus, 0), j.max_gpus, coalesce(l.running, 0), NULL
  FROM frameq.job j
  LEFT JOIN l ON l.kind = 'job' AND l.id = j.id
 WHERE j.state IN ('active', 'paused') OR l.running > 0
UNION ALL
SELECT 'limit', lm.id, lm.name,
	   (coalesce(l.used_cc, 0) / 100.0)::numeric(12,2), NULL,
	   coalesce(l.used_gpus, 0), NULL, coalesce(l.running, 0), lm.max_running
  FROM frameq.limits lm
  LEFT JOIN l ON l.kind = 'limit' AND l.id = lm.id;

/* every host (retired ones too), its lease and its free capacity */
CREATE VIEW frameq.hosts AS
SELECT h.id AS host, h.name, a.name AS allocation, h.state, h.down_reason, h.epoch,
	   h.lease_expires_at,
	   (h.cores_cc / 100.0)::numeric(12,2) AS cores, (h.idle_cc / 100.0)::numeric(12,2) AS idle_cores,
	   h.memory, h.idle_memory, h.gpus, h.idle_gpus, h.gpu_memory, h.idle_gpu_memory,
	   h.tags, h.boot_id,
	   (SELECT count(*) FROM frameq.proc p WHERE p.host = h.id)::int AS running,
	   h.retired_at
  FROM frameq.host h
  JOIN frameq.allocation a ON a.id = h.allocation;

/* every attempt's run record; log: where its output is, as its agent reported it */
CREATE VIEW frameq.runs AS
SELECT r.proc, r.frame, r.job, h.name AS host, r.epoch, r.started_at, r.ended_at,
	   r.exit_status, r.exit_signal, r.max_rss, r.reason, r.kill_reason, r.end_state,
	   (r.cores_cc / 100.0)::numeric(12,2) AS cores, r.memory, r.log
  FROM frameq.run r
  JOIN frameq.host h ON h.id = r.host;

/* which roles may submit to which show (a dropped role shows as its oid) */
CREATE VIEW frameq.show_grants AS
SELECT s.name AS show, coalesce(r.rolname::text, g.role::oid::text) COLLATE "default" AS role, g.granted_at
  FROM frameq.show_grant g
  JOIN frameq.show s ON s.id = g.show
  LEFT JOIN pg_catalog.pg_roles r ON r.oid = g.role;

/*
 * Which jobs and folders are parked at their caps now: their layers have
 * no dispatch queue rows until a release lowers them or their caps change.
 */
CREATE VIEW frameq.dispatch_parked AS
SELECT kind, id, inflight FROM frameq._ledger_parked();

/*
 * The audit trail (admin.sql, _audit): every operator and administration
 * action that committed, oldest first by id; role is the login that acted
 * (session_user); job, layer, frame and host are ids, kept after what they
 * name is gone; detail the action's arguments and outcome, never a token,
 * a run secret or an env value.
 */
CREATE VIEW frameq.actions AS
SELECT a.id, a.at, a.role, a.action, a.job, a.layer, a.frame, a.host, a.detail
  FROM frameq.action a;

/*
 * The farm in Prometheus naming: one row per series, name, labels (a
 * JSON object of label name to value) and value.  doc/reference.md,
 * "metrics", says what each series is.  Cheap to read at any size
 * (doc/design.md, "History and metrics off the hot paths"): running work
 * is read from the procs, hosts from the host table, jobs from the job
 * table; tasks by state are what the worker last counted into tally
 * (about every 10 s for the live states, _count_live; about every minute
 * for every state and the runs ended, _count_history), and the view says
 * how old each count is.
 */
CREATE VIEW frameq.metrics AS
WITH tallied AS (
		SELECT t.metric, t.label, t.value FROM frameq.tally t),
	 running AS (
		SELECT p.show, count(*) AS tasks, sum(p.cores_cc) AS cc FROM frameq.proc p GROUP BY p.show),
	 farm AS (
		SELECT h.state, count(*) AS n, sum(h.cores_cc) AS cc, sum(h.idle_cc) AS idle_cc
		  FROM frameq.host h WHERE h.retired_at IS NULL GROUP BY h.state)
SELECT 'frameq_frames'::text AS name, jsonb_build_object('state', t.label) AS labels,
	   t.value::float8 AS value
  FROM tallied t WHERE t.metric = 'frames_live' AND t.label <> 'delayed'
UNION ALL
SELECT 'frameq_delayed_frames', '{}', t.value::float8
  FROM tallied t WHERE t.metric = 'frames_live' AND t.label = 'delayed'
UNION ALL
SELECT 'frameq_frames_age_seconds', '{}',
	   extract(epoch FROM now())::float8 - t.value
  FROM tallied t WHERE t.metric = 'live_counted_at'
UNION ALL
SELECT 'frameq_frames_counted', jsonb_build_object('state', t.label), t.value::float8
  FROM tallied t WHERE t.metric = 'frames_counted'
UNION ALL
SELECT 'frameq_counted_age_seconds', '{}',
	   extract(epoch FROM now())::float8 - t.value
  FROM tallied t WHERE t.metric = 'counted_at'
UNION ALL
SELECT 'frameq_jobs', jsonb_build_object('state', s.state), count(j.id)::float8
  FROM unnest('{active,paused,finished,killed}'::text[]) s(state)
  LEFT JOIN frameq.job j ON j.state = s.state
 GROUP BY s.state
UNION ALL
SELECT 'frameq_running_frames', jsonb_build_object('show', sh.name), coalesce(r.tasks, 0)::float8
  FROM frameq.show sh LEFT JOIN running r ON r.show = sh.id
UNION ALL
SELECT 'frameq_running_cores', jsonb_build_object('show', sh.name), coalesce(r.cc / 100.0, 0)::float8
  FROM frameq.show sh LEFT JOIN running r ON r.show = sh.id
UNION ALL
SELECT 'frameq_oldest_waiting_seconds', jsonb_build_object('show', sh.name),
	   coalesce(extract(epoch FROM now() - (
		   SELECT min(j.submitted_at) FROM frameq.job j
			WHERE j.show = sh.id AND j.state = 'active'
			  AND EXISTS (SELECT 1 FROM frameq.frame f
						   WHERE f.job = j.id AND f.state = 'waiting'))), 0)::float8
  FROM frameq.show sh
UNION ALL
SELECT 'frameq_hosts', jsonb_build_object('state', s.state), coalesce(h.n, 0)::float8
  FROM (SELECT unnest('{up,down,repair,drain}'::text[]) UNION SELECT x.state FROM farm x) s(state)
  LEFT JOIN farm h ON h.state = s.state
UNION ALL
SELECT 'frameq_cores', jsonb_build_object('state', s.state),
	   /* idle: bookable, so of up hosts; used: booked, on any host (a drained one's too) */
	   coalesce(CASE s.state
				WHEN 'idle' THEN (SELECT sum(h.idle_cc) FROM farm h WHERE h.state = 'up')
				ELSE (SELECT sum(h.cc - h.idle_cc) FROM farm h) END, 0)::float8 / 100.0
  FROM unnest('{idle,used}'::text[]) s(state)
UNION ALL
SELECT 'frameq_kill_orders', '{}', count(*)::float8 FROM frameq.proc p WHERE p.state = 'killing'
UNION ALL
SELECT 'frameq_runs_ended_total', jsonb_build_object('reason', s.reason),
	   coalesce((SELECT t.value FROM tallied t
				  WHERE t.metric = 'runs_ended' AND t.label = s.reason), 0)::float8
  FROM (SELECT unnest('{completed,killed,timeout,stalled,oom,host_lost,host_rebooted,lost_by_agent,operator}'::text[])
		UNION SELECT t.label FROM tallied t WHERE t.metric = 'runs_ended') s(reason)
UNION ALL
SELECT 'frameq_lease_expired_total', '{}',
	   coalesce((SELECT t.value FROM tallied t WHERE t.metric = 'lease_expired'), 0)::float8
UNION ALL
SELECT 'frameq_jobs_pruned_total', '{}',
	   coalesce((SELECT t.value FROM tallied t WHERE t.metric = 'jobs_pruned'), 0)::float8;
