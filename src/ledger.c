/*-------------------------------------------------------------------------
 *
 * ledger.c
 *	  The caps ledger: how many cores, gpus and procs each capped entity
 *	  (subscription, folder, job, limit) has booked, kept in shared memory
 *	  so that booking never updates a shared counter row.
 *
 * Why shared memory: a counter row per job, folder or subscription is
 * updated by every booking and release of that entity, and its row lock is
 * held until commit, so all bookings of a job queue behind each other (and
 * deadlock when two bookings take two such rows in different orders).  The
 * ledger's check-and-increment holds a lock for microseconds instead.
 *
 * Locking protocol
 * ----------------
 * - FrameqLedger->lock (an LWLock) protects the hash table and
 *	 FrameqLedger->generation.  It is never held across anything that can
 *	 wait or throw: lookups, checks and arithmetic only.  Memory for the
 *	 backend-local log (below) is reserved before the lock is taken.
 * - FrameqLedger->valid_generation is an atomic, read without the lock on
 *	 the fast path: 0 means the ledger must be rebuilt before use; any other
 *	 value names the rebuild that made the current contents.  It is written
 *	 only with the lock held exclusively.
 * - A rebuild holds ShareRowExclusiveLock on frameq.proc (which conflicts
 *	 with the RowExclusiveLock of every transaction that inserts or deletes
 *	 procs, and with itself) from before it reads until it has marked the
 *	 ledger valid, and then releases it, before its transaction ends.  It
 *	 holds the same on frameq.dispatch_queue (see "Parking").  So
 *	 it waits for every transaction that changed procs to finish, reads
 *	 SUM(proc) with a fresh snapshot, and no proc changes while it fills
 *	 the table.  Two backends that both find the ledger invalid serialise
 *	 on that lock, and the second finds it valid.
 *
 *	 Why releasing early is safe: the lock exists only to make "no proc
 *	 write is uncommitted" true from the read to the moment the ledger is
 *	 valid.  While we hold it, no other transaction holds RowExclusiveLock
 *	 on proc, and ours has written no proc (proc_written is checked first;
 *	 a PREPAREd transaction that touched procs cannot exist, PREPARE is
 *	 refused).  So the snapshot read sees every proc that will ever
 *	 commit from before the rebuild, and nothing that will abort.  Once
 *	 valid_generation is set, every later proc write goes through the
 *	 statement trigger, which finds the ledger valid and logs its charges
 *	 and releases under the new generation, exactly as in normal running;
 *	 holding the lock longer would protect nothing.  Keeping it to the end
 *	 of the transaction did harm: a reader of frameq.usage, ledger() or
 *	 check() right after a server start held ShareRowExclusiveLock until
 *	 it ended, and so stopped every booking and release.  The reader keeps
 *	 only the AccessShareLock of its read.  (An unlock releases only the
 *	 acquisition made here: locks are counted per mode and owner.)
 *
 * Transactional behaviour
 * -----------------------
 * Each backend keeps a log of its ledger changes in this transaction:
 * - a charge (booking) is applied to shared memory at once, so concurrent
 *	 bookings see it and cannot over-book, and logged as "applied"; if the
 *	 (sub)transaction aborts, it is subtracted again;
 * - a release is only logged ("deferred") and applied after the
 *	 transaction commits; if the (sub)transaction aborts it is forgotten.
 * Between a release and its commit the ledger reads high, never low: an
 * error can only make frameq book less, never more, than the caps allow.
 * Log entries carry the generation they were made under, so entries from
 * before a reset are never applied to a rebuilt ledger.
 *
 * PREPARE TRANSACTION with a non-empty log is refused: the log lives in
 * this backend and would be lost, leaving the ledger wrong when the
 * prepared transaction is committed elsewhere.
 *
 * Parking
 * -------
 * A job at its job or folder cap would cost every reserve() call a read
 * of each of its dispatch queue rows (40_dispatch.sql) for as long as it
 * stays capped.  Instead the first call that finds a row over its cap
 * *parks* it: it marks the job's or folder's entry parked and deletes the
 * row; the release that brings the entry down queues the job's (or the
 * folder's jobs') layers again, in its own transaction, and its commit
 * clears the mark.  No waiting frame may lose its row while it is
 * bookable, so:
 *
 * - every log entry counts in its entry's `inflight` from when it is
 *	 logged until its (sub)transaction commits or aborts: charges,
 *	 give-backs and releases alike;
 * - an entry is parked only while its inflight is 0 (its usage is all
 *	 committed and can fall only through a release that is yet to start)
 *	 and no rebuild's requeue is pending, and only if the row is over the
 *	 cap at that usage;
 * - a release logs itself (inflight + 1) and reads the parked mark under
 *	 the same lock; if it is set, the release queues the layers again
 *	 before its commit (frameq_ledger_release's result), and its commit
 *	 clears the mark: no park can have happened since it logged, because
 *	 its own inflight forbade one;
 * - the row is deleted by a statement that tests, after its snapshot was
 *	 taken, that the entry is still parked, with inflight 0 and over the
 *	 cap (frameq_ledger_still_parked).  A release that logged before that
 *	 test makes it fail; one that logged after it inserts its rows after
 *	 the snapshot, where the delete cannot see them.  A charge after the
 *	 park that aborts or is given back only returns the usage to where it
 *	 was when the row was found over its cap.
 * A cap raised, a job resumed or moved to another folder queue their
 * layers through triggers of their own.  A rebuild loses every mark, so
 * it leaves a requeue due (requeue_generation) that the next reserve() or
 * the worker runs; parking waits until that has committed.  The rebuild
 * also waits for every transaction that wrote the dispatch queue (below),
 * so no park is in flight across it and the requeue can skip the layers
 * that still have their rows.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "access/xlog.h"
#include "catalog/namespace.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "port/atomics.h"
#include "storage/ipc.h"
#include "storage/lmgr.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/tuplestore.h"

#include "frameq.h"

typedef struct LedgerKey
{
	int32		kind;
	int32		pad;			/* always zero: the key is hashed as bytes */
	int64		id;
	int64		id2;
} LedgerKey;

