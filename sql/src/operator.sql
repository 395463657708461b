
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
 * Move these tasks, those of them still in one of from_states, to target
 * at once: the one owner of what such a move does, for one task
 * (_frame_action) or many (the bulk actions below), in one statement.
 * Running tasks are never in from_states: they get kill orders instead.
 * An operator's retry of a finished task gives it its retries and
 * requeues back; every move ends a delay (frame.not_before) and forgets
 * why a dead task was dead (the memory an OOM raised it to stays its
 * requirement).  A task made waiting lowers its layer's dispatch hint
 * and reopens its finished job (the gate, frame_gate, queues its layer);
 * each layer's bookable tasks are announced once.  A task ended
 * otherwise may finish its job.  Returns how many moved.
 */
CREATE FUNCTION frameq._move_frames(tasks bigint[], from_states text[], target text)
RETURNS bigint LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	jobs bigint[];
	layers bigint[];
	lows int[];
	bookable bigint[];
	moved bigint[];
	j bigint;
BEGIN
	/* the gate reads each layer once for the whole statement (src/depends.c) */
	PERFORM frameq._gate_memo(true);
	WITH m AS (
		UPDATE frameq.frame x SET state = target, version = x.version + 1,
			   retries = CASE WHEN target = 'waiting' THEN 0 ELSE x.retries END,
			   requeues = CASE WHEN target = 'waiting' THEN 0 ELSE x.requeues END,
			   not_before = NULL, dead_reason = NULL
		 WHERE x.id = ANY (tasks) AND x.state = ANY (from_states)
		RETURNING x.job, x.layer, x.number, x.state),
	g AS (
		SELECT m.job, m.layer, min(m.number) AS low,
			   count(*) FILTER (WHERE m.state = 'waiting') AS bookable, count(*) AS moved
		  FROM m GROUP BY m.job, m.layer)
	SELECT array_agg(g.job ORDER BY g.job, g.layer), array_agg(g.layer ORDER BY g.job, g.layer),
		   array_agg(g.low ORDER BY g.job, g.layer), array_agg(g.bookable ORDER BY g.job, g.layer),
		   array_agg(g.moved ORDER BY g.job, g.layer)
	  INTO jobs, layers, lows, bookable, moved
	  FROM g;
	PERFORM frameq._gate_memo(false);
	IF jobs IS NULL THEN
		RETURN 0;
	END IF;
	IF target = 'waiting' THEN
		PERFORM frameq._frame_waiting(layers[i], lows[i]) FROM generate_subscripts(layers, 1) i;
		UPDATE frameq.job x SET state = 'active', finished_at = NULL
		 WHERE x.id = ANY (jobs) AND x.state = 'finished';
		PERFORM frameq._announce_ready(jobs[i], layers[i], bookable[i])
		   FROM generate_subscripts(layers, 1) i WHERE bookable[i] > 0;
	ELSE
		FOR j IN SELECT DISTINCT u FROM unnest(jobs) u ORDER BY u LOOP
			/*
			 * A completion in flight may have seen these tasks still live
			 * and left the job open: wait for every one of them (a release
			 * deletes its proc row, which our KEY SHARE lock waits for)
			 * before deciding whether the job is finished.  In id order,
			 * the order a complete_many() deletes a job's procs in: else
			 * we could hold one it is still to delete while waiting for
			 * one it has deleted.
			 */
			PERFORM 1 FROM frameq.proc x WHERE x.job = j ORDER BY x.id FOR KEY SHARE;
			PERFORM frameq._finish_job_if_done(j);
		END LOOP;
	END IF;
	RETURN (SELECT sum(u) FROM unnest(moved) u);
END
$$;

/*
 * Act on one frame: order its proc killed if it is running, or move it from
 * one of the states in "from" to "target" at once (_move_frames).  Lock
 * order is the one complete() uses (proc row, then frame row); a frame
 * booked or released between the two looks is looked at again.  Returns
 * what was done.
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
		IF frameq._move_frames(ARRAY[frame], from_states, target) > 0 THEN
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

/*
 * ---------------------------------------------------------------------
 * Bulk actions: retry_frames, eat_frames, kill_frames act on every task of
 * a job (or of one of its layers) in the given states, in one
 * transaction, each task exactly as the single-frame action would
 * (_move_frames and _kill_order own what that is).  Their cost is that of
 * the tasks acted on: the tasks are found through frame_dead and
 * frame_live, and moved in one statement (succeeded and eaten tasks,
 * which no index lists, are found through the layers' frame numbers).
 * A task that changes state while the statement runs (a completion, a
 * booking) is acted on as the state it is found in when its row is
 * locked: a completed frame is not retried unless it was asked for.
 * ---------------------------------------------------------------------
 */

