/*-------------------------------------------------------------------------
 *
 * booking.c
 *	  reserve(): book waiting frames onto a host, atomically.
 *
 * One call books as many frames as fit the host, up to max_frames, in the
 * caller's transaction:
 *
 *	1. check the host's token; take the host's lock (frameq.h) without
 *	   waiting (another session already booking this host means there is
 *	   nothing for us to do); check its epoch and that its lease is current;
 *	2. walk the candidates in policy order (doc/reference.md): shows of
 *	   the host's allocation by usage/size ascending; within a show, the
 *	   layers that may have waiting frames and that the host can run (by
 *	   tags, gpus and minimums), read from the index of
 *	   frameq.dispatch_queue by priority, job age, dispatch order (see
 *	   book_show); within a layer, waiting frames by number, taken with
 *	   FOR UPDATE SKIP LOCKED so concurrent hosts never wait on each other;
 *	3. in each layer: check-and-charge every cap in the ledger for as many
 *	   frames as fit (nothing is charged for a frame unless all its caps
 *	   fit); one statement then takes that many waiting frames and moves
 *	   them waiting -> running, and one INSERT adds their procs; charges
 *	   for frames the layer did not have are given back.  The proc insert
 *	   trigger, once per statement, takes the host's capacity and opens
 *	   the run records; it adopts the charges made here instead of
 *	   charging again.
 *
 * Cost grows with the number of candidate layers that can still book, never
 * with the number of waiting frames, running frames, jobs with nothing
 * waiting, or layers the host cannot run by tags or gpus: each layer is
 * probed through the partial index frame_waiting, layers that have run dry
 * leave the dispatch queue when a booking finds them so, and the walk stops
 * once the host is full or it has taken frames of frameq.max_jobs_examined
 * jobs.  A job at its job or folder cap costs one read of its rows, which
 * then leave the queue until a release lowers it (parking: ledger.c); a
 * layer too big for the host's free capacity costs an index tuple
 * (doc/design-notes-dispatch.md).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "access/xlog.h"
#include "catalog/pg_type.h"
#include "common/cryptohash.h"
#include "common/sha2.h"
#include "funcapi.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "port/pg_bswap.h"
#include "storage/proc.h"
#include "tcop/utility.h"
#include "storage/itemptr.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/fmgrprotos.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/tuplestore.h"

#include "frameq.h"

/*
 * The procs whose ledger charges reserve() took, for its insert statement
 * in flight; the insert trigger adopts each (and zeroes its entry).  The
 * entries belong to one transaction: an insert that failed leaves them
 * behind, and no later transaction may adopt them.
 */
static int64 *precharged = NULL;
static int	nprecharged = 0;
static int	precharged_cap = 0;
static LocalTransactionId precharged_lxid = InvalidLocalTransactionId;

#define FRAME_BATCH 32			/* frames charged and claimed per statement */

typedef struct ShowCandidate
{
	int32		show;
	int32		burst_cc;
	double		ratio;
} ShowCandidate;

typedef struct JobCandidate
{
	int64		id;
	bool		has_folder;
	int32		folder;
	int32		job_cap_cc;
	int32		job_cap_gpus;
	int32		folder_cap_cc;
	int32		folder_cap_gpus;
	char	   *name;
	bool		host_blocks;	/* the job's mark (load_job only) */
	bool		has_timeout;	/* the job's timeout (load_job only) */
	int32		timeout;		/* seconds */
} JobCandidate;

typedef struct LayerCandidate
{
	int64		id;
	char	   *name;
	int32		min_cc;
	int32		max_cc;
	bool		threadable;
	int64		memory;			/* the layer's, or the raised tasks' (raised) */
	int32		gpus;
	int64		gpu_memory;
	bool		raised;			/* book only tasks an OOM raised to memory */
	char	   *command;
	Datum		env;
	bool		has_timeout;	/* the layer's timeout, else its job's */
	int32		timeout;		/* seconds */
	bool		has_pattern;
	Datum		progress_pattern;	/* text, the layer's */
	int			nlimits;
	int32		limit_ids[FRAMEQ_MAX_LAYER_LIMITS];
	int32		limit_caps[FRAMEQ_MAX_LAYER_LIMITS];
	int32		dispatch_order;
	bool		passed;			/* paused, or none of its tags is the host's */
} LayerCandidate;

/* what skipping a failed charge means for the walk */
typedef enum BookResult
{
	BOOKED,
	SKIP_FRAME,
	SKIP_LAYER,
	SKIP_JOB,
	SKIP_SHOW
} BookResult;

#define JOB_CACHE 4

typedef struct ReserveState
{
	FrameqHost	host;
	int64		epoch;
	int			max_frames;
	int			booked;
	ReturnSetInfo *rsinfo;
	bytea	   *secret_key;		/* frameq.run_secret_key, read at the first
								 * booking of this call; NULL before */
	int			secret_att;		/* index of frameq.booking's run_secret */
	int			pattern_att;	/* index of frameq.booking's progress_pattern */
	int			claimed;		/* frames claimed so far, booked or not */
	bool		emptied;		/* the last claim found fewer frames than
								 * it asked for */
	/* the last jobs read in this call (load_job), as its snapshot has them */
	struct
	{
		JobCandidate job;
		bool		active;
		int32		priority;
	}			jobs[JOB_CACHE];
	int			njobs;
} ReserveState;

/*
 * frameq.booking's attributes the hand-out fills by position (those of
 * 0.1.0, which never move), and the most it may have in all.  Later ones
 * (run_secret, progress_pattern) are found by name: they come after them,
 * but a dropped attribute would leave a gap.
 */
#define BOOKING_FIXED_NATTS		11
#define BOOKING_MAX_NATTS		32

/* the result row's shape, checked once per call */
static void
booking_check_natts(TupleDesc desc)
{
	if (desc->natts < BOOKING_FIXED_NATTS || desc->natts > BOOKING_MAX_NATTS)
		ereport(ERROR,
				(errcode(ERRCODE_DATATYPE_MISMATCH),
				 errmsg("frameq.booking has %d attributes; this frameq library expects %d to %d",
						desc->natts, BOOKING_FIXED_NATTS, BOOKING_MAX_NATTS),
				 errhint("Run ALTER EXTENSION frameq UPDATE.")));
}

/* where the result row's text attribute name is (after the fixed ones), or -1 */
static int
booking_text_att(TupleDesc desc, const char *name)
{
	int			found = -1;

	for (int i = BOOKING_FIXED_NATTS; i < desc->natts; i++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, i);

		if (!att->attisdropped && att->atttypid == TEXTOID &&
			strcmp(NameStr(att->attname), name) == 0)
			found = i;
	}
	return found;
}

static const FrameqColumn secret_cols[] = {{"key", BYTEAOID}};
static AttrNumber secret_attnums[lengthof(secret_cols)];
static FrameqTable secret_table = {"run_secret_key", NULL, 1, secret_cols, secret_attnums};

/* frameq.run_secret_key's one key, as a read-only statement sees it */
static bytea *
read_secret_key(void)
{
	FrameqRead	r;
	Datum		v[1];
	bool		n[1];
	bytea	   *key = NULL;
	int			rows = 0;

	frameq_read_begin(&r, &secret_table, false, 0, NULL, NULL);
	while (frameq_read_next(&r, v, n))
	{
		if (rows++ == 0 && !n[0])
			key = DatumGetByteaP(frameq_read_copy(v[0]));
	}
	frameq_read_end(&r);
	if (rows != 1)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("frameq.run_secret_key must hold exactly one row")));
	if (key == NULL)
		elog(ERROR, "frameq: the run secret key is null");
	return key;
}

/*
 * A proc's run secret: the first 32 hex digits of
 * sha256(key || int8send(proc)), as frameq._run_secret() computes it.  The
 * key is read once per reserve() call, and only once something is booked:
 * one read of a one-row table below the executor (rowread.c), and a
 * SHA-256 of 40 bytes per booking, which is all the run secret adds to a
 * reserve() call.
 */
static Datum
run_secret(ReserveState *st, int64 proc)
{
	static const char digits[] = "0123456789abcdef";
	uint8		digest[PG_SHA256_DIGEST_LENGTH];
	char		hex[33];
	uint64		be = pg_hton64((uint64) proc);
	pg_cryptohash_ctx *ctx;

	if (st->secret_key == NULL)
		st->secret_key = read_secret_key();

	ctx = pg_cryptohash_create(PG_SHA256);
	if (pg_cryptohash_init(ctx) < 0 ||
		pg_cryptohash_update(ctx, (uint8 *) VARDATA_ANY(st->secret_key),
							 VARSIZE_ANY_EXHDR(st->secret_key)) < 0 ||
		pg_cryptohash_update(ctx, (uint8 *) &be, sizeof(be)) < 0 ||
		pg_cryptohash_final(ctx, digest, sizeof(digest)) < 0)
		elog(ERROR, "frameq: could not compute a run secret: %s",
			 pg_cryptohash_error(ctx));
	pg_cryptohash_free(ctx);
	for (int i = 0; i < 16; i++)
	{
		hex[2 * i] = digits[digest[i] >> 4];
		hex[2 * i + 1] = digits[digest[i] & 0xF];
	}
	hex[32] = '\0';
	return CStringGetTextDatum(hex);
}

static int
compare_shows(const void *a, const void *b)
{
	const ShowCandidate *x = a;
	const ShowCandidate *y = b;

	if (x->ratio != y->ratio)
		return x->ratio < y->ratio ? -1 : 1;
	return x->show - y->show;
}

static bool
host_has_room(const ReserveState *st)
{
	return st->booked < st->max_frames && st->host.idle.cores_cc > 0;
}

/* what one frame of the layer takes from its host, at this many cores */
static Resources
frame_need(const LayerCandidate *layer, int32 cores)
{
	Resources	r = {cores, layer->memory, layer->gpus, layer->gpu_memory};

	return r;
}

static bool
layer_fits(const ReserveState *st, const LayerCandidate *layer)
{
	Resources	need = frame_need(layer, layer->min_cc);

	return resources_fit(&need, &st->host.idle);
}

/*
 * Replace the tokens of a command template for one task (doc/reference.md,
 * "Command tokens"): #FRAME#, #FRAME_START# and #ZFRAME# are its first
 * frame number, #FRAME_END# its last, #FRAMESPEC# all of them as
 * frameq._frame_spec writes them (spec: NULL for a task of one number,
 * whose spec is that number), #JOB# and #LAYER# the names.
 * sql/src/submit.sql's _expanded_length bounds the result.
 */
