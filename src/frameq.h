/*-------------------------------------------------------------------------
 *
 * frameq.h
 *	  Declarations shared by frameq's modules: settings, the ledger, host
 *	  authentication, the release context and small SPI helpers.
 *
 *-------------------------------------------------------------------------
 */
#ifndef FRAMEQ_H
#define FRAMEQ_H

#include "postgres.h"

#include "common/int.h"
#include "executor/spi.h"
#include "storage/itemptr.h"
#include "utils/relcache.h"
#include "utils/timestamp.h"

/* frameq's own SQLSTATEs live in class FQ */
#define ERRCODE_FRAMEQ_STALE_EPOCH		MAKE_SQLSTATE('F','Q','0','0','1')
#define ERRCODE_FRAMEQ_LEASE_EXPIRED	MAKE_SQLSTATE('F','Q','0','0','2')
#define ERRCODE_FRAMEQ_LEDGER_REBUILT	MAKE_SQLSTATE('F','Q','0','0','3')
#define ERRCODE_FRAMEQ_CAP_EXCEEDED		MAKE_SQLSTATE('F','Q','0','0','4')
#define ERRCODE_FRAMEQ_HOST_FULL		MAKE_SQLSTATE('F','Q','0','0','5')

/*
 * The host lock's tag: an advisory lock tag whose fourth field is neither
 * 1 nor 2, the two values SQL's pg_advisory_* functions use, so no SQL
 * function can take, hold or wait for it (the trick Citus uses for its own
 * locks).  Fields: database, "FQ", host id, "FQ".
 */
#define FRAMEQ_LOCK_CLASS		0x4651
#define SET_LOCKTAG_FRAMEQ_HOST(tag, host) \
	SET_LOCKTAG_ADVISORY(tag, MyDatabaseId, FRAMEQ_LOCK_CLASS, (uint32) (host), \
						 FRAMEQ_LOCK_CLASS)

/*
 * A job's dispatch lock, on a tag of the same kind (fourth field "FR"):
 * held in ShareLock by every transaction that makes the job's tasks
 * waiting and relies on what it read of the job (its layers' dependency
 * counts, their dispatch queue rows) staying put until it commits; taken
 * in ExclusiveLock, waiting, by depend_job() before it raises those counts,
 * and, only tried, by reserve()'s tidy before it deletes the job's queue
 * rows (sql/src/dispatch.sql, sql/src/depends.sql).  Fields: database, the
 * job id's high and low halves, "FR".
 */
#define FRAMEQ_JOB_LOCK_CLASS	0x4652
#define SET_LOCKTAG_FRAMEQ_JOB(tag, job) \
	SET_LOCKTAG_ADVISORY(tag, MyDatabaseId, (uint32) ((uint64) (job) >> 32), \
						 (uint32) (job), FRAMEQ_JOB_LOCK_CLASS)

/* guc.c */
extern int	frameq_lease_ttl;		/* seconds */
extern double frameq_clock_drift;
extern int	frameq_lease_margin;	/* seconds */
extern int	frameq_kill_resend_interval;	/* milliseconds */
extern int	frameq_max_frames_per_reserve;
extern int	frameq_max_jobs_examined;
extern int	frameq_ledger_size;
extern char *frameq_database;
extern bool frameq_quarantine;
extern int	frameq_lock_wait;		/* milliseconds */
extern int	frameq_retention;		/* seconds; 0: never prune */
extern void frameq_guc_init(void);

/* frameq.c */
#define FRAMEQ_LIBRARY_VERSION	"0.7.0"
/*
 * a relation that the newest upgrade step the library needs creates
 * (frameq_schema_current): 0.6.0's; 0.7.0 changes nothing the library calls
 */
#define FRAMEQ_SCHEMA_MARKER	"frame_raised"
extern bool frameq_loaded_at_startup;
extern void frameq_require_preload(void);
extern bool frameq_schema_current(void);
extern void frameq_require_schema(void);

/* util.c */
extern int64 frameq_random_id(void);
extern const char *frameq_clip(const char *value);
extern const char *frameq_clip_text(text *value);
extern bool frameq_lock_host(int32 host, int wait_ms);
extern bool frameq_hold_job(int64 job);
extern bool frameq_bounded_wait(void (*fn) (void *arg), void *arg, int wait_ms);
extern SPIPlanPtr frameq_prepare(const char *sql, int nargs, Oid *argtypes);
extern SPIPlanPtr frameq_prepare_options(const char *sql, int nargs, Oid *argtypes,
										 int options);
extern Datum frameq_numeric_from_cc(int32 cc);
extern bool frameq_get_bool(HeapTuple tup, TupleDesc desc, int col, bool *isnull);
extern int64 frameq_get_int64(HeapTuple tup, TupleDesc desc, int col, bool *isnull);
extern int32 frameq_get_int32(HeapTuple tup, TupleDesc desc, int col, bool *isnull);

extern int	frameq_bound_lock_waits(void);
extern void frameq_end_lock_waits(int nest);

