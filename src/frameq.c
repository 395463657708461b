/*-------------------------------------------------------------------------
 *
 * frameq.c
 *	  Module entry point: _PG_init calls each module's init, and the check
 *	  that the library was loaded through shared_preload_libraries.
 *
 * frameq keeps its caps ledger in shared memory, which only a library
 * loaded at server start can reserve; every SQL entry point calls
 * frameq_require_preload() first so that a missing preload is reported as
 * such, not as a confusing failure further down.
 *
 * The ledger is one per server, so frameq serves one database per server:
 * the one named by frameq.database (where its background worker runs, as
 * pg_cron does).  Using it from any other database is refused, or two
 * databases' jobs would share counters.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/namespace.h"
#include "commands/dbcommands.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "utils/lsyscache.h"

#include "frameq.h"

PG_MODULE_MAGIC;

bool		frameq_loaded_at_startup = false;

void		_PG_init(void);

void
_PG_init(void)
{
	if (!process_shared_preload_libraries_in_progress)
		return;

	frameq_loaded_at_startup = true;
	frameq_guc_init();
	frameq_ledger_init();
	frameq_dispatch_init();
	frameq_worker_init();
	frameq_exprcache_init();
}

void
frameq_require_preload(void)
{
	/* the database this backend has already been found to be frameq's */
	static Oid	checked_database = InvalidOid;

	if (!frameq_loaded_at_startup)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("frameq must be loaded via shared_preload_libraries"),
				 errhint("Add frameq to shared_preload_libraries in postgresql.conf and restart the server.")));

	if (checked_database != MyDatabaseId)
	{
		char	   *name = get_database_name(MyDatabaseId);

		if (name == NULL || strcmp(name, frameq_database) != 0)
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("frameq can only be used in database \"%s\"", frameq_database),
					 errdetail("This is database \"%s\"; frameq's caps ledger is shared by the whole server.",
							   name ? name : "?"),
					 errhint("Set frameq.database to the database that should run frameq and restart the server.")));
		checked_database = MyDatabaseId;
	}
}

/*
 * Is this database's frameq schema the one this library was built for?
 * After a new library is installed and the server restarted, the schema
 * stays as it was until ALTER EXTENSION frameq UPDATE, and the library
 * must not run against it: a 0.1.0 schema takes the host lock the old way
 * (a SQL advisory lock), so booking and lease expiry with the new
 * library's lock would not exclude each other; a 0.2.0 schema lacks the
 * SQL half of parking (reserve() would fail on a missing function).  The
 * newest upgrade step that changes what the library calls creates
 * FRAMEQ_SCHEMA_MARKER (a later step that changes nothing it calls keeps
 * the marker); two catalog cache lookups tell whether it ran.
 */
bool
frameq_schema_current(void)
{
	Oid			nsp = get_namespace_oid("frameq", true);

	return OidIsValid(nsp) && OidIsValid(get_relname_relid(FRAMEQ_SCHEMA_MARKER, nsp));
}

/* entry points that need the current schema: say plainly what to do */
void
frameq_require_schema(void)
{
	if (!frameq_schema_current())
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("the frameq extension in this database is older than its library"),
				 errdetail("The library is frameq %s.", FRAMEQ_LIBRARY_VERSION),
				 errhint("Run ALTER EXTENSION frameq UPDATE in this database.")));
}

PG_FUNCTION_INFO_V1(frameq_assert_preloaded);

Datum
frameq_assert_preloaded(PG_FUNCTION_ARGS)
{
	frameq_require_preload();
	PG_RETURN_VOID();
}