static char *
expand_command(const char *tmpl, int32 number, int32 last, const char *spec,
			   const char *job, const char *layer)
{
	StringInfoData buf;
	const char *p = tmpl;

	initStringInfo(&buf);
	while (*p)
	{
		if (*p == '#')
		{
			if (strncmp(p, "#FRAME#", 7) == 0)
			{
				appendStringInfo(&buf, "%d", number);
				p += 7;
				continue;
			}
			if (strncmp(p, "#FRAME_START#", 13) == 0)
			{
				appendStringInfo(&buf, "%d", number);
				p += 13;
				continue;
			}
			if (strncmp(p, "#FRAME_END#", 11) == 0)
			{
				appendStringInfo(&buf, "%d", last);
				p += 11;
				continue;
			}
			if (strncmp(p, "#FRAMESPEC#", 11) == 0)
			{
				if (spec)
					appendStringInfoString(&buf, spec);
				else
					appendStringInfo(&buf, "%d", number);
				p += 11;
				continue;
			}
			if (strncmp(p, "#ZFRAME#", 8) == 0)
			{
				appendStringInfo(&buf, "%04d", number);
				p += 8;
				continue;
			}
			if (strncmp(p, "#JOB#", 5) == 0)
			{
				appendStringInfoString(&buf, job);
				p += 5;
				continue;
			}
			if (strncmp(p, "#LAYER#", 7) == 0)
			{
				appendStringInfoString(&buf, layer);
				p += 7;
				continue;
			}
		}
		appendStringInfoChar(&buf, *p++);
	}
	return buf.data;
}

static const FrameqColumn subscription_cols[] = {
	{"allocation", INT4OID, F_INT4EQ},
	{"show", INT4OID},
	{"size_cc", INT4OID},
	{"burst_cc", INT4OID},
};
static AttrNumber subscription_attnums[lengthof(subscription_cols)];
static FrameqTable subscription_table = {"subscription", NULL, lengthof(subscription_cols),
subscription_cols, subscription_attnums};

/*
 * The shows subscribed to the host's allocation, in the order a booking
 * tries them: by use over size.  Read as a read-only statement would
 * (rowread.c): the table has no index by allocation, so it is read whole,
 * as the statement's plan did.
 */
static int
load_shows(const ReserveState *st, ShowCandidate **out)
{
	FrameqRead	r;
	int			keycols[1] = {0};
	Datum		keys[1];
	Datum		v[lengthof(subscription_cols)];
	bool		nulls[lengthof(subscription_cols)];
	int			n = 0;
	int			cap = 4;
	ShowCandidate *shows = palloc(sizeof(ShowCandidate) * cap);

	keys[0] = Int32GetDatum(st->host.allocation);
	frameq_read_begin(&r, &subscription_table, false, 1, keycols, keys);
	while (frameq_read_next(&r, v, nulls))
	{
		ShowCandidate *sc;
		int32		size_cc;
		int32		used_cc,
					used_gpus,
					running;

		if (n >= cap)
		{
			cap *= 2;
			shows = repalloc(shows, sizeof(ShowCandidate) * cap);
		}
		sc = &shows[n++];
		sc->show = DatumGetInt32(v[1]);
		size_cc = DatumGetInt32(v[2]);
		sc->burst_cc = DatumGetInt32(v[3]);
		frameq_ledger_read(LEDGER_SUBSCRIPTION, sc->show, st->host.allocation,
						   &used_cc, &used_gpus, &running);
		/* a show with no entitlement comes after every entitled one */
		if (size_cc > 0)
			sc->ratio = (double) used_cc / size_cc;
		else
			sc->ratio = 1e12 + used_cc;
		if (used_cc >= sc->burst_cc)
			sc->ratio = -1;		/* marker: at its burst, skip */
	}
	frameq_read_end(&r);
	qsort(shows, n, sizeof(ShowCandidate), compare_shows);
	*out = shows;
	return n;
}

enum
{
	LY_ID, LY_NAME, LY_MIN_CC, LY_MAX_CC, LY_THREADABLE, LY_MEMORY, LY_GPUS,
	LY_GPU_MEMORY, LY_COMMAND, LY_ENV, LY_TIMEOUT, LY_PATTERN, LY_ORDER, LY_PAUSED,
	LY_TAGS, LY_NCOLS
};
static const FrameqColumn layer_cols[LY_NCOLS] = {
	{"id", INT8OID, F_INT8EQ},
	{"name", TEXTOID},
	{"min_cc", INT4OID},
	{"max_cc", INT4OID},
	{"threadable", BOOLOID},
	{"memory", INT8OID},
	{"gpus", INT4OID},
	{"gpu_memory", INT8OID},
	{"command", TEXTOID},
	{"env", JSONBOID},
	{"timeout", INT4OID},
	{"progress_pattern", TEXTOID},
	{"dispatch_order", INT4OID},
	{"paused", BOOLOID},
	{"tags", TEXTARRAYOID},
};
static AttrNumber layer_attnums[LY_NCOLS];
static FrameqTable layer_table = {"layer", "layer_pkey", LY_NCOLS, layer_cols, layer_attnums};

static const FrameqColumn layer_limit_cols[] = {
	{"layer", INT8OID, F_INT8EQ},
	{"limit_id", INT4OID},
};
static AttrNumber layer_limit_attnums[lengthof(layer_limit_cols)];
static FrameqTable layer_limit_table = {"layer_limit", "layer_limit_pkey",
lengthof(layer_limit_cols), layer_limit_cols, layer_limit_attnums};

static const FrameqColumn limits_cols[] = {
	{"id", INT4OID, F_INT4EQ},
	{"max_running", INT4OID},
};
static AttrNumber limits_attnums[lengthof(limits_cols)];
static FrameqTable limits_table = {"limits", "limits_pkey", lengthof(limits_cols),
limits_cols, limits_attnums};

/*
 * Does any of the layer's tags equal one of the host's?  Text equality
 * under the database's collation, which is deterministic (PostgreSQL 15
 * allows no other as a database's): equal means the same bytes, as the
 * && operator compares them; NULL elements match nothing.
 */
static bool
tags_overlap(Datum layer_tags, Datum host_tags)
{
	Datum	   *a,
			   *b;
	bool	   *anull,
			   *bnull;
	int			na,
				nb;

	deconstruct_array(DatumGetArrayTypeP(layer_tags), TEXTOID, -1, false, TYPALIGN_INT,
					  &a, &anull, &na);
	deconstruct_array(DatumGetArrayTypeP(host_tags), TEXTOID, -1, false, TYPALIGN_INT,
					  &b, &bnull, &nb);
	for (int i = 0; i < na; i++)
	{
		text	   *x = DatumGetTextPP(a[i]);

		if (anull[i])
			continue;
		for (int k = 0; k < nb; k++)
		{
			text	   *y;

			if (bnull[k])
				continue;
			y = DatumGetTextPP(b[k]);
			if (VARSIZE_ANY_EXHDR(x) == VARSIZE_ANY_EXHDR(y) &&
				memcmp(VARDATA_ANY(x), VARDATA_ANY(y), VARSIZE_ANY_EXHDR(x)) == 0)
				return true;
		}
	}
	return false;
}

/* the layer's limits in id order, each with its max_running, as the statement above sees them */
static void
load_layer_limits(LayerCandidate *l)
{
	FrameqRead	r;
	int			keycols[1] = {0};
	Datum		keys[1];
	Datum		v[2];
	bool		n[2];

	keys[0] = Int64GetDatum(l->id);
	l->nlimits = 0;
	frameq_read_begin(&r, &layer_limit_table, false, 1, keycols, keys);
	while (frameq_read_next(&r, v, n))
	{
		if (l->nlimits >= FRAMEQ_MAX_LAYER_LIMITS)
			ereport(ERROR,
					(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
					 errmsg("layer %lld has more than %d limits", (long long) l->id,
							FRAMEQ_MAX_LAYER_LIMITS)));
		l->limit_ids[l->nlimits++] = DatumGetInt32(v[1]);
	}
	frameq_read_end(&r);
	for (int i = 0; i < l->nlimits; i++)
	{
		keys[0] = Int32GetDatum(l->limit_ids[i]);
		frameq_read_begin(&r, &limits_table, false, 1, keycols, keys);
		if (!frameq_read_next(&r, v, n))
			elog(ERROR, "frameq: limit %d of layer %lld vanished", l->limit_ids[i],
				 (long long) l->id);
		l->limit_caps[i] = DatumGetInt32(v[1]);
		frameq_read_end(&r);
	}
}

/*
 * One candidate layer, by id: the dispatch queue row that named it matched
 * the host's tags and minimums when it was written.  The layer and its
 * limits are read under the calling statement's snapshot (rowread.c), as
 * one read-only statement would, so a booking uses its values before or
 * after a set_layer, never some of each; its timeout is the job's (read
 * under the same snapshot by load_job) if it has none of its own.  passed
 * says the layer is paused or has none of the host's tags now (set_layer
 * changed them since the row was written).  False if it is gone.
 */
static bool
load_layer(const ReserveState *st, const JobCandidate *job, int64 id, LayerCandidate *l)
{
	FrameqRead	r;
	int			keycols[1] = {LY_ID};
	Datum		keys[1];
	Datum		v[LY_NCOLS];
	bool		n[LY_NCOLS];

	keys[0] = Int64GetDatum(id);
	frameq_read_begin(&r, &layer_table, false, 1, keycols, keys);
	if (!frameq_read_next(&r, v, n))
	{
		frameq_read_end(&r);
		return false;
	}
	memset(l, 0, sizeof(*l));
	l->id = DatumGetInt64(v[LY_ID]);
	l->name = TextDatumGetCString(v[LY_NAME]);
	l->min_cc = DatumGetInt32(v[LY_MIN_CC]);
	l->max_cc = DatumGetInt32(v[LY_MAX_CC]);
	l->threadable = DatumGetBool(v[LY_THREADABLE]);
	l->memory = DatumGetInt64(v[LY_MEMORY]);
	l->gpus = DatumGetInt32(v[LY_GPUS]);
	l->gpu_memory = DatumGetInt64(v[LY_GPU_MEMORY]);
	l->command = TextDatumGetCString(v[LY_COMMAND]);
	l->env = frameq_read_copy(v[LY_ENV]);
	l->has_timeout = !n[LY_TIMEOUT];
	l->timeout = l->has_timeout ? DatumGetInt32(v[LY_TIMEOUT]) : 0;
	if (!l->has_timeout && job->has_timeout)
	{
		l->has_timeout = true;
		l->timeout = job->timeout;
	}
	l->has_pattern = !n[LY_PATTERN];
	if (l->has_pattern)
		l->progress_pattern = frameq_read_copy(v[LY_PATTERN]);
	l->dispatch_order = DatumGetInt32(v[LY_ORDER]);
	l->passed = DatumGetBool(v[LY_PAUSED]) ||
		!(ArrayGetNItems(ARR_NDIM(DatumGetArrayTypeP(v[LY_TAGS])),
						 ARR_DIMS(DatumGetArrayTypeP(v[LY_TAGS]))) == 0 ||
		  tags_overlap(v[LY_TAGS], st->host.tags));
	frameq_read_end(&r);
	load_layer_limits(l);
	return true;
}

