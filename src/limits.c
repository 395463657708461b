/*-------------------------------------------------------------------------
 *
 * limits.c
 *	  A job's limits on failure: a host that failed too many of the job's
 *	  runs gets no more of its tasks (host_failure_limit), and a job with
 *	  too many dead tasks pauses itself (max_dead_frames).
 *
 * Host blocks.  The release of a run that failed on its host (release.c,
 * counts_against_host) counts it in frameq.job_host_failure, in the
 * releasing transaction, with one INSERT ... ON CONFLICT DO UPDATE: two
 * failures of one job on one host at once count two (the second waits for
 * the first's row and adds one to what the first committed).  The failure
 * that reaches the job's limit sets the row's blocked_at, and from then on
 * reserve() gives that host none of the job's tasks (booking.c,
 * book_show).  So that this costs nothing for a job without blocks,
 * reserve() reads the job's host_blocks mark, a column of the job row that
 * its read of the dispatch queue joins already, and only for a marked job
 * looks its own host up in job_host_failure (one key probe per such job
 * a call meets).  The mark has one writer, frameq._job_blocks_mark
 * (procs.sql), which reads the blocks afresh under the job row's lock: the
 * release that blocks a host calls it in its transaction, unblock_host()
 * after it has deleted the count.  Both take the count's row before the
 * job row, so they cannot deadlock, and whichever takes the job row second
 * sees what the other committed.
 *
 * Dead tasks.  A task becoming dead (trigger frame_task_died: its retries
 * used up, a kill order that wants it dead, kill_frame of a task that is
 * not running) pauses its active job if the job's dead tasks now reach
 * its max_dead_frames, with job.paused_reason saying so.  Two tasks dying
 * at once must not both count one short: the count is taken under the
 * job row's lock, with the latest snapshot, so the second to get the lock
 * counts the first's death.  A job without max_dead_frames costs a death
 * one key probe of its job row.  Only a death pauses, so a job resumed
 * with as many dead tasks as its limit, or more, runs until one more of
 * its tasks dies.
 *
 * Neither waits for the job row longer than frameq.lock_wait
 * (frameq_lock_job_row, release.c).  Past that, the job goes to
 * frameq.job_limit_check and the background worker settles it in its
 * next rounds (_settle_job_limits, worker.sql): the host's block then
 * takes effect, or the job pauses, a round or so late.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "lib/stringinfo.h"
#include "utils/builtins.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "frameq.h"

/*
 * The job's limits could not be settled now (its row is held): leave them
 * to the worker.  died: a task died, so the worker must also decide the
 * pause.  A later deferral renews since, which tells the worker's delete
 * that there is something new.  SPI connected.
 */
static void
defer_limits(int64 job, bool died)
{
	static SPIPlanPtr plan = NULL;
	Datum		args[2];

	if (plan == NULL)
	{
		Oid			types[2] = {INT8OID, BOOLOID};

		plan = frameq_prepare("INSERT INTO frameq.job_limit_check AS c (job, died)"
							  " VALUES ($1, $2)"
							  " ON CONFLICT (job) DO UPDATE"
							  "    SET died = c.died OR excluded.died,"
							  "        since = pg_catalog.clock_timestamp()",
							  2, types);
	}
	args[0] = Int64GetDatum(job);
	args[1] = BoolGetDatum(died);
	if (SPI_execute_plan(plan, args, NULL, false, 0) != SPI_OK_INSERT)
		elog(ERROR, "frameq: deferring the job's limits failed");
}

/* a host is newly blocked for the job: mark the job, under its row lock */
static void
mark_blocks(int64 job)
{
	static SPIPlanPtr plan = NULL;
	Datum		args[1];

	if (!frameq_lock_job_row(job))
	{
		defer_limits(job, false);
		return;
	}
	if (plan == NULL)
	{
		Oid			types[1] = {INT8OID};

		plan = frameq_prepare("SELECT frameq._job_blocks_mark($1)", 1, types);
	}
	args[0] = Int64GetDatum(job);
	if (SPI_execute_plan(plan, args, NULL, false, 0) != SPI_OK_SELECT)
		elog(ERROR, "frameq: marking the job's host blocks failed");
}

/*
 * A run of the job's task failed on this host, ending at ended_at: count
 * it, and block the host for the job once the count reaches the job's
 * host_failure_limit (0: never; the count is not kept either).  The
 * failure that blocks the host is the one whose end is blocked_at; later
 * failures of tasks already running there are counted on.  SPI connected.
 */
