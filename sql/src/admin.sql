
/*
 * ---------------------------------------------------------------------
 * admin.sql: administration (frameq_admin): allocations, shows and their
 * subscriptions, folders, limits, hosts and their credentials, and which
 * roles may submit to a show.
 * ---------------------------------------------------------------------
 */

CREATE FUNCTION frameq.create_allocation(name text, tag text DEFAULT NULL) RETURNS int
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
	result int;
BEGIN
	PERFORM frameq._name(name, 'name');
	IF tag IS NOT NULL THEN
		PERFORM frameq._tags(ARRAY[tag], 'tag');
	END IF;
	IF EXISTS (SELECT 1 FROM frameq.allocation a WHERE a.name = create_allocation.name) THEN
		RAISE EXCEPTION 'allocation "%" already exists', frameq._clip(name) USING ERRCODE = 'duplicate_object';
	END IF;
	INSERT INTO frameq.allocation AS a (name, tag)
	VALUES (create_allocation.name, create_allocation.tag) RETURNING a.id INTO result;
	RETURN result;
END
$$;

CREATE FUNCTION frameq.create_show(name text) RETURNS int
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
	result int;
BEGIN
	PERFORM frameq._name(name, 'name');
	IF EXISTS (SELECT 1 FROM frameq.show s WHERE s.name = create_show.name) THEN
		RAISE EXCEPTION 'show "%" already exists', frameq._clip(name) USING ERRCODE = 'duplicate_object';
	END IF;
	INSERT INTO frameq.show AS s (name) VALUES (create_show.name) RETURNING s.id INTO result;
	RETURN result;
END
$$;

CREATE FUNCTION frameq.set_subscription(show text, allocation text, size numeric, burst numeric)
RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
	show_id int := frameq._show_id(show);
	alloc_id int := frameq._allocation_id(allocation);
	size_cc int := frameq._cc(frameq._not_null(size, 'size'), 'size');
	burst_cc int := frameq._cc(frameq._not_null(burst, 'burst'), 'burst');
BEGIN
	INSERT INTO frameq.subscription AS s (show, allocation, size_cc, burst_cc)
	VALUES (show_id, alloc_id, size_cc, burst_cc)
	ON CONFLICT (show, allocation) DO UPDATE
		SET size_cc = excluded.size_cc, burst_cc = excluded.burst_cc,
			changed_at = clock_timestamp();
	PERFORM pg_notify('frameq_limit', json_build_object(
		'kind', 'subscription', 'id', show_id, 'allocation', alloc_id,
		'size', size, 'burst', burst)::text);
END
$$;

CREATE FUNCTION frameq.create_folder(show text, name text, max_cores numeric DEFAULT NULL,
									 max_gpus int DEFAULT NULL)
RETURNS int LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
	show_id int := frameq._show_id(show);
	cap_cc int := frameq._cc(max_cores, 'max_cores');
	result int;
BEGIN
	PERFORM frameq._name(name, 'name');
	PERFORM frameq._nonneg(max_gpus, 'max_gpus', 100000);
	IF EXISTS (SELECT 1 FROM frameq.folder f WHERE f.show = show_id AND f.name = create_folder.name) THEN
		RAISE EXCEPTION 'folder "%" already exists in show "%"', frameq._clip(name), frameq._clip(show)
			USING ERRCODE = 'duplicate_object';
	END IF;
	INSERT INTO frameq.folder AS f (show, name, max_cc, max_gpus)
	VALUES (show_id, create_folder.name, cap_cc, create_folder.max_gpus) RETURNING f.id INTO result;
	PERFORM pg_catalog.pg_notify('frameq_limit', pg_catalog.json_build_object(
		'kind', 'folder', 'id', result, 'max_cores', max_cores, 'max_gpus', max_gpus)::text);
	RETURN result;
END
$$;

CREATE FUNCTION frameq.set_folder_limits(folder int, max_cores numeric, max_gpus int)
RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
	cap_cc int := frameq._cc(max_cores, 'max_cores');
BEGIN
	PERFORM frameq._nonneg(max_gpus, 'max_gpus', 100000);
	UPDATE frameq.folder f SET max_cc = cap_cc, max_gpus = set_folder_limits.max_gpus,
		   changed_at = clock_timestamp()
	 WHERE f.id = frameq._not_null(set_folder_limits.folder, 'folder');
	IF NOT FOUND THEN
		RAISE EXCEPTION 'folder % does not exist', folder USING ERRCODE = 'undefined_object';
	END IF;
	PERFORM pg_notify('frameq_limit', json_build_object(
		'kind', 'folder', 'id', folder, 'max_cores', max_cores, 'max_gpus', max_gpus)::text);
