/*-------------------------------------------------------------------------
 *
 * lease.c
 *	  Host identity and leases as the agent entry points see them: checking
 *	  a host's token, reading its lease and capacity, fencing on its epoch.
 *
 * A host's token is stored only as its SHA-256 hash.  Every agent call
 * names the host and its token; calls that act on bookings also name the
 * lease epoch, which attach() bumps, so a report from an earlier life of
 * the agent can never touch the current bookings.  The lease period (how
 * long after its last renewal a host's lease is surely over, by any clock)
 * is defined here once, for the worker and for SQL.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "frameq.h"

/*
 * Look up a host in the farm (not retired) by name and check its token;
 * returns the host's id.  Messages quote at most 64 characters of the name.
 */
int32
frameq_host_authenticate(text *name, text *token)
{
	static SPIPlanPtr plan = NULL;
	Datum		args[2];
	int			ret;
	bool		token_ok;
	int32		id;

	if (plan == NULL)
	{
		Oid			types[2] = {TEXTOID, TEXTOID};

		plan = frameq_prepare("SELECT id, token_hash = sha256(convert_to($2, 'UTF8'))"
							  "  FROM frameq.host WHERE name = $1 AND retired_at IS NULL",
							  2, types);
	}
	/* tokens are 64 hex digits: nothing much longer is hashed */
	if (VARSIZE_ANY_EXHDR(token) > FRAMEQ_MAX_TOKEN_BYTES)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("token is too large: %zu bytes, at most %d",
						(size_t) VARSIZE_ANY_EXHDR(token), FRAMEQ_MAX_TOKEN_BYTES)));
	args[0] = PointerGetDatum(name);
	args[1] = PointerGetDatum(token);
	ret = SPI_execute_plan(plan, args, NULL, true, 1);
	if (ret != SPI_OK_SELECT)
		elog(ERROR, "frameq: host lookup failed: %s", SPI_result_code_string(ret));
	if (SPI_processed == 0)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("host \"%s\" is not registered", frameq_clip_text(name)),
				 errhint("Register it with frameq.register_host().")));
	id = frameq_get_int32(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, NULL);
	token_ok = frameq_get_bool(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, NULL);
	if (!token_ok)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PASSWORD),
				 errmsg("invalid token for host \"%s\"", frameq_clip_text(name))));
	return id;
}

/* Read a host's lease and free capacity (after taking its booking lock). */
void
frameq_host_load(int32 host_id, FrameqHost *host)
{
	static SPIPlanPtr plan = NULL;
	Datum		args[1];
	int			ret;
	HeapTuple	tup;
	TupleDesc	desc;
	bool		isnull;

	if (plan == NULL)
	{
		Oid			types[1] = {INT4OID};

		plan = frameq_prepare("SELECT allocation, epoch, state = 'up',"
							  "       lease_expires_at IS NOT NULL,"
							  "       coalesce(lease_expires_at > clock_timestamp(), false),"
							  "       tags, idle_cc, idle_memory, idle_gpus, idle_gpu_memory"
							  "  FROM frameq.host WHERE id = $1",
							  1, types);
	}
	args[0] = Int32GetDatum(host_id);
	ret = SPI_execute_plan(plan, args, NULL, false, 1);
	if (ret != SPI_OK_SELECT)
		elog(ERROR, "frameq: host read failed: %s", SPI_result_code_string(ret));
	if (SPI_processed == 0)
		elog(ERROR, "frameq: host %d vanished", host_id);
	tup = SPI_tuptable->vals[0];
	desc = SPI_tuptable->tupdesc;
	host->id = host_id;
	host->allocation = frameq_get_int32(tup, desc, 1, NULL);
	host->epoch = frameq_get_int64(tup, desc, 2, NULL);
	host->up = frameq_get_bool(tup, desc, 3, NULL);
	/*
	 * A lease the worker has ended (NULL) is over.  In the quarantine after
	 * a start every lease is being re-armed, so one that looks past is not.
	 */
	host->lease_current = frameq_get_bool(tup, desc, 4, NULL) &&
		(frameq_get_bool(tup, desc, 5, NULL) || frameq_in_quarantine());
	host->tags = SPI_getbinval(tup, desc, 6, &isnull);
	host->tags = SPI_datumTransfer(host->tags, false, -1);
	host->idle.cores_cc = frameq_get_int32(tup, desc, 7, NULL);
	host->idle.memory = frameq_get_int64(tup, desc, 8, NULL);
	host->idle.gpus = frameq_get_int32(tup, desc, 9, NULL);
	host->idle.gpu_memory = frameq_get_int64(tup, desc, 10, NULL);
}

