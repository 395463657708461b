/*-------------------------------------------------------------------------
 *
 * util.c
 *	  Small helpers: random run tokens and host tokens, kept SPI plans,
 *	  centicore conversion, typed access to SPI result columns, quoting
 *	  callers' values in messages, and the host lock.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "fmgr.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "nodes/parsenodes.h"
#include "storage/lock.h"
#include "storage/proc.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/numeric.h"
#include "utils/resowner.h"

#include "frameq.h"

/*
 * A run token: 63 random bits from the strong generator.  A sequence would
 * restart below values already handed out when a failover loses the last
 * commits; random tokens cannot collide in practice, and the proc table's
 * primary key catches the impossible case.
 */
int64
frameq_random_id(void)
{
	uint64		v;

	do
	{
		if (!pg_strong_random(&v, sizeof(v)))
			ereport(ERROR,
					(errcode(ERRCODE_INTERNAL_ERROR),
					 errmsg("could not generate a random run token")));
		v &= UINT64CONST(0x7FFFFFFFFFFFFFFF);
	} while (v == 0);

	return (int64) v;
}

/*
 * Prepare a statement once per backend and keep its plan.  Callers hold
 * the result in a static variable.  The plan is generic: every statement
 * here is an index probe whose best plan does not depend on the values, and
 * re-planning for each call's parameters cost more than the probes.
 */
SPIPlanPtr
frameq_prepare(const char *sql, int nargs, Oid *argtypes)
{
	return frameq_prepare_options(sql, nargs, argtypes, CURSOR_OPT_GENERIC_PLAN);
}

/* the same, with planner options (a cursor read in batches wants FAST_PLAN) */
SPIPlanPtr
frameq_prepare_options(const char *sql, int nargs, Oid *argtypes, int options)
{
	SPIPlanPtr	plan = SPI_prepare_cursor(sql, nargs, argtypes, options);

	if (plan == NULL)
		elog(ERROR, "frameq: SPI_prepare failed (%s): %s",
			 SPI_result_code_string(SPI_result), sql);
	if (SPI_keepplan(plan) != 0)
		elog(ERROR, "frameq: SPI_keepplan failed");
	return plan;
}

Datum
frameq_numeric_from_cc(int32 cc)
{
	return NumericGetDatum(int64_div_fast_to_numeric(cc, 2));
}

bool
frameq_get_bool(HeapTuple tup, TupleDesc desc, int col, bool *isnull)
{
	bool		n;
	Datum		d = SPI_getbinval(tup, desc, col, &n);

	if (isnull)
		*isnull = n;
	return n ? false : DatumGetBool(d);
}

int64
frameq_get_int64(HeapTuple tup, TupleDesc desc, int col, bool *isnull)
{
	bool		n;
	Datum		d = SPI_getbinval(tup, desc, col, &n);

	if (isnull)
		*isnull = n;
	return n ? 0 : DatumGetInt64(d);
}

int32
frameq_get_int32(HeapTuple tup, TupleDesc desc, int col, bool *isnull)
{
	bool		n;
	Datum		d = SPI_getbinval(tup, desc, col, &n);

	if (isnull)
		*isnull = n;
	return n ? 0 : DatumGetInt32(d);
}

PG_FUNCTION_INFO_V1(frameq_random_token);

/* a host's secret: 32 random bytes, hex encoded; only its hash is stored */
Datum
frameq_random_token(PG_FUNCTION_ARGS)
{
	uint8		buf[32];
	char		hex[sizeof(buf) * 2 + 1];
	static const char digits[] = "0123456789abcdef";

	if (!pg_strong_random(buf, sizeof(buf)))
		ereport(ERROR,
				(errcode(ERRCODE_INTERNAL_ERROR),
				 errmsg("could not generate a random host token")));
	for (int i = 0; i < (int) sizeof(buf); i++)
	{
		hex[2 * i] = digits[buf[i] >> 4];
		hex[2 * i + 1] = digits[buf[i] & 0xF];
	}
	hex[sizeof(hex) - 1] = '\0';
	PG_RETURN_TEXT_P(cstring_to_text(hex));
}

