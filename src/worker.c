/*-------------------------------------------------------------------------
 *
 * worker.c
 *	  The background worker: delivers kill orders, expires leases, and holds
 *	  the quarantine after the server starts.
 *
 * Kill orders.  A proc in state 'killing' that has not been notified, or
 * was notified more than frameq.kill_resend_interval ago, is announced on
 * frameq_host_<host id> (payload: proc, reason), again and again until the
 * host confirms it.  A transaction that creates kill orders sets the
 * worker's latch when it commits, so a listening agent hears of a kill in
 * milliseconds.  Notifications are hints: heartbeats return the same kill
 * orders.
 *
 * Leases.  A host whose last successful renewal is more than
 *		ttl * (1 + clock_drift) + lease_margin
 * old, ttl being the lease_ttl that renewal handed out (host.lease_granted:
 * lowering frameq.lease_ttl shortens no lease already granted), has lost
 * its lease: its epoch moves on, it is marked down (if it was
 * up) and its procs are released as host_lost.  By then its agent's
 * supervisors have killed every render (they count the lease from the
 * moment the renewal was *sent*, on a monotonic clock, minus a grace), so
 * releasing cannot start a second copy of anything still running.
 *
 * Timeouts.  A running proc past its deadline (proc.timeout_at, set at
 * booking from its layer's timeout) becomes a kill order, each round,
 * before the round's kill orders are sent: so a task is ordered killed,
 * and its host told, within a round (about a second) of its deadline.  The
 * round reads only the procs due, through a partial index on the deadline
 * of running procs: its cost follows the procs due, not those running.
 *
 * Quarantine.  After every server start (crash restart, plain restart,
 * promotion of a standby) nothing is booked and no lease expires until the
 * same period has passed, so that every host has had a full lease to
 * report: the period of the current lease_ttl, or of the longest lease a
 * host holds if that is longer (a server restored or promoted with a
 * shorter lease_ttl than its agents were given); until the worker has read
 * the longest lease, the quarantine holds.  Leases are re-armed from the
 * start.  The worker only starts
 * once recovery has finished, so a standby runs none of this.
 *
 * Delays.  A task sent back to waiting with a delay (a requeue exit code,
 * a retry_delay) is made bookable by the round after its time has come:
 * sql/src/worker.sql, "Delays".
 *
 * Pruning.  While frameq.retention is set, the round prunes one small
 * batch of jobs that ended longer ago than that (worker.sql, pruning),
 * then rests four times as long as the batch took, until a batch finds
 * nothing; then it waits an hour.
 *
 * Counts.  About every 10 seconds the round counts the live tasks by
 * state, and about once a minute runs ended by reason and tasks by every
 * state, into frameq.tally, for the metrics view (worker.sql, _count_live
 * and _count_history): so a scrape never counts tasks or runs.
 *
 * Wall-clock jumps.  Lease times are wall-clock timestamps in the host
 * table.  Each round the worker compares how far the wall clock and the
 * monotonic clock moved; if they disagree by more than a second, the clock
 * jumped, and every lease is counted again from now (never early).  Every
 * deadline is moved by the jump, so no task is timed out early or late.
 *
 * Shared state: FrameqWorker, protected by its spinlock.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "portability/instr_time.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "tcop/tcopprot.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "frameq.h"

typedef struct FrameqWorkerShared
{
	slock_t		mutex;
	Latch	   *latch;			/* the worker's, while it runs */
	bool		started;		/* a worker has run since shared memory began */
	TimestampTz quarantine_start;
	TimestampTz quarantine_until;
	bool		longest_known;	/* quarantine_until covers the longest lease held */
	TimestampTz leases_since;	/* leases count from no earlier than this */
} FrameqWorkerShared;

static FrameqWorkerShared *FrameqWorker = NULL;

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

/* this transaction created kill orders: wake the worker when it commits */
static bool wake_at_commit = false;

