/*
 * Size classes in the dispatch queue (sql/src/dispatch.sql, "Size
 * classes"): a host no longer meets, even as one index tuple, the layers
 * that need more than twice the memory or cores it has free.  The queue's
 * rows gain their classes and the streams' index puts them ahead of the
 * policy order; dispatch_class lists the streams that have rows.  The rows
 * already queued get their classes here, and their streams are listed.
 */
CREATE FUNCTION frameq._memory_class(memory bigint) RETURNS smallint
	AS 'MODULE_PATHNAME', 'frameq_memory_class' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE
	SET search_path = pg_catalog, pg_temp;
CREATE FUNCTION frameq._cores_class(min_cc int) RETURNS smallint
	AS 'MODULE_PATHNAME', 'frameq_cores_class' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE
	SET search_path = pg_catalog, pg_temp;

ALTER TABLE frameq.dispatch_queue ADD COLUMN mem_class smallint, ADD COLUMN core_class smallint;
UPDATE frameq.dispatch_queue
   SET mem_class = frameq._memory_class(memory), core_class = frameq._cores_class(min_cc);
ALTER TABLE frameq.dispatch_queue ALTER COLUMN mem_class SET NOT NULL,
	ALTER COLUMN core_class SET NOT NULL;
DROP INDEX frameq.dispatch_queue_order;
CREATE INDEX dispatch_queue_order ON frameq.dispatch_queue
	(show, tag, gpu, mem_class, core_class, priority DESC, job, dispatch_order, layer,
	 min_cc, memory, gpus, gpu_memory);

CREATE TABLE frameq.dispatch_class (
	show		int NOT NULL,
	tag			text NOT NULL,
	gpu			bool NOT NULL,
	mem_class	smallint NOT NULL,
	core_class	smallint NOT NULL
);
CREATE INDEX dispatch_class_stream ON frameq.dispatch_class
	(show, tag, gpu, mem_class, core_class);
INSERT INTO frameq.dispatch_class (show, tag, gpu, mem_class, core_class)
SELECT DISTINCT show, tag, gpu, mem_class, core_class FROM frameq.dispatch_queue;

CREATE OR REPLACE FUNCTION frameq._queue_layers(layers bigint[]) RETURNS void
LANGUAGE sql SET search_path = pg_catalog, pg_temp AS $$
	WITH queued AS (
		INSERT INTO frameq.dispatch_queue
			(show, tag, gpu, priority, job, dispatch_order, layer, min_cc, memory, gpus, gpu_memory,
			 mem_class, core_class)
		SELECT j.show, t.tag, l.gpus OPERATOR(pg_catalog.>) 0, j.priority, j.id, l.dispatch_order,
			   l.id, l.min_cc, l.memory, l.gpus, l.gpu_memory,
			   frameq._memory_class(l.memory), frameq._cores_class(l.min_cc)
		  FROM frameq.layer l
		  JOIN frameq.job j ON j.id OPERATOR(pg_catalog.=) l.job
		 CROSS JOIN LATERAL (SELECT DISTINCT x AS tag
							   FROM pg_catalog.unnest(CASE WHEN pg_catalog.cardinality(l.tags) OPERATOR(pg_catalog.=) 0
														   THEN ARRAY['']::text[] ELSE l.tags END) x) t
		 WHERE l.id OPERATOR(pg_catalog.=) ANY (layers)
		   /* once per transaction is enough: rows of our own cannot be deleted under us */
		   AND NOT EXISTS (SELECT 1 FROM frameq.dispatch_queue q
							WHERE q.layer OPERATOR(pg_catalog.=) l.id
							  AND q.priority OPERATOR(pg_catalog.=) j.priority
							  AND q.tag OPERATOR(pg_catalog.=) t.tag
							  AND q.xmin OPERATOR(pg_catalog.=) (pg_catalog.pg_current_xact_id())::xid)
		RETURNING show, tag, gpu, mem_class, core_class)
	INSERT INTO frameq.dispatch_class (show, tag, gpu, mem_class, core_class)
	SELECT DISTINCT n.show, n.tag, n.gpu, n.mem_class, n.core_class
	  FROM queued n
	 WHERE NOT EXISTS (SELECT 1 FROM frameq.dispatch_class c
						WHERE c.show OPERATOR(pg_catalog.=) n.show AND c.tag OPERATOR(pg_catalog.=) n.tag
						  AND c.gpu OPERATOR(pg_catalog.=) n.gpu
						  AND c.mem_class OPERATOR(pg_catalog.=) n.mem_class
						  AND c.core_class OPERATOR(pg_catalog.=) n.core_class)
		/*
		 * A transaction snapshot may be older than a prune that removed
		 * the entry it sees: list the stream again (the prune removes
		 * the duplicate).
		 */
		OR pg_catalog.current_setting('transaction_isolation') OPERATOR(pg_catalog.<>) 'read committed'