/* the job's layer of that name (NULL: the whole job), after checking the job: 42704 */
CREATE FUNCTION frameq._bulk_layer(job bigint, layer text) RETURNS bigint
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	layer_id bigint;
BEGIN
	IF NOT EXISTS (SELECT 1 FROM frameq.job j WHERE j.id = _bulk_layer.job) THEN
		RAISE EXCEPTION 'job % does not exist', job USING ERRCODE = 'undefined_object';
	END IF;
	IF layer IS NOT NULL THEN
		SELECT l.id INTO layer_id FROM frameq.layer l
		 WHERE l.job = _bulk_layer.job AND l.name = frameq._bounded(layer, 'layer', 100);
		IF NOT FOUND THEN
			RAISE EXCEPTION 'job % has no layer "%"', job, frameq._clip(layer)
				USING ERRCODE = 'undefined_object';
		END IF;
	END IF;
	RETURN layer_id;
END
$$;

/* states, checked: not null, not empty, each one the action acts on (22004, 22023, 54000) */
CREATE FUNCTION frameq._bulk_states(states text[], allowed text[], action text) RETURNS text[]
LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	s text;
BEGIN
	PERFORM frameq._not_null(states, 'states');
	IF cardinality(states) > 10 THEN
		PERFORM frameq._too_big('states', pg_catalog.format('%s elements, at most 10', cardinality(states)));
	END IF;
	IF cardinality(states) = 0 THEN
		RAISE EXCEPTION 'states must not be empty' USING ERRCODE = 'invalid_parameter_value';
	END IF;
	FOREACH s IN ARRAY states LOOP
		IF s IS NULL THEN
			RAISE EXCEPTION 'states must not contain null' USING ERRCODE = 'null_value_not_allowed';
		END IF;
		IF s <> ALL (allowed) THEN
			RAISE EXCEPTION 'states: % does not act on "%" tasks', action, frameq._clip(s)
				USING ERRCODE = 'invalid_parameter_value',
					  HINT = pg_catalog.format('It acts on %s.', array_to_string(allowed, ', '));
		END IF;
	END LOOP;
	RETURN states;
END
$$;

/*
 * The job's tasks (of one layer if layer is not NULL) in these states, but
 * never running ones: each state is its own index condition (frame_dead,
 * frame_live), so the plan reads only those tasks.
 */
CREATE FUNCTION frameq._bulk_tasks(job bigint, layer bigint, states text[]) RETURNS bigint[]
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
	SELECT ARRAY(
		SELECT x.id FROM frameq.frame x
		 WHERE 'dead' = ANY (states) AND x.job = $1 AND x.state = 'dead'
		   AND ($2 IS NULL OR x.layer = $2)
		UNION ALL
		SELECT x.id FROM frameq.frame x
		 WHERE 'waiting' = ANY (states) AND x.job = $1 AND x.state = 'waiting'
		   AND ($2 IS NULL OR x.layer = $2)
		UNION ALL
		SELECT x.id FROM frameq.frame x
		 WHERE 'depend' = ANY (states) AND x.job = $1 AND x.state = 'depend'
		   AND ($2 IS NULL OR x.layer = $2)
		UNION ALL
		SELECT x.id FROM frameq.layer l JOIN frameq.frame x ON x.layer = l.id
		 WHERE ('succeeded' = ANY (states) OR 'eaten' = ANY (states))
		   AND l.job = $1 AND ($2 IS NULL OR l.id = $2)
		   AND x.state IN ('succeeded', 'eaten') AND x.state = ANY (states))
$$;

/*
 * Kill orders for the job's running tasks (of one layer if layer is not
 * NULL), each as _kill_order gives one; returns how many.
 */