typedef struct LedgerEntry
{
	LedgerKey	key;
	int32		used_cc;
	int32		used_gpus;
	int32		running;
	int32		inflight;		/* logged changes not yet committed or
								 * aborted (see "Parking" above) */
	bool		parked;			/* reserve() took rows of this job's or
								 * folder's layers out of the dispatch queue */
} LedgerEntry;

typedef struct FrameqLedgerShared
{
	LWLock	   *lock;
	uint64		generation;		/* last rebuild's number; under lock */
	pg_atomic_uint64 valid_generation;	/* 0: must rebuild */
	pg_atomic_uint64 requeue_generation;	/* a rebuild whose lost parked
											 * marks are not requeued yet; 0:
											 * none */
} FrameqLedgerShared;

typedef struct LedgerLogEntry
{
	LedgerKey	key;
	int32		cc;
	int32		gpus;
	int32		running;
	bool		applied;		/* charge already in shared memory */
	bool		requeued;		/* a release that queued its job's or
								 * folder's layers again: unparks at commit */
	LedgerEntry *entry;			/* its entry under this generation: it stays
								 * put while this counts in its inflight */
	SubTransactionId subid;
	uint64		generation;
} LedgerLogEntry;

static FrameqLedgerShared *FrameqLedger = NULL;
static HTAB *LedgerHash = NULL;

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

/*
 * This transaction's ledger log.  It lives in TopMemoryContext and is
 * reused from one transaction to the next: it must outlive the transaction
 * until the commit or abort callback has read it, and reserving room before
 * taking the LWLock means it never allocates while the lock is held.
 */
static LedgerLogEntry *ledger_log = NULL;
static int	ledger_log_len = 0;
static int	ledger_log_cap = 0;

/* has this transaction inserted or deleted procs? (see ensure_valid) */
static bool proc_written = false;

/* has this transaction logged a release? (see own_releases) */
static bool log_has_release = false;

/*
 * What this transaction has released from one item and not yet applied
 * (positive amounts): see own_releases.
 */
typedef struct OwnRelease
{
	int32		cc;
	int32		gpus;
	int32		running;
} OwnRelease;

/* the longest log own_releases reads; past it, no release is counted */
#define OWN_RELEASE_SCAN	512

/* the rebuild whose requeue this transaction ran (0: none): done at commit */
static uint64 requeue_ran = 0;

static void requeue_commit(void);

static Size
ledger_shmem_size(void)
{
	return add_size(MAXALIGN(sizeof(FrameqLedgerShared)),
					hash_estimate_size(frameq_ledger_size, sizeof(LedgerEntry)));
}

static void
ledger_shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(ledger_shmem_size());
	RequestNamedLWLockTranche("frameq_ledger", 1);
}

/*
 * Shared memory starts empty and invalid after every server start: the
 * first booking rebuilds it from the proc table.
 */
static void
ledger_shmem_startup(void)
{
	bool		found;
	HASHCTL		info;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	FrameqLedger = ShmemInitStruct("frameq ledger state",
								   sizeof(FrameqLedgerShared), &found);
	if (!found)
	{
		FrameqLedger->lock = &(GetNamedLWLockTranche("frameq_ledger"))->lock;
		FrameqLedger->generation = 0;
		pg_atomic_init_u64(&FrameqLedger->valid_generation, 0);
		pg_atomic_init_u64(&FrameqLedger->requeue_generation, 0);
	}

	info.keysize = sizeof(LedgerKey);
	info.entrysize = sizeof(LedgerEntry);
	LedgerHash = ShmemInitHash("frameq ledger",
							   frameq_ledger_size, frameq_ledger_size,
							   &info, HASH_ELEM | HASH_BLOBS);
	LWLockRelease(AddinShmemInitLock);
}

/*
 * Enter a key, refusing to grow past frameq.ledger_size entries: a shared
 * hash table would otherwise keep taking the server's spare shared memory,
 * which the lock manager needs.  Lock held exclusively.
 */
static LedgerEntry *
ledger_enter(const LedgerKey *key, bool *found)
{
	LedgerEntry *entry = hash_search(LedgerHash, key, HASH_FIND, NULL);

	*found = (entry != NULL);
	if (entry != NULL)
		return entry;
	if (hash_get_num_entries(LedgerHash) >= frameq_ledger_size)
		return NULL;
	return hash_search(LedgerHash, key, HASH_ENTER_NULL, found);
}

static inline void
make_key(LedgerKey *key, LedgerKind kind, int64 id, int64 id2)
{
	key->kind = (int32) kind;
	key->pad = 0;
	key->id = id;
	key->id2 = id2;
}

static void
log_reserve(int n)
{
	if (ledger_log_len + n <= ledger_log_cap)
		return;
	if (ledger_log == NULL)
	{
		ledger_log_cap = Max(64, n);
		ledger_log = MemoryContextAlloc(TopMemoryContext,
										ledger_log_cap * sizeof(LedgerLogEntry));
	}
	else
	{
		ledger_log_cap = Max(ledger_log_cap * 2, ledger_log_len + n);
		ledger_log = repalloc(ledger_log, ledger_log_cap * sizeof(LedgerLogEntry));
	}
}

