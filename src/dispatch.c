/*-------------------------------------------------------------------------
 *
 * dispatch.c
 *	  Layer dispatch hints: where in a layer's frame numbers the next
 *	  waiting frame can start to be looked for.
 *
 * Why: reserve() takes a layer's lowest waiting frame through the partial
 * index frame_waiting (layer, number) WHERE state = 'waiting' AND
 * not_before IS NULL (a delayed task is not in it).  A booked
 * frame leaves that index only logically: its entry stays, dead, until
 * VACUUM.  Scanning from the lowest number would step over every frame
 * booked since the last vacuum, so booking would slow down the longer a
 * job runs.  With a hint the scan starts at (or just below) the first frame
 * still waiting, and steps over only the bookings in flight.
 *
 * A hint is only an optimisation of the order frames are taken in: the
 * frame row lock (FOR UPDATE SKIP LOCKED) decides who books what.  What
 * must never happen is a waiting frame left below its layer's hint, where
 * no scan would find it.  So:
 *
 * - a hint is raised only when a transaction that booked frames commits,
 *	 to the lowest number it booked in that layer, and only if no frame of
 *	 the layer was made waiting since that transaction looked up the hint
 *	 (each lowering bumps the entry's counter; the booker compares);
 * - a hint is lowered, and the counter bumped, when a frame becomes waiting
 *	 again: when a release to 'waiting' commits (after its commit is visible,
 *	 so a later lookup's snapshot sees the frame), when a delayed task's
 *	 delay ends (sql/src/worker.sql, "Delays": a release that delays its
 *	 task lowers nothing), and when a booking aborts;
 * - REPEATABLE READ and SERIALIZABLE transactions never raise hints: their
 *	 snapshot may predate a lowering they did not see;
 * - when the table is full, or a lowering cannot be recorded, every hint
 *	 is dropped and a global counter bumped, so no raise in flight lands.
 *
 * PREPARE TRANSACTION with a non-empty log is refused (like the ledger's):
 * the log is this session's and would be lost at PREPARE.
 *
 * Locking: FrameqDispatch->lock protects the hash table and the global
 * counter.  It is held only for lookups and arithmetic.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/tuplestore.h"

#include "frameq.h"

typedef struct DispatchEntry
{
	int64		layer;			/* key */
	int32		low;			/* no waiting frame below this number */
	uint32		lowered;		/* bumped by every lowering */
} DispatchEntry;

typedef struct FrameqDispatchShared
{
	LWLock	   *lock;
	uint64		cleared;		/* bumped whenever all hints are dropped */
} FrameqDispatchShared;

typedef enum DispatchAction
{
	DISPATCH_BOOKED,			/* raise at commit, lower at abort */
	DISPATCH_WAITING,			/* made waiting: lower at commit */
	DISPATCH_SKIPPED			/* locked, not booked: lower at commit or abort */
} DispatchAction;

typedef struct DispatchLogEntry
{
	int64		layer;
	int32		number;
	DispatchAction action;
	DispatchStamp stamp;		/* for booked: the hint's state when read */
	SubTransactionId subid;
} DispatchLogEntry;

static FrameqDispatchShared *FrameqDispatch = NULL;
static HTAB *DispatchHash = NULL;

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

/* this transaction's bookings and lowerings; in TopMemoryContext, reused */
static DispatchLogEntry *dispatch_log = NULL;
static int	dispatch_log_len = 0;
static int	dispatch_log_cap = 0;

static void
dispatch_shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(add_size(MAXALIGN(sizeof(FrameqDispatchShared)),
									hash_estimate_size(frameq_ledger_size,
													   sizeof(DispatchEntry))));
	RequestNamedLWLockTranche("frameq_dispatch", 1);
}

static void
dispatch_shmem_startup(void)
{
	bool		found;
	HASHCTL		info;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	FrameqDispatch = ShmemInitStruct("frameq dispatch state",
									 sizeof(FrameqDispatchShared), &found);
	if (!found)
	{
		FrameqDispatch->lock = &(GetNamedLWLockTranche("frameq_dispatch"))->lock;
		FrameqDispatch->cleared = 0;
	}
	info.keysize = sizeof(int64);
	info.entrysize = sizeof(DispatchEntry);
	DispatchHash = ShmemInitHash("frameq dispatch hints",
								 frameq_ledger_size, frameq_ledger_size,
								 &info, HASH_ELEM | HASH_BLOBS);
	LWLockRelease(AddinShmemInitLock);
}

/*
 * Enter a layer, refusing to grow past frameq.ledger_size entries (a shared
 * hash would otherwise eat the server's spare shared memory).  Lock held
 * exclusively.
 */
static DispatchEntry *
enter(int64 layer, bool *found)
{
	DispatchEntry *e = hash_search(DispatchHash, &layer, HASH_FIND, NULL);

	*found = (e != NULL);
	if (e != NULL)
		return e;
	if (hash_get_num_entries(DispatchHash) >= frameq_ledger_size)
		return NULL;
	return hash_search(DispatchHash, &layer, HASH_ENTER_NULL, found);
}

