/*
 * ---------------------------------------------------------------------
 * The dispatch queue: no waiting frame is passed over (issue 12).
 *
 * reserve() used to walk a show's active jobs in policy order, one SQL
 * probe per job and layer, and gave up after frameq.max_jobs_examined of
 * them; jobs with nothing the host could book counted too, so an idle host
 * could be told "nothing to do" while work it could run waited behind
 * 1,000 jobs whose frames were all running.
 *
 * Now reserve() reads candidate layers, in policy order, from an index of
 * the layers that may have waiting frames.  frameq.dispatch_queue holds a
 * row for such a layer per tag it asks for ('' for an untagged layer),
 * keyed so that one index range is one (show, tag, needs-gpus) stream in
 * policy order; a host merges the streams of its own tags (and of no tag,
 * and of GPU layers only if it has GPUs), so layers it cannot run by tags
 * or GPUs are never read, and the resource minimums are index conditions.
 *
 * The rows are a superset: a row may name a layer that has no waiting
 * frame left, or carry a job priority that has since changed.  reserve()
 * deletes such rows when it meets them.  What must never happen is a
 * waiting frame of an active job whose layer has no row; check() says so
 * if it does.  How that holds without any waiting:
 *
 * - rows are only inserted, by whoever makes a frame waiting (the triggers
 *	 below: submit, a release to waiting, retry_frame, anything to come),
 *	 and by set_job when a job is resumed or its priority changes (all of
 *	 the job's layers: it need not see a release in flight);
 * - reserve() deletes a row only in one statement whose snapshot sees no
 *	 waiting frame of the layer (or the job not active at the row's
 *	 priority), and only rows it could lock without waiting (SKIP LOCKED).
 *	 A frame made waiting after that snapshot came with its own row, which
 *	 the snapshot does not see and so cannot delete; one made waiting
 *	 before it is seen, and nothing is deleted.
 * No row is ever updated, and no insert can conflict with anything (there
 * is no unique key): nobody ever waits on this table.  A row is per layer,
 * written when a layer's frames become waiting and deleted once when it
 * runs dry: no booking writes a row that another booking must also write.
 * ---------------------------------------------------------------------
 */

CREATE TABLE frameq.dispatch_queue (
	show		int NOT NULL,
	tag			text NOT NULL,			/* '' for a layer with no tags */
	gpu			bool NOT NULL,			/* the layer needs gpus */
	priority	int NOT NULL,			/* the job's, when the row was written */
	job			bigint NOT NULL,
	dispatch_order int NOT NULL,
	layer		bigint NOT NULL,
	min_cc		int NOT NULL,
	memory		bigint NOT NULL,
	gpus		int NOT NULL,
	gpu_memory	bigint NOT NULL
);
/*
 * One stream per (show, tag, gpu), in policy order; the minimums are key
 * columns so that a layer too big for the host is rejected on the index
 * tuple, without a heap fetch.
 */
CREATE INDEX dispatch_queue_order ON frameq.dispatch_queue
	(show, tag, gpu, priority DESC, job, dispatch_order, layer, min_cc, memory, gpus, gpu_memory);
CREATE INDEX dispatch_queue_layer ON frameq.dispatch_queue (layer);

/* queue these layers at their job's current priority, one row per tag */
CREATE FUNCTION frameq._queue_layers(layers bigint[]) RETURNS void
LANGUAGE sql AS $$
	INSERT INTO frameq.dispatch_queue
		(show, tag, gpu, priority, job, dispatch_order, layer, min_cc, memory, gpus, gpu_memory)
	SELECT j.show, t.tag, l.gpus OPERATOR(pg_catalog.>) 0, j.priority, j.id, l.dispatch_order,
		   l.id, l.min_cc, l.memory, l.gpus, l.gpu_memory
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
$$;

/* frames inserted waiting (submit): queue their layers, once per statement */
CREATE FUNCTION frameq._frame_queue_inserted() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
	PERFORM frameq._queue_layers(ARRAY(SELECT DISTINCT n.layer FROM new_frames n
										WHERE n.state OPERATOR(pg_catalog.=) 'waiting'));
	RETURN NULL;
END
$$;
CREATE TRIGGER frame_queue_inserted AFTER INSERT ON frameq.frame
	REFERENCING NEW TABLE AS new_frames
	FOR EACH STATEMENT EXECUTE FUNCTION frameq._frame_queue_inserted();

/*
 * A frame made waiting again (release, retry_frame, a dependency met):
 * queue its layer.  A row trigger with a WHEN clause costs a booking's
 * claim nothing; a statement trigger with transition tables would copy
 * every claimed row.
 */
CREATE FUNCTION frameq._frame_queue_waiting() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
	PERFORM frameq._queue_layers(ARRAY[NEW.layer]);
	RETURN NULL;
END
$$;
CREATE TRIGGER frame_queue_waiting AFTER UPDATE OF state ON frameq.frame
	FOR EACH ROW WHEN (NEW.state = 'waiting' AND OLD.state IS DISTINCT FROM 'waiting')
	EXECUTE FUNCTION frameq._frame_queue_waiting();

/*
 * A job resumed or given a new priority: queue every layer of it at the
 * new priority (not only those with waiting frames: a release in flight
 * that this snapshot cannot see may have queued its layer at the old
 * priority).  Rows of layers with nothing waiting go at their first read.
 */
CREATE FUNCTION frameq._job_queue() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
	PERFORM frameq._queue_layers(ARRAY(SELECT l.id FROM frameq.layer l
										WHERE l.job OPERATOR(pg_catalog.=) NEW.id));
	RETURN NULL;
