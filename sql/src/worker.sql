
/*
 * ---------------------------------------------------------------------
 * worker.sql: leases, and the background worker's steps (src/worker.c
 * runs them, one transaction per step): lease expiry and re-arming,
 * kill order announcements, the job finishes it was left, the end of
 * requeue and retry delays, and pruning (frameq.retention).
 * ---------------------------------------------------------------------
 */

/* a lease's ttl: frameq.lease_ttl */
CREATE FUNCTION frameq._lease_ttl() RETURNS interval
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp AS $$ SELECT current_setting('frameq.lease_ttl')::interval $$;

/*
 * How long after its last renewal a lease is surely over: lease_ttl *
 * (1 + clock_drift) + lease_margin.  One definition, in C (src/lease.c),
 * which the worker's quarantine uses too.
 */
CREATE FUNCTION frameq.lease_period() RETURNS interval
	AS 'MODULE_PATHNAME', 'frameq_lease_period' LANGUAGE C STABLE
	SET search_path = pg_catalog, pg_temp;

/*
 * The period of a lease granted for ttl (host.lease_granted): a lease
 * lasts what its attach or heartbeat handed out, whatever lease_ttl is now.
 */
CREATE FUNCTION frameq._lease_period(ttl interval) RETURNS interval
	AS 'MODULE_PATHNAME', 'frameq_lease_period_for' LANGUAGE C STABLE STRICT
	SET search_path = pg_catalog, pg_temp;

/*
 * The lease_granted that attach and heartbeat record when they grant ttl at
 * "at", the host's previous grant having been "granted" at "renewed": ttl,
 * or more if the previous grant can outlive it.  An agent's renders live
 * to the latest deadline any grant gave them (its supervisors never move a
 * deadline earlier, and a renewal whose answer was lost moves none), so a
 * lease_ttl lowered since must not end the lease sooner: the result makes
 * at + result * (1 + clock_drift) no earlier than renewed + granted *
 * (1 + clock_drift), the previous grant's end by any clock.  By induction
 * it covers every grant before.
 */
CREATE FUNCTION frameq._lease_grant(renewed timestamptz, granted interval, ttl interval,
									at timestamptz) RETURNS interval
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
	SELECT CASE WHEN renewed IS NULL OR granted IS NULL THEN ttl
				ELSE greatest(ttl, granted - (at - renewed) /
								   (1 + current_setting('frameq.clock_drift')::float8)) END
$$;

/*
 * The longest lease a host holds, in microseconds (0: none): the worker
 * stretches the quarantine after a start to cover it.
 */
CREATE FUNCTION frameq._longest_lease_us() RETURNS bigint
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
	SELECT coalesce(max(extract(epoch FROM x.lease_granted) * 1000000), 0)::bigint
	  FROM frameq.host x
	 WHERE x.lease_expires_at IS NOT NULL AND x.retired_at IS NULL
$$;

/*
 * after a start or a clock jump: every current lease runs a full ttl from
 * now, the ttl it was granted (lowered since, the lease would lapse before
 * its agent's next renewal, which it times by that ttl)
 */
CREATE FUNCTION frameq._rearm_leases() RETURNS bigint
LANGUAGE sql SET search_path = pg_catalog, pg_temp AS $$
	WITH r AS (
		UPDATE frameq.host
		   SET lease_expires_at = pg_catalog.clock_timestamp() OPERATOR(pg_catalog.+)
								  coalesce(lease_granted, frameq._lease_ttl())
		 WHERE lease_expires_at IS NOT NULL RETURNING 1)
	SELECT pg_catalog.count(*) FROM r
$$;

/*
 * Hosts whose last renewal (or "since", the server's start or last clock
 * jump, if later) is more than a lease period old have lost their lease
 * (the period of the ttl their lease was granted for, which a lease_ttl
 * lowered since does not shorten; the current one for a lease granted
 * before frameq recorded it):
 * release their procs as host_lost, move their epoch on, mark them down.
 * Each host is re-checked under its lock, so a heartbeat that got there
 * first wins.
 *
 * Never stalled by another session: each host is expired in a block of its
 * own, with lock_timeout = frameq.lock_wait for this transaction.  A host
 * whose lock, or any row its release must lock (its procs, their frames
 * and jobs, the host row), another session holds for longer than that is
 * skipped: the block is undone, the server log says so, and the next
 * round tries again.  Other hosts expire as usual.
 */