END
$$;

CREATE FUNCTION frameq.create_limit(name text, max_running int) RETURNS int
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
	result int;
BEGIN
	PERFORM frameq._name(name, 'name');
	PERFORM frameq._nonneg(frameq._not_null(max_running, 'max_running'), 'max_running', 10000000);
	IF EXISTS (SELECT 1 FROM frameq.limits l WHERE l.name = create_limit.name) THEN
		RAISE EXCEPTION 'limit "%" already exists', frameq._clip(name) USING ERRCODE = 'duplicate_object';
	END IF;
	INSERT INTO frameq.limits AS l (name, max_running)
	VALUES (create_limit.name, create_limit.max_running)
	RETURNING l.id INTO result;
	PERFORM pg_notify('frameq_limit', json_build_object(
		'kind', 'limit', 'id', result, 'max_running', max_running)::text);
	RETURN result;
END
$$;

CREATE FUNCTION frameq.set_limit(name text, max_running int) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
	limit_id int;
BEGIN
	PERFORM frameq._nonneg(frameq._not_null(max_running, 'max_running'), 'max_running', 10000000);
	UPDATE frameq.limits l SET max_running = set_limit.max_running, changed_at = pg_catalog.clock_timestamp()
	 WHERE l.name = frameq._not_null(set_limit.name, 'name')
	RETURNING l.id INTO limit_id;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'limit "%" does not exist', frameq._clip(name) USING ERRCODE = 'undefined_object';
	END IF;
	PERFORM pg_catalog.pg_notify('frameq_limit', pg_catalog.json_build_object(
		'kind', 'limit', 'id', limit_id, 'max_running', max_running)::text);
END
$$;

/*
 * ---------------------------------------------------------------------
 * Hosts and their credentials.  A host agent proves itself with the token
 * register_host() returns; only its hash is stored.
 * ---------------------------------------------------------------------
 */

CREATE FUNCTION frameq.register_host(name text, allocation text, cores numeric, memory bigint,
									 gpus int DEFAULT 0, gpu_memory bigint DEFAULT 0,
									 tags text[] DEFAULT '{}')
RETURNS text LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
	alloc_id int := frameq._allocation_id(allocation);
	host_cc int := frameq._cc(frameq._not_null(cores, 'cores'), 'cores', false, 100000);
	host_tags text[] := frameq._tags(tags, 'tags');
	host_token text := frameq._random_token();
BEGIN
	PERFORM frameq._name(name, 'name');
	PERFORM frameq._nonneg(frameq._not_null(memory, 'memory'), 'memory', 1::bigint << 50);
	IF memory = 0 THEN
		RAISE EXCEPTION 'memory must be positive' USING ERRCODE = 'invalid_parameter_value';
	END IF;
	PERFORM frameq._nonneg(frameq._not_null(gpus, 'gpus'), 'gpus', 1024);
	PERFORM frameq._nonneg(frameq._not_null(gpu_memory, 'gpu_memory'), 'gpu_memory', 1::bigint << 50);
	IF EXISTS (SELECT 1 FROM frameq.host h WHERE h.name = register_host.name AND h.retired_at IS NULL) THEN
		RAISE EXCEPTION 'host "%" is already registered', frameq._clip(name) USING ERRCODE = 'duplicate_object';
	END IF;
	INSERT INTO frameq.host (name, allocation, cores_cc, memory, gpus, gpu_memory, tags,
							 token_hash, idle_cc, idle_memory, idle_gpus, idle_gpu_memory)
	VALUES (register_host.name, alloc_id, host_cc, register_host.memory,
			register_host.gpus, register_host.gpu_memory, host_tags,
			pg_catalog.sha256(pg_catalog.convert_to(host_token, 'UTF8')), host_cc,
			register_host.memory, register_host.gpus, register_host.gpu_memory);
	RETURN host_token;
END
$$;

/*
 * A new token for a host; the old one stops working when this commits.
 * The host lock orders it with the agent's attach, heartbeat and reserve.
 */
CREATE FUNCTION frameq.rotate_host_token(host text) RETURNS text
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	h frameq.host := frameq._host_lock_by_name(host);
	host_token text := frameq._random_token();
BEGIN
	UPDATE frameq.host x SET token_hash = pg_catalog.sha256(pg_catalog.convert_to(host_token, 'UTF8'))
	 WHERE x.id = h.id;
	RETURN host_token;
END
$$;

/*
 * A host leaves the farm.  Only a host with no live proc may: anything it
 * still runs must first be confirmed ended (complete, a kill confirmed by
 * a heartbeat, confirm_host_dead, or its lease expiring).  Its row and
 * runs stay for the history; its name and token stop working, and the
 * name may be registered again as a new host.
 */
