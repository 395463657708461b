/*
 * ---------------------------------------------------------------------
 * Releasing a host's procs: one function, one lock order.
 *
 * attach (after a reboot), heartbeat (confirmed kills, lost bookings),
 * confirm_host_dead and the worker's lease expiry each released a host's
 * procs in a loop, one _release() after another.  Every release updates
 * the host row (its room back), so from the second proc on the loop held
 * the host row while it locked the next proc, while complete() of that
 * proc, by the host's agent, locks its proc first and the host row
 * second: the two could deadlock (and a deadlock in _expire_leases undid
 * the round's expiry of every host).  _release_procs locks every proc it
 * is given, in id order, before it releases any, so all these paths take
 * proc rows before the host row, as complete() does (doc/design.md, Lock
 * order).  The state each frame goes to is the release's default
 * (src/release.c, default_end_state: the kill order's wanted state, or
 * waiting), which _release applies when it is given none.
 * ---------------------------------------------------------------------
 */

/*
 * Release one proc; new_state NULL means the proc's default end state
 * (0.1.0's version was STRICT, so it had to be given one).
 */
CREATE OR REPLACE FUNCTION frameq._release(proc bigint, reason text, new_state text,
										   count_retry bool DEFAULT false)
	RETURNS bool
	AS 'MODULE_PATHNAME', 'frameq_release_proc' LANGUAGE C VOLATILE
	SET search_path = pg_catalog, pg_temp;

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

CREATE OR REPLACE FUNCTION frameq.confirm_host_dead(host text) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	h frameq.host := frameq._host_lock_by_name(host);
BEGIN
	PERFORM frameq._release_procs(ARRAY(SELECT x.id FROM frameq.proc x WHERE x.host = h.id),
								  'operator');
	UPDATE frameq.host x SET epoch = x.epoch + 1, lease_expires_at = NULL,
		   state = CASE WHEN x.state = 'up' THEN 'down' ELSE x.state END,
		   down_reason = CASE WHEN x.state = 'up' THEN 'operator' ELSE x.down_reason END
	 WHERE x.id = h.id;
END
$$;


CREATE OR REPLACE FUNCTION frameq.attach(host text, token text, boot_id text,
							  OUT epoch bigint, OUT lease_ttl interval, OUT kill bigint[],
							  OUT host_id int, OUT channel text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp SET lock_timeout = 0 AS $$
#variable_conflict use_column
DECLARE
	h frameq.host := frameq._host_lock(host, token);
BEGIN
	/* a reboot's releases and the kill orders wait at most frameq.lock_wait for others' locks */
	PERFORM frameq._bound_lock_waits();
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
		/* same boot: the earlier agent's renders may live on; order them killed */
		UPDATE frameq.proc x SET state = 'killing', kill_reason = 'agent re-attached',
			   kill_at = clock_timestamp(), want_state = 'waiting'
		 WHERE x.host = h.id AND x.state = 'running';
	END IF;
	lease_ttl := frameq._lease_ttl();
	UPDATE frameq.host x SET epoch = h.epoch + 1, boot_id = attach.boot_id,
		   lease_expires_at = clock_timestamp() + attach.lease_ttl,
		   last_renewal_at = clock_timestamp(),
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


CREATE OR REPLACE FUNCTION frameq.heartbeat(host text, token text, epoch bigint, running bigint[],
								 OUT lease_ttl interval, OUT kill bigint[])
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp SET lock_timeout = 0 AS $$
#variable_conflict use_column
DECLARE
	h frameq.host := frameq._host_lock(host, token);
	zombies bigint[];
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
	/* anything listed that is not live here and now is a zombie: kill it */
	zombies := ARRAY(SELECT r FROM unnest(heartbeat.running) r
					  WHERE NOT EXISTS (SELECT 1 FROM frameq.proc x
										 WHERE x.id = r AND x.host = h.id
										   AND x.epoch = h.epoch));
	lease_ttl := frameq._lease_ttl();
	UPDATE frameq.host x SET lease_expires_at = clock_timestamp() + heartbeat.lease_ttl,
		   last_renewal_at = clock_timestamp()
	 WHERE x.id = h.id;
	kill := ARRAY(SELECT x.id FROM frameq.proc x WHERE x.host = h.id AND x.state = 'killing'
				  UNION SELECT unnest(zombies) ORDER BY 1);
END
$$;


CREATE OR REPLACE FUNCTION frameq._expire_leases(since timestamptz, at timestamptz DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
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
			PERFORM frameq._release_procs(ARRAY(SELECT x.id FROM frameq.proc x
												 WHERE x.host OPERATOR(pg_catalog.=) h.id),
										  'host_lost');
			UPDATE frameq.host x SET lease_expires_at = NULL,
				   epoch = x.epoch OPERATOR(pg_catalog.+) 1,
				   state = CASE WHEN x.state OPERATOR(pg_catalog.=) 'up' THEN 'down' ELSE x.state END,
				   down_reason = CASE WHEN x.state OPERATOR(pg_catalog.=) 'up'
									  THEN 'lease_lost' ELSE x.down_reason END
			 WHERE x.id OPERATOR(pg_catalog.=) h.id;
			n := n OPERATOR(pg_catalog.+) 1;
		EXCEPTION WHEN lock_not_available OR deadlock_detected THEN
			RAISE LOG 'frameq worker: host % skipped this round: a row it needs is locked by another session (%)',
				candidate, SQLERRM;
		END;
	END LOOP;
	PERFORM pg_catalog.set_config('lock_timeout', saved_timeout, true);
	RETURN n;
END
$$;

