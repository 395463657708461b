/*-------------------------------------------------------------------------
 *
 * util.c
 *	  Small helpers: random run tokens and host tokens, kept SPI plans,
 *	  centicore conversion and typed access to SPI result columns.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"
#include "nodes/parsenodes.h"
#include "utils/builtins.h"
#include "utils/numeric.h"

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
