
/*
 * ---------------------------------------------------------------------
 * agent.sql: what a host agent calls (frameq_agent): attach and heartbeat
 * (its lease), reserve and complete (bookings, in C: src/booking.c and
 * src/release.c), and owns(), which a render calls to fence its output.
 * Each checks the host's token and holds the host lock (locks.sql).
 * ---------------------------------------------------------------------
 */

/*
 * A host agent starts: a new lease epoch.  Whatever the host ran before
 * is released if the machine rebooted (boot_id changed), else ordered
 * killed.  Returns the kill orders, the lease ttl and the channel on
 * which the worker announces this host's kill orders.  attach and
 * heartbeat carry SET lock_timeout so that _bound_lock_waits() (locks.sql)
 * bounds their waits for the rest of the call only.
 */
CREATE FUNCTION frameq.attach(host text, token text, boot_id text,
							  OUT epoch bigint, OUT lease_ttl interval, OUT kill bigint[],
							  OUT host_id int, OUT channel text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp SET lock_timeout = 0 AS $$
#variable_conflict use_column
DECLARE
	h frameq.host := frameq._host_lock(host, token);
	granted_at timestamptz;
BEGIN
	/* a reboot's releases and the kill orders wait at most frameq.lock_wait for others' locks */
	PERFORM frameq._bound_lock_waits();
	/* before the first write of procs: see _ledger_ensure */
	PERFORM frameq._ledger_ensure();
	PERFORM frameq._not_null(boot_id, 'boot_id');
	PERFORM frameq._bounded(boot_id, 'boot_id', 200);
	IF boot_id = '' THEN
		RAISE EXCEPTION 'boot_id must not be empty' USING ERRCODE = 'invalid_parameter_value';
	END IF;
	IF h.boot_id IS DISTINCT FROM boot_id AND h.boot_id IS NOT NULL THEN
		/* the machine rebooted: nothing of its earlier life can still run */
		PERFORM frameq._release_procs(ARRAY(SELECT x.id FROM frameq.proc x WHERE x.host = h.id),
									  'host_rebooted');
	ELSE
		/*
		 * same boot: the earlier agent's renders may live on; order them
		 * killed, locking them first in id order, as a complete_many() of
		 * the earlier agent does (it does not take the host lock)
		 */
		PERFORM 1 FROM frameq.proc x WHERE x.host = h.id AND x.state = 'running'
		 ORDER BY x.id FOR NO KEY UPDATE;
		UPDATE frameq.proc x SET state = 'killing', kill_reason = 'agent re-attached',
			   kill_at = clock_timestamp(), want_state = 'waiting'
		 WHERE x.host = h.id AND x.state = 'running';
	END IF;
	lease_ttl := frameq._lease_ttl();
	granted_at := clock_timestamp();
	UPDATE frameq.host x SET epoch = h.epoch + 1, boot_id = attach.boot_id,
		   lease_expires_at = granted_at + attach.lease_ttl,
		   lease_granted = frameq._lease_grant(x.last_renewal_at, x.lease_granted,
											   attach.lease_ttl, granted_at),
		   last_renewal_at = granted_at,
		   /* a host down only because it lost its lease is back */
		   state = CASE WHEN x.down_reason = 'lease_lost' THEN 'up' ELSE x.state END,
		   down_reason = CASE WHEN x.down_reason = 'lease_lost' THEN NULL ELSE x.down_reason END
	 WHERE x.id = h.id;
	epoch := h.epoch + 1;
	kill := ARRAY(SELECT x.id FROM frameq.proc x WHERE x.host = h.id ORDER BY x.id);
	/* where the worker announces this host's kill orders: LISTEN on it */
	host_id := h.id;
	channel := 'frameq_host_' || h.id;
END
$$;

/*
 * The well-formed entries of a heartbeat's report (heartbeat, below), one
 * per proc (the last of several), each an object with an integer "proc"
 * and optional "idle" (seconds since the render's last output, 0 or more),
 * "last_line" (a string; its first 200 characters are kept) and
 * "progress" (0 to 100); null or absent means not reported.  Anything
 * else in an entry (a field of another type, a value out of range, an
 * unknown field) makes the entry malformed: it is left out.  A report that
 * is not an array, or has more than 10,000 entries or 4 MB, gives nothing.
 * Never raises an error for what the report holds.
 */
CREATE FUNCTION frameq._report_entries(report jsonb)
RETURNS TABLE (proc bigint, idle float8, last_line text, progress real)
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
	SELECT DISTINCT ON (v.proc) v.proc, v.idle, v.last_line, v.progress
	  FROM pg_catalog.jsonb_array_elements(
			   CASE WHEN pg_catalog.jsonb_typeof(report) OPERATOR(pg_catalog.=) 'array'
					 AND pg_catalog.jsonb_array_length(report) OPERATOR(pg_catalog.<=) 10000
					 AND pg_catalog.pg_column_size(report) OPERATOR(pg_catalog.<=) 4194304
				   THEN report ELSE '[]' END) WITH ORDINALITY AS r(e, n)
	 CROSS JOIN LATERAL (
			SELECT pg_catalog.jsonb_typeof(r.e -> 'proc') AS proc,
				   coalesce(pg_catalog.jsonb_typeof(r.e -> 'idle'), 'null') AS idle,
				   coalesce(pg_catalog.jsonb_typeof(r.e -> 'last_line'), 'null') AS last_line,
				   coalesce(pg_catalog.jsonb_typeof(r.e -> 'progress'), 'null') AS progress
			 WHERE pg_catalog.jsonb_typeof(r.e) OPERATOR(pg_catalog.=) 'object') t
	 CROSS JOIN LATERAL (
			/* each value, NULL if absent, null or out of its range */
			SELECT CASE WHEN t.proc OPERATOR(pg_catalog.=) 'number'
						 AND (r.e ->> 'proc')::numeric BETWEEN 1 AND 9223372036854775807
						 AND (r.e ->> 'proc')::numeric OPERATOR(pg_catalog.=)
							 pg_catalog.trunc((r.e ->> 'proc')::numeric)
					   THEN (r.e ->> 'proc')::bigint END AS proc,
				   CASE WHEN t.idle OPERATOR(pg_catalog.=) 'number'
						 AND (r.e ->> 'idle')::numeric BETWEEN 0 AND 1000000000
					   THEN (r.e ->> 'idle')::float8 END AS idle,
				   CASE WHEN t.last_line OPERATOR(pg_catalog.=) 'string'
					   THEN pg_catalog.left(r.e ->> 'last_line', 200) END AS last_line,
				   CASE WHEN t.progress OPERATOR(pg_catalog.=) 'number'
						 AND (r.e ->> 'progress')::numeric BETWEEN 0 AND 100
					   THEN (r.e ->> 'progress')::real END AS progress) v
	 WHERE v.proc IS NOT NULL
	   /* a field given is a field well formed */
	   AND (v.idle IS NOT NULL OR t.idle OPERATOR(pg_catalog.=) 'null')
	   AND (v.last_line IS NOT NULL OR t.last_line OPERATOR(pg_catalog.=) 'null')
	   AND (v.progress IS NOT NULL OR t.progress OPERATOR(pg_catalog.=) 'null')
	   AND NOT EXISTS (SELECT 1 FROM pg_catalog.jsonb_object_keys(r.e) k
						WHERE k OPERATOR(pg_catalog.<>) ALL ('{proc,idle,last_line,progress}'::text[]))
	 ORDER BY v.proc, r.n DESC
$$;

/*
 * Store a heartbeat's report on the procs it names that are live on this
 * host under its current epoch (each reported value replaces the stored
 * one; one not reported leaves it), and order killed, as 'stalled', every
 * running one whose render has gone without output for longer than its
 * layer's timeout_no_output (the layer's own, else its job's current
 * one).  A reported proc whose row another session holds is left for the
 * next heartbeat (SKIP LOCKED): the report never holds up the lease.
 * Returns how many procs became kill orders.
 */
CREATE FUNCTION frameq._take_report(host_id int, epoch bigint, report jsonb) RETURNS int
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	n int;
BEGIN
	IF report IS NULL THEN
		RETURN 0;
	END IF;
	/* before the first write of procs: see _ledger_ensure */
	PERFORM frameq._ledger_ensure();
	WITH p AS (SELECT x.id, x.frame, x.job, x.layer, x.state, r.idle, r.last_line, r.progress
				 FROM frameq._report_entries(report) r
				 JOIN frameq.proc x ON x.id = r.proc
				WHERE x.host = host_id AND x.epoch = _take_report.epoch
				  FOR NO KEY UPDATE OF x SKIP LOCKED),
		 l AS (SELECT p.*,
					  CASE WHEN p.state = 'running' AND p.idle IS NOT NULL
						   THEN (SELECT coalesce(y.timeout_no_output, j.timeout_no_output)
								   FROM frameq.layer y, frameq.job j
								  WHERE y.id = p.layer AND j.id = p.job) END AS limit_s
				 FROM p),
		 k AS (SELECT l.*, coalesce(l.idle > l.limit_s, false) AS stalled FROM l),
		 u AS (UPDATE frameq.proc x
				  SET last_line = coalesce(k.last_line, x.last_line),
					  progress = coalesce(k.progress, x.progress),
					  last_output_at = coalesce(clock_timestamp() - make_interval(secs => k.idle),
												x.last_output_at),
					  state = CASE WHEN k.stalled THEN 'killing' ELSE x.state END,
					  kill_cause = CASE WHEN k.stalled THEN 'stalled' ELSE x.kill_cause END,
					  kill_reason = CASE WHEN k.stalled
										 THEN format('stalled: no output for %s s, limit %s s',
													 k.idle, k.limit_s)
										 ELSE x.kill_reason END,
					  want_state = CASE WHEN k.stalled THEN frameq._failed_state(k.frame)
										ELSE x.want_state END,
					  kill_at = CASE WHEN k.stalled THEN clock_timestamp() ELSE x.kill_at END
				 FROM k WHERE x.id = k.id
			   RETURNING k.stalled)
	SELECT count(*) FILTER (WHERE u.stalled) INTO n FROM u;
	RETURN n;
END
$$;

/*
 * The agent renews its lease and lists what it runs: kill orders it no
 * longer lists are confirmed dead, bookings it has seen and no longer
 * runs were lost, and whatever it lists that is not a live proc of this
 * host and epoch is a zombie to kill.  Its report, if any, tells how each
 * render is doing (_take_report), and may make kill orders of stalled
 * ones.  Returns the kill orders.
 */
CREATE FUNCTION frameq.heartbeat(host text, token text, epoch bigint, running bigint[],
								 report jsonb DEFAULT NULL,
								 OUT lease_ttl interval, OUT kill bigint[])
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp SET lock_timeout = 0 AS $$
#variable_conflict use_column
DECLARE
	h frameq.host := frameq._host_lock(host, token);
	zombies bigint[];
	granted_at timestamptz;
BEGIN
	PERFORM frameq._not_null(epoch, 'epoch');
	IF running IS NULL THEN
		running := '{}';
	END IF;
	IF cardinality(running) > 100000 THEN
		PERFORM frameq._too_big('running', pg_catalog.format('%s procs, at most 100000', cardinality(running)));
	END IF;
	IF array_position(running, NULL) IS NOT NULL THEN
		RAISE EXCEPTION 'running must not contain null' USING ERRCODE = 'null_value_not_allowed';
	END IF;
	/* fencing, as reserve() does it (src/lease.c): FQ001, FQ002 */
	PERFORM frameq._check_lease(h.id, host, epoch);

	/*
	 * Confirm kills and losses.  A row lock held outside frameq_admin (a
	 * submitter's open kill_frame, a render's fence) must not hold up the
	 * renewal below: the releases wait at most frameq.lock_wait for a lock
	 * (frameq's own holders, such as the worker sending kill orders, are
	 * done long before), then are given up together; the next heartbeat
	 * confirms what this one could not.
	 */
	IF EXISTS (SELECT 1 FROM frameq.proc x
				WHERE x.host = h.id AND x.id <> ALL (heartbeat.running)
				  AND (x.state = 'killing'
					   OR (x.epoch = h.epoch AND x.booked_at < h.last_renewal_at))) THEN
		BEGIN
			PERFORM frameq._bound_lock_waits();
			/*
			 * Kill orders the host no longer lists are confirmed dead;
			 * bookings it has demonstrably seen and no longer runs were
			 * lost.  One call, so that all are locked before any is released.
			 */
			PERFORM frameq._release_procs(
				ARRAY(SELECT x.id FROM frameq.proc x
					   WHERE x.host = h.id AND x.id <> ALL (heartbeat.running)
						 AND (x.state = 'killing'
							  OR (x.epoch = h.epoch AND x.booked_at < h.last_renewal_at))),
				NULL);
		EXCEPTION WHEN lock_not_available THEN
			RAISE LOG 'frameq: heartbeat of host "%" left its releases to the next heartbeat: a row it needs is locked by another session', h.name;
		END;
	END IF;
	/* how the renders are doing; stalled ones become kill orders, returned below */
	PERFORM frameq._take_report(h.id, h.epoch, report);
	/* anything listed that is not live here and now is a zombie: kill it */
	zombies := ARRAY(SELECT r FROM unnest(heartbeat.running) r
					  WHERE NOT EXISTS (SELECT 1 FROM frameq.proc x
										 WHERE x.id = r AND x.host = h.id
										   AND x.epoch = h.epoch));
	lease_ttl := frameq._lease_ttl();
	granted_at := clock_timestamp();
	UPDATE frameq.host x SET lease_expires_at = granted_at + heartbeat.lease_ttl,
		   lease_granted = frameq._lease_grant(x.last_renewal_at, x.lease_granted,
											   heartbeat.lease_ttl, granted_at),
		   last_renewal_at = granted_at
	 WHERE x.id = h.id;
	kill := ARRAY(SELECT x.id FROM frameq.proc x WHERE x.host = h.id AND x.state = 'killing'
				  UNION SELECT unnest(zombies) ORDER BY 1);
END
$$;

/*
 * Where a render's output is: its agent tells, when the render starts,
 * "agent host:path" (at most 1024 characters), kept as the run's log
 * (frameq.runs).  Fenced like heartbeat (token, then FQ001/FQ002 for an
 * epoch that is not the host's current one or a lease that is over), but
 * without the host lock, so that it never waits for or holds up a booking
 * of the host; it writes only a run of this host booked under this epoch
 * and not yet ended (true), anything else is left alone (false).  A later
 * report replaces an earlier one.
 */
CREATE FUNCTION frameq.report_log(host text, token text, epoch bigint, proc bigint, log text)
RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp SET lock_timeout = 0 AS $$
DECLARE
	host_id int := frameq._authenticate(host, token);
BEGIN
	PERFORM frameq._not_null(epoch, 'epoch');
	PERFORM frameq._not_null(proc, 'proc');
	PERFORM frameq._bounded(frameq._not_null(log, 'log'), 'log', 1024);
	IF log = '' THEN
		RAISE EXCEPTION 'log must not be empty' USING ERRCODE = 'invalid_parameter_value';
	END IF;
	PERFORM frameq._check_lease(host_id, host, epoch);
	/* the run's row is locked by nothing but its own release: wait at most frameq.lock_wait */
	PERFORM frameq._bound_lock_waits();
	UPDATE frameq.run r SET log = report_log.log
	 WHERE r.proc = report_log.proc AND r.host = host_id AND r.epoch = report_log.epoch
	   AND r.ended_at IS NULL;
	RETURN FOUND;
END
$$;

/* book up to max_frames waiting frames onto the host (src/booking.c) */
CREATE FUNCTION frameq.reserve(host text, token text, epoch bigint,
							   max_frames int DEFAULT NULL)
	RETURNS SETOF frameq.booking
	AS 'MODULE_PATHNAME', 'frameq_reserve' LANGUAGE C VOLATILE
	SECURITY DEFINER SET search_path = pg_catalog, pg_temp;

/*
 * a render ended: release its proc and settle its frame (src/release.c);
 * oom: the agent killed it for memory, or has proof that the kernel did
 */
CREATE FUNCTION frameq.complete(host text, token text, epoch bigint, proc bigint,
								exit_status int, exit_signal int DEFAULT 0,
								max_rss bigint DEFAULT NULL, oom bool DEFAULT false)
	RETURNS text
	AS 'MODULE_PATHNAME', 'frameq_complete' LANGUAGE C VOLATILE
	SECURITY DEFINER SET search_path = pg_catalog, pg_temp;

/*
 * several renders ended: complete() for each element, in order, in one
 * call; arrays one value per proc (exit_signals, max_rss and oom may be
 * NULL, or hold NULLs, for the defaults); src/release.c
 */
CREATE FUNCTION frameq.complete_many(host text, token text, epoch bigint, procs bigint[],
									 exit_statuses int[], exit_signals int[] DEFAULT NULL,
									 max_rss bigint[] DEFAULT NULL, oom bool[] DEFAULT NULL)
	RETURNS text[]
	AS 'MODULE_PATHNAME', 'frameq_complete_many' LANGUAGE C VOLATILE
	SECURITY DEFINER SET search_path = pg_catalog, pg_temp;

/*
 * ---------------------------------------------------------------------
 * Run secrets.  Each proc's render gets a secret (FRAMEQ_RUN_SECRET in its
 * environment, run_secret in the booking) that proves to owns() that the
 * caller is that render.  It is derived, not stored: the first 32 hex
 * digits of sha256(key || int8send(proc)), with key 32 random bytes that
 * only the extension's owner can read (frameq.run_secret_key; a restore
 * replaces it with the dumped one: dump.sql).
 * src/booking.c computes the same.
 * ---------------------------------------------------------------------
 */

/* two host-token draws (32 strong random bytes each), hashed down to 32 bytes */
INSERT INTO frameq.run_secret_key (key)
	SELECT pg_catalog.sha256(pg_catalog.decode(frameq._random_token() OPERATOR(pg_catalog.||)
											   frameq._random_token(), 'hex'));

CREATE FUNCTION frameq._run_secret(proc bigint) RETURNS text
LANGUAGE sql STABLE STRICT SET search_path = pg_catalog, pg_temp AS $$
	SELECT pg_catalog.left(pg_catalog.encode(pg_catalog.sha256(
			   k.key OPERATOR(pg_catalog.||) pg_catalog.int8send(_run_secret.proc)), 'hex'), 32)
	  FROM frameq.run_secret_key k
$$;

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
CREATE FUNCTION frameq.owns(proc bigint, secret text DEFAULT NULL) RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
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
