
/*
 * ---------------------------------------------------------------------
 * depends.sql: dependencies between jobs, layers and tasks.
 *
 * A task (a frame row) with an unmet dependency is 'depend': never booked,
 * never queued for dispatch.  It becomes 'waiting' in the transaction that
 * meets its last dependency, and that transaction announces it (on
 * frameq_release if it released a proc, else on frameq_ready).  Three kinds,
 * kept in two counters:
 *
 * - frame by frame (layer after_frames): frame.deps_left counts a task's
 *	 unmet prerequisite tasks.  Into an unchunked layer (the common case:
 *	 a render after a simulation, a denoise after a render), a task of
 *	 number N waits for the task of each listed layer that holds N, and
 *	 no row records the pair: a depend row of kind 'frames' says that the
 *	 layer waits for that one, and a prerequisite task's frees_by_number
 *	 that its first end has yet to meet the tasks of its numbers.  So a
 *	 submit writes no more rows than without the dependency.  Into a
 *	 chunked layer, whose task may wait for several tasks of a layer, an
 *	 edge per (task, prerequisite task) is written, in frame_depend.
 * - layer on layer (layer after) and job on job (job after_jobs,
 *	 depend_job()): a row in depend; layer.deps_left counts the unmet rows
 *	 of the layer and of its job.
 * A task is free when its own count and its layer's are both 0.  Every
 * count only falls (a met dependency stays met) except when depend_job()
 * adds a job dependency, which holds the job's waiting tasks.
 *
 * What meets a dependency, at the cost of the tasks it frees:
 * - a prerequisite task ending succeeded or eaten, the first time (frame
 *	 triggers on tasks marked at submit): a prereq task's unmet edges are
 *	 met (frame_prereq_done; only prereq tasks are in the indexes of a
 *	 layer's unfinished prerequisite tasks, frame_prereq_open and _idle),
 *	 and, if its layer is a prerequisite of a layer, the layer is tested
 *	 for done (_layer_maybe_done); a frees_by_number task's first end
 *	 (the flag cleared by frame_frees_once) meets the tasks of its numbers
 *	 in the unchunked layers waiting for it (frame_frees_by_number, C);
 * - a job finishing with no dead task, or its last dead task eaten
 *	 (triggers job_prereq_done and frame_dead_eaten): its dependents' rows
 *	 are met;
 * - drop_depends(), the operator's override.
 * Whatever makes a task 'waiting' passes the gate (frame_gate): a task with
 * an unmet dependency goes to 'depend' instead (a retry's release, say, of
 * a task whose job was given a dependency meanwhile).
 *
 * Races.  Counters live in rows, so two prerequisites of one task ending
 * at once serialize on the task's row, and exactly one of them frees it.
 * A layer is done when none of its tasks is unfinished, which two
 * transactions ending its last two tasks could each fail to see (each
 * sees the other's task still running).  So a transaction that ends one
 * looks for another task of the layer that is waiting, depend or dead and
 * that it can lock (FOR SHARE SKIP LOCKED: a task it holds cannot end
 * before it commits); if there is none, only running tasks (or tasks
 * others are changing) are left, and it locks the dependency rows and
 * looks again under the latest snapshot (src/depends.c, also for a
 * caller in REPEATABLE READ): of two such transactions the second sees the
 * first's end.  The last running tasks of a prerequisite layer
 * therefore end one transaction at a time.  The gate reads the layer's count under FOR SHARE, so it
 * waits for a transaction that is changing it.  Lock order: a task, then
 * dependency rows, then layer rows, then the layer's tasks.
 * ---------------------------------------------------------------------
 */

/* is a prerequisite layer or job not done, by the latest committed state?  (src/depends.c) */
CREATE FUNCTION frameq._layer_open_latest(layer bigint) RETURNS bool
	AS 'MODULE_PATHNAME', 'frameq_layer_open_latest' LANGUAGE C VOLATILE STRICT
	SET search_path = pg_catalog, pg_temp;
CREATE FUNCTION frameq._job_open_latest(job bigint) RETURNS bool
	AS 'MODULE_PATHNAME', 'frameq_job_open_latest' LANGUAGE C VOLATILE STRICT
	SET search_path = pg_catalog, pg_temp;

/* has this transaction released a proc?  (src/release.c) */
CREATE FUNCTION frameq._released_in_xact() RETURNS bool
	AS 'MODULE_PATHNAME', 'frameq_released_in_xact' LANGUAGE C VOLATILE STRICT
	SET search_path = pg_catalog, pg_temp;

/*
 * Tasks of a layer became bookable in this transaction: say so on
 * frameq_ready, unless the transaction released a proc (its frameq_release
 * says it then) or the job is not active (resuming it says it then).  A
 * hint for agents; nothing depends on its arrival.
 */
