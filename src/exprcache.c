/*-------------------------------------------------------------------------
 *
 * exprcache.c
 *	  The CHECK constraints, the row triggers' WHEN conditions and the
 *	  partial indexes' predicates of frameq's tables, read and planned
 *	  once per backend instead of once per statement.
 *
 * Why: PostgreSQL builds a table's CHECK constraints for every statement
 * that writes a row of it, from their stored text (ExecRelCheck:
 * stringToNode of pg_constraint.conbin, then expression_planner), and a
 * row trigger's WHEN condition likewise for every statement that fires it
 * (TriggerEnabled), and a partial index's predicate for every statement
 * that inserts an index entry (ExecInsertIndexTuples: expression_planner
 * and ExecInitQual of each predicate; the claim's frame update meets nine).
 * A booking writes four tables (frame, proc, run, host)
 * in four statements, and the claim fires the WHEN conditions of every
 * AFTER/BEFORE UPDATE OF state trigger on frame: reading and planning
 * those texts again was an eighth of reserve()'s CPU (doc/benchmarks.md,
 * "Booking overhead").  Every constraint is still checked on every row,
 * by the same expression: only the reading and the planning are kept.
 *
 * How: an ExecutorStart hook, once the executor has opened a statement's
 * result relations, gives each result relation that is a table of the
 * frameq schema its constraints', WHEN conditions' and opened partial
 * indexes' predicates' expression states,
 * built (ExecInitExpr, ExecInitQual) from planned trees kept here; the
 * executor then finds them built and skips its own building.  The state
 * of a tree made of plain nodes and PostgreSQL's own functions is built
 * once and kept with the tree, for statement after statement (building
 * and first-run checking them was 0.1 million instructions a booking);
 * any other is built in the statement's memory, as PostgreSQL would
 * (shareable, below).  A kept tree is used only for
 * the very text it was made from: each entry keeps the constraint's
 * conbin and the trigger's tgqual and id as the relation cache has them
 * now, and a mismatch rebuilds the entry; a predicate is kept by its
 * index's OID (no command changes an index's predicate, and dropping the
 * index invalidates its table).  Any invalidation of a cached
 * table's or index's relation cache entry, or of any function (planning may inline
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
#include "access/transam.h"
#include "nodes/makefuncs.h"
#include "nodes/nodeFuncs.h"
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
	/* the relation cache's structures last matched (see entry_matches) */
	const TupleConstr *constr_seen;
	const TriggerDesc *trig_seen;
	int			ncheck;
	char	  **ccbin;			/* the texts the trees were made from */
	Expr	  **checks;			/* planned, in the relation cache's order */
	int			ntrig;
	Oid		   *tgoid;
	char	  **tgqual;			/* NULL: no WHEN condition */
	List	  **whens;			/* planned, implicit-AND, as TriggerEnabled */
	/* which may share one expression state (shareable), and it once built */
	bool	   *check_shared;
	bool	   *when_shared;
	ExprState **check_states;
	ExprState **when_states;
} CachedRel;

/* one partial index's planned predicate, of an index of a frameq table */
typedef struct CachedPred
{
	Oid			indexoid;		/* hash key */
	List	   *pred;			/* planned, implicit-AND, as ExecPrepareQual */
	bool		shared;
	ExprState  *state;			/* once built, if shared */
} CachedPred;

static ExecutorStart_hook_type prev_ExecutorStart = NULL;
static MemoryContext cache_cxt = NULL;
static HTAB *cache = NULL;
static HTAB *pred_cache = NULL;
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
	else if (hash_search(pred_cache, &relid, HASH_FIND, NULL) != NULL)
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
	ctl.entrysize = sizeof(CachedPred);
	pred_cache = hash_create("frameq index predicate cache", 32, &ctl,
							 HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	cache_stale = false;
	return cache;
}

/*
 * Does the entry hold the planned trees of exactly the relation's texts?
 * The same relation cache structures as at the last match hold the same
 * texts: the relation cache replaces them only on an invalidation of the
 * relation, which drops this cache first (note_relcache_inval).
 */
