/*-------------------------------------------------------------------------
 *
 * guc.c
 *	  frameq's configuration parameters (frameq.*).  doc/reference.md gives
 *	  each one's default and the reason for it.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/guc.h"

#include "frameq.h"

int			frameq_lease_ttl = 30;
double		frameq_clock_drift = 0.05;
int			frameq_lease_margin = 2;
int			frameq_kill_resend_interval = 5000;
int			frameq_max_frames_per_reserve = 16;
int			frameq_max_jobs_examined = 1000;
int			frameq_ledger_size = 100000;
char	   *frameq_database = NULL;
bool		frameq_quarantine = true;
int			frameq_lock_wait = 1000;
int			frameq_retention = 0;

void
frameq_guc_init(void)
{
	DefineCustomIntVariable("frameq.lease_ttl",
							"How long a host's lease lasts after each renewal.",
							NULL,
							&frameq_lease_ttl,
							30, 1, 3600,
							PGC_SIGHUP,
							GUC_UNIT_S,
							NULL, NULL, NULL);

	DefineCustomRealVariable("frameq.clock_drift",
							 "Largest relative clock-rate error assumed between a host and the server.",
							 NULL,
							 &frameq_clock_drift,
							 0.05, 0.0, 1.0,
							 PGC_SIGHUP,
							 0,
							 NULL, NULL, NULL);

	DefineCustomIntVariable("frameq.lease_margin",
							"Extra time, past lease_ttl and drift, before a silent host's procs are released.",
							NULL,
							&frameq_lease_margin,
							2, 0, 3600,
							PGC_SIGHUP,
							GUC_UNIT_S,
							NULL, NULL, NULL);

	DefineCustomIntVariable("frameq.kill_resend_interval",
							"How often an unconfirmed kill order is notified again.",
							NULL,
							&frameq_kill_resend_interval,
							5000, 100, 3600 * 1000,
							PGC_SIGHUP,
							GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomIntVariable("frameq.max_frames_per_reserve",
							"Default number of frames one reserve() call may book.",
							NULL,
							&frameq_max_frames_per_reserve,
							16, 1, 1000,
							PGC_USERSET,
							0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("frameq.max_jobs_examined",
							"Most jobs one reserve() call books from; jobs that cannot book never count.",
							NULL,
							&frameq_max_jobs_examined,
							1000, 1, INT_MAX,
							PGC_USERSET,
							0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("frameq.ledger_size",
							"Most capped entities (jobs, folders, subscriptions, limits) with running work at once.",
							NULL,
							&frameq_ledger_size,
							100000, 1000, 10000000,
							PGC_POSTMASTER,
							0,
							NULL, NULL, NULL);

	DefineCustomStringVariable("frameq.database",
							   "Database the frameq background worker connects to.",
							   NULL,
							   &frameq_database,
							   "postgres",
							   PGC_POSTMASTER,
							   0,
							   NULL, NULL, NULL);

	DefineCustomBoolVariable("frameq.quarantine",
							 "Hold bookings and lease expiry for a lease period after every server start.",
							 "Turn off only where no agent can have been running, such as a test cluster.",
							 &frameq_quarantine,
							 true,
							 PGC_SIGHUP,
							 0,
							 NULL, NULL, NULL);

	/*
	 * Superuser-only: it bounds how long frameq waits for a lock that any
	 * role could be holding, so an ordinary role must not stretch it for
	 * its own session's calls either.
	 */
	DefineCustomIntVariable("frameq.lock_wait",
							"Longest frameq waits for a host or row lock that another session holds.",
							"The background worker skips a host whose locks it cannot get in this time and retries it next round; attach, heartbeat and operator actions fail with SQLSTATE 55P03.",
							&frameq_lock_wait,
							1000, 1, 60000,
							PGC_SUSET,
							GUC_UNIT_MS,
							NULL, NULL, NULL);

	/*
	 * How long ended jobs are kept: the background worker prunes those
	 * that ended longer ago (worker.sql, pruning).  0, the default: never.
	 */
	DefineCustomIntVariable("frameq.retention",
							"How long the background worker keeps a finished or killed job before pruning it.",
							"0, the default, keeps every job; prune() removes jobs on demand.",
							&frameq_retention,
							0, 0, INT_MAX,
							PGC_SIGHUP,
							GUC_UNIT_S,
							NULL, NULL, NULL);

	MarkGUCPrefixReserved("frameq");
}