PGDLLEXPORT void frameq_worker_main(Datum main_arg);

static void
worker_shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(MAXALIGN(sizeof(FrameqWorkerShared)));
}

static void
worker_shmem_startup(void)
{
	bool		found;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	FrameqWorker = ShmemInitStruct("frameq worker", sizeof(FrameqWorkerShared), &found);
	if (!found)
	{
		SpinLockInit(&FrameqWorker->mutex);
		FrameqWorker->latch = NULL;
		FrameqWorker->started = false;
		FrameqWorker->quarantine_start = 0;
		FrameqWorker->quarantine_until = 0;
		FrameqWorker->longest_known = false;
		FrameqWorker->leases_since = 0;
	}
	LWLockRelease(AddinShmemInitLock);
}

static void
worker_xact_callback(XactEvent event, void *arg)
{
	if (event == XACT_EVENT_COMMIT && wake_at_commit && FrameqWorker != NULL)
	{
		Latch	   *latch;

		SpinLockAcquire(&FrameqWorker->mutex);
		latch = FrameqWorker->latch;
		SpinLockRelease(&FrameqWorker->mutex);
		if (latch)
			SetLatch(latch);
	}
	if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_ABORT ||
		event == XACT_EVENT_PREPARE)
		wake_at_commit = false;
}

void
frameq_worker_wake_at_commit(void)
{
	wake_at_commit = true;
}

/*
 * Does the quarantine after start still hold?  Until a worker has started
 * as primary, and read the longest lease held, we do not know when it will
 * end, so it holds.
 */
bool
frameq_in_quarantine(void)
{
	bool		in;

	if (!frameq_quarantine)
		return false;
	SpinLockAcquire(&FrameqWorker->mutex);
	in = !FrameqWorker->started || !FrameqWorker->longest_known ||
		GetCurrentTimestamp() < FrameqWorker->quarantine_until;
	SpinLockRelease(&FrameqWorker->mutex);
	return in;
}

void
frameq_worker_init(void)
{
	BackgroundWorker worker;

	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = worker_shmem_request;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = worker_shmem_startup;
	RegisterXactCallback(worker_xact_callback, NULL);

	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	/* never on a standby: it starts when recovery ends, i.e. on promotion */
	worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
	worker.bgw_restart_time = 5;
	snprintf(worker.bgw_library_name, BGW_MAXLEN, "frameq");
	snprintf(worker.bgw_function_name, BGW_MAXLEN, "frameq_worker_main");
	snprintf(worker.bgw_name, BGW_MAXLEN, "frameq worker");
	snprintf(worker.bgw_type, BGW_MAXLEN, "frameq worker");
	RegisterBackgroundWorker(&worker);
}

/* run one SQL statement of the round; returns the count it reports */
static int64
run_step(const char *sql, int nargs, Oid *types, Datum *args)
{
	int			ret;
	bool		isnull;
	Datum		d;

	ret = SPI_execute_with_args(sql, nargs, types, args, NULL, false, 1);
	if (ret != SPI_OK_SELECT || SPI_processed != 1)
		elog(ERROR, "frameq worker: \"%s\" failed: %s", sql, SPI_result_code_string(ret));
	d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
	return isnull ? 0 : DatumGetInt64(d);
}

/*
 * The worker's session settings.  search_path: the worker runs as the
 * bootstrap superuser, so no name it resolves may come from a schema other
 * roles can create objects in (frameq's functions pin their own path too).
 * lock_timeout: a backstop so that no lock held by another session, of any
 * role, can stop the worker for longer than frameq.lock_wait; the steps
 * themselves skip a host whose locks they cannot get in that time.
 */
