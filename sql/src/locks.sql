
/*
 * ---------------------------------------------------------------------
 * locks.sql: the host lock and a host's checks, and locks no other role
 * can take, hold or stretch (doc/security.md).
 *
 * - A host's token, and its epoch and lease, are each checked by one piece
 *   of code, in C (src/lease.c), for the C entry points (reserve,
 *   complete) and, through _authenticate() and _check_lease(), for the SQL
 *   ones (attach, heartbeat).
 * - The host lock is taken in C with a lock tag no SQL function can name
 *   (src/frameq.h), not as a SQL advisory lock, which any role that can
 *   connect could hold to stop the worker and that host's attach and
 *   heartbeat.
 * - Whatever waits for a lock another role could be holding waits at most
 *   frameq.lock_wait: attach, heartbeat and operator actions then fail
 *   with 55P03; the background worker skips the host for this round.
 * - A retired host (retired_at) is out of the farm: its name and token
 *   stop working, and its name may be registered again.
 * ---------------------------------------------------------------------
 */

/*
 * frameq._lock_host(host, wait_ms): take the host's lock for this
 * transaction, waiting at most wait_ms milliseconds (0: only try; NULL:
 * frameq.lock_wait).  True if held.  Not granted to anyone.
 */
CREATE FUNCTION frameq._lock_host(host int, wait_ms int) RETURNS boolean
	AS 'MODULE_PATHNAME', 'frameq_lock_host_sql' LANGUAGE C VOLATILE
	SET search_path = pg_catalog, pg_temp;

/*
 * A job's dispatch lock (src/frameq.h): _hold_job tries it in SHARE for
 * this transaction (false if an EXCLUSIVE holder or waiter has it: fall
 * back to row locks); _claim_jobs tries it in EXCLUSIVE for each job and
 * returns those taken; _lock_job takes it in EXCLUSIVE waiting at most
 * frameq.lock_wait (then 55P03).  Not granted to anyone.
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

/* the host of that name in the farm (not retired), or 42704 */
CREATE FUNCTION frameq._host_by_name(host text) RETURNS frameq.host
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	h frameq.host;
BEGIN
	SELECT * INTO h FROM frameq.host x
	 WHERE x.name OPERATOR(pg_catalog.=) frameq._not_null(_host_by_name.host, 'host')
	   AND x.retired_at IS NULL;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'host "%" is not registered', frameq._clip(host)
			USING ERRCODE = 'undefined_object',
				  HINT = 'Register it with frameq.register_host().';
	END IF;
	RETURN h;
END
$$;

/* 28P01 unless token is the host's (src/lease.c, frameq_host_authenticate); the host's id */
CREATE FUNCTION frameq._authenticate(host text, token text) RETURNS int
	AS 'MODULE_PATHNAME', 'frameq_authenticate' LANGUAGE C VOLATILE
	SET search_path = pg_catalog, pg_temp;

/*
 * heartbeat's fencing, the same as reserve()'s (src/lease.c): FQ001 for an
 * epoch that is not the host's, FQ002 for a lease that is over
 */
CREATE FUNCTION frameq._check_lease(host_id int, host text, epoch bigint) RETURNS void
	AS 'MODULE_PATHNAME', 'frameq_check_lease' LANGUAGE C VOLATILE
	SET search_path = pg_catalog, pg_temp;

/*
 * Lock a host for its agent: check its token, take the host's lock (at
 * most frameq.lock_wait), then check the token again, since it may have
 * been rotated, or the host retired, while we waited.  The lock is the one
 * that reserve() tries, the background worker's lease expiry takes, and
 * attach() and heartbeat() wait for: it orders everything that changes a
 * host's lease or books onto it.  Lock order everywhere: this lock, then
 * proc rows, then the host row (doc/design.md, Lock order).  Returns the
 * host row read after locking.
 */
CREATE FUNCTION frameq._host_lock(host text, token text) RETURNS frameq.host
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	h frameq.host;
BEGIN
	PERFORM frameq._authenticate(host, token);
	h := frameq._host_lock_by_name(host);
	PERFORM frameq._authenticate(host, token);
	RETURN h;
END
$$;

/*
 * An operator names a host: lock it as above, without a token.  Returns
 * the host row read after locking; a host retired while we waited is no
 * longer there.
 */
CREATE FUNCTION frameq._host_lock_by_name(host text) RETURNS frameq.host
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	h frameq.host := frameq._host_by_name(host);
BEGIN
	IF NOT frameq._lock_host(h.id, NULL) THEN
		RAISE EXCEPTION 'host "%" is locked by another session', frameq._clip(host)
			USING ERRCODE = 'lock_not_available',
				  DETAIL = pg_catalog.format('frameq waited frameq.lock_wait (%s) for it.',
											 pg_catalog.current_setting('frameq.lock_wait')),
				  HINT = 'Retry; it is held while the host books or renews its lease.';
	END IF;
	SELECT * INTO h FROM frameq.host x WHERE x.id OPERATOR(pg_catalog.=) h.id;
	IF h.retired_at IS NOT NULL THEN
		RAISE EXCEPTION 'host "%" is not registered', frameq._clip(host)
			USING ERRCODE = 'undefined_object';
	END IF;
	RETURN h;
END
$$;

/*
 * For the rest of the calling function (which must carry a SET lock_timeout
 * clause, so that this ends with it): wait at most frameq.lock_wait for any
 * lock, then fail with 55P03.  For the agent's calls, whose waits a role
 * outside frameq_admin could otherwise make unbounded.
 */
CREATE FUNCTION frameq._bound_lock_waits() RETURNS void
LANGUAGE sql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
	SELECT pg_catalog.set_config('lock_timeout',
		coalesce(pg_catalog.current_setting('frameq.lock_wait', true), '1s'), true)
$$;
