
/* editing what was submitted (set_job(job, changes), set_layer, add_frames): the same roles as set_job */
GRANT EXECUTE ON FUNCTION
	frameq.set_job(bigint, jsonb), frameq.set_layer(bigint, text, jsonb),
	frameq.add_frames(bigint, text, text)
	TO frameq_admin, frameq_submit;