void
frameq_count_host_failure(int64 job, int32 host, TimestampTz ended_at)
{
	static SPIPlanPtr limit_plan = NULL;
	static SPIPlanPtr count_plan = NULL;
	Datum		args[4];
	int32		limit;

	if (limit_plan == NULL)
	{
		Oid			types[4] = {INT8OID, INT4OID, TIMESTAMPTZOID, INT4OID};

		limit_plan = frameq_prepare("SELECT coalesce(host_failure_limit,"
									"                frameq._default_host_failure_limit())"
									"  FROM frameq.job WHERE id = $1",
									1, types);
		count_plan = frameq_prepare("INSERT INTO frameq.job_host_failure AS f"
									"   (job, host, failures, counted_since, blocked_at)"
									" VALUES ($1, $2, 1, $3, CASE WHEN $4 <= 1 THEN $3 END)"
									" ON CONFLICT (job, host) DO UPDATE"
									"    SET failures = f.failures + 1,"
									"        blocked_at = coalesce(f.blocked_at,"
									"            CASE WHEN f.failures + 1 >= $4 THEN $3 END)"
									" RETURNING f.blocked_at = $3",
									4, types);
	}
	args[0] = Int64GetDatum(job);
	if (SPI_execute_plan(limit_plan, args, NULL, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "frameq: job lookup failed");
	if (SPI_processed != 1)
		return;
	limit = frameq_get_int32(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, NULL);
	if (limit <= 0)
		return;

	args[1] = Int32GetDatum(host);
	args[2] = TimestampTzGetDatum(ended_at);
	args[3] = Int32GetDatum(limit);
	if (SPI_execute_plan(count_plan, args, NULL, false, 0) != SPI_OK_INSERT_RETURNING ||
		SPI_processed != 1)
		elog(ERROR, "frameq: counting a failure of job %lld on host %d failed",
			 (long long) job, host);
	if (frameq_get_bool(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, NULL))
		mark_blocks(job);
}

typedef enum DeadPause
{
	DEAD_NOTHING,				/* no limit, not active, or below it */
	DEAD_PAUSED,
	DEAD_NOT_LOCKED				/* the job row is held by another session */
} DeadPause;

/*
 * Pause the job if it is active and its dead tasks reach its
 * max_dead_frames.  The cheap look first (no limit: nothing to do); then
 * the job row, and the count again with the latest snapshot, which holds
 * every death that got the row before us.  SPI connected.
 */
static DeadPause
pause_for_dead(int64 job)
{
	static SPIPlanPtr limit_plan = NULL;
	static SPIPlanPtr count_plan = NULL;
	static SPIPlanPtr pause_plan = NULL;
	Datum		args[2];
	HeapTuple	tup;
	TupleDesc	desc;
	int64		dead;
	int32		limit;
	StringInfoData reason;

	if (limit_plan == NULL)
	{
		Oid			types[2] = {INT8OID, TEXTOID};

		limit_plan = frameq_prepare("SELECT 1 FROM frameq.job"
									" WHERE id = $1 AND state = 'active'"
									"   AND max_dead_frames IS NOT NULL",
									1, types);
		count_plan = frameq_prepare("SELECT j.state = 'active' AND j.max_dead_frames IS NOT NULL,"
									"       coalesce(j.max_dead_frames, 0),"
									"       (SELECT count(*) FROM frameq.frame f"
									"         WHERE f.job = j.id AND f.state = 'dead')"
									"  FROM frameq.job j WHERE j.id = $1",
									1, types);
		pause_plan = frameq_prepare("UPDATE frameq.job SET state = 'paused', paused_reason = $2"
									" WHERE id = $1 AND state = 'active'",
									2, types);
	}
	args[0] = Int64GetDatum(job);
	if (SPI_execute_plan(limit_plan, args, NULL, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "frameq: job lookup failed");
	if (SPI_processed == 0)
		return DEAD_NOTHING;
	if (!frameq_lock_job_row(job))
		return DEAD_NOT_LOCKED;
	if (SPI_execute_snapshot(count_plan, args, NULL, GetLatestSnapshot(),
							 InvalidSnapshot, true, false, 1) != SPI_OK_SELECT ||
		SPI_processed != 1)
		elog(ERROR, "frameq: counting the dead tasks of job %lld failed", (long long) job);
	tup = SPI_tuptable->vals[0];
	desc = SPI_tuptable->tupdesc;
	limit = frameq_get_int32(tup, desc, 2, NULL);
	dead = frameq_get_int64(tup, desc, 3, NULL);
	if (!frameq_get_bool(tup, desc, 1, NULL) || dead < limit)
		return DEAD_NOTHING;

	initStringInfo(&reason);
	appendStringInfo(&reason, "max_dead_frames: %lld of its tasks are dead, the limit is %d",
					 (long long) dead, limit);
	args[1] = CStringGetTextDatum(reason.data);
	if (SPI_execute_plan(pause_plan, args, NULL, false, 0) != SPI_OK_UPDATE)
		elog(ERROR, "frameq: pausing job %lld failed", (long long) job);
	return SPI_processed == 1 ? DEAD_PAUSED : DEAD_NOTHING;
}

PG_FUNCTION_INFO_V1(frameq_task_died);

/*
 * Trigger frame_task_died: a task became dead.  Its job may pause now, or,
 * if another session holds the job row, once the worker can tell.
 */
Datum
frameq_task_died(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;
	TupleDesc	desc;
	bool		isnull;
	int64		job;

	if (!CALLED_AS_TRIGGER(fcinfo) || !TRIGGER_FIRED_FOR_ROW(trigdata->tg_event) ||
		!TRIGGER_FIRED_BY_UPDATE(trigdata->tg_event))
		elog(ERROR, "frameq_task_died: not called as a row trigger on update");
	frameq_require_preload();	/* frameq.lock_wait */
	desc = trigdata->tg_relation->rd_att;
	job = DatumGetInt64(heap_getattr(trigdata->tg_newtuple, SPI_fnumber(desc, "job"), desc,
									 &isnull));
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "frameq: SPI_connect failed");
	if (pause_for_dead(job) == DEAD_NOT_LOCKED)
		defer_limits(job, true);
	SPI_finish();
	return PointerGetDatum(NULL);
}

PG_FUNCTION_INFO_V1(frameq_pause_for_dead);

/*
 * frameq._pause_for_dead(job): the worker's half of frame_task_died, for a
 * death it was left (job_limit_check); true if the job paused.  55P03 if
 * the job row is still held, so that the worker asks again.
 */
Datum
frameq_pause_for_dead(PG_FUNCTION_ARGS)
{
	DeadPause	result;

	frameq_require_preload();
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "frameq: SPI_connect failed");
	result = pause_for_dead(PG_GETARG_INT64(0));
	SPI_finish();
	if (result == DEAD_NOT_LOCKED)
		ereport(ERROR,
				(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
				 errmsg("job %lld is locked by another session", (long long) PG_GETARG_INT64(0))));
	PG_RETURN_BOOL(result == DEAD_PAUSED);
}