/* a job's ledger keys and caps, without the show's and the layer's */
static void
job_keys(const JobCandidate *job, LedgerKeys *keys, LedgerCaps *caps)
{
	keys->has_folder = job->has_folder;
	keys->folder = job->folder;
	keys->job = job->id;
	caps->folder_cc = job->folder_cap_cc;
	caps->folder_gpus = job->folder_cap_gpus;
	caps->job_cc = job->job_cap_cc;
	caps->job_gpus = job->job_cap_gpus;
}

/* a job's folder and job items with their caps, in that order */
static int
job_items(LedgerItem *items, const JobCandidate *job)
{
	LedgerKeys	keys = {0};
	LedgerCaps	caps = {0};

	job_keys(job, &keys, &caps);
	return frameq_ledger_job_items(items, &keys, &caps);
}

/* the proc's ledger items with their caps (frameq_ledger_items) */
static int
booking_items(LedgerItem *items, const ReserveState *st, const ShowCandidate *show,
			  const JobCandidate *job, const LayerCandidate *layer)
{
	LedgerKeys	keys = {0};
	LedgerCaps	caps = {0};

	job_keys(job, &keys, &caps);
	keys.show = show->show;
	keys.allocation = st->host.allocation;
	caps.burst_cc = show->burst_cc;
	keys.nlimits = layer->nlimits;
	keys.limits = layer->limit_ids;
	caps.limits = layer->limit_caps;
	return frameq_ledger_items(items, &keys, &caps);
}

static BookResult
skip_for(LedgerKind kind)
{
	switch (kind)
	{
		case LEDGER_SUBSCRIPTION:
			return SKIP_SHOW;
		case LEDGER_FOLDER:
		case LEDGER_JOB:
			return SKIP_JOB;
		case LEDGER_LIMIT:
			return SKIP_LAYER;
	}
	return SKIP_FRAME;
}

/* true if reserve() charged this proc: the insert trigger must not charge it again */
bool
frameq_adopt_precharge(int64 proc)
{
	if (precharged_lxid != MyProc->lxid)
		return false;
	for (int i = 0; i < nprecharged; i++)
	{
		if (precharged[i] == proc)
		{
			precharged[i] = 0;
			return true;
		}
	}
	return false;
}

/* one frame (a task: one frame number or a chunk) on its way to a booking */
typedef struct FrameTry
{
	int64		frame;
	int32		number;			/* the task's first frame number */
	int32		last;			/* its last, in range order */
	char	   *spec;			/* frameq._frame_spec; NULL for one number */
	int64		proc;
	int32		cores;
	BookResult	result;
} FrameTry;

static void
give_back(ReserveState *st, const LayerCandidate *layer, LedgerItem *items, int nitems,
		  FrameTry *t)
{
	Resources	need = frame_need(layer, t->cores);

	frameq_ledger_uncharge(items, nitems, t->cores, layer->gpus);
	resources_give(&st->host.idle, &need);
	t->result = SKIP_FRAME;
}

static int
compare_numbers(const void *a, const void *b)
{
	const FrameTry *x = a;
	const FrameTry *y = b;

	return (x->number > y->number) - (x->number < y->number);
}

/*
 * Book up to want frames of one layer (see the file header for the steps):
 * charge the caps for as many frames as fit, then one statement takes that
 * many waiting frames (FOR UPDATE SKIP LOCKED) and starts them, and one
 * INSERT adds their procs; charges for frames the layer did not have are
 * given back.  Sets *more if the layer may have more frames to take, and
 * returns why the walk must leave the layer (SKIP_FRAME: it need not).
 */
/*
 * One layer's booking in flight: the ledger items its frames count
 * against, and one FrameTry per frame charged (in number order once
 * claimed).
 */
typedef struct LayerBooking
{
	ReserveState *st;
	const ShowCandidate *show;
	const JobCandidate *job;
	const LayerCandidate *layer;
	LedgerItem	items[FRAMEQ_MAX_PROC_ITEMS];
	int			nitems;
	FrameTry   *tries;
	int			ncharged;
	int			nclaimed;
	DispatchStamp stamp;
} LayerBooking;

/*
 * 1. Charge every cap for up to want frames, frame after frame, until the
 * host is full or a cap does not fit; the host's free room goes down with
 * each.  Returns why it stopped (SKIP_FRAME: it was not a cap).
 */
static BookResult
charge_frames(LayerBooking *b, int want)
{
	ReserveState *st = b->st;
	const LayerCandidate *layer = b->layer;

	b->tries = palloc(sizeof(FrameTry) * want);
	b->nitems = booking_items(b->items, st, b->show, b->job, layer);
	b->ncharged = 0;
	while (b->ncharged < want)
	{
		FrameTry   *t = &b->tries[b->ncharged];
		Resources	need;
		int			failed;

		if (!host_has_room(st))
			return SKIP_FRAME;
		if (!layer_fits(st, layer))
			return SKIP_LAYER;
		/* a threadable layer takes what is free, up to its cores_max */
		t->cores = layer->threadable ? Min(layer->max_cc, st->host.idle.cores_cc) : layer->min_cc;
		failed = frameq_ledger_try_charge(b->items, b->nitems, t->cores, layer->gpus);
		if (failed >= 0 && t->cores > layer->min_cc)
		{
			t->cores = layer->min_cc;
			failed = frameq_ledger_try_charge(b->items, b->nitems, t->cores, layer->gpus);
		}
		if (failed >= 0)
			return skip_for(b->items[failed].kind);
		t->proc = frameq_random_id();
		t->result = BOOKED;		/* so far */
		need = frame_need(layer, t->cores);
		resources_take(&st->host.idle, &need);
		b->ncharged++;
	}
	return SKIP_FRAME;
}

/*
 * The claim statement, around the condition that picks its frames.  The
 * waiting frames are locked by an initplan and updated by primary key: no
 * join for a generic plan to get wrong.  The initplan's row lock rechecks
 * that each is still waiting (a row changed since the snapshot is read
 * again, SKIP LOCKED passes rows others hold), and keeps it so until the
 * update, so the update tests nothing more.  (It used to test state =
 * 'waiting' again, which let the planner answer it with a bitmap of the
 * whole frame_waiting index, every waiting frame of the farm: 2.3 ms a
 * claim with 58,000 waiting, in item 2a.)  A chunked task (numbers not
 * NULL) also returns its last number and its spec; an unchunked one pays
 * for two NULL tests only.
 */
#define CLAIM_SQL(pick) \
	"UPDATE frameq.frame" \
	"   SET state = 'running', version = version + 1, attempts = attempts + 1" \
	" WHERE id = ANY (ARRAY(SELECT id FROM frameq.frame" \
	"         WHERE layer = $1 AND state = 'waiting' AND not_before IS NULL AND " pick \
	"         ORDER BY number LIMIT $2" \
	"           FOR UPDATE SKIP LOCKED))" \
	" RETURNING id, number, numbers[pg_catalog.cardinality(numbers)]," \
	"   CASE WHEN numbers IS NOT NULL THEN frameq._frame_spec(number, numbers) END"

/*
 * The claim's plan: frames of the layer's own size, from the dispatch hint
 * on ($3), or frames an OOM raised to that memory ($3).  not_before IS
 * NULL and the memory test are the predicates of frame_waiting and
 * frame_raised: a delayed task is never read (one delayed since the
 * snapshot fails the row lock's recheck), nor is a raised one by the
 * layer's own claim.
 */
static SPIPlanPtr
claim_plan(bool raised)
{
	static SPIPlanPtr plan = NULL;
	static SPIPlanPtr raised_plan = NULL;

	if (raised && raised_plan == NULL)
	{
		Oid			types[3] = {INT8OID, INT4OID, INT8OID};

		raised_plan = frameq_prepare(CLAIM_SQL("memory = $3"), 3, types);
	}
	if (!raised && plan == NULL)
	{
		Oid			types[3] = {INT8OID, INT4OID, INT4OID};

		plan = frameq_prepare(CLAIM_SQL("memory IS NULL AND number >= $3"), 3, types);
	}
	return raised ? raised_plan : plan;
}

/*
 * 2. Take and start as many waiting frames as were charged, lowest numbers
 * first, from the layer's dispatch hint on (a raised size's: from its
 * first); give back the charges of frames the layer did not have.  The
 * hint is read before the statement takes its snapshot: see dispatch.c.
 */
static void
claim_frames(LayerBooking *b)
{
	Datum		args[3];
	int32		low;
	FrameTry   *got;
	int			ret;

	args[0] = Int64GetDatum(b->layer->id);
	args[1] = Int32GetDatum(b->ncharged);
	if (b->layer->raised)
		args[2] = Int64GetDatum(b->layer->memory);
	else
	{
		frameq_dispatch_lookup(b->layer->id, &low, &b->stamp);
		args[2] = Int32GetDatum(low);
	}
	ret = SPI_execute_plan(claim_plan(b->layer->raised), args, NULL, false, 0);
	if (ret != SPI_OK_UPDATE_RETURNING)
		elog(ERROR, "frameq: frame claim failed: %s", SPI_result_code_string(ret));
	b->nclaimed = (int) SPI_processed;
	b->st->claimed += b->nclaimed;
	if (b->nclaimed < b->ncharged)
		b->st->emptied = true;

	/* the charges go to the frames in number order, as they were taken */
	got = palloc(sizeof(FrameTry) * Max(b->nclaimed, 1));
	for (int i = 0; i < b->nclaimed; i++)
	{
		HeapTuple	tup = SPI_tuptable->vals[i];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		bool		one;

		got[i].frame = frameq_get_int64(tup, desc, 1, NULL);
		got[i].number = frameq_get_int32(tup, desc, 2, NULL);
		got[i].last = frameq_get_int32(tup, desc, 3, &one);
		if (one)
			got[i].last = got[i].number;
		got[i].spec = one ? NULL : SPI_getvalue(tup, desc, 4);
	}
	qsort(got, b->nclaimed, sizeof(FrameTry), compare_numbers);
	for (int i = 0; i < b->nclaimed; i++)
	{
		b->tries[i].frame = got[i].frame;
		b->tries[i].number = got[i].number;
		b->tries[i].last = got[i].last;
		b->tries[i].spec = got[i].spec;
	}
	for (int i = b->nclaimed; i < b->ncharged; i++)
		give_back(b->st, b->layer, b->items, b->nitems, &b->tries[i]);
}

