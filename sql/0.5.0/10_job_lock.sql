/*
 * A job's dispatch lock (src/frameq.h, sql/src/locks.sql): freeing a task
 * relies on the job's dispatch queue rows and dependency counts under it,
 * instead of a row lock that every freeing transaction shared (the queue
 * row's FOR KEY SHARE and the layer row's FOR SHARE, each rewritten as a
 * multixact by each).  _queue_layers and the gate (frame_gate) hold it,
 * reserve()'s tidy and depend_job() take it.
 */
CREATE FUNCTION frameq._hold_job(job bigint) RETURNS boolean
	AS 'MODULE_PATHNAME', 'frameq_hold_job_sql' LANGUAGE C VOLATILE STRICT
	SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION frameq._claim_jobs(jobs bigint[]) RETURNS bigint[]
	AS 'MODULE_PATHNAME', 'frameq_claim_jobs' LANGUAGE C VOLATILE STRICT
	SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION frameq._lock_job(job bigint) RETURNS void
	AS 'MODULE_PATHNAME', 'frameq_lock_job' LANGUAGE C VOLATILE STRICT
	SET search_path = pg_catalog, pg_temp;

REVOKE ALL ON FUNCTION frameq._hold_job(bigint), frameq._claim_jobs(bigint[]),
	frameq._lock_job(bigint) FROM PUBLIC;

CREATE OR REPLACE FUNCTION frameq._queue_layers(layers bigint[]) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp SET plan_cache_mode = force_generic_plan AS $$
DECLARE
	held_layers bigint[] := '{}';
BEGIN
	IF current_setting('transaction_isolation') = 'read committed' THEN
		held_layers := ARRAY(SELECT l.id FROM frameq.layer l
							  WHERE l.id = ANY (layers) AND frameq._hold_job(l.job));
	END IF;
	WITH seen AS (
			SELECT q.layer, q.tag, q.priority FROM frameq.dispatch_queue q
			 WHERE q.layer = ANY (held_layers)),
		 held AS (
			SELECT q.layer, q.tag, q.priority FROM frameq.dispatch_queue q
			 WHERE q.layer = ANY (layers) AND q.layer <> ALL (held_layers)
			   FOR KEY SHARE OF q SKIP LOCKED),
		 queued AS (
			INSERT INTO frameq.dispatch_queue
				(show, tag, gpu, priority, job, dispatch_order, layer, min_cc, memory, gpus, gpu_memory,
				 mem_class, core_class)
			SELECT j.show, t.tag, l.gpus > 0, j.priority, j.id, l.dispatch_order,
				   l.id, l.min_cc, l.memory, l.gpus, l.gpu_memory,
				   frameq._memory_class(l.memory), frameq._cores_class(l.min_cc)
			  FROM frameq.layer l
			  JOIN frameq.job j ON j.id = l.job
			 CROSS JOIN LATERAL (SELECT DISTINCT x AS tag
								   FROM unnest(CASE WHEN cardinality(l.tags) = 0
													THEN ARRAY['']::text[] ELSE l.tags END) x) t
			 WHERE l.id = ANY (layers)
			   AND NOT EXISTS (SELECT 1 FROM seen h
								WHERE h.layer = l.id AND h.tag = t.tag AND h.priority = j.priority)
			   AND NOT EXISTS (SELECT 1 FROM held h
								WHERE h.layer = l.id AND h.tag = t.tag AND h.priority = j.priority)
			RETURNING show, tag, gpu, mem_class, core_class)
	INSERT INTO frameq.dispatch_class (show, tag, gpu, mem_class, core_class)
	SELECT DISTINCT n.show, n.tag, n.gpu, n.mem_class, n.core_class
	  FROM queued n
	 WHERE NOT EXISTS (SELECT 1 FROM frameq.dispatch_class c
						WHERE c.show = n.show AND c.tag = n.tag AND c.gpu = n.gpu
						  AND c.mem_class = n.mem_class AND c.core_class = n.core_class)
		/*
		 * A transaction snapshot may be older than a prune that removed
		 * the entry it sees: list the stream again (the prune removes
		 * the duplicate).
		 */
		OR current_setting('transaction_isolation') <> 'read committed';
