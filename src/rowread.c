/*-------------------------------------------------------------------------
 *
 * rowread.c
 *	  Reading rows of frameq's tables below the executor.
 *
 * The booking path's lookups (a host by name or id, its allocation's
 * subscriptions, the dispatch queue's stream heads, a job and its folder,
 * a layer and its limits, the run secret key) are each a key probe of a
 * few rows.  Through SPI each costs an executor
 * start and end and a plan cache check, some 50,000 instructions, several
 * times the read itself (doc/benchmarks.md, "Booking's own cost").  Here
 * such a read is what the executor's index scan would do, without the
 * executor:
 *
 *	- the table and its index are opened with AccessShareLock, held to the
 *	  end of the transaction, as a statement would, by the OIDs kept per
 *	  backend while they still name frameq.<name>, else found by name
 *	  again (open_frameq_rel);
 *	- the rows are those a statement run through SPI in its place would
 *	  see: the calling statement's snapshot for a read-only statement, a
 *	  new one for a read the caller calls fresh (push_snapshot);
 *	- the columns are found by name and checked for their type, and the
 *	  attribute numbers kept per backend; every read checks that each kept
 *	  number still holds that column (an upgrade may drop or add columns),
 *	  and finds it again if not; a column missing, or of another type, is
 *	  an error that says to update the extension;
 *	- the key columns are compared by the equality function of their type,
 *	  under the index's collation (the executor's scan keys do the same);
 *	  a table read without an index tests them on each row.
 *
 * None of these reads locks rows: each replaces a plain SELECT.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/detoast.h"
#include "access/genam.h"
#include "access/relation.h"
#include "access/relscan.h"
#include "access/stratnum.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_class.h"
#include "catalog/pg_collation.h"
#include "catalog/pg_type.h"
#include "executor/tuptable.h"
#include "storage/lmgr.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"

#include "frameq.h"

/* the relation of this name in schema frameq, or an error naming it */
static Oid
frameq_relid(const char *name)
{
	Oid			nsp = get_namespace_oid("frameq", false);
	Oid			relid = get_relname_relid(name, nsp);

	if (!OidIsValid(relid))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("relation frameq.%s does not exist", name),
				 errhint("Run ALTER EXTENSION frameq UPDATE.")));
	return relid;
}

/*
 * Open frameq.<name> (a table, or an index), locked as a statement would
 * lock it.  The relation's OID is kept per backend (*relid) and used only
 * while it still names that relation: once opened and locked, it must be
 * a relation of that name and kind in schema frameq, else it is looked up
 * by name again (the extension dropped and created again, or upgraded).
 */
static Relation
open_frameq_rel(const char *name, Oid *relid, char relkind)
{
	Relation	rel;

	if (OidIsValid(*relid))
	{
		rel = try_relation_open(*relid, AccessShareLock);
		if (rel != NULL && rel->rd_rel->relkind == relkind &&
			strcmp(RelationGetRelationName(rel), name) == 0 &&
			RelationGetNamespace(rel) == get_namespace_oid("frameq", true))
			return rel;
		if (rel != NULL)
			relation_close(rel, AccessShareLock);
	}
	*relid = frameq_relid(name);
	rel = relation_open(*relid, AccessShareLock);
	if (rel->rd_rel->relkind != relkind)
		elog(ERROR, "frameq: frameq.%s is not a %s", name,
			 relkind == RELKIND_INDEX ? "index" : "table");
	return rel;
}

/* find (again) where each of the table's columns is, checking its type */
static void
check_columns(FrameqTable *t, TupleDesc desc)
{
	for (int i = 0; i < t->ncols; i++)
	{
		AttrNumber	a = t->attnums[i];
		Form_pg_attribute att;

		if (a > 0 && a <= desc->natts)
		{
			att = TupleDescAttr(desc, a - 1);
			if (!att->attisdropped && att->atttypid == t->cols[i].type &&
				strcmp(NameStr(att->attname), t->cols[i].name) == 0)
				continue;
		}
		t->attnums[i] = InvalidAttrNumber;
		for (int k = 0; k < desc->natts; k++)
		{
			att = TupleDescAttr(desc, k);
			if (!att->attisdropped && strcmp(NameStr(att->attname), t->cols[i].name) == 0 &&
				att->atttypid == t->cols[i].type)
				t->attnums[i] = att->attnum;
		}
		if (t->attnums[i] == InvalidAttrNumber)
			ereport(ERROR,
					(errcode(ERRCODE_UNDEFINED_COLUMN),
					 errmsg("frameq.%s has no column %s of type %s",
							t->relname, t->cols[i].name, format_type_be(t->cols[i].type)),
					 errhint("Run ALTER EXTENSION frameq UPDATE.")));
	}
}

/*
 * Push the snapshot a read sees, as SPI would give its statement: for a
 * read-only one the calling statement's (the active snapshot); for a
 * fresh one a new snapshot after the transaction's own earlier commands,
 * as a statement of its own takes it in READ COMMITTED (in REPEATABLE READ
 * and SERIALIZABLE the transaction's, with those commands).
 */