#define PROC_INSERT_NARGS 16

/*
 * A claimed frame turned out to have a proc already: someone else booked
 * it, so it is rightly running, and our charge and attempt were not used.
 */
static void
unclaim_frame(LayerBooking *b, FrameTry *t)
{
	static SPIPlanPtr plan = NULL;
	Datum		args[1];

	give_back(b->st, b->layer, b->items, b->nitems, t);
	if (plan == NULL)
	{
		Oid			types[1] = {INT8OID};

		plan = frameq_prepare("UPDATE frameq.frame SET attempts = attempts - 1"
							  " WHERE id = $1 AND attempts > 0",
							  1, types);
	}
	args[0] = Int64GetDatum(t->frame);
	if (SPI_execute_plan(plan, args, NULL, false, 0) != SPI_OK_UPDATE)
		elog(ERROR, "frameq: frame attempt undo failed");
}

/*
 * The proc insert, for one proc (n = 1: VALUES) or several (unnest of the
 * ids, frames and cores): a single row skips the function scan and its
 * tuple stores.  $15 is the booking's time, $16 its deadline (NULL for no
 * timeout): one clock reading for both.  A frame that has a proc already
 * is skipped (ON CONFLICT) and left out of RETURNING: see unclaim_frame.
 */
static SPIPlanPtr
proc_insert_plan(int n)
{
	static SPIPlanPtr one_plan = NULL;
	static SPIPlanPtr many_plan = NULL;

	if (n == 1 && one_plan == NULL)
	{
		Oid			types[PROC_INSERT_NARGS] = {INT8OID, INT8OID, INT4OID, INT8OID, INT8OID,
			INT8OID, INT4OID, INT4OID, INT4OID, INT4ARRAYOID, INT4OID, INT8OID, INT4OID,
		INT8OID, TIMESTAMPTZOID, TIMESTAMPTZOID};

		one_plan = frameq_prepare("INSERT INTO frameq.proc"
								  " (id, frame, host, epoch, job, layer, show, folder,"
								  "  allocation, limits, cores_cc, memory, gpus, gpu_memory,"
								  "  booked_at, timeout_at)"
								  " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11,"
								  "         $12, $13, $14, $15, $16)"
								  " ON CONFLICT (frame) DO NOTHING"
								  " RETURNING id",
								  PROC_INSERT_NARGS, types);
	}
	if (n > 1 && many_plan == NULL)
	{
		Oid			types[PROC_INSERT_NARGS] = {INT8ARRAYOID, INT8ARRAYOID, INT4OID, INT8OID,
			INT8OID, INT8OID, INT4OID, INT4OID, INT4OID, INT4ARRAYOID, INT4ARRAYOID, INT8OID,
		INT4OID, INT8OID, TIMESTAMPTZOID, TIMESTAMPTZOID};

		many_plan = frameq_prepare("INSERT INTO frameq.proc"
								   " (id, frame, host, epoch, job, layer, show, folder,"
								   "  allocation, limits, cores_cc, memory, gpus, gpu_memory,"
								   "  booked_at, timeout_at)"
								   " SELECT t.id, t.frame, $3, $4, $5, $6, $7, $8, $9, $10,"
								   "        t.cores, $12, $13, $14, $15, $16"
								   "   FROM unnest($1, $2, $11) AS t(id, frame, cores)"
								   " ON CONFLICT (frame) DO NOTHING"
								   " RETURNING id",
								   PROC_INSERT_NARGS, types);
	}
	return n == 1 ? one_plan : many_plan;
}

/* the claimed frames' procs, as the arguments of proc_insert_plan(n) */
static void
proc_insert_args(LayerBooking *b, Datum *args, char *nulls)
{
	const LayerCandidate *layer = b->layer;
	int			n = b->nclaimed;
	Datum		limits[FRAMEQ_MAX_LAYER_LIMITS];
	TimestampTz now = GetCurrentTimestamp();

	for (int j = 0; j < layer->nlimits; j++)
		limits[j] = Int32GetDatum(layer->limit_ids[j]);
	memset(nulls, ' ', PROC_INSERT_NARGS);
	if (n == 1)
	{
		args[0] = Int64GetDatum(b->tries[0].proc);
		args[1] = Int64GetDatum(b->tries[0].frame);
		args[10] = Int32GetDatum(b->tries[0].cores);
	}
	else
	{
		Datum	   *ids = palloc(sizeof(Datum) * n);
		Datum	   *frames = palloc(sizeof(Datum) * n);
		Datum	   *cores = palloc(sizeof(Datum) * n);

		for (int k = 0; k < n; k++)
		{
			ids[k] = Int64GetDatum(b->tries[k].proc);
			frames[k] = Int64GetDatum(b->tries[k].frame);
			cores[k] = Int32GetDatum(b->tries[k].cores);
		}
		args[0] = PointerGetDatum(construct_array(ids, n, INT8OID, 8, FLOAT8PASSBYVAL,
												  TYPALIGN_DOUBLE));
		args[1] = PointerGetDatum(construct_array(frames, n, INT8OID, 8, FLOAT8PASSBYVAL,
												  TYPALIGN_DOUBLE));
		args[10] = PointerGetDatum(construct_array(cores, n, INT4OID, 4, true, TYPALIGN_INT));
	}
	args[2] = Int32GetDatum(b->st->host.id);
	args[3] = Int64GetDatum(b->st->epoch);
	args[4] = Int64GetDatum(b->job->id);
	args[5] = Int64GetDatum(layer->id);
	args[6] = Int32GetDatum(b->show->show);
	args[7] = Int32GetDatum(b->job->folder);
	if (!b->job->has_folder)
		nulls[7] = 'n';
	args[8] = Int32GetDatum(b->st->host.allocation);
	args[9] = PointerGetDatum(construct_array(limits, layer->nlimits, INT4OID, 4,
											  true, TYPALIGN_INT));
	args[11] = Int64GetDatum(layer->memory);
	args[12] = Int32GetDatum(layer->gpus);
	args[13] = Int64GetDatum(layer->gpu_memory);
	args[14] = TimestampTzGetDatum(now);
	args[15] = TimestampTzGetDatum(now + (int64) layer->timeout * USECS_PER_SEC);
	if (!layer->has_timeout)
		nulls[15] = 'n';
}

/*
 * 3. Insert the claimed frames' procs in one statement.  The insert trigger
 * adopts the charges taken in step 1 (the precharge hand-off, above) rather
 * than charging again.
 */
static void
insert_procs(LayerBooking *b)
{
	Datum		args[PROC_INSERT_NARGS];
	char		nulls[PROC_INSERT_NARGS];
	int64	   *inserted;
	int			ninserted;
	int			ret;

	if (b->nclaimed > precharged_cap)
	{
		if (precharged)
			pfree(precharged);
		precharged = MemoryContextAlloc(TopMemoryContext, sizeof(int64) * b->nclaimed);
		precharged_cap = b->nclaimed;
	}
	for (int i = 0; i < b->nclaimed; i++)
		precharged[i] = b->tries[i].proc;
	nprecharged = b->nclaimed;
	precharged_lxid = MyProc->lxid;

	proc_insert_args(b, args, nulls);
	ret = SPI_execute_plan(proc_insert_plan(b->nclaimed), args, nulls, false, 0);
	if (ret != SPI_OK_INSERT_RETURNING)
		elog(ERROR, "frameq: proc insert failed: %s", SPI_result_code_string(ret));
	/* keep the ids: unclaim_frame runs SPI again */
	ninserted = (int) SPI_processed;
	inserted = palloc(sizeof(int64) * Max(ninserted, 1));
	for (int r = 0; r < ninserted; r++)
		inserted[r] = frameq_get_int64(SPI_tuptable->vals[r], SPI_tuptable->tupdesc, 1, NULL);
	for (int i = 0; i < b->nclaimed; i++)
	{
		bool		found = false;

		for (int r = 0; r < ninserted && !found; r++)
			found = inserted[r] == b->tries[i].proc;
		if (!found)
			unclaim_frame(b, &b->tries[i]);
		else if (frameq_adopt_precharge(b->tries[i].proc))
			elog(ERROR, "frameq: the proc insert trigger did not take the booking's charge");
	}
	nprecharged = 0;
}

/* 4. Hand the bookings out, and move the layer's dispatch hint; returns how many */
static int
hand_out(LayerBooking *b)
{
	ReserveState *st = b->st;
	const LayerCandidate *layer = b->layer;
	int			nbooked = 0;

	for (int i = 0; i < b->nclaimed; i++)
	{
		FrameTry   *t = &b->tries[i];
		Datum		values[BOOKING_MAX_NATTS];
		bool		vnulls[BOOKING_MAX_NATTS];

		/* the hint is of the layer's own size's tasks only */
		if (t->result != BOOKED)
		{
			if (!layer->raised)
				frameq_dispatch_skipped(layer->id, t->number);
			continue;
		}
		if (!layer->raised)
			frameq_dispatch_booked(layer->id, t->number, &b->stamp);
		st->booked++;
		nbooked++;
		/* null: the attributes found by name until set, and any dropped one */
		memset(vnulls, true, sizeof(vnulls));
		memset(vnulls, false, sizeof(bool) * BOOKING_FIXED_NATTS);
		values[0] = Int64GetDatum(t->proc);
		values[1] = Int64GetDatum(t->frame);
		values[2] = Int64GetDatum(b->job->id);
		values[3] = Int64GetDatum(layer->id);
		values[4] = Int32GetDatum(t->number);
		values[5] = CStringGetTextDatum(expand_command(layer->command, t->number, t->last,
													   t->spec, b->job->name, layer->name));
		values[6] = frameq_numeric_from_cc(t->cores);
		values[7] = Int64GetDatum(layer->memory);
		values[8] = Int32GetDatum(layer->gpus);
		values[9] = Int64GetDatum(layer->gpu_memory);
		values[10] = layer->env;
		if (st->secret_att >= 0)
		{
			values[st->secret_att] = run_secret(st, t->proc);
			vnulls[st->secret_att] = false;
		}
		if (st->pattern_att >= 0 && layer->has_pattern)
		{
			values[st->pattern_att] = layer->progress_pattern;
			vnulls[st->pattern_att] = false;
		}
		tuplestore_putvalues(st->rsinfo->setResult, st->rsinfo->setDesc, values, vnulls);
	}
	return nbooked;
}