CREATE FUNCTION frameq._announce_ready(job bigint, layer bigint, count bigint) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
	IF count > 0 AND NOT frameq._released_in_xact()
	   AND EXISTS (SELECT 1 FROM frameq.job j WHERE j.id = _announce_ready.job AND j.state = 'active') THEN
		PERFORM pg_notify('frameq_ready',
						  json_build_object('job', job, 'layer', layer, 'count', count)::text);
	END IF;
END
$$;

/* a job's layers with waiting tasks, announced (submit, a job resumed) */
CREATE FUNCTION frameq._announce_job_ready(job bigint) RETURNS void
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

/*
 * Make these 'depend' tasks 'waiting' if nothing holds them any more;
 * returns how many.  Their layers get their dispatch hints lowered and are
 * queued (frame_gate), and are announced, one notification per
 * layer.
 */
CREATE FUNCTION frameq._free_tasks(tasks bigint[]) RETURNS bigint
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp SET plan_cache_mode = force_generic_plan AS $$
DECLARE
	r record;
	n bigint := 0;
BEGIN
	IF tasks IS NULL OR cardinality(tasks) = 0 THEN
		RETURN 0;
	END IF;
	FOR r IN WITH freed AS (
				UPDATE frameq.frame f SET state = 'waiting', version = f.version + 1
				 WHERE f.id = ANY (tasks) AND f.state = 'depend' AND f.deps_left = 0
				RETURNING f.job, f.layer, f.number, f.state)
			 SELECT x.job, x.layer, min(x.number) AS low, count(*) AS freed
			   FROM freed x WHERE x.state = 'waiting'
			  GROUP BY x.job, x.layer LOOP
		PERFORM frameq._frame_waiting(r.layer, r.low), frameq._announce_ready(r.job, r.layer, r.freed);
		n := n + r.freed;
	END LOOP;
	RETURN n;
END
$$;

/*
 * These dependency rows are met: their layers (every layer of a dependent
 * job) count one fewer, and a layer that reaches 0 frees the tasks that
 * only it held.  Returns the tasks freed.
 */
CREATE FUNCTION frameq._meet_depends(ids bigint[]) RETURNS bigint
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp SET plan_cache_mode = force_generic_plan AS $$
DECLARE
	ready bigint[];
BEGIN
	WITH met AS (
			UPDATE frameq.depend d SET satisfied = true
			 WHERE d.id = ANY (ids) AND NOT d.satisfied
			RETURNING d.kind, d.job, d.layer),
		 hit AS (
			SELECT m.layer FROM met m WHERE m.kind = 'layer'
			UNION ALL
			SELECT l.id FROM met m JOIN frameq.layer l ON l.job = m.job WHERE m.kind = 'job'),
		 less AS (
			UPDATE frameq.layer l SET deps_left = l.deps_left - h.n
			  FROM (SELECT hit.layer, count(*) AS n FROM hit GROUP BY hit.layer) h
			 WHERE l.id = h.layer
			RETURNING l.id, l.deps_left)
	SELECT array_agg(x.id) INTO ready FROM less x WHERE x.deps_left = 0;
	IF ready IS NULL THEN
		RETURN 0;
	END IF;
	RETURN frameq._free_tasks(ARRAY(
		SELECT f.id FROM frameq.frame f
		 WHERE f.layer = ANY (ready) AND f.state = 'depend' AND f.deps_left = 0));
END
$$;

/*
 * Is this prerequisite layer done (no task unfinished: waiting, depend,
 * running or dead)?  If so, meet the layer dependencies on it.  See
 * "Races" above.
 */
CREATE FUNCTION frameq._layer_maybe_done(prereq_layer bigint) RETURNS bigint
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp SET plan_cache_mode = force_generic_plan AS $$
DECLARE
	ids bigint[];
BEGIN
	/*
	 * A task not running and not done that no one else is changing: held
	 * (FOR SHARE), it cannot end before we commit.  A running task is not
	 * held: its host's complete() would wait for us.  (Index
	 * frame_prereq_idle: the running tasks of the layer's last wave are not
	 * read.)
	 */
	PERFORM 1 FROM frameq.frame f
	  WHERE f.layer = prereq_layer AND f.prereq AND f.state IN ('waiting', 'depend', 'dead')
	  LIMIT 1 FOR SHARE SKIP LOCKED;
	IF FOUND THEN
		RETURN 0;
	END IF;
	/* perhaps the last: one such transaction at a time, each with a new snapshot */
	SELECT array_agg(d.id) INTO ids FROM (
		SELECT d.id FROM frameq.depend d
		 WHERE d.on_layer = prereq_layer AND d.kind = 'layer' AND NOT d.satisfied
		 ORDER BY d.id FOR UPDATE) d;
	IF ids IS NULL OR frameq._layer_open_latest(prereq_layer) THEN
		RETURN 0;
	END IF;
	RETURN frameq._meet_depends(ids);