CREATE FUNCTION frameq.retire_host(host text) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	h frameq.host := frameq._host_lock_by_name(host);
	live int;
BEGIN
	SELECT count(*) INTO live FROM frameq.proc x WHERE x.host = h.id;
	IF live > 0 THEN
		RAISE EXCEPTION 'host "%" still has % live proc(s)', h.name, live
			USING ERRCODE = 'object_in_use',
				  HINT = 'Drain it (set_host_state ''down'') and wait for its kills to be confirmed, or call confirm_host_dead() if the machine is off.';
	END IF;
	UPDATE frameq.host x
	   SET retired_at = pg_catalog.clock_timestamp(), state = 'down', down_reason = 'operator',
		   lease_expires_at = NULL, epoch = x.epoch + 1,
		   /* no token hashes to this: the old one is dead even for a lookup that forgot retired_at */
		   token_hash = '\x'::bytea
	 WHERE x.id = h.id;
END
$$;

/*
 * ---------------------------------------------------------------------
 * Show grants: submitters (frameq_submit) are scoped to the shows granted
 * to them (frameq.show_grant).  doc/security.md has the whole threat
 * model.
 * ---------------------------------------------------------------------
 */

/*
 * The role acting: what SET ROLE chose, else the login.  Not current_user,
 * which inside frameq's SECURITY DEFINER functions is the extension's owner.
 */
CREATE FUNCTION frameq._caller() RETURNS name
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
	SELECT CASE WHEN pg_catalog.current_setting('role') = 'none' THEN session_user
				ELSE pg_catalog.current_setting('role')::name END
$$;

/* may the caller submit to and control the jobs of this show?  42501 if not */
CREATE FUNCTION frameq._authorize_show(show int) RETURNS void
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	caller name := frameq._caller();
BEGIN
	IF (SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.rolname = caller)
	   OR pg_catalog.pg_has_role(caller, 'frameq_admin', 'USAGE') THEN
		RETURN;
	END IF;
	IF NOT EXISTS (SELECT 1 FROM frameq.show_grant g
					WHERE g.show = _authorize_show.show
					  AND EXISTS (SELECT 1 FROM pg_catalog.pg_roles r WHERE r.oid = g.role)
					  AND pg_catalog.pg_has_role(caller, g.role, 'USAGE')) THEN
		RAISE EXCEPTION 'permission denied for show "%"',
			(SELECT s.name FROM frameq.show s WHERE s.id = _authorize_show.show)
			USING ERRCODE = 'insufficient_privilege',
				  HINT = 'An administrator grants a show with frameq.grant_show(show, role).';
	END IF;
END
$$;

/* the same for a job's show; a job that does not exist is left to the caller to report */
CREATE FUNCTION frameq._authorize_job(job bigint) RETURNS void
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	show_id int;
BEGIN
	SELECT j.show INTO show_id FROM frameq.job j WHERE j.id = _authorize_job.job;
	IF FOUND THEN
		PERFORM frameq._authorize_show(show_id);
	END IF;
END
$$;

/* the same for a frame's job's show */
CREATE FUNCTION frameq._authorize_frame(frame bigint) RETURNS void
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	show_id int;
BEGIN
	SELECT j.show INTO show_id FROM frameq.frame f JOIN frameq.job j ON j.id = f.job
	 WHERE f.id = _authorize_frame.frame;
	IF FOUND THEN
		PERFORM frameq._authorize_show(show_id);
	END IF;
END
$$;

/* a role's oid by name, or 42704 */
CREATE FUNCTION frameq._role_oid(role text) RETURNS oid
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	result oid;
BEGIN
	SELECT r.oid INTO result FROM pg_catalog.pg_roles r
	 WHERE r.rolname::text = frameq._not_null(role, 'role');
	IF NOT FOUND THEN
		RAISE EXCEPTION 'role "%" does not exist', frameq._clip(role) USING ERRCODE = 'undefined_object';
	END IF;
	RETURN result;
END
$$;

/* let a role (usually a member of frameq_submit) submit to and control a show's jobs */
CREATE FUNCTION frameq.grant_show(show text, role text) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
	INSERT INTO frameq.show_grant AS g (show, role)
	VALUES (frameq._show_id(show), frameq._role_oid(role))
	ON CONFLICT DO NOTHING;
END
$$;

/* take a show from a role; revoking what was never granted does nothing */
CREATE FUNCTION frameq.revoke_show(show text, role text) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
	DELETE FROM frameq.show_grant g
	 WHERE g.show = frameq._show_id(revoke_show.show) AND g.role = frameq._role_oid(revoke_show.role);
END
$$;
