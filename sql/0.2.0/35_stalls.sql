/*
 * ---------------------------------------------------------------------
 * No stalls through rows frameq must lock.  doc/security.md, "No role
 * without frameq_admin can stall frameq".
 * ---------------------------------------------------------------------
 */

/*
 * Jobs whose last frames ended while another session kept the job's row
 * locked past frameq.lock_wait (src/release.c, maybe_finish_job): whether
 * the job is finished is left to the background worker, which asks again
 * every round until it gets the row.  Rows are few and short-lived.
 */
CREATE TABLE frameq.job_finish_check (
	job			bigint PRIMARY KEY,
	since		timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp()
);

/* the worker's step: finish the jobs above that are done; returns how many it settled */
CREATE FUNCTION frameq._finish_checked_jobs() RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
	c record;
	n bigint := 0;
BEGIN
	FOR c IN SELECT x.job FROM frameq.job_finish_check x ORDER BY x.job LOOP
		BEGIN
			/* the worker's lock_timeout (frameq.lock_wait) bounds this wait */
			PERFORM 1 FROM frameq.job j WHERE j.id = c.job FOR NO KEY UPDATE;
			PERFORM frameq._finish_job_if_done(c.job);
			DELETE FROM frameq.job_finish_check x WHERE x.job = c.job;
			n := n + 1;
		EXCEPTION WHEN lock_not_available THEN
			RAISE LOG 'frameq worker: job % is still locked by another session; asked again next round', c.job;
		END;
	END LOOP;
	RETURN n;
END
$$;

/*
 * Kill orders (UPDATEs of procs) make sure of the ledger first too, like
 * bookings and releases: a rebuild needs every proc writer out of its way,
 * so an UPDATE left open while the ledger was still invalid after a start
 * would hold up every booking and release (src/release.c, proc_before).
 */
DROP TRIGGER proc_before ON frameq.proc;
CREATE TRIGGER proc_before BEFORE INSERT OR UPDATE OR DELETE ON frameq.proc
	FOR EACH STATEMENT EXECUTE FUNCTION frameq._proc_before();

/* check() knows job_finish_check: see its last definition, in 40_dispatch.sql */