$$;

CREATE FUNCTION frameq._dispatch_class_prune() RETURNS bigint
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	removed bigint;
BEGIN
	/* the delete's snapshot must follow the lock */
	IF pg_catalog.current_setting('transaction_isolation') OPERATOR(pg_catalog.<>) 'read committed' THEN
		RETURN 0;
	END IF;
	IF NOT EXISTS (SELECT 1 FROM frameq.dispatch_class c
					WHERE NOT EXISTS (SELECT 1 FROM frameq.dispatch_queue q
									   WHERE q.show OPERATOR(pg_catalog.=) c.show
										 AND q.tag OPERATOR(pg_catalog.=) c.tag
										 AND q.gpu OPERATOR(pg_catalog.=) c.gpu
										 AND q.mem_class OPERATOR(pg_catalog.=) c.mem_class
										 AND q.core_class OPERATOR(pg_catalog.=) c.core_class)
					   OR EXISTS (SELECT 1 FROM frameq.dispatch_class d
								   WHERE (d.show, d.tag, d.gpu, d.mem_class, d.core_class)
										 OPERATOR(pg_catalog.=) (c.show, c.tag, c.gpu, c.mem_class, c.core_class)
									 AND d.ctid OPERATOR(pg_catalog.<) c.ctid)) THEN
		RETURN 0;
	END IF;
	BEGIN
		LOCK TABLE frameq.dispatch_queue IN SHARE MODE NOWAIT;
	EXCEPTION WHEN lock_not_available THEN
		RETURN 0;
	END;
	DELETE FROM frameq.dispatch_class c
	 WHERE NOT EXISTS (SELECT 1 FROM frameq.dispatch_queue q
						WHERE q.show OPERATOR(pg_catalog.=) c.show AND q.tag OPERATOR(pg_catalog.=) c.tag
						  AND q.gpu OPERATOR(pg_catalog.=) c.gpu
						  AND q.mem_class OPERATOR(pg_catalog.=) c.mem_class
						  AND q.core_class OPERATOR(pg_catalog.=) c.core_class)
		OR EXISTS (SELECT 1 FROM frameq.dispatch_class d
					WHERE (d.show, d.tag, d.gpu, d.mem_class, d.core_class)
						  OPERATOR(pg_catalog.=) (c.show, c.tag, c.gpu, c.mem_class, c.core_class)
					  AND d.ctid OPERATOR(pg_catalog.<) c.ctid);
	GET DIAGNOSTICS removed = ROW_COUNT;
	RETURN removed;
END
$$;

CREATE OR REPLACE FUNCTION frameq.check() RETURNS TABLE (invariant text, detail text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
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
	  JOIN frameq.frame f ON f.layer = d.layer AND f.state = 'waiting' AND f.number < d.low;

	/*
	 * A row per tag, of the job's show, resources and size classes, at any
	 * priority, unless the job or its folder is parked over its cap; and
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
	 WHERE j.state = 'active'
	   AND NOT frameq._parked_over_cap(j.id, coalesce(j.max_cc, -1), coalesce(j.max_gpus, -1),
									   j.folder, coalesce(fo.max_cc, -1), coalesce(fo.max_gpus, -1),
									   l.min_cc, l.gpus)
	   AND EXISTS (SELECT 1 FROM frameq.frame f WHERE f.layer = l.id AND f.state = 'waiting')
	   AND NOT EXISTS (SELECT 1 FROM frameq.dispatch_queue q
						WHERE q.layer = l.id AND q.job = j.id AND q.show = j.show AND q.tag = t.tag
						  AND q.gpu = (l.gpus > 0) AND q.dispatch_order = l.dispatch_order
						  AND (q.min_cc, q.memory, q.gpus, q.gpu_memory)
							  = (l.min_cc, l.memory, l.gpus, l.gpu_memory)
						  AND (q.mem_class, q.core_class)
							  = (frameq._memory_class(l.memory), frameq._cores_class(l.min_cc)));

	RETURN QUERY
	SELECT 'no waiting frame is passed over',
		   format('dispatch queue rows of layer %s are in stream (show %s, tag "%s", gpu %s, memory class %s, cores class %s), which dispatch_class does not list',
				  min(q.layer), q.show, q.tag, q.gpu, q.mem_class, q.core_class)
	  FROM frameq.dispatch_queue q
	 WHERE NOT EXISTS (SELECT 1 FROM frameq.dispatch_class c
						WHERE (c.show, c.tag, c.gpu, c.mem_class, c.core_class)
							  = (q.show, q.tag, q.gpu, q.mem_class, q.core_class))
	 GROUP BY q.show, q.tag, q.gpu, q.mem_class, q.core_class;

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
END
$$;

REVOKE ALL ON FUNCTION frameq._memory_class(bigint), frameq._cores_class(int),
	frameq._dispatch_class_prune() FROM PUBLIC;
