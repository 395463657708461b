
/*
 * ---------------------------------------------------------------------
 * grants.sql: roles and privileges.  Tables are written only through the
 * functions above, and no role but the extension's owner has any
 * privilege on them.  frameq_admin runs the farm, frameq_agent is what
 * host agents log in as, frameq_submit may submit and control the jobs of
 * the shows granted to it (admin.sql, show grants), frameq_reader may
 * look.  The roles are cluster-wide and outlive the extension, as roles
 * do.  The entry points run as the extension's owner (SECURITY DEFINER,
 * on each function); every other function is internal.
 * ---------------------------------------------------------------------
 */
DO $$
BEGIN
	IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'frameq_reader') THEN
		CREATE ROLE frameq_reader NOLOGIN;
	END IF;
	IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'frameq_agent') THEN
		CREATE ROLE frameq_agent NOLOGIN;
	END IF;
	IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'frameq_admin') THEN
		CREATE ROLE frameq_admin NOLOGIN IN ROLE frameq_reader;
	END IF;
	IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'frameq_submit') THEN
		CREATE ROLE frameq_submit NOLOGIN;
	END IF;
END
$$;

/*
 * New functions are executable by PUBLIC until revoked: revoke them all,
 * then grant each role its own.
 */
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA frameq FROM PUBLIC;
/* the run secrets' key: the extension's owner only */
REVOKE ALL ON frameq.run_secret_key FROM PUBLIC;
GRANT USAGE ON SCHEMA frameq TO frameq_reader, frameq_agent, frameq_admin, frameq_submit;

GRANT EXECUTE ON FUNCTION
	frameq.create_allocation(text, text), frameq.create_show(text),
	frameq.set_subscription(text, text, numeric, numeric),
	frameq.create_folder(text, text, numeric, int), frameq.set_folder_limits(int, numeric, int),
	frameq.create_limit(text, int), frameq.set_limit(text, int),
	frameq.register_host(text, text, numeric, bigint, int, bigint, text[]),
	frameq.rotate_host_token(text), frameq.retire_host(text),
	frameq.grant_show(text, text), frameq.revoke_show(text, text),
	frameq.submit(jsonb), frameq.set_job(bigint, int, numeric, int, bool, bool),
	frameq.kill_frame(bigint, text), frameq.retry_frame(bigint), frameq.eat_frame(bigint),
	frameq.kill_job(bigint, text), frameq.set_host_state(text, text),
	frameq.confirm_host_dead(text), frameq.depend_job(bigint, bigint),
	frameq.drop_depends(bigint, text), frameq.unblock_host(bigint, text)
	TO frameq_admin;
/* 0.6.0: a note on a job, for whoever may set_job it */
GRANT EXECUTE ON FUNCTION frameq.comment_job(bigint, text) TO frameq_admin, frameq_submit;
GRANT EXECUTE ON FUNCTION
	frameq.attach(text, text, text), frameq.heartbeat(text, text, bigint, bigint[], jsonb),
	frameq.reserve(text, text, bigint, int),
	frameq.complete(text, text, bigint, bigint, int, int, bigint, bool)
	TO frameq_agent;
/* 0.6.0: several reports in one call */
GRANT EXECUTE ON FUNCTION
	frameq.complete_many(text, text, bigint, bigint[], int[], int[], bigint[], bool[])
	TO frameq_agent;
/* a render fences its output with owns(); a reader may ask too */
GRANT EXECUTE ON FUNCTION frameq.owns(bigint, text) TO frameq_agent, frameq_reader;
GRANT EXECUTE ON FUNCTION
	frameq.submit(jsonb), frameq.set_job(bigint, int, numeric, int, bool, bool),
	frameq.kill_frame(bigint, text), frameq.retry_frame(bigint), frameq.eat_frame(bigint),
	frameq.kill_job(bigint, text), frameq.depend_job(bigint, bigint),
	frameq.drop_depends(bigint, text), frameq.unblock_host(bigint, text)
	TO frameq_submit;
/* editing what was submitted (submit.sql): the same roles as set_job */
GRANT EXECUTE ON FUNCTION
	frameq.set_job(bigint, jsonb), frameq.set_layer(bigint, text, jsonb),
	frameq.add_frames(bigint, text, text)
	TO frameq_admin, frameq_submit;
/* _ledger_parked and _frame_spec: the views dispatch_parked and frames call them */
GRANT EXECUTE ON FUNCTION frameq.check(), frameq.ledger(), frameq.worker_status(),
	frameq.lease_period(), frameq._ledger_parked(), frameq._frame_spec(int, int[])
	TO frameq_reader;
GRANT SELECT ON frameq.frames, frameq.job_progress, frameq.usage, frameq.hosts, frameq.runs,
	frameq.show_grants, frameq.dispatch_parked, frameq.depends, frameq.job_host_blocks
	TO frameq_reader;
/* bulk actions (operator.sql) and where a run's output is (agent.sql) */
GRANT EXECUTE ON FUNCTION frameq.retry_frames(bigint, text, text[]),
	frameq.eat_frames(bigint, text, text[]), frameq.kill_frames(bigint, text, text)
	TO frameq_admin, frameq_submit;
GRANT EXECUTE ON FUNCTION frameq.report_log(text, text, bigint, bigint, text) TO frameq_agent;
/* 0.6.0: the audit trail; its table stays the owner's alone (append-only, admin.sql) */
GRANT SELECT ON frameq.actions TO frameq_reader;
/* metrics; prune() removes history: an administration action */
GRANT SELECT ON frameq.metrics TO frameq_reader;
GRANT EXECUTE ON FUNCTION frameq.prune(interval) TO frameq_admin;
