
/*
 * ---------------------------------------------------------------------
 * procs.sql: a proc's life, in C (src/release.c, src/ledger.c).
 *
 * Inserting procs charges the caps ledger, takes the host's free capacity
 * and opens the run records; deleting a proc is a release.  The proc
 * table's triggers do all of it, so no path can book or release while
 * forgetting a part.  Also here: the ledger's SQL face, releasing procs
 * one by one or a host's all at once, the guards that keep the frames
 * and hosts that procs and run records name, and those that keep the jobs
 * and layers that frames name.
 * ---------------------------------------------------------------------
 */

/* 32 strong random bytes as 64 hex digits: host tokens, the run secret key */
CREATE FUNCTION frameq._random_token() RETURNS text
	AS 'MODULE_PATHNAME', 'frameq_random_token' LANGUAGE C VOLATILE STRICT
	SET search_path = pg_catalog, pg_temp;

/* the shared-memory ledger, one row per capped entity with live procs */
CREATE FUNCTION frameq.ledger(OUT kind text, OUT id bigint, OUT id2 bigint,
							  OUT used_cc int, OUT used_gpus int, OUT running int)
	RETURNS SETOF record
	AS 'MODULE_PATHNAME', 'frameq_ledger' LANGUAGE C VOLATILE STRICT
	SECURITY DEFINER SET search_path = pg_catalog, pg_temp;

/* this session's releases not yet applied to the ledger (they apply at commit) */
CREATE FUNCTION frameq._ledger_pending(OUT kind text, OUT id bigint, OUT id2 bigint,
									   OUT used_cc int, OUT used_gpus int, OUT running int)
	RETURNS SETOF record
	AS 'MODULE_PATHNAME', 'frameq_ledger_pending' LANGUAGE C VOLATILE STRICT
	SET search_path = pg_catalog, pg_temp;

/* forget the ledger and the dispatch hints: the next booking rebuilds the ledger */
CREATE FUNCTION frameq._ledger_reset() RETURNS void
	AS 'MODULE_PATHNAME', 'frameq_ledger_reset' LANGUAGE C VOLATILE STRICT
	SET search_path = pg_catalog, pg_temp;

/*
 * Rebuild the ledger now if it is not valid; returns true if it was
 * rebuilt.  Every SQL path that writes procs calls it before its first
 * statement on frameq.proc: a rebuild waits for every transaction that
 * holds that table's RowExclusiveLock, so one started from the proc
 * trigger, inside such a statement, holds that lock itself, and two of
 * them wait for each other (a deadlock, seen when the worker and an
 * attach both wrote procs right after CREATE EXTENSION).
 */
CREATE FUNCTION frameq._ledger_ensure() RETURNS bool
	AS 'MODULE_PATHNAME', 'frameq_ledger_ensure' LANGUAGE C VOLATILE STRICT
	SET search_path = pg_catalog, pg_temp;

/* a fresh install: forget what a dropped copy left in shared memory */
SELECT frameq._ledger_reset();

/* for SQL paths that end frames directly: finish the job if none of its frames is live */
CREATE FUNCTION frameq._finish_job_if_done(job bigint) RETURNS void
	AS 'MODULE_PATHNAME', 'frameq_finish_job_if_done' LANGUAGE C VOLATILE STRICT
	SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION frameq._proc_before() RETURNS trigger
	AS 'MODULE_PATHNAME', 'frameq_proc_before' LANGUAGE C
	SET search_path = pg_catalog, pg_temp;
CREATE FUNCTION frameq._proc_after_insert() RETURNS trigger
	AS 'MODULE_PATHNAME', 'frameq_proc_after_insert' LANGUAGE C
	SET search_path = pg_catalog, pg_temp;
CREATE FUNCTION frameq._proc_after_delete() RETURNS trigger
	AS 'MODULE_PATHNAME', 'frameq_proc_after_delete' LANGUAGE C
	SET search_path = pg_catalog, pg_temp;
