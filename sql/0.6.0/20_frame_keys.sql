
/*
 * frame's foreign keys to job and layer go: what they guarded is kept per
 * statement by triggers (procs.sql, "What frame's keys would guard",
 * restated in 90), which cost a submit one check per INSERT instead of two
 * key checks per frame row.
 */
ALTER TABLE frameq.frame
	DROP CONSTRAINT frame_job_fkey,
	DROP CONSTRAINT frame_layer_fkey;
