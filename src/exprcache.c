/*-------------------------------------------------------------------------
 *
 * exprcache.c
 *	  The CHECK constraints and the row triggers' WHEN conditions of
 *	  frameq's tables, read and planned once per backend instead of once
 *	  per statement.
 *
 * Why: PostgreSQL builds a table's CHECK constraints for every statement
 * that writes a row of it, from their stored text (ExecRelCheck:
 * stringToNode of pg_constraint.conbin, then expression_planner), and a
 * row trigger's WHEN condition likewise for every statement that fires it
 * (TriggerEnabled).  A booking writes four tables (frame, proc, run, host)
 * in four statements, and the claim fires the WHEN conditions of every
 * AFTER/BEFORE UPDATE OF state trigger on frame: reading and planning
 * those texts again was an eighth of reserve()'s CPU (doc/benchmarks.md,
 * "Booking overhead").  Every constraint is still checked on every row,
 * by the same expression: only the reading and the planning are kept.
 *
 * How: an ExecutorStart hook, once the executor has opened a statement's
 * result relations, gives each result relation that is a table of the
 * frameq schema its constraints' and WHEN conditions' expression states,
 * built (ExecInitExpr, ExecInitQual, in the statement's memory, as
 * PostgreSQL would) from planned trees kept here; the executor then finds
 * them built and skips its own building.  A kept tree is used only for
 * the very text it was made from: each entry keeps the constraint's
 * conbin and the trigger's tgqual and id as the relation cache has them
 * now, and a mismatch rebuilds the entry.  Any invalidation of a cached
 * table's relation cache entry, or of any function (planning may inline
 * or fold one), drops the whole cache at the next statement; an
 * invalidation is only noted when it arrives, since it can arrive while
 * an entry is being built.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/namespace.h"
#include "commands/trigger.h"
#include "executor/executor.h"
#include "nodes/makefuncs.h"
#include "optimizer/optimizer.h"
#include "rewrite/prs2lock.h"
#include "rewrite/rewriteManip.h"
#include "utils/hsearch.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/syscache.h"

#include "frameq.h"

/* one table's planned constraints and WHEN conditions */
typedef struct CachedRel
{
	Oid			relid;			/* hash key */
	bool		ours;			/* a table of the frameq schema */
	int			ncheck;
	char	  **ccbin;			/* the texts the trees were made from */
	Expr	  **checks;			/* planned, in the relation cache's order */
	int			ntrig;
	Oid		   *tgoid;
	char	  **tgqual;			/* NULL: no WHEN condition */
	List	  **whens;			/* planned, implicit-AND, as TriggerEnabled */
} CachedRel;

static ExecutorStart_hook_type prev_ExecutorStart = NULL;
static MemoryContext cache_cxt = NULL;
static HTAB *cache = NULL;
static bool cache_stale = false;

/*
 * The memory of caches dropped in this transaction: the expression states
 * of statements still running may point into their trees (constants, the
 * function calls' expressions), and no statement outlives its transaction.
 */
static List *retired = NIL;

static void
note_relcache_inval(Datum arg, Oid relid)
{
	CachedRel  *e;

	if (cache == NULL || cache_stale)
		return;
	if (!OidIsValid(relid))
		cache_stale = true;
	else if ((e = hash_search(cache, &relid, HASH_FIND, NULL)) != NULL && e->ours)
		cache_stale = true;
}

static void
note_proc_inval(Datum arg, int cacheid, uint32 hashvalue)
{
	cache_stale = true;
}

static void
free_retired(XactEvent event, void *arg)
{
	ListCell   *lc;

	if (event != XACT_EVENT_COMMIT && event != XACT_EVENT_ABORT &&
		event != XACT_EVENT_PARALLEL_COMMIT && event != XACT_EVENT_PARALLEL_ABORT &&
		event != XACT_EVENT_PREPARE)
		return;
	foreach(lc, retired)
		MemoryContextDelete((MemoryContext) lfirst(lc));
	list_free(retired);
	retired = NIL;
}

/* the cache, empty if anything it held may have changed */
static HTAB *
the_cache(void)
{
	HASHCTL		ctl;

	if (cache != NULL && !cache_stale)
		return cache;
	if (cache_cxt != NULL)
	{
		MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);

		retired = lappend(retired, cache_cxt);
		MemoryContextSwitchTo(old);
	}
	cache_cxt = AllocSetContextCreate(CacheMemoryContext, "frameq expression cache",
									  ALLOCSET_DEFAULT_SIZES);
	ctl.keysize = sizeof(Oid);
	ctl.entrysize = sizeof(CachedRel);
	ctl.hcxt = cache_cxt;
	cache = hash_create("frameq expression cache", 32, &ctl,
						HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	cache_stale = false;
	return cache;
}

/* does the entry hold the planned trees of exactly the relation's texts? */
static bool
entry_matches(const CachedRel *e, const TupleConstr *constr, const TriggerDesc *trig)
{
	int			ncheck = constr ? constr->num_check : 0;
	int			ntrig = trig ? trig->numtriggers : 0;

	if (e->ncheck != ncheck || e->ntrig != ntrig)
		return false;
	for (int i = 0; i < ncheck; i++)
		if (strcmp(e->ccbin[i], constr->check[i].ccbin) != 0)
			return false;
	for (int i = 0; i < ntrig; i++)
	{
		const Trigger *t = &trig->triggers[i];

		if (e->tgoid[i] != t->tgoid || (e->tgqual[i] == NULL) != (t->tgqual == NULL) ||
			(t->tgqual != NULL && strcmp(e->tgqual[i], t->tgqual) != 0))
			return false;
	}
	return true;
}

