/*
 * Privileges of what 0.5.0 adds to the public API (90_restated.sql has
 * revoked every new function from PUBLIC): the same grants as
 * sql/src/grants.sql makes on a fresh install.  heartbeat is replaced by
 * one with a report argument.
 */
GRANT EXECUTE ON FUNCTION frameq.heartbeat(text, text, bigint, bigint[], jsonb) TO frameq_agent;
GRANT EXECUTE ON FUNCTION frameq.unblock_host(bigint, text) TO frameq_admin, frameq_submit;
GRANT SELECT ON frameq.job_host_blocks TO frameq_reader;
