/* frameq 0.1.0: schema, administration, submission, agent entry points, views */

\echo Use "CREATE EXTENSION frameq" to load this file. \quit

/*
 * Refuse to install unless the library was loaded at server start: the ledger
 * lives in shared memory that only shared_preload_libraries can reserve.
 */
CREATE FUNCTION @extschema@._assert_preloaded() RETURNS void
	AS 'MODULE_PATHNAME', 'frameq_assert_preloaded'
	LANGUAGE C STRICT;
SELECT @extschema@._assert_preloaded();

/*
 * ---------------------------------------------------------------------
 * Tables.  Cores are stored as integer centicores (1 core = 100) in
 * columns named *_cc; the API speaks numeric cores.  The constraints below
 * are what the C code relies on: it never re-checks them.
 * ---------------------------------------------------------------------
 */

CREATE TABLE frameq.allocation (
	id			serial PRIMARY KEY,
	name		text NOT NULL UNIQUE CHECK (name <> ''),
	tag			text
);

CREATE TABLE frameq.show (
	id			serial PRIMARY KEY,
	name		text NOT NULL UNIQUE CHECK (name <> '')
);

/* size is the fair share, burst the hard cap, of a show's cores in an allocation */
CREATE TABLE frameq.subscription (
	show		int NOT NULL REFERENCES frameq.show,
	allocation	int NOT NULL REFERENCES frameq.allocation,
	size_cc		int NOT NULL CHECK (size_cc >= 0),
	burst_cc	int NOT NULL CHECK (burst_cc >= 0),
	changed_at	timestamptz NOT NULL DEFAULT clock_timestamp(),
	PRIMARY KEY (show, allocation)
);

CREATE TABLE frameq.folder (
	id			serial PRIMARY KEY,
	show		int NOT NULL REFERENCES frameq.show,
	name		text NOT NULL CHECK (name <> ''),
	max_cc		int CHECK (max_cc >= 0),		/* NULL: no cap */
	max_gpus	int CHECK (max_gpus >= 0),		/* NULL: no cap */
	changed_at	timestamptz NOT NULL DEFAULT clock_timestamp(),
	UNIQUE (show, name),
	UNIQUE (id, show)			/* lets job reference (folder, show) */
);

CREATE TABLE frameq.limits (
	id			serial PRIMARY KEY,
	name		text NOT NULL UNIQUE CHECK (name <> ''),
	max_running int NOT NULL CHECK (max_running >= 0),
	changed_at	timestamptz NOT NULL DEFAULT clock_timestamp()
);

CREATE TABLE frameq.host (
	id			serial PRIMARY KEY,
	name		text NOT NULL UNIQUE CHECK (name <> ''),
	allocation	int NOT NULL REFERENCES frameq.allocation,
	cores_cc	int NOT NULL CHECK (cores_cc > 0),
	memory		bigint NOT NULL CHECK (memory > 0),
	gpus		int NOT NULL CHECK (gpus >= 0),
	gpu_memory	bigint NOT NULL CHECK (gpu_memory >= 0),
	tags		text[] NOT NULL DEFAULT '{}',
	token_hash	bytea NOT NULL,
	state		text NOT NULL DEFAULT 'up' CHECK (state IN ('up', 'down', 'repair')),
	/* who put it down: an operator, or the loss of its lease (attach lifts that) */
	down_reason text CHECK (down_reason IN ('operator', 'lease_lost')),
	/* lease: epoch 0 means never attached */
	epoch		bigint NOT NULL DEFAULT 0 CHECK (epoch >= 0),
	boot_id		text,
	lease_expires_at timestamptz,
	last_renewal_at timestamptz,
	/* free capacity, moved only by the proc table's triggers */
	idle_cc		int NOT NULL,
	idle_memory bigint NOT NULL,
	idle_gpus	int NOT NULL,
	idle_gpu_memory bigint NOT NULL,
	registered_at timestamptz NOT NULL DEFAULT clock_timestamp(),
	/* one constraint, not four: every booking re-checks it */
	CONSTRAINT host_idle_within_capacity CHECK (
		idle_cc BETWEEN 0 AND cores_cc AND idle_memory BETWEEN 0 AND memory AND
		idle_gpus BETWEEN 0 AND gpus AND idle_gpu_memory BETWEEN 0 AND gpu_memory)
);

CREATE TABLE frameq.job (
	id			bigserial PRIMARY KEY,
	show		int NOT NULL REFERENCES frameq.show,
	folder		int,
	name		text NOT NULL CHECK (name <> ''),
	priority	int NOT NULL DEFAULT 0,
	max_retries int NOT NULL DEFAULT 3 CHECK (max_retries BETWEEN 0 AND 1000),
	auto_eat	bool NOT NULL DEFAULT false,
	max_cc		int CHECK (max_cc >= 0),		/* NULL: no cap */
	max_gpus	int CHECK (max_gpus >= 0),		/* NULL: no cap */
	state		text NOT NULL DEFAULT 'active'
				CHECK (state IN ('active', 'paused', 'finished', 'killed')),
	submitted_at timestamptz NOT NULL DEFAULT clock_timestamp(),
	finished_at timestamptz,
	caps_changed_at timestamptz NOT NULL DEFAULT clock_timestamp(),
	FOREIGN KEY (folder, show) REFERENCES frameq.folder (id, show)
);
/* booking walks a show's active jobs in policy order */
CREATE INDEX job_dispatch ON frameq.job (show, priority DESC, id)
	WHERE state = 'active';

CREATE TABLE frameq.layer (
	id			bigserial PRIMARY KEY,
	job			bigint NOT NULL REFERENCES frameq.job,
	name		text NOT NULL CHECK (name <> ''),
	command		text NOT NULL CHECK (command <> ''),
	dispatch_order int NOT NULL DEFAULT 0,
	min_cc		int NOT NULL CHECK (min_cc > 0),
	max_cc		int NOT NULL,				/* cores_max; = min_cc unless threadable */
	threadable	bool NOT NULL DEFAULT false,
	memory		bigint NOT NULL DEFAULT 0 CHECK (memory >= 0),
	gpus		int NOT NULL DEFAULT 0 CHECK (gpus >= 0),
	gpu_memory	bigint NOT NULL DEFAULT 0 CHECK (gpu_memory >= 0),
	tags		text[] NOT NULL DEFAULT '{}',
	env			jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(env) = 'object'),
	UNIQUE (job, name),
	CHECK (max_cc >= min_cc),
	CHECK (threadable OR max_cc = min_cc)
);
CREATE INDEX layer_job ON frameq.layer (job, dispatch_order, id);

CREATE TABLE frameq.layer_limit (
	layer		bigint NOT NULL REFERENCES frameq.layer,
	limit_id	int NOT NULL REFERENCES frameq.limits,
	PRIMARY KEY (layer, limit_id)
);

CREATE TABLE frameq.frame (
	id			bigserial PRIMARY KEY,
	job			bigint NOT NULL REFERENCES frameq.job,
	layer		bigint NOT NULL REFERENCES frameq.layer,
	number		int NOT NULL,
	state		text NOT NULL DEFAULT 'waiting'
				CHECK (state IN ('waiting', 'depend', 'running', 'succeeded', 'dead', 'eaten')),
	retries		int NOT NULL DEFAULT 0 CHECK (retries >= 0),
	attempts	int NOT NULL DEFAULT 0 CHECK (attempts >= 0),
	version		bigint NOT NULL DEFAULT 0,	/* counts state changes */
	UNIQUE (layer, number)
);
/* the next waiting frame of a layer, without reading the rest of the backlog */
CREATE INDEX frame_waiting ON frameq.frame (layer, number) WHERE state = 'waiting';
/* is anything of this job still live?  (finishing a job, progress) */
CREATE INDEX frame_live ON frameq.frame (job, state)
	WHERE state IN ('waiting', 'depend', 'running');

/*
 * A proc is one booking.  Its id is the run token: 63 random bits, never a
 * sequence, so no failover can hand the same token out twice.  Every column
 * the release path needs (ledger keys, resources) is copied in at booking so
 * that a DELETE alone is enough to release.
 *
 * No column carries a foreign key.  job, layer, show, folder and allocation
 * are copies of the frame's and the host's; a key on them would take a KEY
 * SHARE lock on the same job, show and allocation rows in every concurrent
 * booking, which is the hot row frameq exists to avoid; check() verifies
 * the copies.  frame and host would cost a key check per proc (a query and
 * a row lock each) that proves nothing new: reserve() has the frame locked
 * and updated and the insert trigger updates the host row, and a direct
 * INSERT is refused unless its frame and host are found and locked (see
 * release.c).  What the keys would also guard, a frame or host that
 * disappears or changes its id under a proc or a run record, the guard
 * triggers below refuse (frameq itself never deletes either).
 */
CREATE TABLE frameq.proc (
	id			bigint PRIMARY KEY CHECK (id > 0),
	frame		bigint NOT NULL UNIQUE,
	host		int NOT NULL,
	epoch		bigint NOT NULL,
	job			bigint NOT NULL,
	layer		bigint NOT NULL,
	show		int NOT NULL,
	folder		int,
	allocation	int NOT NULL,
	limits		int[] NOT NULL DEFAULT '{}',
	cores_cc	int NOT NULL CHECK (cores_cc > 0),
	memory		bigint NOT NULL CHECK (memory >= 0),
	gpus		int NOT NULL CHECK (gpus >= 0),
	gpu_memory	bigint NOT NULL CHECK (gpu_memory >= 0),
	state		text NOT NULL DEFAULT 'running' CHECK (state IN ('running', 'killing')),
	booked_at	timestamptz NOT NULL DEFAULT clock_timestamp(),
	/* kill order: what was asked, when, and the frame state wanted on release */
	kill_reason text,
	kill_at		timestamptz,
	want_state	text CHECK (want_state IN ('waiting', 'dead', 'eaten')),
	kill_sent_at timestamptz,
	CHECK ((state = 'killing') = (want_state IS NOT NULL AND kill_at IS NOT NULL))
);
CREATE INDEX proc_host ON frameq.proc (host, state);

/*
 * One row per attempt, kept forever, written by the proc insert trigger
 * from a proc whose frame and host exist; no foreign keys: see proc.
 */
