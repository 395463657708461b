/*
 * Every function, view and trigger that 0.6.0 adds or changes, in its final
 * form (sql/src/), in the install script's order; what 0.6.0 removes is
 * dropped first.  Functions new in 0.6.0 are revoked from PUBLIC at the
 * end; the pieces after this one grant those of the public API.
 * Generated from the topic files: edit those.
 */

DROP FUNCTION frameq._queue_layers(bigint[]);

CREATE FUNCTION frameq._largest_host_memory(layer bigint) RETURNS bigint
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
	SELECT max(h.memory)
	  FROM frameq.layer l
	  JOIN frameq.job j ON j.id OPERATOR(pg_catalog.=) l.job
	  JOIN frameq.subscription s ON s.show OPERATOR(pg_catalog.=) j.show
	  JOIN frameq.host h ON h.allocation OPERATOR(pg_catalog.=) s.allocation
	 WHERE l.id OPERATOR(pg_catalog.=) $1 AND h.retired_at IS NULL
	   AND (pg_catalog.cardinality(l.tags) OPERATOR(pg_catalog.=) 0
			OR h.tags OPERATOR(pg_catalog.&&) l.tags)
	   AND h.cores_cc OPERATOR(pg_catalog.>=) l.min_cc AND h.gpus OPERATOR(pg_catalog.>=) l.gpus
	   AND h.gpu_memory OPERATOR(pg_catalog.>=) l.gpu_memory
$$;

CREATE FUNCTION frameq._queue_layers(layers bigint[], raised_layer bigint DEFAULT NULL,
									 raised_memory bigint DEFAULT NULL) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp SET plan_cache_mode = force_generic_plan AS $$
DECLARE
	all_layers bigint[] := CASE WHEN raised_layer IS NULL THEN layers ELSE layers || raised_layer END;
	held_layers bigint[] := '{}';
