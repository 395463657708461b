/*-------------------------------------------------------------------------
 *
 * release.c
 *	  The proc table's triggers, complete(), and releasing a proc.
 *
 * The triggers on frameq.proc are the one place where everything that
 * follows a booking's life is kept in step, so that no path can forget a
 * part of it:
 *
 *	insert: charge the caps ledger (or adopt the charge reserve() took),
 *			take the host's free capacity with a guarded update, open the
 *			run record;
 *	delete: release the caps (applied when the transaction commits), give
 *			the host its capacity back, close the run record, count a
 *			failed run against its host for the job (limits.c), move the
 *			frame to its next state, finish the job if nothing of it is
 *			left, and send one frameq_release notification.
 *
 * So a DELETE of a proc is a release by construction.  Whoever deletes
 * says why through a ReleaseContext (frameq_release_with); a bare DELETE by
 * an operator counts as an operator release that puts the frame back in
 * the queue (or applies the kill order's wanted state).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "commands/async.h"
#include "commands/trigger.h"
#include "executor/executor.h"
#include "fmgr.h"
#include "lib/stringinfo.h"
#include "storage/proc.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"

#include "frameq.h"

/* why the proc being deleted is released; set by frameq_release_with */
static const ReleaseContext *current_release = NULL;

/*
 * The transaction that released a proc last: one that also frees tasks
 * (a prerequisite's release) announces them on frameq_release, not
 * frameq_ready (sql/src/depends.sql, _free_tasks).
 */
static LocalTransactionId released_lxid = InvalidLocalTransactionId;

/* the proc row, as the triggers read it */
typedef struct ProcRow
{
	int64		id;
	int64		frame;
	int32		host;
	int64		epoch;
	int64		job;
	int64		layer;
	int32		show;
	bool		has_folder;
	int32		folder;
	int32		allocation;
	int			nlimits;
	int32		limits[FRAMEQ_MAX_LAYER_LIMITS];
	Resources	room;			/* cores_cc, memory, gpus, gpu_memory */
	bool		killing;
	char	   *want_state;
	Datum		booked_at;
	Datum		kill_reason;
	bool		kill_reason_null;
	char	   *kill_cause;		/* 'timeout' or 'stalled': a failure of the
								 * render frameq ordered killed; NULL */
} ProcRow;

static Datum
proc_col(HeapTuple tup, TupleDesc desc, const char *name, bool *isnull)
{
	int			attnum = SPI_fnumber(desc, name);

	if (attnum <= 0)
		elog(ERROR, "frameq: proc has no column \"%s\"", name);
	return SPI_getbinval(tup, desc, attnum, isnull);
}

static void
read_proc(HeapTuple tup, TupleDesc desc, ProcRow *p)
{
	bool		isnull;
	Datum		d;
	Datum	   *elems;
	int			nelems;

	p->id = DatumGetInt64(proc_col(tup, desc, "id", &isnull));
	p->frame = DatumGetInt64(proc_col(tup, desc, "frame", &isnull));
	p->host = DatumGetInt32(proc_col(tup, desc, "host", &isnull));
	p->epoch = DatumGetInt64(proc_col(tup, desc, "epoch", &isnull));
	p->job = DatumGetInt64(proc_col(tup, desc, "job", &isnull));
	p->layer = DatumGetInt64(proc_col(tup, desc, "layer", &isnull));
	p->show = DatumGetInt32(proc_col(tup, desc, "show", &isnull));
	d = proc_col(tup, desc, "folder", &isnull);
	p->has_folder = !isnull;
	p->folder = isnull ? 0 : DatumGetInt32(d);
	p->allocation = DatumGetInt32(proc_col(tup, desc, "allocation", &isnull));
	d = proc_col(tup, desc, "limits", &isnull);
	deconstruct_array(DatumGetArrayTypeP(d), INT4OID, 4, true, TYPALIGN_INT,
					  &elems, NULL, &nelems);
	if (nelems > FRAMEQ_MAX_LAYER_LIMITS)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("a proc may count against at most %d limits", FRAMEQ_MAX_LAYER_LIMITS)));
	p->nlimits = nelems;
	for (int i = 0; i < nelems; i++)
		p->limits[i] = DatumGetInt32(elems[i]);
	p->room.cores_cc = DatumGetInt32(proc_col(tup, desc, "cores_cc", &isnull));
	p->room.memory = DatumGetInt64(proc_col(tup, desc, "memory", &isnull));
	p->room.gpus = DatumGetInt32(proc_col(tup, desc, "gpus", &isnull));
	p->room.gpu_memory = DatumGetInt64(proc_col(tup, desc, "gpu_memory", &isnull));
	p->killing = strcmp(TextDatumGetCString(proc_col(tup, desc, "state", &isnull)),
						"killing") == 0;
	d = proc_col(tup, desc, "want_state", &isnull);
	p->want_state = isnull ? NULL : TextDatumGetCString(d);
	p->booked_at = proc_col(tup, desc, "booked_at", &isnull);
	p->kill_reason = proc_col(tup, desc, "kill_reason", &p->kill_reason_null);
	/* a schema older than 0.5.0 has no kill_cause: none */
	p->kill_cause = NULL;
	if (SPI_fnumber(desc, "kill_cause") > 0)
	{
		d = proc_col(tup, desc, "kill_cause", &isnull);
		if (!isnull && p->killing)
			p->kill_cause = TextDatumGetCString(d);
	}
}

/* the ledger items a proc counts against, caps left open (frameq_ledger_items) */
static int
proc_items(const ProcRow *p, LedgerItem *items)
{
	LedgerKeys	keys = {
		.show = p->show,
		.allocation = p->allocation,
		.has_folder = p->has_folder,
		.folder = p->folder,
		.job = p->job,
		.nlimits = p->nlimits,
		.limits = p->limits,
	};

	return frameq_ledger_items(items, &keys, NULL);
}

/*
 * A waiting frame (locked) that is delayed (frame.not_before) is not
 * bookable yet, not even by a direct INSERT.  An older schema, which a
 * direct INSERT may meet before ALTER EXTENSION UPDATE, has no delays.
 */
static void
refuse_delayed(int64 frame)
{
	static SPIPlanPtr plan = NULL;
	Datum		args[1];
	bool		isnull;

	if (!frameq_schema_current())
		return;
	if (plan == NULL)
	{
		Oid			types[1] = {INT8OID};

		plan = frameq_prepare("SELECT not_before FROM frameq.frame WHERE id = $1", 1, types);
	}
	args[0] = Int64GetDatum(frame);
	if (SPI_execute_plan(plan, args, NULL, true, 1) != SPI_OK_SELECT || SPI_processed != 1)
		elog(ERROR, "frameq: frame %lld not found", (long long) frame);
	(void) SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
	if (!isnull)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("frame %lld is delayed until %s and cannot be booked yet", (long long) frame,
						SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1)),
				 errhint("retry_frame() ends its delay at once.")));
}

/*
 * A proc inserted by something other than reserve() must describe its frame
 * truthfully, and its frame must be bookable: reserve() has checked both
 * already, a direct INSERT has not.  Start the frame as reserve() would.
 */
static void
check_direct_insert(const ProcRow *p)
{
	static SPIPlanPtr plan = NULL;
	static SPIPlanPtr start_plan = NULL;
	Datum		args[2];
	HeapTuple	tup;
	TupleDesc	desc;
	char	   *state;
	bool		folder_null;
	int32		folder;

	if (plan == NULL)
	{
		Oid			types[2] = {INT8OID, INT4OID};

		plan = frameq_prepare("SELECT f.state, f.job, f.layer, j.show, j.folder, h.allocation"
							  "  FROM frameq.frame f"
							  "  JOIN frameq.job j ON j.id = f.job"
							  "  JOIN frameq.host h ON h.id = $2"
							  " WHERE f.id = $1"
							  "   FOR NO KEY UPDATE OF f",
							  2, types);
		start_plan = frameq_prepare("UPDATE frameq.frame"
									"   SET state = 'running', version = version + 1,"
									"       attempts = attempts + 1"
									" WHERE id = $1",
									1, types);
	}
	args[0] = Int64GetDatum(p->frame);
	args[1] = Int32GetDatum(p->host);
	if (SPI_execute_plan(plan, args, NULL, false, 1) != SPI_OK_SELECT)
		elog(ERROR, "frameq: frame lookup failed");
	/* proc has no foreign keys (see the schema): this is the check */
	if (SPI_processed != 1)
		ereport(ERROR,
				(errcode(ERRCODE_FOREIGN_KEY_VIOLATION),
				 errmsg("proc %lld names frame %lld and host %d, and one of them does not exist",
						(long long) p->id, (long long) p->frame, p->host)));
	tup = SPI_tuptable->vals[0];
	desc = SPI_tuptable->tupdesc;
	state = SPI_getvalue(tup, desc, 1);
	folder = frameq_get_int32(tup, desc, 5, &folder_null);
	if (frameq_get_int64(tup, desc, 2, NULL) != p->job ||
		frameq_get_int64(tup, desc, 3, NULL) != p->layer ||
		frameq_get_int32(tup, desc, 4, NULL) != p->show ||
		folder_null == p->has_folder || (!folder_null && folder != p->folder) ||
		frameq_get_int32(tup, desc, 6, NULL) != p->allocation)
		ereport(ERROR,
				(errcode(ERRCODE_INTEGRITY_CONSTRAINT_VIOLATION),
				 errmsg("proc %lld does not carry the job, layer, show, folder and allocation of frame %lld and host %d",
						(long long) p->id, (long long) p->frame, p->host)));
	if (strcmp(state, "waiting") == 0)
	{
		refuse_delayed(p->frame);
		if (SPI_execute_plan(start_plan, args, NULL, false, 0) != SPI_OK_UPDATE)
			elog(ERROR, "frameq: frame start failed");
	}
	else if (strcmp(state, "running") != 0)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("frame %lld is %s and cannot be booked", (long long) p->frame, state)));
}