CREATE FUNCTION frameq._expire_leases(since timestamptz, at timestamptz DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	ttl interval := frameq._lease_ttl();
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
						AND (greatest(x.last_renewal_at, since) OPERATOR(pg_catalog.+)
							 frameq._lease_period(coalesce(x.lease_granted, ttl)))
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
					   OR (greatest(h.last_renewal_at, since) OPERATOR(pg_catalog.+)
						   frameq._lease_period(coalesce(h.lease_granted, ttl)))
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

/*
 * Announce every kill order not yet sent, or not confirmed since the last
 * send.  A proc row another session has locked (a completion in flight,
 * say) is left for the next round (SKIP LOCKED): the worker never waits
 * on a row lock here.
 */
CREATE FUNCTION frameq._send_kills(resend_ms int) RETURNS bigint
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	p record;
	n bigint := 0;
BEGIN
	PERFORM frameq._ledger_ensure();
	/*
	 * The due procs are locked by an initplan and updated by primary key:
	 * no join, whose plan, cached in the worker's session while the proc
	 * table was small, could become a nested loop over every proc for
	 * every proc once it is not.
	 */
	FOR p IN WITH due AS (
				UPDATE frameq.proc x SET kill_sent_at = pg_catalog.clock_timestamp()
				 WHERE x.id OPERATOR(pg_catalog.=) ANY (ARRAY(
						SELECT y.id FROM frameq.proc y
						 WHERE y.state OPERATOR(pg_catalog.=) 'killing'
						   AND (y.kill_sent_at IS NULL
								OR y.kill_sent_at OPERATOR(pg_catalog.<=)
								   (pg_catalog.clock_timestamp() OPERATOR(pg_catalog.-)
									pg_catalog.make_interval(secs => resend_ms OPERATOR(pg_catalog./) 1000.0)))
						   FOR NO KEY UPDATE SKIP LOCKED))
				RETURNING x.id, x.host, x.kill_reason)
			 SELECT * FROM due ORDER BY host, id LOOP
		PERFORM pg_catalog.pg_notify('frameq_host_' OPERATOR(pg_catalog.||) p.host,
									 pg_catalog.json_build_object('proc', p.id, 'reason', p.kill_reason)::text);
		n := n OPERATOR(pg_catalog.+) 1;
	END LOOP;
	RETURN n;
END
$$;

/*
 * Time out the running procs whose deadline (timeout_at, set at booking)
 * is at or before at (the worker passes the time it read for the round):
 * each becomes a kill order, kill_cause 'timeout', wanting the state a
 * failure of the frame leads to (_failed_state), and its release counts a
 * retry (src/release.c).  Only the procs due are read, through the partial
 * index proc_timeout_due, at most 1,000 a round (the rest in the next
 * rounds, a second apart); a proc whose row another session holds (its
 * completion in flight, say) is left for a later round (SKIP LOCKED).
 * Returns how many it ordered killed.
 */
CREATE FUNCTION frameq._time_out(at timestamptz DEFAULT NULL) RETURNS bigint
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	at_time timestamptz := coalesce(at, pg_catalog.clock_timestamp());
	n bigint;
BEGIN
	/*
	 * Nothing due, the usual answer: the earliest deadline, the first
	 * entry of the index (a min() with no parameter is planned as that
	 * whatever the statistics; an EXISTS with at_time, once its plan was
	 * generic, guessed a third of the table due and read all of it).
	 */
	IF coalesce((SELECT pg_catalog.min(y.timeout_at) FROM frameq.proc y
				  WHERE y.state OPERATOR(pg_catalog.=) 'running' AND y.timeout_at IS NOT NULL)
				OPERATOR(pg_catalog.>) at_time, true) THEN
		RETURN 0;
	END IF;
	/* before the first write of procs: see _ledger_ensure */
	PERFORM frameq._ledger_ensure();
	/* locked by an initplan and updated by primary key, as _send_kills does */
	UPDATE frameq.proc x
	   SET state = 'killing', kill_cause = 'timeout', kill_at = pg_catalog.clock_timestamp(),
		   want_state = frameq._failed_state(x.frame),
		   kill_reason = pg_catalog.format('timeout: still running %s s after its booking',
										   pg_catalog.round(pg_catalog.date_part('epoch',
											   at_time OPERATOR(pg_catalog.-) x.booked_at)))
	 WHERE x.id OPERATOR(pg_catalog.=) ANY (ARRAY(
			SELECT y.id FROM frameq.proc y
			 WHERE y.state OPERATOR(pg_catalog.=) 'running'
			   AND y.timeout_at OPERATOR(pg_catalog.<=) at_time
			 ORDER BY y.timeout_at LIMIT 1000
			   FOR NO KEY UPDATE SKIP LOCKED))
	   AND x.state OPERATOR(pg_catalog.=) 'running';
	GET DIAGNOSTICS n = ROW_COUNT;
	RETURN n;
END
$$;

/*
 * After a step of the wall clock (the worker measured it): move every
 * deadline by as much, so that a task is timed out after it has run for
 * its timeout, not earlier or later because the clock moved.  Returns how
 * many deadlines it moved.
 */
CREATE FUNCTION frameq._shift_deadlines(jump interval) RETURNS bigint
LANGUAGE sql SET search_path = pg_catalog, pg_temp AS $$
	/* locked in id order first, as complete_many locks several procs */
	WITH s AS (
		UPDATE frameq.proc x SET timeout_at = x.timeout_at OPERATOR(pg_catalog.+) jump
		 WHERE x.id OPERATOR(pg_catalog.=) ANY (ARRAY(
				SELECT y.id FROM frameq.proc y
				 WHERE y.state OPERATOR(pg_catalog.=) 'running' AND y.timeout_at IS NOT NULL
				 ORDER BY y.id FOR NO KEY UPDATE))
		   AND x.state OPERATOR(pg_catalog.=) 'running' AND x.timeout_at IS NOT NULL RETURNING 1)
	SELECT pg_catalog.count(*) FROM s
$$;

/*
 * The worker's step: finish the jobs in frameq.job_finish_check that are
 * done; returns how many it settled.
 */
CREATE FUNCTION frameq._finish_checked_jobs() RETURNS bigint
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	c record;
	n bigint := 0;
BEGIN
	FOR c IN SELECT x.job FROM frameq.job_finish_check x ORDER BY x.job LOOP
		BEGIN
			/* the worker's lock_timeout (frameq.lock_wait) bounds this wait */
			PERFORM 1 FROM frameq.job j WHERE j.id = c.job FOR NO KEY UPDATE;
			PERFORM frameq._finish_job_if_done(c.job);
			DELETE FROM frameq.job_finish_check x WHERE x.job = c.job;
			n := n + 1;
		EXCEPTION WHEN lock_not_available THEN
			RAISE LOG 'frameq worker: job % is still locked by another session; asked again next round', c.job;
		END;
	END LOOP;
	RETURN n;
END
$$;

/*
 * The worker's step for the jobs in frameq.job_limit_check, whose row a
 * release could not get (src/limits.c): mark the job's host blocks, and,
 * if a task of it died, pause it if its dead tasks reach max_dead_frames.
 * A row a release renewed meanwhile stays for the next round.  Returns
 * how many it settled.
 */
CREATE FUNCTION frameq._settle_job_limits() RETURNS bigint
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	c record;
	n bigint := 0;
BEGIN
	FOR c IN SELECT x.job, x.died, x.since FROM frameq.job_limit_check x ORDER BY x.job LOOP
		BEGIN
			/* the worker's lock_timeout (frameq.lock_wait) bounds this wait */
			PERFORM 1 FROM frameq.job j WHERE j.id = c.job FOR NO KEY UPDATE;
			PERFORM frameq._job_blocks_mark(c.job);
			IF c.died THEN
				PERFORM frameq._pause_for_dead(c.job);
			END IF;
			DELETE FROM frameq.job_limit_check x WHERE x.job = c.job AND x.since = c.since;
			n := n + 1;
		EXCEPTION WHEN lock_not_available THEN
			RAISE LOG 'frameq worker: job % is still locked by another session; its limits are settled next round', c.job;
		END;
	END LOOP;
	RETURN n;
END
$$;

/*
 * ---------------------------------------------------------------------
 * Delays.  A task that a requeue exit code, or a failure with a
 * retry_delay, sent back to 'waiting' carries frame.not_before, the time
 * before which it must not be booked (src/release.c sets it).  Until
 * cleared it is in no index and no queue that reserve() reads: not in
 * frame_waiting (its predicate: not_before IS NULL), and its layer is not
 * queued for it (the gate, frame_gate, queues no delayed task; a queue row
 * of a layer left with only delayed tasks goes at its next read, as for a
 * layer run dry).  So a delayed task costs a booking nothing, however many
 * there are.  Each round the worker takes the tasks whose time has come,
 * in the order it came, from the index frame_delayed (one probe when
 * there are none) and makes them bookable as whoever makes a task waiting
 * does: in one transaction it clears not_before, lowers each layer's
 * dispatch hint to the lowest task it freed (at commit; src/dispatch.c),
 * queues the layers (_queue_layers, which keeps their rows from any tidy
 * until then) and announces them on frameq_ready.  At most 10,000 a round;
 * more wait for the next.  Rows another session holds (an operator's
 * kill_frame, say) are skipped this round; whatever that session does
 * either ends the delay itself or leaves the task to the next round.
 * retry_frame() of a delayed task ends its delay at once, the same way.
 * ---------------------------------------------------------------------
 */

/*
 * End the delay of these tasks now, whatever its time: each becomes
 * bookable if it is 'waiting' (a 'depend' one when its dependencies are
 * met).  Returns how many delays it ended.  A row another session holds
 * is waited for, and then looked at again (not_before may be gone); the
 * worker locks its candidates first, skipping those, so it never waits.
 */
CREATE FUNCTION frameq._end_delay(tasks bigint[]) RETURNS bigint
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	r record;
	layers bigint[] := '{}';
	n bigint := 0;
BEGIN
	FOR r IN WITH ended AS (
				UPDATE frameq.frame f SET not_before = NULL
				 WHERE f.id = ANY (tasks) AND f.not_before IS NOT NULL
				RETURNING f.job, f.layer, f.number, f.state)
			 SELECT x.job, x.layer, min(x.number) FILTER (WHERE x.state = 'waiting') AS low,
					count(*) FILTER (WHERE x.state = 'waiting') AS bookable, count(*) AS ended
			   FROM ended x GROUP BY x.job, x.layer ORDER BY x.layer LOOP
		IF r.bookable > 0 THEN
			PERFORM frameq._frame_waiting(r.layer, r.low), frameq._announce_ready(r.job, r.layer, r.bookable);
			layers := layers || r.layer;
		END IF;
		n := n + r.ended;
	END LOOP;
	IF cardinality(layers) > 0 THEN
		PERFORM frameq._queue_layers(layers);
	END IF;
	RETURN n;
END
$$;

/*
 * The worker's step: end the delays whose time has come; returns how many.
 * The time is read once, into a variable: compared with clock_timestamp()
 * itself (volatile), the index could not stop at it, and every delayed
 * task of the farm would be read each round.
 */
CREATE FUNCTION frameq._delays_ended() RETURNS bigint
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	due timestamptz := clock_timestamp();
BEGIN
	RETURN frameq._end_delay(ARRAY(
		SELECT f.id FROM frameq.frame f
		 WHERE f.state = 'waiting' AND f.not_before IS NOT NULL AND f.not_before <= due
		 ORDER BY f.not_before LIMIT 10000
		   FOR NO KEY UPDATE SKIP LOCKED));
END
$$;

/* is the server still in the quarantine after its start (src/worker.c)? */
CREATE FUNCTION frameq._in_quarantine() RETURNS bool
	AS 'MODULE_PATHNAME', 'frameq_in_quarantine_sql' LANGUAGE C VOLATILE STRICT
	SET search_path = pg_catalog, pg_temp;

/* is the worker up, and since and until when is the quarantine */
CREATE FUNCTION frameq.worker_status(OUT started bool, OUT quarantine_start timestamptz,
									 OUT quarantine_until timestamptz,
									 OUT leases_since timestamptz)
	AS 'MODULE_PATHNAME', 'frameq_worker_status' LANGUAGE C VOLATILE STRICT
	SECURITY DEFINER SET search_path = pg_catalog, pg_temp;

/*
 * ---------------------------------------------------------------------
 * Pruning: prune() and the worker's step (frameq.retention) remove whole
 * ended jobs, with everything that names them, children first (runs,
 * then tasks, then layers, then the job): a run record names its task
 * (_keep_referenced refuses to delete a task a run names).
 *
 * A job goes only when it is finished or killed, ended before the cutoff,
 * has no proc (a killed job's kill orders still running keep it), is no
 * prerequisite of a job not yet finished or killed, and waits on no
 * prerequisite job not yet finished or killed (that prerequisite's end
 * would write the dependency's row).  What that leaves locked until the
 * batch commits is rows nobody books or releases: bookings read only
 * active jobs' waiting tasks, and a job with no proc has nothing to
 * release.  Whatever could change a candidate's state (retry_frame,
 * set_job, kill_job, depend_job, a submit naming it as a prerequisite)
 * locks its row first: a batch locks its jobs without waiting (SKIP
 * LOCKED) and looks at them again after, in a fresh snapshot, so that
 * such a change either comes first and is seen, or waits and then finds
 * the job gone.  A dispatch queue row a booking holds keeps its job for
 * the next batch.
 *
 * The runs removed are added to tally ('runs_pruned' by reason), so that
 * metrics' frameq_runs_ended_total never goes down.
 * ---------------------------------------------------------------------
 */

/* may this job (locked or not) be pruned now? */
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

/* add n to a tally row */
CREATE FUNCTION frameq._tally_add(metric text, label text, n bigint) RETURNS void
LANGUAGE sql SET search_path = pg_catalog, pg_temp AS $$
	INSERT INTO frameq.tally AS t (metric, label, value) SELECT $1, $2, $3 WHERE $3 OPERATOR(pg_catalog.>) 0
	ON CONFLICT (metric, label) DO UPDATE SET value = t.value OPERATOR(pg_catalog.+) excluded.value
$$;

/* remove these jobs, which are locked and prunable, and all that names them */
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

/*
 * One batch: up to max_jobs prunable jobs that ended before cutoff, oldest
 * first, and, if max_tasks is given, no more jobs than hold max_tasks tasks
 * together (but always the first: a job is never split); returns how many
 * went.  Jobs locked by others, or whose dispatch queue rows a booking
 * holds, are left for another batch.
 */
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

/*
 * Remove the jobs that ended (finished or killed) more than finished_before
 * ago, with their layers, tasks, runs and dependencies; returns how many
 * jobs.  Keeps a job with a proc, a prerequisite of a job not yet ended,
 * and a job waiting on a prerequisite not yet ended (see above).  In
 * batches of 100 jobs, in the caller's transaction.  SECURITY DEFINER:
 * frameq_admin may call it, and has no privilege on the tables.
 */
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
	/* a person's call is an action; the worker's steps (_prune_step) are not */
	PERFORM frameq._audit('prune', NULL, NULL, NULL, NULL,
		pg_catalog.jsonb_build_object('finished_before', finished_before::text, 'jobs', n));
	RETURN n;
END
$$;

/*
 * The worker's step, while frameq.retention is set: one batch of jobs
 * that ended more than retention seconds ago, at most max_jobs of them
 * holding at most max_tasks tasks (or one job, if it holds more);
 * src/worker.c paces the batches and ends a pass at a batch that removes
 * nothing.
 */
CREATE FUNCTION frameq._prune_step(retention int, max_jobs int, max_tasks int) RETURNS bigint
LANGUAGE sql SET search_path = pg_catalog, pg_temp AS $$
	SELECT frameq._prune_batch(pg_catalog.clock_timestamp() OPERATOR(pg_catalog.-)
							   pg_catalog.make_interval(secs => $1), $2, $3)
$$;

/*
 * The history counts the metrics view reads (tally), refreshed by the
 * worker about once a minute, in one statement, so in one snapshot: runs
 * ended by reason, those still in run plus those prune() removed (the
 * sum never goes down: a prune moves runs from one to the other in one
 * transaction), and tasks by state; 'counted_at' says when (epoch
 * seconds).  Counting a million rows on every scrape would cost every
 * scrape that much; here it costs the worker one scan a minute, and no
 * booking or release writes anything for it.  Returns the rows written.
 */
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

/*
 * The live tasks by state (waiting, depend, running; dead), for the
 * worker's _count_live: one scan of the partial index frame_live and one
 * of frame_dead, their entries only.  Not in parallel: the worker's step
 * need not take more than its one process.
 */
CREATE FUNCTION frameq._live_frames(OUT state text, OUT n bigint) RETURNS SETOF record
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp SET max_parallel_workers_per_gather = 0 AS $$
	SELECT f.state, pg_catalog.count(*) FROM frameq.frame f
	 WHERE f.state OPERATOR(pg_catalog.=) ANY ('{waiting,depend,running}'::text[]) GROUP BY f.state
	UNION ALL
	SELECT 'dead', pg_catalog.count(*) FROM frameq.frame f WHERE f.state OPERATOR(pg_catalog.=) 'dead'
$$;

/*
 * The live task counts the metrics view reads (tally 'frames_live' by
 * state: waiting, depend, running, dead, and delayed), refreshed by the
 * worker about every 10 seconds, in one statement; 'live_counted_at' says
 * when.  One scan of the partial indexes frame_live, frame_dead and
 * frame_delayed (their entries only): paid once per interval, however many
 * scrapes read the view.  Returns the rows written.
 */
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