static bool
entry_matches(CachedRel *e, const TupleConstr *constr, const TriggerDesc *trig)
{
	int			ncheck = constr ? constr->num_check : 0;
	int			ntrig = trig ? trig->numtriggers : 0;

	if (e->ncheck != ncheck || e->ntrig != ntrig)
		return false;
	if (e->constr_seen == constr && e->trig_seen == trig)
		return true;
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
	e->constr_seen = constr;
	e->trig_seen = trig;
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

/* a function that is PostgreSQL's own: it runs no statement of ours */
static bool
not_builtin(Oid func, void *context)
{
	return func >= FirstGenbkiObjectId;
}

/*
 * May one expression state of this tree serve statement after statement?
 * Only if evaluating it keeps nothing in the statement's memory and can
 * never evaluate it again before it is done: it is made of the plain
 * nodes below only (no domain check, row-type test, subquery, parameter
 * or whole-row reference: some of those keep state in the statement's
 * memory, as the row descriptor a whole row's first evaluation makes, and
 * a domain check may call any function), and calls only PostgreSQL's own
 * functions (a user's or an extension's might run a statement that writes
 * the same table).  frameq's own CHECK constraints, WHEN conditions and
 * index predicates all are.
 */
static bool
shareable_walker(Node *node, void *context)
{
	if (node == NULL)
		return false;
	switch (nodeTag(node))
	{
		case T_Var:
			/* a whole row: its first evaluation keeps the row's descriptor */
			if (((Var *) node)->varattno == InvalidAttrNumber)
				return true;
			break;
		case T_Const:
		case T_FuncExpr:
		case T_OpExpr:
		case T_DistinctExpr:
		case T_NullIfExpr:
		case T_BoolExpr:
		case T_RelabelType:
		case T_CoerceViaIO:
		case T_CaseExpr:
		case T_CaseWhen:
		case T_CaseTestExpr:
		case T_BooleanTest:
		case T_MinMaxExpr:
		case T_CoalesceExpr:
		case T_ArrayExpr:
		case T_List:
			break;
		case T_ScalarArrayOpExpr:
			if (OidIsValid(((ScalarArrayOpExpr *) node)->hashfuncid))
				return true;
			break;
		case T_NullTest:
			if (((NullTest *) node)->argisrow)
				return true;
			break;
		default:
			return true;
	}
	if (check_functions_in_node(node, not_builtin, NULL))
		return true;
	return expression_tree_walker(node, shareable_walker, context);
}

static bool
shareable(Node *tree)
{
	return !shareable_walker(tree, NULL);
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
	e->check_shared = palloc0(sizeof(bool) * Max(ncheck, 1));
	e->when_shared = palloc0(sizeof(bool) * Max(ntrig, 1));
	e->check_states = palloc0(sizeof(ExprState *) * Max(ncheck, 1));
	e->when_states = palloc0(sizeof(ExprState *) * Max(ntrig, 1));
	for (int i = 0; i < ncheck; i++)
		e->check_shared[i] = shareable((Node *) checks[i]);
	for (int i = 0; i < ntrig; i++)
		e->when_shared[i] = whens[i] != NIL && shareable((Node *) whens[i]);
	MemoryContextSwitchTo(old);
	e->ccbin = ccbin;
	e->checks = checks;
	e->tgoid = tgoid;
	e->tgqual = tgqual;
	e->whens = whens;
	e->constr_seen = constr;
	e->trig_seen = trig;
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
		e->constr_seen = NULL;
		e->trig_seen = NULL;
	}
	if (!e->ours)
		return NULL;
	/* the executor's ri_TrigDesc is a copy of it made for each statement */
	if (!entry_matches(e, constr, rel->trigdesc))
		build_entry(e, constr, rel->trigdesc);
	/* an invalidation while building: the entry may be of the old texts */
	if (cache_stale)
		return NULL;
	return e;
}

/*
 * The state of a kept tree: built once into the cache's memory if it may
 * be shared, else in the statement's memory as PostgreSQL would.  A
 * shared state is a read-only program with scratch space that each
 * evaluation starts afresh, as plpgsql keeps those of its simple
 * expressions; it goes with the tree it was made from.
 */
static ExprState *
kept_state(ExprState **kept, bool shared, Node *tree, bool qual, MemoryContext query_cxt)
{
	MemoryContext old;
	ExprState  *state;

	if (*kept != NULL)
		return *kept;
	old = MemoryContextSwitchTo(shared ? cache_cxt : query_cxt);
	state = qual ? ExecInitQual((List *) tree, NULL) : ExecInitExpr((Expr *) tree, NULL);
	MemoryContextSwitchTo(old);
	if (shared)
		*kept = state;
	return state;
}

