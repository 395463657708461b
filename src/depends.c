/*-------------------------------------------------------------------------
 *
 * depends.c
 *	  The C half of dependencies (sql/src/depends.sql): whether a
 *	  prerequisite layer or job is done, as the latest committed state says;
 *	  and the two triggers by which a prerequisite's first end meets the
 *	  tasks found by its numbers (below).
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

#include "access/htup_details.h"
#include "access/xact.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "storage/proc.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/rel.h"
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

/*
 * ---------------------------------------------------------------------
 * A prerequisite's first end meets the tasks found by its numbers
 * (sql/src/depends.sql: frame-by-frame dependencies into an unchunked
 * layer).  The two row triggers of that path are C: it runs in every
 * complete() of such a prerequisite, and PL/pgSQL's cost per call and per
 * statement was most of what it added to one.
 * ---------------------------------------------------------------------
 */

PG_FUNCTION_INFO_V1(frameq_frees_once);

/*
 * BEFORE UPDATE trigger frame_frees_once (WHEN the task ends succeeded or
 * eaten with frees_by_number set): clear it, so that only this end meets
 * the dependents (frame_frees_by_number reads OLD's).
 */
Datum
frameq_frees_once(PG_FUNCTION_ARGS)
{
	TriggerData *td = (TriggerData *) fcinfo->context;
	TupleDesc	desc;
	int			col;
	Datum		value = BoolGetDatum(false);
	bool		isnull = false;

	if (!CALLED_AS_TRIGGER(fcinfo) || !TRIGGER_FIRED_BEFORE(td->tg_event) ||
		!TRIGGER_FIRED_FOR_ROW(td->tg_event) || !TRIGGER_FIRED_BY_UPDATE(td->tg_event))
		elog(ERROR, "frameq: frameq_frees_once must be a BEFORE UPDATE row trigger");
	desc = RelationGetDescr(td->tg_relation);
	col = SPI_fnumber(desc, "frees_by_number");
	if (col <= 0)
		elog(ERROR, "frameq: frame has no column frees_by_number");
	return PointerGetDatum(heap_modify_tuple_by_cols(td->tg_newtuple, desc, 1, &col,
													 &value, &isnull));
}

/* the tasks freed in one layer by one prerequisite's end */
typedef struct FreedLayer
{
	int64		job;
	int64		layer;
	int64		count;
} FreedLayer;

/* a column of the trigger's row */
static Datum
row_value(HeapTuple tup, TupleDesc desc, const char *name, bool *isnull)
{
	int			col = SPI_fnumber(desc, name);

	if (col <= 0)
		elog(ERROR, "frameq: frame has no column %s", name);
	return SPI_getbinval(tup, desc, col, isnull);
}

/* the same for a column a schema before its version lacks: NULL there */
static Datum
row_value_since(HeapTuple tup, TupleDesc desc, const char *name, bool *isnull)
{
	int			col = SPI_fnumber(desc, name);

	if (col <= 0)
	{
		*isnull = true;
		return (Datum) 0;
	}
	return SPI_getbinval(tup, desc, col, isnull);
}

/*
 * Meet, once, the frame-by-frame dependencies found by number on the task
 * that just ended (its layer, its numbers): each task of its numbers in an
 * unchunked layer that waits for its layer (not dropped) counts one fewer,
 * and is 'waiting' when that was its last (the gate, frame_gate, still
 * holds those whose layer waits).  A dependent a concurrent drop_depends()
 * has zeroed is left alone (deps_left > 0, tested again on its latest
 * version).  Each freed task lowers its layer's dispatch hint; each layer
 * with tasks freed is announced as _announce_ready does (not when this
 * transaction released a proc: its frameq_release says it then).
 */