/*
 * A proc inserted by something other than reserve(): look its caps up and
 * charge them here, refusing the insert if any would be exceeded.
 */
static void
charge_direct_insert(const ProcRow *p, LedgerItem *items, int nitems)
{
	static SPIPlanPtr plan = NULL;
	static SPIPlanPtr limit_plan = NULL;
	Datum		args[2];
	HeapTuple	tup;
	TupleDesc	desc;
	int			failed;

	check_direct_insert(p);

	if (plan == NULL)
	{
		Oid			types[2] = {INT8OID, INT4OID};

		plan = frameq_prepare("SELECT coalesce(s.burst_cc, 0), coalesce(f.max_cc, -1),"
							  "       coalesce(f.max_gpus, -1), coalesce(j.max_cc, -1),"
							  "       coalesce(j.max_gpus, -1)"
							  "  FROM frameq.job j"
							  "  LEFT JOIN frameq.folder f ON f.id = j.folder"
							  "  LEFT JOIN frameq.subscription s"
							  "         ON s.show = j.show AND s.allocation = $2"
							  " WHERE j.id = $1",
							  2, types);
	}
	if (limit_plan == NULL)
	{
		Oid			types[1] = {INT4OID};

		limit_plan = frameq_prepare("SELECT max_running FROM frameq.limits WHERE id = $1",
									1, types);
	}
	args[0] = Int64GetDatum(p->job);
	args[1] = Int32GetDatum(p->allocation);
	if (SPI_execute_plan(plan, args, NULL, true, 1) != SPI_OK_SELECT || SPI_processed != 1)
		elog(ERROR, "frameq: caps of job %lld not found", (long long) p->job);
	tup = SPI_tuptable->vals[0];
	desc = SPI_tuptable->tupdesc;
	for (int i = 0; i < nitems; i++)
	{
		switch (items[i].kind)
		{
			case LEDGER_SUBSCRIPTION:
				items[i].cap_cc = frameq_get_int32(tup, desc, 1, NULL);
				break;
			case LEDGER_FOLDER:
				items[i].cap_cc = frameq_get_int32(tup, desc, 2, NULL);
				items[i].cap_gpus = frameq_get_int32(tup, desc, 3, NULL);
				break;
			case LEDGER_JOB:
				items[i].cap_cc = frameq_get_int32(tup, desc, 4, NULL);
				items[i].cap_gpus = frameq_get_int32(tup, desc, 5, NULL);
				break;
			case LEDGER_LIMIT:
				break;
		}
	}
	for (int i = 0; i < nitems; i++)
	{
		if (items[i].kind != LEDGER_LIMIT)
			continue;
		args[0] = Int32GetDatum((int32) items[i].id);
		if (SPI_execute_plan(limit_plan, args, NULL, true, 1) != SPI_OK_SELECT ||
			SPI_processed != 1)
			elog(ERROR, "frameq: limit %lld not found", (long long) items[i].id);
		items[i].cap_running = frameq_get_int32(SPI_tuptable->vals[0],
												SPI_tuptable->tupdesc, 1, NULL);
	}

	failed = frameq_ledger_try_charge(items, nitems, p->room.cores_cc, p->room.gpus);
	if (failed >= 0)
		ereport(ERROR,
				(errcode(ERRCODE_FRAMEQ_CAP_EXCEEDED),
				 errmsg("booking proc %lld would exceed a cap", (long long) p->id),
				 errdetail("The cap of %s %lld is reached.",
						   items[failed].kind == LEDGER_SUBSCRIPTION ? "subscription of show" :
						   items[failed].kind == LEDGER_FOLDER ? "folder" :
						   items[failed].kind == LEDGER_JOB ? "job" : "limit",
						   (long long) items[failed].id)));
}

PG_FUNCTION_INFO_V1(frameq_proc_before);

/*
 * Before any statement that writes procs, the ledger must be valid: a
 * rebuild needs every proc writer out of the way, so a writer that sat in
 * its transaction with the ledger still invalid (after a start) would hold
 * up every booking and release.  Updates (kill orders) do not change what
 * the ledger counts; inserts and deletes do, and are noted.
 */
Datum
frameq_proc_before(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;

	if (!CALLED_AS_TRIGGER(fcinfo))
		elog(ERROR, "frameq_proc_before: not called by trigger manager");
	if (TRIGGER_FIRED_BY_UPDATE(trigdata->tg_event))
		frameq_ledger_ensure_valid();
	else
		frameq_ledger_note_proc_write();
	return PointerGetDatum(NULL);
}

/* one host's share of the procs an INSERT added */
typedef struct HostTake
{
	int32		host;
	Resources	room;
} HostTake;

/* the procs of one insert statement: each host's room taken, each run opened */
typedef struct InsertedProcs
{
	HostTake   *hosts;
	int			nhosts;
	Datum	   *run_cols[9];	/* frameq.run's columns, one array each */
	int			nrows;
} InsertedProcs;

/* add one inserted proc to its host's total and to the run records */
static void
add_inserted(InsertedProcs *ins, const ProcRow *p)
{
	int			h;

	for (h = 0; h < ins->nhosts && ins->hosts[h].host != p->host; h++)
		;
	if (h == ins->nhosts)
		ins->hosts[ins->nhosts++] = (HostTake) {p->host, {0, 0, 0, 0}};
	if (!resources_add(&ins->hosts[h].room, &p->room))
		ereport(ERROR,
				(errcode(ERRCODE_FRAMEQ_HOST_FULL),
				 errmsg("host %d has no room for the procs inserted", p->host),
				 errdetail("Together they need more than any host can have.")));

	ins->run_cols[0][ins->nrows] = Int64GetDatum(p->id);
	ins->run_cols[1][ins->nrows] = Int64GetDatum(p->frame);
	ins->run_cols[2][ins->nrows] = Int64GetDatum(p->job);
	ins->run_cols[3][ins->nrows] = Int32GetDatum(p->host);
	ins->run_cols[4][ins->nrows] = Int64GetDatum(p->epoch);
	ins->run_cols[5][ins->nrows] = Int32GetDatum(p->room.cores_cc);
	ins->run_cols[6][ins->nrows] = Int64GetDatum(p->room.memory);
	ins->run_cols[7][ins->nrows] = Int32GetDatum(p->room.gpus);
	ins->run_cols[8][ins->nrows] = p->booked_at;
	ins->nrows++;
}

/*
 * The one writer of a host row's idle room (idle_cc, idle_memory,
 * idle_gpus, idle_gpu_memory): give r back to it (a release), or take r
 * from it (procs inserted), but only if all of r fits.  Returns false if
 * a take did not fit, having changed nothing.  One statement does both:
 * it adds r, or its negative, and keeps every field at zero or more.
 */
static bool
move_host_room(int32 host, const Resources *r, bool take)
{
	static SPIPlanPtr plan = NULL;
	int64		sign = take ? -1 : 1;
	Datum		args[5];
	int			ret;

	if (plan == NULL)
	{
		Oid			types[5] = {INT4OID, INT8OID, INT8OID, INT8OID, INT8OID};

		plan = frameq_prepare("UPDATE frameq.host"
							  "   SET idle_cc = idle_cc + $2, idle_memory = idle_memory + $3,"
							  "       idle_gpus = idle_gpus + $4,"
							  "       idle_gpu_memory = idle_gpu_memory + $5"
							  " WHERE id = $1 AND idle_cc + $2 >= 0 AND idle_memory + $3 >= 0"
							  "   AND idle_gpus + $4 >= 0 AND idle_gpu_memory + $5 >= 0",
							  5, types);
	}
	args[0] = Int32GetDatum(host);
	args[1] = Int64GetDatum(sign * r->cores_cc);
	args[2] = Int64GetDatum(sign * r->memory);
	args[3] = Int64GetDatum(sign * r->gpus);
	args[4] = Int64GetDatum(sign * r->gpu_memory);
	ret = SPI_execute_plan(plan, args, NULL, false, 0);
	if (ret != SPI_OK_UPDATE)
		elog(ERROR, "frameq: host capacity update failed: %s", SPI_result_code_string(ret));
	if (SPI_processed != 1 && !take)
		elog(ERROR, "frameq: host capacity release failed for host %d", host);
	return SPI_processed == 1;
}

/* take each host's room for its new procs, all or nothing (FQ005) */
static void
take_host_room(const InsertedProcs *ins)
{
	for (int h = 0; h < ins->nhosts; h++)
	{
		const HostTake *t = &ins->hosts[h];

		if (!move_host_room(t->host, &t->room, true))
			ereport(ERROR,
					(errcode(ERRCODE_FRAMEQ_HOST_FULL),
					 errmsg("host %d has no room for the procs inserted", t->host),
					 errdetail("They need %lld cores (in hundredths), %lld bytes of memory, %lld gpus and %lld bytes of gpu memory.",
							   (long long) t->room.cores_cc, (long long) t->room.memory,
							   (long long) t->room.gpus, (long long) t->room.gpu_memory)));
	}
}