END
$$;

/*
 * Is this job done for its dependents (finished, and no task dead)?  If
 * so, meet the job dependencies on it.  Serialized on the job row, which
 * whatever finishes or reopens a job holds.
 */
CREATE FUNCTION frameq._job_maybe_done(prereq_job bigint) RETURNS bigint
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	ids bigint[];
BEGIN
	IF NOT EXISTS (SELECT 1 FROM frameq.depend d
					WHERE d.on_job = prereq_job AND d.kind = 'job' AND NOT d.satisfied) THEN
		RETURN 0;
	END IF;
	PERFORM 1 FROM frameq.job j WHERE j.id = prereq_job FOR NO KEY UPDATE;
	IF frameq._job_open_latest(prereq_job) THEN
		RETURN 0;
	END IF;
	SELECT array_agg(d.id) INTO ids FROM (
		SELECT d.id FROM frameq.depend d
		 WHERE d.on_job = prereq_job AND d.kind = 'job' AND NOT d.satisfied
		 ORDER BY d.id FOR UPDATE) d;
	RETURN frameq._meet_depends(ids);
END
$$;

/*
 * A prerequisite task (prereq: of a layer, or of a chunked layer's tasks)
 * ended succeeded or eaten: meet its edges, and free the dependents they
 * held last in the same update (the gate, frame_gate, still holds those
 * whose layer waits); then test its layer.  A dependent whose count a
 * concurrent drop_depends() has zeroed is left alone (deps_left > 0,
 * tested again on its latest version).  The dependents freed get their
 * layers' dispatch hints lowered and are announced as _free_tasks does.
 * (The tasks found by its numbers are met by frame_frees_by_number.)
 */
CREATE FUNCTION frameq._prereq_done() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp SET plan_cache_mode = force_generic_plan AS $$
DECLARE
	r record;
BEGIN
	FOR r IN WITH met AS (
				UPDATE frameq.frame_depend e SET satisfied = true
				 WHERE e.on_frame = NEW.id AND NOT e.satisfied
				RETURNING e.frame),
			 less AS (
				UPDATE frameq.frame f
				   SET deps_left = f.deps_left - 1,
					   state = CASE WHEN f.deps_left = 1 AND f.state = 'depend' THEN 'waiting' ELSE f.state END,
					   version = f.version + CASE WHEN f.deps_left = 1 AND f.state = 'depend' THEN 1 ELSE 0 END
				  FROM met WHERE f.id = met.frame AND f.deps_left > 0
				RETURNING f.job, f.layer, f.number, f.state, f.deps_left)
			 SELECT x.job, x.layer, min(x.number) AS low, count(*) AS freed
			   FROM less x WHERE x.deps_left = 0 AND x.state = 'waiting'
			  GROUP BY x.job, x.layer LOOP
		PERFORM frameq._frame_waiting(r.layer, r.low), frameq._announce_ready(r.job, r.layer, r.freed);
	END LOOP;
	IF EXISTS (SELECT 1 FROM frameq.depend d
				WHERE d.on_layer = NEW.layer AND d.kind = 'layer' AND NOT d.satisfied) THEN
		PERFORM frameq._layer_maybe_done(NEW.layer);
	END IF;
	RETURN NULL;
END
$$;
CREATE TRIGGER frame_prereq_done AFTER UPDATE OF state ON frameq.frame
	FOR EACH ROW WHEN (NEW.prereq AND NEW.state IN ('succeeded', 'eaten')
					   AND OLD.state NOT IN ('succeeded', 'eaten'))
	EXECUTE FUNCTION frameq._prereq_done();

/*
 * A prerequisite's first end meets the tasks of its numbers in the
 * unchunked layers that wait for its layer (src/depends.c,
 * meet_by_number): C, since it runs in every complete() of such a task.
 */
CREATE FUNCTION frameq._frees_by_number() RETURNS trigger
	AS 'MODULE_PATHNAME', 'frameq_frees_by_number' LANGUAGE C
	SET search_path = pg_catalog, pg_temp;
CREATE TRIGGER frame_frees_by_number AFTER UPDATE OF state ON frameq.frame
	FOR EACH ROW WHEN (OLD.frees_by_number AND NEW.state IN ('succeeded', 'eaten')
					   AND OLD.state NOT IN ('succeeded', 'eaten'))
	EXECUTE FUNCTION frameq._frees_by_number();