END
$$;
CREATE TRIGGER job_queue AFTER UPDATE OF state, priority ON frameq.job
	FOR EACH ROW WHEN (NEW.state = 'active' AND
					   (OLD.state IS DISTINCT FROM 'active' OR OLD.priority IS DISTINCT FROM NEW.priority))
	EXECUTE FUNCTION frameq._job_queue();

/*
 * reserve()'s tidying, at most once per call: rows it met that are stale
 * (the job is not active, or has another priority now: then its layers are
 * queued at the new one first), and layers it found with no frame to take.
 * Each delete is one statement, so its test and what it deletes share one
 * snapshot (see the top of this file), and takes only rows it can lock
 * without waiting.
 */
CREATE FUNCTION frameq._dispatch_tidy(stale tid[], emptied bigint[]) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
	IF pg_catalog.cardinality(stale) OPERATOR(pg_catalog.>) 0 THEN
		PERFORM frameq._queue_layers(ARRAY(
			SELECT DISTINCT q.layer FROM frameq.dispatch_queue q
			  JOIN frameq.job j ON j.id OPERATOR(pg_catalog.=) q.job
			 WHERE q.ctid OPERATOR(pg_catalog.=) ANY (stale) AND j.state OPERATOR(pg_catalog.=) 'active'
			   AND j.priority OPERATOR(pg_catalog.<>) q.priority));
		DELETE FROM frameq.dispatch_queue q
		 WHERE q.ctid OPERATOR(pg_catalog.=) ANY (ARRAY(
				SELECT x.ctid FROM frameq.dispatch_queue x
				 WHERE x.ctid OPERATOR(pg_catalog.=) ANY (stale) FOR UPDATE SKIP LOCKED))
		   AND NOT EXISTS (SELECT 1 FROM frameq.job j
							WHERE j.id OPERATOR(pg_catalog.=) q.job AND j.state OPERATOR(pg_catalog.=) 'active'
							  AND j.priority OPERATOR(pg_catalog.=) q.priority);
	END IF;
	IF pg_catalog.cardinality(emptied) OPERATOR(pg_catalog.>) 0 THEN
		DELETE FROM frameq.dispatch_queue q
		 WHERE q.ctid OPERATOR(pg_catalog.=) ANY (ARRAY(
				SELECT x.ctid FROM frameq.dispatch_queue x
				 WHERE x.layer OPERATOR(pg_catalog.=) ANY (emptied) FOR UPDATE SKIP LOCKED))
		   AND NOT EXISTS (SELECT 1 FROM frameq.frame f
							WHERE f.layer OPERATOR(pg_catalog.=) q.layer
							  AND f.state OPERATOR(pg_catalog.=) 'waiting');
	END IF;
END
$$;

/* an upgraded farm: queue every layer that has waiting frames now */
SELECT frameq._queue_layers(ARRAY(
	SELECT DISTINCT f.layer FROM frameq.frame f WHERE f.state OPERATOR(pg_catalog.=) 'waiting'));

/*
 * check(): the 0.1.0 invariants, and "no waiting frame is passed over" as
 * far as the database can show it: every layer of an active job that has a
 * waiting frame has a dispatch queue row for each tag it asks for.
 */
CREATE OR REPLACE FUNCTION frameq.check() RETURNS TABLE (invariant text, detail text)
LANGUAGE plpgsql AS $$
BEGIN
	PERFORM frameq._ledger_ensure();

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
	WITH actual AS (
		SELECT 'subscription'::text AS kind, show::bigint AS id, allocation::bigint AS id2,
			   sum(cores_cc)::int AS cc, sum(gpus)::int AS gpus, count(*)::int AS n
		  FROM frameq.proc GROUP BY show, allocation
		UNION ALL
		SELECT 'folder', folder, 0, sum(cores_cc), sum(gpus), count(*)
		  FROM frameq.proc WHERE folder IS NOT NULL GROUP BY folder
		UNION ALL
		SELECT 'job', job, 0, sum(cores_cc), sum(gpus), count(*) FROM frameq.proc GROUP BY job
		UNION ALL
		SELECT 'limit', lid, 0, sum(cores_cc), sum(gpus), count(*)
		  FROM frameq.proc, unnest(limits) lid GROUP BY lid
	)
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

	/* a row per tag, of the job's show and resources; any priority (see 40_dispatch.sql) */
	RETURN QUERY
	SELECT 'no waiting frame is passed over',
		   format('layer %s of active job %s has waiting frames but no dispatch queue row for tag "%s"',
				  l.id, j.id, t.tag)
	  FROM frameq.layer l
	  JOIN frameq.job j ON j.id = l.job
	 CROSS JOIN LATERAL unnest(CASE WHEN cardinality(l.tags) = 0 THEN ARRAY['']::text[]
									ELSE l.tags END) t(tag)
	 WHERE j.state = 'active'
	   AND EXISTS (SELECT 1 FROM frameq.frame f WHERE f.layer = l.id AND f.state = 'waiting')
	   AND NOT EXISTS (SELECT 1 FROM frameq.dispatch_queue q
						WHERE q.layer = l.id AND q.job = j.id AND q.show = j.show AND q.tag = t.tag
						  AND q.gpu = (l.gpus > 0) AND q.dispatch_order = l.dispatch_order
						  AND (q.min_cc, q.memory, q.gpus, q.gpu_memory)
							  = (l.min_cc, l.memory, l.gpus, l.gpu_memory));

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
