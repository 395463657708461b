/*-------------------------------------------------------------------------
 *
 * depends.c
 *	  The C half of dependencies (sql/src/depends.sql): whether a
 *	  prerequisite layer or job is done, as the latest committed state says.
 *
 * A transaction that may have ended the last task of a prerequisite layer
 * locks the layer's dependency rows and then asks again whether any task
 * of the layer is unfinished.  In READ COMMITTED the new statement's
 * snapshot follows the lock, but a caller in REPEATABLE READ or
 * SERIALIZABLE keeps its first snapshot, in which the task another
 * transaction ended before it got the lock may still look unfinished: both
 * would leave the dependency unmet for good.  So the question is asked
 * under the latest snapshot, as ri_triggers.c and maybe_finish_job
 * (release.c) do; what the caller then writes is checked against its own
 * snapshot by PostgreSQL as usual (a row changed since fails with 40001).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "utils/snapmgr.h"

#include "frameq.h"

/* a one-row boolean query of one bigint argument, under the latest snapshot */
static bool
ask_latest(SPIPlanPtr *plan, const char *sql, int64 id)
{
	Oid			types[1] = {INT8OID};
	Datum		args[1] = {Int64GetDatum(id)};
	bool		result;

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "frameq: SPI_connect failed");
	if (*plan == NULL)
		*plan = frameq_prepare(sql, 1, types);
	if (SPI_execute_snapshot(*plan, args, NULL, GetLatestSnapshot(), InvalidSnapshot,
							 true, false, 1) != SPI_OK_SELECT || SPI_processed != 1)
		elog(ERROR, "frameq: prerequisite check failed");
	result = frameq_get_bool(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, NULL);
	SPI_finish();
	return result;
}

PG_FUNCTION_INFO_V1(frameq_layer_open_latest);

/* frameq._layer_open_latest(layer): has the layer a task not yet done? */
Datum
frameq_layer_open_latest(PG_FUNCTION_ARGS)
{
	static SPIPlanPtr plan = NULL;

	frameq_require_preload();
	PG_RETURN_BOOL(ask_latest(&plan,
							  "SELECT EXISTS (SELECT 1 FROM frameq.frame"
							  "                WHERE layer = $1 AND prereq"
							  "                  AND state IN ('waiting', 'depend', 'running', 'dead'))",
							  PG_GETARG_INT64(0)));
}

PG_FUNCTION_INFO_V1(frameq_job_open_latest);

/* frameq._job_open_latest(job): is the job not finished, or has it a dead task? */
Datum
frameq_job_open_latest(PG_FUNCTION_ARGS)
{
	static SPIPlanPtr plan = NULL;

	frameq_require_preload();
	PG_RETURN_BOOL(ask_latest(&plan,
							  "SELECT NOT EXISTS (SELECT 1 FROM frameq.job"
							  "                    WHERE id = $1 AND state = 'finished')"
							  "    OR EXISTS (SELECT 1 FROM frameq.frame WHERE job = $1 AND state = 'dead')",
							  PG_GETARG_INT64(0)));
}