/* how many characters of a caller's value an error message quotes */
#define FRAMEQ_CLIP_CHARS	64

/*
 * At most 64 characters of a value a caller gave us, for an error message
 * (with "..." when cut), so that a hostile 10 MB argument cannot become a
 * 10 MB log line.  Cuts on a character boundary.  frameq._clip() is the
 * same rule in SQL.
 */
const char *
frameq_clip(const char *value)
{
	int			len = strlen(value);
	int			cut;
	char	   *result;

	if (pg_mbstrlen_with_len(value, len) <= FRAMEQ_CLIP_CHARS)
		return value;
	cut = pg_mbcharcliplen(value, len, FRAMEQ_CLIP_CHARS);
	result = palloc(cut + 4);
	memcpy(result, value, cut);
	strcpy(result + cut, "...");
	return result;
}

/* the same for a text datum, without detoasting more than needed */
const char *
frameq_clip_text(text *value)
{
	int			len = VARSIZE_ANY_EXHDR(value);
	/* a character is at most MAX_MULTIBYTE_CHAR_LEN bytes */
	int			take = Min(len, (FRAMEQ_CLIP_CHARS + 1) * MAX_MULTIBYTE_CHAR_LEN);
	char	   *s = palloc(take + 1);

	memcpy(s, VARDATA_ANY(value), take);
	s[take] = '\0';
	/* cutting at a byte count may split the last character: clip by characters */
	if (take < len || pg_mbstrlen_with_len(s, take) > FRAMEQ_CLIP_CHARS)
	{
		int			cut = pg_mbcharcliplen(s, take, FRAMEQ_CLIP_CHARS);
		char	   *result = palloc(cut + 4);

		memcpy(result, s, cut);
		strcpy(result + cut, "...");
		return result;
	}
	return s;
}

/*
 * Run fn(arg), which waits for a lock, waiting at most wait_ms
 * milliseconds; returns false if the wait timed out (fn's effects undone),
 * true when fn ran.  The wait is a real one in the lock's queue (so we are
 * woken the moment the holder ends, and the deadlock detector sees us),
 * bounded the way lock_timeout bounds a statement's waits: with
 * LockTimeout lowered to wait_ms, in a subtransaction so that the
 * timeout's error can be caught and turned into "false".  Locks taken are
 * handed up to the calling transaction when the subtransaction commits.
 * A session's own lock_timeout, if shorter, still applies; a cancel or a
 * deadlock is still an error.
 */
bool
frameq_bounded_wait(void (*fn) (void *arg), void *arg, int wait_ms)
{
	MemoryContext oldcontext = CurrentMemoryContext;
	ResourceOwner oldowner = CurrentResourceOwner;
	int			saved_timeout = LockTimeout;
	volatile bool done = false;

	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(oldcontext);
	PG_TRY();
	{
		if (LockTimeout <= 0 || LockTimeout > wait_ms)
			LockTimeout = wait_ms;
		fn(arg);
		LockTimeout = saved_timeout;
		done = true;
		ReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(oldcontext);
		CurrentResourceOwner = oldowner;
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		LockTimeout = saved_timeout;
		MemoryContextSwitchTo(oldcontext);
		edata = CopyErrorData();
		FlushErrorState();
		RollbackAndReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(oldcontext);
		CurrentResourceOwner = oldowner;
		/* only our timeout means "not had" */
		if (edata->sqlerrcode != ERRCODE_LOCK_NOT_AVAILABLE)
			ReThrowError(edata);
		FreeErrorData(edata);
	}
	PG_END_TRY();
	return done;
}