static LedgerLogEntry *
log_append(LedgerEntry *entry, int32 cc, int32 gpus, int32 running,
		   bool applied, uint64 generation)
{
	LedgerLogEntry *e = &ledger_log[ledger_log_len++];

	Assert(ledger_log_len <= ledger_log_cap);
	e->entry = entry;
	e->key = entry->key;
	e->cc = cc;
	e->gpus = gpus;
	e->running = running;
	e->applied = applied;
	e->requeued = false;
	e->subid = GetCurrentSubTransactionId();
	e->generation = generation;
	return e;
}

/* an entry that counts nothing and marks nothing can go.  Lock held. */
static void
forget_if_unused(LedgerEntry *entry)
{
	if (entry->used_cc == 0 && entry->used_gpus == 0 && entry->running == 0 &&
		entry->inflight == 0 && !entry->parked)
		hash_search(LedgerHash, &entry->key, HASH_REMOVE, NULL);
}

/* a key's entry, made empty if it is new; NULL if the table is full.  Lock held. */
static LedgerEntry *
enter_entry(const LedgerKey *key)
{
	bool		found;
	LedgerEntry *entry = ledger_enter(key, &found);

	if (entry != NULL && !found)
	{
		entry->used_cc = 0;
		entry->used_gpus = 0;
		entry->running = 0;
		entry->inflight = 0;
		entry->parked = false;
	}
	return entry;
}

/*
 * Would one more proc of cc cores and gpus gpus exceed the item's caps?
 * own (or NULL) is what this transaction has released from the item: its
 * own releases count as done (see own_releases).
 */
static bool
over_cap(const LedgerItem *it, const LedgerEntry *entry, int32 cc, int32 gpus,
		 const OwnRelease *own)
{
	int64		used_cc = entry ? entry->used_cc : 0;
	int64		used_gpus = entry ? entry->used_gpus : 0;
	int64		running = entry ? entry->running : 0;

	if (own != NULL)
	{
		used_cc -= own->cc;
		used_gpus -= own->gpus;
		running -= own->running;
	}
	return (it->cap_cc >= 0 && used_cc + cc > it->cap_cc) ||
		(it->cap_gpus >= 0 && used_gpus + gpus > it->cap_gpus) ||
		(it->cap_running >= 0 && running + 1 > it->cap_running);
}

/*
 * What this transaction has released from each item and not yet applied.
 * A release waits for its commit to leave the ledger, but a booking later
 * in the same transaction may use its room: both commit, or both are
 * undone (a release undone with its subtransaction leaves the log, and a
 * booking made after it is in that subtransaction or one inside it).  So
 * an agent that reports what ended and books in one transaction can book
 * up to the caps its own reports freed.  Returns the ledger generation
 * the amounts belong to (the caller uses them only under it), or 0 if
 * there are none to count: no release logged, or a log longer than
 * OWN_RELEASE_SCAN (then the booking counts the releases as not yet done,
 * which can only book less).  Reads only this backend's log: no lock.
 */
static uint64
own_releases(const LedgerItem *items, int nitems, OwnRelease *own)
{
	uint64		generation = pg_atomic_read_u64(&FrameqLedger->valid_generation);
	LedgerKey	key;

	memset(own, 0, sizeof(OwnRelease) * nitems);
	if (!log_has_release || ledger_log_len > OWN_RELEASE_SCAN || generation == 0)
		return 0;
	for (int i = 0; i < nitems; i++)
	{
		make_key(&key, items[i].kind, items[i].id, items[i].id2);
		for (int j = 0; j < ledger_log_len; j++)
		{
			const LedgerLogEntry *e = &ledger_log[j];

			if (e->applied || e->generation != generation ||
				memcmp(&e->key, &key, sizeof(key)) != 0)
				continue;
			own[i].cc -= e->cc;
			own[i].gpus -= e->gpus;
			own[i].running -= e->running;
		}
	}
	return generation;
}

/* as enter_entry, but a full table is an error: releases the lock first */
static LedgerEntry *
enter_or_fail(const LedgerKey *key)
{
	LedgerEntry *entry = enter_entry(key);

	if (entry == NULL)
	{
		LWLockRelease(FrameqLedger->lock);
		ereport(ERROR,
				(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
				 errmsg("frameq's ledger is full (frameq.ledger_size = %d)",
						frameq_ledger_size),
				 errhint("Raise frameq.ledger_size and restart the server.")));
	}
	return entry;
}

/*
 * Add a delta to an entry; drop entries that fall back to nothing.  A log
 * entry that ends clears its inflight count (inflight -1); one that
 * requeued its job's or folder's layers clears the parked mark.  Lock
 * held.
 */
static void
apply_delta(LedgerEntry *entry, int32 cc, int32 gpus, int32 running,
			int32 inflight, bool unpark)
{
	entry->used_cc += cc;
	entry->used_gpus += gpus;
	entry->running += running;
	entry->inflight += inflight;
	if (unpark)
		entry->parked = false;
	forget_if_unused(entry);
}

/*
 * Undo the applied charges of the given subtransaction (or all, if
 * InvalidSubTransactionId) and forget its deferred releases.
 */
static void
log_discard(SubTransactionId subid)
{
	uint64		current = pg_atomic_read_u64(&FrameqLedger->valid_generation);
	bool		locked = false;
	int			keep = 0;

	for (int i = 0; i < ledger_log_len; i++)
	{
		LedgerLogEntry *e = &ledger_log[i];

		if (subid != InvalidSubTransactionId && e->subid != subid)
		{
			ledger_log[keep++] = *e;
			continue;
		}
		if (e->generation == current)
		{
			if (!locked)
			{
				LWLockAcquire(FrameqLedger->lock, LW_EXCLUSIVE);
				locked = true;
			}
			if (e->applied)
				apply_delta(e->entry, -e->cc, -e->gpus, -e->running, -1, false);
			else
				apply_delta(e->entry, 0, 0, 0, -1, false);
		}
	}
	if (locked)
		LWLockRelease(FrameqLedger->lock);
	ledger_log_len = keep;
}