/*
 * Open every new proc's run record, in one statement: one row as VALUES
 * (reserve(..., 1), a direct insert), several by unnest of a column array
 * each (the function scan and its tuple stores only when they pay).
 */
static void
open_runs(const InsertedProcs *ins)
{
	static SPIPlanPtr one_plan = NULL;
	static SPIPlanPtr many_plan = NULL;
	static const Oid elem_types[9] = {INT8OID, INT8OID, INT8OID, INT4OID, INT8OID,
	INT4OID, INT8OID, INT4OID, TIMESTAMPTZOID};
	SPIPlanPtr	plan;
	Datum		args[9];
	int			ret;

	if (ins->nrows == 1 && one_plan == NULL)
	{
		Oid			types[9];

		memcpy(types, elem_types, sizeof(types));
		one_plan = frameq_prepare("INSERT INTO frameq.run"
								  " (proc, frame, job, host, epoch, cores_cc, memory, gpus,"
								  "  started_at)"
								  " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
								  9, types);
	}
	if (ins->nrows > 1 && many_plan == NULL)
	{
		Oid			types[9] = {INT8ARRAYOID, INT8ARRAYOID, INT8ARRAYOID, INT4ARRAYOID,
		INT8ARRAYOID, INT4ARRAYOID, INT8ARRAYOID, INT4ARRAYOID, TIMESTAMPTZARRAYOID};

		many_plan = frameq_prepare("INSERT INTO frameq.run"
								   " (proc, frame, job, host, epoch, cores_cc, memory, gpus,"
								   "  started_at)"
								   " SELECT * FROM unnest($1, $2, $3, $4, $5, $6, $7, $8, $9)",
								   9, types);
	}
	plan = ins->nrows == 1 ? one_plan : many_plan;
	for (int c = 0; c < 9; c++)
	{
		int16		typlen;
		bool		typbyval;
		char		typalign;

		if (ins->nrows == 1)
		{
			args[c] = ins->run_cols[c][0];
			continue;
		}
		get_typlenbyvalalign(elem_types[c], &typlen, &typbyval, &typalign);
		args[c] = PointerGetDatum(construct_array(ins->run_cols[c], ins->nrows, elem_types[c],
												  typlen, typbyval, typalign));
	}
	ret = SPI_execute_plan(plan, args, NULL, false, 0);
	if (ret != SPI_OK_INSERT || SPI_processed != (uint64) ins->nrows)
		elog(ERROR, "frameq: run record insert failed: %s", SPI_result_code_string(ret));
}

PG_FUNCTION_INFO_V1(frameq_proc_after_insert);

/*
 * After an INSERT of procs, once per statement: reserve() inserts all the
 * frames it books from one layer in one statement, so the host's update and
 * the run records cost one statement each, not one per frame.  Every proc
 * is charged (or its charge adopted) before the host is touched.
 */
Datum
frameq_proc_after_insert(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;
	TupleDesc	desc;
	TupleTableSlot *slot;
	int64		rows;
	InsertedProcs ins = {0};

	if (!CALLED_AS_TRIGGER(fcinfo) || trigdata->tg_newtable == NULL)
		elog(ERROR, "frameq_proc_after_insert: not called as a statement trigger with a new table");
	frameq_require_preload();	/* before the ledger's shared memory */

	desc = trigdata->tg_relation->rd_att;
	rows = tuplestore_tuple_count(trigdata->tg_newtable);
	if (rows == 0)
		return PointerGetDatum(NULL);
	if (rows > MaxAllocSize / sizeof(HostTake))
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("too many procs in one insert: %lld", (long long) rows)));
	for (int c = 0; c < 9; c++)
		ins.run_cols[c] = palloc(sizeof(Datum) * rows);
	ins.hosts = palloc(sizeof(HostTake) * rows);

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "frameq: SPI_connect failed");

	/* each proc's caps (unless reserve() charged it already), host and run */
	slot = MakeSingleTupleTableSlot(desc, &TTSOpsMinimalTuple);
	tuplestore_rescan(trigdata->tg_newtable);
	while (tuplestore_gettupleslot(trigdata->tg_newtable, true, false, slot))
	{
		bool		should_free;
		HeapTuple	tup = ExecFetchSlotHeapTuple(slot, false, &should_free);
		ProcRow		p;
		LedgerItem	items[FRAMEQ_MAX_PROC_ITEMS];

		read_proc(tup, desc, &p);
		if (!frameq_adopt_precharge(p.id))
			charge_direct_insert(&p, items, proc_items(&p, items));
		add_inserted(&ins, &p);
		if (should_free)
			heap_freetuple(tup);
	}
	ExecDropSingleTupleTableSlot(slot);

	take_host_room(&ins);
	open_runs(&ins);

	SPI_finish();
	return PointerGetDatum(NULL);
}

/* a job row lock, as frameq_bounded_wait runs it */
typedef struct JobRowLock
{
	SPIPlanPtr	plan;
	Datum	   *args;
} JobRowLock;

static void
lock_job_row(void *arg)
{
	JobRowLock *l = (JobRowLock *) arg;

	if (SPI_execute_plan(l->plan, l->args, NULL, false, 1) != SPI_OK_SELECT)
		elog(ERROR, "frameq: job lock failed");
}

/*
 * Take the job's row (FOR NO KEY UPDATE) for this transaction, waiting at
 * most frameq.lock_wait; false if another session kept it longer.  One of
 * frameq's own holders is done long before, so such a session is a role
 * holding its transaction open (a host's agent after its own complete(), a
 * submitter after set_job()), and a release must not wait for it: the
 * caller leaves what needed the row to the background worker.  The row
 * free, as it nearly always is, costs one try and no subtransaction.  SPI
 * connected.
 */
bool
frameq_lock_job_row(int64 job)
{
	static SPIPlanPtr try_plan = NULL;
	static SPIPlanPtr lock_plan = NULL;
	Datum		args[1];
	JobRowLock	lock;

	if (try_plan == NULL)
	{
		Oid			types[1] = {INT8OID};

		try_plan = frameq_prepare("SELECT 1 FROM frameq.job WHERE id = $1"
								  "   FOR NO KEY UPDATE SKIP LOCKED",
								  1, types);
		lock_plan = frameq_prepare("SELECT 1 FROM frameq.job WHERE id = $1 FOR NO KEY UPDATE",
								   1, types);
	}
	args[0] = Int64GetDatum(job);
	if (SPI_execute_plan(try_plan, args, NULL, false, 1) != SPI_OK_SELECT)
		elog(ERROR, "frameq: job lock failed");
	if (SPI_processed > 0)
		return true;
	lock.plan = lock_plan;
	lock.args = args;
	return frameq_bounded_wait(lock_job_row, &lock, frameq_lock_wait);
}

/*
 * The frame's job may be finished now.  If another of its frames is
 * waiting, it is not (whoever changes a waiting frame other than by
 * booking it, an operator, finishes the job itself after waiting for the
 * completions in flight).  Otherwise completions, retries and operator
 * actions may be committing concurrently and each would see the others'
 * frames as they were, so take the job's row lock and look again with the
 * latest snapshot: the last of them to get the lock sees the others'
 * commits.  retry_frame holds the job row in SHARE mode while it puts a
 * frame back, so a finish cannot slip past it.  Only a job's last frames
 * ever take this lock, and none waits for it longer than frameq.lock_wait:
 * past that, the job goes to frameq.job_finish_check for the background
 * worker (frameq._finish_checked_jobs), and check() allows the job to look
 * unfinished while it is there.
 *
 * Which of its tasks are live is read as the job's lowest and highest
 * state in the index frame_live ('depend' < 'running' < 'waiting'): two
 * ordered probes that only an index can answer cheaply.  An EXISTS here
 * was planned, for a job holding much of the table, as a sequential scan
 * that stopped at its first match: past every row stored before the job's
 * (5 ms a complete() with 30,000 rows ahead).  The first look asks for
 * the highest state first, and for a 'depend' one only when no task is
 * waiting, and then for nothing above 'depend': the job's 'running'
 * entries, which the probe from below would otherwise step over, include
 * those of the frames that this transaction, and others in flight, have
 * just ended, each one a visit to the heap (and, as they become dead, to
 * _bt_killitems).
 */