static BookResult
book_frames(ReserveState *st, const ShowCandidate *show, const JobCandidate *job,
			const LayerCandidate *layer, int want, bool *more)
{
	LayerBooking b = {st, show, job, layer};
	BookResult	stop;
	int			nbooked;

	*more = false;
	stop = charge_frames(&b, want);
	if (b.ncharged == 0)
		return stop;
	claim_frames(&b);
	if (b.nclaimed == 0)
		return SKIP_FRAME;
	if (b.nclaimed < b.ncharged)
		stop = SKIP_FRAME;		/* the caps were not what stopped us */
	insert_procs(&b);
	nbooked = hand_out(&b);
	/* if it had fewer frames than we wanted, there is nothing more to take now */
	*more = b.nclaimed == b.ncharged && nbooked > 0;
	return stop;
}

/* book from one layer while it has waiting frames and the host has room */
static BookResult
book_layer(ReserveState *st, const ShowCandidate *show, const JobCandidate *job,
		   const LayerCandidate *layer)
{
	while (host_has_room(st) && layer_fits(st, layer))
	{
		int			want = st->max_frames - st->booked;
		bool		more;
		BookResult	stop;

		/*
		 * No more frames than the free cores could take, and at most
		 * FRAME_BATCH per statement: the caps are charged before the layer
		 * is known to have the frames, and a concurrent booking may skip a
		 * cap that is full only until the surplus is given back.
		 */
		want = Min(want, st->host.idle.cores_cc / layer->min_cc);
		want = Min(want, FRAME_BATCH);
		if (want <= 0)
			break;
		stop = book_frames(st, show, job, layer, want, &more);
		if (stop != SKIP_FRAME)
			return stop;
		if (!more)
			break;
	}
	return SKIP_FRAME;
}

/*
 * The candidate walk.  A show's candidates are the layers named
 * by frameq.dispatch_queue (sql/src/dispatch.sql), one index range per
 * stream: (show, tag, needs-gpus, memory class, cores class), each in
 * policy order: job priority descending, job id, dispatch order, layer id.
 * A host reads the streams of the tags it has and of no tag, the GPU
 * streams only if it has GPUs, and the size classes up to those of its
 * free memory and free cores; the resource minimums are index conditions,
 * so of the layers it cannot run it meets, one index tuple each, only
 * those of its own size class that need more than it has free.  Each row
 * comes with its job's state, priority and caps (key probes).
 *
 * For each show, the streams that frameq.dispatch_class says may have
 * rows and the first QUEUE_HEADS rows of each are read below the executor
 * (open_streams); the streams are merged here, and a stream whose rows are
 * used up is read on from its last row, QUEUE_BATCH rows a statement.
 * (The planner merges a UNION ALL of the streams only after sorting it
 * whole, and sorting is what must not happen.)  Layers with nothing waiting have no row once a booking has
 * found them dry, so what the walk reads is layers that may book, plus
 * rows it tidies away as it goes.
 */
#define QUEUE_HEADS 4
#define QUEUE_BATCH 16

/* size classes: class 0 holds up to one core and 1 GiB, each next class twice as much */
#define CLASS_CORES_CC		100
#define CLASS_MEMORY		(INT64CONST(1) << 30)

/*
 * The size class of an amount: how many doublings of unit it takes to
 * hold it (0 for up to unit).  The one owner of the steps: the dispatch
 * queue's rows get theirs through _memory_class and _cores_class, a host
 * reads the classes of its free room.
 */
static int16
size_class(int64 amount, int64 unit)
{
	int16		c = 0;

	while (amount > unit && unit <= PG_INT64_MAX / 2)
	{
		unit *= 2;
		c++;
	}
	return c;
}

PG_FUNCTION_INFO_V1(frameq_memory_class);

Datum
frameq_memory_class(PG_FUNCTION_ARGS)
{
	PG_RETURN_INT16(size_class(PG_GETARG_INT64(0), CLASS_MEMORY));
}

PG_FUNCTION_INFO_V1(frameq_cores_class);

Datum
frameq_cores_class(PG_FUNCTION_ARGS)
{
	PG_RETURN_INT16(size_class(PG_GETARG_INT32(0), CLASS_CORES_CC));
}

/* one row of a show's candidate streams */
typedef struct QueueRow
{
	ItemPointerData tid;
	int32		priority;
	int64		job;
	int32		dispatch_order;
	int64		layer;
	int32		min_cc;
	int32		gpus;
	int64		memory;			/* the layer's, or a size its raised tasks have */
	bool		fresh;			/* the job is active, at the row's priority */
	bool		blocks;			/* some host may be blocked for the job (limits.c) */
	JobCandidate caps;			/* the job's id, folder and caps (no name) */
	bool		joined;			/* fresh, blocks and caps are read (row_job) */
} QueueRow;

/*
 * policy order: priority descending, then job, dispatch order, layer; a
 * layer's own size before the sizes its raised tasks have
 */
static bool
row_before(const QueueRow *a, const QueueRow *b)
{
	if (a->priority != b->priority)
		return a->priority > b->priority;
	if (a->job != b->job)
		return a->job < b->job;
	if (a->dispatch_order != b->dispatch_order)
		return a->dispatch_order < b->dispatch_order;
	if (a->layer != b->layer)
		return a->layer < b->layer;
	return a->memory < b->memory;
}

static int
compare_rows(const void *a, const void *b)
{
	return row_before(a, b) ? -1 : row_before(b, a) ? 1 : 0;
}

/* one stream: its key, the rows read and not yet used, and whether more may follow */
typedef struct Stream
{
	Datum		tag;
	bool		gpu;
	int16		mem_class;
	int16		core_class;
	QueueRow	rows[QUEUE_BATCH];
	int			n;
	int			pos;
	bool		more;			/* the last read filled its limit */
	QueueRow	last;			/* the last row read: the next read starts after it */
} Stream;

typedef struct Streams
{
	Stream	   *s;
	int			n;
	int			cap;
	int32		show;
	Datum		room[4];		/* the host's free room, as the reads' index conditions */
} Streams;

/* a show's candidate rows, per stream: the columns both reads return */
#define STREAM_COLUMNS \
	"q.ctid, q.priority, q.job, q.dispatch_order, q.layer, q.min_cc, q.gpus," \
	" coalesce(j.state = 'active' AND j.priority = q.priority, false)," \
	" j.folder, coalesce(j.max_cc, -1), coalesce(j.max_gpus, -1)," \
	" coalesce(f.max_cc, -1), coalesce(f.max_gpus, -1), coalesce(j.host_blocks, false)," \
	" q.memory"
#define STREAM_ROOM \
	" AND q.min_cc <= $6 AND q.memory <= $7 AND q.gpus <= $8 AND q.gpu_memory <= $9"
#define STREAM_ORDER " ORDER BY q.priority DESC, q.job, q.dispatch_order, q.layer, q.min_cc, q.memory"

/*
 * The rows of one stream after ($10 to $15), its last row read.  The
 * memory is part of the key: a layer has a row per size its raised tasks
 * have (min_cc, the same for all of them, keeps the index's order).
 */
static SPIPlanPtr
more_plan(void)
{
	static SPIPlanPtr plan = NULL;
	Oid			types[15] = {INT4OID, TEXTOID, BOOLOID, INT2OID, INT2OID,
		INT4OID, INT8OID, INT4OID, INT8OID,
	INT4OID, INT8OID, INT4OID, INT8OID, INT4OID, INT8OID};

	if (plan == NULL)
		plan = frameq_prepare("SELECT " STREAM_COLUMNS
							  "  FROM frameq.dispatch_queue q"
							  "  LEFT JOIN frameq.job j ON j.id = q.job"
							  "  LEFT JOIN frameq.folder f ON f.id = j.folder"
							  " WHERE q.show = $1 AND q.tag = $2 AND q.gpu = $3"
							  "   AND q.mem_class = $4 AND q.core_class = $5" STREAM_ROOM
							  "   AND q.priority <= $10"
							  "   AND (q.priority < $10 OR (q.job, q.dispatch_order, q.layer, q.min_cc, q.memory)"
							  "                            > ($11, $12, $13, $14, $15))"
							  STREAM_ORDER " LIMIT " CppAsString2(QUEUE_BATCH),
							  15, types);
	return plan;
}

/* a row of either read, its stream's columns from column first on */
static void
read_row(HeapTuple tup, TupleDesc desc, int first, QueueRow *r)
{
	bool		isnull;

	r->tid = *(ItemPointer) DatumGetPointer(SPI_getbinval(tup, desc, first, &isnull));
	r->priority = frameq_get_int32(tup, desc, first + 1, NULL);
	r->job = frameq_get_int64(tup, desc, first + 2, NULL);
	r->dispatch_order = frameq_get_int32(tup, desc, first + 3, NULL);
	r->layer = frameq_get_int64(tup, desc, first + 4, NULL);
	r->min_cc = frameq_get_int32(tup, desc, first + 5, NULL);
	r->gpus = frameq_get_int32(tup, desc, first + 6, NULL);
	r->fresh = frameq_get_bool(tup, desc, first + 7, NULL);
	memset(&r->caps, 0, sizeof(r->caps));
	r->caps.id = r->job;
	r->caps.folder = frameq_get_int32(tup, desc, first + 8, &isnull);
	r->caps.has_folder = !isnull;
	r->caps.job_cap_cc = frameq_get_int32(tup, desc, first + 9, NULL);
	r->caps.job_cap_gpus = frameq_get_int32(tup, desc, first + 10, NULL);
	r->caps.folder_cap_cc = frameq_get_int32(tup, desc, first + 11, NULL);
	r->caps.folder_cap_gpus = frameq_get_int32(tup, desc, first + 12, NULL);
	r->blocks = frameq_get_bool(tup, desc, first + 13, NULL);
	r->memory = frameq_get_int64(tup, desc, first + 14, NULL);
	r->joined = true;
}

/* the stream of this key, added if it is new */
static Stream *
stream_of(Streams *streams, text *tag, bool gpu, int16 mem_class, int16 core_class)
{
	Stream	   *s;

	for (int i = 0; i < streams->n; i++)
	{
		text	   *t = DatumGetTextPP(streams->s[i].tag);

		s = &streams->s[i];
		if (s->gpu == gpu && s->mem_class == mem_class && s->core_class == core_class &&
			VARSIZE_ANY_EXHDR(t) == VARSIZE_ANY_EXHDR(tag) &&
			memcmp(VARDATA_ANY(t), VARDATA_ANY(tag), VARSIZE_ANY_EXHDR(tag)) == 0)
			return s;
	}
	if (streams->n >= streams->cap)
	{
		streams->cap = Max(8, streams->cap * 2);
		streams->s = streams->s ? repalloc(streams->s, sizeof(Stream) * streams->cap)
			: palloc(sizeof(Stream) * streams->cap);
	}
	s = &streams->s[streams->n++];
	s->tag = PointerGetDatum(tag);
	s->gpu = gpu;
	s->mem_class = mem_class;
	s->core_class = core_class;
	s->n = s->pos = 0;
	s->more = false;
	return s;
}