static void
meet_by_number(int64 layer, Datum numbers)
{
	static SPIPlanPtr plan = NULL;
	Datum		args[2];
	FreedLayer *freed;
	int			nfreed = 0;

	if (plan == NULL)
	{
		Oid			types[2] = {INT8OID, INT4ARRAYOID};

		plan = frameq_prepare("UPDATE frameq.frame f"
							  "   SET deps_left = f.deps_left - 1,"
							  "       state = CASE WHEN f.deps_left = 1 AND f.state = 'depend'"
							  "                    THEN 'waiting' ELSE f.state END,"
							  "       version = f.version + CASE WHEN f.deps_left = 1 AND f.state = 'depend'"
							  "                                  THEN 1 ELSE 0 END"
							  "  FROM frameq.depend d"
							  " WHERE d.on_layer = $1 AND d.kind = 'frames' AND NOT d.satisfied"
							  "   AND f.layer = d.layer AND f.number = ANY ($2) AND f.deps_left > 0"
							  " RETURNING f.job, f.layer, f.number,"
							  "           f.deps_left = 0 AND f.state = 'waiting'",
							  2, types);
	}
	args[0] = Int64GetDatum(layer);
	args[1] = numbers;
	if (SPI_execute_plan(plan, args, NULL, false, 0) != SPI_OK_UPDATE_RETURNING)
		elog(ERROR, "frameq: meeting the dependencies found by number failed");
	freed = palloc(sizeof(FreedLayer) * Max(SPI_processed, 1));
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		HeapTuple	tup = SPI_tuptable->vals[i];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		int64		job = frameq_get_int64(tup, desc, 1, NULL);
		int64		dep_layer = frameq_get_int64(tup, desc, 2, NULL);
		int			k;

		if (!frameq_get_bool(tup, desc, 4, NULL))
			continue;
		frameq_dispatch_waiting(dep_layer, frameq_get_int32(tup, desc, 3, NULL));
		for (k = 0; k < nfreed && freed[k].layer != dep_layer; k++)
			;
		if (k == nfreed)
			freed[nfreed++] = (FreedLayer) {job, dep_layer, 0};
		freed[k].count++;
	}
	if (frameq_xact_released())
		return;
	for (int k = 0; k < nfreed; k++)
	{
		static SPIPlanPtr announce = NULL;
		Datum		a[3];

		if (announce == NULL)
		{
			Oid			types[3] = {INT8OID, INT8OID, INT8OID};

			announce = frameq_prepare("SELECT frameq._announce_ready($1, $2, $3)", 3, types);
		}
		a[0] = Int64GetDatum(freed[k].job);
		a[1] = Int64GetDatum(freed[k].layer);
		a[2] = Int64GetDatum(freed[k].count);
		if (SPI_execute_plan(announce, a, NULL, false, 0) != SPI_OK_SELECT)
			elog(ERROR, "frameq: announcing freed tasks failed");
	}
}

PG_FUNCTION_INFO_V1(frameq_frees_by_number);

/*
 * AFTER UPDATE trigger frame_frees_by_number (WHEN a task with
 * frees_by_number ends succeeded or eaten for the first time): see
 * meet_by_number.
 */
Datum
frameq_frees_by_number(PG_FUNCTION_ARGS)
{
	TriggerData *td = (TriggerData *) fcinfo->context;
	TupleDesc	desc;
	HeapTuple	row;
	bool		isnull;
	int64		layer;
	Datum		numbers;

	if (!CALLED_AS_TRIGGER(fcinfo) || !TRIGGER_FIRED_AFTER(td->tg_event) ||
		!TRIGGER_FIRED_FOR_ROW(td->tg_event) || !TRIGGER_FIRED_BY_UPDATE(td->tg_event))
		elog(ERROR, "frameq: frameq_frees_by_number must be an AFTER UPDATE row trigger");
	desc = RelationGetDescr(td->tg_relation);
	row = td->tg_newtuple;
	layer = DatumGetInt64(row_value(row, desc, "layer", &isnull));
	numbers = row_value(row, desc, "numbers", &isnull);
	if (isnull)
	{
		Datum		number = row_value(row, desc, "number", &isnull);

		numbers = PointerGetDatum(construct_array(&number, 1, INT4OID, 4, true, TYPALIGN_INT));
	}
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "frameq: SPI_connect failed");
	meet_by_number(layer, numbers);
	SPI_finish();
	return PointerGetDatum(NULL);
}

/*
 * ---------------------------------------------------------------------
 * The gate (trigger frame_gate; the argument is sql/src/depends.sql's,
 * at its declaration): a task made waiting that something still holds is
 * 'depend' instead, and one that stays waiting has its layer queued.  C
 * for the same reason as the triggers above: every task made waiting
 * passes it.
 * ---------------------------------------------------------------------
 */

/* the row with its state set to 'depend' */
static HeapTuple
held_back(HeapTuple row, TupleDesc desc)
{
	int			col = SPI_fnumber(desc, "state");
	Datum		value = CStringGetTextDatum("depend");
	bool		isnull = false;

	return heap_modify_tuple_by_cols(row, desc, 1, &col, &value, &isnull);
}