/* frameq_bounded_wait's step: an ExclusiveLock on a frameq lock tag, waiting */
static void
acquire_exclusive(void *arg)
{
	(void) LockAcquire((LOCKTAG *) arg, ExclusiveLock, false, false);
}

/*
 * Take the host's lock (transaction-scoped, ExclusiveLock, the private tag
 * of frameq.h) waiting at most wait_ms milliseconds; 0 only tries.
 * Returns whether it is held.  A conditional try first is all the common
 * case costs; only a real wait needs the subtransaction.
 */
bool
frameq_lock_host(int32 host, int wait_ms)
{
	LOCKTAG		tag;

	SET_LOCKTAG_FRAMEQ_HOST(tag, host);
	if (LockAcquire(&tag, ExclusiveLock, false, true) != LOCKACQUIRE_NOT_AVAIL)
		return true;
	if (wait_ms <= 0)
		return false;
	return frameq_bounded_wait(acquire_exclusive, &tag, wait_ms);
}

PG_FUNCTION_INFO_V1(frameq_lock_host_sql);

/*
 * frameq._lock_host(host, wait_ms): see frameq_lock_host(); a null wait_ms
 * means frameq.lock_wait (SQL reads the setting with units, as "1s").
 */
Datum
frameq_lock_host_sql(PG_FUNCTION_ARGS)
{
	int32		wait_ms;

	/* every caller goes on to use shared memory: say what is missing now */
	frameq_require_preload();
	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("host must not be null")));
	wait_ms = PG_ARGISNULL(1) ? frameq_lock_wait : PG_GETARG_INT32(1);
	if (wait_ms < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("wait_ms must not be negative, not %d", wait_ms)));
	PG_RETURN_BOOL(frameq_lock_host(PG_GETARG_INT32(0), wait_ms));
}

/*
 * Each job's dispatch lock is an entry of the server's shared lock table,
 * which holds max_locks_per_transaction entries per backend for all of
 * them: a statement that frees, queues or tidies the tasks of thousands of
 * jobs must not take a lock each ("out of shared memory", for it and for
 * whoever else needs an entry meanwhile).  So a transaction takes at most
 * FRAMEQ_JOB_LOCKS new ones in ShareLock (freeing, queueing), past which it
 * falls back to row locks, as when the lock is busy; and at most half the
 * table's nominal size in ExclusiveLock for tidies, which have no such
 * fallback (about 3,900 jobs with the default settings), leaving the other
 * jobs' rows for later calls.  (depend_job's lock, one per call, is neither
 * counted nor refused.)
 */
#define FRAMEQ_JOB_LOCKS	64
#define FRAMEQ_TIDY_JOB_LOCKS \
	Max(FRAMEQ_JOB_LOCKS, max_locks_per_xact * MaxBackends / 2)

static LocalTransactionId job_locks_xact = InvalidLocalTransactionId;
static int	job_shares_taken = 0;
static int	job_claims_taken = 0;

/* the counts above, reset at a transaction's first job lock */
static void
job_locks_count_xact(void)
{
	if (job_locks_xact != MyProc->lxid)
	{
		job_locks_xact = MyProc->lxid;
		job_shares_taken = 0;
		job_claims_taken = 0;
	}
}

/*
 * Try a job's lock (tag) in mode, unless *taken has reached budget and
 * the lock is not held already (in either mode: then it takes no new
 * entry); a lock newly taken counts in *taken.
 */
static bool
job_lock_try(const LOCKTAG *tag, LOCKMODE mode, int *taken, int budget)
{
	LockAcquireResult res;

	if (*taken >= budget &&
		!LockHeldByMe(tag, ShareLock) && !LockHeldByMe(tag, ExclusiveLock))
		return false;
	res = LockAcquire(tag, mode, false, true);
	if (res == LOCKACQUIRE_OK)
		(*taken)++;
	return res != LOCKACQUIRE_NOT_AVAIL;
}