static void
maybe_finish_job(int64 job)
{
	static SPIPlanPtr waiting_plan = NULL;
	static SPIPlanPtr live_plan = NULL;
	static SPIPlanPtr finish_plan = NULL;
	static SPIPlanPtr defer_plan = NULL;
	Datum		args[1];
	bool		waiting;

	if (live_plan == NULL)
	{
		Oid			types[1] = {INT8OID};

		/* the second probe is an InitPlan: run only if the CASE needs it */
		waiting_plan = frameq_prepare("SELECT CASE WHEN (SELECT state FROM frameq.frame"
									  "                   WHERE job = $1"
									  "                     AND state IN ('waiting', 'depend', 'running')"
									  "                   ORDER BY state DESC LIMIT 1) = 'waiting'"
									  "            THEN true"
									  "            ELSE (SELECT state FROM frameq.frame"
									  "                   WHERE job = $1"
									  "                     AND state IN ('waiting', 'depend', 'running')"
									  "                     AND state <= 'depend'"
									  "                   ORDER BY state LIMIT 1) IS NOT NULL END",
									  1, types);
		live_plan = frameq_prepare("SELECT coalesce(low = 'depend' OR high = 'waiting', false), low IS NOT NULL"
								   "  FROM (SELECT (SELECT state FROM frameq.frame"
								   "                 WHERE job = $1 AND state IN ('waiting', 'depend', 'running')"
								   "                 ORDER BY state LIMIT 1) AS low,"
								   "               (SELECT state FROM frameq.frame"
								   "                 WHERE job = $1 AND state IN ('waiting', 'depend', 'running')"
								   "                 ORDER BY state DESC LIMIT 1) AS high) s",
								   1, types);
		finish_plan = frameq_prepare("UPDATE frameq.job"
									 "   SET state = 'finished', finished_at = clock_timestamp()"
									 " WHERE id = $1 AND state IN ('active', 'paused')",
									 1, types);
	}
	args[0] = Int64GetDatum(job);
	if (SPI_execute_plan(waiting_plan, args, NULL, false, 1) != SPI_OK_SELECT)
		elog(ERROR, "frameq: job liveness check failed");
	waiting = frameq_get_bool(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, NULL);
	if (waiting)
		return;
	if (!frameq_lock_job_row(job))
	{
		/*
		 * Another session has kept the job row past frameq.lock_wait: do
		 * not let it hold up this release; leave the question to the
		 * background worker, which asks it again each round until it gets
		 * the lock.
		 */
		if (defer_plan == NULL)
		{
			Oid			types[1] = {INT8OID};

			/* prepared only when needed: a 0.1.0 schema has no such table */
			defer_plan = frameq_prepare("INSERT INTO frameq.job_finish_check (job) VALUES ($1)"
										" ON CONFLICT DO NOTHING",
										1, types);
		}
		if (SPI_execute_plan(defer_plan, args, NULL, false, 0) != SPI_OK_INSERT)
			elog(ERROR, "frameq: deferring the job's finish failed");
		return;
	}
	if (SPI_execute_snapshot(live_plan, args, NULL, GetLatestSnapshot(),
							 InvalidSnapshot, true, false, 1) != SPI_OK_SELECT)
		elog(ERROR, "frameq: job liveness re-check failed");
	if (frameq_get_bool(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, NULL) ||
		frameq_get_bool(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, NULL))
		return;
	if (SPI_execute_plan(finish_plan, args, NULL, false, 0) != SPI_OK_UPDATE)
		elog(ERROR, "frameq: job finish failed");
}

static bool
state_is_terminal(const char *state)
{
	return strcmp(state, "succeeded") == 0 || strcmp(state, "dead") == 0 ||
		strcmp(state, "eaten") == 0;
}

static void
notify_release(const ProcRow *p, const char *state, const char *reason)
{
	StringInfoData buf;

	initStringInfo(&buf);
	appendStringInfo(&buf,
					 "{\"proc\": %lld, \"frame\": %lld, \"job\": %lld, \"layer\": %lld,"
					 " \"show\": %d, \"folder\": ",
					 (long long) p->id, (long long) p->frame, (long long) p->job,
					 (long long) p->layer, p->show);
	if (p->has_folder)
		appendStringInfo(&buf, "%d", p->folder);
	else
		appendStringInfoString(&buf, "null");
	appendStringInfo(&buf,
					 ", \"host\": %d, \"cores\": %d.%02d, \"gpus\": %d,"
					 " \"state\": \"%s\", \"reason\": \"%s\"}",
					 p->host, p->room.cores_cc / 100, p->room.cores_cc % 100, p->room.gpus,
					 state, reason);
	Async_Notify("frameq_release", buf.data);
}

/*
 * The release of a proc whose job or folder reserve() had parked at its cap
 * (ledger.c, "Parking"): queue the job's layers, or the folder's jobs'
 * layers, again, in this transaction, so that they are back in the
 * dispatch queue when this release commits.  SPI connected.
 */
static void
requeue_parked(const LedgerItem *items, int nitems, uint32 parked)
{
	static SPIPlanPtr job_plan = NULL;
	static SPIPlanPtr folder_plan = NULL;

	if (job_plan == NULL)
	{
		Oid			types[1] = {INT8OID};

		job_plan = frameq_prepare("SELECT frameq._queue_job_waiting($1)", 1, types);
		folder_plan = frameq_prepare("SELECT frameq._queue_folder_waiting($1::int4)", 1, types);
	}
	for (int i = 0; i < nitems; i++)
	{
		Datum		args[1];
		SPIPlanPtr	plan;

		if ((parked & ((uint32) 1 << i)) == 0)
			continue;
		if (items[i].kind == LEDGER_JOB)
			plan = job_plan;
		else if (items[i].kind == LEDGER_FOLDER)
			plan = folder_plan;
		else
			continue;
		args[0] = Int64GetDatum(items[i].id);
		if (SPI_execute_plan(plan, args, NULL, false, 0) != SPI_OK_SELECT)
			elog(ERROR, "frameq: requeue of a parked %s failed",
				 items[i].kind == LEDGER_JOB ? "job" : "folder");
	}
}

/*
 * Close the proc's run record: when, how the render ended, why, and where
 * the frame went.  Returns when it ended.
 */
static TimestampTz
close_run(const ProcRow *p, const ReleaseContext *ctx)
{
	static SPIPlanPtr plan = NULL;
	Datum		args[7];
	char		nulls[7];
	int			ret;
	bool		isnull;

	if (plan == NULL)
	{
		Oid			types[7] = {INT8OID, INT4OID, INT4OID, INT8OID, TEXTOID, TEXTOID,
		TEXTOID};

		plan = frameq_prepare("UPDATE frameq.run"
							  "   SET ended_at = clock_timestamp(), exit_status = $2,"
							  "       exit_signal = $3, max_rss = $4, reason = $5,"
							  "       kill_reason = $6, end_state = $7"
							  " WHERE proc = $1 AND ended_at IS NULL"
							  " RETURNING ended_at",
							  7, types);
	}
	memset(nulls, ' ', sizeof(nulls));
	args[0] = Int64GetDatum(p->id);
	args[1] = Int32GetDatum(ctx->exit_status);
	args[2] = Int32GetDatum(ctx->exit_signal);
	if (!ctx->have_exit)
		nulls[1] = nulls[2] = 'n';
	args[3] = Int64GetDatum(ctx->max_rss);
	if (!ctx->have_rss)
		nulls[3] = 'n';
	args[4] = CStringGetTextDatum(ctx->reason);
	args[5] = p->kill_reason;
	if (p->kill_reason_null)
		nulls[5] = 'n';
	args[6] = CStringGetTextDatum(ctx->new_state);
	ret = SPI_execute_plan(plan, args, nulls, false, 0);
	if (ret != SPI_OK_UPDATE_RETURNING)
		elog(ERROR, "frameq: run record close failed: %s", SPI_result_code_string(ret));
	if (SPI_processed != 1)
		elog(ERROR, "frameq: proc %lld has no open run record", (long long) p->id);
	return DatumGetTimestampTz(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1,
											 &isnull));
}

/*
 * release_frame's statement for a render killed for memory (complete()
 * with oom): the task's memory is set to what its retry needs, and a task
 * that fits no host says so (frame.dead_reason).  args[0] to [2] are
 * release_frame's.
 */
static int
release_oom(const ProcRow *p, const ReleaseContext *ctx, bool delayed, Datum *args)
{
	static SPIPlanPtr plan = NULL;
	char		nulls[6] = "      ";

	if (plan == NULL)
	{
		Oid			types[6] = {INT8OID, TEXTOID, INT4OID, INT8OID, TEXTOID, INT4OID};

		plan = frameq_prepare("UPDATE frameq.frame"
							  "   SET state = $2, retries = retries + $3, memory = $4,"
							  "       dead_reason = $5,"
							  "       not_before = CASE WHEN $6 > 0 THEN clock_timestamp()"
							  "                         + make_interval(secs => $6) END,"
							  "       version = version + 1"
							  " WHERE id = $1 AND state = 'running'"
							  " RETURNING number",
							  6, types);
	}
	args[3] = Int64GetDatum(ctx->memory);
	if (ctx->memory == 0)
		nulls[3] = 'n';
	args[4] = ctx->dead_reason ? CStringGetTextDatum(ctx->dead_reason) : (Datum) 0;
	if (ctx->dead_reason == NULL)
		nulls[4] = 'n';
	args[5] = Int32GetDatum(delayed ? ctx->delay_s : 0);
	return SPI_execute_plan(plan, args, nulls, false, 0);
}

/*
 * Move the proc's frame out of running to its new state, counting a retry
 * if the frame itself failed, or a requeue; a frame back to waiting lowers
 * its layer's dispatch hint, unless it is delayed: then it is not
 * bookable before clock_timestamp() + delay_s (frame.not_before), and the
 * worker lowers the hint when that time comes (sql/src/worker.sql,
 * "Delays").  Only complete() counts requeues or delays, and only on the
 * schema this library was built for (frameq_require_schema): every other
 * release runs the statement that an older schema has the columns for.
 */