CREATE TABLE frameq.run (
	proc		bigint PRIMARY KEY,
	frame		bigint NOT NULL,
	job			bigint NOT NULL,
	host		int NOT NULL,
	epoch		bigint NOT NULL,
	cores_cc	int NOT NULL,
	memory		bigint NOT NULL,
	gpus		int NOT NULL,
	started_at	timestamptz NOT NULL,
	ended_at	timestamptz,
	exit_status int,
	exit_signal int,
	max_rss		bigint,
	reason		text CHECK (reason IN ('completed', 'killed', 'host_lost', 'host_rebooted',
									   'lost_by_agent', 'operator')),
	kill_reason text,
	end_state	text,
	CHECK ((ended_at IS NULL) = (reason IS NULL))
);
CREATE INDEX run_frame ON frameq.run (frame);

/* the agent-facing booking row returned by reserve() */
CREATE TYPE frameq.booking AS (
	proc		bigint,
	frame		bigint,
	job			bigint,
	layer		bigint,
	frame_number int,
	command		text,
	cores		numeric,
	memory		bigint,
	gpus		int,
	gpu_memory	bigint,
	env			jsonb
);

/*
 * ---------------------------------------------------------------------
 * C entry points and triggers
 * ---------------------------------------------------------------------
 */

CREATE FUNCTION frameq._random_token() RETURNS text
	AS 'MODULE_PATHNAME', 'frameq_random_token' LANGUAGE C VOLATILE STRICT;

/* the shared-memory ledger, one row per capped entity with live procs */
CREATE FUNCTION frameq.ledger(OUT kind text, OUT id bigint, OUT id2 bigint,
							  OUT used_cc int, OUT used_gpus int, OUT running int)
	RETURNS SETOF record
	AS 'MODULE_PATHNAME', 'frameq_ledger' LANGUAGE C VOLATILE STRICT;

/* this session's releases not yet applied to the ledger (they apply at commit) */
CREATE FUNCTION frameq._ledger_pending(OUT kind text, OUT id bigint, OUT id2 bigint,
									   OUT used_cc int, OUT used_gpus int, OUT running int)
	RETURNS SETOF record
	AS 'MODULE_PATHNAME', 'frameq_ledger_pending' LANGUAGE C VOLATILE STRICT;

/* forget the ledger and the dispatch hints: the next booking rebuilds the ledger */
CREATE FUNCTION frameq._ledger_reset() RETURNS void
	AS 'MODULE_PATHNAME', 'frameq_ledger_reset' LANGUAGE C VOLATILE STRICT;

/* rebuild the ledger now if it is not valid; returns true if it was rebuilt */
CREATE FUNCTION frameq._ledger_ensure() RETURNS bool
	AS 'MODULE_PATHNAME', 'frameq_ledger_ensure' LANGUAGE C VOLATILE STRICT;

/*
 * Release one proc: delete it so the triggers free everything it holds.
 * reason is the run record's reason; new_state the frame's state afterwards.
 */
CREATE FUNCTION frameq._release(proc bigint, reason text, new_state text,
								count_retry bool DEFAULT false)
	RETURNS bool
	AS 'MODULE_PATHNAME', 'frameq_release_proc' LANGUAGE C VOLATILE STRICT;

/* an SQL path made a frame waiting again: keep the layer's dispatch hint below it */
CREATE FUNCTION frameq._frame_waiting(layer bigint, number int) RETURNS void
	AS 'MODULE_PATHNAME', 'frameq_frame_waiting' LANGUAGE C VOLATILE STRICT;

/* each layer's dispatch hint: no waiting frame has a lower number */
CREATE FUNCTION frameq._dispatch_hints(OUT layer bigint, OUT low int)
	RETURNS SETOF record
	AS 'MODULE_PATHNAME', 'frameq_dispatch_hints' LANGUAGE C VOLATILE STRICT;

CREATE FUNCTION frameq._proc_before() RETURNS trigger
	AS 'MODULE_PATHNAME', 'frameq_proc_before' LANGUAGE C;
CREATE FUNCTION frameq._proc_after_insert() RETURNS trigger
	AS 'MODULE_PATHNAME', 'frameq_proc_after_insert' LANGUAGE C;
CREATE FUNCTION frameq._proc_after_delete() RETURNS trigger
	AS 'MODULE_PATHNAME', 'frameq_proc_after_delete' LANGUAGE C;
CREATE FUNCTION frameq._proc_guard_update() RETURNS trigger
	AS 'MODULE_PATHNAME', 'frameq_proc_guard_update' LANGUAGE C;
CREATE FUNCTION frameq._proc_no_truncate() RETURNS trigger
	AS 'MODULE_PATHNAME', 'frameq_proc_no_truncate' LANGUAGE C;

CREATE TRIGGER proc_before BEFORE INSERT OR DELETE ON frameq.proc
	FOR EACH STATEMENT EXECUTE FUNCTION frameq._proc_before();
CREATE TRIGGER proc_after_insert AFTER INSERT ON frameq.proc
	REFERENCING NEW TABLE AS new_procs
	FOR EACH STATEMENT EXECUTE FUNCTION frameq._proc_after_insert();
CREATE TRIGGER proc_after_delete AFTER DELETE ON frameq.proc
	FOR EACH ROW EXECUTE FUNCTION frameq._proc_after_delete();
CREATE TRIGGER proc_guard_update BEFORE UPDATE ON frameq.proc
	FOR EACH ROW EXECUTE FUNCTION frameq._proc_guard_update();
CREATE TRIGGER proc_no_truncate BEFORE TRUNCATE ON frameq.proc
	FOR EACH STATEMENT EXECUTE FUNCTION frameq._proc_no_truncate();

/*
 * What foreign keys from proc and run would guard (see proc): a frame or a
 * host named by a proc or a run record is neither deleted, nor given
 * another id, nor truncated away.  The argument is the referencing column.
 * Only deletes and id changes fire these, never the booking path.
 */
CREATE FUNCTION frameq._keep_referenced() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
	col text := TG_ARGV[0];
	used bool;