/*
 * Take job's dispatch lock (frameq.h) in ShareLock for this transaction,
 * only trying.  False when an ExclusiveLock holds it or waits for it, or
 * the transaction has taken its share of job locks: the caller then falls
 * back to row locks, which wait as they always did.
 */
bool
frameq_hold_job(int64 job)
{
	LOCKTAG		tag;

	job_locks_count_xact();
	SET_LOCKTAG_FRAMEQ_JOB(tag, job);
	return job_lock_try(&tag, ShareLock, &job_shares_taken, FRAMEQ_JOB_LOCKS);
}

PG_FUNCTION_INFO_V1(frameq_hold_job_sql);

/* frameq._hold_job(job): see frameq_hold_job() */
Datum
frameq_hold_job_sql(PG_FUNCTION_ARGS)
{
	PG_RETURN_BOOL(frameq_hold_job(PG_GETARG_INT64(0)));
}

PG_FUNCTION_INFO_V1(frameq_claim_jobs);

/*
 * frameq._claim_jobs(jobs): try each job's dispatch lock in ExclusiveLock
 * for this transaction; the jobs it took, in their order.  Never waits,
 * and takes no new one past the transaction's FRAMEQ_TIDY_JOB_LOCKS
 * (above).
 */
Datum
frameq_claim_jobs(PG_FUNCTION_ARGS)
{
	ArrayType  *jobs = PG_GETARG_ARRAYTYPE_P(0);
	Datum	   *items;
	bool	   *nulls;
	int			n;
	int			taken = 0;

	job_locks_count_xact();
	deconstruct_array(jobs, INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE, &items, &nulls, &n);
	for (int i = 0; i < n; i++)
	{
		LOCKTAG		tag;

		if (nulls[i])
			continue;
		SET_LOCKTAG_FRAMEQ_JOB(tag, DatumGetInt64(items[i]));
		if (job_lock_try(&tag, ExclusiveLock, &job_claims_taken, FRAMEQ_TIDY_JOB_LOCKS))
			items[taken++] = items[i];
	}
	PG_RETURN_ARRAYTYPE_P(construct_array(items, taken, INT8OID, 8, FLOAT8PASSBYVAL,
										  TYPALIGN_DOUBLE));
}

PG_FUNCTION_INFO_V1(frameq_lock_job);

/*
 * frameq._lock_job(job): take job's dispatch lock in ExclusiveLock for
 * this transaction, waiting at most frameq.lock_wait (then 55P03) for the
 * transactions that hold it to end.
 */
Datum
frameq_lock_job(PG_FUNCTION_ARGS)
{
	LOCKTAG		tag;

	SET_LOCKTAG_FRAMEQ_JOB(tag, PG_GETARG_INT64(0));
	if (LockAcquire(&tag, ExclusiveLock, false, true) == LOCKACQUIRE_NOT_AVAIL &&
		!frameq_bounded_wait(acquire_exclusive, &tag, frameq_lock_wait))
		ereport(ERROR,
				(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
				 errmsg("job %lld is busy: its tasks are being released", (long long) PG_GETARG_INT64(0)),
				 errhint("Try again.")));
	PG_RETURN_VOID();
}

/*
 * From here until frameq_end_lock_waits(): wait at most frameq.lock_wait for
 * any lock, then fail with 55P03.  For the agent's entry points, whose row
 * locks a role outside frameq_admin (a submitter's open kill_frame, say)
 * could otherwise make them wait without end.  Returns the GUC nest level
 * to hand back; an error unwinds it with the transaction.
 */
int
frameq_bound_lock_waits(void)
{
	int			nest = NewGUCNestLevel();
	char		buf[32];

	snprintf(buf, sizeof(buf), "%d", frameq_lock_wait);
	(void) set_config_option("lock_timeout", buf, PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
	return nest;
}

void
frameq_end_lock_waits(int nest)
{
	AtEOXact_GUC(true, nest);
}