static void
release_frame(const ProcRow *p, const ReleaseContext *ctx)
{
	static SPIPlanPtr plan = NULL;
	static SPIPlanPtr requeue_plan = NULL;
	bool		delayed = ctx->delay_s > 0 && strcmp(ctx->new_state, "waiting") == 0;
	Datum		args[6];
	int			ret;

	if (plan == NULL)
	{
		Oid			types[3] = {INT8OID, TEXTOID, INT4OID};

		plan = frameq_prepare("UPDATE frameq.frame"
							  "   SET state = $2, retries = retries + $3,"
							  "       version = version + 1"
							  " WHERE id = $1 AND state = 'running'"
							  " RETURNING number",
							  3, types);
	}
	args[0] = Int64GetDatum(p->frame);
	args[1] = CStringGetTextDatum(ctx->new_state);
	args[2] = Int32GetDatum(ctx->count_retry ? 1 : 0);
	if (ctx->oom_retry)
		ret = release_oom(p, ctx, delayed, args);
	else if (ctx->count_requeue || delayed)
	{
		if (requeue_plan == NULL)
		{
			Oid			types[5] = {INT8OID, TEXTOID, INT4OID, INT4OID, INT4OID};

			requeue_plan = frameq_prepare("UPDATE frameq.frame"
										  "   SET state = $2, retries = retries + $3,"
										  "       requeues = requeues + $4,"
										  "       not_before = CASE WHEN $5 > 0 THEN clock_timestamp()"
										  "                         + make_interval(secs => $5) END,"
										  "       version = version + 1"
										  " WHERE id = $1 AND state = 'running'"
										  " RETURNING number",
										  5, types);
		}
		args[3] = Int32GetDatum(ctx->count_requeue ? 1 : 0);
		args[4] = Int32GetDatum(delayed ? ctx->delay_s : 0);
		ret = SPI_execute_plan(requeue_plan, args, NULL, false, 0);
	}
	else
		ret = SPI_execute_plan(plan, args, NULL, false, 0);
	if (ret != SPI_OK_UPDATE_RETURNING)
		elog(ERROR, "frameq: frame release failed: %s", SPI_result_code_string(ret));
	if (SPI_processed != 1)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("frame %lld of proc %lld is not running", (long long) p->frame,
						(long long) p->id)));
	if (strcmp(ctx->new_state, "waiting") == 0 && !delayed)
		frameq_dispatch_waiting(p->layer,
								frameq_get_int32(SPI_tuptable->vals[0],
												 SPI_tuptable->tupdesc, 1, NULL));
}

/*
 * Does this run's end count against its host for its job
 * (host_failure_limit, limits.c)?  A failure the render reported
 * (complete(): a non-zero exit status or a signal, with no kill order
 * pending, which uses up a retry), and the ends frameq gives a render that
 * misbehaved: timeout, stalled, oom.  Ends that are no fault of the render
 * on that host (killed, host_lost, host_rebooted, lost_by_agent, operator)
 * do not count.  An exit status that asks for a requeue is not the
 * frame's failure either and uses up no retry: the test below on
 * count_retry is the one place that must leave it out.
 */
static bool
counts_against_host(const ReleaseContext *ctx)
{
	if (strcmp(ctx->reason, "completed") == 0)
		return (ctx->exit_status != 0 || ctx->exit_signal != 0) && ctx->count_retry;
	return strcmp(ctx->reason, "timeout") == 0 || strcmp(ctx->reason, "stalled") == 0 ||
		strcmp(ctx->reason, "oom") == 0;
}

/*
 * Where a released frame goes when the releaser does not say (a host-wide
 * release, a bare DELETE): where its kill order wanted it, if it was being
 * killed, else back to waiting.  The one place this rule lives.
 */
static const char *
default_end_state(const ProcRow *p)
{
	return p->killing ? p->want_state : "waiting";
}

PG_FUNCTION_INFO_V1(frameq_proc_after_delete);

Datum
frameq_proc_after_delete(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;
	ProcRow		p;
	LedgerItem	items[FRAMEQ_MAX_PROC_ITEMS];
	int			nitems;
	uint32		parked;
	ReleaseContext ctx;
	TimestampTz ended_at;

	if (!CALLED_AS_TRIGGER(fcinfo))
		elog(ERROR, "frameq_proc_after_delete: not called by trigger manager");
	frameq_require_preload();	/* before the ledger's shared memory */

	read_proc(trigdata->tg_trigtuple, trigdata->tg_relation->rd_att, &p);

	if (current_release != NULL && current_release->proc == p.id)
		ctx = *current_release;
	else
	{
		/* a bare DELETE: an operator release */
		memset(&ctx, 0, sizeof(ctx));
		ctx.proc = p.id;
		ctx.reason = "operator";
	}
	if (ctx.new_state == NULL)
		ctx.new_state = default_end_state(&p);
	if (p.kill_cause != NULL)
	{
		/*
		 * frameq ordered this render killed because it misbehaved (ran past
		 * its timeout, went silent): whatever proves its death, the run
		 * ended for that reason, and it was a failure of the frame, which
		 * goes where the order wanted (_failed_state, when it was made).
		 */
		ctx.reason = p.kill_cause;
		ctx.count_retry = true;
		ctx.new_state = p.want_state;
	}
	released_lxid = MyProc->lxid;

	nitems = proc_items(&p, items);
	parked = frameq_ledger_release(items, nitems, p.room.cores_cc, p.room.gpus);

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "frameq: SPI_connect failed");
	if (parked != 0)
		requeue_parked(items, nitems, parked);

	/* the host gets its room back: a release's first write after the proc */
	move_host_room(p.host, &p.room, false);
	ended_at = close_run(&p, &ctx);
	/* the job's failure count on the host, before the frame (lock order) */
	if (counts_against_host(&ctx))
		frameq_count_host_failure(p.job, p.host, ended_at);
	release_frame(&p, &ctx);
	if (state_is_terminal(ctx.new_state))
	{
		if (ctx.job_to_check != NULL)
			*ctx.job_to_check = true;
		else
			maybe_finish_job(p.job);
	}
	notify_release(&p, ctx.new_state, ctx.reason);

	SPI_finish();
	return PointerGetDatum(NULL);
}

PG_FUNCTION_INFO_V1(frameq_proc_guard_update);

/*
 * A proc's booking is immutable: only its kill order (and kill_cause), its
 * deadline (timeout_at) and its agent's report (last_line, progress,
 * last_output_at) may be set.  Changing resources or keys in place would
 * desynchronise the ledger and the host.
 */
Datum
frameq_proc_guard_update(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;
	TupleDesc	desc = trigdata->tg_relation->rd_att;
	static const char *const frozen[] = {
		"id", "frame", "host", "epoch", "job", "layer", "show", "folder",
		"allocation", "limits", "cores_cc", "memory", "gpus", "gpu_memory", "booked_at"
	};

	if (!CALLED_AS_TRIGGER(fcinfo))
		elog(ERROR, "frameq_proc_guard_update: not called by trigger manager");
	/* a kill order nothing would deliver: refuse it like every other change */
	frameq_require_preload();

	for (int i = 0; i < (int) lengthof(frozen); i++)
	{
		int			attnum = SPI_fnumber(desc, frozen[i]);
		Form_pg_attribute att = TupleDescAttr(desc, attnum - 1);
		bool		n1,
					n2;
		Datum		d1 = SPI_getbinval(trigdata->tg_trigtuple, desc, attnum, &n1);
		Datum		d2 = SPI_getbinval(trigdata->tg_newtuple, desc, attnum, &n2);

		if (n1 != n2 || (!n1 && !datumIsEqual(d1, d2, att->attbyval, att->attlen)))
			ereport(ERROR,
					(errcode(ERRCODE_INTEGRITY_CONSTRAINT_VIOLATION),
					 errmsg("column \"%s\" of a proc cannot be changed", frozen[i]),
					 errhint("Delete the proc to release it; book again to change it.")));
	}
	{
		bool		isnull;
		char	   *olds = TextDatumGetCString(SPI_getbinval(trigdata->tg_trigtuple, desc,
															 SPI_fnumber(desc, "state"), &isnull));
		char	   *news = TextDatumGetCString(SPI_getbinval(trigdata->tg_newtuple, desc,
															 SPI_fnumber(desc, "state"), &isnull));

		if (strcmp(olds, "running") == 0 && strcmp(news, "killing") == 0)
			frameq_worker_wake_at_commit();
		if (strcmp(olds, "killing") == 0 && strcmp(news, "running") == 0)
			ereport(ERROR,
					(errcode(ERRCODE_INTEGRITY_CONSTRAINT_VIOLATION),
					 errmsg("a kill order cannot be withdrawn"),
					 errdetail("Proc %lld may already be dying on its host.",
							   (long long) DatumGetInt64(SPI_getbinval(trigdata->tg_trigtuple, desc,
																	   1, &isnull)))));
	}
	return PointerGetDatum(trigdata->tg_newtuple);
}

PG_FUNCTION_INFO_V1(frameq_proc_no_truncate);

Datum
frameq_proc_no_truncate(PG_FUNCTION_ARGS)
{
	ereport(ERROR,
			(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
			 errmsg("frameq.proc cannot be truncated"),
			 errhint("Delete procs instead: each delete is a release.")));
	PG_RETURN_NULL();
}

/*
 * Delete one proc, saying why.  Returns whether a proc was deleted.  The
 * caller is connected to SPI.  An invalid ledger is rebuilt first, not by
 * the delete's statement trigger, which runs holding the proc table's
 * RowExclusiveLock that the rebuild waits for in others (procs.sql,
 * _ledger_ensure).
 */
