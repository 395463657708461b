
/*
 * ---------------------------------------------------------------------
 * operator.sql: operator actions on frames, jobs and hosts (frameq_admin;
 * the frame and job actions also frameq_submit, for its granted shows).
 *
 * None of them ever releases a running frame: each turns its proc into a
 * kill order (state 'killing', with the frame state wanted on release).
 * The frame keeps its proc, and counts against every cap and its host,
 * until the host confirms the kill (heartbeat, complete), its lease
 * provably expires, it attaches after a reboot, or an operator calls
 * confirm_host_dead().  On a frame that is not running they act at once.
 * ---------------------------------------------------------------------
 */

/* turn a proc into a kill order; a later order replaces the wanted end state */
CREATE FUNCTION frameq._kill_order(proc bigint, reason text, want text) RETURNS bool
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
	PERFORM frameq._ledger_ensure();
	UPDATE frameq.proc x
	   SET state = 'killing', kill_reason = _kill_order.reason, want_state = want,
		   kill_at = coalesce(x.kill_at, clock_timestamp()),
		   /* an operator's order replaces a timeout's or a stall's: no retry is counted */
		   kill_cause = NULL
	 WHERE x.id = _kill_order.proc;
	RETURN FOUND;
END
$$;

/*
 * Act on one frame: order its proc killed if it is running, or move it from
 * one of the states in "from" to "target" at once.  Lock order is the one
 * complete() uses (proc row, then frame row); a frame booked or released
 * between the two looks is looked at again.  Returns what was done.
 */
