/*-------------------------------------------------------------------------
 *
 * keys.c
 *	  The C half of what frame's foreign keys would guard
 *	  (sql/src/procs.sql, "What frame's keys would guard"): whether frames
 *	  name a layer, by the latest committed state.
 *
 * A layer's delete, renumbering or move, and a truncate of job or layer,
 * is refused while frames name the layer.  An insert of frames holds each
 * layer it names (FOR KEY SHARE) until it commits, so such a change waits
 * for it; then, in READ COMMITTED, the guard's next statement sees its
 * frames.  A transaction in REPEATABLE READ or SERIALIZABLE keeps its
 * first snapshot, in which they are not there, and would go on.  So the
 * guard asks under the latest snapshot, after making its own statement's
 * changes visible, as a foreign key's check does (ri_triggers.c,
 * ri_PerformCheck).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "utils/snapmgr.h"

#include "frameq.h"

PG_FUNCTION_INFO_V1(frameq_layer_framed_latest);

/*
 * frameq._layer_framed_latest(layers bigint[]) → bigint: one of these
 * layers that a frame names, or NULL if none is; with NULL, the layer of
 * any frame (is there a frame at all?).
 */
Datum
frameq_layer_framed_latest(PG_FUNCTION_ARGS)
{
	static SPIPlanPtr some_plan = NULL;
	static SPIPlanPtr any_plan = NULL;
	Oid			types[1] = {INT8ARRAYOID};
	Datum		args[1];
	SPIPlanPtr	plan;
	bool		isnull = true;
	int64		layer = 0;

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "frameq: SPI_connect failed");
	if (PG_ARGISNULL(0))
	{
		if (any_plan == NULL)
			any_plan = frameq_prepare("SELECT f.layer FROM frameq.frame f LIMIT 1", 0, NULL);
		plan = any_plan;
	}
	else
	{
		if (some_plan == NULL)
			some_plan = frameq_prepare("SELECT x.layer FROM pg_catalog.unnest($1) x(layer)"
									   " WHERE EXISTS (SELECT 1 FROM frameq.frame f"
									   "                WHERE f.layer OPERATOR(pg_catalog.=) x.layer)"
									   " LIMIT 1", 1, types);
		plan = some_plan;
		args[0] = PG_GETARG_DATUM(0);
	}
	/* this statement's own deletes too (a layer deleted with its frames) */
	CommandCounterIncrement();
	if (SPI_execute_snapshot(plan, args, NULL, GetLatestSnapshot(), InvalidSnapshot,
							 true, false, 1) != SPI_OK_SELECT)
		elog(ERROR, "frameq: frame key check failed");
	if (SPI_processed == 1)
		layer = frameq_get_int64(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
	SPI_finish();
	if (isnull)
		PG_RETURN_NULL();
	PG_RETURN_INT64(layer);
}