/*
 * Open the indexes of a table an INSERT or UPDATE writes, as PostgreSQL
 * opens them at the first row (ExecOpenIndices, speculative for an INSERT
 * ... ON CONFLICT), and give its partial indexes their predicates'
 * states, as ExecInsertIndexTuples would build them (ExecPrepareQual),
 * from trees planned once per index.  Only for a table entry_for found
 * frameq's.
 */
static void
prime_indexes(EState *estate, ResultRelInfo *ri, bool speculative)
{
	if (!ri->ri_RelationDesc->rd_rel->relhasindex)
		return;
	if (ri->ri_IndexRelationDescs == NULL)
		ExecOpenIndices(ri, speculative);
	for (int i = 0; i < ri->ri_NumIndices; i++)
	{
		IndexInfo  *ii = ri->ri_IndexRelationInfo[i];
		Oid			indexoid = RelationGetRelid(ri->ri_IndexRelationDescs[i]);
		CachedPred *p;
		bool		found;

		if (ii->ii_Predicate == NIL || ii->ii_PredicateState != NULL)
			continue;
		p = hash_search(pred_cache, &indexoid, HASH_ENTER, &found);
		if (!found)
		{
			MemoryContext old = MemoryContextSwitchTo(cache_cxt);

			p->pred = NIL;		/* matches nothing until planned */
			p->state = NULL;
			p->shared = false;
			p->pred = (List *) expression_planner((Expr *) copyObject(ii->ii_Predicate));
			p->shared = shareable((Node *) p->pred);
			MemoryContextSwitchTo(old);
		}
		/* an invalidation while planning: the tree may be of an old index */
		if (cache_stale || p->pred == NIL)
			return;
		ii->ii_PredicateState = kept_state(&p->state, p->shared, (Node *) p->pred, true,
										   estate->es_query_cxt);
	}
}

/* prime_indexes for each frameq table a ModifyTable node inserts or updates */
static bool
prime_modify_tables(PlanState *ps, void *context)
{
	if (ps == NULL)
		return false;
	if (IsA(ps, ModifyTableState))
	{
		ModifyTableState *mt = (ModifyTableState *) ps;
		ModifyTable *plan = (ModifyTable *) ps->plan;

		if (mt->operation == CMD_INSERT || mt->operation == CMD_UPDATE)
		{
			for (int i = 0; i < mt->mt_nrels && !cache_stale; i++)
				if (entry_for(&mt->resultRelInfo[i]) != NULL)
					prime_indexes(ps->state, &mt->resultRelInfo[i],
								  plan->onConflictAction != ONCONFLICT_NONE);
		}
	}
	return planstate_tree_walker(ps, prime_modify_tables, context);
}

/*
 * Give the relation the expression states the executor would build: the
 * kept ones, or ones built in the statement's memory from the cached trees
 * (which stay until the transaction ends even if the cache is dropped
 * meanwhile: retired).  Returns whether the relation is frameq's.
 */
static bool
prime_result_rel(EState *estate, ResultRelInfo *ri)
{
	CachedRel  *e = entry_for(ri);

	if (e == NULL)
		return false;
	if (ri->ri_ConstraintExprs == NULL && e->ncheck > 0)
	{
		ExprState **states = MemoryContextAlloc(estate->es_query_cxt,
												sizeof(ExprState *) * e->ncheck);

		for (int i = 0; i < e->ncheck; i++)
			states[i] = kept_state(&e->check_states[i], e->check_shared[i],
								   (Node *) e->checks[i], false, estate->es_query_cxt);
		ri->ri_ConstraintExprs = states;
	}
	if (ri->ri_TrigWhenExprs != NULL)
	{
		for (int i = 0; i < e->ntrig; i++)
			if (e->whens[i] != NIL && ri->ri_TrigWhenExprs[i] == NULL)
				ri->ri_TrigWhenExprs[i] = kept_state(&e->when_states[i], e->when_shared[i],
													 (Node *) e->whens[i], true,
													 estate->es_query_cxt);
	}
	return true;
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
		bool		ours = false;

		foreach(lc, queryDesc->estate->es_opened_result_relations)
			ours |= prime_result_rel(queryDesc->estate, (ResultRelInfo *) lfirst(lc));
		/* another application's statement is not walked */
		if (ours)
		{
			prime_modify_tables(queryDesc->planstate, NULL);
			foreach(lc, queryDesc->estate->es_subplanstates)
				prime_modify_tables((PlanState *) lfirst(lc), NULL);
		}
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
