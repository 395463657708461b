
/*
 * ---------------------------------------------------------------------
 * admin.sql: administration (frameq_admin): allocations, shows and their
 * subscriptions, folders, limits, hosts and their credentials, and which
 * roles may submit to a show; and the audit trail (at the end), which
 * every operator and administration function writes to.
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
	PERFORM frameq._audit('create_allocation', NULL, NULL, NULL, NULL,
		pg_catalog.jsonb_build_object('name', name, 'tag', tag, 'allocation', result));
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
	PERFORM frameq._audit('create_show', NULL, NULL, NULL, NULL,
		pg_catalog.jsonb_build_object('name', name, 'show', result));
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
	PERFORM frameq._audit('set_subscription', NULL, NULL, NULL, NULL,
		pg_catalog.jsonb_build_object('show', show, 'allocation', allocation, 'size', size,
									  'burst', burst));
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
	PERFORM frameq._audit('create_folder', NULL, NULL, NULL, NULL,
		pg_catalog.jsonb_build_object('show', show, 'name', name, 'max_cores', max_cores,
									  'max_gpus', max_gpus, 'folder', result));
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
	PERFORM frameq._audit('set_folder_limits', NULL, NULL, NULL, NULL,
		pg_catalog.jsonb_build_object('folder', folder, 'max_cores', max_cores,
									  'max_gpus', max_gpus));
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
	PERFORM frameq._audit('create_limit', NULL, NULL, NULL, NULL,
		pg_catalog.jsonb_build_object('name', name, 'max_running', max_running, 'limit', result));
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
	PERFORM frameq._audit('set_limit', NULL, NULL, NULL, NULL,
		pg_catalog.jsonb_build_object('name', name, 'max_running', max_running, 'limit', limit_id));
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
	host_id int;
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
			register_host.memory, register_host.gpus, register_host.gpu_memory)
	RETURNING host.id INTO host_id;
	/* never the token */
	PERFORM frameq._audit('register_host', NULL, NULL, NULL, host_id,
		pg_catalog.jsonb_build_object('name', name, 'allocation', allocation, 'cores', cores,
									  'memory', memory, 'gpus', gpus, 'gpu_memory', gpu_memory,
									  'tags', host_tags));
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
	/* that it was rotated, never the token */
	PERFORM frameq._audit('rotate_host_token', NULL, NULL, NULL, h.id,
						  pg_catalog.jsonb_build_object('host', h.name));
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
	PERFORM frameq._audit('retire_host', NULL, NULL, NULL, h.id,
						  pg_catalog.jsonb_build_object('host', h.name));
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
	PERFORM frameq._audit('grant_show', NULL, NULL, NULL, NULL,
						  pg_catalog.jsonb_build_object('show', show, 'role', role));
END
$$;

/* take a show from a role; revoking what was never granted does nothing */
CREATE FUNCTION frameq.revoke_show(show text, role text) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
	DELETE FROM frameq.show_grant g
	 WHERE g.show = frameq._show_id(revoke_show.show) AND g.role = frameq._role_oid(revoke_show.role);
	PERFORM frameq._audit('revoke_show', NULL, NULL, NULL, NULL,
						  pg_catalog.jsonb_build_object('show', show, 'role', role));
END
$$;

/*
 * ---------------------------------------------------------------------
 * The audit trail (table action, view actions; doc/reference.md, "Audit
 * trail").  Every operator and administration function records what it
 * did by calling frameq._audit() once, after its checks, in its own
 * transaction: a call that fails rolls its row back with everything else.
 * The agent's calls (attach, heartbeat, reserve, complete) and the
 * background worker record nothing.
 * ---------------------------------------------------------------------
 */

/*
 * What an audit row may hold of a detail: keys whose name contains token,
 * secret or password are dropped, an "env" object becomes the list of its
 * variables' names (never their values), and a string longer than 2,000
 * characters keeps its first 2,000 and says how long it was; at any depth.
 */