void
frameq_release_with(const ReleaseContext *ctx)
{
	static SPIPlanPtr plan = NULL;
	Datum		args[1];
	int			ret;

	frameq_ledger_ensure_valid();

	if (plan == NULL)
	{
		Oid			types[1] = {INT8OID};

		plan = frameq_prepare("DELETE FROM frameq.proc WHERE id = $1", 1, types);
	}
	args[0] = Int64GetDatum(ctx->proc);
	current_release = ctx;
	PG_TRY();
	{
		ret = SPI_execute_plan(plan, args, NULL, false, 0);
	}
	PG_FINALLY();
	{
		current_release = NULL;
	}
	PG_END_TRY();
	if (ret != SPI_OK_DELETE)
		elog(ERROR, "frameq: proc delete failed: %s", SPI_result_code_string(ret));
}

static const char *
checked_state(const char *state)
{
	static const char *const states[] = {"waiting", "dead", "eaten", "succeeded"};

	for (int i = 0; i < (int) lengthof(states); i++)
		if (strcmp(state, states[i]) == 0)
			return states[i];
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("new_state must be one of waiting, dead, eaten, succeeded, not \"%s\"",
					state)));
	return NULL;
}

/* the run reasons, as frameq.run's CHECK constraint lists them */
static const char *
checked_reason(const char *reason)
{
	static const char *const reasons[] = {
		"completed", "killed", "timeout", "stalled", "oom", "host_lost", "host_rebooted",
		"lost_by_agent", "operator"
	};

	for (int i = 0; i < (int) lengthof(reasons); i++)
		if (strcmp(reason, reasons[i]) == 0)
			return reasons[i];
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("reason must be one of completed, killed, timeout, stalled, oom, host_lost,"
					" host_rebooted, lost_by_agent, operator, not \"%s\"", reason)));
	return NULL;
}

/*
 * Where a task goes when it fails and the failure counts a retry: back to
 * waiting while it has retries left (retries + 1 <= max_retries), else
 * dead, or eaten if its job has auto_eat.  The one place this rule lives:
 * complete() applies it to a failing exit, and frameq._failed_state() to
 * the kill orders of a timeout or a stall.
 */
static const char *
failed_state(int32 retries, int32 max_retries, bool auto_eat)
{
	if (retries + 1 <= max_retries)
		return "waiting";
	return auto_eat ? "eaten" : "dead";
}

PG_FUNCTION_INFO_V1(frameq_failed_state);

/* frameq._failed_state(frame): failed_state() for the frame and its job, NULL if none */
Datum
frameq_failed_state(PG_FUNCTION_ARGS)
{
	static SPIPlanPtr plan = NULL;
	Datum		args[1];
	const char *state = NULL;

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "frameq: SPI_connect failed");
	if (plan == NULL)
	{
		Oid			types[1] = {INT8OID};

		plan = frameq_prepare("SELECT f.retries, j.max_retries, j.auto_eat"
							  "  FROM frameq.frame f JOIN frameq.job j ON j.id = f.job"
							  " WHERE f.id = $1",
							  1, types);
	}
	args[0] = PG_GETARG_DATUM(0);
	if (SPI_execute_plan(plan, args, NULL, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "frameq: frame lookup failed");
	if (SPI_processed == 1)
	{
		HeapTuple	tup = SPI_tuptable->vals[0];
		TupleDesc	desc = SPI_tuptable->tupdesc;

		state = failed_state(frameq_get_int32(tup, desc, 1, NULL),
							 frameq_get_int32(tup, desc, 2, NULL),
							 frameq_get_bool(tup, desc, 3, NULL));
	}
	SPI_finish();
	if (state == NULL)
		PG_RETURN_NULL();
	PG_RETURN_TEXT_P(cstring_to_text(state));
}

PG_FUNCTION_INFO_V1(frameq_finish_job_if_done);

/* frameq._finish_job_if_done(job): for SQL paths that end frames directly */
Datum
frameq_finish_job_if_done(PG_FUNCTION_ARGS)
{
	frameq_require_preload();
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "frameq: SPI_connect failed");
	maybe_finish_job(PG_GETARG_INT64(0));
	SPI_finish();
	PG_RETURN_VOID();
}

PG_FUNCTION_INFO_V1(frameq_release_proc);

/* frameq._release(proc, reason, new_state, count_retry): for SQL paths */
Datum
frameq_release_proc(PG_FUNCTION_ARGS)
{
	ReleaseContext ctx;
	uint64		deleted;

	frameq_require_preload();
	if (PG_ARGISNULL(0) || PG_ARGISNULL(1))
		elog(ERROR, "frameq: _release needs a proc and a reason");
	memset(&ctx, 0, sizeof(ctx));
	ctx.proc = PG_GETARG_INT64(0);
	ctx.reason = checked_reason(text_to_cstring(PG_GETARG_TEXT_PP(1)));
	/* NULL: the proc's default end state (default_end_state) */
	ctx.new_state = PG_ARGISNULL(2) ? NULL :
		checked_state(text_to_cstring(PG_GETARG_TEXT_PP(2)));
	ctx.count_retry = !PG_ARGISNULL(3) && PG_GETARG_BOOL(3);

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "frameq: SPI_connect failed");
	frameq_release_with(&ctx);
	deleted = SPI_processed;
	SPI_finish();
	PG_RETURN_BOOL(deleted > 0);
}

/* complete()'s report, as its arguments give it */
typedef struct Report
{
	text	   *name;
	text	   *token;
	int64		epoch;
	int64		proc;
	int32		exit_status;
	int32		exit_signal;
	bool		have_rss;
	int64		max_rss;
	bool		oom;			/* killed for memory, with proof (the agent's) */
} Report;

/* read and check complete()'s arguments: nulls and negatives are refused */
static void
read_report(FunctionCallInfo fcinfo, Report *r)
{
	static const char *const argnames[] = {"host", "token", "epoch", "proc", "exit_status"};

	for (int i = 0; i < (int) lengthof(argnames); i++)
		if (PG_ARGISNULL(i))
			ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
							errmsg("%s must not be null", argnames[i])));
	r->name = PG_GETARG_TEXT_PP(0);
	r->token = PG_GETARG_TEXT_PP(1);
	r->epoch = PG_GETARG_INT64(2);
	r->proc = PG_GETARG_INT64(3);
	r->exit_status = PG_GETARG_INT32(4);
	r->exit_signal = PG_ARGISNULL(5) ? 0 : PG_GETARG_INT32(5);
	if (r->exit_signal < 0)
		ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						errmsg("exit_signal must not be negative")));
	r->have_rss = !PG_ARGISNULL(6);
	r->max_rss = r->have_rss ? PG_GETARG_INT64(6) : 0;
	/* an 8th argument since 0.5.0 */
	r->oom = PG_NARGS() > 7 && !PG_ARGISNULL(7) && PG_GETARG_BOOL(7);
	if (r->max_rss < 0)
		ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						errmsg("max_rss must not be negative")));
}

/*
 * Lock the reported proc if it is this host's, under this epoch (fencing:
 * doc/design.md, invariant 3).  On success the row is SPI_tuptable's
 * first: host, epoch, killing, want_state, the frame's retries, the job's
 * max_retries and auto_eat; whether the reported exit is a requeue (a
 * requeue code of the layer, as its job gives them if it has none, with
 * requeues left); the requeue delay and the retry delay in force; the
 * proc's memory, its layer and the layer's memory (for an OOM's retry);
 * the proc's job.
 */
static bool
lock_reported_proc(const Report *r, int32 host_id)
{
	static SPIPlanPtr plan = NULL;
	Datum		args[5];

	if (plan == NULL)
	{
		Oid			types[5] = {INT8OID, INT4OID, INT8OID, INT4OID, INT4OID};

		/*
		 * Subqueries fenced by OFFSET 0, not joins: each of the frame, the
		 * job and the layer is one primary-key lookup whatever the
		 * statistics say.  (A join's generic plan, chosen once per
		 * session, was at times a merge join that read job_pkey from its
		 * start up to the proc's job.)
		 *
		 * The host and epoch are conditions of the scan, below the row
		 * lock: a proc of another host (or an earlier lease) is never
		 * returned to the locking step, so one host's agent can never
		 * lock, or wait for, another host's proc row.  A proc's host and
		 * epoch never change (the guard trigger), so the lock needs no
		 * re-check of them.
		 */
		plan = frameq_prepare("SELECT p.host, p.epoch, p.state = 'killing', p.want_state,"
							  "       f.retries, j.max_retries, j.auto_eat,"
							  "       $5 = 0 AND $4 = ANY (coalesce(l.requeue_exit_codes,"
							  "                                     j.requeue_exit_codes, '{}'))"
							  "         AND f.requeues < coalesce(l.max_requeues, j.max_requeues, "
							  CppAsString2(FRAMEQ_DEFAULT_MAX_REQUEUES) "),"
							  "       coalesce(l.requeue_delay, j.requeue_delay, "
							  CppAsString2(FRAMEQ_DEFAULT_REQUEUE_DELAY) "),"
							  "       coalesce(l.retry_delay, j.retry_delay, "
							  CppAsString2(FRAMEQ_DEFAULT_RETRY_DELAY) "),"
							  "       p.memory, p.layer, l.memory, p.job"
							  "  FROM frameq.proc p,"
							  "       LATERAL (SELECT x.retries, x.requeues FROM frameq.frame x"
							  "                 WHERE x.id = p.frame OFFSET 0) f,"
							  "       LATERAL (SELECT x.max_retries, x.auto_eat, x.requeue_exit_codes,"
							  "                       x.requeue_delay, x.max_requeues, x.retry_delay"
							  "                  FROM frameq.job x WHERE x.id = p.job OFFSET 0) j,"
							  "       LATERAL (SELECT x.requeue_exit_codes, x.requeue_delay,"
							  "                       x.max_requeues, x.retry_delay, x.memory"
							  "                  FROM frameq.layer x WHERE x.id = p.layer OFFSET 0) l"
							  " WHERE p.id = $1 AND p.host = $2 AND p.epoch = $3"
							  "   FOR NO KEY UPDATE OF p",
							  5, types);
	}
	args[0] = Int64GetDatum(r->proc);
	args[1] = Int32GetDatum(host_id);
	args[2] = Int64GetDatum(r->epoch);
	args[3] = Int32GetDatum(r->exit_status);
	args[4] = Int32GetDatum(r->exit_signal);
	if (SPI_execute_plan(plan, args, NULL, false, 1) != SPI_OK_SELECT)
		elog(ERROR, "frameq: proc lookup failed");
	return SPI_processed == 1 &&
		frameq_get_int32(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, NULL) == host_id &&
		frameq_get_int64(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, NULL) == r->epoch;
}

