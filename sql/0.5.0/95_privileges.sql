/*
 * Privileges of what 0.5.0 adds to the public API (90_restated.sql has
 * revoked every new function from PUBLIC): the same grants as
 * sql/src/grants.sql makes on a fresh install.  heartbeat and complete are
 * replaced by ones with a report and an oom argument.
 */
GRANT EXECUTE ON FUNCTION frameq.heartbeat(text, text, bigint, bigint[], jsonb),
	frameq.complete(text, text, bigint, bigint, int, int, bigint, bool) TO frameq_agent;
GRANT EXECUTE ON FUNCTION frameq.unblock_host(bigint, text) TO frameq_admin, frameq_submit;
GRANT SELECT ON frameq.job_host_blocks TO frameq_reader;