/*
 * The layer's count of unmet dependencies, and whether it has its queue
 * rows at its job's priority for every tag, of its current values (a
 * set_layer writes new ones), or is paused and needs none: under the
 * job's dispatch lock, read in a statement of its own (its snapshot
 * follows the lock).
 */
static void
read_layer_held(int64 layer, int32 *unmet, bool *queued)
{
	static SPIPlanPtr plan = NULL;
	Datum		args[1];

	if (plan == NULL)
	{
		Oid			types[1] = {INT8OID};

		plan = frameq_prepare_options(
			"SELECT l.deps_left,"
			"       l.paused OR"
			"       NOT EXISTS (SELECT 1 FROM unnest(CASE WHEN cardinality(l.tags) = 0"
			"                                             THEN ARRAY['']::text[] ELSE l.tags END) t(tag)"
			"                    WHERE NOT EXISTS (SELECT 1 FROM frameq.dispatch_queue q"
			"                                       WHERE q.layer = l.id AND q.tag = t.tag"
			"                                         AND q.priority = j.priority"
			"                                         AND q.memory = l.memory AND q.min_cc = l.min_cc"
			"                                         AND q.gpus = l.gpus AND q.gpu_memory = l.gpu_memory"
			"                                         AND q.dispatch_order = l.dispatch_order))"
			"  FROM frameq.layer l JOIN frameq.job j ON j.id = l.job"
			" WHERE l.id = $1",
			1, types, CURSOR_OPT_GENERIC_PLAN);
	}
	args[0] = Int64GetDatum(layer);
	if (SPI_execute_plan(plan, args, NULL, false, 1) != SPI_OK_SELECT || SPI_processed != 1)
		elog(ERROR, "frameq: the gate's read of layer %lld failed", (long long) layer);
	*unmet = frameq_get_int32(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, NULL);
	*queued = frameq_get_bool(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, NULL);
}

/* the layer's count read under FOR SHARE: waits for whoever changes it */
static int32
read_layer_locked(int64 layer)
{
	static SPIPlanPtr plan = NULL;
	Datum		args[1];

	if (plan == NULL)
	{
		Oid			types[1] = {INT8OID};

		plan = frameq_prepare_options("SELECT l.deps_left FROM frameq.layer l WHERE l.id = $1 FOR SHARE",
									  1, types, CURSOR_OPT_GENERIC_PLAN);
	}
	args[0] = Int64GetDatum(layer);
	if (SPI_execute_plan(plan, args, NULL, false, 1) != SPI_OK_SELECT || SPI_processed != 1)
		elog(ERROR, "frameq: the gate's locked read of layer %lld failed", (long long) layer);
	return frameq_get_int32(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, NULL);
}

static void
queue_layer(int64 layer)
{
	static SPIPlanPtr plan = NULL;
	Datum		args[1];

	if (plan == NULL)
	{
		Oid			types[1] = {INT8OID};

		plan = frameq_prepare("SELECT frameq._queue_layers(ARRAY[$1])", 1, types);
	}
	args[0] = Int64GetDatum(layer);
	if (SPI_execute_plan(plan, args, NULL, false, 0) != SPI_OK_SELECT)
		elog(ERROR, "frameq: queueing layer %lld failed", (long long) layer);
}

/*
 * A task raised to this memory by an OOM retry: its own size's row.  Not
 * folded into queue_layer: that one's call is also right for a schema
 * before 0.6.0 (whose _queue_layers takes the layers only), which this
 * library's triggers meet until ALTER EXTENSION UPDATE; a raised task
 * exists only from 0.6.0.
 */
static void
queue_raised(int64 layer, int64 memory)
{
	static SPIPlanPtr plan = NULL;
	Datum		args[2];

	if (plan == NULL)
	{
		Oid			types[2] = {INT8OID, INT8OID};

		plan = frameq_prepare("SELECT frameq._queue_layers('{}', $1, $2)", 2, types);
	}
	args[0] = Int64GetDatum(layer);
	args[1] = Int64GetDatum(memory);
	if (SPI_execute_plan(plan, args, NULL, false, 0) != SPI_OK_SELECT)
		elog(ERROR, "frameq: queueing layer %lld failed", (long long) layer);
}