/* drop every hint; lock held exclusively */
static void
clear_all(void)
{
	HASH_SEQ_STATUS seq;
	DispatchEntry *e;

	hash_seq_init(&seq, DispatchHash);
	while ((e = hash_seq_search(&seq)) != NULL)
		hash_search(DispatchHash, &e->layer, HASH_REMOVE, NULL);
	FrameqDispatch->cleared++;
}

/* a frame of the layer is waiting again at this number; lock held */
static void
lower(int64 layer, int32 number)
{
	DispatchEntry *e;
	bool		found;

	e = enter(layer, &found);
	if (e == NULL)
	{
		clear_all();
		return;
	}
	if (!found)
	{
		e->low = PG_INT32_MIN;
		e->lowered = 0;
	}
	e->low = Min(e->low, number);
	e->lowered++;
}

static void
log_reserve(void)
{
	if (dispatch_log_len < dispatch_log_cap)
		return;
	if (dispatch_log == NULL)
	{
		dispatch_log_cap = 64;
		dispatch_log = MemoryContextAlloc(TopMemoryContext,
										  dispatch_log_cap * sizeof(DispatchLogEntry));
	}
	else
	{
		dispatch_log_cap *= 2;
		dispatch_log = repalloc(dispatch_log, dispatch_log_cap * sizeof(DispatchLogEntry));
	}
}

void
frameq_dispatch_lookup(int64 layer, int32 *low, DispatchStamp *stamp)
{
	DispatchEntry *e;

	LWLockAcquire(FrameqDispatch->lock, LW_SHARED);
	e = hash_search(DispatchHash, &layer, HASH_FIND, NULL);
	*low = e ? e->low : PG_INT32_MIN;
	stamp->cleared = FrameqDispatch->cleared;
	stamp->present = (e != NULL);
	stamp->lowered = e ? e->lowered : 0;
	LWLockRelease(FrameqDispatch->lock);
}

static void
log_append(DispatchAction action, int64 layer, int32 number, const DispatchStamp *stamp)
{
	DispatchLogEntry *l;

	log_reserve();
	l = &dispatch_log[dispatch_log_len++];
	l->action = action;
	l->layer = layer;
	l->number = number;
	if (stamp)
		l->stamp = *stamp;
	else
		memset(&l->stamp, 0, sizeof(l->stamp));
	l->subid = GetCurrentSubTransactionId();
}

/* this transaction booked the frame */
void
frameq_dispatch_booked(int64 layer, int32 number, const DispatchStamp *stamp)
{
	log_append(DISPATCH_BOOKED, layer, number, stamp);
}

/* this transaction made the frame waiting again */
void
frameq_dispatch_waiting(int64 layer, int32 number)
{
	log_append(DISPATCH_WAITING, layer, number, NULL);
}

/*
 * This transaction locked a waiting frame and did not book it.  Until we
 * end, other probes skip it (SKIP LOCKED) and may book past it; lowering
 * when we end, commit or abort, brings the hint back down to it.
 */
void
frameq_dispatch_skipped(int64 layer, int32 number)
{
	log_append(DISPATCH_SKIPPED, layer, number, NULL);
}

/* raise the layer's hint to number if nothing was lowered since stamp */
static void
raise_hint(int64 layer, int32 number, const DispatchStamp *stamp)
{
	DispatchEntry *e;
	bool		found;

	if (FrameqDispatch->cleared != stamp->cleared)
		return;
	e = hash_search(DispatchHash, &layer, HASH_FIND, NULL);
	if (e == NULL)
	{
		if (stamp->present)
			return;				/* dropped since: it may have been lowered */
		e = enter(layer, &found);
		if (e == NULL)
		{
			clear_all();
			return;
		}
		e->low = number;
		e->lowered = 0;
		return;
	}
	if (!stamp->present || e->lowered != stamp->lowered)
		return;
	e->low = Max(e->low, number);
}