static bool load_job(ReserveState *st, int64 id, JobCandidate *job, bool *active,
					 int32 *priority);

enum
{
	DQ_SHOW, DQ_TAG, DQ_GPU, DQ_MEM_CLASS, DQ_CORE_CLASS, DQ_PRIORITY, DQ_JOB, DQ_ORDER,
	DQ_LAYER, DQ_MIN_CC, DQ_MEMORY, DQ_GPUS, DQ_GPU_MEMORY, DQ_NCOLS
};

/* a stream's key columns, in both tables and in both indexes, come first */
#define STREAM_KEY_COLUMNS \
	{"show", INT4OID, F_INT4EQ}, \
	{"tag", TEXTOID, F_TEXTEQ}, \
	{"gpu", BOOLOID, F_BOOLEQ}, \
	{"mem_class", INT2OID, F_INT2EQ}, \
	{"core_class", INT2OID, F_INT2EQ}
static const FrameqColumn class_cols[] = {STREAM_KEY_COLUMNS};
static AttrNumber class_attnums[lengthof(class_cols)];
static FrameqTable class_table = {"dispatch_class", "dispatch_class_stream",
lengthof(class_cols), class_cols, class_attnums};

static const FrameqColumn queue_cols[DQ_NCOLS] = {
	STREAM_KEY_COLUMNS,
	{"priority", INT4OID},
	{"job", INT8OID},
	{"dispatch_order", INT4OID},
	{"layer", INT8OID},
	{"min_cc", INT4OID},
	{"memory", INT8OID},
	{"gpus", INT4OID},
	{"gpu_memory", INT8OID},
};
static AttrNumber queue_attnums[DQ_NCOLS];
static FrameqTable queue_table = {"dispatch_queue", "dispatch_queue_order", DQ_NCOLS,
queue_cols, queue_attnums};

/* one stream's key, as dispatch_class lists it */
typedef struct StreamKey
{
	text	   *tag;
	bool		gpu;
	int16		mem_class;
	int16		core_class;
} StreamKey;

static bool
text_equal(text *a, text *b)
{
	return VARSIZE_ANY_EXHDR(a) == VARSIZE_ANY_EXHDR(b) &&
		memcmp(VARDATA_ANY(a), VARDATA_ANY(b), VARSIZE_ANY_EXHDR(a)) == 0;
}

/*
 * The streams of the show that may have rows for this host: dispatch_class
 * rows of its tags or of no tag (tags, ntags), GPU ones only if it has
 * GPUs, of size classes up to its free room's; each once.
 */
static int
host_streams(const ReserveState *st, int32 show, text **tags, int ntags, StreamKey **out)
{
	FrameqRead	r;
	int			keycols[1] = {DQ_SHOW};
	Datum		keys[1];
	Datum		v[lengthof(class_cols)];
	bool		n[lengthof(class_cols)];
	int16		mem_max = size_class(st->host.idle.memory, CLASS_MEMORY);
	int16		core_max = size_class(st->host.idle.cores_cc, CLASS_CORES_CC);
	int			nkeys = 0;
	int			cap = 8;
	StreamKey  *ks = palloc(sizeof(StreamKey) * cap);

	keys[0] = Int32GetDatum(show);
	frameq_read_begin(&r, &class_table, false, 1, keycols, keys);
	while (frameq_read_next(&r, v, n))
	{
		StreamKey	k;
		bool		wanted = false;
		bool		seen = false;

		k.tag = DatumGetTextPP(v[DQ_TAG]);
		k.gpu = DatumGetBool(v[DQ_GPU]);
		k.mem_class = DatumGetInt16(v[DQ_MEM_CLASS]);
		k.core_class = DatumGetInt16(v[DQ_CORE_CLASS]);
		if ((k.gpu && st->host.idle.gpus <= 0) || k.mem_class > mem_max ||
			k.core_class > core_max)
			continue;
		for (int t = 0; t < ntags && !wanted; t++)
			wanted = text_equal(k.tag, tags[t]);
		for (int i = 0; i < nkeys && wanted && !seen; i++)
			seen = ks[i].gpu == k.gpu && ks[i].mem_class == k.mem_class &&
				ks[i].core_class == k.core_class && text_equal(ks[i].tag, k.tag);
		if (!wanted || seen)
			continue;
		if (nkeys >= cap)
		{
			cap *= 2;
			ks = repalloc(ks, sizeof(StreamKey) * cap);
		}
		k.tag = DatumGetTextPP(frameq_read_copy(v[DQ_TAG]));
		ks[nkeys++] = k;
	}
	frameq_read_end(&r);
	*out = ks;
	return nkeys;
}

/*
 * A queue row's job columns (the heads' join): whether the job is active
 * at the row's priority, its folder, its and the folder's caps, and the
 * host_blocks mark.  A job that is gone makes the row stale.
 */
static void
row_job(ReserveState *st, QueueRow *q)
{
	JobCandidate job = {0};
	bool		active;
	int32		priority;

	memset(&q->caps, 0, sizeof(q->caps));
	q->caps.id = q->job;
	q->joined = true;
	if (!load_job(st, q->job, &job, &active, &priority))
	{
		q->fresh = false;
		q->blocks = false;
		q->caps.job_cap_cc = q->caps.job_cap_gpus = -1;
		q->caps.folder_cap_cc = q->caps.folder_cap_gpus = -1;
		return;
	}
	q->fresh = active && priority == q->priority;
	q->blocks = job.host_blocks;
	q->caps.has_folder = job.has_folder;
	q->caps.folder = job.folder;
	q->caps.job_cap_cc = job.job_cap_cc;
	q->caps.job_cap_gpus = job.job_cap_gpus;
	q->caps.folder_cap_cc = job.folder_cap_cc;
	q->caps.folder_cap_gpus = job.folder_cap_gpus;
}

/*
 * The first QUEUE_HEADS rows of one stream, in policy order (the index's),
 * that fit the host's free room; false if it has none.
 */
static bool
stream_heads(ReserveState *st, int32 show, const StreamKey *k, Stream *s)
{
	FrameqRead	r;
	int			keycols[5] = {DQ_SHOW, DQ_TAG, DQ_GPU, DQ_MEM_CLASS, DQ_CORE_CLASS};
	Datum		keys[5];
	Datum		v[DQ_NCOLS];
	bool		n[DQ_NCOLS];
	const Resources *room = &st->host.idle;

	keys[0] = Int32GetDatum(show);
	keys[1] = PointerGetDatum(k->tag);
	keys[2] = BoolGetDatum(k->gpu);
	keys[3] = Int16GetDatum(k->mem_class);
	keys[4] = Int16GetDatum(k->core_class);
	s->n = 0;
	frameq_read_begin(&r, &queue_table, false, 5, keycols, keys);
	while (s->n < QUEUE_HEADS && frameq_read_next(&r, v, n))
	{
		QueueRow   *q = &s->rows[s->n];

		if (DatumGetInt32(v[DQ_MIN_CC]) > room->cores_cc ||
			DatumGetInt64(v[DQ_MEMORY]) > room->memory ||
			DatumGetInt32(v[DQ_GPUS]) > room->gpus ||
			DatumGetInt64(v[DQ_GPU_MEMORY]) > room->gpu_memory)
			continue;
		q->tid = frameq_read_tid(&r);
		q->priority = DatumGetInt32(v[DQ_PRIORITY]);
		q->job = DatumGetInt64(v[DQ_JOB]);
		q->dispatch_order = DatumGetInt32(v[DQ_ORDER]);
		q->layer = DatumGetInt64(v[DQ_LAYER]);
		q->min_cc = DatumGetInt32(v[DQ_MIN_CC]);
		q->gpus = DatumGetInt32(v[DQ_GPUS]);
		q->memory = DatumGetInt64(v[DQ_MEMORY]);
		q->joined = false;		/* its job is read when the walk reaches it */
		s->n++;
	}
	frameq_read_end(&r);
	return s->n > 0;
}

/*
 * Open the show's streams for this host: its tags and no tag, GPU layers
 * if it has GPUs, the size classes its free room reaches; read the first
 * rows of each.  Read below the executor (rowread.c) under the calling
 * statement's snapshot, as the one read-only statement that did this
 * before saw them: a probe of dispatch_class_stream, one range of
 * dispatch_queue_order per stream (its rows arrive in policy order, those
 * that need more than the host's free room are passed).  The job (and
 * folder) of a row is probed when the walk reaches the row (row_job), so
 * the rows after a booking that fills the host cost no probe.
 */
static void
open_streams(ReserveState *st, const ShowCandidate *show, Streams *out)
{
	Datum	   *host_tags;
	bool	   *tag_nulls;
	int			nhost_tags;
	text	  **tags;
	int			ntags = 0;
	StreamKey  *keys;
	int			nkeys;

	deconstruct_array(DatumGetArrayTypeP(st->host.tags), TEXTOID, -1, false, TYPALIGN_INT,
					  &host_tags, &tag_nulls, &nhost_tags);
	tags = palloc(sizeof(text *) * (nhost_tags + 1));
	tags[ntags++] = cstring_to_text("");
	for (int i = 0; i < nhost_tags; i++)
		if (!tag_nulls[i])
			tags[ntags++] = DatumGetTextPP(host_tags[i]);
	memset(out, 0, sizeof(*out));
	out->show = show->show;
	out->room[0] = Int32GetDatum(st->host.idle.cores_cc);
	out->room[1] = Int64GetDatum(st->host.idle.memory);
	out->room[2] = Int32GetDatum(st->host.idle.gpus);
	out->room[3] = Int64GetDatum(st->host.idle.gpu_memory);

	nkeys = host_streams(st, show->show, tags, ntags, &keys);
	for (int i = 0; i < nkeys; i++)
	{
		Stream	   *s = stream_of(out, keys[i].tag, keys[i].gpu, keys[i].mem_class,
								  keys[i].core_class);

		if (!stream_heads(st, show->show, &keys[i], s))
		{
			out->n--;			/* no rows: no stream (it was the last one added) */
			continue;
		}
		/* rows of one layer may tie in the index's order and not in the walk's */
		qsort(s->rows, s->n, sizeof(QueueRow), compare_rows);
		s->more = (s->n == QUEUE_HEADS);
		s->last = s->rows[s->n - 1];
	}
}

static void
close_streams(Streams *streams)
{
	if (streams->s)
		pfree(streams->s);
}

