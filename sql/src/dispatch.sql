
/*
 * ---------------------------------------------------------------------
 * dispatch.sql: the dispatch queue, parking, and the dispatch hints.
 *
 * No waiting frame is passed over.  reserve() reads candidate layers, in
 * policy order, from an index of the layers that may have waiting frames,
 * instead of walking a show's jobs one SQL probe at a time (which had to
 * give up after some number of jobs, so an idle host could be told
 * "nothing to do" while work it could run waited behind jobs whose frames
 * were all running).  frameq.dispatch_queue (schema.sql) holds a row for
 * such a layer per tag it asks for ('' for an untagged layer), keyed so
 * that one index range is one (show, tag, needs-gpus) stream in policy
 * order; a host merges the streams of its own tags (and of no tag, and of
 * GPU layers only if it has GPUs), so layers it cannot run by tags or GPUs
 * are never read, and the resource minimums are index conditions.
 *
 * Here "waiting" means bookable: a task whose requeue or retry delay has
 * not ended (frame.not_before set) is 'waiting' to its users but counts
 * as not waiting for all of this, and is in no index that reserve()
 * reads; the worker queues its layer when its delay ends.
 *
 * The rows are a superset: a row may name a layer that has no waiting
 * frame left, or carry a job priority that has since changed.  reserve()
 * deletes such rows when it meets them.  What must never happen is a
 * waiting frame of an active job whose layer has no row (unless the job
 * or its folder is parked, below); check() says so if it does.  How that
 * holds without any waiting:
 *
 * - rows are only inserted, by whoever makes a frame waiting (the triggers
 *	 below: submit, a release to waiting, retry_frame, a dependency met;
 *	 the worker, when a delayed task's time comes: worker.sql),
 *	 and by set_job when a job is resumed or its priority changes (all of
 *	 the job's layers: it need not see a release in flight); one who finds
 *	 the layer's row there already holds it (FOR KEY SHARE) to its end
 *	 instead, which keeps any delete from taking it meanwhile;
 * - reserve() deletes a row only in one statement whose snapshot sees no
 *	 waiting frame of the layer (or the job not active at the row's
 *	 priority), and only rows it could lock without waiting (SKIP LOCKED).
 *	 A frame made waiting after that snapshot came with its own row, which
 *	 the snapshot does not see and so cannot delete, or holds a row, which
 *	 the delete skips; one made waiting before it is seen, and nothing is
 *	 deleted.
 * No row is ever updated, and no insert can conflict with anything (there
 * is no unique key): nobody ever waits on this table (the holds are
 * shared with each other, and every delete skips what is held).  A row is per layer,
 * written when a layer's frames become waiting and deleted once when it
 * runs dry: no booking writes a row that another booking must also write.
 *
 * Parking: a job at its job or folder cap leaves the queue.  Otherwise
 * every reserve() would read each row of a capped job (an index row and a
 * ledger read) for as long as the job stayed capped: 10,000 capped jobs
 * ahead of waiting work would cost every call about 23 ms.  The first call
 * that finds a row over its cap marks the cap's ledger entry parked and
 * deletes the row; the release that lowers the entry queues the job's
 * layers (or the folder's jobs' layers) again in its own transaction.
 * src/ledger.c ("Parking") gives the protocol and why no bookable layer is
 * ever left without a row; the functions here are its SQL half.
 *
 * Size classes: a layer needing more cores or memory than the host has
 * free is not read at all, or read as one index tuple only if it needs
 * less than twice what the host has free.  Each row carries the layer's
 * memory class and cores class (the number of doublings from 1 GiB and
 * from one core that hold its need: src/booking.c, size_class, owns the
 * steps), and the classes are key columns ahead of the policy order, so a
 * stream is (show, tag, needs-gpus, memory class, cores class).  A host
 * reads the classes up to those of its free memory and cores, merging
 * their streams.  So that a host does not open a stream per class that
 * could exist, frameq.dispatch_class records the streams that have had
 * rows: _queue_layers adds a stream with its first row (no unique key: two
 * first rows at once may both add it, which reserve() reads as one), and
 * the worker removes streams that have no row left (_dispatch_class_prune),
 * with the queue locked against writers so that no row in flight can lose
 * its stream.  Both halves need READ COMMITTED, where each statement's
 * snapshot follows the locks taken before it: the prune does nothing in
 * any other isolation level, and a writer in one lists its streams
 * whether or not it sees them listed.
 * ---------------------------------------------------------------------
 */