/* ledger.c */
typedef enum LedgerKind
{
	LEDGER_SUBSCRIPTION = 1,	/* id = show, id2 = allocation */
	LEDGER_FOLDER = 2,
	LEDGER_JOB = 3,
	LEDGER_LIMIT = 4
} LedgerKind;

#define LEDGER_NO_CAP	(-1)

/*
 * The most limits a layer may name (submit refuses more, 54000), and so
 * the most ledger items one proc counts against: subscription, folder,
 * job and its limits.
 */
#define FRAMEQ_MAX_LAYER_LIMITS	12
#define FRAMEQ_MAX_PROC_ITEMS	(3 + FRAMEQ_MAX_LAYER_LIMITS)
/* the most reports one complete_many() call takes */
#define FRAMEQ_MAX_BATCH		1000

/* one capped entity a booking counts against, with its caps (-1: none) */
typedef struct LedgerItem
{
	LedgerKind	kind;
	int64		id;
	int64		id2;
	int32		cap_cc;
	int32		cap_gpus;
	int32		cap_running;
} LedgerItem;

/*
 * What a proc counts against: its show's subscription to its host's
 * allocation, its folder if it has one, its job and its layer's limits.
 * frameq_ledger_items() makes its ledger items, always in that order
 * (skipping a booking's failed item relies on it), with the caps to hold
 * it to: from caps, or LEDGER_NO_CAP everywhere if caps is NULL (a release
 * checks no cap).  frameq_ledger_job_items() makes just the folder's and
 * the job's.
 */
typedef struct LedgerKeys
{
	int32		show;
	int32		allocation;
	bool		has_folder;
	int32		folder;
	int64		job;
	int			nlimits;
	const int32 *limits;
} LedgerKeys;

typedef struct LedgerCaps
{
	int32		burst_cc;		/* the subscription's */
	int32		folder_cc;
	int32		folder_gpus;
	int32		job_cc;
	int32		job_gpus;
	const int32 *limits;		/* each limit's max_running, as keys->limits */
} LedgerCaps;

extern int	frameq_ledger_items(LedgerItem *items, const LedgerKeys *keys,
								const LedgerCaps *caps);
extern int	frameq_ledger_job_items(LedgerItem *items, const LedgerKeys *keys,
									const LedgerCaps *caps);

extern void frameq_ledger_init(void);
extern void frameq_ledger_ensure_valid(void);
extern int	frameq_ledger_try_charge(const LedgerItem *items, int nitems,
									 int32 cc, int32 gpus);
extern void frameq_ledger_uncharge(const LedgerItem *items, int nitems,
								   int32 cc, int32 gpus);
extern uint32 frameq_ledger_release(const LedgerItem *items, int nitems,
									int32 cc, int32 gpus);

/* a dispatch queue row against its job's and folder's caps (ledger.c, "Parking") */
typedef enum CapState
{
	CAPS_FIT,					/* within them */
	CAPS_OVER,					/* over one; the row stays */
	CAPS_PARKED					/* over one, which is marked parked: the row
								 * may go */
} CapState;

extern CapState frameq_ledger_park(const LedgerItem *items, int nitems,
								   int32 cc, int32 gpus);
extern bool frameq_ledger_still_parked(const LedgerItem *items, int nitems,
									   int32 cc, int32 gpus);
extern uint64 frameq_ledger_requeue_due(void);
extern void frameq_ledger_requeue_ran(uint64 generation);
extern void frameq_ledger_read(LedgerKind kind, int64 id, int64 id2,
							   int32 *cc, int32 *gpus, int32 *running);
extern void frameq_ledger_note_proc_write(void);

/*
 * Room on a host, free or asked for: cores in hundredths, memory, gpus and
 * gpu memory (bytes).  A host's free room and a frame's booking are
 * compared and moved through the three functions below, never field by
 * field.
 */
typedef struct Resources
{
	int32		cores_cc;
	int64		memory;
	int32		gpus;
	int64		gpu_memory;
} Resources;

static inline bool
resources_fit(const Resources *need, const Resources *room)
{
	return need->cores_cc <= room->cores_cc && need->memory <= room->memory &&
		need->gpus <= room->gpus && need->gpu_memory <= room->gpu_memory;
}

static inline void
resources_take(Resources *room, const Resources *r)
{
	room->cores_cc -= r->cores_cc;
	room->memory -= r->memory;
	room->gpus -= r->gpus;
	room->gpu_memory -= r->gpu_memory;
}

static inline void
resources_give(Resources *room, const Resources *r)
{
	room->cores_cc += r->cores_cc;
	room->memory += r->memory;
	room->gpus += r->gpus;
	room->gpu_memory += r->gpu_memory;
}

/*
 * sum += r, unless a field would overflow: then false and sum unchanged
 * (no host has that much room, so the sum cannot fit one).
 */
static inline bool
resources_add(Resources *sum, const Resources *r)
{
	Resources	s;

	if (pg_add_s32_overflow(sum->cores_cc, r->cores_cc, &s.cores_cc) ||
		pg_add_s64_overflow(sum->memory, r->memory, &s.memory) ||
		pg_add_s32_overflow(sum->gpus, r->gpus, &s.gpus) ||
		pg_add_s64_overflow(sum->gpu_memory, r->gpu_memory, &s.gpu_memory))
		return false;
	*sum = s;
	return true;
}

