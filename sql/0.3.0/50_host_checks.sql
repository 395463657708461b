/*
 * A host's token, and its epoch and lease, are each checked by one piece
 * of code, in C (src/lease.c).
 *
 * The token: frameq_host_authenticate, in C
 * (frameq_host_authenticate, src/lease.c), for the C entry points
 * (reserve, complete) and, through frameq._authenticate(), for the SQL
 * ones (attach, heartbeat, via _host_lock).  0.2.0 had a second check in
 * plpgsql, _check_token, with its own size bound.
 */
CREATE FUNCTION frameq._authenticate(host text, token text) RETURNS int
	AS 'MODULE_PATHNAME', 'frameq_authenticate' LANGUAGE C VOLATILE
	SET search_path = pg_catalog, pg_temp;

/*
 * Lock a host for its agent: check its token, take its lock (at most
 * frameq.lock_wait), then check the token again, since it may have been
 * rotated, or the host retired, while we waited.  Returns the host row
 * read after locking.
 */
CREATE OR REPLACE FUNCTION frameq._host_lock(host text, token text) RETURNS frameq.host
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

DROP FUNCTION frameq._check_token(frameq.host, text, text);

/*
 * The epoch and lease: frameq_host_check_epoch, for reserve() and, through
 * frameq._check_lease(), for heartbeat.  0.2.0's heartbeat had its own
 * copy in plpgsql.
 */
CREATE FUNCTION frameq._check_lease(host_id int, host text, epoch bigint) RETURNS void
	AS 'MODULE_PATHNAME', 'frameq_check_lease' LANGUAGE C VOLATILE
	SET search_path = pg_catalog, pg_temp;
