/*
 * ---------------------------------------------------------------------
 * Privileges and search paths.  Last, because CREATE OR REPLACE FUNCTION
 * forgets SECURITY DEFINER and SET clauses: whatever the steps above
 * replaced gets them back here.
 * ---------------------------------------------------------------------
 */

/*
 * Every function of the extension resolves names in pg_catalog only (and
 * never in pg_temp for functions and operators): the background worker
 * runs them as the bootstrap superuser, and SECURITY DEFINER functions as
 * the extension's owner, so a name or operator resolved through a schema
 * that other roles can create objects in would be a door to superuser.
 * Bodies name frameq's own objects with the schema.
 */
DO $$
DECLARE
	f regprocedure;
BEGIN
	FOR f IN SELECT p.oid::regprocedure FROM pg_catalog.pg_proc p
			  WHERE p.pronamespace = 'frameq'::regnamespace LOOP
		EXECUTE format('ALTER FUNCTION %s SET search_path = pg_catalog, pg_temp', f);
	END LOOP;
END
$$;
