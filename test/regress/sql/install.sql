--
-- install: CREATE EXTENSION frameq on a server that preloads it, in the
-- database named by frameq.database.  The version, the schema's tables,
-- views and API, the roles, and an empty farm that check() finds clean.
--
-- Every file of this suite starts from a fresh install (the isolation
-- specs and anything run before share the database) and leaves one.
SET client_min_messages = warning;
DROP EXTENSION IF EXISTS frameq CASCADE;
CREATE EXTENSION frameq;
RESET client_min_messages;

SELECT e.extversion, e.extrelocatable, n.nspname AS schema
  FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace
 WHERE e.extname = 'frameq';

-- loaded at server start, and this is its database
SELECT current_setting('shared_preload_libraries') ~ '\mframeq\M' AS preloaded,
       current_database() = current_setting('frameq.database') AS in_its_database;

-- the tables (r) and views (v); each belongs to the extension
SELECT c.relname, c.relkind,
       EXISTS (SELECT FROM pg_depend d
                WHERE d.classid = 'pg_class'::regclass AND d.objid = c.oid
                  AND d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e') AS member
  FROM pg_class c
 WHERE c.relnamespace = 'frameq'::regnamespace AND c.relkind IN ('r', 'v')
 ORDER BY c.relname;

-- the API: functions whose names do not start with an underscore
SELECT p.oid::regprocedure AS function, p.prosecdef AS security_definer
  FROM pg_proc p
 WHERE p.pronamespace = 'frameq'::regnamespace AND p.proname !~ '^_'
 ORDER BY p.proname COLLATE "C", 1;

-- every function of the schema, internal ones too, pins its search_path
SELECT p.proname AS search_path_not_pinned
  FROM pg_proc p
 WHERE p.pronamespace = 'frameq'::regnamespace
   AND NOT EXISTS (SELECT FROM unnest(p.proconfig) c WHERE c LIKE 'search\_path=%')
 ORDER BY 1;

-- the roles, which outlive the extension (they belong to the cluster)
SELECT rolname, rolcanlogin FROM pg_roles
 WHERE rolname IN ('frameq_admin', 'frameq_agent', 'frameq_reader', 'frameq_submit')
 ORDER BY 1;

-- an empty farm: no invariant broken, nothing in the caps ledger
SELECT * FROM frameq.check();
SELECT count(*) AS ledger_entries FROM frameq.ledger();

-- reinstalling is clean too
SET client_min_messages = warning;
DROP EXTENSION frameq CASCADE;
CREATE EXTENSION frameq;
RESET client_min_messages;
SELECT count(*) AS jobs FROM frameq.job;