/* the transaction committed: apply its deferred releases, end its inflight counts */
static void
log_commit(void)
{
	LWLockAcquire(FrameqLedger->lock, LW_EXCLUSIVE);
	for (int i = 0; i < ledger_log_len; i++)
	{
		LedgerLogEntry *e = &ledger_log[i];

		/* a change logged before a reset belongs to a ledger now gone */
		if (e->generation != FrameqLedger->generation ||
			pg_atomic_read_u64(&FrameqLedger->valid_generation) != e->generation)
			continue;
		if (e->applied)
			apply_delta(e->entry, 0, 0, 0, -1, false);
		else
			apply_delta(e->entry, e->cc, e->gpus, e->running, -1, e->requeued);
	}
	LWLockRelease(FrameqLedger->lock);
	ledger_log_len = 0;
}

static void
ledger_xact_callback(XactEvent event, void *arg)
{
	switch (event)
	{
		case XACT_EVENT_PRE_PREPARE:
			if (ledger_log_len > 0)
				ereport(ERROR,
						(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
						 errmsg("cannot PREPARE a transaction that booked or released frameq procs"),
						 errdetail("frameq's caps ledger tracks a transaction's bookings in the session that made them.")));
			break;
		case XACT_EVENT_COMMIT:
			if (ledger_log_len > 0)
				log_commit();
			if (requeue_ran != 0)
				requeue_commit();
			proc_written = false;
			log_has_release = false;
			break;
		case XACT_EVENT_ABORT:
			if (ledger_log_len > 0)
				log_discard(InvalidSubTransactionId);
			requeue_ran = 0;
			proc_written = false;
			log_has_release = false;
			break;
		case XACT_EVENT_PREPARE:
			proc_written = false;
			log_has_release = false;
			break;
		default:
			break;
	}
}

static void
ledger_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
						SubTransactionId parentSubid, void *arg)
{
	if (ledger_log_len == 0)
		return;
	switch (event)
	{
		case SUBXACT_EVENT_ABORT_SUB:
			log_discard(mySubid);
			break;
		case SUBXACT_EVENT_COMMIT_SUB:
			for (int i = 0; i < ledger_log_len; i++)
				if (ledger_log[i].subid == mySubid)
					ledger_log[i].subid = parentSubid;
			break;
		default:
			break;
	}
}

void
frameq_ledger_init(void)
{
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = ledger_shmem_request;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = ledger_shmem_startup;

	RegisterXactCallback(ledger_xact_callback, NULL);
	RegisterSubXactCallback(ledger_subxact_callback, NULL);
}

typedef struct RebuildRow
{
	LedgerKey	key;
	int32		cc;
	int32		gpus;
	int32		running;
} RebuildRow;

/* the locks a rebuild takes, given back once the ledger is valid */
static void
unlock_rebuild(Oid procrel, Oid queuerel)
{
	if (OidIsValid(queuerel))
		UnlockRelationOid(queuerel, ShareRowExclusiveLock);
	UnlockRelationOid(procrel, ShareRowExclusiveLock);
}

/*
 * What the procs add up to, per capped entity (kind, id, id2, cores in
 * hundredths, gpus, procs): by definition, what the ledger must hold.  The
 * rebuild reads it, and check() compares the ledger with it through
 * frameq._proc_usage().  The one place that says which entities a proc
 * counts against, in SQL.
 */
static const char *const proc_usage_query =
"SELECT 1, show::int8, allocation::int8, sum(cores_cc)::int4,"
"       sum(gpus)::int4, count(*)::int4"
"  FROM frameq.proc GROUP BY show, allocation "
"UNION ALL "
"SELECT 2, folder, 0, sum(cores_cc)::int4, sum(gpus)::int4, count(*)::int4"
"  FROM frameq.proc WHERE folder IS NOT NULL GROUP BY folder "
"UNION ALL "
"SELECT 3, job, 0, sum(cores_cc)::int4, sum(gpus)::int4, count(*)::int4"
"  FROM frameq.proc GROUP BY job "
"UNION ALL "
"SELECT 4, l, 0, sum(p.cores_cc)::int4, sum(p.gpus)::int4, count(*)::int4"
"  FROM frameq.proc p, unnest(p.limits) AS l GROUP BY l";

/*
 * Every capped entity's usage as the proc table has it, read with the
 * latest snapshot, not the transaction's: in REPEATABLE READ the
 * transaction snapshot may predate procs committed before the rebuild got
 * its lock.  SPI connected; returns the rows (palloc'd), *nrows their
 * number.
 */
static RebuildRow *
read_usage(uint64 *nrows_out)
{
	SPIPlanPtr	plan;
	RebuildRow *rows;
	uint64		nrows;
	int			ret;

	plan = SPI_prepare(proc_usage_query, 0, NULL);
	if (plan == NULL)
		elog(ERROR, "frameq: could not prepare the ledger rebuild");
	ret = SPI_execute_snapshot(plan, NULL, NULL, GetLatestSnapshot(),
							   InvalidSnapshot, true, false, 0);
	if (ret != SPI_OK_SELECT)
		elog(ERROR, "frameq: ledger rebuild query failed: %s",
			 SPI_result_code_string(ret));

	nrows = SPI_processed;
	if (nrows > (uint64) frameq_ledger_size)
		ereport(ERROR,
				(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
				 errmsg("frameq's ledger needs %llu entries but frameq.ledger_size is %d",
						(unsigned long long) nrows, frameq_ledger_size),
				 errhint("Raise frameq.ledger_size and restart the server.")));
	rows = palloc(sizeof(RebuildRow) * Max(nrows, 1));
	for (uint64 i = 0; i < nrows; i++)
	{
		HeapTuple	tup = SPI_tuptable->vals[i];
		TupleDesc	desc = SPI_tuptable->tupdesc;

		make_key(&rows[i].key,
				 (LedgerKind) frameq_get_int32(tup, desc, 1, NULL),
				 frameq_get_int64(tup, desc, 2, NULL),
				 frameq_get_int64(tup, desc, 3, NULL));
		rows[i].cc = frameq_get_int32(tup, desc, 4, NULL);
		rows[i].gpus = frameq_get_int32(tup, desc, 5, NULL);
		rows[i].running = frameq_get_int32(tup, desc, 6, NULL);
	}
	*nrows_out = nrows;
	return rows;
}