static void
worker_session_settings(void)
{
	char		buf[32];

	SetConfigOption("search_path", "pg_catalog, pg_temp", PGC_SUSET, PGC_S_OVERRIDE);
	/* the steps are written for a snapshot per statement, whatever the server's default */
	SetConfigOption("default_transaction_isolation", "read committed", PGC_SUSET,
					PGC_S_OVERRIDE);
	snprintf(buf, sizeof(buf), "%d", frameq_lock_wait);
	SetConfigOption("lock_timeout", buf, PGC_SUSET, PGC_S_OVERRIDE);
}

/* the steps of a round */
typedef enum WorkerStep
{
	STEP_REARM,
	STEP_LONGEST_LEASE,
	STEP_SHIFT_DEADLINES,
	STEP_EXPIRE,
	STEP_TIME_OUT,
	STEP_SEND_KILLS,
	STEP_FINISH_JOBS,
	STEP_SETTLE_LIMITS,
	STEP_DELAYS,
	STEP_REQUEUE,
	STEP_PRUNE,
	STEP_COUNT,
	STEP_COUNT_LIVE
} WorkerStep;

/* how often the counts the metrics view reads are refreshed: history, live tasks */
#define COUNT_INTERVAL		((int64) 60 * USECS_PER_SEC)
#define COUNT_LIVE_INTERVAL	((int64) 10 * USECS_PER_SEC)

/*
 * Pruning: the most jobs, and tasks, one batch removes (a job holding more
 * tasks goes alone); after a batch the worker prunes nothing for
 * PRUNE_PAUSE_FACTOR times as long as it took, so pruning takes at most a
 * fifth of a core; passes start an hour apart.
 */
#define PRUNE_BATCH_JOBS	10
#define PRUNE_BATCH_TASKS	10000
#define PRUNE_PAUSE_FACTOR	4
#define PRUNE_PASS_INTERVAL	((int64) 3600 * USECS_PER_SEC)
#define PRUNE_RETRY_INTERVAL ((int64) 60 * USECS_PER_SEC)

/*
 * Is frameq installed in this database, with the schema this library was
 * built for?  Until then the worker expires nothing and sends nothing: an
 * old schema's lease expiry takes the host lock the old way, which a
 * booking by this library would not wait for.  Said once in the log.
 */
static bool
worker_schema_ready(void)
{
	static bool said = false;

	if (run_step("SELECT (to_regclass('frameq.host') IS NOT NULL)::int::int8", 0, NULL, NULL) == 0)
		return false;
	if (frameq_schema_current())
		return true;
	if (!said)
		ereport(LOG,
				(errmsg("frameq worker: the frameq extension in database \"%s\" is older than its library; no lease expires and no kill order is sent until it is updated",
						frameq_database),
				 errhint("Run ALTER EXTENSION frameq UPDATE in that database.")));
	said = true;
	return false;
}

/*
 * Run one step in a transaction of its own; returns the count it reports.
 * Each step has its own transaction so that one that fails (say the
 * re-arm, on a host row another session keeps locked past lock_timeout)
 * does not take the others with it.
 */