/*
 * The gate's memo for a bulk move.  _move_frames makes many tasks waiting
 * in one statement, most of them of the same layer; between its
 * frameq._gate_memo(true) and (false) the gate reads each layer once.
 * What it read holds for that whole window once the job's dispatch lock
 * is held (in SHARE, for the transaction): the layer's count can be
 * raised only by depend_job, which needs the lock in EXCLUSIVE, and
 * nothing in the window runs it; the queue rows it found, or wrote, are
 * kept by the lock (_queue_layers).  So a task of the layer last read,
 * neither delayed nor raised, is let through as it is.  The memo holds
 * only in the (sub)transaction that turned it on: an error inside the
 * window cannot leave it to a later statement.
 */
static LocalTransactionId memo_lxid = InvalidLocalTransactionId;
static SubTransactionId memo_subxid = InvalidSubTransactionId;
static int64 memo_layer = 0;	/* layer ids start at 1 */

static bool
memo_active(void)
{
	return memo_lxid == MyProc->lxid && memo_subxid == GetCurrentSubTransactionId() &&
		XactIsoLevel == XACT_READ_COMMITTED;
}

PG_FUNCTION_INFO_V1(frameq_gate_memo);

/* frameq._gate_memo(on): open or close the window above */
Datum
frameq_gate_memo(PG_FUNCTION_ARGS)
{
	memo_layer = 0;
	if (PG_GETARG_BOOL(0))
	{
		memo_lxid = MyProc->lxid;
		memo_subxid = GetCurrentSubTransactionId();
	}
	else
		memo_lxid = InvalidLocalTransactionId;
	PG_RETURN_VOID();
}

/* a task neither delayed nor raised by an OOM retry: booked from its layer's row */
static bool
plain_task(HeapTuple row, TupleDesc desc)
{
	bool		isnull;
	bool		unraised;

	(void) row_value(row, desc, "not_before", &isnull);
	if (!isnull)
		return false;
	(void) row_value_since(row, desc, "memory", &unraised);	/* 0.6.0 */
	return unraised;
}

PG_FUNCTION_INFO_V1(frameq_frame_gate);

/* BEFORE UPDATE trigger frame_gate (WHEN a task becomes waiting) */
Datum
frameq_frame_gate(PG_FUNCTION_ARGS)
{
	TriggerData *td = (TriggerData *) fcinfo->context;
	TupleDesc	desc;
	HeapTuple	row;
	bool		isnull;
	int64		job;
	int64		layer;
	bool		held;
	int32		unmet = 0;
	bool		queued = false;

	if (!CALLED_AS_TRIGGER(fcinfo) || !TRIGGER_FIRED_BEFORE(td->tg_event) ||
		!TRIGGER_FIRED_FOR_ROW(td->tg_event) || !TRIGGER_FIRED_BY_UPDATE(td->tg_event))
		elog(ERROR, "frameq: frameq_frame_gate must be a BEFORE UPDATE row trigger");
	desc = RelationGetDescr(td->tg_relation);
	row = td->tg_newtuple;
	if (DatumGetInt32(row_value(row, desc, "deps_left", &isnull)) > 0)
		return PointerGetDatum(held_back(row, desc));
	job = DatumGetInt64(row_value(row, desc, "job", &isnull));
	layer = DatumGetInt64(row_value(row, desc, "layer", &isnull));
	if (layer == memo_layer && memo_active() && plain_task(row, desc))
		return PointerGetDatum(row);

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "frameq: SPI_connect failed");
	held = XactIsoLevel == XACT_READ_COMMITTED && frameq_hold_job(job);
	if (held)
		read_layer_held(layer, &unmet, &queued);
	if (!held || unmet > 0)
	{
		if (read_layer_locked(layer) > 0)
		{
			SPI_finish();
			return PointerGetDatum(held_back(row, desc));
		}
		queued = false;
	}
	/*
	 * A delayed task is not bookable yet: the worker queues it when it is.
	 * A task whose memory an OOM raised is booked from a row of its size,
	 * whether or not the layer's own row is there.
	 */
	(void) row_value(row, desc, "not_before", &isnull);
	if (isnull)
	{
		bool		unraised;
		Datum		memory = row_value_since(row, desc, "memory", &unraised);	/* 0.6.0 */

		if (!unraised)
			queue_raised(layer, DatumGetInt64(memory));
		else
		{
			if (!queued)
				queue_layer(layer);
			/* read under the lock, and queued: the memo may keep it */
			if (held && memo_active())
				memo_layer = layer;
		}
	}
	SPI_finish();
	return PointerGetDatum(row);
}