/*
 * Replace the ledger's contents with these rows and mark it valid under a
 * new generation, with the requeue that the lost parked marks need due.
 */
static void
fill_ledger(const RebuildRow *rows, uint64 nrows)
{
	HASH_SEQ_STATUS seq;
	LedgerEntry *entry;

	LWLockAcquire(FrameqLedger->lock, LW_EXCLUSIVE);
	hash_seq_init(&seq, LedgerHash);
	while ((entry = hash_seq_search(&seq)) != NULL)
		hash_search(LedgerHash, &entry->key, HASH_REMOVE, NULL);
	for (uint64 i = 0; i < nrows; i++)
	{
		entry = enter_entry(&rows[i].key);
		if (entry == NULL)
			break;				/* cannot happen: size checked above */
		entry->used_cc = rows[i].cc;
		entry->used_gpus = rows[i].gpus;
		entry->running = rows[i].running;
	}
	FrameqLedger->generation++;
	pg_atomic_write_u64(&FrameqLedger->valid_generation, FrameqLedger->generation);
	/* the parked marks are gone: their layers must be queued again */
	pg_atomic_write_u64(&FrameqLedger->requeue_generation, FrameqLedger->generation);
	LWLockRelease(FrameqLedger->lock);
}

/*
 * Rebuild the ledger from the proc table.  See the locking protocol above.
 */
static void
ledger_rebuild(void)
{
	Oid			nsp;
	Oid			procrel;
	Oid			queuerel;
	RebuildRow *rows;
	uint64		nrows;
	int			lock_nest;

	if (proc_written)
		ereport(ERROR,
				(errcode(ERRCODE_FRAMEQ_LEDGER_REBUILT),
				 errmsg("frameq's caps ledger must be rebuilt after this transaction's changes to procs"),
				 errhint("Retry the transaction.")));

	nsp = get_namespace_oid("frameq", false);
	procrel = get_relname_relid("proc", nsp);
	if (!OidIsValid(procrel))
		elog(ERROR, "frameq: relation frameq.proc does not exist");
	/*
	 * A writer that keeps proc locked past lock_wait: fail (55P03), do not
	 * wait on.  The dispatch queue too, where it exists: a rebuild forgets
	 * the parked marks, so no transaction that may have parked rows (a
	 * reserve() that deleted queue rows) may still be in flight when it
	 * ends ("Parking" above).
	 */
	queuerel = get_relname_relid("dispatch_queue", nsp);
	lock_nest = frameq_bound_lock_waits();
	LockRelationOid(procrel, ShareRowExclusiveLock);
	if (OidIsValid(queuerel))
		LockRelationOid(queuerel, ShareRowExclusiveLock);
	frameq_end_lock_waits(lock_nest);

	if (pg_atomic_read_u64(&FrameqLedger->valid_generation) != 0)
	{
		/* another backend rebuilt it while we waited */
		unlock_rebuild(procrel, queuerel);
		return;
	}

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "frameq: SPI_connect failed");
	rows = read_usage(&nrows);
	fill_ledger(rows, nrows);
	SPI_finish();
	/* valid now: see "Why releasing early is safe" above */
	unlock_rebuild(procrel, queuerel);
}

void
frameq_ledger_ensure_valid(void)
{
	frameq_require_preload();
	if (pg_atomic_read_u64(&FrameqLedger->valid_generation) != 0)
		return;
	if (RecoveryInProgress())
		return;					/* a standby books nothing; no lock to take */
	ledger_rebuild();
}

/* the proc table's statement trigger calls this before any change */
void
frameq_ledger_note_proc_write(void)
{
	frameq_ledger_ensure_valid();
	proc_written = true;
}

/* a proc's folder (if it has one) and job items (frameq.h, LedgerKeys) */
int
frameq_ledger_job_items(LedgerItem *items, const LedgerKeys *keys, const LedgerCaps *caps)
{
	int			n = 0;

	if (keys->has_folder)
		items[n++] = (LedgerItem)
	{
		LEDGER_FOLDER, keys->folder, 0,
			caps ? caps->folder_cc : LEDGER_NO_CAP,
			caps ? caps->folder_gpus : LEDGER_NO_CAP, LEDGER_NO_CAP
	};
	items[n++] = (LedgerItem)
	{
		LEDGER_JOB, keys->job, 0,
			caps ? caps->job_cc : LEDGER_NO_CAP,
			caps ? caps->job_gpus : LEDGER_NO_CAP, LEDGER_NO_CAP
	};
	return n;
}

/*
 * A proc's ledger items, in the fixed order subscription, folder, job,
 * limits (frameq.h, LedgerKeys); items has room for FRAMEQ_MAX_PROC_ITEMS.
 */