CREATE FUNCTION frameq._bulk_kill_orders(job bigint, layer bigint, reason text, want text)
RETURNS bigint LANGUAGE sql SET search_path = pg_catalog, pg_temp AS $$
	SELECT count(*) FROM (
		SELECT frameq._kill_order(p.id, $3, $4) AS done
		  FROM frameq.frame x JOIN frameq.proc p ON p.frame = x.id
		 WHERE x.job = $1 AND x.state = 'running' AND ($2 IS NULL OR x.layer = $2)
		 ORDER BY p.id) k
	 WHERE k.done
$$;

/*
 * Run the job's tasks in these states again, each as retry_frame would:
 * succeeded, dead and eaten ones are waiting at once with their retries
 * and requeues back, running ones get kill orders wanting waiting,
 * delayed ones (waiting or depend with a requeue or retry delay) have
 * their delay ended.  Returns how many tasks it acted on.
 */
CREATE FUNCTION frameq.retry_frames(job bigint, layer text DEFAULT NULL,
									states text[] DEFAULT '{dead}') RETURNS int
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	layer_id bigint;
	n bigint := 0;
BEGIN
	PERFORM frameq._authorize_job(frameq._not_null(retry_frames.job, 'job'));
	layer_id := frameq._bulk_layer(retry_frames.job, retry_frames.layer);
	PERFORM frameq._bulk_states(states, ARRAY['dead', 'eaten', 'succeeded', 'running', 'waiting',
											  'depend'], 'retry_frames');
	IF 'running' = ANY (states) THEN
		n := frameq._bulk_kill_orders(retry_frames.job, layer_id, 'retried by operator', 'waiting');
	END IF;
	/* as retry_frame: neither kill_job nor a completion finishing the job passes unseen */
	PERFORM 1 FROM frameq.job j WHERE j.id = retry_frames.job FOR SHARE;
	IF EXISTS (SELECT 1 FROM frameq.job j WHERE j.id = retry_frames.job AND j.state = 'killed') THEN
		RAISE EXCEPTION 'job % is killed: its tasks cannot run again', job
			USING ERRCODE = 'object_not_in_prerequisite_state';
	END IF;
	IF 'waiting' = ANY (states) OR 'depend' = ANY (states) THEN
		n := n + frameq._end_delay(frameq._bulk_tasks(retry_frames.job, layer_id,
													  ARRAY(SELECT s FROM unnest(states) s
															 WHERE s IN ('waiting', 'depend'))));
	END IF;
	n := n + frameq._move_frames(frameq._bulk_tasks(retry_frames.job, layer_id,
													ARRAY(SELECT s FROM unnest(states) s
														   WHERE s IN ('succeeded', 'dead', 'eaten'))),
								 ARRAY['succeeded', 'dead', 'eaten'], 'waiting');
	PERFORM frameq._audit('retry_frames', retry_frames.job, layer_id, NULL, NULL,
		pg_catalog.jsonb_build_object('layer', retry_frames.layer, 'states', states, 'tasks', n));
	RETURN n;
END
$$;

/*
 * Give up on the job's tasks in these states, each as eat_frame would:
 * waiting, depend and dead ones are eaten at once, running ones get kill
 * orders wanting eaten.  Returns how many tasks it acted on.
 */
CREATE FUNCTION frameq.eat_frames(job bigint, layer text DEFAULT NULL,
								  states text[] DEFAULT '{dead}') RETURNS int
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	layer_id bigint;
	n bigint;
BEGIN
	PERFORM frameq._authorize_job(frameq._not_null(eat_frames.job, 'job'));
	layer_id := frameq._bulk_layer(eat_frames.job, eat_frames.layer);
	PERFORM frameq._bulk_states(states, ARRAY['dead', 'waiting', 'depend', 'running'], 'eat_frames');
	/*
	 * The tasks first, then the kill orders: a waiting task booked meanwhile
	 * is skipped by the move (its row is running once locked) and is then
	 * found running.
	 */
	n := frameq._move_frames(frameq._bulk_tasks(eat_frames.job, layer_id,
												ARRAY(SELECT s FROM unnest(states) s
													   WHERE s IN ('waiting', 'depend', 'dead'))),
							 ARRAY['waiting', 'depend', 'dead'], 'eaten');
	IF 'running' = ANY (states) THEN
		n := n + frameq._bulk_kill_orders(eat_frames.job, layer_id, 'eaten by operator', 'eaten');
	END IF;
	PERFORM frameq._audit('eat_frames', eat_frames.job, layer_id, NULL, NULL,
		pg_catalog.jsonb_build_object('layer', eat_frames.layer, 'states', states, 'tasks', n));
	RETURN n;
