/*
 * ---------------------------------------------------------------------
 * Locks that no other role can take, hold or stretch (doc/security.md).
 *
 * - The host lock is no longer a SQL advisory lock (any role that can
 *   connect could hold pg_advisory_lock(18001, <host id>) and stop the
 *   worker, and that host's attach and heartbeat).  It is taken in C with
 *   a lock tag no SQL function can name (src/frameq.h).
 * - Whatever waits for a lock another role could be holding waits at most
 *   frameq.lock_wait: attach, heartbeat and operator actions then fail
 *   with 55P03; the background worker skips the host for this round.
 * - owns() fences only for the proc's own render, proven by its run
 *   secret; for anyone else it is false and takes no lock.
 * - Hosts can be retired (retired_at): a retired host's name and token stop
 *   working, and its name may be registered again.
 * ---------------------------------------------------------------------
 */

/*
 * frameq._lock_host(host, wait_ms): take the host's lock for this
 * transaction, waiting at most wait_ms milliseconds (0: only try; NULL:
 * frameq.lock_wait).  True if held.  Not granted to anyone.
 */
CREATE FUNCTION frameq._lock_host(host int, wait_ms int) RETURNS boolean
	AS 'MODULE_PATHNAME', 'frameq_lock_host_sql' LANGUAGE C VOLATILE;
REVOKE ALL ON FUNCTION frameq._lock_host(int, int) FROM PUBLIC;

/*
 * Check a host's token and take the host's lock: the lock that reserve()
 * tries, the background worker's lease expiry takes, and attach() and
 * heartbeat() wait for (at most frameq.lock_wait).  It orders everything
 * that changes a host's lease or books onto it.  Lock order everywhere:
 * this lock, then proc rows, then the host row.  Returns the host row read
 * after locking.  The token is checked before the lock (a caller without
 * it never queues for the lock) and again after (it may have been rotated
 * while we waited).  Messages quote at most 64 characters of the name.
 */
CREATE OR REPLACE FUNCTION frameq._host_lock(host text, token text) RETURNS frameq.host
LANGUAGE plpgsql AS $$
DECLARE
	h frameq.host;
BEGIN
	/* tokens are 64 hex digits (src/frameq.h, FRAMEQ_MAX_TOKEN_BYTES): nothing much longer is hashed */
	IF pg_catalog.octet_length(token) > 256 THEN
		RAISE EXCEPTION 'token is too large: % bytes, at most 256', pg_catalog.octet_length(token)
			USING ERRCODE = 'program_limit_exceeded';
	END IF;
	PERFORM frameq._check_token(frameq._host_by_name(host), token, host);
	h := frameq._host_lock_by_name(host);
	PERFORM frameq._check_token(h, token, host);
	RETURN h;
END
$$;

/* the host of that name in the farm (not retired), or 42704 */
CREATE FUNCTION frameq._host_by_name(host text) RETURNS frameq.host
LANGUAGE plpgsql STABLE AS $$
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

/* 28P01 unless token is h's (a retired host has none) */
CREATE FUNCTION frameq._check_token(h frameq.host, token text, host text) RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
	IF token IS NULL OR h.retired_at IS NOT NULL
	   OR h.token_hash OPERATOR(pg_catalog.<>) pg_catalog.sha256(pg_catalog.convert_to(token, 'UTF8')) THEN
		RAISE EXCEPTION 'invalid token for host "%"', frameq._clip(host)
			USING ERRCODE = 'invalid_password';
	END IF;
END
$$;

/*
 * An operator names a host: lock it as above, without a token.  Returns
 * the host row read after locking; a host retired while we waited is no
 * longer there.
 */
CREATE OR REPLACE FUNCTION frameq._host_lock_by_name(host text) RETURNS frameq.host
LANGUAGE plpgsql AS $$
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
 * The lease period: lease_ttl * (1 + clock_drift) + lease_margin.  The
 * worker runs this as the bootstrap superuser: every operator is named
 * with its schema (besides the pinned search_path), so no operator another
 * role creates can be picked instead.
 */