int
frameq_ledger_items(LedgerItem *items, const LedgerKeys *keys, const LedgerCaps *caps)
{
	int			n = 0;

	Assert(keys->nlimits <= FRAMEQ_MAX_LAYER_LIMITS);
	items[n++] = (LedgerItem)
	{
		LEDGER_SUBSCRIPTION, keys->show, keys->allocation,
			caps ? caps->burst_cc : LEDGER_NO_CAP, LEDGER_NO_CAP, LEDGER_NO_CAP
	};
	n += frameq_ledger_job_items(items + n, keys, caps);
	for (int k = 0; k < keys->nlimits; k++)
		items[n++] = (LedgerItem)
	{
		LEDGER_LIMIT, keys->limits[k], 0,
			LEDGER_NO_CAP, LEDGER_NO_CAP, caps ? caps->limits[k] : LEDGER_NO_CAP
	};
	return n;
}

/*
 * Check every item's caps against its usage plus this booking and, only if
 * all fit, add the booking to all of them.  Returns -1 on success, or the
 * index of the first item whose cap would be exceeded (nothing changed).
 */
int
frameq_ledger_try_charge(const LedgerItem *items, int nitems,
						 int32 cc, int32 gpus)
{
	LedgerEntry *entries[FRAMEQ_MAX_PROC_ITEMS];
	LedgerKey	keys[FRAMEQ_MAX_PROC_ITEMS];
	OwnRelease	own[FRAMEQ_MAX_PROC_ITEMS];
	uint64		own_generation;
	uint64		generation;
	int			failed = -1;

	if (nitems > (int) lengthof(entries))
		elog(ERROR, "frameq: a booking counts against too many capped entities (%d)", nitems);

	frameq_ledger_ensure_valid();
	log_reserve(nitems);
	for (int i = 0; i < nitems; i++)
		make_key(&keys[i], items[i].kind, items[i].id, items[i].id2);
	own_generation = own_releases(items, nitems, own);

	LWLockAcquire(FrameqLedger->lock, LW_EXCLUSIVE);
	generation = FrameqLedger->generation;
	for (int i = 0; i < nitems; i++)
		entries[i] = enter_or_fail(&keys[i]);
	for (int i = 0; i < nitems && failed < 0; i++)
		if (over_cap(&items[i], entries[i], cc, gpus,
					 own_generation != 0 && own_generation == generation ? &own[i] : NULL))
			failed = i;
	for (int i = 0; i < nitems; i++)
	{
		LedgerEntry *e = entries[i];

		if (failed < 0)
		{
			e->used_cc += cc;
			e->used_gpus += gpus;
			e->running += 1;
			e->inflight += 1;
		}
		else
			forget_if_unused(e);
	}
	LWLockRelease(FrameqLedger->lock);

	if (failed < 0)
		for (int i = 0; i < nitems; i++)
			log_append(entries[i], cc, gpus, 1, true, generation);
	return failed;
}

/*
 * Give back a charge this transaction took and did not use.  Applied at
 * once (it only removes our own uncommitted increment) and logged so that
 * an abort, which undoes the charge, undoes this too.
 */
void
frameq_ledger_uncharge(const LedgerItem *items, int nitems,
					   int32 cc, int32 gpus)
{
	uint64		generation;
	LedgerKey	key;

	log_reserve(nitems);
	LWLockAcquire(FrameqLedger->lock, LW_EXCLUSIVE);
	generation = FrameqLedger->generation;
	for (int i = 0; i < nitems; i++)
	{
		LedgerEntry *entry;

		make_key(&key, items[i].kind, items[i].id, items[i].id2);
		/* our own charge is in it, unless a reset has emptied the ledger since */
		entry = hash_search(LedgerHash, &key, HASH_FIND, NULL);
		if (entry == NULL)
			continue;
		apply_delta(entry, -cc, -gpus, -1, 1, false);
		log_append(entry, -cc, -gpus, -1, true, generation);
	}
	LWLockRelease(FrameqLedger->lock);
}

/*
 * A proc was deleted: take it off the ledger when this transaction commits.
 * Returns a bit per item (1 << i) whose entry is parked: the caller must
 * queue that job's or folder's layers again in this (sub)transaction, and
 * the commit then clears the mark (see "Parking" above).
 */
uint32
frameq_ledger_release(const LedgerItem *items, int nitems,
					  int32 cc, int32 gpus)
{
	uint64		generation;
	LedgerKey	key;
	uint32		parked = 0;

	Assert(nitems <= 32);
	log_reserve(nitems);
	log_has_release = true;
	LWLockAcquire(FrameqLedger->lock, LW_EXCLUSIVE);

	/*
	 * An invalid ledger will be rebuilt from the table after this
	 * transaction ends (the rebuild waits for it), so there is nothing to
	 * subtract from, and nothing is parked.
	 */
	generation = pg_atomic_read_u64(&FrameqLedger->valid_generation);
	for (int i = 0; i < nitems && generation != 0; i++)
	{
		LedgerEntry *entry;
		LedgerLogEntry *e;

		make_key(&key, items[i].kind, items[i].id, items[i].id2);
		entry = enter_or_fail(&key);
		entry->inflight += 1;
		e = log_append(entry, -cc, -gpus, -1, false, generation);
		if (entry->parked)
		{
			e->requeued = true;
			parked |= (uint32) 1 << i;
		}
	}
	LWLockRelease(FrameqLedger->lock);
	return parked;
}

/*
 * An entity's usage as this transaction's bookings see it: its own
 * releases count as done (own_releases), as in the charge's cap check.
 */
void
frameq_ledger_read(LedgerKind kind, int64 id, int64 id2,
				   int32 *cc, int32 *gpus, int32 *running)
{
	LedgerItem	item = {kind, id, id2, LEDGER_NO_CAP, LEDGER_NO_CAP, LEDGER_NO_CAP};
	OwnRelease	own;
	uint64		own_generation;
	LedgerKey	key;
	LedgerEntry *entry;

	own_generation = own_releases(&item, 1, &own);
	make_key(&key, kind, id, id2);
	LWLockAcquire(FrameqLedger->lock, LW_SHARED);
	if (own_generation == 0 || own_generation != FrameqLedger->generation)
		memset(&own, 0, sizeof(own));
	entry = hash_search(LedgerHash, &key, HASH_FIND, NULL);
	*cc = (entry ? entry->used_cc : 0) - own.cc;
	*gpus = (entry ? entry->used_gpus : 0) - own.gpus;
	*running = (entry ? entry->running : 0) - own.running;
	LWLockRelease(FrameqLedger->lock);
}