END
$$;

/*
 * Kill the job's live tasks, each as kill_frame would: waiting and depend
 * ones are dead at once, running ones get kill orders wanting dead; the
 * job itself stays as it is (kill_job ends it).  reason defaults to
 * 'killed by operator'.  Returns how many tasks it acted on.
 */
CREATE FUNCTION frameq.kill_frames(job bigint, layer text DEFAULT NULL, reason text DEFAULT NULL)
RETURNS int
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	layer_id bigint;
	n bigint;
BEGIN
	PERFORM frameq._authorize_job(frameq._not_null(kill_frames.job, 'job'));
	layer_id := frameq._bulk_layer(kill_frames.job, kill_frames.layer);
	reason := frameq._reason(coalesce(reason, 'killed by operator'));
	/* as eat_frames: the tasks first, then the kill orders */
	n := frameq._move_frames(frameq._bulk_tasks(kill_frames.job, layer_id, ARRAY['waiting', 'depend']),
							 ARRAY['waiting', 'depend'], 'dead');
	n := n + frameq._bulk_kill_orders(kill_frames.job, layer_id, reason, 'dead');
	PERFORM frameq._audit('kill_frames', kill_frames.job, layer_id, NULL, NULL,
		pg_catalog.jsonb_build_object('layer', kill_frames.layer, 'reason', reason, 'tasks', n));
	RETURN n;
END
$$;

/* kill a job: it books nothing more, and each live frame is killed as kill_frame would */
CREATE FUNCTION frameq.kill_job(job bigint, reason text) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	j frameq.job;
	live bigint := 0;
BEGIN
	PERFORM frameq._authorize_job(job);
	PERFORM frameq._reason(reason);
	/*
	 * lock order as in complete(): the job's procs, in id order (as
	 * complete_many and _release_procs lock several), then the job row
	 */
	PERFORM 1 FROM frameq.proc x WHERE x.job = kill_job.job ORDER BY x.id FOR NO KEY UPDATE;
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
	/*
	 * Each live task as kill_frame would, set-based as kill_frames does (a
	 * loop of kill_frame asked after each task whether the job was done,
	 * reading past every task it had killed: 16 minutes for a job of
	 * 1,000,000 waiting tasks): waiting and depend ones dead at once, then
	 * running ones kill orders.
	 */
	live := frameq._move_frames(frameq._bulk_tasks(j.id, NULL, ARRAY['waiting', 'depend']),
								ARRAY['waiting', 'depend'], 'dead')
		+ frameq._bulk_kill_orders(j.id, NULL, reason, 'dead');
	PERFORM frameq._audit('kill_job', j.id, NULL, NULL, NULL,
						  pg_catalog.jsonb_build_object('reason', reason, 'frames', live));
END
$$;

/*
 * up, down, repair or drain.  A host set down or to repair has its procs
 * ordered killed; a drained one books nothing new (reserve books only on
 * hosts that are up) while its running tasks finish as they would, and
 * stays drained, whatever happens to its lease, until it is set up.
 */
CREATE FUNCTION frameq.set_host_state(host text, state text) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	h frameq.host;
BEGIN
	IF state IS NULL OR state NOT IN ('up', 'down', 'repair', 'drain') THEN
		RAISE EXCEPTION 'state must be up, down, repair or drain, not %', coalesce(frameq._clip(state), 'null')
			USING ERRCODE = CASE WHEN state IS NULL THEN 'null_value_not_allowed'
								 ELSE 'invalid_parameter_value' END;
	END IF;
	h := frameq._host_lock_by_name(host);
	IF state IN ('down', 'repair') THEN
		/* its work is ordered killed; the frames stay held until that is confirmed */
		PERFORM frameq._kill_order(x.id, pg_catalog.format('host set %s', set_host_state.state), 'waiting')
		   FROM frameq.proc x WHERE x.host = h.id AND x.state = 'running'
		 /* in id order, as complete_many locks several: it does not take the host lock */
		 ORDER BY x.id;
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