/* a prerequisite's first end meets the tasks found by its numbers, once (src/depends.c) */
CREATE FUNCTION frameq._frees_once() RETURNS trigger
	AS 'MODULE_PATHNAME', 'frameq_frees_once' LANGUAGE C
	SET search_path = pg_catalog, pg_temp;
CREATE TRIGGER frame_frees_once BEFORE UPDATE OF state ON frameq.frame
	FOR EACH ROW WHEN (OLD.frees_by_number AND NEW.state IN ('succeeded', 'eaten'))
	EXECUTE FUNCTION frameq._frees_once();

/* the last dead task of a finished job eaten: its dependents may go */
CREATE FUNCTION frameq._dead_eaten() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
	PERFORM frameq._job_maybe_done(NEW.job);
	RETURN NULL;
END
$$;
CREATE TRIGGER frame_dead_eaten AFTER UPDATE OF state ON frameq.frame
	FOR EACH ROW WHEN (OLD.state = 'dead' AND NEW.state = 'eaten')
	EXECUTE FUNCTION frameq._dead_eaten();

/* a job finished: if no task of it is dead, its dependents may go */
CREATE FUNCTION frameq._job_prereq_done() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
	PERFORM frameq._job_maybe_done(NEW.id);
	RETURN NULL;
END
$$;
CREATE TRIGGER job_prereq_done AFTER UPDATE OF state ON frameq.job
	FOR EACH ROW WHEN (NEW.state = 'finished' AND OLD.state IS DISTINCT FROM 'finished')
	EXECUTE FUNCTION frameq._job_prereq_done();

/*
 * The gate: a task made waiting that something still holds is 'depend'
 * instead, and one that stays waiting has its layer queued
 * (_queue_layers), unless it is delayed (not_before: the worker queues
 * it when its delay ends).  Its layer's count may be changing under us:
 * depend_job() raises it (the only raise), a dependency met lowers it.  A
 * raise is kept out by the job's dispatch lock (src/frameq.h), which
 * depend_job() takes in EXCLUSIVE before it raises the count and moves the
 * job's waiting tasks: held here in SHARE, a count read after it (a
 * statement of its own: a later snapshot) that is 0 stays 0 until we
 * commit, and depend_job() then sees our task waiting.  The same statement
 * asks whether the layer has its dispatch queue rows at the job's priority
 * (the common case: tasks freed one at a time), which the lock keeps as
 * _queue_layers explains; then nothing is written.  A count above 0 may be
 * falling, and outside READ COMMITTED or without the lock the read is not
 * fresh: then the count is read under FOR SHARE, which waits for the
 * transaction changing it.  (The lock, not FOR SHARE, is the common path:
 * every freeing transaction sharing a row lock rewrites it, a multixact.)
 * A BEFORE trigger, so that one function call does both; C (src/depends.c),
 * since every task made waiting passes it.
 */
CREATE FUNCTION frameq._frame_gate() RETURNS trigger
	AS 'MODULE_PATHNAME', 'frameq_frame_gate' LANGUAGE C
	SET search_path = pg_catalog, pg_temp;
/*
 * A bulk move (_move_frames) opens and closes a window in which the gate
 * reads each layer once (src/depends.c, the gate's memo).
 */
CREATE FUNCTION frameq._gate_memo(on_ bool) RETURNS void
	AS 'MODULE_PATHNAME', 'frameq_gate_memo' LANGUAGE C VOLATILE STRICT
	SET search_path = pg_catalog, pg_temp;
CREATE TRIGGER frame_gate BEFORE UPDATE OF state ON frameq.frame
	FOR EACH ROW WHEN (NEW.state = 'waiting' AND OLD.state IS DISTINCT FROM 'waiting')
	EXECUTE FUNCTION frameq._frame_gate();

/* does job a depend, directly or through others, on job b? */
CREATE FUNCTION frameq._job_reaches(a bigint, b bigint) RETURNS bool
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
	WITH RECURSIVE up(job) AS (
		SELECT a
		UNION
		SELECT d.on_job FROM frameq.depend d JOIN up ON d.job = up.job WHERE d.kind = 'job')
	SELECT EXISTS (SELECT 1 FROM up WHERE up.job = b)
$$;

/* the most job dependencies a job may have */
CREATE FUNCTION frameq._max_job_depends() RETURNS int
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$ SELECT 32 $$;

/*
 * Record that job depends on on_job (submit's after_jobs, depend_job):
 * met at once if on_job is done, else the job's layers are held and its
 * waiting tasks become 'depend'.  The caller has checked both jobs.  on_job
 * is locked (KEY SHARE would not wait for its finish; SHARE does), so
 * its finish, which meets the row, cannot pass this unseen.  Returns
 * false if the dependency was there already.
 */