END
$$;

CREATE OR REPLACE FUNCTION frameq._frame_queue_waiting() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp SET plan_cache_mode = force_generic_plan AS $$
DECLARE
	held bool;
BEGIN
	/*
	 * Most often the layer has its rows already (tasks freed one at a
	 * time): with the job's dispatch lock held they stay, as in
	 * _queue_layers, and a test for them (a statement after the lock's)
	 * costs less than writing nothing there.
	 */
	held := current_setting('transaction_isolation') = 'read committed' AND frameq._hold_job(NEW.job);
	IF held AND NOT EXISTS (
			SELECT 1 FROM frameq.layer l
			  JOIN frameq.job j ON j.id = l.job
			 CROSS JOIN LATERAL unnest(CASE WHEN cardinality(l.tags) = 0
											THEN ARRAY['']::text[] ELSE l.tags END) t(tag)
			 WHERE l.id = NEW.layer
			   AND NOT EXISTS (SELECT 1 FROM frameq.dispatch_queue q
								WHERE q.layer = l.id AND q.tag = t.tag AND q.priority = j.priority)) THEN
		RETURN NULL;
	END IF;
	PERFORM frameq._queue_layers(ARRAY[NEW.layer]);
	RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION frameq._dispatch_tidy(stale tid[], emptied bigint[], parked tid[]) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	jobs bigint[];
BEGIN
	IF pg_catalog.cardinality(stale) OPERATOR(pg_catalog.>) 0 THEN
		PERFORM frameq._queue_layers(ARRAY(
			SELECT DISTINCT q.layer FROM frameq.dispatch_queue q
			  JOIN frameq.job j ON j.id OPERATOR(pg_catalog.=) q.job
			 WHERE q.ctid OPERATOR(pg_catalog.=) ANY (stale) AND j.state OPERATOR(pg_catalog.=) 'active'
			   AND j.priority OPERATOR(pg_catalog.<>) q.priority));
		jobs := frameq._claim_jobs(ARRAY(SELECT DISTINCT x.job FROM frameq.dispatch_queue x
										  WHERE x.ctid OPERATOR(pg_catalog.=) ANY (stale)));
		DELETE FROM frameq.dispatch_queue q
		 WHERE q.ctid OPERATOR(pg_catalog.=) ANY (ARRAY(
				SELECT x.ctid FROM frameq.dispatch_queue x
				 WHERE x.ctid OPERATOR(pg_catalog.=) ANY (stale)
				   AND x.job OPERATOR(pg_catalog.=) ANY (jobs) FOR UPDATE SKIP LOCKED))
		   AND NOT EXISTS (SELECT 1 FROM frameq.job j
							WHERE j.id OPERATOR(pg_catalog.=) q.job AND j.state OPERATOR(pg_catalog.=) 'active'
							  AND j.priority OPERATOR(pg_catalog.=) q.priority);
	END IF;
	IF pg_catalog.cardinality(emptied) OPERATOR(pg_catalog.>) 0 THEN
		jobs := frameq._claim_jobs(ARRAY(SELECT DISTINCT x.job FROM frameq.dispatch_queue x
										  WHERE x.layer OPERATOR(pg_catalog.=) ANY (emptied)));
		DELETE FROM frameq.dispatch_queue q
		 WHERE q.ctid OPERATOR(pg_catalog.=) ANY (ARRAY(
				SELECT x.ctid FROM frameq.dispatch_queue x
				 WHERE x.layer OPERATOR(pg_catalog.=) ANY (emptied)
				   AND x.job OPERATOR(pg_catalog.=) ANY (jobs) FOR UPDATE SKIP LOCKED))
		   AND NOT EXISTS (SELECT 1 FROM frameq.frame f
							WHERE f.layer OPERATOR(pg_catalog.=) q.layer
							  AND f.state OPERATOR(pg_catalog.=) 'waiting');
	END IF;
	IF pg_catalog.cardinality(parked) OPERATOR(pg_catalog.>) 0 THEN
		jobs := frameq._claim_jobs(ARRAY(SELECT DISTINCT x.job FROM frameq.dispatch_queue x
										  WHERE x.ctid OPERATOR(pg_catalog.=) ANY (parked)));
		DELETE FROM frameq.dispatch_queue q
		 WHERE q.ctid OPERATOR(pg_catalog.=) ANY (ARRAY(
				SELECT x.ctid FROM frameq.dispatch_queue x
				 WHERE x.ctid OPERATOR(pg_catalog.=) ANY (parked)
				   AND x.job OPERATOR(pg_catalog.=) ANY (jobs) FOR UPDATE SKIP LOCKED))
		   AND EXISTS (SELECT 1 FROM frameq.job j
						 LEFT JOIN frameq.folder f ON f.id OPERATOR(pg_catalog.=) j.folder
						WHERE j.id OPERATOR(pg_catalog.=) q.job
						  AND frameq._parked_over_cap(j.id, coalesce(j.max_cc, -1),
													  coalesce(j.max_gpus, -1), j.folder,
													  coalesce(f.max_cc, -1), coalesce(f.max_gpus, -1),
													  q.min_cc, q.gpus));
	END IF;