/* read on in a stream whose rows are used up, after the last row read */
static void
read_more(Streams *streams, Stream *s)
{
	Datum		args[15];

	args[0] = Int32GetDatum(streams->show);
	args[1] = s->tag;
	args[2] = BoolGetDatum(s->gpu);
	args[3] = Int16GetDatum(s->mem_class);
	args[4] = Int16GetDatum(s->core_class);
	memcpy(args + 5, streams->room, sizeof(streams->room));
	args[9] = Int32GetDatum(s->last.priority);
	args[10] = Int64GetDatum(s->last.job);
	args[11] = Int32GetDatum(s->last.dispatch_order);
	args[12] = Int64GetDatum(s->last.layer);
	args[13] = Int32GetDatum(s->last.min_cc);
	args[14] = Int64GetDatum(s->last.memory);
	if (SPI_execute_plan(more_plan(), args, NULL, true, QUEUE_BATCH) != SPI_OK_SELECT)
		elog(ERROR, "frameq: dispatch queue read failed");
	s->n = (int) SPI_processed;
	s->pos = 0;
	for (int i = 0; i < s->n; i++)
		read_row(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1, &s->rows[i]);
	SPI_freetuptable(SPI_tuptable);
	s->more = (s->n == QUEUE_BATCH);
	if (s->n > 0)
		s->last = s->rows[s->n - 1];
}

/* the stream's next row, reading on if needed; NULL when it is done */
static QueueRow *
stream_head(Streams *streams, Stream *s)
{
	if (s->pos >= s->n)
	{
		if (!s->more)
			return NULL;
		read_more(streams, s);
		if (s->n == 0)
			return NULL;
	}
	return &s->rows[s->pos];
}

/* the next row of the merged streams, copied into *row; false at the end */
static bool
next_row(Streams *streams, QueueRow *row)
{
	Stream	   *best = NULL;
	QueueRow   *best_row = NULL;

	for (int i = 0; i < streams->n; i++)
	{
		QueueRow   *r = stream_head(streams, &streams->s[i]);

		if (r != NULL && (best_row == NULL || row_before(r, best_row)))
		{
			best = &streams->s[i];
			best_row = r;
		}
	}
	if (best == NULL)
		return false;
	*row = *best_row;
	best->pos++;
	return true;
}

enum
{
	JC_ID, JC_FOLDER, JC_MAX_CC, JC_MAX_GPUS, JC_NAME, JC_STATE, JC_PRIORITY,
	JC_TIMEOUT, JC_BLOCKS, JC_NCOLS
};
static const FrameqColumn job_cols[JC_NCOLS] = {
	{"id", INT8OID, F_INT8EQ},
	{"folder", INT4OID},
	{"max_cc", INT4OID},
	{"max_gpus", INT4OID},
	{"name", TEXTOID},
	{"state", TEXTOID},
	{"priority", INT4OID},
	{"timeout", INT4OID},
	{"host_blocks", BOOLOID},
};
static AttrNumber job_attnums[JC_NCOLS];
static FrameqTable job_table = {"job", "job_pkey", JC_NCOLS, job_cols, job_attnums};

static const FrameqColumn folder_cols[] = {
	{"id", INT4OID, F_INT4EQ},
	{"max_cc", INT4OID},
	{"max_gpus", INT4OID},
};
static AttrNumber folder_attnums[lengthof(folder_cols)];
static FrameqTable folder_table = {"folder", "folder_pkey", lengthof(folder_cols),
folder_cols, folder_attnums};

/* a nullable cap read: -1 for none */
static int32
cap_or_none(Datum v, bool isnull)
{
	return isnull ? -1 : DatumGetInt32(v);
}

/* the job's folder's caps, -1 for none (and for a folder that is gone) */
static void
load_folder_caps(JobCandidate *job)
{
	FrameqRead	r;
	int			keycols[1] = {0};
	Datum		keys[1];
	Datum		v[lengthof(folder_cols)];
	bool		n[lengthof(folder_cols)];

	job->folder_cap_cc = job->folder_cap_gpus = -1;
	if (!job->has_folder)
		return;
	keys[0] = Int32GetDatum(job->folder);
	frameq_read_begin(&r, &folder_table, false, 1, keycols, keys);
	if (frameq_read_next(&r, v, n))
	{
		job->folder_cap_cc = cap_or_none(v[1], n[1]);
		job->folder_cap_gpus = cap_or_none(v[2], n[2]);
	}
	frameq_read_end(&r);
}

/*
 * A candidate's job as it is now, with its folder's caps: read under the
 * calling statement's snapshot (rowread.c), as one read-only statement
 * would; false if it is gone.  Every read of the call sees that same
 * snapshot, so a job read already in this call (the dispatch queue's rows
 * carry their jobs' caps, and the booking needs the job again) is taken
 * from st->jobs, not read again.
 */
static bool
load_job(ReserveState *st, int64 id, JobCandidate *job, bool *active, int32 *priority)
{
	FrameqRead	r;
	int			keycols[1] = {JC_ID};
	Datum		keys[1];
	Datum		v[JC_NCOLS];
	bool		n[JC_NCOLS];

	for (int i = 0; i < Min(st->njobs, JOB_CACHE); i++)
	{
		if (st->jobs[i].job.id == id)
		{
			*job = st->jobs[i].job;
			*active = st->jobs[i].active;
			*priority = st->jobs[i].priority;
			return true;
		}
	}
	keys[0] = Int64GetDatum(id);
	frameq_read_begin(&r, &job_table, false, 1, keycols, keys);
	if (!frameq_read_next(&r, v, n))
	{
		frameq_read_end(&r);
		return false;
	}
	job->id = DatumGetInt64(v[JC_ID]);
	job->has_folder = !n[JC_FOLDER];
	job->folder = job->has_folder ? DatumGetInt32(v[JC_FOLDER]) : 0;
	job->job_cap_cc = cap_or_none(v[JC_MAX_CC], n[JC_MAX_CC]);
	job->job_cap_gpus = cap_or_none(v[JC_MAX_GPUS], n[JC_MAX_GPUS]);
	job->name = TextDatumGetCString(v[JC_NAME]);
	*active = frameq_text_is(v[JC_STATE], "active");
	*priority = DatumGetInt32(v[JC_PRIORITY]);
	job->has_timeout = !n[JC_TIMEOUT];
	job->timeout = job->has_timeout ? DatumGetInt32(v[JC_TIMEOUT]) : 0;
	job->host_blocks = DatumGetBool(v[JC_BLOCKS]);
	frameq_read_end(&r);
	load_folder_caps(job);
	st->jobs[st->njobs % JOB_CACHE].job = *job;
	st->jobs[st->njobs % JOB_CACHE].active = *active;
	st->jobs[st->njobs % JOB_CACHE].priority = *priority;
	st->njobs++;
	return true;
}

/* a growing array of Datums */
typedef struct DatumList
{
	Datum	   *items;
	int			n;
	int			cap;
} DatumList;

/*
 * What the walk found to tidy: stale rows, layers with nothing to take, and
 * rows over a cap whose entry it parked.
 */
typedef struct Tidy
{
	DatumList	stale;			/* tids */
	DatumList	emptied;		/* layer ids */
	DatumList	parked;			/* tids */
} Tidy;

static void
tidy_add(DatumList *list, Datum d)
{
	if (list->n >= list->cap)
	{
		list->cap = Max(16, list->cap * 2);
		list->items = list->items ? repalloc(list->items, sizeof(Datum) * list->cap)
			: palloc(sizeof(Datum) * list->cap);
	}
	list->items[list->n++] = d;
}

static void
tidy_add_tid(DatumList *list, const ItemPointerData *tid)
{
	tidy_add(list, PointerGetDatum(memcpy(palloc(sizeof(ItemPointerData)), tid,
										  sizeof(ItemPointerData))));
}

static ArrayType *
tid_array(const DatumList *list)
{
	return construct_array(list->items, list->n, TIDOID, sizeof(ItemPointerData), false,
						   TYPALIGN_SHORT);
}

/*
 * Delete what the walk found stale or dry, in one call, once the walk is
 * over.  Not in REPEATABLE READ or SERIALIZABLE: locking a row deleted
 * since the transaction's snapshot would fail there, and leaving a row is
 * always safe.
 */
