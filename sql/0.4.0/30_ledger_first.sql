/*
 * The SQL paths that write procs rebuild an invalid ledger before their
 * first statement on frameq.proc, not from inside it (sql/src/procs.sql,
 * _ledger_ensure): attach, the kill orders of the operator's actions, and
 * the worker's kill sends.
 */
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

CREATE OR REPLACE FUNCTION frameq._kill_order(proc bigint, reason text, want text) RETURNS bool
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
	PERFORM frameq._ledger_ensure();
	UPDATE frameq.proc x
	   SET state = 'killing', kill_reason = _kill_order.reason, want_state = want,
		   kill_at = coalesce(x.kill_at, clock_timestamp())
	 WHERE x.id = _kill_order.proc;
	RETURN FOUND;
END
$$;

CREATE OR REPLACE FUNCTION frameq._send_kills(resend_ms int) RETURNS bigint
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	p record;
	n bigint := 0;
BEGIN
	PERFORM frameq._ledger_ensure();
	/*
	 * The due procs are locked by an initplan and updated by primary key:
	 * no join, whose plan, cached in the worker's session while the proc
	 * table was small, could become a nested loop over every proc for
	 * every proc once it is not.
	 */
	FOR p IN WITH due AS (
				UPDATE frameq.proc x SET kill_sent_at = pg_catalog.clock_timestamp()
				 WHERE x.id OPERATOR(pg_catalog.=) ANY (ARRAY(
						SELECT y.id FROM frameq.proc y
						 WHERE y.state OPERATOR(pg_catalog.=) 'killing'
						   AND (y.kill_sent_at IS NULL
								OR y.kill_sent_at OPERATOR(pg_catalog.<=)
								   (pg_catalog.clock_timestamp() OPERATOR(pg_catalog.-)
									pg_catalog.make_interval(secs => resend_ms OPERATOR(pg_catalog./) 1000.0)))
						   FOR NO KEY UPDATE SKIP LOCKED))
				RETURNING x.id, x.host, x.kill_reason)
			 SELECT * FROM due ORDER BY host, id LOOP
		PERFORM pg_catalog.pg_notify('frameq_host_' OPERATOR(pg_catalog.||) p.host,
									 pg_catalog.json_build_object('proc', p.id, 'reason', p.kill_reason)::text);
		n := n OPERATOR(pg_catalog.+) 1;
	END LOOP;
	RETURN n;
END
$$;