CREATE OR REPLACE FUNCTION frameq.lease_period() RETURNS interval
LANGUAGE sql STABLE AS $$
	SELECT (pg_catalog.current_setting('frameq.lease_ttl')::pg_catalog.interval
			OPERATOR(pg_catalog.*)
			(1::pg_catalog.float8 OPERATOR(pg_catalog.+)
			 pg_catalog.current_setting('frameq.clock_drift')::pg_catalog.float8))
		   OPERATOR(pg_catalog.+)
		   pg_catalog.current_setting('frameq.lease_margin')::pg_catalog.interval
$$;

/* after a start or a clock jump: every current lease runs a full ttl from now */
CREATE OR REPLACE FUNCTION frameq._rearm_leases() RETURNS bigint
LANGUAGE sql AS $$
	WITH r AS (
		UPDATE frameq.host
		   SET lease_expires_at = pg_catalog.clock_timestamp() OPERATOR(pg_catalog.+) frameq._lease_ttl()
		 WHERE lease_expires_at IS NOT NULL RETURNING 1)
	SELECT pg_catalog.count(*) FROM r
$$;

/*
 * Hosts whose last renewal (or "since", the server's start or last clock
 * jump, if later) is more than a lease period old have lost their lease:
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
CREATE OR REPLACE FUNCTION frameq._expire_leases(since timestamptz, at timestamptz DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql AS $$
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
	p record;
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
			FOR p IN SELECT x.id, x.state, x.want_state FROM frameq.proc x
					  WHERE x.host OPERATOR(pg_catalog.=) h.id ORDER BY x.id LOOP
				PERFORM frameq._release(p.id, 'host_lost',
										CASE WHEN p.state OPERATOR(pg_catalog.=) 'killing'
											 THEN p.want_state ELSE 'waiting' END);
			END LOOP;
			UPDATE frameq.host x SET lease_expires_at = NULL,
				   epoch = x.epoch OPERATOR(pg_catalog.+) 1,
				   state = CASE WHEN x.state OPERATOR(pg_catalog.=) 'up' THEN 'down' ELSE x.state END,
				   down_reason = CASE WHEN x.state OPERATOR(pg_catalog.=) 'up'
									  THEN 'lease_lost' ELSE x.down_reason END
			 WHERE x.id OPERATOR(pg_catalog.=) h.id;
			n := n OPERATOR(pg_catalog.+) 1;
		EXCEPTION WHEN lock_not_available THEN
			RAISE LOG 'frameq worker: host % skipped this round: a row it needs is locked by another session (%)',
				candidate, SQLERRM;
		END;
	END LOOP;
	PERFORM pg_catalog.set_config('lock_timeout', saved_timeout, true);
	RETURN n;
END
$$;

/*
 * Announce every kill order not yet sent, or not confirmed since the last
 * send.  A proc row another session has locked (a completion in flight,
 * say) is left for the next round (SKIP LOCKED): the worker never waits
 * on a row lock here.
 */
CREATE OR REPLACE FUNCTION frameq._send_kills(resend_ms int) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
	p record;
	n bigint := 0;
