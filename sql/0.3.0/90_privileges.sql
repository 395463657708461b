/*
 * Privileges: every function of this step is internal (check() keeps its
 * grant to frameq_reader through CREATE OR REPLACE); the parked view is
 * for readers.
 */
REVOKE ALL ON FUNCTION
	frameq._queue_waiting_of(bigint[]), frameq._queue_job_waiting(bigint),
	frameq._queue_folder_waiting(int), frameq._queue_waiting_layers(),
	frameq._job_caps_queue(), frameq._folder_caps_queue(),
	frameq._parked_over_cap(bigint, int, int, int, int, int, int, int),
	frameq._ledger_parked(), frameq._requeue_pending(), frameq._requeue_after_rebuild(),
	frameq._dispatch_tidy(tid[], bigint[], tid[])
	FROM PUBLIC;
GRANT EXECUTE ON FUNCTION frameq._ledger_parked() TO frameq_reader;
GRANT SELECT ON frameq.dispatch_parked TO frameq_reader;
REVOKE ALL ON FUNCTION frameq._release_procs(bigint[], text), frameq._proc_usage(),
	frameq._authenticate(text, text), frameq._check_lease(int, text, bigint) FROM PUBLIC;