/* lease.c */
typedef struct FrameqHost
{
	int32		id;
	int32		allocation;
	int64		epoch;
	bool		up;
	bool		lease_current;
	Datum		tags;			/* text[], in the caller's memory context */
	Resources	idle;			/* its free room */
} FrameqHost;

/* the longest token any call accepts (register_host hands out 64 hex digits) */
#define FRAMEQ_MAX_TOKEN_BYTES	256
extern int32 frameq_host_authenticate(text *name, text *token);
extern void frameq_host_load(int32 host_id, FrameqHost *host);
extern void frameq_host_check_epoch(const FrameqHost *host, const char *name,
									int64 epoch);
extern int64 frameq_lease_period_for_us(int64 ttl_us);
extern int64 frameq_lease_period_us(void);

/* dispatch.c */
typedef struct DispatchStamp
{
	uint64		cleared;
	uint32		lowered;
	bool		present;
} DispatchStamp;

extern void frameq_dispatch_init(void);
extern void frameq_dispatch_lookup(int64 layer, int32 *low, DispatchStamp *stamp);
extern void frameq_dispatch_booked(int64 layer, int32 number, const DispatchStamp *stamp);
extern void frameq_dispatch_waiting(int64 layer, int32 number);
extern bool frameq_xact_released(void);
extern void frameq_dispatch_skipped(int64 layer, int32 number);
extern void frameq_dispatch_reset(void);

/* worker.c */
extern void frameq_worker_init(void);

/* exprcache.c */
extern void frameq_exprcache_init(void);
extern void frameq_worker_wake_at_commit(void);
extern bool frameq_in_quarantine(void);

/* release.c */
typedef struct ReleaseContext
{
	int64		proc;			/* the proc this applies to; 0: none */
	const char *reason;			/* run.reason */
	const char *new_state;		/* the frame's state after release */
	bool		count_retry;	/* a failure of the frame itself */
	bool		count_requeue;	/* an exit with a requeue code: no retry used */
	int32		delay_s;		/* to 'waiting': seconds before it is bookable */
	bool		have_exit;
	int32		exit_status;
	int32		exit_signal;
	bool		have_rss;
	int64		max_rss;
	bool		oom_retry;		/* complete(oom): the task's memory is set */
	int64		memory;			/* its new frame.memory; 0 for NULL */
	const char *dead_reason;	/* dead because it fits no host; NULL if not */

	/*
	 * NULL: the release itself finishes the job if this was its last live
	 * task.  Otherwise the caller does (once for all its releases of the
	 * job: complete_many), and the release only sets *job_to_check when the
	 * frame's end was terminal.
	 */
	bool	   *job_to_check;
} ReleaseContext;

extern void frameq_release_with(const ReleaseContext *ctx);
extern bool frameq_lock_job_row(int64 job);

/* limits.c */
extern void frameq_count_host_failure(int64 job, int32 host, TimestampTz ended_at);

/*
 * The defaults of submit's requeue fields, for a job that gives none
 * (doc/reference.md): a layer without its own value follows its job's,
 * a job without one has these.  complete() computes the values in force.
 */
#define FRAMEQ_DEFAULT_REQUEUE_DELAY	30	/* seconds */
#define FRAMEQ_DEFAULT_MAX_REQUEUES		20
#define FRAMEQ_DEFAULT_RETRY_DELAY		0	/* seconds */

/* rowread.c: key probes of frameq's tables below the executor */
typedef struct FrameqColumn
{
	const char *name;
	Oid			type;
	Oid			eqproc;			/* its equality function, if it is a key */
} FrameqColumn;

/*
 * A table and the columns a read returns, in the order given; attnums is
 * the caller's array of ncols, zeroed at first (the columns' attribute
 * numbers, found and checked at each read), as are relid and indexid.
 */
typedef struct FrameqTable
{
	const char *relname;
	const char *indexname;		/* NULL: read the whole table */
	int			ncols;
	const FrameqColumn *cols;
	AttrNumber *attnums;
	Oid			relid;			/* kept per backend, checked at each read */
	Oid			indexid;
} FrameqTable;

#define FRAMEQ_READ_MAX_KEYS	5

typedef struct FrameqRead
{
	FrameqTable *table;
	Relation	rel;
	Relation	index;
	struct IndexScanDescData *iscan;
	struct TableScanDescData *hscan;
	struct TupleTableSlot *slot;
} FrameqRead;

extern void frameq_read_begin(FrameqRead *r, FrameqTable *t, bool fresh, int nkeys,
							  const int *keycols, const Datum *keys);
extern bool frameq_read_next(FrameqRead *r, Datum *values, bool *nulls);
extern ItemPointerData frameq_read_tid(FrameqRead *r);
extern void frameq_read_end(FrameqRead *r);
extern bool frameq_text_is(Datum value, const char *s);
extern Datum frameq_read_copy(Datum value);

/* booking.c: charges taken by reserve() that the insert trigger adopts */
extern bool frameq_adopt_precharge(int64 proc);

#endif							/* FRAMEQ_H */