static int64
worker_step(WorkerStep step, TimestampTz leases_since, TimestampTz now, int64 jump)
{
	int64		result = 0;

	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "frameq worker: SPI_connect failed");
	PushActiveSnapshot(GetTransactionSnapshot());
	pgstat_report_activity(STATE_RUNNING, "frameq worker: leases and kill orders");

	/* the longest lease is not known until the schema that records it is there */
	if (step == STEP_LONGEST_LEASE)
		result = -1;
	if (worker_schema_ready())
	{
		if (step == STEP_REARM)
			result = run_step("SELECT frameq._rearm_leases()", 0, NULL, NULL);
		else if (step == STEP_LONGEST_LEASE)
			result = run_step("SELECT frameq._longest_lease_us()", 0, NULL, NULL);
		else if (step == STEP_SHIFT_DEADLINES)
		{
			Oid			types[1] = {INT8OID};
			Datum		args[1] = {Int64GetDatum(jump)};

			result = run_step("SELECT frameq._shift_deadlines(make_interval(secs => $1 / 1e6))",
							  1, types, args);
		}
		else if (step == STEP_TIME_OUT)
		{
			Oid			types[1] = {TIMESTAMPTZOID};
			Datum		args[1] = {TimestampTzGetDatum(now)};

			result = run_step("SELECT frameq._time_out($1)", 1, types, args);
		}
		else if (step == STEP_EXPIRE)
		{
			Oid			types[2] = {TIMESTAMPTZOID, TIMESTAMPTZOID};
			Datum		args[2] = {TimestampTzGetDatum(leases_since), TimestampTzGetDatum(now)};

			result = run_step("SELECT frameq._expire_leases($1, $2)", 2, types, args);
		}
		else if (step == STEP_SEND_KILLS)
		{
			Oid			types[1] = {INT4OID};
			Datum		args[1] = {Int32GetDatum(frameq_kill_resend_interval)};

			result = run_step("SELECT frameq._send_kills($1)", 1, types, args);
		}
		else if (step == STEP_FINISH_JOBS)
			result = run_step("SELECT frameq._finish_checked_jobs()", 0, NULL, NULL);
		else if (step == STEP_SETTLE_LIMITS)
			result = run_step("SELECT frameq._settle_job_limits()", 0, NULL, NULL);
		else if (step == STEP_DELAYS)
			result = run_step("SELECT frameq._delays_ended()", 0, NULL, NULL);
		else if (step == STEP_PRUNE)
		{
			Oid			types[3] = {INT4OID, INT4OID, INT4OID};
			Datum		args[3] = {Int32GetDatum(frameq_retention),
								   Int32GetDatum(PRUNE_BATCH_JOBS),
								   Int32GetDatum(PRUNE_BATCH_TASKS)};

			result = run_step("SELECT frameq._prune_step($1, $2, $3)", 3, types, args);
		}
		else if (step == STEP_COUNT)
			result = run_step("SELECT frameq._count_history()", 0, NULL, NULL);
		else if (step == STEP_COUNT_LIVE)
			result = run_step("SELECT frameq._count_live()", 0, NULL, NULL);
		else
		{
			/*
			 * Rare and never urgent (reserve() does the same before it
			 * walks): give way at once to anyone holding a lock it needs,
			 * a DROP EXTENSION say, rather than queue behind it.
			 */
			(void) run_step("SELECT length(set_config('lock_timeout', '10ms', true))::int8",
							0, NULL, NULL);
			result = run_step("SELECT frameq._requeue_after_rebuild()", 0, NULL, NULL);
			/* and forget the dispatch queue's streams that have no row left */
			(void) run_step("SELECT frameq._dispatch_class_prune()", 0, NULL, NULL);
		}
	}

	SPI_finish();
	PopActiveSnapshot();
	CommitTransactionCommand();
	pgstat_report_stat(true);
	pgstat_report_activity(STATE_IDLE, NULL);
	return result;
}

/*
 * A step that fails (an error no SQL step caught) is logged and abandoned;
 * the others, and the next round a second later, run as usual, so one
 * failure cannot stop leases of other hosts from expiring (as a worker
 * exit and restart would, for bgw_restart_time).  Returns whether the
 * step completed.
 */
static bool
worker_step_guarded(WorkerStep step, TimestampTz leases_since, TimestampTz now,
					int64 jump, int64 *result)
{
	MemoryContext oldcontext = CurrentMemoryContext;
	volatile bool ok = true;

	*result = 0;
	PG_TRY();
	{
		*result = worker_step(step, leases_since, now, jump);
	}
	PG_CATCH();
	{
		MemoryContextSwitchTo(oldcontext);
		HOLD_INTERRUPTS();
		EmitErrorReport();
		FlushErrorState();
		AbortCurrentTransaction();
		RESUME_INTERRUPTS();
		pgstat_report_activity(STATE_IDLE, NULL);
		elog(LOG, "frameq worker: a step of this round failed; the next round runs as usual");
		ok = false;
	}
	PG_END_TRY();
	MemoryContextSwitchTo(oldcontext);
	return ok;
}

