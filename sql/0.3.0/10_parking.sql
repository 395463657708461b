/*
 * ---------------------------------------------------------------------
 * Parking: a job at its job or folder cap leaves the dispatch queue.
 *
 * In 0.2.0 every reserve() read each dispatch queue row of a job at its
 * job or folder cap (an index row and a ledger read) for as long as the
 * job stayed capped: 10,000 capped jobs ahead of waiting work cost every
 * call about 23 ms.  Now the first call that finds a row over its cap
 * marks the cap's ledger entry parked and deletes the row; the release
 * that lowers the entry queues the job's layers (or the folder's jobs'
 * layers) again in its own transaction.  src/ledger.c ("Parking") gives
 * the protocol and why no bookable layer is ever left without a row; the
 * functions here are its SQL half.
 * ---------------------------------------------------------------------
 */

/* a folder's jobs, for queueing them again */
CREATE INDEX job_folder ON frameq.job (folder) WHERE folder IS NOT NULL;

/* queue again the layers of these jobs that have waiting frames, if the job is active */
CREATE FUNCTION frameq._queue_waiting_of(jobs bigint[]) RETURNS void
LANGUAGE sql SET search_path = pg_catalog, pg_temp AS $$
	SELECT frameq._queue_layers(ARRAY(
		SELECT l.id FROM frameq.layer l
		  JOIN frameq.job j ON j.id OPERATOR(pg_catalog.=) l.job
		 WHERE l.job OPERATOR(pg_catalog.=) ANY (jobs)
		   AND j.state OPERATOR(pg_catalog.=) 'active'
		   AND EXISTS (SELECT 1 FROM frameq.frame f
						WHERE f.layer OPERATOR(pg_catalog.=) l.id
						  AND f.state OPERATOR(pg_catalog.=) 'waiting')))
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
		   AND EXISTS (SELECT 1 FROM frameq.frame f
						WHERE f.layer OPERATOR(pg_catalog.=) l.id
						  AND f.state OPERATOR(pg_catalog.=) 'waiting')
		   AND NOT EXISTS (SELECT 1 FROM frameq.dispatch_queue q
							WHERE q.layer OPERATOR(pg_catalog.=) l.id
							  AND q.tag OPERATOR(pg_catalog.=) t.tag
							  AND q.priority OPERATOR(pg_catalog.=) j.priority)))
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

/*
 * Which jobs and folders are parked at their caps now: their layers have
 * no dispatch queue rows until a release lowers them or their caps change.
 */
CREATE VIEW frameq.dispatch_parked AS
SELECT kind, id, inflight FROM frameq._ledger_parked();

/*
 * reserve()'s tidying, at most once per call (0.2.0's, plus the rows it
 * parked): each delete is one statement that tests, after its snapshot,
 * that the row may go.
 */
DROP FUNCTION frameq._dispatch_tidy(tid[], bigint[]);
CREATE FUNCTION frameq._dispatch_tidy(stale tid[], emptied bigint[], parked tid[]) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
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
	IF pg_catalog.cardinality(parked) OPERATOR(pg_catalog.>) 0 THEN
		DELETE FROM frameq.dispatch_queue q
		 WHERE q.ctid OPERATOR(pg_catalog.=) ANY (ARRAY(
				SELECT x.ctid FROM frameq.dispatch_queue x
				 WHERE x.ctid OPERATOR(pg_catalog.=) ANY (parked) FOR UPDATE SKIP LOCKED))
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

/* the worker's round: after a ledger rebuild, queue what was parked */
CREATE FUNCTION frameq._requeue_after_rebuild() RETURNS bigint
	AS 'MODULE_PATHNAME', 'frameq_requeue_after_rebuild' LANGUAGE C VOLATILE STRICT
	SET search_path = pg_catalog, pg_temp;