/*
 * reserve() met a dispatch queue row of a job with these job and folder
 * caps: is a proc of its size over one of them, and may the row leave the
 * queue?  CAPS_PARKED marks the entry that is over its cap parked (see
 * "Parking" above); the caller then deletes the row through a statement
 * that tests frameq_ledger_still_parked.  Only a shortcut: the charge
 * decides whether a proc fits.
 */
CapState
frameq_ledger_park(const LedgerItem *items, int nitems, int32 cc, int32 gpus)
{
	CapState	state = CAPS_FIT;
	LedgerKey	key;
	OwnRelease	own[FRAMEQ_MAX_PROC_ITEMS];
	uint64		own_generation;
	bool		counts;

	Assert(nitems <= FRAMEQ_MAX_PROC_ITEMS);
	own_generation = own_releases(items, nitems, own);

	/* the common case, a row within its caps, needs only a shared lock */
	LWLockAcquire(FrameqLedger->lock, LW_SHARED);
	counts = own_generation != 0 && own_generation == FrameqLedger->generation;
	for (int i = 0; i < nitems && state == CAPS_FIT; i++)
	{
		make_key(&key, items[i].kind, items[i].id, items[i].id2);
		if (over_cap(&items[i], hash_search(LedgerHash, &key, HASH_FIND, NULL), cc, gpus,
					 counts ? &own[i] : NULL))
			state = CAPS_OVER;
	}
	LWLockRelease(FrameqLedger->lock);
	if (state == CAPS_FIT)
		return state;

	state = CAPS_FIT;
	LWLockAcquire(FrameqLedger->lock, LW_EXCLUSIVE);
	counts = own_generation != 0 && own_generation == FrameqLedger->generation;
	for (int i = 0; i < nitems; i++)
	{
		LedgerEntry *entry;

		make_key(&key, items[i].kind, items[i].id, items[i].id2);
		entry = hash_search(LedgerHash, &key, HASH_FIND, NULL);
		if (!over_cap(&items[i], entry, cc, gpus, counts ? &own[i] : NULL))
			continue;
		if (state == CAPS_FIT)
			state = CAPS_OVER;
		if (pg_atomic_read_u64(&FrameqLedger->requeue_generation) != 0)
			continue;
		/* a cap below one proc: an entry of its own, but never more than half the table */
		if (entry == NULL && hash_get_num_entries(LedgerHash) < frameq_ledger_size / 2)
			entry = enter_entry(&key);
		if (entry != NULL && entry->inflight == 0)
		{
			entry->parked = true;
			state = CAPS_PARKED;
		}
	}
	LWLockRelease(FrameqLedger->lock);
	return state;
}

/*
 * May a row that reserve() parked be deleted now?  Only if one of the
 * entries is still parked, with nothing in flight, and over its cap.
 */
bool
frameq_ledger_still_parked(const LedgerItem *items, int nitems, int32 cc, int32 gpus)
{
	bool		result = false;
	LedgerKey	key;

	LWLockAcquire(FrameqLedger->lock, LW_SHARED);
	for (int i = 0; i < nitems && !result; i++)
	{
		LedgerEntry *entry;

		make_key(&key, items[i].kind, items[i].id, items[i].id2);
		entry = hash_search(LedgerHash, &key, HASH_FIND, NULL);
		result = entry != NULL && entry->parked && entry->inflight == 0 &&
			pg_atomic_read_u64(&FrameqLedger->requeue_generation) == 0 &&
			over_cap(&items[i], entry, cc, gpus, NULL);
	}
	LWLockRelease(FrameqLedger->lock);
	return result;
}

/*
 * The rebuild whose parked layers are still to be queued again, or 0.  The
 * caller queues every waiting layer and calls frameq_ledger_requeue_ran.
 */
uint64
frameq_ledger_requeue_due(void)
{
	uint64		due = pg_atomic_read_u64(&FrameqLedger->requeue_generation);

	if (due == 0 || due == requeue_ran ||
		due != pg_atomic_read_u64(&FrameqLedger->valid_generation))
		return 0;
	return due;
}

void
frameq_ledger_requeue_ran(uint64 generation)
{
	requeue_ran = generation;
}

/* at commit: the requeue is done, unless another rebuild has come since */
static void
requeue_commit(void)
{
	uint64		expected = requeue_ran;

	pg_atomic_compare_exchange_u64(&FrameqLedger->requeue_generation, &expected, 0);
	requeue_ran = 0;
}

PG_FUNCTION_INFO_V1(frameq_ledger_parked);

/*
 * A copy of the entries (only the parked ones if parked_only), taken under
 * the lock so that the caller builds its tuples after releasing it.
 */
static LedgerEntry *
copy_entries(bool parked_only, int *n)
{
	HASH_SEQ_STATUS seq;
	LedgerEntry *entry;
	LedgerEntry *copy;
	long		size;

	*n = 0;
	LWLockAcquire(FrameqLedger->lock, LW_SHARED);
	size = hash_get_num_entries(LedgerHash);
	copy = palloc(sizeof(LedgerEntry) * Max(size, 1));
	hash_seq_init(&seq, LedgerHash);
	while ((entry = hash_seq_search(&seq)) != NULL)
	{
		if (*n < size && (entry->parked || !parked_only) &&
			entry->key.kind >= LEDGER_SUBSCRIPTION && entry->key.kind <= LEDGER_LIMIT)
			copy[(*n)++] = *entry;
	}
	LWLockRelease(FrameqLedger->lock);
	return copy;
}

