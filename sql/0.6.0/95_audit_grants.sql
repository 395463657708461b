
/* the audit trail: a note on a job for whoever may set_job it; the view for readers */
GRANT EXECUTE ON FUNCTION frameq.comment_job(bigint, text) TO frameq_admin, frameq_submit;
GRANT SELECT ON frameq.actions TO frameq_reader;