CREATE FUNCTION frameq._add_job_depend(job bigint, on_job bigint) RETURNS bool
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	done bool;
BEGIN
	PERFORM 1 FROM frameq.job j WHERE j.id = on_job FOR SHARE;
	IF EXISTS (SELECT 1 FROM frameq.depend d
				WHERE d.kind = 'job' AND d.job = _add_job_depend.job AND d.on_job = _add_job_depend.on_job) THEN
		RETURN false;
	END IF;
	done := EXISTS (SELECT 1 FROM frameq.job j WHERE j.id = on_job AND j.state = 'finished')
			AND NOT EXISTS (SELECT 1 FROM frameq.frame f WHERE f.job = on_job AND f.state = 'dead');
	INSERT INTO frameq.depend (kind, job, on_job, satisfied) VALUES ('job', job, on_job, done);
	IF NOT done THEN
		UPDATE frameq.layer l SET deps_left = l.deps_left + 1 WHERE l.job = _add_job_depend.job;
		UPDATE frameq.frame f SET state = 'depend', version = f.version + 1
		 WHERE f.job = _add_job_depend.job AND f.state = 'waiting';
	END IF;
	RETURN true;
END
$$;

/* refuse a job dependency that is not allowed; the jobs exist */
CREATE FUNCTION frameq._check_job_depend(job bigint, on_job bigint, field text) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
	IF NOT EXISTS (SELECT 1 FROM frameq.job j WHERE j.id = on_job) THEN
		RAISE EXCEPTION '% names job %, which does not exist', field, on_job
			USING ERRCODE = 'undefined_object';
	END IF;
	/* a submitter depends only on jobs of the shows granted to it */
	PERFORM frameq._authorize_job(on_job);
	IF EXISTS (SELECT 1 FROM frameq.job j WHERE j.id = on_job AND j.state = 'killed') THEN
		RAISE EXCEPTION '% names job %, which was killed', field, on_job
			USING ERRCODE = 'object_not_in_prerequisite_state',
				  HINT = 'A killed job never finishes: depend on a job that can.';
	END IF;
	IF job IS NOT NULL AND (job = on_job OR frameq._job_reaches(on_job, job)) THEN
		RAISE EXCEPTION '% would make job % depend on itself', field, job
			USING ERRCODE = 'invalid_object_definition',
				  DETAIL = pg_catalog.format('Job %s already depends on job %s.', on_job, job);
	END IF;
END
$$;

/* job depends on on_job from now on (for jobs already submitted) */
CREATE FUNCTION frameq.depend_job(job bigint, on_job bigint) RETURNS void
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
	PERFORM frameq._audit('depend_job', job, NULL, NULL, NULL,
						  pg_catalog.jsonb_build_object('on_job', on_job));
END
$$;

/*
 * The operator's override: every dependency of the job (of that layer
 * only, if one is named: its layer and frame-by-frame dependencies; the
 * job's dependencies on jobs hold all its layers and go only with the
 * whole job) counts as met.  Returns the tasks freed.
 */
CREATE FUNCTION frameq.drop_depends(job bigint, layer text DEFAULT NULL) RETURNS int
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	layer_id bigint;
	ids bigint[];
	freed bigint[];
	n bigint;
