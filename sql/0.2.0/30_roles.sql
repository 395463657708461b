/*
 * ---------------------------------------------------------------------
 * Who may do what: submitters scoped to shows, and a host's credentials
 * over its life.  doc/security.md has the whole threat model.
 * ---------------------------------------------------------------------
 */

/* frameq_submit: may submit and control the jobs of the shows granted to it */
DO $$
BEGIN
	IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'frameq_submit') THEN
		CREATE ROLE frameq_submit NOLOGIN;
	END IF;
END
$$;

/* role is an oid, not a name: a rename keeps its grants, a new role of the same name gets none */
CREATE TABLE frameq.show_grant (
	show		int NOT NULL REFERENCES frameq.show,
	role		oid NOT NULL,
	granted_at	timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),
	PRIMARY KEY (show, role)
);

/*
 * The role acting: what SET ROLE chose, else the login.  Not current_user,
 * which inside frameq's SECURITY DEFINER functions is the extension's owner.
 */
CREATE FUNCTION frameq._caller() RETURNS name
LANGUAGE sql STABLE AS $$
	SELECT CASE WHEN pg_catalog.current_setting('role') = 'none' THEN session_user
				ELSE pg_catalog.current_setting('role')::name END
$$;

/* may the caller submit to and control the jobs of this show?  42501 if not */
CREATE FUNCTION frameq._authorize_show(show int) RETURNS void
LANGUAGE plpgsql STABLE AS $$
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
LANGUAGE plpgsql STABLE AS $$
DECLARE
	show_id int;
BEGIN
	SELECT j.show INTO show_id FROM frameq.job j WHERE j.id = _authorize_job.job;
	IF FOUND THEN
		PERFORM frameq._authorize_show(show_id);
	END IF;
END
$$;

CREATE FUNCTION frameq._authorize_frame(frame bigint) RETURNS void
LANGUAGE plpgsql STABLE AS $$
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

CREATE FUNCTION frameq._role_oid(role text) RETURNS oid
LANGUAGE plpgsql STABLE AS $$
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
LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO frameq.show_grant AS g (show, role)
	VALUES (frameq._show_id(show), frameq._role_oid(role))
	ON CONFLICT DO NOTHING;
END
$$;