/*
 * Prune a batch when one is due.  A pass starts an hour after the last
 * one ended (at once when frameq.retention changes) and goes on a batch
 * at a time, each followed by a pause of PRUNE_PAUSE_FACTOR times its
 * length, until a batch removes nothing.  A failed batch is tried again a
 * minute later.
 */
static void
worker_prune(TimestampTz leases_since, TimestampTz now)
{
	static TimestampTz due = 0;
	static int	retention = 0;
	int64		pruned = 0;
	TimestampTz start;
	TimestampTz end;

	/* a new setting starts a pass at once */
	if (frameq_retention != retention)
	{
		retention = frameq_retention;
		due = 0;
	}
	if (frameq_retention <= 0 || now < due)
		return;
	start = GetCurrentTimestamp();
	if (!worker_step_guarded(STEP_PRUNE, leases_since, now, 0, &pruned))
	{
		due = now + PRUNE_RETRY_INTERVAL;
		return;
	}
	end = GetCurrentTimestamp();
	if (pruned == 0)
		due = end + PRUNE_PASS_INTERVAL;
	else
	{
		due = end + PRUNE_PAUSE_FACTOR * (end - start);
		elog(LOG, "frameq worker: %lld ended job(s) pruned (frameq.retention)", (long long) pruned);
	}
}

/*
 * Refresh the counts of the metrics view: the live tasks when they are 10
 * seconds old, the history when it is a minute old.
 */
static void
worker_count(TimestampTz leases_since, TimestampTz now)
{
	static TimestampTz live_due = 0;
	static TimestampTz due = 0;
	int64		written = 0;

	if (now >= live_due)
	{
		(void) worker_step_guarded(STEP_COUNT_LIVE, leases_since, now, 0, &written);
		live_due = now + COUNT_LIVE_INTERVAL;
	}
	if (now >= due)
	{
		(void) worker_step_guarded(STEP_COUNT, leases_since, now, 0, &written);
		due = now + COUNT_INTERVAL;
	}
}

/*
 * Once after the start: stretch the quarantine to the period of the
 * longest lease a host holds, if that is longer than the current
 * lease_ttl's.  Until this has read it (a failed step, or one without the
 * schema this library needs, is tried again the next round) the
 * quarantine holds; read late, the quarantine still counts from the start.
 */
static void
quarantine_cover_leases(TimestampTz leases_since, TimestampTz now)
{
	int64		longest_us = 0;
	bool		known;
	TimestampTz until;

	SpinLockAcquire(&FrameqWorker->mutex);
	known = FrameqWorker->longest_known;
	SpinLockRelease(&FrameqWorker->mutex);
	if (known ||
		!worker_step_guarded(STEP_LONGEST_LEASE, leases_since, now, 0, &longest_us) ||
		longest_us < 0)
		return;

	SpinLockAcquire(&FrameqWorker->mutex);
	until = FrameqWorker->quarantine_start + frameq_lease_period_for_us(longest_us);
	if (until > FrameqWorker->quarantine_until)
		FrameqWorker->quarantine_until = until;
	else
		longest_us = 0;
	FrameqWorker->longest_known = true;
	SpinLockRelease(&FrameqWorker->mutex);
	if (longest_us > 0 && frameq_quarantine)
		elog(LOG, "frameq worker: a host holds a lease of %.1f s, longer than frameq.lease_ttl; the quarantine lasts %.1f s",
			 longest_us / 1e6, frameq_lease_period_for_us(longest_us) / 1e6);
}

/*
 * One round: re-arm after start or a clock jump, move the deadlines by a
 * jump (*jump microseconds, zeroed once done), expire, time out, send,
 * settle the jobs whose finish or limits on failure were left to us, and
 * make the tasks whose requeue or retry delay has ended bookable.  Returns
 * whether a wanted re-arm is done (if not, the next round tries again;
 * expiry need not wait for it: a start or a clock jump also moved
 * leases_since, before which no lease counts).  Timeouts wait for the
 * deadlines to have moved: until then a forward jump would make them look
 * due.
 */