BEGIN
	IF current_setting('transaction_isolation') = 'read committed' THEN
		/*
		 * The jobs of these layers only: OFFSET 0 keeps _hold_job out of
		 * the scan of layer, where a plan (a sequential scan of a small
		 * table) could call it first, on every job's layer.
		 */
		held_layers := ARRAY(SELECT x.id FROM (SELECT l.id, l.job FROM frameq.layer l
												WHERE l.id = ANY (all_layers) OFFSET 0) x
							  WHERE frameq._hold_job(x.job));
	END IF;
	WITH wanted AS (
			SELECT l.id AS layer, l.memory FROM frameq.layer l WHERE l.id = ANY (layers)
			UNION
			SELECT f.layer, f.memory FROM frameq.frame f
			 WHERE f.layer = ANY (layers) AND f.state = 'waiting' AND f.not_before IS NULL
			   AND f.memory IS NOT NULL
			UNION
			SELECT raised_layer, raised_memory WHERE raised_layer IS NOT NULL),
		 seen AS (
			SELECT q.layer, q.tag, q.priority, q.memory FROM frameq.dispatch_queue q
			 WHERE q.layer = ANY (held_layers)),
		 held AS (
			SELECT q.layer, q.tag, q.priority, q.memory FROM frameq.dispatch_queue q
			 WHERE q.layer = ANY (all_layers) AND q.layer <> ALL (held_layers)
			   FOR KEY SHARE OF q SKIP LOCKED),
		 queued AS (
			INSERT INTO frameq.dispatch_queue
				(show, tag, gpu, priority, job, dispatch_order, layer, min_cc, memory, gpus, gpu_memory,
				 mem_class, core_class)
			SELECT j.show, t.tag, l.gpus > 0, j.priority, j.id, l.dispatch_order,
				   l.id, l.min_cc, w.memory, l.gpus, l.gpu_memory,
				   frameq._memory_class(w.memory), frameq._cores_class(l.min_cc)
			  FROM wanted w
			  JOIN frameq.layer l ON l.id = w.layer
			  JOIN frameq.job j ON j.id = l.job
			 CROSS JOIN LATERAL (SELECT DISTINCT x AS tag
								   FROM unnest(CASE WHEN cardinality(l.tags) = 0
													THEN ARRAY['']::text[] ELSE l.tags END) x) t
			 WHERE NOT EXISTS (SELECT 1 FROM seen h
								WHERE h.layer = l.id AND h.tag = t.tag AND h.priority = j.priority
								  AND h.memory = w.memory)
			   AND NOT EXISTS (SELECT 1 FROM held h
								WHERE h.layer = l.id AND h.tag = t.tag AND h.priority = j.priority
								  AND h.memory = w.memory)
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

CREATE FUNCTION frameq._layer_has_waiting(layer bigint) RETURNS bool
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
	SELECT EXISTS (SELECT 1 FROM frameq.frame f
					WHERE f.layer OPERATOR(pg_catalog.=) $1 AND f.state OPERATOR(pg_catalog.=) 'waiting'
					  AND f.not_before IS NULL AND f.memory IS NULL)
		OR EXISTS (SELECT 1 FROM frameq.frame f
					WHERE f.layer OPERATOR(pg_catalog.=) $1 AND f.state OPERATOR(pg_catalog.=) 'waiting'
					  AND f.not_before IS NULL AND f.memory IS NOT NULL)
$$;

CREATE FUNCTION frameq._row_has_waiting(layer bigint, memory bigint) RETURNS bool
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
	SELECT EXISTS (SELECT 1 FROM frameq.frame f
					WHERE f.layer OPERATOR(pg_catalog.=) $1 AND f.state OPERATOR(pg_catalog.=) 'waiting'
					  AND f.not_before IS NULL AND f.memory IS NULL
					  AND $2 OPERATOR(pg_catalog.=) (SELECT l.memory FROM frameq.layer l
													  WHERE l.id OPERATOR(pg_catalog.=) $1))
		OR EXISTS (SELECT 1 FROM frameq.frame f
					WHERE f.layer OPERATOR(pg_catalog.=) $1 AND f.state OPERATOR(pg_catalog.=) 'waiting'
					  AND f.not_before IS NULL AND f.memory OPERATOR(pg_catalog.=) $2)
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
		   AND NOT frameq._row_has_waiting(q.layer, q.memory);
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

CREATE OR REPLACE FUNCTION frameq._queue_waiting_of(jobs bigint[]) RETURNS void
LANGUAGE sql SET search_path = pg_catalog, pg_temp AS $$
	SELECT frameq._queue_layers(ARRAY(
		SELECT l.id FROM frameq.layer l
		  JOIN frameq.job j ON j.id OPERATOR(pg_catalog.=) l.job
		 WHERE l.job OPERATOR(pg_catalog.=) ANY (jobs)
		   AND j.state OPERATOR(pg_catalog.=) 'active'
		   AND frameq._layer_has_waiting(l.id)))
$$;

CREATE OR REPLACE FUNCTION frameq._queue_waiting_layers() RETURNS void
LANGUAGE sql SET search_path = pg_catalog, pg_temp AS $$
	SELECT frameq._queue_layers(ARRAY(
		SELECT l.id FROM frameq.layer l
		  JOIN frameq.job j ON j.id OPERATOR(pg_catalog.=) l.job
		 CROSS JOIN LATERAL pg_catalog.unnest(
				CASE WHEN pg_catalog.cardinality(l.tags) OPERATOR(pg_catalog.=) 0
					 THEN ARRAY['']::text[] ELSE l.tags END) t(tag)
		 WHERE j.state OPERATOR(pg_catalog.=) 'active'
		   AND frameq._layer_has_waiting(l.id)
		   AND (NOT EXISTS (SELECT 1 FROM frameq.dispatch_queue q
							 WHERE q.layer OPERATOR(pg_catalog.=) l.id
							   AND q.tag OPERATOR(pg_catalog.=) t.tag
							   AND q.priority OPERATOR(pg_catalog.=) j.priority)
				/* a raised size's row may be missing where the layer's is not */
				OR EXISTS (SELECT 1 FROM frameq.frame f
							WHERE f.layer OPERATOR(pg_catalog.=) l.id
							  AND f.state OPERATOR(pg_catalog.=) 'waiting' AND f.not_before IS NULL
							  AND f.memory IS NOT NULL))))
$$;

CREATE OR REPLACE FUNCTION frameq._frame_action(frame bigint, reason text, want text, from_states text[],
									 target text)
RETURNS text LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	f frameq.frame;
	p bigint;
BEGIN
	FOR attempt IN 1 .. 100 LOOP
		SELECT x.id INTO p FROM frameq.proc x WHERE x.frame = _frame_action.frame;
		IF FOUND AND frameq._kill_order(p, reason, want) THEN
			RETURN 'kill order';
		END IF;
		/*
		 * An operator's retry of a finished frame gives it its retries and
		 * requeues back; every move here ends a delay (frame.not_before)
		 * and forgets why a dead task was dead (the memory an OOM raised
		 * it to stays its requirement).
		 */
		UPDATE frameq.frame x SET state = target, version = x.version + 1,
			   retries = CASE WHEN target = 'waiting' THEN 0 ELSE x.retries END,
			   requeues = CASE WHEN target = 'waiting' THEN 0 ELSE x.requeues END,
			   not_before = NULL, dead_reason = NULL
		 WHERE x.id = _frame_action.frame AND x.state = ANY (from_states)
		RETURNING * INTO f;
		IF FOUND THEN
			IF target = 'waiting' THEN
				PERFORM frameq._frame_waiting(f.layer, f.number);
				UPDATE frameq.job j SET state = 'active', finished_at = NULL
				 WHERE j.id = f.job AND j.state = 'finished';
				IF f.state = 'waiting' AND EXISTS (SELECT 1 FROM frameq.job j
													WHERE j.id = f.job AND j.state = 'active') THEN
					PERFORM frameq._announce_ready(f.job, f.layer, 1);
				END IF;
			ELSE
				/*
				 * A completion in flight may have seen this frame still
				 * waiting and left the job open: wait for every one of them
				 * (a release deletes its proc row, which our KEY SHARE lock
				 * waits for) before deciding whether the job is finished.
				 */
				PERFORM 1 FROM frameq.proc x WHERE x.job = f.job FOR KEY SHARE;
				PERFORM frameq._finish_job_if_done(f.job);
			END IF;
			RETURN target;
		END IF;
		SELECT * INTO f FROM frameq.frame x WHERE x.id = _frame_action.frame;
		IF NOT FOUND THEN
			RAISE EXCEPTION 'frame % does not exist', frame USING ERRCODE = 'undefined_object';
		END IF;
		IF f.state <> 'running' THEN
			RETURN 'nothing';	/* already in a state this action leaves alone */
		END IF;
		/* running but its proc went away between our looks: look again */
	END LOOP;
	RAISE EXCEPTION 'frame % kept changing state', frame USING ERRCODE = 'lock_not_available';
END
$$;

CREATE OR REPLACE FUNCTION frameq._announce_job_ready(job bigint) RETURNS void
LANGUAGE sql SET search_path = pg_catalog, pg_temp AS $$
	SELECT frameq._announce_ready(job, l.id, w.n)
	  FROM frameq.layer l
	 CROSS JOIN LATERAL (SELECT (SELECT count(*) FROM frameq.frame f
								  WHERE f.layer = l.id AND f.state = 'waiting' AND f.not_before IS NULL
									AND f.memory IS NULL)
								+ (SELECT count(*) FROM frameq.frame f
									WHERE f.layer = l.id AND f.state = 'waiting' AND f.not_before IS NULL
									  AND f.memory IS NOT NULL) AS n) w
	 WHERE l.job = _announce_job_ready.job AND w.n > 0
	   AND EXISTS (SELECT 1 FROM frameq.job j WHERE j.id = _announce_job_ready.job AND j.state = 'active')
	 ORDER BY l.id
$$;

CREATE OR REPLACE FUNCTION frameq._expire_leases(since timestamptz, at timestamptz DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	period interval := frameq.lease_period();
	/*
	 * "Now" as the worker read it, next to its clock-jump check: a step of
	 * the clock after that check must not make leases look old in this
	 * round (the next round sees the jump).
	 */
	at_time timestamptz := coalesce(at, pg_catalog.clock_timestamp());
	saved_timeout text := pg_catalog.current_setting('lock_timeout');
	candidate int;
	h frameq.host;
	n bigint := 0;
BEGIN
	PERFORM pg_catalog.set_config('lock_timeout',
								  pg_catalog.current_setting('frameq.lock_wait'), true);
	FOR candidate IN SELECT x.id FROM frameq.host x
					  WHERE x.lease_expires_at IS NOT NULL
						AND (greatest(x.last_renewal_at, since) OPERATOR(pg_catalog.+) period)
							OPERATOR(pg_catalog.<) at_time
					  ORDER BY x.id LOOP
		BEGIN
			IF NOT frameq._lock_host(candidate, NULL) THEN
				RAISE LOG 'frameq worker: host % skipped this round: its lock is held by another session',
					candidate;
				CONTINUE;
			END IF;
			SELECT * INTO h FROM frameq.host x WHERE x.id OPERATOR(pg_catalog.=) candidate;
			CONTINUE WHEN h.lease_expires_at IS NULL
					   OR (greatest(h.last_renewal_at, since) OPERATOR(pg_catalog.+) period)
						  OPERATOR(pg_catalog.>=) at_time;
			PERFORM frameq._release_procs(ARRAY(SELECT x.id FROM frameq.proc x
												 WHERE x.host OPERATOR(pg_catalog.=) h.id),
										  'host_lost');
			UPDATE frameq.host x SET lease_expires_at = NULL,
				   epoch = x.epoch OPERATOR(pg_catalog.+) 1,
				   state = CASE WHEN x.state OPERATOR(pg_catalog.=) 'up' THEN 'down' ELSE x.state END,
				   down_reason = CASE WHEN x.state OPERATOR(pg_catalog.=) 'up'
									  THEN 'lease_lost' ELSE x.down_reason END
			 WHERE x.id OPERATOR(pg_catalog.=) h.id;
			n := n OPERATOR(pg_catalog.+) 1;
		EXCEPTION WHEN lock_not_available OR deadlock_detected THEN
			RAISE LOG 'frameq worker: host % skipped this round: a row it needs is locked by another session (%)',
				candidate, SQLERRM;
		END;
	END LOOP;
	PERFORM pg_catalog.set_config('lock_timeout', saved_timeout, true);
	/* for metrics' frameq_lease_expired_total */
	PERFORM frameq._tally_add('lease_expired', '', n);
	RETURN n;
END
$$;

CREATE FUNCTION frameq._prunable(job bigint, cutoff timestamptz) RETURNS bool
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
	SELECT EXISTS (
		SELECT 1 FROM frameq.job j
		 WHERE j.id OPERATOR(pg_catalog.=) $1
		   AND j.state OPERATOR(pg_catalog.=) ANY ('{finished,killed}'::text[])
		   AND j.finished_at OPERATOR(pg_catalog.<) $2
		   AND NOT EXISTS (SELECT 1 FROM frameq.proc p WHERE p.job OPERATOR(pg_catalog.=) j.id)
		   AND NOT EXISTS (SELECT 1 FROM frameq.depend d
							 JOIN frameq.job o ON o.id OPERATOR(pg_catalog.=) d.job
							WHERE d.kind OPERATOR(pg_catalog.=) 'job'
							  AND d.on_job OPERATOR(pg_catalog.=) j.id
							  AND o.state OPERATOR(pg_catalog.<>) ALL ('{finished,killed}'::text[]))
		   AND NOT EXISTS (SELECT 1 FROM frameq.depend d
							 JOIN frameq.job o ON o.id OPERATOR(pg_catalog.=) d.on_job
							WHERE d.kind OPERATOR(pg_catalog.=) 'job'
							  AND d.job OPERATOR(pg_catalog.=) j.id AND NOT d.satisfied
							  AND o.state OPERATOR(pg_catalog.<>) ALL ('{finished,killed}'::text[])))
$$;

CREATE FUNCTION frameq._tally_add(metric text, label text, n bigint) RETURNS void
LANGUAGE sql SET search_path = pg_catalog, pg_temp AS $$
	INSERT INTO frameq.tally AS t (metric, label, value) SELECT $1, $2, $3 WHERE $3 OPERATOR(pg_catalog.>) 0
	ON CONFLICT (metric, label) DO UPDATE SET value = t.value OPERATOR(pg_catalog.+) excluded.value
$$;

CREATE FUNCTION frameq._prune_jobs(jobs bigint[]) RETURNS bigint
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	layers bigint[] := ARRAY(SELECT l.id FROM frameq.layer l WHERE l.job = ANY (jobs));
	r record;
	n bigint;
BEGIN
	FOR r IN WITH gone AS (
				DELETE FROM frameq.run x
				 WHERE x.frame IN (SELECT f.id FROM frameq.frame f WHERE f.layer = ANY (layers))
				RETURNING x.reason)
			 SELECT coalesce(g.reason, '') AS reason, count(*) AS n FROM gone g GROUP BY 1 LOOP
		PERFORM frameq._tally_add('runs_pruned', r.reason, r.n);
	END LOOP;
	DELETE FROM frameq.frame_depend e
	 WHERE e.frame IN (SELECT f.id FROM frameq.frame f WHERE f.layer = ANY (layers));
	DELETE FROM frameq.frame_depend e
	 WHERE e.on_frame IN (SELECT f.id FROM frameq.frame f WHERE f.layer = ANY (layers));
	FOR r IN WITH gone AS (
				DELETE FROM frameq.frame f WHERE f.layer = ANY (layers) RETURNING f.state)
			 SELECT g.state, count(*) AS n FROM gone g GROUP BY 1 LOOP
		PERFORM frameq._tally_add('frames_pruned', r.state, r.n);
	END LOOP;
	DELETE FROM frameq.depend d WHERE d.job = ANY (jobs);
	DELETE FROM frameq.depend d WHERE d.kind = 'job' AND d.on_job = ANY (jobs);
	DELETE FROM frameq.layer_limit x WHERE x.layer = ANY (layers);
	DELETE FROM frameq.layer l WHERE l.id = ANY (layers);
	DELETE FROM frameq.job_host_failure x WHERE x.job = ANY (jobs);
	DELETE FROM frameq.job_limit_check x WHERE x.job = ANY (jobs);
	DELETE FROM frameq.job_finish_check x WHERE x.job = ANY (jobs);
	DELETE FROM frameq.job j WHERE j.id = ANY (jobs);
	GET DIAGNOSTICS n = ROW_COUNT;
	PERFORM frameq._tally_add('jobs_pruned', '', n);
	RETURN n;
END
$$;

CREATE FUNCTION frameq._prune_batch(cutoff timestamptz, max_jobs int, max_tasks int DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	jobs bigint[];
BEGIN
	jobs := ARRAY(SELECT j.id FROM frameq.job j
				   WHERE j.state IN ('finished', 'killed') AND j.finished_at < cutoff
					 AND frameq._prunable(j.id, cutoff)
				   ORDER BY j.finished_at, j.id LIMIT max_jobs
				   FOR UPDATE OF j SKIP LOCKED);
	/* locked: a fresh snapshot sees whatever came first */
	jobs := ARRAY(SELECT x FROM unnest(jobs) x WHERE frameq._prunable(x, cutoff));
	IF max_tasks IS NOT NULL THEN
		/* the running sum only grows: the jobs kept are a prefix */
		jobs := ARRAY(SELECT c.job FROM (
						SELECT x.job, x.ord, sum(x.tasks) OVER (ORDER BY x.ord) AS upto
						  FROM (SELECT u.job, u.ord,
									   (SELECT count(*) FROM frameq.layer l
										  JOIN frameq.frame f ON f.layer = l.id
										 WHERE l.job = u.job) AS tasks
								  FROM unnest(jobs) WITH ORDINALITY u(job, ord)) x) c
					   WHERE c.ord = 1 OR c.upto <= max_tasks
					   ORDER BY c.ord);
	END IF;
	DELETE FROM frameq.dispatch_queue q
	 WHERE q.ctid = ANY (ARRAY(SELECT y.ctid FROM frameq.dispatch_queue y
								WHERE y.job = ANY (jobs) FOR UPDATE SKIP LOCKED));
	jobs := ARRAY(SELECT x FROM unnest(jobs) x
				   WHERE NOT EXISTS (SELECT 1 FROM frameq.dispatch_queue q WHERE q.job = x));
	IF cardinality(jobs) = 0 THEN
		RETURN 0;
	END IF;
	RETURN frameq._prune_jobs(jobs);
END
$$;

CREATE FUNCTION frameq.prune(finished_before interval) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	cutoff timestamptz;
	step bigint;
	n bigint := 0;
BEGIN
	IF finished_before IS NULL THEN
		RAISE EXCEPTION 'finished_before must not be null'
			USING ERRCODE = 'null_value_not_allowed';
	ELSIF finished_before < interval '0' THEN
		RAISE EXCEPTION 'finished_before must not be negative: %', finished_before
			USING ERRCODE = 'invalid_parameter_value';
	ELSIF finished_before > interval '100 years' THEN
		RAISE EXCEPTION 'finished_before is past its bound of 100 years: %', finished_before
			USING ERRCODE = 'program_limit_exceeded';
	END IF;
	cutoff := clock_timestamp() - finished_before;
	LOOP
		step := frameq._prune_batch(cutoff, 100);
		n := n + step;
		EXIT WHEN step = 0;
	END LOOP;
	RETURN n;
END
$$;

CREATE FUNCTION frameq._prune_step(retention int, max_jobs int, max_tasks int) RETURNS bigint
LANGUAGE sql SET search_path = pg_catalog, pg_temp AS $$
	SELECT frameq._prune_batch(pg_catalog.clock_timestamp() OPERATOR(pg_catalog.-)
							   pg_catalog.make_interval(secs => $1), $2, $3)
$$;

CREATE FUNCTION frameq._count_history() RETURNS bigint
LANGUAGE sql SET search_path = pg_catalog, pg_temp AS $$
	WITH counted AS (
		SELECT 'runs_ended'::text AS metric, x.reason AS label, pg_catalog.sum(x.n)::bigint AS n
		  FROM (SELECT r.reason, pg_catalog.count(*) AS n FROM frameq.run r
				 WHERE r.reason IS NOT NULL GROUP BY r.reason
				UNION ALL
				SELECT t.label, t.value FROM frameq.tally t
				 WHERE t.metric OPERATOR(pg_catalog.=) 'runs_pruned') x
		 GROUP BY x.reason
		UNION ALL
		SELECT 'frames_counted', s.state, pg_catalog.count(f.id)
		  FROM pg_catalog.unnest('{waiting,depend,running,succeeded,dead,eaten}'::text[]) s(state)
		  LEFT JOIN frameq.frame f ON f.state OPERATOR(pg_catalog.=) s.state
		 GROUP BY s.state
		UNION ALL
		SELECT 'counted_at', '',
			   pg_catalog.floor(EXTRACT(epoch FROM pg_catalog.clock_timestamp()))::bigint),
	 written AS (
		INSERT INTO frameq.tally AS t (metric, label, value)
		SELECT c.metric, c.label, c.n FROM counted c
		ON CONFLICT (metric, label) DO UPDATE
		   SET value = CASE WHEN t.metric OPERATOR(pg_catalog.=) 'runs_ended'
							THEN GREATEST(t.value, excluded.value) ELSE excluded.value END
		RETURNING 1)
	SELECT pg_catalog.count(*) FROM written
$$;

CREATE FUNCTION frameq._live_frames(OUT state text, OUT n bigint) RETURNS SETOF record
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp SET max_parallel_workers_per_gather = 0 AS $$
	SELECT f.state, pg_catalog.count(*) FROM frameq.frame f
	 WHERE f.state OPERATOR(pg_catalog.=) ANY ('{waiting,depend,running}'::text[]) GROUP BY f.state
	UNION ALL
	SELECT 'dead', pg_catalog.count(*) FROM frameq.frame f WHERE f.state OPERATOR(pg_catalog.=) 'dead'
$$;

CREATE FUNCTION frameq._count_live() RETURNS bigint
LANGUAGE sql SET search_path = pg_catalog, pg_temp AS $$
	WITH counted AS (
		SELECT 'frames_live'::text AS metric, s.state AS label, coalesce(x.n, 0) AS n
		  FROM pg_catalog.unnest('{waiting,depend,running,dead}'::text[]) s(state)
		  LEFT JOIN frameq._live_frames() x ON x.state OPERATOR(pg_catalog.=) s.state
		UNION ALL
		SELECT 'frames_live', 'delayed', pg_catalog.count(*) FROM frameq.frame f
		 WHERE f.state OPERATOR(pg_catalog.=) 'waiting' AND f.not_before IS NOT NULL
		UNION ALL
		SELECT 'live_counted_at', '',
			   pg_catalog.floor(EXTRACT(epoch FROM pg_catalog.clock_timestamp()))::bigint),
	 written AS (
		INSERT INTO frameq.tally AS t (metric, label, value)
		SELECT c.metric, c.label, c.n FROM counted c
		ON CONFLICT (metric, label) DO UPDATE SET value = excluded.value
		RETURNING 1)
	SELECT pg_catalog.count(*) FROM written
$$;

CREATE OR REPLACE VIEW frameq.frames AS
SELECT f.id AS frame, f.job, f.layer, f.number AS frame_number, f.state, f.retries,
	   f.attempts, p.id AS proc, h.name AS host, p.state AS proc_state,
	   frameq._frame_spec(f.number, f.numbers) AS frame_spec,
	   p.last_line, p.progress, p.last_output_at, f.requeues, f.not_before,
	   GREATEST(l.memory, f.memory) AS memory, f.dead_reason
  FROM frameq.frame f
  JOIN frameq.layer l ON l.id = f.layer
  LEFT JOIN frameq.proc p ON p.frame = f.id
  LEFT JOIN frameq.host h ON h.id = p.host;

CREATE OR REPLACE VIEW frameq.runs AS
SELECT r.proc, r.frame, r.job, h.name AS host, r.epoch, r.started_at, r.ended_at,
	   r.exit_status, r.exit_signal, r.max_rss, r.reason, r.kill_reason, r.end_state,
	   (r.cores_cc / 100.0)::numeric(12,2) AS cores, r.memory
  FROM frameq.run r
  JOIN frameq.host h ON h.id = r.host;

CREATE OR REPLACE VIEW frameq.metrics AS
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
  FROM (SELECT unnest('{up,down,repair}'::text[]) UNION SELECT x.state FROM farm x) s(state)
  LEFT JOIN farm h ON h.state = s.state
UNION ALL
SELECT 'frameq_cores', jsonb_build_object('state', s.state),
	   coalesce((SELECT CASE s.state WHEN 'idle' THEN h.idle_cc ELSE h.cc - h.idle_cc END
				   FROM farm h WHERE h.state = 'up'), 0)::float8 / 100.0
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

CREATE OR REPLACE FUNCTION frameq.check() RETURNS TABLE (invariant text, detail text)
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
	 WHERE j.state = 'active'
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

REVOKE ALL ON FUNCTION
	frameq._largest_host_memory(bigint),
	frameq._queue_layers(bigint[], bigint, bigint),
	frameq._layer_has_waiting(bigint),
	frameq._row_has_waiting(bigint, bigint),
	frameq._prunable(bigint, timestamptz),
	frameq._tally_add(text, text, bigint),
	frameq._prune_jobs(bigint[]),
	frameq._prune_batch(timestamptz, int, int),
	frameq.prune(interval),
	frameq._prune_step(int, int, int),
	frameq._count_history(),
	frameq._live_frames(),
	frameq._count_live()
	FROM PUBLIC;