CREATE FUNCTION frameq.revoke_show(show text, role text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
	DELETE FROM frameq.show_grant g
	 WHERE g.show = frameq._show_id(revoke_show.show) AND g.role = frameq._role_oid(revoke_show.role);
END
$$;

CREATE VIEW frameq.show_grants AS
SELECT s.name AS show, coalesce(r.rolname::text, g.role::text) COLLATE "default" AS role, g.granted_at
  FROM frameq.show_grant g
  JOIN frameq.show s ON s.id = g.show
  LEFT JOIN pg_catalog.pg_roles r ON r.oid = g.role;

/*
 * ---------------------------------------------------------------------
 * Host credentials
 * ---------------------------------------------------------------------
 */

/*
 * A new token for a host; the old one stops working when this commits.
 * The host lock orders it with the agent's attach, heartbeat and reserve.
 */
CREATE FUNCTION frameq.rotate_host_token(host text) RETURNS text
LANGUAGE plpgsql AS $$
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
LANGUAGE plpgsql AS $$
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

CREATE OR REPLACE VIEW frameq.hosts AS
SELECT h.id AS host, h.name, a.name AS allocation, h.state, h.down_reason, h.epoch,
	   h.lease_expires_at,
	   (h.cores_cc / 100.0)::numeric(12,2) AS cores, (h.idle_cc / 100.0)::numeric(12,2) AS idle_cores,
	   h.memory, h.idle_memory, h.gpus, h.idle_gpus, h.gpu_memory, h.idle_gpu_memory,
	   h.tags, h.boot_id,
	   (SELECT count(*) FROM frameq.proc p WHERE p.host = h.id)::int AS running,
	   h.retired_at
  FROM frameq.host h
  JOIN frameq.allocation a ON a.id = h.allocation;

/*
 * Job control: the same functions as in 0.1.0, each first asking whether
 * the caller may act on that job's show.
 */

CREATE OR REPLACE FUNCTION frameq.set_job(job bigint, priority int DEFAULT NULL,
							   max_cores numeric DEFAULT NULL, max_gpus int DEFAULT NULL,
							   paused bool DEFAULT NULL, clear_caps bool DEFAULT false)
RETURNS void LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
	j frameq.job;
	cap_cc int := frameq._cc(max_cores, 'max_cores');
	caps_changed bool := clear_caps OR max_cores IS NOT NULL OR max_gpus IS NOT NULL;
BEGIN
	PERFORM frameq._authorize_job(job);
	PERFORM frameq._nonneg(max_gpus, 'max_gpus', 100000);
	IF priority NOT BETWEEN -1000000 AND 1000000 THEN
		RAISE EXCEPTION 'priority must be from -1000000 to 1000000, not %', priority
			USING ERRCODE = CASE WHEN priority > 0 THEN 'program_limit_exceeded'
								 ELSE 'invalid_parameter_value' END;
	END IF;
	PERFORM frameq._not_null(clear_caps, 'clear_caps');
	SELECT * INTO j FROM frameq.job x WHERE x.id = frameq._not_null(set_job.job, 'job')
	   FOR NO KEY UPDATE;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'job % does not exist', job USING ERRCODE = 'undefined_object';
	END IF;
	IF paused IS NOT NULL AND j.state IN ('finished', 'killed') THEN
		RAISE EXCEPTION 'job % is %: it cannot be paused or resumed', job, j.state
			USING ERRCODE = 'object_not_in_prerequisite_state';
	END IF;
	UPDATE frameq.job x SET
		priority = coalesce(set_job.priority, x.priority),
		max_cc = CASE WHEN clear_caps THEN cap_cc ELSE coalesce(cap_cc, x.max_cc) END,
		max_gpus = CASE WHEN clear_caps THEN set_job.max_gpus
						ELSE coalesce(set_job.max_gpus, x.max_gpus) END,
		state = CASE WHEN set_job.paused IS NULL THEN x.state
					 WHEN set_job.paused THEN 'paused' ELSE 'active' END,
		caps_changed_at = CASE WHEN caps_changed THEN clock_timestamp() ELSE x.caps_changed_at END
	 WHERE x.id = set_job.job
	RETURNING * INTO j;
	IF caps_changed THEN
		PERFORM pg_notify('frameq_limit', json_build_object(
			'kind', 'job', 'id', job, 'max_cores', j.max_cc / 100.0, 'max_gpus', j.max_gpus)::text);
	END IF;
END
$$;

CREATE OR REPLACE FUNCTION frameq.kill_frame(frame bigint, reason text) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
	st text;
BEGIN
	PERFORM frameq._authorize_frame(frame);
	PERFORM frameq._reason(reason);
	SELECT x.state INTO st FROM frameq.frame x WHERE x.id = frameq._not_null(kill_frame.frame, 'frame');
	IF NOT FOUND THEN
		RAISE EXCEPTION 'frame % does not exist', frame USING ERRCODE = 'undefined_object';
	END IF;
	IF st IN ('succeeded', 'eaten') THEN
		RAISE EXCEPTION 'frame % is %: there is nothing to kill', frame, st
			USING ERRCODE = 'object_not_in_prerequisite_state';
	END IF;
	PERFORM frameq._frame_action(frame, reason, 'dead', ARRAY['waiting', 'depend'], 'dead');
END
$$;

CREATE OR REPLACE FUNCTION frameq.retry_frame(frame bigint) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
	PERFORM frameq._authorize_frame(frame);
	IF NOT EXISTS (SELECT 1 FROM frameq.frame x WHERE x.id = frameq._not_null(retry_frame.frame, 'frame')) THEN
		RAISE EXCEPTION 'frame % does not exist', frame USING ERRCODE = 'undefined_object';
	END IF;
	IF NOT EXISTS (SELECT 1 FROM frameq.proc x WHERE x.frame = retry_frame.frame) THEN
		/*
		 * Putting a finished frame back: hold the job row in SHARE mode so
		 * that neither kill_job nor a completion finishing the job can
		 * pass us unseen.  (A running frame only gets a kill order, which
		 * cannot finish or reopen anything.)
		 */
		PERFORM 1 FROM frameq.job j JOIN frameq.frame x ON x.job = j.id
		  WHERE x.id = retry_frame.frame FOR SHARE OF j;
	END IF;
	IF EXISTS (SELECT 1 FROM frameq.frame x JOIN frameq.job j ON j.id = x.job
				WHERE x.id = retry_frame.frame AND j.state = 'killed') THEN
		RAISE EXCEPTION 'frame % belongs to a killed job', frame
			USING ERRCODE = 'object_not_in_prerequisite_state';
	END IF;
	PERFORM frameq._frame_action(frame, 'retried by operator', 'waiting',
								 ARRAY['succeeded', 'dead', 'eaten'], 'waiting');
	/*
	 * A kill_job may have committed while we waited for the frame's proc:
	 * look again, and undo everything (by failing) if the job is killed.
	 */
	IF EXISTS (SELECT 1 FROM frameq.frame x JOIN frameq.job j ON j.id = x.job
				WHERE x.id = retry_frame.frame AND j.state = 'killed') THEN
		RAISE EXCEPTION 'frame % belongs to a killed job', frame
			USING ERRCODE = 'object_not_in_prerequisite_state';
	END IF;
END
$$;

CREATE OR REPLACE FUNCTION frameq.eat_frame(frame bigint) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
	st text;
BEGIN
	PERFORM frameq._authorize_frame(frame);
	SELECT x.state INTO st FROM frameq.frame x WHERE x.id = frameq._not_null(eat_frame.frame, 'frame');
	IF NOT FOUND THEN
		RAISE EXCEPTION 'frame % does not exist', frame USING ERRCODE = 'undefined_object';
	END IF;
	IF st = 'succeeded' THEN
		RAISE EXCEPTION 'frame % succeeded: there is nothing to eat', frame
			USING ERRCODE = 'object_not_in_prerequisite_state';
	END IF;
	PERFORM frameq._frame_action(frame, 'eaten by operator', 'eaten',
								 ARRAY['waiting', 'depend', 'dead'], 'eaten');
END
$$;

CREATE OR REPLACE FUNCTION frameq.kill_job(job bigint, reason text) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
	j frameq.job;
	f bigint;
BEGIN
	PERFORM frameq._authorize_job(job);
	PERFORM frameq._reason(reason);
	/* lock order as in complete(): the job's procs, then the job row */
	PERFORM 1 FROM frameq.proc x WHERE x.job = kill_job.job FOR NO KEY UPDATE;
	/* FOR UPDATE conflicts with retry_frame's SHARE lock on the job row */
	SELECT * INTO j FROM frameq.job x WHERE x.id = frameq._not_null(kill_job.job, 'job')
	   FOR UPDATE;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'job % does not exist', job USING ERRCODE = 'undefined_object';
	END IF;
	IF j.state = 'finished' THEN
		RAISE EXCEPTION 'job % is finished: there is nothing to kill', job
			USING ERRCODE = 'object_not_in_prerequisite_state';
	END IF;
	/* no new bookings from here on: the job is no longer active */
	UPDATE frameq.job x SET state = 'killed', finished_at = clock_timestamp() WHERE x.id = j.id;
	FOR f IN SELECT x.id FROM frameq.frame x
			  WHERE x.job = j.id AND x.state IN ('waiting', 'depend', 'running') ORDER BY x.id LOOP
		PERFORM frameq._frame_action(f, reason, 'dead', ARRAY['waiting', 'depend'], 'dead');
	END LOOP;
END
$$;