BEGIN
	IF TG_OP = 'TRUNCATE' THEN
		RAISE EXCEPTION 'cannot truncate frameq.%: procs and run records name its rows', col
			USING ERRCODE = 'feature_not_supported';
	END IF;
	IF TG_OP = 'UPDATE' AND OLD.id = NEW.id THEN
		RETURN NEW;
	END IF;
	EXECUTE format('SELECT EXISTS (SELECT 1 FROM frameq.proc WHERE %1$I = $1)
	                    OR EXISTS (SELECT 1 FROM frameq.run WHERE %1$I = $1)', col)
		INTO used USING OLD.id;
	IF used THEN
		RAISE EXCEPTION '% % is named by a proc or a run record', col, OLD.id
			USING ERRCODE = 'foreign_key_violation',
				  HINT = 'frameq keeps every attempt''s record; a frame or host that ran work stays.';
	END IF;
	RETURN CASE TG_OP WHEN 'DELETE' THEN OLD ELSE NEW END;
END
$$;

CREATE TRIGGER frame_keep_referenced BEFORE DELETE OR UPDATE OF id ON frameq.frame
	FOR EACH ROW EXECUTE FUNCTION frameq._keep_referenced('frame');
CREATE TRIGGER frame_keep_referenced_truncate BEFORE TRUNCATE ON frameq.frame
	FOR EACH STATEMENT EXECUTE FUNCTION frameq._keep_referenced('frame');
CREATE TRIGGER host_keep_referenced BEFORE DELETE OR UPDATE OF id ON frameq.host
	FOR EACH ROW EXECUTE FUNCTION frameq._keep_referenced('host');
CREATE TRIGGER host_keep_referenced_truncate BEFORE TRUNCATE ON frameq.host
	FOR EACH STATEMENT EXECUTE FUNCTION frameq._keep_referenced('host');

CREATE FUNCTION frameq.reserve(host text, token text, epoch bigint,
							   max_frames int DEFAULT NULL)
	RETURNS SETOF frameq.booking
	AS 'MODULE_PATHNAME', 'frameq_reserve' LANGUAGE C VOLATILE
	SECURITY DEFINER SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION frameq.complete(host text, token text, epoch bigint, proc bigint,
								exit_status int, exit_signal int DEFAULT 0,
								max_rss bigint DEFAULT NULL)
	RETURNS text
	AS 'MODULE_PATHNAME', 'frameq_complete' LANGUAGE C VOLATILE
	SECURITY DEFINER SET search_path = pg_catalog, pg_temp;

/* a fresh install: forget what a dropped copy left in shared memory */
SELECT frameq._ledger_reset();

/*
 * ---------------------------------------------------------------------
 * Helpers for argument checking.  Every error names the offending field
 * and carries a specific SQLSTATE; nothing is written before all checks
 * have passed.
 * ---------------------------------------------------------------------
 */

/* numeric cores -> centicores */
CREATE FUNCTION frameq._cc(value numeric, field text, allow_zero bool DEFAULT true,
						   maximum numeric DEFAULT 10000000)
RETURNS int LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
	IF value IS NULL THEN
		RETURN NULL;
	END IF;
	IF value < 0 OR (value = 0 AND NOT allow_zero) THEN
		RAISE EXCEPTION '% must be %, not %', field,
			CASE WHEN allow_zero THEN 'zero or more' ELSE 'positive' END, value
			USING ERRCODE = 'invalid_parameter_value';
	END IF;
	IF value > maximum THEN
		RAISE EXCEPTION '% is absurdly large: % cores', field, value
			USING ERRCODE = 'invalid_parameter_value',
				  HINT = format('At most %s cores here.', maximum);
	END IF;
	IF value * 100 <> trunc(value * 100) THEN
		RAISE EXCEPTION '% must be a multiple of 0.01 cores, not %', field, value
			USING ERRCODE = 'invalid_parameter_value';
	END IF;
	RETURN (value * 100)::int;
END
$$;

CREATE FUNCTION frameq._nonneg(value bigint, field text, maximum bigint DEFAULT NULL)
RETURNS bigint LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
	IF value < 0 THEN
		RAISE EXCEPTION '% must not be negative, not %', field, value
			USING ERRCODE = 'invalid_parameter_value';
	END IF;
	IF maximum IS NOT NULL AND value > maximum THEN
		RAISE EXCEPTION '% is absurdly large: % (at most %)', field, value, maximum
			USING ERRCODE = 'invalid_parameter_value';
	END IF;
	RETURN value;
END
$$;

CREATE FUNCTION frameq._not_null(value anyelement, field text)
RETURNS anyelement LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
	IF value IS NULL THEN
		RAISE EXCEPTION '% must not be null', field USING ERRCODE = 'null_value_not_allowed';
	END IF;
	RETURN value;
END
$$;

CREATE FUNCTION frameq._name(value text, field text)
RETURNS text LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
	PERFORM frameq._not_null(value, field);
	IF value !~ '^[A-Za-z0-9_.:@+-]{1,100}$' THEN
		RAISE EXCEPTION '% "%" is not a valid name', field, value
			USING ERRCODE = 'invalid_parameter_value',
				  HINT = 'Names are 1 to 100 letters, digits and _ . : @ + -.';
	END IF;
	RETURN value;
END
$$;

CREATE FUNCTION frameq._show_id(show text) RETURNS int
LANGUAGE plpgsql STABLE AS $$
DECLARE
	result int;
BEGIN
	SELECT s.id INTO result FROM frameq.show s WHERE s.name = frameq._not_null(_show_id.show, 'show');
	IF NOT FOUND THEN
		RAISE EXCEPTION 'show "%" does not exist', show USING ERRCODE = 'undefined_object';
	END IF;
	RETURN result;
END
$$;

CREATE FUNCTION frameq._allocation_id(allocation text) RETURNS int
LANGUAGE plpgsql STABLE AS $$
DECLARE
	result int;
BEGIN
	SELECT a.id INTO result FROM frameq.allocation a
	 WHERE a.name = frameq._not_null(_allocation_id.allocation, 'allocation');
	IF NOT FOUND THEN
		RAISE EXCEPTION 'allocation "%" does not exist', allocation
			USING ERRCODE = 'undefined_object';
	END IF;
	RETURN result;
END
$$;

/*
 * Check a host's token and take the host's lock: the two-key advisory lock
 * that reserve() tries, the background worker's lease expiry takes, and
 * attach() and heartbeat() wait for.  It orders everything that changes a
 * host's lease or books onto it.  Lock order everywhere: this lock, then
 * proc rows, then the host row.  Returns the host row read after locking.
 */
CREATE FUNCTION frameq._host_lock(host text, token text) RETURNS frameq.host
LANGUAGE plpgsql AS $$
DECLARE
	host_id int;
	h frameq.host;
BEGIN
	SELECT x.id INTO host_id FROM frameq.host x WHERE x.name = frameq._not_null(_host_lock.host, 'host');
	IF NOT FOUND THEN
		RAISE EXCEPTION 'host "%" is not registered', host
			USING ERRCODE = 'undefined_object',
				  HINT = 'Register it with frameq.register_host().';
	END IF;
	PERFORM pg_advisory_xact_lock(18001, host_id);		/* 18001 = 0x4651, "FQ" */
	SELECT * INTO h FROM frameq.host x WHERE x.id = host_id;
	IF token IS NULL OR h.token_hash <> sha256(convert_to(token, 'UTF8')) THEN
		RAISE EXCEPTION 'invalid token for host "%"', host USING ERRCODE = 'invalid_password';
	END IF;
	RETURN h;
END
$$;

/* an operator names a host: lock it as above, without a token */
CREATE FUNCTION frameq._host_lock_by_name(host text) RETURNS frameq.host
LANGUAGE plpgsql AS $$
DECLARE
	host_id int;
	h frameq.host;
BEGIN
	SELECT x.id INTO host_id FROM frameq.host x
	 WHERE x.name = frameq._not_null(_host_lock_by_name.host, 'host');
	IF NOT FOUND THEN
		RAISE EXCEPTION 'host "%" is not registered', host USING ERRCODE = 'undefined_object';
	END IF;
	PERFORM pg_advisory_xact_lock(18001, host_id);
	SELECT * INTO h FROM frameq.host x WHERE x.id = host_id;
	RETURN h;
END
$$;

CREATE FUNCTION frameq._lease_ttl() RETURNS interval
LANGUAGE sql STABLE AS $$ SELECT current_setting('frameq.lease_ttl')::interval $$;

/*
 * ---------------------------------------------------------------------
 * Administration
 * ---------------------------------------------------------------------
 */

CREATE FUNCTION frameq.create_allocation(name text, tag text DEFAULT NULL) RETURNS int
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
	result int;
BEGIN
	PERFORM frameq._name(name, 'name');
	IF EXISTS (SELECT 1 FROM frameq.allocation a WHERE a.name = create_allocation.name) THEN
		RAISE EXCEPTION 'allocation "%" already exists', name USING ERRCODE = 'duplicate_object';
	END IF;
	INSERT INTO frameq.allocation AS a (name, tag)
	VALUES (create_allocation.name, create_allocation.tag) RETURNING a.id INTO result;
	RETURN result;
END
$$;

CREATE FUNCTION frameq.create_show(name text) RETURNS int
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
	result int;
BEGIN
	PERFORM frameq._name(name, 'name');
	IF EXISTS (SELECT 1 FROM frameq.show s WHERE s.name = create_show.name) THEN
		RAISE EXCEPTION 'show "%" already exists', name USING ERRCODE = 'duplicate_object';
	END IF;
	INSERT INTO frameq.show AS s (name) VALUES (create_show.name) RETURNING s.id INTO result;
	RETURN result;
END
$$;

CREATE FUNCTION frameq.set_subscription(show text, allocation text, size numeric, burst numeric)
RETURNS void LANGUAGE plpgsql AS $$
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
RETURNS int LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
	show_id int := frameq._show_id(show);
	cap_cc int := frameq._cc(max_cores, 'max_cores');
	result int;
BEGIN
	PERFORM frameq._name(name, 'name');
	PERFORM frameq._nonneg(max_gpus, 'max_gpus', 100000);
	IF EXISTS (SELECT 1 FROM frameq.folder f WHERE f.show = show_id AND f.name = create_folder.name) THEN
		RAISE EXCEPTION 'folder "%" already exists in show "%"', name, show
			USING ERRCODE = 'duplicate_object';
	END IF;
	INSERT INTO frameq.folder AS f (show, name, max_cc, max_gpus)
	VALUES (show_id, create_folder.name, cap_cc, create_folder.max_gpus) RETURNING f.id INTO result;
	PERFORM pg_notify('frameq_limit', json_build_object(
		'kind', 'folder', 'id', result, 'max_cores', max_cores, 'max_gpus', max_gpus)::text);
	RETURN result;
END
$$;

CREATE FUNCTION frameq.set_folder_limits(folder int, max_cores numeric, max_gpus int)
RETURNS void LANGUAGE plpgsql AS $$
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
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
	result int;
BEGIN
	PERFORM frameq._name(name, 'name');
	PERFORM frameq._nonneg(frameq._not_null(max_running, 'max_running'), 'max_running', 10000000);
	IF EXISTS (SELECT 1 FROM frameq.limits l WHERE l.name = create_limit.name) THEN
		RAISE EXCEPTION 'limit "%" already exists', name USING ERRCODE = 'duplicate_object';
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
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
	limit_id int;
BEGIN
	PERFORM frameq._nonneg(frameq._not_null(max_running, 'max_running'), 'max_running', 10000000);
	UPDATE frameq.limits l SET max_running = set_limit.max_running, changed_at = clock_timestamp()
	 WHERE l.name = frameq._not_null(set_limit.name, 'name')
	RETURNING l.id INTO limit_id;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'limit "%" does not exist', name USING ERRCODE = 'undefined_object';
	END IF;
	PERFORM pg_notify('frameq_limit', json_build_object(
		'kind', 'limit', 'id', limit_id, 'max_running', max_running)::text);
END
$$;

CREATE FUNCTION frameq.register_host(name text, allocation text, cores numeric, memory bigint,
									 gpus int DEFAULT 0, gpu_memory bigint DEFAULT 0,
									 tags text[] DEFAULT '{}')
RETURNS text LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
	alloc_id int := frameq._allocation_id(allocation);
	host_cc int := frameq._cc(frameq._not_null(cores, 'cores'), 'cores', false, 100000);
	host_token text := frameq._random_token();
BEGIN
	PERFORM frameq._name(name, 'name');
	PERFORM frameq._nonneg(frameq._not_null(memory, 'memory'), 'memory', 1::bigint << 50);
	IF memory = 0 THEN
		RAISE EXCEPTION 'memory must be positive' USING ERRCODE = 'invalid_parameter_value';
	END IF;
	PERFORM frameq._nonneg(frameq._not_null(gpus, 'gpus'), 'gpus', 1024);
	PERFORM frameq._nonneg(frameq._not_null(gpu_memory, 'gpu_memory'), 'gpu_memory', 1::bigint << 50);
	IF tags IS NULL OR array_position(tags, NULL) IS NOT NULL THEN
		RAISE EXCEPTION 'tags must not be or contain null' USING ERRCODE = 'null_value_not_allowed';
	END IF;
	IF EXISTS (SELECT 1 FROM frameq.host h WHERE h.name = register_host.name) THEN
		RAISE EXCEPTION 'host "%" is already registered', name USING ERRCODE = 'duplicate_object';
	END IF;
	INSERT INTO frameq.host (name, allocation, cores_cc, memory, gpus, gpu_memory, tags,
							 token_hash, idle_cc, idle_memory, idle_gpus, idle_gpu_memory)
	VALUES (register_host.name, alloc_id, host_cc, register_host.memory,
			register_host.gpus, register_host.gpu_memory, register_host.tags,
			sha256(convert_to(host_token, 'UTF8')), host_cc,
			register_host.memory, register_host.gpus, register_host.gpu_memory);
	RETURN host_token;
END
$$;

/*
 * ---------------------------------------------------------------------
 * Submission
 * ---------------------------------------------------------------------
 */

/* one frame range item list: "1-100", "1-100x5", "1,3,7", or a mix */
CREATE FUNCTION frameq._frame_numbers(spec text, field text) RETURNS SETOF int
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
	item text;
	m text[];
	first int;
	last int;
	step int;
	total bigint := 0;
BEGIN
	IF spec IS NULL OR btrim(spec) = '' THEN
		RAISE EXCEPTION '% must be a frame range such as "1-100", "1-100x5" or "1,3,7"', field
			USING ERRCODE = 'invalid_parameter_value';
	END IF;
	FOREACH item IN ARRAY string_to_array(replace(spec, ' ', ''), ',') LOOP
		m := regexp_match(item, '^(-?[0-9]{1,9})(?:-(-?[0-9]{1,9})(?:x([0-9]{1,9}))?)?$');
		IF m IS NULL THEN
			RAISE EXCEPTION '% has a malformed item "%"', field, item
				USING ERRCODE = 'invalid_parameter_value',
					  HINT = 'Use "1-100", "1-100x5" or "1,3,7".';
		END IF;
		first := m[1]::int;
		last := coalesce(m[2]::int, first);
		step := coalesce(m[3]::int, 1);
		IF last < first THEN
			RAISE EXCEPTION '% item "%" ends before it starts', field, item
				USING ERRCODE = 'invalid_parameter_value';
		END IF;
		IF step < 1 THEN
			RAISE EXCEPTION '% item "%" has a step below 1', field, item
				USING ERRCODE = 'invalid_parameter_value';
		END IF;
		total := total + ((last::bigint - first) / step + 1);
		IF total > 1000000 THEN
			RAISE EXCEPTION '% has more than 1000000 frames', field
				USING ERRCODE = 'invalid_parameter_value';
		END IF;
		RETURN QUERY SELECT generate_series(first, last, step);
	END LOOP;
END
$$;

CREATE FUNCTION frameq._spec_value(obj jsonb, key text, path text, want text)
RETURNS jsonb LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
	v jsonb := obj -> key;
BEGIN
	IF v IS NULL OR jsonb_typeof(v) = 'null' THEN
		RETURN NULL;
	END IF;
	IF jsonb_typeof(v) <> want AND NOT (want = 'size' AND jsonb_typeof(v) IN ('number', 'string')) THEN
		RAISE EXCEPTION '%.% must be a%', path, key,
			CASE want WHEN 'size' THEN ' number of bytes or a size such as "4GB"'
					  WHEN 'array' THEN 'n array' WHEN 'object' THEN 'n object'
					  ELSE ' ' || want END
			USING ERRCODE = 'invalid_parameter_value';
	END IF;
	RETURN v;
END
$$;

CREATE FUNCTION frameq._spec_int(obj jsonb, key text, path text, dflt int,
								 minimum int, maximum int)
RETURNS int LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
	v jsonb := frameq._spec_value(obj, key, path, 'number');
	n numeric;
BEGIN
	IF v IS NULL THEN
		RETURN dflt;
	END IF;
	n := v::numeric;
	IF n <> trunc(n) OR n < minimum OR n > maximum THEN
		RAISE EXCEPTION '%.% must be a whole number from % to %, not %', path, key,
			minimum, maximum, n
			USING ERRCODE = 'invalid_parameter_value';
	END IF;
	RETURN n::int;
END
$$;

CREATE FUNCTION frameq._spec_bool(obj jsonb, key text, path text, dflt bool)
RETURNS bool LANGUAGE sql IMMUTABLE AS $$
	SELECT coalesce(frameq._spec_value(obj, key, path, 'boolean')::bool, dflt)
$$;

CREATE FUNCTION frameq._spec_size(obj jsonb, key text, path text) RETURNS bigint
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
	v jsonb := frameq._spec_value(obj, key, path, 'size');
	n numeric;
BEGIN
	IF v IS NULL THEN
		RETURN 0;
	END IF;
	BEGIN
		IF jsonb_typeof(v) = 'number' THEN
			n := v::numeric;
		ELSE
			n := pg_size_bytes(v #>> '{}');
		END IF;
	EXCEPTION WHEN invalid_parameter_value OR numeric_value_out_of_range THEN
		n := NULL;
	END;
	IF n IS NULL OR n < 0 OR n <> trunc(n) OR n > (1::bigint << 50) THEN
		RAISE EXCEPTION '%.% must be a size in bytes (or such as "4GB"), not %', path, key, v
			USING ERRCODE = 'invalid_parameter_value';
	END IF;
	RETURN n::bigint;
END
$$;

CREATE FUNCTION frameq._spec_tags(obj jsonb, key text, path text) RETURNS text[]
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
	v jsonb := frameq._spec_value(obj, key, path, 'array');
BEGIN
	IF v IS NULL THEN
		RETURN '{}';
	END IF;
	IF EXISTS (SELECT 1 FROM jsonb_array_elements(v) e WHERE jsonb_typeof(e) <> 'string'
				 OR e #>> '{}' = '') THEN
		RAISE EXCEPTION '%.% must be an array of non-empty strings', path, key
			USING ERRCODE = 'invalid_parameter_value';
	END IF;
	RETURN ARRAY(SELECT DISTINCT e FROM jsonb_array_elements_text(v) e ORDER BY 1);
END
$$;

CREATE FUNCTION frameq._spec_unknown(obj jsonb, allowed text[], path text) RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
	k text;
BEGIN
	SELECT key INTO k FROM jsonb_object_keys(obj) key WHERE key <> ALL (allowed) ORDER BY 1 LIMIT 1;
	IF k IS NOT NULL THEN
		RAISE EXCEPTION '%.% is not a known field', path, k
			USING ERRCODE = 'invalid_parameter_value',
				  HINT = format('Known fields: %s.', array_to_string(allowed, ', '));
	END IF;
END
$$;

CREATE FUNCTION frameq.submit(spec jsonb) RETURNS bigint
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
	show_id int;
	folder_id int;
	job_name text;
	priority int;
	max_retries int;
	auto_eat bool;
	max_cc int;
	max_gpus int;
	paused bool;
	layers jsonb;
	layer jsonb;
	path text;
	i int;
	l_name text[] := '{}';
	l_command text[] := '{}';
	l_range text[] := '{}';
	l_min_cc int[] := '{}';
	l_max_cc int[] := '{}';
	l_threadable bool[] := '{}';
	l_memory bigint[] := '{}';
	l_gpus int[] := '{}';
	l_gpu_memory bigint[] := '{}';
	l_order int[] := '{}';
	l_env jsonb[] := '{}';
	l_tags jsonb[] := '{}';
	l_limits jsonb[] := '{}';
	v jsonb;
	n_frames bigint := 0;
	job_id bigint;
	layer_id bigint;
	lim text;
	lim_id int;
BEGIN
	IF spec IS NULL OR jsonb_typeof(spec) <> 'object' THEN
		RAISE EXCEPTION 'spec must be a JSON object' USING ERRCODE = 'invalid_parameter_value';
	END IF;
	PERFORM frameq._spec_unknown(spec, ARRAY['show', 'folder', 'name', 'priority',
		'max_retries', 'auto_eat', 'max_cores', 'max_gpus', 'paused', 'layers'], 'spec');

	v := frameq._spec_value(spec, 'show', 'spec', 'string');
	IF v IS NULL THEN
		RAISE EXCEPTION 'spec.show is required' USING ERRCODE = 'invalid_parameter_value';
	END IF;
	SELECT s.id INTO show_id FROM frameq.show s WHERE s.name = v #>> '{}';
	IF NOT FOUND THEN
		RAISE EXCEPTION 'spec.show: show "%" does not exist', v #>> '{}'
			USING ERRCODE = 'undefined_object';
	END IF;

	v := frameq._spec_value(spec, 'folder', 'spec', 'string');
	IF v IS NOT NULL THEN
		SELECT f.id INTO folder_id FROM frameq.folder f WHERE f.show = show_id AND f.name = v #>> '{}';
		IF NOT FOUND THEN
			RAISE EXCEPTION 'spec.folder: folder "%" does not exist in show "%"',
				v #>> '{}', spec ->> 'show' USING ERRCODE = 'undefined_object';
		END IF;
	END IF;

	v := frameq._spec_value(spec, 'name', 'spec', 'string');
	IF v IS NULL OR v #>> '{}' = '' THEN
		RAISE EXCEPTION 'spec.name is required' USING ERRCODE = 'invalid_parameter_value';
	END IF;
	job_name := v #>> '{}';
	/* names reach shell commands through #JOB#: no spaces or shell characters */
	IF job_name !~ '^[A-Za-z0-9_.:@+-]{1,200}$' THEN
		RAISE EXCEPTION 'spec.name "%" is not a valid job name', job_name
			USING ERRCODE = 'invalid_parameter_value',
				  HINT = 'Job names are 1 to 200 letters, digits and _ . : @ + -.';
	END IF;
	priority := frameq._spec_int(spec, 'priority', 'spec', 0, -1000000, 1000000);
	max_retries := frameq._spec_int(spec, 'max_retries', 'spec', 3, 0, 1000);
	auto_eat := frameq._spec_bool(spec, 'auto_eat', 'spec', false);
	paused := frameq._spec_bool(spec, 'paused', 'spec', false);
	max_cc := frameq._cc(frameq._spec_value(spec, 'max_cores', 'spec', 'number')::numeric,
						 'spec.max_cores');
	max_gpus := frameq._spec_int(spec, 'max_gpus', 'spec', NULL, 0, 100000);

	layers := frameq._spec_value(spec, 'layers', 'spec', 'array');
	IF layers IS NULL OR jsonb_array_length(layers) = 0 THEN
		RAISE EXCEPTION 'spec.layers must be a non-empty array' USING ERRCODE = 'invalid_parameter_value';
	END IF;

	FOR i IN 0 .. jsonb_array_length(layers) - 1 LOOP
		layer := layers -> i;
		path := format('spec.layers[%s]', i);
		IF jsonb_typeof(layer) <> 'object' THEN
			RAISE EXCEPTION '% must be an object', path USING ERRCODE = 'invalid_parameter_value';
		END IF;
		PERFORM frameq._spec_unknown(layer, ARRAY['name', 'command', 'range', 'cores',
			'cores_max', 'threadable', 'memory', 'gpus', 'gpu_memory', 'tags', 'limits',
			'dispatch_order', 'env'], path);

		v := frameq._spec_value(layer, 'name', path, 'string');
		IF v IS NULL OR v #>> '{}' = '' THEN
			RAISE EXCEPTION '%.name is required', path USING ERRCODE = 'invalid_parameter_value';
		END IF;
		IF (v #>> '{}') !~ '^[A-Za-z0-9_.:@+-]{1,100}$' THEN
			RAISE EXCEPTION '%.name "%" is not a valid layer name', path, v #>> '{}'
				USING ERRCODE = 'invalid_parameter_value',
					  HINT = 'Layer names are 1 to 100 letters, digits and _ . : @ + -.';
		END IF;
		IF (v #>> '{}') = ANY (l_name) THEN
			RAISE EXCEPTION '%.name "%" is used by an earlier layer', path, v #>> '{}'
				USING ERRCODE = 'invalid_parameter_value';
		END IF;
		l_name := l_name || (v #>> '{}');

		v := frameq._spec_value(layer, 'command', path, 'string');
		IF v IS NULL OR btrim(v #>> '{}') = '' THEN
			RAISE EXCEPTION '%.command is required', path USING ERRCODE = 'invalid_parameter_value';
		END IF;
		l_command := l_command || (v #>> '{}');

		v := frameq._spec_value(layer, 'range', path, 'string');
		IF v IS NULL THEN
			RAISE EXCEPTION '%.range is required', path USING ERRCODE = 'invalid_parameter_value';
		END IF;
		l_range := l_range || (v #>> '{}');
		/* parse now, so that a bad range fails before anything is written */
		n_frames := n_frames + (SELECT count(*) FROM frameq._frame_numbers(v #>> '{}', path || '.range'));
		IF (SELECT count(*) <> count(DISTINCT n) FROM frameq._frame_numbers(v #>> '{}', path || '.range') n) THEN
			RAISE EXCEPTION '%.range lists a frame more than once', path
				USING ERRCODE = 'invalid_parameter_value';
		END IF;

		l_min_cc := l_min_cc || coalesce(frameq._cc(frameq._spec_value(layer, 'cores', path, 'number')::numeric,
													path || '.cores', false, 100000), 100);
		l_threadable := l_threadable || frameq._spec_bool(layer, 'threadable', path, false);
		v := frameq._spec_value(layer, 'cores_max', path, 'number');
		IF v IS NULL THEN
			l_max_cc := l_max_cc || l_min_cc[i + 1];
		ELSE
			l_max_cc := l_max_cc || frameq._cc(v::numeric, path || '.cores_max', false, 100000);
			IF l_max_cc[i + 1] < l_min_cc[i + 1] THEN
				RAISE EXCEPTION '%.cores_max must not be below %.cores', path, path
					USING ERRCODE = 'invalid_parameter_value';
			END IF;
			IF l_max_cc[i + 1] > l_min_cc[i + 1] AND NOT l_threadable[i + 1] THEN
				RAISE EXCEPTION '%.cores_max above %.cores needs "threadable": true', path, path
					USING ERRCODE = 'invalid_parameter_value';
			END IF;
		END IF;
		l_memory := l_memory || frameq._spec_size(layer, 'memory', path);
		l_gpus := l_gpus || frameq._spec_int(layer, 'gpus', path, 0, 0, 1024);
		l_gpu_memory := l_gpu_memory || frameq._spec_size(layer, 'gpu_memory', path);
		l_order := l_order || frameq._spec_int(layer, 'dispatch_order', path, i, -1000000, 1000000);
		l_tags := l_tags || to_jsonb(frameq._spec_tags(layer, 'tags', path));
		v := frameq._spec_value(layer, 'env', path, 'object');
		IF v IS NOT NULL AND EXISTS (SELECT 1 FROM jsonb_each(v) e
									  WHERE jsonb_typeof(e.value) <> 'string'
										 OR e.key !~ '^[A-Za-z_][A-Za-z0-9_]*$') THEN
			RAISE EXCEPTION '%.env must map variable names to strings', path
				USING ERRCODE = 'invalid_parameter_value';
		END IF;
		l_env := l_env || coalesce(v, '{}');
		l_limits := l_limits || to_jsonb(frameq._spec_tags(layer, 'limits', path));
		FOR lim IN SELECT jsonb_array_elements_text(l_limits[i + 1]) LOOP
			IF NOT EXISTS (SELECT 1 FROM frameq.limits lm WHERE lm.name = lim) THEN
				RAISE EXCEPTION '%.limits: limit "%" does not exist', path, lim
					USING ERRCODE = 'undefined_object';
			END IF;
		END LOOP;
		IF jsonb_array_length(l_limits[i + 1]) > 12 THEN
			RAISE EXCEPTION '%.limits has more than 12 limits', path
				USING ERRCODE = 'invalid_parameter_value';
		END IF;
	END LOOP;
	IF n_frames > 1000000 THEN
		RAISE EXCEPTION 'spec.layers have more than 1000000 frames in all'
			USING ERRCODE = 'invalid_parameter_value';
	END IF;

	/* everything checked: write */
	INSERT INTO frameq.job AS j (show, folder, name, priority, max_retries, auto_eat,
							max_cc, max_gpus, state)
	VALUES (show_id, folder_id, job_name, priority, max_retries, auto_eat,
			max_cc, max_gpus, CASE WHEN paused THEN 'paused' ELSE 'active' END)
	RETURNING j.id INTO job_id;

	FOR i IN 1 .. array_length(l_name, 1) LOOP
		INSERT INTO frameq.layer (job, name, command, dispatch_order, min_cc, max_cc,
								  threadable, memory, gpus, gpu_memory, tags, env)
		VALUES (job_id, l_name[i], l_command[i], l_order[i], l_min_cc[i], l_max_cc[i],
				l_threadable[i], l_memory[i], l_gpus[i], l_gpu_memory[i],
				ARRAY(SELECT jsonb_array_elements_text(l_tags[i])), l_env[i])
		RETURNING layer.id INTO layer_id;
		INSERT INTO frameq.layer_limit (layer, limit_id)
		SELECT layer_id, lm.id FROM frameq.limits lm
		 WHERE lm.name IN (SELECT jsonb_array_elements_text(l_limits[i]));
		INSERT INTO frameq.frame (job, layer, number)
		SELECT job_id, layer_id, n FROM frameq._frame_numbers(l_range[i], 'range') n;
	END LOOP;
	RETURN job_id;
END
$$;

CREATE FUNCTION frameq.set_job(job bigint, priority int DEFAULT NULL,
							   max_cores numeric DEFAULT NULL, max_gpus int DEFAULT NULL,
							   paused bool DEFAULT NULL, clear_caps bool DEFAULT false)
RETURNS void LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
	j frameq.job;
	cap_cc int := frameq._cc(max_cores, 'max_cores');
	caps_changed bool := clear_caps OR max_cores IS NOT NULL OR max_gpus IS NOT NULL;
BEGIN
	PERFORM frameq._nonneg(max_gpus, 'max_gpus', 100000);
	IF priority NOT BETWEEN -1000000 AND 1000000 THEN
		RAISE EXCEPTION 'priority must be from -1000000 to 1000000, not %', priority
			USING ERRCODE = 'invalid_parameter_value';
	END IF;
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

/*
 * ---------------------------------------------------------------------
 * Host agent: attach and heartbeat.  reserve() and complete() are in C.
 * ---------------------------------------------------------------------
 */

CREATE FUNCTION frameq.attach(host text, token text, boot_id text,
							  OUT epoch bigint, OUT lease_ttl interval, OUT kill bigint[],
							  OUT host_id int, OUT channel text)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
	h frameq.host := frameq._host_lock(host, token);
	p record;
BEGIN
	PERFORM frameq._not_null(boot_id, 'boot_id');
	IF boot_id = '' OR length(boot_id) > 200 THEN
		RAISE EXCEPTION 'boot_id must be 1 to 200 characters' USING ERRCODE = 'invalid_parameter_value';
	END IF;
	IF h.boot_id IS DISTINCT FROM boot_id AND h.boot_id IS NOT NULL THEN
		/* the machine rebooted: nothing of its earlier life can still run */
		FOR p IN SELECT x.id, x.state, x.want_state FROM frameq.proc x WHERE x.host = h.id LOOP
			PERFORM frameq._release(p.id, 'host_rebooted',
									CASE WHEN p.state = 'killing' THEN p.want_state ELSE 'waiting' END);
		END LOOP;
	ELSE
		/* same boot: the earlier agent's renders may live on; order them killed */
		UPDATE frameq.proc x SET state = 'killing', kill_reason = 'agent re-attached',
			   kill_at = clock_timestamp(), want_state = 'waiting'
		 WHERE x.host = h.id AND x.state = 'running';
	END IF;
	lease_ttl := frameq._lease_ttl();
	UPDATE frameq.host x SET epoch = h.epoch + 1, boot_id = attach.boot_id,
		   lease_expires_at = clock_timestamp() + attach.lease_ttl,
		   last_renewal_at = clock_timestamp(),
		   /* a host down only because it lost its lease is back */
		   state = CASE WHEN x.down_reason = 'lease_lost' THEN 'up' ELSE x.state END,
		   down_reason = CASE WHEN x.down_reason = 'lease_lost' THEN NULL ELSE x.down_reason END
	 WHERE x.id = h.id;
	epoch := h.epoch + 1;
	kill := ARRAY(SELECT x.id FROM frameq.proc x WHERE x.host = h.id ORDER BY x.id);
	/* where the worker announces this host's kill orders: LISTEN on it */
	host_id := h.id;
	channel := 'frameq_host_' || h.id;
END
$$;

CREATE FUNCTION frameq.heartbeat(host text, token text, epoch bigint, running bigint[],
								 OUT lease_ttl interval, OUT kill bigint[])
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
	h frameq.host := frameq._host_lock(host, token);
	p record;
	zombies bigint[];
BEGIN
	PERFORM frameq._not_null(epoch, 'epoch');
	IF running IS NULL THEN
		running := '{}';
	END IF;
	IF array_position(running, NULL) IS NOT NULL THEN
		RAISE EXCEPTION 'running must not contain null' USING ERRCODE = 'null_value_not_allowed';
	END IF;
	IF epoch <> h.epoch THEN
		RAISE EXCEPTION 'lease epoch % of host "%" is not current', epoch, host
			USING ERRCODE = 'FQ001', DETAIL = format('The host''s current epoch is %s.', h.epoch),
				  HINT = 'The agent must stop its renders and call frameq.attach() again.';
	END IF;
	/*
	 * An expired lease is never revived.  In the quarantine after a start
	 * every lease is being re-armed, so only one the worker has ended
	 * (NULL) counts as expired then.
	 */
	IF h.lease_expires_at IS NULL
	   OR (h.lease_expires_at <= clock_timestamp() AND NOT frameq._in_quarantine()) THEN
		RAISE EXCEPTION 'lease of host "%" has expired', host
			USING ERRCODE = 'FQ002',
				  HINT = 'The agent must stop its renders and call frameq.attach() again.';
	END IF;

	/* kill orders the host no longer lists are confirmed dead */
	FOR p IN SELECT x.id, x.want_state FROM frameq.proc x
			  WHERE x.host = h.id AND x.state = 'killing' AND x.id <> ALL (heartbeat.running) LOOP
		PERFORM frameq._release(p.id, 'killed', p.want_state);
	END LOOP;
	/* bookings the host has demonstrably seen and no longer runs were lost */
	FOR p IN SELECT x.id FROM frameq.proc x
			  WHERE x.host = h.id AND x.state = 'running' AND x.epoch = h.epoch
				AND x.booked_at < h.last_renewal_at AND x.id <> ALL (heartbeat.running) LOOP
		PERFORM frameq._release(p.id, 'lost_by_agent', 'waiting');
	END LOOP;
	/* anything listed that is not live here and now is a zombie: kill it */
	zombies := ARRAY(SELECT r FROM unnest(heartbeat.running) r
					  WHERE NOT EXISTS (SELECT 1 FROM frameq.proc x
										 WHERE x.id = r AND x.host = h.id
										   AND x.epoch = h.epoch));
	lease_ttl := frameq._lease_ttl();
	UPDATE frameq.host x SET lease_expires_at = clock_timestamp() + heartbeat.lease_ttl,
		   last_renewal_at = clock_timestamp()
	 WHERE x.id = h.id;
	kill := ARRAY(SELECT x.id FROM frameq.proc x WHERE x.host = h.id AND x.state = 'killing'
				  UNION SELECT unnest(zombies) ORDER BY 1);
END
$$;

/*
 * True iff the proc is live and not being killed.  A render calls it in the
 * transaction that publishes its output.  It is a fence, not a look: the
 * KEY SHARE lock it takes on the proc row makes any release (a DELETE of
 * the row) wait until the publishing transaction has ended, so the frame
 * cannot be booked elsewhere between the check and the publish.  A kill
 * order (an UPDATE that leaves the key alone) does not wait for it.
 */
CREATE FUNCTION frameq.owns(proc bigint) RETURNS boolean
LANGUAGE sql VOLATILE AS $$
	SELECT EXISTS (SELECT 1 FROM frameq.proc p WHERE p.id = owns.proc AND p.state = 'running'
					  FOR KEY SHARE)
$$;

/*
 * ---------------------------------------------------------------------
 * Operator actions.  None of them ever releases a running frame: each
 * turns its proc into a kill order (state 'killing', with the frame state
 * wanted on release).  The frame keeps its proc, and counts against every
 * cap and its host, until the host confirms the kill (heartbeat, complete),
 * its lease provably expires, it attaches after a reboot, or an operator
 * calls confirm_host_dead().  On a frame that is not running they act at
 * once.
 * ---------------------------------------------------------------------
 */

CREATE FUNCTION frameq._finish_job_if_done(job bigint) RETURNS void
	AS 'MODULE_PATHNAME', 'frameq_finish_job_if_done' LANGUAGE C VOLATILE STRICT;

/* turn a proc into a kill order; a later order replaces the wanted end state */
CREATE FUNCTION frameq._kill_order(proc bigint, reason text, want text) RETURNS bool
LANGUAGE plpgsql AS $$
BEGIN
	UPDATE frameq.proc x
	   SET state = 'killing', kill_reason = _kill_order.reason, want_state = want,
		   kill_at = coalesce(x.kill_at, clock_timestamp())
	 WHERE x.id = _kill_order.proc;
	RETURN FOUND;
END
$$;

CREATE FUNCTION frameq._reason(reason text) RETURNS text
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
	PERFORM frameq._not_null(reason, 'reason');
	IF reason = '' OR length(reason) > 500 THEN
		RAISE EXCEPTION 'reason must be 1 to 500 characters' USING ERRCODE = 'invalid_parameter_value';
	END IF;
	RETURN reason;
END
$$;

/*
 * Act on one frame: order its proc killed if it is running, or move it from
 * one of the states in "from" to "target" at once.  Lock order is the one
 * complete() uses (proc row, then frame row); a frame booked or released
 * between the two looks is looked at again.  Returns what was done.
 */
CREATE FUNCTION frameq._frame_action(frame bigint, reason text, want text, from_states text[],
									 target text)
RETURNS text LANGUAGE plpgsql AS $$
DECLARE
	f frameq.frame;
	p bigint;
BEGIN
	FOR attempt IN 1 .. 100 LOOP
		SELECT x.id INTO p FROM frameq.proc x WHERE x.frame = _frame_action.frame;
		IF FOUND AND frameq._kill_order(p, reason, want) THEN
			RETURN 'kill order';
		END IF;
		/* an operator's retry of a finished frame gives it its retries back */
		UPDATE frameq.frame x SET state = target, version = x.version + 1,
			   retries = CASE WHEN target = 'waiting' THEN 0 ELSE x.retries END
		 WHERE x.id = _frame_action.frame AND x.state = ANY (from_states)
		RETURNING * INTO f;
		IF FOUND THEN
			IF target = 'waiting' THEN
				PERFORM frameq._frame_waiting(f.layer, f.number);
				UPDATE frameq.job j SET state = 'active', finished_at = NULL
				 WHERE j.id = f.job AND j.state = 'finished';
			ELSE
				/*
				 * A completion in flight may have seen this frame still
				 * waiting and left the job open: wait for every one of them
				 * (a release deletes its proc row, which our KEY SHARE lock
				 * waits for) before deciding whether the job is finished.
				 */
				PERFORM 1 FROM frameq.proc x WHERE x.job = f.job FOR KEY SHARE;
				PERFORM frameq._finish_job_if_done(f.job);
			END IF;
			RETURN target;
		END IF;
		SELECT * INTO f FROM frameq.frame x WHERE x.id = _frame_action.frame;
		IF NOT FOUND THEN
			RAISE EXCEPTION 'frame % does not exist', frame USING ERRCODE = 'undefined_object';
		END IF;
		IF f.state <> 'running' THEN
			RETURN 'nothing';	/* already in a state this action leaves alone */
		END IF;
		/* running but its proc went away between our looks: look again */
	END LOOP;
	RAISE EXCEPTION 'frame % kept changing state', frame USING ERRCODE = 'lock_not_available';
END
$$;

CREATE FUNCTION frameq.kill_frame(frame bigint, reason text) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
	st text;
BEGIN
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

CREATE FUNCTION frameq.retry_frame(frame bigint) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
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

CREATE FUNCTION frameq.eat_frame(frame bigint) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
	st text;
BEGIN
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

CREATE FUNCTION frameq.kill_job(job bigint, reason text) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
	j frameq.job;
	f bigint;
BEGIN
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

CREATE FUNCTION frameq.set_host_state(host text, state text) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
	h frameq.host;
BEGIN
	IF state IS NULL OR state NOT IN ('up', 'down', 'repair') THEN
		RAISE EXCEPTION 'state must be up, down or repair, not %', coalesce(state, 'null')
			USING ERRCODE = CASE WHEN state IS NULL THEN 'null_value_not_allowed'
								 ELSE 'invalid_parameter_value' END;
	END IF;
	h := frameq._host_lock_by_name(host);
	IF state <> 'up' THEN
		/* its work is ordered killed; the frames stay held until that is confirmed */
		PERFORM frameq._kill_order(x.id, format('host set %s', set_host_state.state), 'waiting')
		   FROM frameq.proc x WHERE x.host = h.id AND x.state = 'running';
	END IF;
	UPDATE frameq.host x SET state = set_host_state.state,
		   down_reason = CASE WHEN set_host_state.state = 'up' THEN NULL ELSE 'operator' END
	 WHERE x.id = h.id;
END
$$;

/*
 * The operator asserts the machine is off: release its procs now.  The
 * host's epoch moves on, so anything of it that still reports is fenced.
 */
CREATE FUNCTION frameq.confirm_host_dead(host text) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
	h frameq.host := frameq._host_lock_by_name(host);
	p record;
BEGIN
	FOR p IN SELECT x.id, x.state, x.want_state FROM frameq.proc x WHERE x.host = h.id ORDER BY x.id LOOP
		PERFORM frameq._release(p.id, 'operator',
								CASE WHEN p.state = 'killing' THEN p.want_state ELSE 'waiting' END);
	END LOOP;
	UPDATE frameq.host x SET epoch = x.epoch + 1, lease_expires_at = NULL,
		   state = CASE WHEN x.state = 'up' THEN 'down' ELSE x.state END,
		   down_reason = CASE WHEN x.state = 'up' THEN 'operator' ELSE x.down_reason END
	 WHERE x.id = h.id;
END
$$;

/*
 * ---------------------------------------------------------------------
 * The background worker's steps (src/worker.c runs them, one transaction
 * per round)
 * ---------------------------------------------------------------------
 */

/* the lease period: lease_ttl * (1 + clock_drift) + lease_margin */
CREATE FUNCTION frameq.lease_period() RETURNS interval
LANGUAGE sql STABLE AS $$
	SELECT current_setting('frameq.lease_ttl')::interval
		   * (1 + current_setting('frameq.clock_drift')::float8)
		   + current_setting('frameq.lease_margin')::interval
$$;

/* after a start or a clock jump: every current lease runs a full ttl from now */
CREATE FUNCTION frameq._rearm_leases() RETURNS bigint
LANGUAGE sql AS $$
	WITH r AS (
		UPDATE frameq.host SET lease_expires_at = clock_timestamp() + frameq._lease_ttl()
		 WHERE lease_expires_at IS NOT NULL RETURNING 1)
	SELECT count(*) FROM r
$$;

/*
 * Hosts whose last renewal (or "since", the server's start or last clock
 * jump, if later) is more than a lease period old have lost their lease:
 * release their procs as host_lost, move their epoch on, mark them down.
 * Each host is re-checked under its lock, so a heartbeat that got there
 * first wins.
 */
CREATE FUNCTION frameq._expire_leases(since timestamptz, at timestamptz DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
	period interval := frameq.lease_period();
	/*
	 * "Now" as the worker read it, next to its clock-jump check: a step of
	 * the clock after that check must not make leases look old in this
	 * round (the next round sees the jump).
	 */
	at_time timestamptz := coalesce(at, clock_timestamp());
	candidate int;
	h frameq.host;
	p record;
	n bigint := 0;
BEGIN
	FOR candidate IN SELECT x.id FROM frameq.host x
					  WHERE x.lease_expires_at IS NOT NULL
						AND greatest(x.last_renewal_at, since) + period < at_time
					  ORDER BY x.id LOOP
		PERFORM pg_advisory_xact_lock(18001, candidate);
		SELECT * INTO h FROM frameq.host x WHERE x.id = candidate;
		CONTINUE WHEN h.lease_expires_at IS NULL
				   OR greatest(h.last_renewal_at, since) + period >= at_time;
		FOR p IN SELECT x.id, x.state, x.want_state FROM frameq.proc x
				  WHERE x.host = h.id ORDER BY x.id LOOP
			PERFORM frameq._release(p.id, 'host_lost',
									CASE WHEN p.state = 'killing' THEN p.want_state ELSE 'waiting' END);
		END LOOP;
		UPDATE frameq.host x SET lease_expires_at = NULL, epoch = x.epoch + 1,
			   state = CASE WHEN x.state = 'up' THEN 'down' ELSE x.state END,
			   down_reason = CASE WHEN x.state = 'up' THEN 'lease_lost' ELSE x.down_reason END
		 WHERE x.id = h.id;
		n := n + 1;
	END LOOP;
	RETURN n;
END
$$;

/* announce every kill order not yet sent, or not confirmed since the last send */
CREATE FUNCTION frameq._send_kills(resend_ms int) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
	p record;
	n bigint := 0;
BEGIN
	FOR p IN WITH due AS (
				UPDATE frameq.proc x SET kill_sent_at = clock_timestamp()
				 WHERE x.state = 'killing'
				   AND (x.kill_sent_at IS NULL
						OR x.kill_sent_at <= clock_timestamp() - make_interval(secs => resend_ms / 1000.0))
				RETURNING x.id, x.host, x.kill_reason)
			 SELECT * FROM due ORDER BY host, id LOOP
		PERFORM pg_notify('frameq_host_' || p.host,
						  json_build_object('proc', p.id, 'reason', p.kill_reason)::text);
		n := n + 1;
	END LOOP;
	RETURN n;
END
$$;

CREATE FUNCTION frameq._in_quarantine() RETURNS bool
	AS 'MODULE_PATHNAME', 'frameq_in_quarantine_sql' LANGUAGE C VOLATILE STRICT;

CREATE FUNCTION frameq.worker_status(OUT started bool, OUT quarantine_start timestamptz,
									 OUT quarantine_until timestamptz,
									 OUT leases_since timestamptz)
	AS 'MODULE_PATHNAME', 'frameq_worker_status' LANGUAGE C VOLATILE STRICT;

/*
 * ---------------------------------------------------------------------
 * Observation
 * ---------------------------------------------------------------------
 */

CREATE VIEW frameq.frames AS
SELECT f.id AS frame, f.job, f.layer, f.number AS frame_number, f.state, f.retries,
	   f.attempts, p.id AS proc, h.name AS host, p.state AS proc_state
  FROM frameq.frame f
  LEFT JOIN frameq.proc p ON p.frame = f.id
  LEFT JOIN frameq.host h ON h.id = p.host;

CREATE VIEW frameq.job_progress AS
SELECT j.id AS job, j.name, j.state,
	   count(f.id) AS total,
	   count(f.id) FILTER (WHERE f.state = 'waiting') AS waiting,
	   count(f.id) FILTER (WHERE f.state = 'depend') AS depend,
	   count(f.id) FILTER (WHERE f.state = 'running') AS running,
	   count(f.id) FILTER (WHERE f.state = 'succeeded') AS succeeded,
	   count(f.id) FILTER (WHERE f.state = 'dead') AS dead,
	   count(f.id) FILTER (WHERE f.state = 'eaten') AS eaten
  FROM frameq.job j
  LEFT JOIN frameq.frame f ON f.job = j.id
 GROUP BY j.id;

CREATE VIEW frameq.usage AS
WITH l AS (SELECT * FROM frameq.ledger())
SELECT 'host'::text AS kind, h.id::bigint AS id, h.name,
	   ((h.cores_cc - h.idle_cc) / 100.0)::numeric(12,2) AS used_cores, (h.cores_cc / 100.0)::numeric(12,2) AS max_cores,
	   h.gpus - h.idle_gpus AS used_gpus, h.gpus AS max_gpus,
	   (SELECT count(*) FROM frameq.proc p WHERE p.host = h.id)::int AS running,
	   NULL::int AS max_running
  FROM frameq.host h
UNION ALL
SELECT 'subscription', s.show, sh.name || '@' || a.name,
	   (coalesce(l.used_cc, 0) / 100.0)::numeric(12,2), (s.burst_cc / 100.0)::numeric(12,2),
	   coalesce(l.used_gpus, 0), NULL, coalesce(l.running, 0), NULL
  FROM frameq.subscription s
  JOIN frameq.show sh ON sh.id = s.show
  JOIN frameq.allocation a ON a.id = s.allocation
  LEFT JOIN l ON l.kind = 'subscription' AND l.id = s.show AND l.id2 = s.allocation
UNION ALL
SELECT 'folder', f.id, f.name,
	   (coalesce(l.used_cc, 0) / 100.0)::numeric(12,2), (f.max_cc / 100.0)::numeric(12,2),
	   coalesce(l.used_gpus, 0), f.max_gpus, coalesce(l.running, 0), NULL
  FROM frameq.folder f
  LEFT JOIN l ON l.kind = 'folder' AND l.id = f.id
UNION ALL
SELECT 'job', j.id, j.name,
	   (coalesce(l.used_cc, 0) / 100.0)::numeric(12,2), (j.max_cc / 100.0)::numeric(12,2),
	   coalesce(l.used_gpus, 0), j.max_gpus, coalesce(l.running, 0), NULL
  FROM frameq.job j
  LEFT JOIN l ON l.kind = 'job' AND l.id = j.id
 WHERE j.state IN ('active', 'paused') OR l.running > 0
UNION ALL
SELECT 'limit', lm.id, lm.name,
	   (coalesce(l.used_cc, 0) / 100.0)::numeric(12,2), NULL,
	   coalesce(l.used_gpus, 0), NULL, coalesce(l.running, 0), lm.max_running
  FROM frameq.limits lm
  LEFT JOIN l ON l.kind = 'limit' AND l.id = lm.id;

CREATE VIEW frameq.hosts AS
SELECT h.id AS host, h.name, a.name AS allocation, h.state, h.down_reason, h.epoch,
	   h.lease_expires_at,
	   (h.cores_cc / 100.0)::numeric(12,2) AS cores, (h.idle_cc / 100.0)::numeric(12,2) AS idle_cores,
	   h.memory, h.idle_memory, h.gpus, h.idle_gpus, h.gpu_memory, h.idle_gpu_memory,
	   h.tags, h.boot_id,
	   (SELECT count(*) FROM frameq.proc p WHERE p.host = h.id)::int AS running
  FROM frameq.host h
  JOIN frameq.allocation a ON a.id = h.allocation;

CREATE VIEW frameq.runs AS
SELECT r.proc, r.frame, r.job, h.name AS host, r.epoch, r.started_at, r.ended_at,
	   r.exit_status, r.exit_signal, r.max_rss, r.reason, r.kill_reason, r.end_state,
	   (r.cores_cc / 100.0)::numeric(12,2) AS cores
  FROM frameq.run r
  JOIN frameq.host h ON h.id = r.host;

/*
 * check(): one row per broken invariant; no rows when all hold.  It reads
 * the ledger after making sure it is valid, then compares it with the sums
 * over live procs, and every proc with its frame, host and run record.
 */
CREATE FUNCTION frameq.check() RETURNS TABLE (invariant text, detail text)
LANGUAGE plpgsql AS $$
BEGIN
	PERFORM frameq._ledger_ensure();

	RETURN QUERY
	SELECT 'one run at a time', format('frame %s is running but has no proc', f.id)
	  FROM frameq.frame f
	 WHERE f.state = 'running' AND NOT EXISTS (SELECT 1 FROM frameq.proc p WHERE p.frame = f.id);

	RETURN QUERY
	SELECT 'one run at a time', format('proc %s holds frame %s, which is %s', p.id, f.id, f.state)
	  FROM frameq.proc p JOIN frameq.frame f ON f.id = p.frame
	 WHERE f.state <> 'running';

	RETURN QUERY
	SELECT 'accounting is exact', format('proc %s does not carry its frame''s job, layer, show, folder or allocation', p.id)
	  FROM frameq.proc p
	  JOIN frameq.frame f ON f.id = p.frame
	  JOIN frameq.job j ON j.id = f.job
	  JOIN frameq.host h ON h.id = p.host
	 WHERE (p.job, p.layer, p.show, p.allocation) IS DISTINCT FROM (f.job, f.layer, j.show, h.allocation)
		OR p.folder IS DISTINCT FROM j.folder;

	RETURN QUERY
	WITH actual AS (
		SELECT 'subscription'::text AS kind, show::bigint AS id, allocation::bigint AS id2,
			   sum(cores_cc)::int AS cc, sum(gpus)::int AS gpus, count(*)::int AS n
		  FROM frameq.proc GROUP BY show, allocation
		UNION ALL
		SELECT 'folder', folder, 0, sum(cores_cc), sum(gpus), count(*)
		  FROM frameq.proc WHERE folder IS NOT NULL GROUP BY folder
		UNION ALL
		SELECT 'job', job, 0, sum(cores_cc), sum(gpus), count(*) FROM frameq.proc GROUP BY job
		UNION ALL
		SELECT 'limit', lid, 0, sum(cores_cc), sum(gpus), count(*)
		  FROM frameq.proc, unnest(limits) lid GROUP BY lid
	)
	SELECT 'accounting is exact',
		   format('%s %s/%s: ledger has %s cc, %s gpus, %s procs; procs sum to %s cc, %s gpus, %s procs',
				  coalesce(a.kind, l.kind), coalesce(a.id, l.id), coalesce(a.id2, l.id2),
				  coalesce(l.used_cc, 0), coalesce(l.used_gpus, 0), coalesce(l.running, 0),
				  coalesce(a.cc, 0), coalesce(a.gpus, 0), coalesce(a.n, 0))
	  FROM actual a
	  FULL JOIN (
		/* the ledger as it will be when this transaction's releases apply */
		SELECT x.kind, x.id, x.id2, sum(x.used_cc)::int AS used_cc,
			   sum(x.used_gpus)::int AS used_gpus, sum(x.running)::int AS running
		  FROM (SELECT * FROM frameq.ledger() UNION ALL SELECT * FROM frameq._ledger_pending()) x
		 GROUP BY x.kind, x.id, x.id2
		HAVING sum(x.used_cc) <> 0 OR sum(x.used_gpus) <> 0 OR sum(x.running) <> 0
	  ) l ON l.kind = a.kind AND l.id = a.id AND l.id2 = a.id2
	 WHERE coalesce(a.cc, 0) <> coalesce(l.used_cc, 0)
		OR coalesce(a.gpus, 0) <> coalesce(l.used_gpus, 0)
		OR coalesce(a.n, 0) <> coalesce(l.running, 0);

	RETURN QUERY
	SELECT 'accounting is exact',
		   format('host %s: idle %s cc, %s memory, %s gpus, %s gpu memory; procs leave %s, %s, %s, %s',
				  h.name, h.idle_cc, h.idle_memory, h.idle_gpus, h.idle_gpu_memory,
				  h.cores_cc - coalesce(s.cc, 0), h.memory - coalesce(s.mem, 0),
				  h.gpus - coalesce(s.gpus, 0), h.gpu_memory - coalesce(s.gmem, 0))
	  FROM frameq.host h
	  LEFT JOIN (SELECT host, sum(cores_cc) AS cc, sum(memory) AS mem, sum(gpus) AS gpus,
						sum(gpu_memory) AS gmem
				   FROM frameq.proc GROUP BY host) s ON s.host = h.id
	 WHERE h.idle_cc <> h.cores_cc - coalesce(s.cc, 0)
		OR h.idle_memory <> h.memory - coalesce(s.mem, 0)
		OR h.idle_gpus <> h.gpus - coalesce(s.gpus, 0)
		OR h.idle_gpu_memory <> h.gpu_memory - coalesce(s.gmem, 0);

	/*
	 * A cap is exceeded only if some proc was booked after the cap was last
	 * set: lowering a cap never kills running work.
	 */
	RETURN QUERY
	SELECT 'hard caps', format('show %s in allocation %s uses %s cc, burst is %s',
							   s.show, s.allocation, u.cc, s.burst_cc)
	  FROM frameq.subscription s
	  JOIN (SELECT show, allocation, sum(cores_cc) AS cc, max(booked_at) AS last
			  FROM frameq.proc GROUP BY show, allocation) u
		ON u.show = s.show AND u.allocation = s.allocation
	 WHERE u.cc > s.burst_cc AND u.last > s.changed_at;

	RETURN QUERY
	SELECT 'hard caps', format('folder %s uses %s cc and %s gpus, caps are %s and %s',
							   f.id, u.cc, u.gpus, f.max_cc, f.max_gpus)
	  FROM frameq.folder f
	  JOIN (SELECT folder, sum(cores_cc) AS cc, sum(gpus) AS gpus, max(booked_at) AS last
			  FROM frameq.proc GROUP BY folder) u ON u.folder = f.id
	 WHERE (u.cc > f.max_cc OR u.gpus > f.max_gpus) AND u.last > f.changed_at;

	RETURN QUERY
	SELECT 'hard caps', format('job %s uses %s cc and %s gpus, caps are %s and %s',
							   j.id, u.cc, u.gpus, j.max_cc, j.max_gpus)
	  FROM frameq.job j
	  JOIN (SELECT job, sum(cores_cc) AS cc, sum(gpus) AS gpus, max(booked_at) AS last
			  FROM frameq.proc GROUP BY job) u ON u.job = j.id
	 WHERE (u.cc > j.max_cc OR u.gpus > j.max_gpus) AND u.last > j.caps_changed_at;

	RETURN QUERY
	SELECT 'hard caps', format('limit %s has %s running, max_running is %s',
							   lm.name, u.n, lm.max_running)
	  FROM frameq.limits lm
	  JOIN (SELECT lid, count(*) AS n, max(booked_at) AS last
			  FROM frameq.proc, unnest(limits) lid GROUP BY lid) u ON u.lid = lm.id
	 WHERE u.n > lm.max_running AND u.last > lm.changed_at;

	RETURN QUERY
	SELECT 'every attempt is visible', format('proc %s has no open run record', p.id)
	  FROM frameq.proc p
	 WHERE NOT EXISTS (SELECT 1 FROM frameq.run r WHERE r.proc = p.id AND r.ended_at IS NULL);

	RETURN QUERY
	SELECT 'every attempt is visible', format('run %s is open but its proc is gone', r.proc)
	  FROM frameq.run r
	 WHERE r.ended_at IS NULL AND NOT EXISTS (SELECT 1 FROM frameq.proc p WHERE p.id = r.proc);

	RETURN QUERY
	SELECT 'fencing', format('proc %s is running under epoch %s of host %s, whose epoch is %s',
							 p.id, p.epoch, h.name, h.epoch)
	  FROM frameq.proc p JOIN frameq.host h ON h.id = p.host
	 WHERE p.state = 'running' AND p.epoch <> h.epoch;

	RETURN QUERY
	SELECT 'dispatch order', format('frame %s of layer %s is waiting below the layer''s dispatch hint %s',
									f.id, f.layer, d.low)
	  FROM frameq._dispatch_hints() d
	  JOIN frameq.frame f ON f.layer = d.layer AND f.state = 'waiting' AND f.number < d.low;

	RETURN QUERY
	SELECT 'job state', format('job %s is %s but none of its frames is live', j.id, j.state)
	  FROM frameq.job j
	 WHERE j.state IN ('active', 'paused')
	   AND EXISTS (SELECT 1 FROM frameq.frame f WHERE f.job = j.id)
	   AND NOT EXISTS (SELECT 1 FROM frameq.frame f
					   WHERE f.job = j.id AND f.state IN ('waiting', 'depend', 'running'));

	RETURN QUERY
	SELECT 'job state', format('job %s is finished but frame %s is %s', j.id, f.id, f.state)
	  FROM frameq.job j JOIN frameq.frame f ON f.job = j.id
	 WHERE j.state = 'finished' AND f.state IN ('waiting', 'depend', 'running');
END
$$;

/*
 * ---------------------------------------------------------------------
 * Privileges.  Tables are written only through the functions above.
 * frameq_admin runs the farm, frameq_agent is what host agents log in as,
 * frameq_reader may look.  The roles are cluster-wide and outlive the
 * extension, as roles do.
 * ---------------------------------------------------------------------
 */
DO $$
BEGIN
	IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'frameq_reader') THEN
		CREATE ROLE frameq_reader NOLOGIN;
	END IF;
	IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'frameq_agent') THEN
		CREATE ROLE frameq_agent NOLOGIN;
	END IF;
	IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'frameq_admin') THEN
		CREATE ROLE frameq_admin NOLOGIN IN ROLE frameq_reader;
	END IF;
END
$$;

REVOKE ALL ON ALL FUNCTIONS IN SCHEMA frameq FROM PUBLIC;
GRANT USAGE ON SCHEMA frameq TO frameq_reader, frameq_agent, frameq_admin;

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
		'submit(jsonb)', 'set_job(bigint,integer,numeric,integer,boolean,boolean)',
		'attach(text,text,text)', 'heartbeat(text,text,bigint,bigint[])',
		'reserve(text,text,bigint,integer)',
		'complete(text,text,bigint,bigint,integer,integer,bigint)',
		'owns(bigint)', 'check()', 'ledger()',
		'kill_frame(bigint,text)', 'retry_frame(bigint)', 'eat_frame(bigint)',
		'kill_job(bigint,text)', 'set_host_state(text,text)', 'confirm_host_dead(text)',
		'worker_status()'] LOOP
		EXECUTE format('ALTER FUNCTION frameq.%s SECURITY DEFINER SET search_path = pg_catalog, pg_temp', f);
	END LOOP;
END
$$;

GRANT EXECUTE ON FUNCTION
	frameq.create_allocation(text, text), frameq.create_show(text),
	frameq.set_subscription(text, text, numeric, numeric),
	frameq.create_folder(text, text, numeric, int), frameq.set_folder_limits(int, numeric, int),
	frameq.create_limit(text, int), frameq.set_limit(text, int),
	frameq.register_host(text, text, numeric, bigint, int, bigint, text[]),
	frameq.submit(jsonb), frameq.set_job(bigint, int, numeric, int, bool, bool),
	frameq.kill_frame(bigint, text), frameq.retry_frame(bigint), frameq.eat_frame(bigint),
	frameq.kill_job(bigint, text), frameq.set_host_state(text, text),
	frameq.confirm_host_dead(text)
	TO frameq_admin;
GRANT EXECUTE ON FUNCTION
	frameq.attach(text, text, text), frameq.heartbeat(text, text, bigint, bigint[]),
	frameq.reserve(text, text, bigint, int),
	frameq.complete(text, text, bigint, bigint, int, int, bigint)
	TO frameq_agent;
GRANT EXECUTE ON FUNCTION frameq.owns(bigint) TO frameq_agent, frameq_reader;
GRANT EXECUTE ON FUNCTION frameq.check(), frameq.ledger(), frameq.worker_status(),
	frameq.lease_period() TO frameq_reader;
GRANT SELECT ON frameq.frames, frameq.job_progress, frameq.usage, frameq.hosts, frameq.runs
	TO frameq_reader;