CREATE FUNCTION frameq._proc_guard_update() RETURNS trigger
	AS 'MODULE_PATHNAME', 'frameq_proc_guard_update' LANGUAGE C
	SET search_path = pg_catalog, pg_temp;
CREATE FUNCTION frameq._proc_no_truncate() RETURNS trigger
	AS 'MODULE_PATHNAME', 'frameq_proc_no_truncate' LANGUAGE C
	SET search_path = pg_catalog, pg_temp;

/*
 * Bookings, releases and kill orders (UPDATEs of procs) all make sure of
 * the ledger first: a rebuild needs every proc writer out of its way, so
 * a writer left open while the ledger was still invalid after a start
 * would hold up every booking and release (src/release.c, proc_before).
 */
CREATE TRIGGER proc_before BEFORE INSERT OR UPDATE OR DELETE ON frameq.proc
	FOR EACH STATEMENT EXECUTE FUNCTION frameq._proc_before();
CREATE TRIGGER proc_after_insert AFTER INSERT ON frameq.proc
	REFERENCING NEW TABLE AS new_procs
	FOR EACH STATEMENT EXECUTE FUNCTION frameq._proc_after_insert();
CREATE TRIGGER proc_after_delete AFTER DELETE ON frameq.proc
	FOR EACH ROW EXECUTE FUNCTION frameq._proc_after_delete();
CREATE TRIGGER proc_guard_update BEFORE UPDATE ON frameq.proc
	FOR EACH ROW EXECUTE FUNCTION frameq._proc_guard_update();
CREATE TRIGGER proc_no_truncate BEFORE TRUNCATE ON frameq.proc
	FOR EACH STATEMENT EXECUTE FUNCTION frameq._proc_no_truncate();

/*
 * What foreign keys from proc and run would guard (see proc): a frame or a
 * host named by a proc or a run record is neither deleted, nor given
 * another id, nor truncated away.  The argument is the referencing column.
 * Only deletes and id changes fire these, never the booking path.
 */
CREATE FUNCTION frameq._keep_referenced() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	col text := TG_ARGV[0];
	used bool;
