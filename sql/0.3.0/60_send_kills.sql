/*
 * _send_kills locks the due kill orders through an initplan (ARRAY(...)),
 * not a join.  0.2.0's join is planned once per worker session.  Seen once
 * (a worker session that lived through DROP and CREATE EXTENSION, then a
 * farm filled with 33,000 procs in seconds): the round ran for more than
 * 35 s inside this statement, holding back the xmin horizon of the whole
 * server, so every booking walked ever longer HOT chains.  With an initplan
 * and a lookup by primary key, no plan can be worse than one scan.
 */
CREATE OR REPLACE FUNCTION frameq._send_kills(resend_ms int) RETURNS bigint
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	p record;
	n bigint := 0;
BEGIN
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