static void
dispatch_xact_callback(XactEvent event, void *arg)
{
	if (dispatch_log_len == 0)
		return;

	switch (event)
	{
		case XACT_EVENT_COMMIT:
			LWLockAcquire(FrameqDispatch->lock, LW_EXCLUSIVE);
			/* lowerings first: a raise must see our own lowerings too */
			for (int i = 0; i < dispatch_log_len; i++)
				if (dispatch_log[i].action != DISPATCH_BOOKED)
					lower(dispatch_log[i].layer, dispatch_log[i].number);
			if (!IsolationUsesXactSnapshot())
			{
				for (int i = 0; i < dispatch_log_len; i++)
				{
					DispatchLogEntry *l = &dispatch_log[i];

					if (l->action != DISPATCH_BOOKED)
						continue;

					/*
					 * The first booking of a layer in this transaction has
					 * the oldest stamp and, taken in number order, the
					 * lowest number: use it, skip the layer's later ones.
					 */
					for (int k = 0; k < i; k++)
						if (dispatch_log[k].action == DISPATCH_BOOKED &&
							dispatch_log[k].layer == l->layer)
						{
							l = NULL;
							break;
						}
					if (l != NULL)
					{
						int32		lowest = l->number;

						for (int k = i + 1; k < dispatch_log_len; k++)
							if (dispatch_log[k].action == DISPATCH_BOOKED &&
								dispatch_log[k].layer == l->layer)
								lowest = Min(lowest, dispatch_log[k].number);
						raise_hint(l->layer, lowest, &l->stamp);
					}
				}
			}
			LWLockRelease(FrameqDispatch->lock);
			dispatch_log_len = 0;
			break;
		case XACT_EVENT_ABORT:
			/* the frames we booked are waiting again; our locks are gone */
			LWLockAcquire(FrameqDispatch->lock, LW_EXCLUSIVE);
			for (int i = 0; i < dispatch_log_len; i++)
				if (dispatch_log[i].action != DISPATCH_WAITING)
					lower(dispatch_log[i].layer, dispatch_log[i].number);
			LWLockRelease(FrameqDispatch->lock);
			dispatch_log_len = 0;
			break;
		case XACT_EVENT_PRE_PREPARE:

			/*
			 * The log lives in this session and PREPARE would drop it: a
			 * frame made waiting (retry_frame) would stay below its
			 * layer's hint once COMMIT PREPARED makes it visible, and no
			 * booking would ever find it.  Refuse, as the ledger does for
			 * bookings and releases.
			 */
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("cannot PREPARE a transaction that made frameq frames waiting or booked them"),
					 errdetail("frameq's dispatch hints track a transaction's frames in the session that changed them.")));
			break;
		case XACT_EVENT_PREPARE:
			dispatch_log_len = 0;
			break;
		default:
			break;
	}
}

static void
dispatch_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
						  SubTransactionId parentSubid, void *arg)
{
	int			keep = 0;
	bool		locked = false;

	if (dispatch_log_len == 0)
		return;
	switch (event)
	{
		case SUBXACT_EVENT_ABORT_SUB:
			for (int i = 0; i < dispatch_log_len; i++)
			{
				DispatchLogEntry *l = &dispatch_log[i];

				if (l->subid != mySubid)
				{
					dispatch_log[keep++] = *l;
					continue;
				}
				if (l->action != DISPATCH_WAITING)
				{
					if (!locked)
					{
						LWLockAcquire(FrameqDispatch->lock, LW_EXCLUSIVE);
						locked = true;
					}
					lower(l->layer, l->number);
				}
			}
			if (locked)
				LWLockRelease(FrameqDispatch->lock);
			dispatch_log_len = keep;
			break;
		case SUBXACT_EVENT_COMMIT_SUB:
			for (int i = 0; i < dispatch_log_len; i++)
				if (dispatch_log[i].subid == mySubid)
					dispatch_log[i].subid = parentSubid;
			break;
		default:
			break;
	}
}

void
frameq_dispatch_init(void)
{
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = dispatch_shmem_request;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = dispatch_shmem_startup;

	RegisterXactCallback(dispatch_xact_callback, NULL);
	RegisterSubXactCallback(dispatch_subxact_callback, NULL);
}

/* forget every hint (a new install reuses layer ids) */
void
frameq_dispatch_reset(void)
{
	LWLockAcquire(FrameqDispatch->lock, LW_EXCLUSIVE);
	clear_all();
	LWLockRelease(FrameqDispatch->lock);
}

PG_FUNCTION_INFO_V1(frameq_frame_waiting);

/*
 * frameq._frame_waiting(layer, number): an SQL path made a frame waiting
 * again (not through a release); lower the layer's hint when it commits.
 */
Datum
frameq_frame_waiting(PG_FUNCTION_ARGS)
{
	frameq_require_preload();
	frameq_dispatch_waiting(PG_GETARG_INT64(0), PG_GETARG_INT32(1));
	PG_RETURN_VOID();
}

PG_FUNCTION_INFO_V1(frameq_dispatch_hints);

/* frameq._dispatch_hints(): every layer's hint, for check() */
Datum
frameq_dispatch_hints(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	HASH_SEQ_STATUS seq;
	DispatchEntry *e;
	DispatchEntry *copy;
	long		n = 0;
	long		size;

	frameq_require_preload();
	InitMaterializedSRF(fcinfo, 0);

	LWLockAcquire(FrameqDispatch->lock, LW_SHARED);
	size = hash_get_num_entries(DispatchHash);
	copy = palloc(sizeof(DispatchEntry) * Max(size, 1));
	hash_seq_init(&seq, DispatchHash);
	while ((e = hash_seq_search(&seq)) != NULL)
		if (n < size)
			copy[n++] = *e;
	LWLockRelease(FrameqDispatch->lock);

	for (long i = 0; i < n; i++)
	{
		Datum		values[2];
		bool		nulls[2] = {0};

		values[0] = Int64GetDatum(copy[i].layer);
		values[1] = Int32GetDatum(copy[i].low);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}