BEGIN
	PERFORM frameq._not_null(job, 'job');
	PERFORM frameq._authorize_job(job);
	IF NOT EXISTS (SELECT 1 FROM frameq.job j WHERE j.id = drop_depends.job) THEN
		RAISE EXCEPTION 'job % does not exist', job USING ERRCODE = 'undefined_object';
	END IF;
	IF layer IS NOT NULL THEN
		SELECT l.id INTO layer_id FROM frameq.layer l WHERE l.job = drop_depends.job AND l.name = layer;
		IF NOT FOUND THEN
			RAISE EXCEPTION 'job % has no layer "%"', job, frameq._clip(layer)
				USING ERRCODE = 'undefined_object';
		END IF;
	END IF;
	/*
	 * Lock order as a prerequisite's end takes them: the edges (here in
	 * one fixed order), then the tasks they hold, then the dependency rows,
	 * then the layers.
	 */
	PERFORM 1 FROM frameq.frame_depend e JOIN frameq.frame f ON f.id = e.frame
	  WHERE NOT e.satisfied AND f.job = drop_depends.job
		AND f.state IN ('waiting', 'depend', 'running')
		AND (layer_id IS NULL OR f.layer = layer_id)
	  ORDER BY e.frame, e.on_frame FOR UPDATE OF e;
	/*
	 * Edges of chunked layers are met one by one; an unchunked layer's
	 * dependencies found by number are dropped whole, and each task of it
	 * counts none (a prerequisite's end then leaves it alone).
	 */
	WITH met AS (
			UPDATE frameq.frame_depend e SET satisfied = true
			  FROM frameq.frame f
			 WHERE e.frame = f.id AND NOT e.satisfied AND f.job = drop_depends.job
			   AND f.state IN ('waiting', 'depend', 'running')
			   AND (layer_id IS NULL OR f.layer = layer_id)
			RETURNING e.frame),
		 dropped AS (
			UPDATE frameq.depend d SET satisfied = true
			 WHERE d.job = drop_depends.job AND d.kind = 'frames' AND NOT d.satisfied
			   AND (layer_id IS NULL OR d.layer = layer_id)
			RETURNING d.layer),
		 found AS (
			SELECT f.id FROM frameq.frame f
			 WHERE f.layer IN (SELECT dropped.layer FROM dropped) AND f.deps_left > 0),
		 less AS (
			UPDATE frameq.frame f SET deps_left = 0
			  FROM (SELECT met.frame FROM met UNION SELECT found.id FROM found) m
			 WHERE f.id = m.frame
			RETURNING f.id, f.state)
	SELECT array_agg(x.id) INTO freed FROM less x WHERE x.state = 'depend';
	n := frameq._free_tasks(freed);
	SELECT array_agg(d.id) INTO ids FROM (
		SELECT d.id FROM frameq.depend d
		 WHERE d.job = drop_depends.job AND d.kind <> 'frames' AND NOT d.satisfied
		   AND (layer_id IS NULL OR d.layer = layer_id)
		 ORDER BY d.id FOR UPDATE) d;
	IF ids IS NOT NULL THEN
		n := n + frameq._meet_depends(ids);
	END IF;
	PERFORM frameq._audit('drop_depends', job, layer_id, NULL, NULL,
						  pg_catalog.jsonb_build_object('layer', layer, 'freed', n));
	RETURN n;
END
$$;

/*
 * Every dependency, with whether it is met: of jobs and layers, and frame
 * by frame, edge by edge (for an unchunked layer, each task paired with
 * the task of each layer it waits for that holds its number: met once
 * that task has ended, or when the dependency was dropped).
 */
CREATE VIEW frameq.depends AS
SELECT d.kind, d.job, d.layer, NULL::bigint AS frame, d.on_job, d.on_layer,
	   NULL::bigint AS on_frame, d.satisfied
  FROM frameq.depend d
 WHERE d.kind <> 'frames'
UNION ALL
SELECT 'frame', f.job, f.layer, e.frame, p.job, p.layer, e.on_frame, e.satisfied
  FROM frameq.frame_depend e
  JOIN frameq.frame f ON f.id = e.frame
  JOIN frameq.frame p ON p.id = e.on_frame
UNION ALL
SELECT 'frame', f.job, f.layer, f.id, p.job, p.layer, p.id, d.satisfied OR NOT p.frees_by_number
  FROM frameq.depend d
  JOIN frameq.frame f ON f.layer = d.layer
  JOIN (SELECT x.id, x.job, x.layer, x.frees_by_number, y.n
		  FROM frameq.frame x
		 CROSS JOIN LATERAL unnest(coalesce(x.numbers, ARRAY[x.number])) y(n)) p
	ON p.layer = d.on_layer AND p.n = f.number
 WHERE d.kind = 'frames';

/*
 * ---------------------------------------------------------------------
 * At submit (submit.sql)
 * ---------------------------------------------------------------------
 */

/*
 * spec.after_jobs: at most _max_job_depends() job ids, each of a job the
 * caller may act on, not killed, none twice.
 */
CREATE FUNCTION frameq._spec_after_jobs(spec jsonb) RETURNS bigint[]
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	v jsonb := frameq._spec_value(spec, 'after_jobs', 'spec', 'array');
	ids bigint[] := '{}';
	e jsonb;
	k int := 0;
BEGIN
	IF v IS NULL THEN
		RETURN ids;
	END IF;
	IF jsonb_array_length(v) > frameq._max_job_depends() THEN
		PERFORM frameq._too_big('spec.after_jobs', format('%s jobs, at most %s',
								jsonb_array_length(v), frameq._max_job_depends()));
	END IF;
	FOR e IN SELECT x FROM jsonb_array_elements(v) x LOOP
		IF jsonb_typeof(e) <> 'number' OR (e::numeric) <> trunc(e::numeric) OR (e::numeric) < 1
		   OR (e::numeric) > 9223372036854775807 THEN
			RAISE EXCEPTION 'spec.after_jobs[%] must be a job id, not %', k, frameq._clip(e::text)
				USING ERRCODE = 'invalid_parameter_value';
		END IF;
		IF (e::numeric)::bigint = ANY (ids) THEN
			RAISE EXCEPTION 'spec.after_jobs[%] names job % a second time', k, (e::numeric)::bigint
				USING ERRCODE = 'invalid_parameter_value';
		END IF;
		PERFORM frameq._check_job_depend(NULL, (e::numeric)::bigint, format('spec.after_jobs[%s]', k));
		ids := ids || (e::numeric)::bigint;
		k := k + 1;
	END LOOP;
	RETURN ids;
