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

/* frameq._bound_lock_waits() sets lock_timeout for the rest of these only */
ALTER FUNCTION frameq.attach(text, text, text) SET lock_timeout = 0;
ALTER FUNCTION frameq.heartbeat(text, text, bigint, bigint[]) SET lock_timeout = 0;

/*
 * The entry points run as the extension's owner (the tables are not
 * writable by anyone else); every other function is internal.  New
 * functions are executable by PUBLIC until revoked: revoke them all, then
 * grant each role its own.
 */
DO $$
DECLARE
	f text;
BEGIN
	FOREACH f IN ARRAY ARRAY[
		'create_allocation(text,text)', 'create_show(text)',
		'set_subscription(text,text,numeric,numeric)',
		'create_folder(text,text,numeric,integer)', 'set_folder_limits(integer,numeric,integer)',
		'create_limit(text,integer)', 'set_limit(text,integer)',
		'register_host(text,text,numeric,bigint,integer,bigint,text[])',
		'rotate_host_token(text)', 'retire_host(text)',
		'grant_show(text,text)', 'revoke_show(text,text)',
		'submit(jsonb)', 'set_job(bigint,integer,numeric,integer,boolean,boolean)',
		'attach(text,text,text)', 'heartbeat(text,text,bigint,bigint[])',
		'reserve(text,text,bigint,integer)',
		'complete(text,text,bigint,bigint,integer,integer,bigint)',
		'owns(bigint,text)', 'check()', 'ledger()',
		'kill_frame(bigint,text)', 'retry_frame(bigint)', 'eat_frame(bigint)',
		'kill_job(bigint,text)', 'set_host_state(text,text)', 'confirm_host_dead(text)',
		'worker_status()'] LOOP
		EXECUTE pg_catalog.format('ALTER FUNCTION frameq.%s SECURITY DEFINER', f);
	END LOOP;
END
$$;

REVOKE ALL ON ALL FUNCTIONS IN SCHEMA frameq FROM PUBLIC;
GRANT USAGE ON SCHEMA frameq TO frameq_submit;

GRANT EXECUTE ON FUNCTION
	frameq.rotate_host_token(text), frameq.retire_host(text),
	frameq.grant_show(text, text), frameq.revoke_show(text, text)
	TO frameq_admin;
GRANT EXECUTE ON FUNCTION
	frameq.submit(jsonb), frameq.set_job(bigint, int, numeric, int, bool, bool),
	frameq.kill_frame(bigint, text), frameq.retry_frame(bigint), frameq.eat_frame(bigint),
	frameq.kill_job(bigint, text)
	TO frameq_submit;
GRANT SELECT ON frameq.show_grants TO frameq_reader;