/*
 * What a task killed for memory needs for its retry: 1.5 times what its
 * run was booked with, or its peak if that was more (rounded up), but no
 * more than the largest host that could run it has.  A task whose peak
 * was already more than that host's memory, or that no host could run any
 * more, is dead whatever its retries, and says why.  The new requirement
 * is frame.memory unless it is no more than the layer's own.
 */
static void
oom_requirement(const Report *r, int64 booked, int64 layer, int64 layer_memory,
				ReleaseContext *ctx)
{
	static SPIPlanPtr plan = NULL;
	Datum		args[1];
	bool		none;
	int64		largest;
	int64		need;

	if (plan == NULL)
	{
		Oid			types[1] = {INT8OID};

		plan = frameq_prepare("SELECT frameq._largest_host_memory($1)", 1, types);
	}
	args[0] = Int64GetDatum(layer);
	if (SPI_execute_plan(plan, args, NULL, true, 1) != SPI_OK_SELECT || SPI_processed != 1)
		elog(ERROR, "frameq: largest host lookup failed");
	largest = frameq_get_int64(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &none);

	need = booked > PG_INT64_MAX / 3 * 2 ? PG_INT64_MAX : booked + (booked + 1) / 2;
	if (r->have_rss && r->max_rss > need)
		need = r->max_rss;
	ctx->oom_retry = true;
	if (none || (r->have_rss && r->max_rss > largest))
	{
		ctx->new_state = "dead";
		ctx->delay_s = 0;
		ctx->dead_reason = none
			? "killed for memory, and no host could run it"
			: psprintf("killed for memory: its peak of %lld bytes is more than the largest host"
					   " that could run it has (%lld)",
					   (long long) r->max_rss, (long long) largest);
	}
	else
		need = Min(need, largest);
	ctx->memory = need > layer_memory ? need : 0;
}

/*
 * What the end of a render means for its frame (the locked proc row of
 * lock_reported_proc): a killed render confirms its kill order and the
 * frame goes where the kill wanted; exit 0 succeeds (unless the agent says
 * it killed the render for memory: oom); an exit status that is one of
 * the layer's requeue codes, while the task has requeues left,
 * sends it back to waiting, counted as a requeue and not as a retry, for
 * requeue_delay; anything else is a failure of the frame, which uses up a
 * retry and waits retry_delay, or, once there are none left, leaves it
 * dead (or eaten, if its job says so); with oom, its run's reason is oom,
 * and the task's memory is raised for its retry (oom_requirement).
 */
static void
classify_report(const Report *r, HeapTuple tup, TupleDesc desc, ReleaseContext *ctx)
{
	memset(ctx, 0, sizeof(*ctx));
	ctx->proc = r->proc;
	ctx->have_exit = true;
	ctx->exit_status = r->exit_status;
	ctx->exit_signal = r->exit_signal;
	ctx->have_rss = r->have_rss;
	ctx->max_rss = r->max_rss;
	ctx->reason = "completed";
	if (frameq_get_bool(tup, desc, 3, NULL))
	{
		ctx->reason = "killed";
		ctx->new_state = checked_state(SPI_getvalue(tup, desc, 4));
	}
	else if (r->exit_status == 0 && r->exit_signal == 0 && !r->oom)
		ctx->new_state = "succeeded";
	else if (!r->oom && frameq_get_bool(tup, desc, 8, NULL))
	{
		ctx->count_requeue = true;
		ctx->new_state = "waiting";
		ctx->delay_s = frameq_get_int32(tup, desc, 9, NULL);
	}
	else
	{
		/* a failure of the render: it uses up a retry (killed for memory: oom) */
		ctx->count_retry = true;
		ctx->new_state = failed_state(frameq_get_int32(tup, desc, 5, NULL),
									  frameq_get_int32(tup, desc, 6, NULL),
									  frameq_get_bool(tup, desc, 7, NULL));
		if (strcmp(ctx->new_state, "waiting") == 0)
			ctx->delay_s = frameq_get_int32(tup, desc, 10, NULL);
		if (r->oom)
		{
			ctx->reason = "oom";
			oom_requirement(r, frameq_get_int64(tup, desc, 11, NULL),
							frameq_get_int64(tup, desc, 12, NULL),
							frameq_get_int64(tup, desc, 13, NULL), ctx);
		}
	}
}

/*
 * A report for no live proc of this host and epoch: "duplicate" if the
 * proc's run ended under this host and epoch with this very exit, else
 * "stale".  The run record is read with the latest snapshot: if the same
 * report arrived twice at once, the lock step waited for the other one to
 * release the proc, and this statement's snapshot predates that.
 */
static const char *
stale_or_duplicate(const Report *r, int32 host_id)
{
	static SPIPlanPtr plan = NULL;
	Datum		args[1];
	HeapTuple	tup;
	TupleDesc	desc;
	bool		status_null;
	bool		signal_null;
	int32		st;
	int32		sig;

	if (plan == NULL)
	{
		Oid			types[1] = {INT8OID};

		plan = frameq_prepare("SELECT host, epoch, ended_at IS NOT NULL,"
							  "       exit_status, exit_signal"
							  "  FROM frameq.run WHERE proc = $1",
							  1, types);
	}
	args[0] = Int64GetDatum(r->proc);
	if (SPI_execute_snapshot(plan, args, NULL, GetLatestSnapshot(),
							 InvalidSnapshot, true, false, 1) != SPI_OK_SELECT)
		elog(ERROR, "frameq: run lookup failed");
	if (SPI_processed != 1)
		return "stale";
	tup = SPI_tuptable->vals[0];
	desc = SPI_tuptable->tupdesc;
	st = frameq_get_int32(tup, desc, 4, &status_null);
	sig = frameq_get_int32(tup, desc, 5, &signal_null);
	if (frameq_get_int32(tup, desc, 1, NULL) == host_id &&
		frameq_get_int64(tup, desc, 2, NULL) == r->epoch &&
		frameq_get_bool(tup, desc, 3, NULL) &&
		!status_null && !signal_null &&
		st == r->exit_status && sig == r->exit_signal)
		return "duplicate";
	return "stale";
}

/* one report of a batch, as settle_reports works through it */
typedef struct Settling
{
	const Report *report;
	bool		live;			/* its proc locked: it will be released */
	int64		job;			/* its proc's job, if live */
	ReleaseContext ctx;			/* how, if live */
	const char *answer;
} Settling;

/* the order a batch releases its live procs in: by job, then by proc */
static int
release_order(const void *a, const void *b)
{
	const Settling *x = *(Settling *const *) a;
	const Settling *y = *(Settling *const *) b;

	if (x->job != y->job)
		return x->job < y->job ? -1 : 1;
	return (x->report->proc > y->report->proc) - (x->report->proc < y->report->proc);
}

/*
 * Settle the reports of an authenticated host, given in the order of
 * their procs: lock every live proc they name, in that order, before
 * releasing any (the order of _release_procs: a release takes the host
 * row, and holding it while locking the next proc could deadlock with a
 * complete() of that proc), then release them, each 'accepted', in the
 * order of their jobs (a release may take its job's row and keep it to
 * the commit: two batches of different hosts releasing procs of the same
 * jobs must take those rows in one order); then say why the others had
 * no live proc ('stale', 'duplicate').  A proc named twice is locked and
 * released once, for its first copy.
 *
 * Whether a job has ended is asked once, after the batch's last release
 * of it, if any of them ended its frame for good (maybe_finish_job): asked
 * after each release, its index probes would step over the entries of the
 * frames the batch had just ended, each a visit to the heap (entries that
 * cannot be marked dead before the batch commits).  The job's row is
 * still taken before the next job's releases, so the order above holds.
 */