/* a trigger's WHEN condition as TriggerEnabled plans it */
static List *
plan_when(const char *tgqual)
{
	Node	   *qual = stringToNode(tgqual);

	ChangeVarNodes(qual, PRS2_OLD_VARNO, INNER_VAR, 0);
	ChangeVarNodes(qual, PRS2_NEW_VARNO, OUTER_VAR, 0);
	qual = (Node *) make_ands_implicit((Expr *) qual);
	return (List *) expression_planner((Expr *) qual);
}

/*
 * (Re)build the entry from the relation's constraints and triggers.  The
 * entry matches nothing until it is whole: an error while planning leaves
 * it to be built again.
 */
static void
build_entry(CachedRel *e, const TupleConstr *constr, const TriggerDesc *trig)
{
	MemoryContext old = MemoryContextSwitchTo(cache_cxt);
	int			ncheck = constr ? constr->num_check : 0;
	int			ntrig = trig ? trig->numtriggers : 0;
	char	  **ccbin = palloc0(sizeof(char *) * Max(ncheck, 1));
	Expr	  **checks = palloc0(sizeof(Expr *) * Max(ncheck, 1));
	Oid		   *tgoid = palloc0(sizeof(Oid) * Max(ntrig, 1));
	char	  **tgqual = palloc0(sizeof(char *) * Max(ntrig, 1));
	List	  **whens = palloc0(sizeof(List *) * Max(ntrig, 1));

	e->ncheck = e->ntrig = -1;
	for (int i = 0; i < ncheck; i++)
	{
		ccbin[i] = pstrdup(constr->check[i].ccbin);
		checks[i] = expression_planner(stringToNode(ccbin[i]));
	}
	for (int i = 0; i < ntrig; i++)
	{
		const Trigger *t = &trig->triggers[i];

		tgoid[i] = t->tgoid;
		if (t->tgqual != NULL)
		{
			tgqual[i] = pstrdup(t->tgqual);
			whens[i] = plan_when(tgqual[i]);
		}
	}
	MemoryContextSwitchTo(old);
	e->ccbin = ccbin;
	e->checks = checks;
	e->tgoid = tgoid;
	e->tgqual = tgqual;
	e->whens = whens;
	e->ncheck = ncheck;
	e->ntrig = ntrig;
}

/*
 * The entry for a result relation, built if needed; NULL for a relation
 * that is not frameq's, or when an invalidation came in while building.
 */
static CachedRel *
entry_for(ResultRelInfo *ri)
{
	Relation	rel = ri->ri_RelationDesc;
	Oid			relid = RelationGetRelid(rel);
	TupleConstr *constr = rel->rd_att->constr;
	CachedRel  *e;
	bool		found;

	e = hash_search(the_cache(), &relid, HASH_ENTER, &found);
	if (!found)
	{
		const char *nsp = get_namespace_name(RelationGetNamespace(rel));

		e->ours = rel->rd_rel->relkind == RELKIND_RELATION && nsp != NULL &&
			strcmp(nsp, "frameq") == 0;
		e->ncheck = e->ntrig = -1;
	}
	if (!e->ours)
		return NULL;
	if (!entry_matches(e, constr, ri->ri_TrigDesc))
		build_entry(e, constr, ri->ri_TrigDesc);
	/* an invalidation while building: the entry may be of the old texts */
	if (cache_stale)
		return NULL;
	return e;
}

/*
 * Give the relation the expression states the executor would build, in
 * the statement's memory, from the cached trees (which stay until the
 * transaction ends even if the cache is dropped meanwhile: retired).
 */
static void
prime_result_rel(EState *estate, ResultRelInfo *ri)
{
	CachedRel  *e = entry_for(ri);
	MemoryContext old;

	if (e == NULL)
		return;
	old = MemoryContextSwitchTo(estate->es_query_cxt);
	if (ri->ri_ConstraintExprs == NULL && e->ncheck > 0)
	{
		ExprState **states = palloc(sizeof(ExprState *) * e->ncheck);

		for (int i = 0; i < e->ncheck; i++)
			states[i] = ExecInitExpr(e->checks[i], NULL);
		ri->ri_ConstraintExprs = states;
	}
	if (ri->ri_TrigWhenExprs != NULL)
	{
		for (int i = 0; i < e->ntrig; i++)
			if (e->whens[i] != NIL && ri->ri_TrigWhenExprs[i] == NULL)
				ri->ri_TrigWhenExprs[i] = ExecInitQual(e->whens[i], NULL);
	}
	MemoryContextSwitchTo(old);
}

/*
 * Planning a constraint may run a function, and so a statement: its own
 * hook does nothing while one is priming (busy), which leaves that
 * statement to the executor's own building.
 */
static void
frameq_ExecutorStart(QueryDesc *queryDesc, int eflags)
{
	static bool busy = false;
	ListCell   *lc;

	if (prev_ExecutorStart)
		prev_ExecutorStart(queryDesc, eflags);
	else
		standard_ExecutorStart(queryDesc, eflags);
	if ((eflags & EXEC_FLAG_EXPLAIN_ONLY) || busy ||
		queryDesc->estate->es_opened_result_relations == NIL)
		return;
	busy = true;
	PG_TRY();
	{
		foreach(lc, queryDesc->estate->es_opened_result_relations)
			prime_result_rel(queryDesc->estate, (ResultRelInfo *) lfirst(lc));
	}
	PG_FINALLY();
	{
		busy = false;
	}
	PG_END_TRY();
}

void
frameq_exprcache_init(void)
{
	prev_ExecutorStart = ExecutorStart_hook;
	ExecutorStart_hook = frameq_ExecutorStart;
	CacheRegisterRelcacheCallback(note_relcache_inval, (Datum) 0);
	CacheRegisterSyscacheCallback(PROCOID, note_proc_inval, (Datum) 0);
	RegisterXactCallback(free_retired, NULL);
}