END
$$;

/*
 * The order to write a job's layers' tasks in: every layer after the
 * layers it waits for (after, after_frames), so that a frame-by-frame
 * dependent's edges can be drawn as its tasks are written.  Refuses an
 * unknown layer name (42704) and a cycle (42P17), naming the field.
 * names, after and after_frames (jsonb arrays of names) are per layer, in
 * spec order.
 */
CREATE FUNCTION frameq._layer_order(names text[], after jsonb[], after_frames jsonb[])
RETURNS int[] LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	n int := cardinality(names);
	waits int[] := array_fill(0, ARRAY[n]);
	edges int[] := '{}';
	done int[] := '{}';
	ready int[];
	i int;
	k int;
	field text;
	nm text;
BEGIN
	/* edges, as (prerequisite, dependent) pairs of 1-based layer indexes */
	FOR i IN 1 .. n LOOP
		FOREACH field IN ARRAY ARRAY['after', 'after_frames'] LOOP
			FOR nm IN SELECT jsonb_array_elements_text(CASE WHEN field = 'after' THEN after[i]
															ELSE after_frames[i] END) LOOP
				k := array_position(names, nm);
				IF k IS NULL THEN
					RAISE EXCEPTION 'spec.layers[%].%: layer "%" is not in this job', i - 1, field,
						frameq._clip(nm) USING ERRCODE = 'undefined_object';
				END IF;
				IF k = i THEN
					RAISE EXCEPTION 'spec.layers[%].%: layer "%" cannot wait for itself (a cycle)',
						i - 1, field, frameq._clip(nm) USING ERRCODE = 'invalid_object_definition';
				END IF;
				edges := edges || ARRAY[k, i];
				waits[i] := waits[i] + 1;
			END LOOP;
		END LOOP;
	END LOOP;
	/* Kahn: take the layers that wait for nothing not yet taken */
	LOOP
		ready := ARRAY(SELECT x FROM generate_series(1, n) x
						WHERE waits[x] = 0 AND NOT x = ANY (done) ORDER BY x);
		EXIT WHEN cardinality(ready) = 0;
		done := done || ready;
		FOR k IN 1 .. cardinality(edges) / 2 LOOP
			IF edges[2 * k - 1] = ANY (ready) THEN
				waits[edges[2 * k]] := waits[edges[2 * k]] - 1;
			END IF;
		END LOOP;
	END LOOP;
	IF cardinality(done) < n THEN
		i := (SELECT min(x) FROM generate_series(1, n) x WHERE NOT x = ANY (done));
		RAISE EXCEPTION 'spec.layers[%]: its dependencies make a cycle', i - 1
			USING ERRCODE = 'invalid_object_definition',
				  DETAIL = format('Layers %s wait for each other.',
								  (SELECT string_agg(format('"%s"', frameq._clip(names[x])), ', ' ORDER BY x)
									 FROM generate_series(1, n) x WHERE NOT x = ANY (done)));
	END IF;
	RETURN done;
END
$$;

/*
 * Record a new job's dependencies on jobs (checked by _spec_after_jobs);
 * returns how many are not met yet.  Each job named is locked (SHARE) so
 * that its finish cannot pass the new row unseen.
 */
CREATE FUNCTION frameq._submit_job_depends(job bigint, after_jobs bigint[]) RETURNS int
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	unmet int := 0;
	on_job bigint;
	done bool;
BEGIN
	FOREACH on_job IN ARRAY after_jobs LOOP
		PERFORM 1 FROM frameq.job j WHERE j.id = on_job FOR SHARE;
		done := EXISTS (SELECT 1 FROM frameq.job j WHERE j.id = on_job AND j.state = 'finished')
				AND NOT EXISTS (SELECT 1 FROM frameq.frame f WHERE f.job = on_job AND f.state = 'dead');
		INSERT INTO frameq.depend (kind, job, on_job, satisfied) VALUES ('job', job, on_job, done);
		IF NOT done THEN
			unmet := unmet + 1;
		END IF;
	END LOOP;
	RETURN unmet;
END
$$;