CREATE FUNCTION frameq._audit_scrub(detail jsonb) RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
BEGIN
	CASE pg_catalog.jsonb_typeof(detail)
	WHEN 'object' THEN
		RETURN coalesce((
			SELECT pg_catalog.jsonb_object_agg(e.key,
					   CASE WHEN e.key = 'env' AND pg_catalog.jsonb_typeof(e.value) = 'object'
							THEN pg_catalog.to_jsonb(ARRAY(SELECT pg_catalog.jsonb_object_keys(e.value) k
															ORDER BY k))
							ELSE frameq._audit_scrub(e.value) END)
			  FROM pg_catalog.jsonb_each(detail) e
			 WHERE e.key !~* '(token|secret|password)'), '{}');
	WHEN 'array' THEN
		RETURN coalesce((SELECT pg_catalog.jsonb_agg(frameq._audit_scrub(a.value) ORDER BY a.n)
						   FROM pg_catalog.jsonb_array_elements(detail) WITH ORDINALITY a(value, n)),
						'[]');
	WHEN 'string' THEN
		IF pg_catalog.length(detail #>> '{}') > 2000 THEN
			RETURN pg_catalog.to_jsonb(pg_catalog.format('%s... (%s characters)',
				pg_catalog.left(detail #>> '{}', 2000), pg_catalog.length(detail #>> '{}')));
		END IF;
		RETURN detail;
	ELSE
		RETURN detail;
	END CASE;
END
$$;

/*
 * The one writer of the audit trail.  Its contract, for every operator or
 * administration function (and only those):
 * - call it once per successful call, after every check has passed, in
 *   the function's own transaction (never in a separate one, never from
 *   a trigger): a call that fails then leaves no row;
 * - action is the function's name (lower case and _, at most 64);
 * - job, layer, frame, host are the ids acted on (NULL where none; host is
 *   the host's id, and a frame action passes the host running the frame,
 *   if any); the row keeps them even after what they name is gone;
 * - detail is a JSON object of the call's arguments (names, not ids, where
 *   the caller gave names) and what came of it (an id created, a count);
 *   NULL means {}.  Pass no token, run secret or env value: _audit_scrub
 *   drops and hides those it can recognise (above) as a second line, not
 *   as the first; keep it small (past 64 kB after scrubbing is 54000,
 *   which fails the action: pass counts, not lists of ids);
 * - never call it from attach, heartbeat, reserve, complete, the worker,
 *   or anything they call: the trail is for people's actions, and the
 *   agent's paths must not write here.
 * role and at are filled in here: session_user and the clock.  Granted to
 * nobody; it runs as its caller (the extension's owner, inside the
 * SECURITY DEFINER entry points), the only role that may insert.
 */
CREATE FUNCTION frameq._audit(action text, job bigint, layer bigint, frame bigint, host int,
							  detail jsonb) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	clean jsonb := frameq._audit_scrub(coalesce(detail, '{}'));
BEGIN
	IF pg_catalog.jsonb_typeof(clean) <> 'object' THEN
		RAISE EXCEPTION 'audit detail must be a JSON object, not %', pg_catalog.jsonb_typeof(clean)
			USING ERRCODE = 'invalid_parameter_value';
	END IF;
	IF pg_catalog.octet_length(clean::text) > 65536 THEN
		PERFORM frameq._too_big('audit detail', pg_catalog.format('%s bytes, at most 65536',
																  pg_catalog.octet_length(clean::text)));
	END IF;
	INSERT INTO frameq.action (action, job, layer, frame, host, detail)
	VALUES (_audit.action, _audit.job, _audit.layer, _audit.frame, _audit.host, clean);
END
$$;

/* an audit row of a frame action: the frame's job and layer, and its host while it runs */
CREATE FUNCTION frameq._audit_frame(action text, frame bigint, detail jsonb) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	job_id bigint;
	layer_id bigint;
	host_id int;
BEGIN
	SELECT f.job, f.layer, p.host INTO job_id, layer_id, host_id
	  FROM frameq.frame f LEFT JOIN frameq.proc p ON p.frame = f.id
	 WHERE f.id = _audit_frame.frame;
	PERFORM frameq._audit(action, job_id, layer_id, frame, host_id, detail);
END
$$;

/* the trail is appended to, never rewritten */
CREATE FUNCTION frameq._action_append_only() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
	RAISE EXCEPTION 'the audit trail is append-only: its rows are never updated'
		USING ERRCODE = 'insufficient_privilege';
END
$$;
CREATE TRIGGER action_append_only BEFORE UPDATE ON frameq.action
	FOR EACH STATEMENT EXECUTE FUNCTION frameq._action_append_only();