static void
push_snapshot(bool fresh)
{
	if (!fresh && ActiveSnapshotSet())
	{
		PushActiveSnapshot(GetActiveSnapshot());
		return;
	}
	CommandCounterIncrement();
	PushActiveSnapshot(GetTransactionSnapshot());
	UpdateActiveSnapshotCommandId();
}

/*
 * Start reading the rows of t whose key columns (keycols, positions in
 * t->cols) equal the keys, under the calling statement's snapshot, or a
 * fresh one (push_snapshot): through t's index if it has one (the key
 * columns must be its leading columns, in order), else through the whole
 * table.
 */
void
frameq_read_begin(FrameqRead *r, FrameqTable *t, bool fresh, int nkeys,
				  const int *keycols, const Datum *keys)
{
	TupleDesc	desc;
	ScanKeyData skeys[FRAMEQ_READ_MAX_KEYS];
	Snapshot	snap;

	Assert(nkeys <= FRAMEQ_READ_MAX_KEYS);
	memset(r, 0, sizeof(*r));
	r->table = t;
	push_snapshot(fresh);
	snap = GetActiveSnapshot();
	r->rel = open_frameq_rel(t->relname, &t->relid, RELKIND_RELATION);
	desc = RelationGetDescr(r->rel);
	check_columns(t, desc);
	r->slot = table_slot_create(r->rel, NULL);

	if (t->indexname == NULL)
	{
		for (int k = 0; k < nkeys; k++)
		{
			const FrameqColumn *c = &t->cols[keycols[k]];

			ScanKeyEntryInitialize(&skeys[k], 0, t->attnums[keycols[k]],
								   BTEqualStrategyNumber, InvalidOid,
								   c->type == TEXTOID ? DEFAULT_COLLATION_OID : InvalidOid,
								   c->eqproc, keys[k]);
		}
		r->hscan = table_beginscan(r->rel, snap, nkeys, skeys);
		return;
	}

	r->index = open_frameq_rel(t->indexname, &t->indexid, RELKIND_INDEX);
	if (r->index->rd_index->indrelid != RelationGetRelid(r->rel) ||
		r->index->rd_index->indnkeyatts < nkeys)
		elog(ERROR, "frameq: index frameq.%s is not the one expected on frameq.%s",
			 t->indexname, t->relname);
	for (int k = 0; k < nkeys; k++)
	{
		const FrameqColumn *c = &t->cols[keycols[k]];

		if (r->index->rd_index->indkey.values[k] != t->attnums[keycols[k]])
			elog(ERROR, "frameq: column %d of index frameq.%s is not %s",
				 k + 1, t->indexname, c->name);
		ScanKeyEntryInitialize(&skeys[k], 0, k + 1, BTEqualStrategyNumber, InvalidOid,
							   r->index->rd_indcollation[k], c->eqproc, keys[k]);
	}
	r->iscan = index_beginscan(r->rel, r->index, snap, nkeys, 0);
	index_rescan(r->iscan, skeys, nkeys, NULL, 0);
}

/*
 * The next row: values[i] and nulls[i] for t->cols[i].  By-reference
 * values point into the row, valid until the next call or the end:
 * copy what is kept.  False when there are no more.
 */
bool
frameq_read_next(FrameqRead *r, Datum *values, bool *nulls)
{
	bool		found;

	if (r->iscan)
		found = index_getnext_slot(r->iscan, ForwardScanDirection, r->slot);
	else
		found = table_scan_getnextslot(r->hscan, ForwardScanDirection, r->slot);
	if (!found)
		return false;
	for (int i = 0; i < r->table->ncols; i++)
		values[i] = slot_getattr(r->slot, r->table->attnums[i], &nulls[i]);
	return true;
}

/* where the row last returned is */
ItemPointerData
frameq_read_tid(FrameqRead *r)
{
	return r->slot->tts_tid;
}

/* end the read; the locks stay until the transaction ends, as a statement's */
void
frameq_read_end(FrameqRead *r)
{
	if (r->iscan)
		index_endscan(r->iscan);
	if (r->hscan)
		table_endscan(r->hscan);
	ExecDropSingleTupleTableSlot(r->slot);
	if (r->index)
		index_close(r->index, NoLock);
	table_close(r->rel, NoLock);
	PopActiveSnapshot();
}

/* does a text value read say exactly s? */
bool
frameq_text_is(Datum value, const char *s)
{
	text	   *t = DatumGetTextPP(value);
	size_t		len = strlen(s);

	return VARSIZE_ANY_EXHDR(t) == len && memcmp(VARDATA_ANY(t), s, len) == 0;
}

/* a by-reference value read, whole (detoasted) and copied into the current memory context */
Datum
frameq_read_copy(Datum value)
{
	return PointerGetDatum(PG_DETOAST_DATUM_COPY(value));
}