BEGIN
	FOR p IN WITH due AS (
				UPDATE frameq.proc x SET kill_sent_at = pg_catalog.clock_timestamp()
				  FROM (SELECT y.id FROM frameq.proc y
						 WHERE y.state OPERATOR(pg_catalog.=) 'killing'
						   AND (y.kill_sent_at IS NULL
								OR y.kill_sent_at OPERATOR(pg_catalog.<=)
								   (pg_catalog.clock_timestamp() OPERATOR(pg_catalog.-)
									pg_catalog.make_interval(secs => resend_ms OPERATOR(pg_catalog./) 1000.0)))
						   FOR NO KEY UPDATE SKIP LOCKED) d
				 WHERE x.id OPERATOR(pg_catalog.=) d.id
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
 * ---------------------------------------------------------------------
 * Retired hosts.  A host is never deleted (runs refer to it); retiring it
 * takes its name and token out of the farm.  Names are unique among the
 * hosts in the farm only.
 * ---------------------------------------------------------------------
 */
ALTER TABLE frameq.host ADD COLUMN retired_at timestamptz;
DO $$
DECLARE
	c name;
BEGIN
	/* the UNIQUE (name) of 0.1.0, whatever it was named */
	FOR c IN SELECT con.conname FROM pg_catalog.pg_constraint con
			  WHERE con.conrelid = 'frameq.host'::pg_catalog.regclass AND con.contype = 'u'
				AND con.conkey = ARRAY[(SELECT a.attnum FROM pg_catalog.pg_attribute a
										 WHERE a.attrelid = 'frameq.host'::pg_catalog.regclass
										   AND a.attname = 'name')]::pg_catalog.int2[] LOOP
		EXECUTE pg_catalog.format('ALTER TABLE frameq.host DROP CONSTRAINT %I', c);
	END LOOP;
END
$$;
CREATE UNIQUE INDEX host_name_in_farm ON frameq.host (name) WHERE retired_at IS NULL;

/*
 * ---------------------------------------------------------------------
 * Run secrets.  Each proc's render gets a secret (FRAMEQ_RUN_SECRET in its
 * environment, run_secret in the booking) that proves to owns() that the
 * caller is that render.  It is derived, not stored: the first 32 hex
 * digits of sha256(key || int8send(proc)), with key 32 random bytes that
 * only the extension's owner can read.  src/booking.c computes the same.
 * ---------------------------------------------------------------------
 */
CREATE TABLE frameq.run_secret_key (
	one			bool PRIMARY KEY DEFAULT true CHECK (one),
	key			bytea NOT NULL CHECK (pg_catalog.length(key) OPERATOR(pg_catalog.>=) 32)
);
REVOKE ALL ON frameq.run_secret_key FROM PUBLIC;
/* two host-token draws (32 strong random bytes each), hashed down to 32 bytes */
INSERT INTO frameq.run_secret_key (key)
	SELECT pg_catalog.sha256(pg_catalog.decode(frameq._random_token() OPERATOR(pg_catalog.||)
											   frameq._random_token(), 'hex'));

ALTER TYPE frameq.booking ADD ATTRIBUTE run_secret text;

CREATE FUNCTION frameq._run_secret(proc bigint) RETURNS text
LANGUAGE sql STABLE STRICT AS $$
	SELECT pg_catalog.left(pg_catalog.encode(pg_catalog.sha256(
			   k.key OPERATOR(pg_catalog.||) pg_catalog.int8send(_run_secret.proc)), 'hex'), 32)
	  FROM frameq.run_secret_key k
$$;
REVOKE ALL ON FUNCTION frameq._run_secret(bigint) FROM PUBLIC;

/*
 * True iff the proc is live, in state running, and secret is its run
 * secret: the caller is the proc's own render.  Then it is a fence, not a
 * look: the KEY SHARE lock it takes on the proc row makes any release (a
 * DELETE of the row) wait until the render's publishing transaction has
 * ended, so the frame cannot be booked elsewhere between the check and the
 * publish.  A kill order (an UPDATE that leaves the key alone) does not
 * wait for it.  For anyone without the secret it is false and locks
 * nothing, so an idle reader cannot hold up a release.  (The secrets are
 * compared with a plain "=": the time it takes leaks nothing that helps,
 * as a guess costs a round trip and the secret has 128 bits.)
 */
DROP FUNCTION frameq.owns(bigint);
CREATE FUNCTION frameq.owns(proc bigint, secret text DEFAULT NULL) RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
	IF pg_catalog.length(secret) > 64 THEN
		RAISE EXCEPTION 'secret is too large: % characters, at most 64', pg_catalog.length(secret)
			USING ERRCODE = 'program_limit_exceeded';
	END IF;
	IF proc IS NULL OR secret IS NULL
	   OR secret OPERATOR(pg_catalog.<>) frameq._run_secret(proc) THEN
		RETURN false;
	END IF;
	RETURN EXISTS (SELECT 1 FROM frameq.proc p
					WHERE p.id OPERATOR(pg_catalog.=) owns.proc
					  AND p.state OPERATOR(pg_catalog.=) 'running'
					  FOR KEY SHARE);
END
$$;
ALTER FUNCTION frameq.owns(bigint, text) SECURITY DEFINER;
REVOKE ALL ON FUNCTION frameq.owns(bigint, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION frameq.owns(bigint, text) TO frameq_agent, frameq_reader;