/* the size class of a layer's memory (bytes) and of its minimum cores (cc) */
CREATE FUNCTION frameq._memory_class(memory bigint) RETURNS smallint
	AS 'MODULE_PATHNAME', 'frameq_memory_class' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE
	SET search_path = pg_catalog, pg_temp;
CREATE FUNCTION frameq._cores_class(min_cc int) RETURNS smallint
	AS 'MODULE_PATHNAME', 'frameq_cores_class' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE
	SET search_path = pg_catalog, pg_temp;

/*
 * Queue these layers at their job's current priority, one row per tag, and
 * list their streams.  A layer's row carries its memory; a task whose
 * memory an OOM retry raised (frame.memory) is booked from a row of its
 * own at that size, so a layer gets one more row per raised size that its
 * waiting tasks have (found in frame_raised), and raised_layer with
 * raised_memory queues one such row for a task this statement is making
 * waiting (the gate, which runs before its row is written).  A paused
 * layer (set_layer) gets no row.  A row already there for the layer, tag,
 * priority and memory, with the layer's current minimums and dispatch
 * order (set_layer changes them: a row of the old values is not relied
 * on), is relied on instead of writing another, so a layer whose tasks
 * are freed one transaction at a time (a frame-by-frame dependent) keeps
 * one row, not one per task.  What keeps that row until this transaction
 * has committed (by when every tidy's snapshot sees the frame it made
 * waiting) is, first, the job's dispatch lock in SHARE: a tidy deletes
 * only rows of jobs whose lock it could take in EXCLUSIVE, and reads
 * after taking it; the rows are then read with a snapshot taken after the
 * lock.  Where the lock is not to be had at once (a tidy or depend_job
 * has it) or the snapshot is the transaction's, the row itself is held
 * (FOR KEY SHARE; a tidy's delete skips what it cannot lock), and a row
 * being deleted is skipped and a new one written.  The lock is the common
 * path because a row lock shared by many transactions at once is rewritten
 * (a multixact) by each.  PL/pgSQL with generic plans, planned once per
 * session.
 */
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
		/*
		 * A layer whose job's lock is not to be had may be under an edit
		 * (set_layer holds it in EXCLUSIVE): read it after the edit ends
		 * (the statement below has a later snapshot), so as not to write
		 * or rely on rows of its old values.  Rare: only while a tidy, a
		 * depend_job or an edit of the job is in flight.
		 */
		IF cardinality(held_layers) < cardinality(all_layers) THEN
			PERFORM 1 FROM frameq.layer l
			  WHERE l.id = ANY (all_layers) AND l.id <> ALL (held_layers) ORDER BY l.id FOR SHARE;
		END IF;
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
			SELECT q.layer, q.tag, q.priority, q.memory, q.min_cc, q.gpus, q.gpu_memory,
				   q.dispatch_order
			  FROM frameq.dispatch_queue q
			 WHERE q.layer = ANY (held_layers)),
		 held AS (
			SELECT q.layer, q.tag, q.priority, q.memory, q.min_cc, q.gpus, q.gpu_memory,
				   q.dispatch_order
			  FROM frameq.dispatch_queue q
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
			  JOIN frameq.layer l ON l.id = w.layer AND NOT l.paused
			  JOIN frameq.job j ON j.id = l.job
			 CROSS JOIN LATERAL (SELECT DISTINCT x AS tag
								   FROM unnest(CASE WHEN cardinality(l.tags) = 0
													THEN ARRAY['']::text[] ELSE l.tags END) x) t
			 WHERE NOT EXISTS (SELECT 1 FROM seen h
								WHERE h.layer = l.id AND h.tag = t.tag AND h.priority = j.priority
								  AND h.memory = w.memory AND h.min_cc = l.min_cc AND h.gpus = l.gpus
								  AND h.gpu_memory = l.gpu_memory
								  AND h.dispatch_order = l.dispatch_order)
			   AND NOT EXISTS (SELECT 1 FROM held h
								WHERE h.layer = l.id AND h.tag = t.tag AND h.priority = j.priority
								  AND h.memory = w.memory AND h.min_cc = l.min_cc AND h.gpus = l.gpus
								  AND h.gpu_memory = l.gpu_memory
								  AND h.dispatch_order = l.dispatch_order)
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

/*
 * The worker's round: forget the streams that have no row, and duplicates.
 * Writers of the queue are locked out for the delete (the lock is only
 * tried: a busy queue is tidied another round), so no row can be in
 * flight for a stream that goes.  The test first, without the lock: most
 * rounds have nothing to do.  Returns the streams removed.
 */
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

/*
 * Frames inserted (submit; a direct INSERT or COPY): once per statement,
 * check what frame's foreign keys would (procs.sql, _frame_keys_check)
 * and queue the layers of the frames inserted waiting.  One pass over the
 * statement's rows gives both: each pass over a submit's 500,000-row
 * transition table costs about 0.15 s, about 3 % of the submit.
 */
CREATE FUNCTION frameq._frame_inserted() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	jobs bigint[];
	layers bigint[];
	waiting bigint[];
BEGIN
	SELECT array_agg(p.job ORDER BY p.layer, p.job), array_agg(p.layer ORDER BY p.layer, p.job),
		   array_agg(p.layer ORDER BY p.layer) FILTER (WHERE p.waiting)
	  INTO jobs, layers, waiting
	  FROM (SELECT n.job, n.layer, bool_or(n.state OPERATOR(pg_catalog.=) 'waiting') AS waiting
			  FROM new_frames n GROUP BY n.job, n.layer) p;
	PERFORM frameq._frame_keys_check(jobs, layers);
	PERFORM frameq._queue_layers(coalesce(waiting, '{}'));
	RETURN NULL;
END
$$;
CREATE TRIGGER frame_inserted AFTER INSERT ON frameq.frame
	REFERENCING NEW TABLE AS new_frames
	FOR EACH STATEMENT EXECUTE FUNCTION frameq._frame_inserted();

/*
 * A frame made waiting again (release, retry_frame, a dependency met)
 * queues its layer: the gate, frame_gate (depends.sql), does it, since it
 * reads the layer under the same lock in the same statement.
 */

/*
 * A job resumed or given a new priority: queue every layer of it at the
 * new priority (not only those with waiting frames: a release in flight
 * that this snapshot cannot see may have queued its layer at the old
 * priority).  Rows of layers with nothing waiting go at their first read.
 */
CREATE FUNCTION frameq._job_queue() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
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
 * Bookable tasks of a layer: 'waiting' and not delayed, of the layer's
 * size (frame_waiting) or of a size an OOM retry raised (frame_raised).
 * Each is one index probe.
 */
CREATE FUNCTION frameq._layer_has_waiting(layer bigint) RETURNS bool
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
	SELECT EXISTS (SELECT 1 FROM frameq.frame f
					WHERE f.layer OPERATOR(pg_catalog.=) $1 AND f.state OPERATOR(pg_catalog.=) 'waiting'
					  AND f.not_before IS NULL AND f.memory IS NULL)
		OR EXISTS (SELECT 1 FROM frameq.frame f
					WHERE f.layer OPERATOR(pg_catalog.=) $1 AND f.state OPERATOR(pg_catalog.=) 'waiting'
					  AND f.not_before IS NULL AND f.memory IS NOT NULL)
$$;

/*
 * Has a queue row of this layer and memory anything to book: tasks of the
 * layer's own size if that is the row's, else tasks raised to exactly the
 * row's.
 */
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

/*
 * Does a queue row still say what its layer is: the layer not paused, the
 * row's tag one of the layer's ('' for none), its minimums and dispatch
 * order the layer's (a raised size's row: any memory above the layer's)?
 * set_layer changes these and queues the layer anew; reserve() passes
 * over a row of a paused layer or of a tag the layer no longer has, and
 * its tidy deletes the rows that are not current.
 */
CREATE FUNCTION frameq._row_current(q frameq.dispatch_queue) RETURNS bool
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
	SELECT EXISTS (SELECT 1 FROM frameq.layer l
					WHERE l.id OPERATOR(pg_catalog.=) q.layer AND NOT l.paused
					  AND q.tag OPERATOR(pg_catalog.=) ANY (
							CASE WHEN pg_catalog.cardinality(l.tags) OPERATOR(pg_catalog.=) 0
								 THEN ARRAY['']::text[] ELSE l.tags END)
					  AND q.min_cc OPERATOR(pg_catalog.=) l.min_cc
					  AND q.memory OPERATOR(pg_catalog.>=) l.memory
					  AND q.gpus OPERATOR(pg_catalog.=) l.gpus
					  AND q.gpu_memory OPERATOR(pg_catalog.=) l.gpu_memory
					  AND q.dispatch_order OPERATOR(pg_catalog.=) l.dispatch_order)
$$;

/*
 * reserve()'s tidying, at most once per call: rows it met that are stale
 * (the job is not active, or has another priority now: then its layers are
 * queued at the new one first), layers it found with no frame to take or
 * with rows that no longer say what the layer is (_row_current), and
 * rows it found over a parked cap.  Each delete is one statement, so its
 * test and what it deletes share one snapshot (see the top of this file),
 * and takes only rows it can lock without waiting, of jobs whose dispatch
 * lock it took (in EXCLUSIVE, only tried) in the statement before, so
 * that no transaction relying on a row under that lock (_queue_layers)
 * is in flight and the delete's snapshot sees every one that was.
 */
CREATE FUNCTION frameq._dispatch_tidy(stale tid[], emptied bigint[], parked tid[]) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	jobs bigint[];
	edited bigint[];
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
		/*
		 * Rows that no longer say what their layer is (set_layer): the
		 * layer's current rows first, as for a stale priority above, so
		 * that deleting them cannot leave a waiting layer without one
		 */
		edited := ARRAY(SELECT DISTINCT q.layer FROM frameq.dispatch_queue q
						 WHERE q.layer OPERATOR(pg_catalog.=) ANY (emptied) AND NOT frameq._row_current(q));
		IF pg_catalog.cardinality(edited) OPERATOR(pg_catalog.>) 0 THEN
			PERFORM frameq._queue_layers(edited);
		END IF;
		jobs := frameq._claim_jobs(ARRAY(SELECT DISTINCT x.job FROM frameq.dispatch_queue x
										  WHERE x.layer OPERATOR(pg_catalog.=) ANY (emptied)));
		DELETE FROM frameq.dispatch_queue q
		 WHERE q.ctid OPERATOR(pg_catalog.=) ANY (ARRAY(
				SELECT x.ctid FROM frameq.dispatch_queue x
				 WHERE x.layer OPERATOR(pg_catalog.=) ANY (emptied)
				   AND x.job OPERATOR(pg_catalog.=) ANY (jobs) FOR UPDATE SKIP LOCKED))
		   AND (NOT frameq._row_has_waiting(q.layer, q.memory) OR NOT frameq._row_current(q));
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

/*
 * ---------------------------------------------------------------------
 * Parking (see the top of this file)
 * ---------------------------------------------------------------------
 */

/* queue again the layers of these jobs that have waiting frames, if the job is active */
CREATE FUNCTION frameq._queue_waiting_of(jobs bigint[]) RETURNS void
LANGUAGE sql SET search_path = pg_catalog, pg_temp AS $$
	SELECT frameq._queue_layers(ARRAY(
		SELECT l.id FROM frameq.layer l
		  JOIN frameq.job j ON j.id OPERATOR(pg_catalog.=) l.job
		 WHERE l.job OPERATOR(pg_catalog.=) ANY (jobs)
		   AND j.state OPERATOR(pg_catalog.=) 'active'
		   AND frameq._layer_has_waiting(l.id)))
$$;

/* a release of a parked job (src/release.c) */
CREATE FUNCTION frameq._queue_job_waiting(job bigint) RETURNS void
LANGUAGE sql SET search_path = pg_catalog, pg_temp AS $$
	SELECT frameq._queue_waiting_of(ARRAY[job])
$$;

/* a release of a parked folder: every active job in it */
CREATE FUNCTION frameq._queue_folder_waiting(folder int) RETURNS void
LANGUAGE sql SET search_path = pg_catalog, pg_temp AS $$
	SELECT frameq._queue_waiting_of(ARRAY(
		SELECT j.id FROM frameq.job j
		 WHERE j.folder OPERATOR(pg_catalog.=) $1 AND j.state OPERATOR(pg_catalog.=) 'active'))
$$;

/*
 * After a ledger rebuild, which forgets what was parked: every waiting
 * layer of an active job that has no row for one of its tags at the job's
 * priority.  Testing for a row is safe here, unlike on a release: the
 * rebuild waited for every transaction that had written the queue, so no
 * park's delete is in flight, and none starts until this has committed.
 */
CREATE FUNCTION frameq._queue_waiting_layers() RETURNS void
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

/*
 * A cap raised or cleared, or a job moved to another folder: its parked
 * layers may fit now.  (Resuming a job or changing its priority queues
 * every layer already: job_queue.)
 */
CREATE FUNCTION frameq._job_caps_queue() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
	PERFORM frameq._queue_job_waiting(NEW.id);
	RETURN NULL;
END
$$;
CREATE TRIGGER job_caps_queue AFTER UPDATE OF max_cc, max_gpus, folder ON frameq.job
	FOR EACH ROW WHEN (NEW.state = 'active' AND
					   (OLD.max_cc, OLD.max_gpus, OLD.folder)
					   IS DISTINCT FROM (NEW.max_cc, NEW.max_gpus, NEW.folder))
	EXECUTE FUNCTION frameq._job_caps_queue();

/* a folder's cap raised or cleared: its jobs' parked layers may fit now */
CREATE FUNCTION frameq._folder_caps_queue() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
	PERFORM frameq._queue_folder_waiting(NEW.id);
	RETURN NULL;
END
$$;
CREATE TRIGGER folder_caps_queue AFTER UPDATE OF max_cc, max_gpus ON frameq.folder
	FOR EACH ROW WHEN ((OLD.max_cc, OLD.max_gpus) IS DISTINCT FROM (NEW.max_cc, NEW.max_gpus))
	EXECUTE FUNCTION frameq._folder_caps_queue();

/*
 * May a parked row of this job leave the queue now (the entry still parked,
 * nothing in flight, over the cap)?  Caps are -1 for none; folder NULL for
 * a job in no folder.
 */
CREATE FUNCTION frameq._parked_over_cap(job bigint, job_cc int, job_gpus int,
										folder int, folder_cc int, folder_gpus int,
										min_cc int, gpus int) RETURNS bool
	AS 'MODULE_PATHNAME', 'frameq_parked_over_cap' LANGUAGE C VOLATILE
	SET search_path = pg_catalog, pg_temp;

/* the ledger entries that are parked, and their changes in flight */
CREATE FUNCTION frameq._ledger_parked(OUT kind text, OUT id bigint, OUT inflight int)
	RETURNS SETOF record
	AS 'MODULE_PATHNAME', 'frameq_ledger_parked' LANGUAGE C VOLATILE STRICT
	SET search_path = pg_catalog, pg_temp;

/* is the requeue after a ledger rebuild still to commit? */
CREATE FUNCTION frameq._requeue_pending() RETURNS bool
	AS 'MODULE_PATHNAME', 'frameq_ledger_requeue_pending' LANGUAGE C VOLATILE STRICT
	SET search_path = pg_catalog, pg_temp;

/* the worker's round: after a ledger rebuild, queue what was parked */
CREATE FUNCTION frameq._requeue_after_rebuild() RETURNS bigint
	AS 'MODULE_PATHNAME', 'frameq_requeue_after_rebuild' LANGUAGE C VOLATILE STRICT
	SET search_path = pg_catalog, pg_temp;

/*
 * ---------------------------------------------------------------------
 * Dispatch hints (src/dispatch.c): per layer, where in its frame numbers
 * reserve() starts to look for the next waiting frame.  No waiting frame
 * is ever below its layer's hint.
 * ---------------------------------------------------------------------
 */

/* an SQL path made a frame waiting again: keep the layer's dispatch hint below it */
CREATE FUNCTION frameq._frame_waiting(layer bigint, number int) RETURNS void
	AS 'MODULE_PATHNAME', 'frameq_frame_waiting' LANGUAGE C VOLATILE STRICT
	SET search_path = pg_catalog, pg_temp;

/* each layer's dispatch hint: no waiting frame has a lower number */
CREATE FUNCTION frameq._dispatch_hints(OUT layer bigint, OUT low int)
	RETURNS SETOF record
	AS 'MODULE_PATHNAME', 'frameq_dispatch_hints' LANGUAGE C VOLATILE STRICT
	SET search_path = pg_catalog, pg_temp;