static bool
worker_round(bool rearm, TimestampTz leases_since, TimestampTz now, bool expire,
			 int64 *jump)
{
	int64		expired = 0;
	int64		sent = 0;
	int64		rearmed = 0;
	int64		shifted = 0;
	int64		timed_out = 0;
	int64		finished = 0;
	int64		settled = 0;
	int64		requeued = 0;
	int64		ended = 0;
	bool		rearm_done = true;

	if (rearm)
		rearm_done = worker_step_guarded(STEP_REARM, leases_since, now, 0, &rearmed);
	quarantine_cover_leases(leases_since, now);
	if (*jump != 0 &&
		worker_step_guarded(STEP_SHIFT_DEADLINES, leases_since, now, *jump, &shifted))
		*jump = 0;
	if (expire)
		(void) worker_step_guarded(STEP_EXPIRE, leases_since, now, 0, &expired);
	if (*jump == 0)
		(void) worker_step_guarded(STEP_TIME_OUT, leases_since, now, 0, &timed_out);
	(void) worker_step_guarded(STEP_SEND_KILLS, leases_since, now, 0, &sent);
	(void) worker_step_guarded(STEP_FINISH_JOBS, leases_since, now, 0, &finished);
	(void) worker_step_guarded(STEP_SETTLE_LIMITS, leases_since, now, 0, &settled);
	(void) worker_step_guarded(STEP_DELAYS, leases_since, now, 0, &ended);
	(void) worker_step_guarded(STEP_REQUEUE, leases_since, now, 0, &requeued);
	worker_prune(leases_since, now);
	worker_count(leases_since, now);

	if (expired > 0)
		elog(LOG, "frameq worker: %lld host lease(s) expired; their procs were released",
			 (long long) expired);
	if (timed_out > 0)
		elog(LOG, "frameq worker: %lld task(s) ran past their timeout; they are ordered killed",
			 (long long) timed_out);
	return rearm_done;
}

/* a worker that exits must not leave its latch to be set by others */
static void
worker_detach(int code, Datum arg)
{
	SpinLockAcquire(&FrameqWorker->mutex);
	if (FrameqWorker->latch == MyLatch)
		FrameqWorker->latch = NULL;
	SpinLockRelease(&FrameqWorker->mutex);
}