END
$$;

CREATE OR REPLACE FUNCTION frameq._frame_gate() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp SET plan_cache_mode = force_generic_plan AS $$
DECLARE
	held bool;
BEGIN
	IF NEW.deps_left > 0 THEN
		NEW.state := 'depend';
		RETURN NEW;
	END IF;
	held := current_setting('transaction_isolation') = 'read committed' AND frameq._hold_job(NEW.job);
	/* a statement after the lock's: its snapshot follows it */
	IF held AND (SELECT l.deps_left FROM frameq.layer l WHERE l.id = NEW.layer) = 0 THEN
		RETURN NEW;
	END IF;
	IF (SELECT l.deps_left FROM frameq.layer l WHERE l.id = NEW.layer FOR SHARE) > 0 THEN
		NEW.state := 'depend';
	END IF;
	RETURN NEW;
END
$$;

CREATE OR REPLACE FUNCTION frameq.depend_job(job bigint, on_job bigint) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
	PERFORM frameq._not_null(job, 'job');
	PERFORM frameq._not_null(on_job, 'on_job');
	/* the job's waiting tasks are found with a snapshot taken after its row is locked */
	IF current_setting('transaction_isolation') <> 'read committed' THEN
		RAISE EXCEPTION 'depend_job must run in a READ COMMITTED transaction'
			USING ERRCODE = 'feature_not_supported',
				  HINT = 'A transaction snapshot taken earlier may miss tasks made waiting since.';
	END IF;
	PERFORM frameq._authorize_job(job);
	/*
	 * Before any row lock: every transaction making the job's tasks waiting
	 * with the lock held ends first, and those that follow read the count
	 * under FOR SHARE (the gate, frame_gate).
	 */
	PERFORM frameq._lock_job(job);
	PERFORM 1 FROM frameq.job j WHERE j.id = depend_job.job FOR NO KEY UPDATE;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'job % does not exist', job USING ERRCODE = 'undefined_object';
	END IF;
	PERFORM frameq._check_job_depend(job, on_job, 'on_job');
	IF (SELECT count(*) FROM frameq.depend d WHERE d.kind = 'job' AND d.job = depend_job.job)
	   >= frameq._max_job_depends() THEN
		PERFORM frameq._too_big('on_job', pg_catalog.format('job %s has %s job dependencies already',
															job, frameq._max_job_depends()));
	END IF;
	PERFORM frameq._add_job_depend(job, on_job);
END
$$;