/*
 * Write a layer's tasks (submit): 'depend' if the layer is held (held) or
 * the task waits for a task of a layer in pre (after_frames, whose tasks
 * are written already), else 'waiting'; prereq if a layer waits for this
 * one whole or a chunked layer frame by frame (edges), and frees_by_number
 * if an unchunked one waits for it frame by frame (its depend rows are
 * written already).  A task waits for
 * every task of those layers that holds one of its frame numbers: an
 * unchunked layer's task counts them (they are found by number when they
 * end); a chunked layer's task has its edges written with it.  same[i]
 * says that layer pre[i] has this layer's frame range: it holds each of
 * its numbers exactly once (a range lists no number twice), so it counts
 * one for every task without being read.
 */
CREATE FUNCTION frameq._insert_tasks(job bigint, layer bigint, frame_range text, chunk int,
									 held bool, prereq bool, pre bigint[], same bool[])
RETURNS void LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	st text := CASE WHEN held THEN 'depend' ELSE 'waiting' END;
	frees bool := EXISTS (SELECT 1 FROM frameq.depend d
						   WHERE d.on_layer = _insert_tasks.layer AND d.kind = 'frames'
							 AND NOT d.satisfied);
	other bigint[] := ARRAY(SELECT p FROM unnest(pre, same) u(p, s) WHERE NOT s);
BEGIN
	IF cardinality(pre) = 0 THEN
		IF chunk = 1 THEN
			INSERT INTO frameq.frame (job, layer, number, state, prereq, frees_by_number)
			SELECT job, layer, n, st, prereq, frees FROM frameq._frame_numbers(frame_range, 'range') n;
		ELSE
			INSERT INTO frameq.frame (job, layer, number, numbers, state, prereq, frees_by_number)
			SELECT job, layer, t.first, t.numbers, st, prereq, frees
			  FROM frameq._frame_tasks(frame_range, 'range', chunk) t;
		END IF;
		RETURN;
	END IF;
	IF chunk = 1 THEN
		/* how many tasks of those layers hold each number */
		INSERT INTO frameq.frame (job, layer, number, state, prereq, frees_by_number, deps_left)
		SELECT _insert_tasks.job, _insert_tasks.layer, x.n,
			   CASE WHEN held OR k.n + coalesce(c.n, 0) > 0 THEN 'depend' ELSE 'waiting' END,
			   _insert_tasks.prereq, frees, k.n + coalesce(c.n, 0)
		  FROM frameq._frame_numbers(frame_range, 'range') x(n)
		 CROSS JOIN (SELECT count(*)::int AS n FROM unnest(same) s WHERE s) k
		  LEFT JOIN (SELECT y.n AS number, count(*)::int AS n
					   FROM (SELECT p.number AS n FROM frameq.frame p
							  WHERE p.layer = ANY (other) AND p.numbers IS NULL
							 UNION ALL
							 SELECT u.n FROM frameq.frame p CROSS JOIN LATERAL unnest(p.numbers) u(n)
							  WHERE p.layer = ANY (other) AND p.numbers IS NOT NULL) y
					  GROUP BY y.n) c ON c.number = x.n;
		RETURN;
	END IF;
	WITH pm AS (
			SELECT p.id, x.n FROM frameq.frame p
			 CROSS JOIN LATERAL unnest(coalesce(p.numbers, ARRAY[p.number])) x(n)
			 WHERE p.layer = ANY (pre)),
		 tt AS (
			SELECT t.first, t.numbers FROM frameq._frame_tasks(frame_range, 'range', chunk) t),
		 e AS (
			SELECT DISTINCT tt.first, pm.id AS on_frame
			  FROM tt CROSS JOIN LATERAL unnest(coalesce(tt.numbers, ARRAY[tt.first])) x(n)
			  JOIN pm ON pm.n = x.n),
		 c AS (SELECT e.first, count(*)::int AS n FROM e GROUP BY e.first),
		 ins AS (
			INSERT INTO frameq.frame (job, layer, number, numbers, state, prereq, frees_by_number,
									  deps_left)
			SELECT _insert_tasks.job, _insert_tasks.layer, tt.first, tt.numbers,
				   CASE WHEN held OR c.n IS NOT NULL THEN 'depend' ELSE 'waiting' END,
				   _insert_tasks.prereq, frees, coalesce(c.n, 0)
			  FROM tt LEFT JOIN c ON c.first = tt.first
			RETURNING id, number)
	INSERT INTO frameq.frame_depend (on_frame, frame)
	SELECT e.on_frame, ins.id FROM e JOIN ins ON ins.number = e.first;
END
$$;

/* the most frame-by-frame dependencies one submit may draw (frames x after_frames layers) */
CREATE FUNCTION frameq._max_frame_edges() RETURNS bigint
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$ SELECT 4000000::bigint $$;
