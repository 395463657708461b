
/*
 * ---------------------------------------------------------------------
 * dump.sql: pg_dump and pg_restore.  A dump of a frameq database holds
 * CREATE EXTENSION frameq, not the extension's objects, so without this
 * its tables would come back empty.  Each table below is marked as holding
 * the farm's data; pg_dump then dumps its rows (and each sequence's
 * position), and pg_restore loads them after CREATE EXTENSION has built
 * the schema.  doc/reference.md ("Backup and restore") gives the
 * procedure, which loads the rows with session_replication_role =
 * replica: they are the farm as it was, and the proc table's triggers
 * would book every running proc a second time.
 * ---------------------------------------------------------------------
 */

/*
 * The run secret key: CREATE EXTENSION draws a new one (agent.sql), and
 * the restored row must replace it, or the secrets of the renders the dump
 * says are running would stop passing owns().  An INSERT replaces the
 * key; ALWAYS, so that it does so under session_replication_role =
 * replica too.  Only the extension's owner can write the table.
 */
CREATE FUNCTION frameq._run_secret_key_replace() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
	DELETE FROM frameq.run_secret_key;
	RETURN NEW;
END
$$;
CREATE TRIGGER run_secret_key_replace BEFORE INSERT ON frameq.run_secret_key
	FOR EACH ROW EXECUTE FUNCTION frameq._run_secret_key_replace();
ALTER TABLE frameq.run_secret_key ENABLE ALWAYS TRIGGER run_secret_key_replace;

/*
 * Every table is dumped whole but two: show_grant without the grants of
 * roles that no longer exist (its role is a regrole: the role must exist
 * before the restore, pg_dumpall --globals-only), and dispatch_queue and
 * dispatch_class not at all.  The dispatch queue is derived from the frames: CREATE EXTENSION
 * forgets the ledger (_ledger_reset), and the rebuild that follows queues
 * every waiting layer of every active job again before anything books
 * (src/ledger.c, "Parking"), so restored rows would only be duplicates.
 * The sequences' positions are dumped with them, so new ids follow the
 * restored ones.
 */
SELECT pg_catalog.pg_extension_config_dump('frameq.allocation', '');
SELECT pg_catalog.pg_extension_config_dump('frameq.allocation_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('frameq.show', '');
SELECT pg_catalog.pg_extension_config_dump('frameq.show_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('frameq.subscription', '');
SELECT pg_catalog.pg_extension_config_dump('frameq.folder', '');
SELECT pg_catalog.pg_extension_config_dump('frameq.folder_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('frameq.limits', '');
SELECT pg_catalog.pg_extension_config_dump('frameq.limits_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('frameq.host', '');
SELECT pg_catalog.pg_extension_config_dump('frameq.host_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('frameq.job', '');
SELECT pg_catalog.pg_extension_config_dump('frameq.job_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('frameq.layer', '');
SELECT pg_catalog.pg_extension_config_dump('frameq.layer_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('frameq.layer_limit', '');
SELECT pg_catalog.pg_extension_config_dump('frameq.frame', '');
SELECT pg_catalog.pg_extension_config_dump('frameq.frame_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('frameq.depend', '');
SELECT pg_catalog.pg_extension_config_dump('frameq.depend_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('frameq.frame_depend', '');
SELECT pg_catalog.pg_extension_config_dump('frameq.proc', '');
SELECT pg_catalog.pg_extension_config_dump('frameq.run', '');
SELECT pg_catalog.pg_extension_config_dump('frameq.job_finish_check', '');
SELECT pg_catalog.pg_extension_config_dump('frameq.run_secret_key', '');
SELECT pg_catalog.pg_extension_config_dump('frameq.show_grant',
	'WHERE EXISTS (SELECT FROM pg_catalog.pg_roles r WHERE r.oid OPERATOR(pg_catalog.=) show_grant.role)');
/* 0.5.0: a job's failures per host and the limits the worker has yet to settle */
SELECT pg_catalog.pg_extension_config_dump('frameq.job_host_failure', '');
SELECT pg_catalog.pg_extension_config_dump('frameq.job_limit_check', '');
/* 0.6.0: the audit trail */
SELECT pg_catalog.pg_extension_config_dump('frameq.action', '');
SELECT pg_catalog.pg_extension_config_dump('frameq.action_id_seq', '');
/* 0.7.0: the metrics' totals, which outlive the rows they count (tally) */
SELECT pg_catalog.pg_extension_config_dump('frameq.tally', '');