BEGIN
	IF TG_OP = 'TRUNCATE' THEN
		RAISE EXCEPTION 'cannot truncate frameq.%: procs and run records name its rows', col
			USING ERRCODE = 'feature_not_supported';
	END IF;
	IF TG_OP = 'UPDATE' AND OLD.id = NEW.id THEN
		RETURN NEW;
	END IF;
	EXECUTE format('SELECT EXISTS (SELECT 1 FROM frameq.proc WHERE %1$I = $1)
	                    OR EXISTS (SELECT 1 FROM frameq.run WHERE %1$I = $1)', col)
		INTO used USING OLD.id;
	IF used THEN
		RAISE EXCEPTION '% % is named by a proc or a run record', col, OLD.id
			USING ERRCODE = 'foreign_key_violation',
				  HINT = 'frameq keeps every attempt''s record; a frame or host that ran work stays.';
	END IF;
	RETURN CASE TG_OP WHEN 'DELETE' THEN OLD ELSE NEW END;
END
$$;

CREATE TRIGGER frame_keep_referenced BEFORE DELETE OR UPDATE OF id ON frameq.frame
	FOR EACH ROW EXECUTE FUNCTION frameq._keep_referenced('frame');
CREATE TRIGGER frame_keep_referenced_truncate BEFORE TRUNCATE ON frameq.frame
	FOR EACH STATEMENT EXECUTE FUNCTION frameq._keep_referenced('frame');
CREATE TRIGGER host_keep_referenced BEFORE DELETE OR UPDATE OF id ON frameq.host
	FOR EACH ROW EXECUTE FUNCTION frameq._keep_referenced('host');
CREATE TRIGGER host_keep_referenced_truncate BEFORE TRUNCATE ON frameq.host
	FOR EACH STATEMENT EXECUTE FUNCTION frameq._keep_referenced('host');

/*
 * ---------------------------------------------------------------------
 * What frame's keys would guard.  frame has no foreign keys to job and
 * layer (schema.sql): two key checks per inserted row, a query and a row
 * lock each, were more than half of a submit's time (doc/benchmarks.md,
 * item 11), and a submit inserts up to a million frames.  What they
 * guaranteed is kept here, per statement on the insert path:
 *   - every frame names a layer that exists and belongs to the frame's
 *     job (so its job exists too): one check per INSERT statement, over
 *     the (job, layer) pairs of its rows (the insert trigger, in
 *     dispatch.sql), which locks each layer as a key would (FOR KEY
 *     SHARE) until the transaction ends;
 *   - a frame's job and layer never change;
 *   - a layer that frames name is neither deleted, nor given another id,
 *     nor moved to another job.  Its job then cannot go either: layer's own
 *     key (layer.job) keeps it, and every frame of a job has a layer of it;
 *   - neither job nor layer is truncated while any frame exists.
 * The delete check runs once per statement, after it (a transition
 * table): a statement or transaction that deletes a layer's frames first
 * may delete the layer, and then the job.  frameq itself never deletes
 * one.  The checks on layer look under the latest snapshot, as a key's
 * do, so a change that waited for an insert of frames sees them in every
 * isolation level (src/keys.c).
 * ---------------------------------------------------------------------
 */

/* one of these layers that frames name (NULL: any frame's), by the latest committed state */
CREATE FUNCTION frameq._layer_framed_latest(layers bigint[]) RETURNS bigint
	AS 'MODULE_PATHNAME', 'frameq_layer_framed_latest' LANGUAGE C VOLATILE
	SET search_path = pg_catalog, pg_temp;

/*
 * An INSERT's frames, as their (job, layer) pairs (the insert trigger,
 * _frame_inserted in dispatch.sql, draws them in the same pass over the
 * statement's rows that finds the layers to queue): each layer exists
 * and is of that job.
 */
CREATE FUNCTION frameq._frame_keys_check(jobs bigint[], layers bigint[]) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	bad record;
BEGIN
	/* what a key takes: no delete, nor change of id or job, until we end */
	PERFORM 1 FROM frameq.layer l
	 WHERE l.id OPERATOR(pg_catalog.=) ANY (layers)
	 ORDER BY l.id FOR KEY SHARE OF l;
	SELECT p.job, p.layer, l.job AS owner INTO bad
	  FROM unnest(jobs, layers) p(job, layer)
	  LEFT JOIN frameq.layer l ON l.id OPERATOR(pg_catalog.=) p.layer
	 WHERE l.job IS DISTINCT FROM p.job
	 LIMIT 1;
	IF NOT FOUND THEN
		RETURN;
	ELSIF bad.owner IS NULL THEN
		RAISE EXCEPTION 'a frame names layer %, which does not exist', bad.layer
			USING ERRCODE = 'foreign_key_violation';
	ELSIF NOT EXISTS (SELECT 1 FROM frameq.job j WHERE j.id OPERATOR(pg_catalog.=) bad.job) THEN
		RAISE EXCEPTION 'a frame names job %, which does not exist', bad.job
			USING ERRCODE = 'foreign_key_violation';
	END IF;
	RAISE EXCEPTION 'a frame names job % and layer %, which is of job %', bad.job, bad.layer, bad.owner
		USING ERRCODE = 'foreign_key_violation';
END
$$;

/* a frame's job and layer are its for good; fires only on a change */
CREATE FUNCTION frameq._frame_keys_frozen() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
	RAISE EXCEPTION 'column "%" of a frame cannot be changed',
		CASE WHEN OLD.job IS DISTINCT FROM NEW.job THEN 'job' ELSE 'layer' END
		USING ERRCODE = 'integrity_constraint_violation';
END
$$;
CREATE TRIGGER frame_keys_frozen BEFORE UPDATE OF job, layer ON frameq.frame
	FOR EACH ROW WHEN (OLD.job IS DISTINCT FROM NEW.job OR OLD.layer IS DISTINCT FROM NEW.layer)
	EXECUTE FUNCTION frameq._frame_keys_frozen();

/* a layer that frames name keeps its id and its job; fires only on a change */
CREATE FUNCTION frameq._layer_keep_framed() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
	IF frameq._layer_framed_latest(ARRAY[OLD.id]) IS NOT NULL THEN
		RAISE EXCEPTION 'layer % is named by frames', OLD.id
			USING ERRCODE = 'foreign_key_violation',
				  DETAIL = 'Its id and its job cannot change while frames name it.';
	END IF;
	RETURN NEW;
END
$$;
CREATE TRIGGER layer_keep_framed BEFORE UPDATE OF id, job ON frameq.layer
	FOR EACH ROW WHEN (OLD.id <> NEW.id OR OLD.job <> NEW.job)
	EXECUTE FUNCTION frameq._layer_keep_framed();

/* deleted layers that frames still name, once the statement is done */
CREATE FUNCTION frameq._layer_deleted_framed() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	named bigint;
BEGIN
	named := frameq._layer_framed_latest(ARRAY(SELECT o.id FROM old_layers o));
	IF named IS NOT NULL THEN
		RAISE EXCEPTION 'layer % is named by frames', named
			USING ERRCODE = 'foreign_key_violation',
				  HINT = 'Delete its frames first, in the same statement or before it.';
	END IF;
	RETURN NULL;
END
$$;
CREATE TRIGGER layer_deleted_framed AFTER DELETE ON frameq.layer
	REFERENCING OLD TABLE AS old_layers
	FOR EACH STATEMENT EXECUTE FUNCTION frameq._layer_deleted_framed();

/* job and layer: not truncated while frames exist (a cascade truncates layer) */
CREATE FUNCTION frameq._keep_framed_truncate() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
	IF frameq._layer_framed_latest(NULL) IS NOT NULL THEN
		RAISE EXCEPTION 'cannot truncate frameq.%: frames name its rows', TG_TABLE_NAME
			USING ERRCODE = 'feature_not_supported';
	END IF;
	RETURN NULL;
END
$$;
CREATE TRIGGER job_keep_framed_truncate BEFORE TRUNCATE ON frameq.job
	FOR EACH STATEMENT EXECUTE FUNCTION frameq._keep_framed_truncate();
CREATE TRIGGER layer_keep_framed_truncate BEFORE TRUNCATE ON frameq.layer
	FOR EACH STATEMENT EXECUTE FUNCTION frameq._keep_framed_truncate();

/*
 * Release one proc: delete it so the triggers free everything it holds.
 * reason is the run record's reason; new_state the frame's state
 * afterwards, NULL for the proc's default (src/release.c,
 * default_end_state: its kill order's wanted state, or waiting).
 */
CREATE FUNCTION frameq._release(proc bigint, reason text, new_state text,
								count_retry bool DEFAULT false)
	RETURNS bool
	AS 'MODULE_PATHNAME', 'frameq_release_proc' LANGUAGE C VOLATILE
	SET search_path = pg_catalog, pg_temp;

/*
 * The most memory a host that could run a task of this layer has: a host
 * of the farm (not retired; up or not) in an allocation its job's show is
 * subscribed to, with the layer's tags (any of them) and at least its
 * minimum cores, its GPUs and GPU memory.  NULL if there is none.  The cap
 * of an OOM retry's raise (complete(), src/release.c); read only when a
 * render is reported killed for memory, so reading every host is fine.
 */
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

/*
 * Where a task goes when it fails and the failure counts a retry: back to
 * waiting while retries + 1 <= its job's max_retries, else dead (eaten if
 * the job has auto_eat).  The rule of complete() (src/release.c), for the
 * kill orders frameq itself gives a misbehaving render (a timeout, a
 * stall), which want that state.
 */
CREATE FUNCTION frameq._failed_state(frame bigint) RETURNS text
	AS 'MODULE_PATHNAME', 'frameq_failed_state' LANGUAGE C STABLE STRICT
	SET search_path = pg_catalog, pg_temp;

/*
 * ---------------------------------------------------------------------
 * Releasing a host's procs: one function, one lock order.
 *
 * attach (after a reboot), heartbeat (confirmed kills, lost bookings),
 * confirm_host_dead and the worker's lease expiry release procs of one
 * host.  Every release updates the host row (its room back), so a loop of
 * _release() calls would hold the host row from the second proc on while
 * it locked the next proc, while complete() of that proc, by the host's
 * agent, locks its proc first and the host row second: the two could
 * deadlock.  _release_procs locks every proc it is given, in id order,
 * before it releases any, so all these paths take proc rows before the
 * host row, as complete() does (doc/design.md, Lock order).  The state
 * each frame goes to is the release's default, which _release applies
 * when it is given none.
 * ---------------------------------------------------------------------
 */

/*
 * Release these procs (those that still exist once locked), each with the
 * reason given, or with 'killed' for a proc being killed and
 * 'lost_by_agent' otherwise if reason is NULL (heartbeat's two kinds).
 * Returns how many it released.
 */
CREATE FUNCTION frameq._release_procs(procs bigint[], reason text) RETURNS int
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	p record;
	n int := 0;
BEGIN
	PERFORM 1 FROM frameq.proc x WHERE x.id OPERATOR(pg_catalog.=) ANY (procs)
	 ORDER BY x.id FOR NO KEY UPDATE OF x;
	FOR p IN SELECT x.id, x.state FROM frameq.proc x
			  WHERE x.id OPERATOR(pg_catalog.=) ANY (procs) ORDER BY x.id LOOP
		PERFORM frameq._release(p.id,
								coalesce(reason, CASE WHEN p.state OPERATOR(pg_catalog.=) 'killing'
													  THEN 'killed' ELSE 'lost_by_agent' END),
								NULL);
		n := n OPERATOR(pg_catalog.+) 1;
	END LOOP;
	RETURN n;
END
$$;

/*
 * ---------------------------------------------------------------------
 * A job's limits on failure (src/limits.c has the whole argument):
 * host_failure_limit blocks a host that failed the job's runs that many
 * times, max_dead_frames pauses the job once that many of its tasks are
 * dead.
 * ---------------------------------------------------------------------
 */

/* failed runs on one host before it is blocked, for a job that does not say */
CREATE FUNCTION frameq._default_host_failure_limit() RETURNS int
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$ SELECT 3 $$;

/*
 * The one writer of job.host_blocks: whether some host is blocked for the
 * job, read afresh.  The caller holds the job's row, taken after the
 * failure counts it changed, so that every block committed before is
 * seen, and one in flight marks the job itself when it gets the row.
 */
CREATE FUNCTION frameq._job_blocks_mark(job bigint) RETURNS void
LANGUAGE sql SET search_path = pg_catalog, pg_temp AS $$
	UPDATE frameq.job j SET host_blocks = b.blocked
	  FROM (SELECT EXISTS (SELECT 1 FROM frameq.job_host_failure f
							WHERE f.job = _job_blocks_mark.job AND f.blocked_at IS NOT NULL)
				   AS blocked) b
	 WHERE j.id = _job_blocks_mark.job AND j.host_blocks IS DISTINCT FROM b.blocked
$$;

/* a task became dead: its job pauses if its dead tasks reach max_dead_frames */
CREATE FUNCTION frameq._task_died() RETURNS trigger
	AS 'MODULE_PATHNAME', 'frameq_task_died' LANGUAGE C
	SET search_path = pg_catalog, pg_temp;
CREATE TRIGGER frame_task_died AFTER UPDATE OF state ON frameq.frame
	FOR EACH ROW WHEN (NEW.state = 'dead' AND OLD.state IS DISTINCT FROM 'dead')
	EXECUTE FUNCTION frameq._task_died();

/* the same for a death the worker was left (job_limit_check); true if the job paused */
CREATE FUNCTION frameq._pause_for_dead(job bigint) RETURNS bool
	AS 'MODULE_PATHNAME', 'frameq_pause_for_dead' LANGUAGE C VOLATILE STRICT
	SET search_path = pg_catalog, pg_temp;