static const char *const kind_names[] = {NULL, "subscription", "folder", "job", "limit"};

/* the parked entries: kind, id, inflight (view frameq.dispatch_parked) */
Datum
frameq_ledger_parked(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	LedgerEntry *copy;
	int			n;

	/*
	 * No rebuild here: a reader of the view needs no right to the proc
	 * table.  An invalid ledger has nothing parked.
	 */
	frameq_require_preload();
	InitMaterializedSRF(fcinfo, 0);
	if (pg_atomic_read_u64(&FrameqLedger->valid_generation) == 0)
		return (Datum) 0;
	copy = copy_entries(true, &n);
	for (int i = 0; i < n; i++)
	{
		Datum		values[3];
		bool		nulls[3] = {0};

		values[0] = CStringGetTextDatum(kind_names[copy[i].key.kind]);
		values[1] = Int64GetDatum(copy[i].key.id);
		values[2] = Int32GetDatum(copy[i].inflight);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}

PG_FUNCTION_INFO_V1(frameq_ledger_requeue_pending);

/* is a rebuild's requeue still to commit?  (tests and diagnostics) */
Datum
frameq_ledger_requeue_pending(PG_FUNCTION_ARGS)
{
	frameq_require_preload();
	PG_RETURN_BOOL(pg_atomic_read_u64(&FrameqLedger->requeue_generation) != 0);
}

PG_FUNCTION_INFO_V1(frameq_ledger);

Datum
frameq_ledger(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	LedgerEntry *copy;
	int			n;

	frameq_ledger_ensure_valid();
	InitMaterializedSRF(fcinfo, 0);
	copy = copy_entries(false, &n);
	for (int i = 0; i < n; i++)
	{
		Datum		values[6];
		bool		nulls[6] = {0};

		/* kept only for a parked mark or a change in flight */
		if (copy[i].used_cc == 0 && copy[i].used_gpus == 0 && copy[i].running == 0)
			continue;
		values[0] = CStringGetTextDatum(kind_names[copy[i].key.kind]);
		values[1] = Int64GetDatum(copy[i].key.id);
		values[2] = Int64GetDatum(copy[i].key.id2);
		values[3] = Int32GetDatum(copy[i].used_cc);
		values[4] = Int32GetDatum(copy[i].used_gpus);
		values[5] = Int32GetDatum(copy[i].running);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}

PG_FUNCTION_INFO_V1(frameq_ledger_pending);

/*
 * This session's releases that the ledger will apply when its transaction
 * commits: check() adds them so that it can run in a transaction that has
 * released procs.
 */
Datum
frameq_ledger_pending(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	uint64		current;

	/* first: without the preload there is no shared memory to read */
	frameq_require_preload();
	current = pg_atomic_read_u64(&FrameqLedger->valid_generation);
	InitMaterializedSRF(fcinfo, 0);
	for (int i = 0; i < ledger_log_len; i++)
	{
		LedgerLogEntry *e = &ledger_log[i];
		Datum		values[6];
		bool		nulls[6] = {0};

		if (e->applied || e->generation != current ||
			e->key.kind < 1 || e->key.kind > 4)
			continue;
		values[0] = CStringGetTextDatum(kind_names[e->key.kind]);
		values[1] = Int64GetDatum(e->key.id);
		values[2] = Int64GetDatum(e->key.id2);
		values[3] = Int32GetDatum(e->cc);
		values[4] = Int32GetDatum(e->gpus);
		values[5] = Int32GetDatum(e->running);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}

PG_FUNCTION_INFO_V1(frameq_ledger_reset);

Datum
frameq_ledger_reset(PG_FUNCTION_ARGS)
{
	frameq_require_preload();
	LWLockAcquire(FrameqLedger->lock, LW_EXCLUSIVE);
	pg_atomic_write_u64(&FrameqLedger->valid_generation, 0);
	LWLockRelease(FrameqLedger->lock);
	frameq_dispatch_reset();
	PG_RETURN_VOID();
}

PG_FUNCTION_INFO_V1(frameq_ledger_ensure);

Datum
frameq_ledger_ensure(PG_FUNCTION_ARGS)
{
	bool		was_valid;

	frameq_require_preload();
	was_valid = pg_atomic_read_u64(&FrameqLedger->valid_generation) != 0;
	frameq_ledger_ensure_valid();
	PG_RETURN_BOOL(!was_valid);
}

PG_FUNCTION_INFO_V1(frameq_proc_usage);

/* frameq._proc_usage(): proc_usage_query's rows, the kinds by name, for check() */
Datum
frameq_proc_usage(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;

	InitMaterializedSRF(fcinfo, 0);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "frameq: SPI_connect failed");
	if (SPI_execute(proc_usage_query, true, 0) != SPI_OK_SELECT)
		elog(ERROR, "frameq: proc usage query failed");
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		HeapTuple	tup = SPI_tuptable->vals[i];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		int32		kind = frameq_get_int32(tup, desc, 1, NULL);
		Datum		values[6];
		bool		nulls[6] = {0};

		values[0] = CStringGetTextDatum(kind_names[kind]);
		values[1] = Int64GetDatum(frameq_get_int64(tup, desc, 2, NULL));
		values[2] = Int64GetDatum(frameq_get_int64(tup, desc, 3, NULL));
		values[3] = Int32GetDatum(frameq_get_int32(tup, desc, 4, NULL));
		values[4] = Int32GetDatum(frameq_get_int32(tup, desc, 5, NULL));
		values[5] = Int32GetDatum(frameq_get_int32(tup, desc, 6, NULL));
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	SPI_finish();
	return (Datum) 0;
}