/*
 * An agent acting on bookings must hold the current lease: the epoch it
 * got from attach() and a lease that has not run out.  A lapsed lease is
 * never revived here: the agent must kill its work and attach again.
 * "name" is quoted as given: callers pass it through frameq_clip_text().
 */
void
frameq_host_check_epoch(const FrameqHost *host, const char *name, int64 epoch)
{
	if (epoch != host->epoch)
		ereport(ERROR,
				(errcode(ERRCODE_FRAMEQ_STALE_EPOCH),
				 errmsg("lease epoch %lld of host \"%s\" is not current",
						(long long) epoch, name),
				 errdetail("The host's current epoch is %lld.", (long long) host->epoch),
				 errhint("The agent must stop its renders and call frameq.attach() again.")));
	if (!host->lease_current)
		ereport(ERROR,
				(errcode(ERRCODE_FRAMEQ_LEASE_EXPIRED),
				 errmsg("lease of host \"%s\" has expired", name),
				 errhint("The agent must stop its renders and call frameq.attach() again.")));
}

PG_FUNCTION_INFO_V1(frameq_check_lease);

/*
 * frameq._check_lease(host id, host name, epoch): heartbeat's fencing, the
 * same as reserve()'s: FQ001 for an epoch that is not the host's, FQ002
 * for a lease that is over.
 */
Datum
frameq_check_lease(PG_FUNCTION_ARGS)
{
	FrameqHost	host;

	if (PG_ARGISNULL(0) || PG_ARGISNULL(1))
		elog(ERROR, "frameq: _check_lease needs a host");
	if (PG_ARGISNULL(2))
		ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
						errmsg("epoch must not be null")));
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "frameq: SPI_connect failed");
	frameq_host_load(PG_GETARG_INT32(0), &host);
	frameq_host_check_epoch(&host, frameq_clip_text(PG_GETARG_TEXT_PP(1)), PG_GETARG_INT64(2));
	SPI_finish();
	PG_RETURN_VOID();
}

PG_FUNCTION_INFO_V1(frameq_authenticate);

/*
 * frameq._authenticate(host, token): the SQL entry points' token check,
 * the same as the C ones' (frameq_host_authenticate).  A null host is
 * refused as such; a null token is simply not the host's.
 */
Datum
frameq_authenticate(PG_FUNCTION_ARGS)
{
	int32		id;

	if (PG_ARGISNULL(0))
		ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
						errmsg("host must not be null")));
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "frameq: SPI_connect failed");
	id = frameq_host_authenticate(PG_GETARG_TEXT_PP(0),
								  PG_ARGISNULL(1) ? cstring_to_text("") : PG_GETARG_TEXT_PP(1));
	SPI_finish();
	PG_RETURN_INT32(id);
}

/*
 * The period of a lease granted for ttl_us: ttl * (1 + clock_drift) +
 * lease_margin, in microseconds.  A lease renewed at T for that ttl has
 * surely ended, by the server's clock, at T plus this, however fast the
 * host's clock ran.  A lease lasts what it was granted for: a lease_ttl
 * lowered since does not shorten it (attach and heartbeat record the ttl
 * they hand out, host.lease_granted).
 */
int64
frameq_lease_period_for_us(int64 ttl_us)
{
	return (int64) (ttl_us * (1.0 + frameq_clock_drift)) +
		(int64) frameq_lease_margin * USECS_PER_SEC;
}

/* the period of a lease granted now: for frameq.lease_ttl */
int64
frameq_lease_period_us(void)
{
	return frameq_lease_period_for_us((int64) frameq_lease_ttl * USECS_PER_SEC);
}

static Datum
interval_us(int64 us)
{
	Interval   *result = palloc0(sizeof(Interval));

	result->time = us;
	return IntervalPGetDatum(result);
}

PG_FUNCTION_INFO_V1(frameq_lease_period);

/* frameq.lease_period() */
Datum
frameq_lease_period(PG_FUNCTION_ARGS)
{
	return interval_us(frameq_lease_period_us());
}

PG_FUNCTION_INFO_V1(frameq_lease_period_for);

/*
 * frameq._lease_period(ttl interval): the period of a lease granted for
 * ttl (a ttl of days or months is read as 30-day months, as PostgreSQL's
 * interval comparisons do; lease_ttl is at most an hour).
 */
Datum
frameq_lease_period_for(PG_FUNCTION_ARGS)
{
	Interval   *ttl = PG_GETARG_INTERVAL_P(0);
	int64		us;

	us = ttl->time + (int64) ttl->day * USECS_PER_DAY +
		(int64) ttl->month * DAYS_PER_MONTH * USECS_PER_DAY;
	return interval_us(frameq_lease_period_for_us(Max(us, 0)));
}
