
/*
 * ---------------------------------------------------------------------
 * check.sql: check(), which proves the invariants (doc/design.md) on the
 * data as it is, for tests, operators and monitoring (frameq_reader).
 * ---------------------------------------------------------------------
 */

/* what the procs add up to, per capped entity: the ledger by definition (src/ledger.c) */
CREATE FUNCTION frameq._proc_usage(OUT kind text, OUT id bigint, OUT id2 bigint,
								   OUT cc int, OUT gpus int, OUT n int)
	RETURNS SETOF record
	AS 'MODULE_PATHNAME', 'frameq_proc_usage' LANGUAGE C STABLE STRICT
	SET search_path = pg_catalog, pg_temp;

/*
 * check(): one row per broken invariant; no rows when all hold.  It makes
 * sure the ledger is valid and, as reserve() does before it walks, first
 * queues what a ledger rebuild made it forget was parked; then it compares
 * the ledger with what the procs add up to (the query the ledger rebuild
 * runs), and every proc with its frame, host and run record.  "No waiting
 * frame is passed over" is checked as far as the database can show it:
 * every layer of an active job that has a waiting frame has a dispatch
 * queue row for each tag it asks for, unless its job or folder is parked
 * over its cap (dispatch.sql); a delayed task is not waiting for this
 * until the worker ends its delay, which must be within a round of its
 * time (worker.sql, "Delays").
 */