static void
tidy(Tidy *t)
{
	static SPIPlanPtr plan = NULL;
	Datum		args[3];

	if ((t->stale.n == 0 && t->emptied.n == 0 && t->parked.n == 0) ||
		IsolationUsesXactSnapshot())
		return;
	if (plan == NULL)
	{
		Oid			types[3] = {TIDARRAYOID, INT8ARRAYOID, TIDARRAYOID};

		plan = frameq_prepare("SELECT frameq._dispatch_tidy($1, $2, $3)", 3, types);
	}
	args[0] = PointerGetDatum(tid_array(&t->stale));
	args[1] = PointerGetDatum(construct_array(t->emptied.items, t->emptied.n, INT8OID, 8,
											  FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
	args[2] = PointerGetDatum(tid_array(&t->parked));
	if (SPI_execute_plan(plan, args, NULL, false, 0) != SPI_OK_SELECT)
		elog(ERROR, "frameq: dispatch queue tidy failed");
	t->stale.n = t->emptied.n = t->parked.n = 0;
}

/*
 * Is a frame of this size over its job's or folder's cap, as the ledger
 * stands, and may its row leave the queue (ledger.c, "Parking")?  A read
 * of shared memory, so that a job at its cap costs the walk no layer
 * lookup and no charge attempt, and, once parked, nothing at all.  Only a
 * shortcut: the charge in book_frames decides.
 */
static CapState
job_caps_state(const JobCandidate *job, int32 min_cc, int32 gpus)
{
	LedgerItem	items[2];
	int			n = job_items(items, job);

	if (job->job_cap_cc < 0 && job->job_cap_gpus < 0 &&
		(!job->has_folder || (job->folder_cap_cc < 0 && job->folder_cap_gpus < 0)))
		return CAPS_FIT;
	return frameq_ledger_park(items, n, min_cc, gpus);
}

PG_FUNCTION_INFO_V1(frameq_parked_over_cap);

/*
 * frameq._parked_over_cap(job, job caps, folder, folder caps, min_cc,
 * gpus): may a parked row of this job leave the dispatch queue now
 * (_dispatch_tidy), or a layer of it have none (check())?
 */
Datum
frameq_parked_over_cap(PG_FUNCTION_ARGS)
{
	JobCandidate job = {0};
	LedgerItem	items[2];
	int			n;

	frameq_require_preload();
	for (int i = 0; i < 8; i++)
		if (i != 3 && PG_ARGISNULL(i))
			PG_RETURN_BOOL(false);
	job.id = PG_GETARG_INT64(0);
	job.job_cap_cc = PG_GETARG_INT32(1);
	job.job_cap_gpus = PG_GETARG_INT32(2);
	job.has_folder = !PG_ARGISNULL(3);
	job.folder = job.has_folder ? PG_GETARG_INT32(3) : 0;
	job.folder_cap_cc = PG_GETARG_INT32(4);
	job.folder_cap_gpus = PG_GETARG_INT32(5);
	n = job_items(items, &job);
	PG_RETURN_BOOL(frameq_ledger_still_parked(items, n, PG_GETARG_INT32(6), PG_GETARG_INT32(7)));
}

/*
 * Is this host blocked for the job (host_failure_limit, limits.c)?  Asked
 * only of a job whose row carries the host_blocks mark, once per job a
 * call meets: one key probe of frameq.job_host_failure.
 */
static bool
host_blocked(const ReserveState *st, int64 job)
{
	static SPIPlanPtr plan = NULL;
	Datum		args[2];
	bool		blocked;

	if (plan == NULL)
	{
		Oid			types[2] = {INT8OID, INT4OID};

		plan = frameq_prepare("SELECT 1 FROM frameq.job_host_failure"
							  " WHERE job = $1 AND host = $2 AND blocked_at IS NOT NULL",
							  2, types);
	}
	args[0] = Int64GetDatum(job);
	args[1] = Int32GetDatum(st->host.id);
	if (SPI_execute_plan(plan, args, NULL, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "frameq: host block lookup failed");
	blocked = SPI_processed > 0;
	SPI_freetuptable(SPI_tuptable);
	return blocked;
}

/*
 * A queue row of another size than its layer's stands for the tasks an
 * OOM retry raised to that size (dispatch.sql): book those, at it.  False
 * for a row below the layer's size, which no raised task can have.
 */
static bool
raise_layer(LayerCandidate *layer, int64 row_memory)
{
	if (row_memory == layer->memory)
		return true;
	if (row_memory < layer->memory)
		return false;
	layer->raised = true;
	layer->memory = row_memory;
	return true;
}

/*
 * Does the row still say what its layer is (dispatch.sql, _row_current)?
 * A row of old minimums or dispatch order still books, at the layer's
 * current values (the new row may not have been read yet); a row of a
 * paused layer, or of a tag the layer no longer has that the host lacks,
 * books nothing (passed).
 */
static bool
row_current(const QueueRow *r, const LayerCandidate *layer)
{
	return !layer->passed && r->min_cc == layer->min_cc && r->gpus == layer->gpus &&
		r->dispatch_order == layer->dispatch_order && r->memory >= layer->memory;
}

/*
 * Walk one show's candidate layers in policy order and book from each.
 * Rows of jobs that are not active or have another priority now are stale:
 * skipped and tidied.  A row over its job's or folder's cap is skipped and,
 * if the cap's entry could be parked, tidied; a job whose charge fails is
 * skipped; a show at its burst ends the walk.  The rows of a job this
 * host is blocked for are skipped and stay in the queue, for other hosts;
 * whether it is blocked is asked only of a job whose row says some host
 * may be, so for every other job it costs nothing.
 * *jobs_left (frameq.max_jobs_examined) counts only jobs that had a frame
 * to take: jobs with nothing waiting, that the host cannot run or that are
 * at a cap never count, so they can never stop a call that would book.  A
 * row whose layer turns out dry costs one probe and is deleted at the end
 * of the call (tidy), so each such layer is probed about once, not once
 * per call.
 */
static BookResult
book_show(ReserveState *st, const ShowCandidate *show, int *jobs_left, Tidy *tidying)
{
	Streams		streams;
	BookResult	result = SKIP_FRAME;
	JobCandidate job = {0};
	bool		have_job = false;
	bool		job_active = false;
	bool		job_counted = false;
	int32		job_priority = 0;
	int64		skip_job = 0;
	int64		unblocked_job = 0;	/* a marked job this host is not blocked for */
	QueueRow	prev = {0};
	QueueRow	r;

	open_streams(st, show, &streams);
	while (host_has_room(st) && *jobs_left > 0 && next_row(&streams, &r))
	{
		LayerCandidate layer;
		int			claimed;

		/* a layer asking for several of the host's tags comes once per tag */
		if (r.layer == prev.layer && r.priority == prev.priority && r.memory == prev.memory)
			continue;
		prev = r;
		if (r.job == skip_job)
			continue;
		if (!r.joined)
			row_job(st, &r);
		if (!r.fresh)
		{
			tidy_add_tid(&tidying->stale, &r.tid);
			continue;
		}
		/*
		 * Over its job's or folder's cap: skip the row, and take it out of
		 * the queue if the cap's entry could be parked.  The row carries
		 * the caps, so this costs no lookup.  Row by row, not job by job: a
		 * smaller layer of the job may still fit.
		 */
		switch (job_caps_state(&r.caps, r.min_cc, r.gpus))
		{
			case CAPS_FIT:
				break;
			case CAPS_PARKED:
				tidy_add_tid(&tidying->parked, &r.tid);
				continue;
			case CAPS_OVER:
				continue;
		}
		if (r.blocks && r.job != unblocked_job)
		{
			if (host_blocked(st, r.job))
			{
				skip_job = r.job;
				continue;
			}
			unblocked_job = r.job;
		}
		if (!have_job || job.id != r.job)
		{
			have_job = load_job(st, r.job, &job, &job_active, &job_priority);
			job_counted = false;
			if (!have_job)
				continue;
		}
		/* changed since the row was read: the next call sees it as it is */
		if (!job_active || job_priority != r.priority)
			continue;
		if (!load_layer(st, &job, r.layer, &layer))
			continue;
		claimed = st->claimed;
		/* set_layer changed the layer: its new rows are queued; tidy this one */
		st->emptied = !row_current(&r, &layer);
		if (layer.passed)
			result = SKIP_FRAME;
		else if (raise_layer(&layer, r.memory))
			result = book_layer(st, show, &job, &layer);
		else
			st->emptied = true; /* no task is raised to less than its layer */
		if (st->claimed > claimed && !job_counted)
		{
			job_counted = true;
			(*jobs_left)--;
		}
		if (st->emptied)
			tidy_add(&tidying->emptied, Int64GetDatum(layer.id));
		if (result == SKIP_SHOW)
			break;
		if (result == SKIP_JOB)
			skip_job = job.id;
		result = SKIP_FRAME;
	}
	close_streams(&streams);
	return result;
}

/*
 * A ledger rebuild (server start, ledger_reset) lost the parked marks, so
 * the layers whose rows were parked must be queued again: reserve() does
 * it before it walks, the worker in its next round, whoever comes first;
 * until one of them commits, nothing is parked (ledger.c, "Parking").
 * SPI connected; true if it queued.
 */
static bool
requeue_after_rebuild(void)
{
	static SPIPlanPtr plan = NULL;
	uint64		due = frameq_ledger_requeue_due();

	if (due == 0)
		return false;
	if (plan == NULL)
		plan = frameq_prepare("SELECT frameq._queue_waiting_layers()", 0, NULL);
	if (SPI_execute_plan(plan, NULL, NULL, false, 0) != SPI_OK_SELECT)
		elog(ERROR, "frameq: dispatch queue requeue failed");
	frameq_ledger_requeue_ran(due);
	return true;
}

PG_FUNCTION_INFO_V1(frameq_requeue_after_rebuild);

/* frameq._requeue_after_rebuild(): the worker's step, and check()'s; 1 if it queued */
Datum
frameq_requeue_after_rebuild(PG_FUNCTION_ARGS)
{
	bool		queued;

	frameq_require_preload();
	/* a standby, or check() in a read-only transaction: nothing to write */
	if (RecoveryInProgress() || XactReadOnly)
		PG_RETURN_INT64(0);
	frameq_ledger_ensure_valid();
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "frameq: SPI_connect failed");
	queued = requeue_after_rebuild();
	SPI_finish();
	PG_RETURN_INT64(queued ? 1 : 0);
}

PG_FUNCTION_INFO_V1(frameq_reserve);

Datum
frameq_reserve(PG_FUNCTION_ARGS)
{
	ReserveState st;
	text	   *name;
	text	   *token;
	ShowCandidate *shows;
	int			nshows;
	int			jobs_left = frameq_max_jobs_examined;
	Tidy		tidying = {0};

	frameq_require_preload();
	/* booking writes: on a standby say so, not "nothing to book" */
	PreventCommandIfReadOnly("frameq.reserve()");
	frameq_require_schema();
	if (PG_ARGISNULL(0))
		ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
						errmsg("host must not be null")));
	if (PG_ARGISNULL(1))
		ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
						errmsg("token must not be null")));
	if (PG_ARGISNULL(2))
		ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
						errmsg("epoch must not be null")));
	name = PG_GETARG_TEXT_PP(0);
	token = PG_GETARG_TEXT_PP(1);
	memset(&st, 0, sizeof(st));
	st.epoch = PG_GETARG_INT64(2);
	st.max_frames = PG_ARGISNULL(3) ? frameq_max_frames_per_reserve : PG_GETARG_INT32(3);
	if (st.max_frames < 1 || st.max_frames > 1000)
		ereport(ERROR,
				(errcode(st.max_frames > 1000 ? ERRCODE_PROGRAM_LIMIT_EXCEEDED :
						 ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("max_frames must be between 1 and 1000, not %d", st.max_frames)));

	InitMaterializedSRF(fcinfo, 0);
	st.rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	booking_check_natts(st.rsinfo->setDesc);
	st.secret_att = booking_text_att(st.rsinfo->setDesc, "run_secret");
	st.pattern_att = booking_text_att(st.rsinfo->setDesc, "progress_pattern");

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "frameq: SPI_connect failed");

	st.host.id = frameq_host_authenticate(name, token);

	/* someone is already booking this host: nothing to do, and no waiting */
	if (!frameq_lock_host(st.host.id, 0))
	{
		SPI_finish();
		return (Datum) 0;
	}

	frameq_host_load(st.host.id, &st.host);
	frameq_host_check_epoch(&st.host, frameq_clip_text(name), st.epoch);
	/* after a server start, every host first gets a lease period to report */
	if (!st.host.up || frameq_in_quarantine())
	{
		SPI_finish();
		return (Datum) 0;
	}

	frameq_ledger_ensure_valid();
	(void) requeue_after_rebuild();
	nshows = load_shows(&st, &shows);
	for (int i = 0; i < nshows && host_has_room(&st) && jobs_left > 0; i++)
	{
		if (shows[i].ratio < 0)
			continue;			/* at its burst */
		book_show(&st, &shows[i], &jobs_left, &tidying);
	}
	tidy(&tidying);

	SPI_finish();
	return (Datum) 0;
}
