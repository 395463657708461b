/*
 * Grants of the public functions 0.5.0 adds (90_restated.sql revokes them
 * from PUBLIC): heartbeat, replaced by one with a report argument.
 */
GRANT EXECUTE ON FUNCTION frameq.heartbeat(text, text, bigint, bigint[], jsonb) TO frameq_agent;