static void
settle_reports(Settling *batch, int n, int32 host_id)
{
	Settling  **live = palloc(sizeof(Settling *) * Max(n, 1));
	int			nlive = 0;
	bool		job_ended = false;

	for (int i = 0; i < n; i++)
	{
		Settling   *s = &batch[i];

		s->live = (i == 0 || s->report->proc != batch[i - 1].report->proc) &&
			lock_reported_proc(s->report, host_id);
		if (!s->live)
			continue;
		/* before classify_report, whose OOM lookup replaces SPI_tuptable */
		s->job = frameq_get_int64(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 14, NULL);
		classify_report(s->report, SPI_tuptable->vals[0], SPI_tuptable->tupdesc, &s->ctx);
		live[nlive++] = s;
	}
	qsort(live, nlive, sizeof(Settling *), release_order);
	for (int i = 0; i < nlive; i++)
	{
		live[i]->ctx.job_to_check = &job_ended;
		frameq_release_with(&live[i]->ctx);
		live[i]->answer = "accepted";
		/* the job's last release of the batch: has the job ended? */
		if (job_ended && (i + 1 == nlive || live[i + 1]->job != live[i]->job))
		{
			maybe_finish_job(live[i]->job);
			job_ended = false;
		}
	}
	for (int i = 0; i < n; i++)
		if (!batch[i].live)
			batch[i].answer = stale_or_duplicate(batch[i].report, host_id);
}

PG_FUNCTION_INFO_V1(frameq_complete);

/*
 * complete(host, token, epoch, proc, exit_status, exit_signal, max_rss, oom)
 *
 * Fenced on the host, its token, the lease epoch the proc was booked under
 * and the proc itself: a report about anything but the live proc changes
 * nothing and answers 'stale'; the same report again answers 'duplicate'.
 */
Datum
frameq_complete(PG_FUNCTION_ARGS)
{
	Report		r;
	Settling	one = {&r};
	int32		host_id;
	int			lock_nest;

	frameq_require_preload();
	read_report(fcinfo, &r);
	frameq_require_schema();
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "frameq: SPI_connect failed");
	host_id = frameq_host_authenticate(r.name, r.token);
	lock_nest = frameq_bound_lock_waits();
	settle_reports(&one, 1, host_id);
	frameq_end_lock_waits(lock_nest);
	SPI_finish();
	PG_RETURN_TEXT_P(cstring_to_text(one.answer));
}

/* one array argument of complete_many(), its elements and their nulls */
typedef struct BatchColumn
{
	const char *name;
	int			argno;
	Oid			elemtype;
	Datum	   *values;
	bool	   *nulls;
	int			n;
} BatchColumn;

/*
 * Read one array argument of complete_many(): one-dimensional (or empty),
 * at most FRAMEQ_MAX_BATCH elements, as many as the procs (22023, the
 * argument named); a NULL array stands for all defaults.
 */
static void
read_batch_column(FunctionCallInfo fcinfo, BatchColumn *c, int expect)
{
	ArrayType  *a;
	int16		typlen;
	bool		typbyval;
	char		typalign;

	c->values = NULL;
	c->nulls = NULL;
	c->n = -1;
	if (PG_ARGISNULL(c->argno))
		return;
	a = PG_GETARG_ARRAYTYPE_P(c->argno);
	if (ARR_NDIM(a) > 1)
		ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						errmsg("%s must be a one-dimensional array", c->name)));
	/* the bound before the elements are unpacked: their copy is not free */
	c->n = ArrayGetNItems(ARR_NDIM(a), ARR_DIMS(a));
	if (c->n > FRAMEQ_MAX_BATCH)
		ereport(ERROR, (errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
						errmsg("%s has %d elements, more than %d", c->name, c->n,
							   FRAMEQ_MAX_BATCH)));
	get_typlenbyvalalign(c->elemtype, &typlen, &typbyval, &typalign);
	deconstruct_array(a, c->elemtype, typlen, typbyval, typalign,
					  &c->values, &c->nulls, &c->n);
	if (expect >= 0 && c->n != expect)
		ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						errmsg("%s has %d elements, procs has %d", c->name, c->n, expect),
						errdetail("Each array gives one value per proc, in the same order.")));
}

/* element i of a batch column: NULL (or no array) gives the default */
static bool
batch_element(const BatchColumn *c, int i, Datum *value)
{
	if (c->n < 0 || c->nulls[i])
		return false;
	*value = c->values[i];
	return true;
}

/*
 * complete_many()'s reports, element by element, checked as complete()
 * checks its arguments (a proc or exit status that is null, a negative
 * signal or peak: refused, the element named) before any is settled.
 */
static Report *
read_batch(FunctionCallInfo fcinfo, int *nreports)
{
	BatchColumn cols[5] = {
		{"procs", 3, INT8OID}, {"exit_statuses", 4, INT4OID},
		{"exit_signals", 5, INT4OID}, {"max_rss", 6, INT8OID}, {"oom", 7, BOOLOID}
	};
	Report	   *reports;
	int			n;

	for (int i = 0; i < 3; i++)
		if (PG_ARGISNULL(i))
			ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
							errmsg("%s must not be null",
								   i == 0 ? "host" : i == 1 ? "token" : "epoch")));
	for (int i = 0; i < 2; i++)
		if (PG_ARGISNULL(cols[i].argno))
			ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
							errmsg("%s must not be null", cols[i].name)));
	for (int i = 0; i < (int) lengthof(cols); i++)
		read_batch_column(fcinfo, &cols[i], i == 0 ? -1 : cols[0].n);
	n = cols[0].n;
	reports = palloc0(sizeof(Report) * Max(n, 1));
	for (int i = 0; i < n; i++)
	{
		Report	   *r = &reports[i];
		Datum		v;

		r->name = PG_GETARG_TEXT_PP(0);
		r->token = PG_GETARG_TEXT_PP(1);
		r->epoch = PG_GETARG_INT64(2);
		if (!batch_element(&cols[0], i, &v))
			ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
							errmsg("procs[%d] must not be null", i + 1)));
		r->proc = DatumGetInt64(v);
		if (!batch_element(&cols[1], i, &v))
			ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
							errmsg("exit_statuses[%d] must not be null", i + 1)));
		r->exit_status = DatumGetInt32(v);
		r->exit_signal = batch_element(&cols[2], i, &v) ? DatumGetInt32(v) : 0;
		if (r->exit_signal < 0)
			ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
							errmsg("exit_signals[%d] must not be negative", i + 1)));
		r->have_rss = batch_element(&cols[3], i, &v);
		r->max_rss = r->have_rss ? DatumGetInt64(v) : 0;
		if (r->max_rss < 0)
			ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
							errmsg("max_rss[%d] must not be negative", i + 1)));
		r->oom = batch_element(&cols[4], i, &v) && DatumGetBool(v);
	}
	*nreports = n;
	return reports;
}

/* the order complete_many() settles its reports in: by proc, then position */
static int
report_order(const void *a, const void *b)
{
	const Report *x = *(Report *const *) a;
	const Report *y = *(Report *const *) b;

	if (x->proc != y->proc)
		return x->proc < y->proc ? -1 : 1;
	return x < y ? -1 : x > y ? 1 : 0;
}

PG_FUNCTION_INFO_V1(frameq_complete_many);

/*
 * complete_many(host, token, epoch, procs, exit_statuses, exit_signals,
 *				 max_rss, oom) -> text[]
 *
 * complete() for each element, in one call: the host is authenticated
 * once, and each report answered on its own, in the order given.  They
 * are settled in the order of their procs (two batches of one host lock
 * their procs in the same order), a proc given twice settling where it
 * comes first (the sort is by proc, then position), so that it is the
 * later copy that answers 'duplicate'.
 */
Datum
frameq_complete_many(PG_FUNCTION_ARGS)
{
	Report	   *reports;
	Report	  **order;
	Settling   *batch;
	Datum	   *answers;
	int			n;
	int32		host_id;
	int			lock_nest;

	frameq_require_preload();
	reports = read_batch(fcinfo, &n);
	frameq_require_schema();
	order = palloc(sizeof(Report *) * Max(n, 1));
	batch = palloc0(sizeof(Settling) * Max(n, 1));
	answers = palloc(sizeof(Datum) * Max(n, 1));
	for (int i = 0; i < n; i++)
		order[i] = &reports[i];
	qsort(order, n, sizeof(Report *), report_order);
	for (int i = 0; i < n; i++)
		batch[i].report = order[i];

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "frameq: SPI_connect failed");
	host_id = frameq_host_authenticate(PG_GETARG_TEXT_PP(0), PG_GETARG_TEXT_PP(1));
	lock_nest = frameq_bound_lock_waits();
	settle_reports(batch, n, host_id);
	frameq_end_lock_waits(lock_nest);
	SPI_finish();

	/* the answers are constants: made text here, outside SPI's memory */
	for (int i = 0; i < n; i++)
		answers[batch[i].report - reports] = CStringGetTextDatum(batch[i].answer);
	PG_RETURN_ARRAYTYPE_P(construct_array(answers, n, TEXTOID, -1, false, TYPALIGN_INT));
}

/* has this transaction released a proc? */
bool
frameq_xact_released(void)
{
	return released_lxid == MyProc->lxid;
}

PG_FUNCTION_INFO_V1(frameq_released_in_xact);

/* frameq._released_in_xact(): see frameq_xact_released() */
Datum
frameq_released_in_xact(PG_FUNCTION_ARGS)
{
	PG_RETURN_BOOL(frameq_xact_released());
}