CREATE FUNCTION frameq._frame_action(frame bigint, reason text, want text, from_states text[],
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

/* kill a frame: a kill order if it runs, else (waiting, depend) dead at once */
CREATE FUNCTION frameq.kill_frame(frame bigint, reason text) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	st text;
	outcome text;
BEGIN
	PERFORM frameq._authorize_frame(frame);
	PERFORM frameq._reason(reason);
	SELECT x.state INTO st FROM frameq.frame x WHERE x.id = frameq._not_null(kill_frame.frame, 'frame');
	IF NOT FOUND THEN
		RAISE EXCEPTION 'frame % does not exist', frame USING ERRCODE = 'undefined_object';
	END IF;
	IF st IN ('succeeded', 'eaten') THEN
		RAISE EXCEPTION 'frame % is %: there is nothing to kill', frame, st
			USING ERRCODE = 'object_not_in_prerequisite_state';
	END IF;
	outcome := frameq._frame_action(frame, reason, 'dead', ARRAY['waiting', 'depend'], 'dead');
	PERFORM frameq._audit_frame('kill_frame', frame,
		pg_catalog.jsonb_build_object('reason', reason, 'outcome', outcome));
END
$$;

/*
 * run a frame again: a finished one (succeeded, dead, eaten) is waiting at
 * once, with its retries and requeues back; a running one gets a kill
 * order for waiting; a delayed one (a requeue or retry delay) has its
 * delay ended, and is bookable at once
 */
CREATE FUNCTION frameq.retry_frame(frame bigint) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	outcome text;
BEGIN
	PERFORM frameq._authorize_frame(frame);
	IF NOT EXISTS (SELECT 1 FROM frameq.frame x WHERE x.id = frameq._not_null(retry_frame.frame, 'frame')) THEN
		RAISE EXCEPTION 'frame % does not exist', frame USING ERRCODE = 'undefined_object';
	END IF;
	IF NOT EXISTS (SELECT 1 FROM frameq.proc x WHERE x.frame = retry_frame.frame) THEN
		/*
		 * Putting a finished frame back: hold the job row in SHARE mode so
		 * that neither kill_job nor a completion finishing the job can
		 * pass us unseen.  (A running frame only gets a kill order, which
		 * cannot finish or reopen anything.)
		 */
		PERFORM 1 FROM frameq.job j JOIN frameq.frame x ON x.job = j.id
		  WHERE x.id = retry_frame.frame FOR SHARE OF j;
	END IF;
	IF EXISTS (SELECT 1 FROM frameq.frame x JOIN frameq.job j ON j.id = x.job
				WHERE x.id = retry_frame.frame AND j.state = 'killed') THEN
		RAISE EXCEPTION 'frame % belongs to a killed job', frame
			USING ERRCODE = 'object_not_in_prerequisite_state';
	END IF;
	IF frameq._end_delay(ARRAY[frame]) > 0 THEN
		PERFORM frameq._audit_frame('retry_frame', frame, '{"outcome": "delay ended"}');
		RETURN;
	END IF;
	outcome := frameq._frame_action(frame, 'retried by operator', 'waiting',
									ARRAY['succeeded', 'dead', 'eaten'], 'waiting');
	/*
	 * A kill_job may have committed while we waited for the frame's proc:
	 * look again, and undo everything (by failing) if the job is killed.
	 */
	IF EXISTS (SELECT 1 FROM frameq.frame x JOIN frameq.job j ON j.id = x.job
				WHERE x.id = retry_frame.frame AND j.state = 'killed') THEN
		RAISE EXCEPTION 'frame % belongs to a killed job', frame
			USING ERRCODE = 'object_not_in_prerequisite_state';
	END IF;
	PERFORM frameq._audit_frame('retry_frame', frame,
								pg_catalog.jsonb_build_object('outcome', outcome));
END
$$;

/* give up on a frame: a kill order if it runs, else (waiting, depend, dead) eaten at once */
CREATE FUNCTION frameq.eat_frame(frame bigint) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	st text;
	outcome text;
BEGIN
	PERFORM frameq._authorize_frame(frame);
	SELECT x.state INTO st FROM frameq.frame x WHERE x.id = frameq._not_null(eat_frame.frame, 'frame');
	IF NOT FOUND THEN
		RAISE EXCEPTION 'frame % does not exist', frame USING ERRCODE = 'undefined_object';
	END IF;
	IF st = 'succeeded' THEN
		RAISE EXCEPTION 'frame % succeeded: there is nothing to eat', frame
			USING ERRCODE = 'object_not_in_prerequisite_state';
	END IF;
	outcome := frameq._frame_action(frame, 'eaten by operator', 'eaten',
									ARRAY['waiting', 'depend', 'dead'], 'eaten');
	PERFORM frameq._audit_frame('eat_frame', frame,
								pg_catalog.jsonb_build_object('outcome', outcome));
END
$$;

/* kill a job: it books nothing more, and each live frame is killed as kill_frame would */
CREATE FUNCTION frameq.kill_job(job bigint, reason text) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	j frameq.job;
	f bigint;
	live int := 0;
BEGIN
	PERFORM frameq._authorize_job(job);
	PERFORM frameq._reason(reason);
	/* lock order as in complete(): the job's procs, then the job row */
	PERFORM 1 FROM frameq.proc x WHERE x.job = kill_job.job FOR NO KEY UPDATE;
	/* FOR UPDATE conflicts with retry_frame's SHARE lock on the job row */
	SELECT * INTO j FROM frameq.job x WHERE x.id = frameq._not_null(kill_job.job, 'job')
	   FOR UPDATE;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'job % does not exist', job USING ERRCODE = 'undefined_object';
	END IF;
	IF j.state = 'finished' THEN
		RAISE EXCEPTION 'job % is finished: there is nothing to kill', job
			USING ERRCODE = 'object_not_in_prerequisite_state';
	END IF;
	/* no new bookings from here on: the job is no longer active */
	UPDATE frameq.job x SET state = 'killed', finished_at = clock_timestamp() WHERE x.id = j.id;
	FOR f IN SELECT x.id FROM frameq.frame x
			  WHERE x.job = j.id AND x.state IN ('waiting', 'depend', 'running') ORDER BY x.id LOOP
		PERFORM frameq._frame_action(f, reason, 'dead', ARRAY['waiting', 'depend'], 'dead');
		live := live + 1;
	END LOOP;
	PERFORM frameq._audit('kill_job', j.id, NULL, NULL, NULL,
						  pg_catalog.jsonb_build_object('reason', reason, 'frames', live));
END
$$;

/* up, down or repair; a host set down or to repair has its procs ordered killed */
CREATE FUNCTION frameq.set_host_state(host text, state text) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	h frameq.host;
BEGIN
	IF state IS NULL OR state NOT IN ('up', 'down', 'repair') THEN
		RAISE EXCEPTION 'state must be up, down or repair, not %', coalesce(frameq._clip(state), 'null')
			USING ERRCODE = CASE WHEN state IS NULL THEN 'null_value_not_allowed'
								 ELSE 'invalid_parameter_value' END;
	END IF;
	h := frameq._host_lock_by_name(host);
	IF state <> 'up' THEN
		/* its work is ordered killed; the frames stay held until that is confirmed */
		PERFORM frameq._kill_order(x.id, pg_catalog.format('host set %s', set_host_state.state), 'waiting')
		   FROM frameq.proc x WHERE x.host = h.id AND x.state = 'running';
	END IF;
	UPDATE frameq.host x SET state = set_host_state.state,
		   down_reason = CASE WHEN set_host_state.state = 'up' THEN NULL ELSE 'operator' END
	 WHERE x.id = h.id;
	PERFORM frameq._audit('set_host_state', NULL, NULL, NULL, h.id,
		pg_catalog.jsonb_build_object('host', h.name, 'state', state, 'was', h.state));
END
$$;

/*
 * The operator asserts the machine is off: release its procs now.  The
 * host's epoch moves on, so anything of it that still reports is fenced.
 */
CREATE FUNCTION frameq.confirm_host_dead(host text) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	h frameq.host := frameq._host_lock_by_name(host);
	procs bigint[];
BEGIN
	procs := ARRAY(SELECT x.id FROM frameq.proc x WHERE x.host = h.id);
	PERFORM frameq._release_procs(procs, 'operator');
	UPDATE frameq.host x SET epoch = x.epoch + 1, lease_expires_at = NULL,
		   state = CASE WHEN x.state = 'up' THEN 'down' ELSE x.state END,
		   down_reason = CASE WHEN x.state = 'up' THEN 'operator' ELSE x.down_reason END
	 WHERE x.id = h.id;
	PERFORM frameq._audit('confirm_host_dead', NULL, NULL, NULL, h.id,
		pg_catalog.jsonb_build_object('host', h.name, 'released', pg_catalog.cardinality(procs)));
END
$$;

/*
 * Let a host run a job's tasks again after host_failure_limit blocked it
 * for the job, and start its count of the job's failures afresh
 * (src/limits.c).  A host with failures below the limit has its count
 * reset; one with none changes nothing.  The count's row is taken before
 * the job row, as a failing release takes them.
 */
CREATE FUNCTION frameq.unblock_host(job bigint, host text) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	h frameq.host;
	was_blocked bool;
BEGIN
	PERFORM frameq._authorize_job(frameq._not_null(unblock_host.job, 'job'));
	IF NOT EXISTS (SELECT 1 FROM frameq.job j WHERE j.id = unblock_host.job) THEN
		RAISE EXCEPTION 'job % does not exist', job USING ERRCODE = 'undefined_object';
	END IF;
	h := frameq._host_by_name(frameq._bounded(unblock_host.host, 'host', 100));
	DELETE FROM frameq.job_host_failure f WHERE f.job = unblock_host.job AND f.host = h.id
	RETURNING f.blocked_at IS NOT NULL INTO was_blocked;
	IF FOUND THEN
		PERFORM 1 FROM frameq.job j WHERE j.id = unblock_host.job FOR NO KEY UPDATE;
		PERFORM frameq._job_blocks_mark(unblock_host.job);
	END IF;
	PERFORM frameq._audit('unblock_host', job, NULL, NULL, h.id,
		pg_catalog.jsonb_build_object('host', h.name, 'was_blocked', coalesce(was_blocked, false)));
END
$$;

/*
 * A note on a job for the people who look after it ("re-rendered after
 * the texture fix"): a row of the audit trail (action comment_job, detail
 * {"text": ...}) and nothing else.  Whoever may set_job the job may
 * comment on it.  text: 1 to 2,000 characters, not only blanks, no
 * control characters but tab, newline and carriage return.
 */
CREATE FUNCTION frameq.comment_job(job bigint, text text) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
	PERFORM frameq._not_null(job, 'job');
	PERFORM frameq._authorize_job(job);
	PERFORM frameq._bounded(frameq._not_null(comment_job.text, 'text'), 'text', 2000);
	IF pg_catalog.btrim(comment_job.text, E' \t\n\r') = '' THEN
		RAISE EXCEPTION 'text must not be empty' USING ERRCODE = 'invalid_parameter_value';
	END IF;
	IF pg_catalog.translate(comment_job.text, E'\t\n\r', '') ~ '[[:cntrl:]]' THEN
		RAISE EXCEPTION 'text must not hold control characters (tab, newline and carriage return may)'
			USING ERRCODE = 'invalid_parameter_value';
	END IF;
	IF NOT EXISTS (SELECT 1 FROM frameq.job j WHERE j.id = comment_job.job) THEN
		RAISE EXCEPTION 'job % does not exist', job USING ERRCODE = 'undefined_object';
	END IF;
	PERFORM frameq._audit('comment_job', job, NULL, NULL, NULL,
						  pg_catalog.jsonb_build_object('text', comment_job.text));
END
$$;