CREATE FUNCTION frameq.check() RETURNS TABLE (invariant text, detail text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	late timestamptz;	/* a delay that ended before this is overdue */
BEGIN
	PERFORM frameq._ledger_ensure();
	PERFORM frameq._requeue_after_rebuild();

	RETURN QUERY
	SELECT 'one run at a time', format('frame %s is running but has no proc', f.id)
	  FROM frameq.frame f
	 WHERE f.state = 'running' AND NOT EXISTS (SELECT 1 FROM frameq.proc p WHERE p.frame = f.id);

	RETURN QUERY
	SELECT 'one run at a time', format('proc %s holds frame %s, which is %s', p.id, f.id, f.state)
	  FROM frameq.proc p JOIN frameq.frame f ON f.id = p.frame
	 WHERE f.state <> 'running';

	RETURN QUERY
	SELECT 'accounting is exact', format('proc %s does not carry its frame''s job, layer, show, folder or allocation', p.id)
	  FROM frameq.proc p
	  JOIN frameq.frame f ON f.id = p.frame
	  JOIN frameq.job j ON j.id = f.job
	  JOIN frameq.host h ON h.id = p.host
	 WHERE (p.job, p.layer, p.show, p.allocation) IS DISTINCT FROM (f.job, f.layer, j.show, h.allocation)
		OR p.folder IS DISTINCT FROM j.folder;

	RETURN QUERY
	WITH actual AS (SELECT * FROM frameq._proc_usage())
	SELECT 'accounting is exact',
		   format('%s %s/%s: ledger has %s cc, %s gpus, %s procs; procs sum to %s cc, %s gpus, %s procs',
				  coalesce(a.kind, l.kind), coalesce(a.id, l.id), coalesce(a.id2, l.id2),
				  coalesce(l.used_cc, 0), coalesce(l.used_gpus, 0), coalesce(l.running, 0),
				  coalesce(a.cc, 0), coalesce(a.gpus, 0), coalesce(a.n, 0))
	  FROM actual a
	  FULL JOIN (
		/* the ledger as it will be when this transaction's releases apply */
		SELECT x.kind, x.id, x.id2, sum(x.used_cc)::int AS used_cc,
			   sum(x.used_gpus)::int AS used_gpus, sum(x.running)::int AS running
		  FROM (SELECT * FROM frameq.ledger() UNION ALL SELECT * FROM frameq._ledger_pending()) x
		 GROUP BY x.kind, x.id, x.id2
		HAVING sum(x.used_cc) <> 0 OR sum(x.used_gpus) <> 0 OR sum(x.running) <> 0
	  ) l ON l.kind = a.kind AND l.id = a.id AND l.id2 = a.id2
	 WHERE coalesce(a.cc, 0) <> coalesce(l.used_cc, 0)
		OR coalesce(a.gpus, 0) <> coalesce(l.used_gpus, 0)
		OR coalesce(a.n, 0) <> coalesce(l.running, 0);

	RETURN QUERY
	SELECT 'accounting is exact',
		   format('host %s: idle %s cc, %s memory, %s gpus, %s gpu memory; procs leave %s, %s, %s, %s',
				  h.name, h.idle_cc, h.idle_memory, h.idle_gpus, h.idle_gpu_memory,
				  h.cores_cc - coalesce(s.cc, 0), h.memory - coalesce(s.mem, 0),
				  h.gpus - coalesce(s.gpus, 0), h.gpu_memory - coalesce(s.gmem, 0))
	  FROM frameq.host h
	  LEFT JOIN (SELECT host, sum(cores_cc) AS cc, sum(memory) AS mem, sum(gpus) AS gpus,
						sum(gpu_memory) AS gmem
				   FROM frameq.proc GROUP BY host) s ON s.host = h.id
	 WHERE h.idle_cc <> h.cores_cc - coalesce(s.cc, 0)
		OR h.idle_memory <> h.memory - coalesce(s.mem, 0)
		OR h.idle_gpus <> h.gpus - coalesce(s.gpus, 0)
		OR h.idle_gpu_memory <> h.gpu_memory - coalesce(s.gmem, 0);

	/*
	 * A cap is exceeded only if some proc was booked after the cap was last
	 * set: lowering a cap never kills running work.
	 */
	RETURN QUERY
	SELECT 'hard caps', format('show %s in allocation %s uses %s cc, burst is %s',
							   s.show, s.allocation, u.cc, s.burst_cc)
	  FROM frameq.subscription s
	  JOIN (SELECT show, allocation, sum(cores_cc) AS cc, max(booked_at) AS last
			  FROM frameq.proc GROUP BY show, allocation) u
		ON u.show = s.show AND u.allocation = s.allocation
	 WHERE u.cc > s.burst_cc AND u.last > s.changed_at;

	RETURN QUERY
	SELECT 'hard caps', format('folder %s uses %s cc and %s gpus, caps are %s and %s',
							   f.id, u.cc, u.gpus, f.max_cc, f.max_gpus)
	  FROM frameq.folder f
	  JOIN (SELECT folder, sum(cores_cc) AS cc, sum(gpus) AS gpus, max(booked_at) AS last
			  FROM frameq.proc GROUP BY folder) u ON u.folder = f.id
	 WHERE (u.cc > f.max_cc OR u.gpus > f.max_gpus) AND u.last > f.changed_at;

	RETURN QUERY
	SELECT 'hard caps', format('job %s uses %s cc and %s gpus, caps are %s and %s',
							   j.id, u.cc, u.gpus, j.max_cc, j.max_gpus)
	  FROM frameq.job j
	  JOIN (SELECT job, sum(cores_cc) AS cc, sum(gpus) AS gpus, max(booked_at) AS last
			  FROM frameq.proc GROUP BY job) u ON u.job = j.id
	 WHERE (u.cc > j.max_cc OR u.gpus > j.max_gpus) AND u.last > j.caps_changed_at;

	RETURN QUERY
	SELECT 'hard caps', format('limit %s has %s running, max_running is %s',
							   lm.name, u.n, lm.max_running)
	  FROM frameq.limits lm
	  JOIN (SELECT lid, count(*) AS n, max(booked_at) AS last
			  FROM frameq.proc, unnest(limits) lid GROUP BY lid) u ON u.lid = lm.id
	 WHERE u.n > lm.max_running AND u.last > lm.changed_at;

	RETURN QUERY
	SELECT 'every attempt is visible', format('proc %s has no open run record', p.id)
	  FROM frameq.proc p
	 WHERE NOT EXISTS (SELECT 1 FROM frameq.run r WHERE r.proc = p.id AND r.ended_at IS NULL);

	RETURN QUERY
	SELECT 'every attempt is visible', format('run %s is open but its proc is gone', r.proc)
	  FROM frameq.run r
	 WHERE r.ended_at IS NULL AND NOT EXISTS (SELECT 1 FROM frameq.proc p WHERE p.id = r.proc);

	RETURN QUERY
	SELECT 'fencing', format('proc %s is running under epoch %s of host %s, whose epoch is %s',
							 p.id, p.epoch, h.name, h.epoch)
	  FROM frameq.proc p JOIN frameq.host h ON h.id = p.host
	 WHERE p.state = 'running' AND p.epoch <> h.epoch;

	RETURN QUERY
	SELECT 'dispatch order', format('frame %s of layer %s is waiting below the layer''s dispatch hint %s',
									f.id, f.layer, d.low)
	  FROM frameq._dispatch_hints() d
	  JOIN frameq.frame f ON f.layer = d.layer AND f.state = 'waiting' AND f.not_before IS NULL
						  AND f.memory IS NULL AND f.number < d.low;

	/*
	 * A row per tag, of the job's show, resources and size classes, at any
	 * priority, unless the job or its folder is parked over its cap or the
	 * layer is paused (set_layer); and
	 * every row's stream listed in dispatch_class, where reserve() looks
	 * for the streams to read.
	 */
	RETURN QUERY
	SELECT 'no waiting frame is passed over',
		   format('layer %s of active job %s has waiting frames but no dispatch queue row for tag "%s"',
				  l.id, j.id, t.tag)
	  FROM frameq.layer l
	  JOIN frameq.job j ON j.id = l.job
	  LEFT JOIN frameq.folder fo ON fo.id = j.folder
	 CROSS JOIN LATERAL unnest(CASE WHEN cardinality(l.tags) = 0 THEN ARRAY['']::text[]
									ELSE l.tags END) t(tag)
	 WHERE j.state = 'active' AND NOT l.paused
	   AND NOT frameq._parked_over_cap(j.id, coalesce(j.max_cc, -1), coalesce(j.max_gpus, -1),
									   j.folder, coalesce(fo.max_cc, -1), coalesce(fo.max_gpus, -1),
									   l.min_cc, l.gpus)
	   AND EXISTS (SELECT 1 FROM frameq.frame f
					WHERE f.layer = l.id AND f.state = 'waiting' AND f.not_before IS NULL
					  AND f.memory IS NULL)
	   AND NOT EXISTS (SELECT 1 FROM frameq.dispatch_queue q
						WHERE q.layer = l.id AND q.job = j.id AND q.show = j.show AND q.tag = t.tag
						  AND q.gpu = (l.gpus > 0) AND q.dispatch_order = l.dispatch_order
						  AND (q.min_cc, q.memory, q.gpus, q.gpu_memory)
							  = (l.min_cc, l.memory, l.gpus, l.gpu_memory)
						  AND (q.mem_class, q.core_class)
							  = (frameq._memory_class(l.memory), frameq._cores_class(l.min_cc)));

	/* the same for each size an OOM retry raised waiting tasks of the layer to */
	RETURN QUERY
	SELECT 'no waiting frame is passed over',
		   format('layer %s of active job %s has waiting tasks raised to %s bytes of memory but no dispatch queue row of that size for tag "%s"',
				  l.id, j.id, r.memory, t.tag)
	  FROM frameq.layer l
	  JOIN frameq.job j ON j.id = l.job
	  LEFT JOIN frameq.folder fo ON fo.id = j.folder
	 CROSS JOIN LATERAL (SELECT DISTINCT f.memory FROM frameq.frame f
						  WHERE f.layer = l.id AND f.state = 'waiting' AND f.not_before IS NULL
							AND f.memory IS NOT NULL) r
	 CROSS JOIN LATERAL unnest(CASE WHEN cardinality(l.tags) = 0 THEN ARRAY['']::text[]
									ELSE l.tags END) t(tag)
	 WHERE j.state = 'active' AND NOT l.paused
	   AND NOT frameq._parked_over_cap(j.id, coalesce(j.max_cc, -1), coalesce(j.max_gpus, -1),
									   j.folder, coalesce(fo.max_cc, -1), coalesce(fo.max_gpus, -1),
									   l.min_cc, l.gpus)
	   AND NOT EXISTS (SELECT 1 FROM frameq.dispatch_queue q
						WHERE q.layer = l.id AND q.job = j.id AND q.show = j.show AND q.tag = t.tag
						  AND q.gpu = (l.gpus > 0) AND q.dispatch_order = l.dispatch_order
						  AND (q.min_cc, q.memory, q.gpus, q.gpu_memory)
							  = (l.min_cc, r.memory, l.gpus, l.gpu_memory)
						  AND (q.mem_class, q.core_class)
							  = (frameq._memory_class(r.memory), frameq._cores_class(l.min_cc)));

	/*
	 * A raised task's memory is above its layer's (complete() raises it
	 * only above): reserve() takes a row below the layer's for stale.
	 */
	RETURN QUERY
	SELECT 'no waiting frame is passed over', format('task %s is raised to %s bytes of memory, no more than its layer''s %s',
							f.id, f.memory, l.memory)
	  FROM frameq.frame f JOIN frameq.layer l ON l.id = f.layer
	 WHERE f.state = 'waiting' AND f.not_before IS NULL AND f.memory IS NOT NULL
	   AND f.memory <= l.memory;

	/*
	 * A delayed task is not bookable, so none of the above asks about it;
	 * what must hold instead is that the worker ends its delay within a
	 * round of its time.  A minute's slack, for a worker between restarts.
	 */
	late := clock_timestamp() - interval '1 minute';
	RETURN QUERY
	SELECT 'no waiting frame is passed over',
		   format('task %s is still delayed, %s after its delay ended', f.id,
				  date_trunc('second', clock_timestamp() - f.not_before))
	  FROM frameq.frame f
	 WHERE f.state = 'waiting' AND f.not_before IS NOT NULL AND f.not_before < late;

	RETURN QUERY
	SELECT 'no waiting frame is passed over',
		   format('dispatch queue rows of layer %s are in stream (show %s, tag "%s", gpu %s, memory class %s, cores class %s), which dispatch_class does not list',
				  min(q.layer), q.show, q.tag, q.gpu, q.mem_class, q.core_class)
	  FROM frameq.dispatch_queue q
	 WHERE NOT EXISTS (SELECT 1 FROM frameq.dispatch_class c
						WHERE (c.show, c.tag, c.gpu, c.mem_class, c.core_class)
							  = (q.show, q.tag, q.gpu, q.mem_class, q.core_class))
	 GROUP BY q.show, q.tag, q.gpu, q.mem_class, q.core_class;

	/*
	 * Dependencies (depends.sql): the counts are exact, a task is 'depend'
	 * exactly when something holds it (running and finished tasks may be
	 * held: depend_job leaves them), and no unmet dependency has a
	 * prerequisite that is done.
	 */
	RETURN QUERY
	SELECT 'dependencies', format('task %s counts %s unmet frame dependencies, not %s',
								  f.id, f.deps_left, coalesce(e.n, 0))
	  FROM frameq.frame f
	  LEFT JOIN (SELECT x.frame, count(*) AS n FROM frameq.depends x
				  WHERE x.kind = 'frame' AND NOT x.satisfied GROUP BY x.frame) e ON e.frame = f.id
	 WHERE f.deps_left <> coalesce(e.n, 0);

	RETURN QUERY
	SELECT 'dependencies', format('layer %s counts %s unmet dependencies, not %s',
								  l.id, l.deps_left, n.n)
	  FROM frameq.layer l
	 CROSS JOIN LATERAL (SELECT count(*) AS n FROM frameq.depend d
						  WHERE NOT d.satisfied
							AND ((d.kind = 'layer' AND d.layer = l.id)
								 OR (d.kind = 'job' AND d.job = l.job))) n
	 WHERE l.deps_left <> n.n;

	RETURN QUERY
	SELECT 'dependencies', format('task %s is %s but %s', f.id, f.state,
								  CASE WHEN f.state = 'depend' THEN 'nothing holds it'
									   ELSE 'a dependency holds it' END)
	  FROM frameq.frame f JOIN frameq.layer l ON l.id = f.layer
	 WHERE (f.state = 'depend' AND f.deps_left = 0 AND l.deps_left = 0)
		OR (f.state = 'waiting' AND (f.deps_left > 0 OR l.deps_left > 0));

	RETURN QUERY
	SELECT 'dependencies', format('task %s still waits for task %s, which is %s', e.frame, e.on_frame, p.state)
	  FROM frameq.depends e JOIN frameq.frame p ON p.id = e.on_frame
	 WHERE e.kind = 'frame' AND NOT e.satisfied AND p.state IN ('succeeded', 'eaten');

	RETURN QUERY
	SELECT 'dependencies', format('layer %s still waits for layer %s, which is done', d.layer, d.on_layer)
	  FROM frameq.depend d
	 WHERE d.kind = 'layer' AND NOT d.satisfied
	   AND NOT EXISTS (SELECT 1 FROM frameq.frame f
						WHERE f.layer = d.on_layer AND f.state IN ('waiting', 'depend', 'running', 'dead'));

	RETURN QUERY
	SELECT 'dependencies', format('task %s of layer %s, a prerequisite, is not marked prereq', f.id, f.layer)
	  FROM frameq.depend d JOIN frameq.frame f ON f.layer = d.on_layer
	 WHERE d.kind = 'layer' AND NOT f.prereq;

	RETURN QUERY
	SELECT 'dependencies', format('job %s still waits for job %s, which is done', d.job, d.on_job)
	  FROM frameq.depend d JOIN frameq.job j ON j.id = d.on_job
	 WHERE d.kind = 'job' AND NOT d.satisfied AND j.state = 'finished'
	   AND NOT EXISTS (SELECT 1 FROM frameq.frame f WHERE f.job = j.id AND f.state = 'dead');

	/* a job whose finish the worker has yet to decide (see job_finish_check) is not wrong */
	RETURN QUERY
	SELECT 'job state', format('job %s is %s but none of its frames is live', j.id, j.state)
	  FROM frameq.job j
	 WHERE j.state IN ('active', 'paused')
	   AND NOT EXISTS (SELECT 1 FROM frameq.job_finish_check c WHERE c.job = j.id)
	   AND EXISTS (SELECT 1 FROM frameq.frame f WHERE f.job = j.id)
	   AND NOT EXISTS (SELECT 1 FROM frameq.frame f
					   WHERE f.job = j.id AND f.state IN ('waiting', 'depend', 'running'));

	RETURN QUERY
	SELECT 'job state', format('job %s is finished but frame %s is %s', j.id, f.id, f.state)
	  FROM frameq.job j JOIN frameq.frame f ON f.job = j.id
	 WHERE j.state = 'finished' AND f.state IN ('waiting', 'depend', 'running');

	/* what frame's keys would guard (procs.sql): its layer exists and is of its job */
	RETURN QUERY
	SELECT 'job state', CASE WHEN l.id IS NULL
							 THEN format('frame %s names layer %s, which does not exist', f.id, f.layer)
							 ELSE format('frame %s is of job %s but names layer %s, which is of job %s',
										 f.id, f.job, f.layer, l.job) END
	  FROM frameq.frame f LEFT JOIN frameq.layer l ON l.id = f.layer
	 WHERE l.job IS DISTINCT FROM f.job;

	/*
	 * Host blocks (src/limits.c): a host is blocked for a job exactly when
	 * its count of the job's failures has reached the job's limit; reserve()
	 * sees every block (the job is marked, unless the worker has yet to
	 * settle it: job_limit_check); and no count is above the failed runs
	 * it can have counted: the job's runs on that host that ended since the
	 * count began, completed with a non-zero exit status or a signal, or
	 * ended timeout, stalled or oom.
	 */
	RETURN QUERY
	SELECT 'host blocks', format('host %s has failed job %s %s times, its host_failure_limit is %s, but it is %s',
								 h.name, b.job, b.failures, l.lim,
								 CASE WHEN b.blocked_at IS NULL THEN 'not blocked' ELSE 'blocked' END)
	  FROM frameq.job_host_failure b
	  JOIN frameq.job j ON j.id = b.job
	  JOIN frameq.host h ON h.id = b.host
	 CROSS JOIN LATERAL (SELECT coalesce(j.host_failure_limit, frameq._default_host_failure_limit()) AS lim) l
	 WHERE (b.blocked_at IS NULL) = (l.lim > 0 AND b.failures >= l.lim);

	RETURN QUERY
	SELECT 'host blocks', format('host %s is blocked for job %s, but the job is not marked: reserve() would book it there',
								 h.name, b.job)
	  FROM frameq.job_host_failure b
	  JOIN frameq.job j ON j.id = b.job
	  JOIN frameq.host h ON h.id = b.host
	 WHERE b.blocked_at IS NOT NULL AND NOT j.host_blocks
	   AND NOT EXISTS (SELECT 1 FROM frameq.job_limit_check c WHERE c.job = b.job);

	RETURN QUERY
	WITH failed AS (
		SELECT r.job, r.host, r.ended_at FROM frameq.run r
		 WHERE r.reason IN ('timeout', 'stalled', 'oom')
			OR (r.reason = 'completed' AND (r.exit_status <> 0 OR r.exit_signal <> 0)))
	SELECT 'host blocks', format('job %s counts %s failures on host %s since %s, but only %s of its runs there failed since',
								 b.job, b.failures, h.name, b.counted_since, n.n)
	  FROM frameq.job_host_failure b
	  JOIN frameq.host h ON h.id = b.host
	 CROSS JOIN LATERAL (SELECT count(*) AS n FROM failed x
						  WHERE x.job = b.job AND x.host = b.host
							AND x.ended_at >= b.counted_since) n
	 WHERE b.failures > n.n;
END
$$;
