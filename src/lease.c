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
#include "common/cryptohash.h"
#include "common/sha2.h"
#include "mb/pg_wchar.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/timestamp.h"

#include "frameq.h"

/* the host columns the two reads below return */
static const FrameqColumn host_auth_cols[] = {
	{"name", TEXTOID, F_TEXTEQ},
	{"id", INT4OID},
	{"token_hash", BYTEAOID},
	{"retired_at", TIMESTAMPTZOID},
};
static AttrNumber host_auth_attnums[lengthof(host_auth_cols)];
static FrameqTable host_by_name = {"host", "host_name_in_farm", lengthof(host_auth_cols),
host_auth_cols, host_auth_attnums};

enum
{
	HL_ID, HL_ALLOCATION, HL_EPOCH, HL_STATE, HL_LEASE, HL_TAGS, HL_IDLE_CC,
	HL_IDLE_MEMORY, HL_IDLE_GPUS, HL_IDLE_GPU_MEMORY, HL_NCOLS
};
static const FrameqColumn host_load_cols[HL_NCOLS] = {
	{"id", INT4OID, F_INT4EQ},
	{"allocation", INT4OID},
	{"epoch", INT8OID},
	{"state", TEXTOID},
	{"lease_expires_at", TIMESTAMPTZOID},
	{"tags", TEXTARRAYOID},
	{"idle_cc", INT4OID},
	{"idle_memory", INT8OID},
	{"idle_gpus", INT4OID},
	{"idle_gpu_memory", INT8OID},
};
static AttrNumber host_load_attnums[HL_NCOLS];
static FrameqTable host_by_id = {"host", "host_pkey", HL_NCOLS, host_load_cols,
host_load_attnums};

/* is hash sha256(convert_to(token, 'UTF8')), as register_host stored it? */
static bool
token_matches(text *token, bytea *hash)
{
	uint8		digest[PG_SHA256_DIGEST_LENGTH];
	int			len = VARSIZE_ANY_EXHDR(token);
	char	   *utf8 = pg_server_to_any(VARDATA_ANY(token), len, PG_UTF8);
	pg_cryptohash_ctx *ctx = pg_cryptohash_create(PG_SHA256);

	if (utf8 != VARDATA_ANY(token))
		len = strlen(utf8);
	if (pg_cryptohash_init(ctx) < 0 ||
		pg_cryptohash_update(ctx, (uint8 *) utf8, len) < 0 ||
		pg_cryptohash_final(ctx, digest, sizeof(digest)) < 0)
		elog(ERROR, "frameq: could not hash a token: %s", pg_cryptohash_error(ctx));
	pg_cryptohash_free(ctx);
	return VARSIZE_ANY_EXHDR(hash) == sizeof(digest) &&
		memcmp(VARDATA_ANY(hash), digest, sizeof(digest)) == 0;
}

/*
 * Look up a host in the farm (not retired) by name and check its token;
 * returns the host's id.  Messages quote at most 64 characters of the name.
 * One probe of host_name_in_farm under the calling statement's snapshot
 * (rowread.c), what a read-only SPI statement would see.
 */
int32
frameq_host_authenticate(text *name, text *token)
{
	FrameqRead	r;
	int			keycols[1] = {0};
	Datum		keys[1];
	Datum		values[lengthof(host_auth_cols)];
	bool		nulls[lengthof(host_auth_cols)];
	bool		found = false;
	bool		token_ok = false;
	int32		id = 0;

	/* tokens are 64 hex digits: nothing much longer is hashed */
	if (VARSIZE_ANY_EXHDR(token) > FRAMEQ_MAX_TOKEN_BYTES)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("token is too large: %zu bytes, at most %d",
						(size_t) VARSIZE_ANY_EXHDR(token), FRAMEQ_MAX_TOKEN_BYTES)));
	keys[0] = PointerGetDatum(name);
	frameq_read_begin(&r, &host_by_name, false, 1, keycols, keys);
	while (!found && frameq_read_next(&r, values, nulls))
	{
		/* the index holds only hosts in the farm; a row read is checked anyway */
		if (!nulls[3])
			continue;
		found = true;
		id = DatumGetInt32(values[1]);
		token_ok = token_matches(token, DatumGetByteaPP(values[2]));
	}
	frameq_read_end(&r);
	if (!found)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("host \"%s\" is not registered", frameq_clip_text(name)),
				 errhint("Register it with frameq.register_host().")));
	if (!token_ok)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PASSWORD),
				 errmsg("invalid token for host \"%s\"", frameq_clip_text(name))));
	return id;
}

/*
 * Read a host's lease and free capacity (after taking its booking lock):
 * one probe of host_pkey under a new snapshot (rowread.c), so that what a
 * booking of the host committed before the lock was ours is seen.
 */
void
frameq_host_load(int32 host_id, FrameqHost *host)
{
	FrameqRead	r;
	int			keycols[1] = {HL_ID};
	Datum		keys[1];
	Datum		v[HL_NCOLS];
	bool		n[HL_NCOLS];

	keys[0] = Int32GetDatum(host_id);
	frameq_read_begin(&r, &host_by_id, true, 1, keycols, keys);
	if (!frameq_read_next(&r, v, n))
		elog(ERROR, "frameq: host %d vanished", host_id);
	host->id = host_id;
	host->allocation = DatumGetInt32(v[HL_ALLOCATION]);
	host->epoch = DatumGetInt64(v[HL_EPOCH]);
	host->up = frameq_text_is(v[HL_STATE], "up");
	/*
	 * A lease the worker has ended (NULL) is over.  In the quarantine after
	 * a start every lease is being re-armed, so one that looks past is not.
	 */
	host->lease_current = !n[HL_LEASE] &&
		(DatumGetTimestampTz(v[HL_LEASE]) > GetCurrentTimestamp() || frameq_in_quarantine());
	host->tags = frameq_read_copy(v[HL_TAGS]);
	host->idle.cores_cc = DatumGetInt32(v[HL_IDLE_CC]);
	host->idle.memory = DatumGetInt64(v[HL_IDLE_MEMORY]);
	host->idle.gpus = DatumGetInt32(v[HL_IDLE_GPUS]);
	host->idle.gpu_memory = DatumGetInt64(v[HL_IDLE_GPU_MEMORY]);
	frameq_read_end(&r);
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