void
frameq_worker_main(Datum main_arg)
{
	TimestampTz wall_then;
	instr_time	mono_then;
	bool		rearm = true;
	int64		jump = 0;		/* of the wall clock, not yet applied to deadlines */

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();
	BackgroundWorkerInitializeConnection(frameq_database, NULL, 0);
	pgstat_report_appname("frameq worker");
	worker_session_settings();

	/*
	 * The first worker since shared memory was set up opens the quarantine;
	 * one restarted after an error (shared memory kept) continues it.
	 */
	before_shmem_exit(worker_detach, (Datum) 0);
	SpinLockAcquire(&FrameqWorker->mutex);
	FrameqWorker->latch = MyLatch;
	if (!FrameqWorker->started)
	{
		TimestampTz now = GetCurrentTimestamp();

		FrameqWorker->started = true;
		FrameqWorker->quarantine_start = now;
		FrameqWorker->quarantine_until = now + frameq_lease_period_us();
		FrameqWorker->leases_since = now;
	}
	else
		rearm = false;
	SpinLockRelease(&FrameqWorker->mutex);
	if (rearm && frameq_quarantine)
		elog(LOG, "frameq worker: started; no bookings or lease expiry for %.1f s",
			 frameq_lease_period_us() / 1e6);
	else if (rearm)
		elog(LOG, "frameq worker: started; frameq.quarantine is off");

	wall_then = GetCurrentTimestamp();
	INSTR_TIME_SET_CURRENT(mono_then);

	for (;;)
	{
		TimestampTz wall_now;
		instr_time	mono_now;
		int64		wall_moved;
		int64		mono_moved;
		TimestampTz since;
		TimestampTz until;
		long		timeout;

		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
			worker_session_settings();	/* frameq.lock_wait may have moved */
		}

		/* did the wall clock jump?  then count every lease from now */
		wall_now = GetCurrentTimestamp();
		INSTR_TIME_SET_CURRENT(mono_now);
		wall_moved = wall_now - wall_then;
		INSTR_TIME_SUBTRACT(mono_now, mono_then);
		mono_moved = INSTR_TIME_GET_MICROSEC(mono_now);
		if (wall_moved - mono_moved > USECS_PER_SEC ||
			mono_moved - wall_moved > USECS_PER_SEC)
		{
			elog(LOG, "frameq worker: the wall clock jumped by %.1f s; every lease counts again from now",
				 (wall_moved - mono_moved) / 1e6);
			SpinLockAcquire(&FrameqWorker->mutex);
			FrameqWorker->leases_since = wall_now;
			SpinLockRelease(&FrameqWorker->mutex);
			rearm = true;
			jump += wall_moved - mono_moved;
		}
		wall_then = wall_now;
		INSTR_TIME_SET_CURRENT(mono_then);

		SpinLockAcquire(&FrameqWorker->mutex);
		since = FrameqWorker->leases_since;
		until = FrameqWorker->quarantine_until;
		SpinLockRelease(&FrameqWorker->mutex);

		if (worker_round(rearm, since, wall_now, wall_now >= until || !frameq_quarantine,
						 &jump))
			rearm = false;

		/*
		 * Wake for the next resend, and at least every second for expiry
		 * and timeouts: a round starts a second after the last one started
		 * (less the round's own time), so a deadline is met within a
		 * second, however long the round took (at least 10 ms apart).
		 */
		INSTR_TIME_SET_CURRENT(mono_now);
		INSTR_TIME_SUBTRACT(mono_now, mono_then);
		timeout = Min(frameq_kill_resend_interval, 1000) -
			(long) INSTR_TIME_GET_MILLISEC(mono_now);
		timeout = Max(timeout, 10);
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 timeout, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
	}
}

PG_FUNCTION_INFO_V1(frameq_in_quarantine_sql);

/* frameq._in_quarantine(): for heartbeat, which must not refuse a lease the
 * worker has yet to re-arm after a start */
Datum
frameq_in_quarantine_sql(PG_FUNCTION_ARGS)
{
	frameq_require_preload();
	PG_RETURN_BOOL(frameq_in_quarantine());
}

PG_FUNCTION_INFO_V1(frameq_worker_status);

/* frameq.worker_status(): is the worker up, and until when is the quarantine */
Datum
frameq_worker_status(PG_FUNCTION_ARGS)
{
	TupleDesc	desc;
	Datum		values[4];
	bool		nulls[4] = {0};
	bool		started;
	TimestampTz qstart;
	TimestampTz quntil;
	TimestampTz since;

	frameq_require_preload();
	if (get_call_result_type(fcinfo, NULL, &desc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "frameq: worker_status must return a record");
	SpinLockAcquire(&FrameqWorker->mutex);
	started = FrameqWorker->started;
	qstart = FrameqWorker->quarantine_start;
	quntil = FrameqWorker->quarantine_until;
	since = FrameqWorker->leases_since;
	SpinLockRelease(&FrameqWorker->mutex);

	values[0] = BoolGetDatum(started);
	values[1] = TimestampTzGetDatum(qstart);
	values[2] = TimestampTzGetDatum(quntil);
	values[3] = TimestampTzGetDatum(since);
	if (!started)
		nulls[1] = nulls[2] = nulls[3] = true;
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(desc), values, nulls)));
}
