/*
 * Privileges of the bulk actions and of report_log (90_restated.sql has
 * revoked every new function from PUBLIC): the same grants as
 * sql/src/grants.sql makes on a fresh install.
 */
GRANT EXECUTE ON FUNCTION frameq.retry_frames(bigint, text, text[]),
	frameq.eat_frames(bigint, text, text[]), frameq.kill_frames(bigint, text, text)
	TO frameq_admin, frameq_submit;
GRANT EXECUTE ON FUNCTION frameq.report_log(text, text, bigint, bigint, text) TO frameq_agent;
