/*
 * ---------------------------------------------------------------------
 * Bounded inputs.  Every argument has a bound; a value past it gets
 * 54000 (program_limit_exceeded), a malformed one 22023
 * (invalid_parameter_value), a missing one 22004; the message names the
 * field and quotes at most 64 characters of the value (frameq._clip).
 * The bounds, in one place (doc/security.md lists them for users):
 *
 *	names (hosts, shows, allocations, folders, limits, layers)	100 characters
 *	job names												200 characters
 *	tags: per host, layer or allocation						64, of 64 characters each
 *	a command, before and after its tokens are expanded		65,536 bytes
 *	a layer's env											256 variables, 65,536 bytes
 *	layers per job											1,000
 *	limits per layer										12
 *	frames per job											1,000,000
 *	a frame range's text									262,144 characters
 *	a whole job spec										64 MB
 *	a reason, a boot id										500 / 200 characters
 *	procs listed in one heartbeat							100,000
 * ---------------------------------------------------------------------
 */

CREATE FUNCTION frameq._too_big(field text, what text) RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
	RAISE EXCEPTION '% is too large: %', field, what USING ERRCODE = 'program_limit_exceeded';
END
$$;

/* a text argument: at most max_len characters (NULL passes: callers decide) */
CREATE FUNCTION frameq._bounded(value text, field text, max_len int) RETURNS text
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
	IF pg_catalog.length(value) > max_len THEN
		PERFORM frameq._too_big(field, pg_catalog.format('%s characters, at most %s',
														 pg_catalog.length(value), max_len));
	END IF;
	RETURN value;
END
$$;

/* tags of a host, a layer or an allocation: 0 to 64 names of 1 to 64 characters */
CREATE FUNCTION frameq._tags(tags text[], field text) RETURNS text[]
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
	t text;
BEGIN
	IF pg_catalog.array_ndims(tags) > 1 THEN
		RAISE EXCEPTION '% must be a one-dimensional array', field USING ERRCODE = 'invalid_parameter_value';
	END IF;
	IF tags IS NULL OR pg_catalog.array_position(tags, NULL) IS NOT NULL THEN
		RAISE EXCEPTION '% must not be or contain null', field USING ERRCODE = 'null_value_not_allowed';
	END IF;
	IF pg_catalog.cardinality(tags) > 64 THEN
		PERFORM frameq._too_big(field, pg_catalog.format('%s tags, at most 64', pg_catalog.cardinality(tags)));
	END IF;
	FOREACH t IN ARRAY tags LOOP
		PERFORM frameq._bounded(t, field || ' element', 64);
		IF t OPERATOR(pg_catalog.!~) '^[A-Za-z0-9_.:@+/-]+$' THEN
			RAISE EXCEPTION '% element "%" is not a valid tag', field, frameq._clip(t)
				USING ERRCODE = 'invalid_parameter_value',
					  HINT = 'Tags are 1 to 64 letters, digits and _ . : @ + / -.';
		END IF;
	END LOOP;
	RETURN tags;
END
$$;

/* numeric cores -> centicores */
CREATE OR REPLACE FUNCTION frameq._cc(value numeric, field text, allow_zero bool DEFAULT true,
									  maximum numeric DEFAULT 10000000)
RETURNS int LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
	IF value IS NULL THEN
		RETURN NULL;
	END IF;
	IF value = 'NaN'::numeric THEN
		RAISE EXCEPTION '% must be a number of cores, not NaN', field
			USING ERRCODE = 'invalid_parameter_value';
	END IF;
	IF value < 0 OR (value = 0 AND NOT allow_zero) THEN
		RAISE EXCEPTION '% must be %, not %', field,
			CASE WHEN allow_zero THEN 'zero or more' ELSE 'positive' END,
			frameq._clip(value::text)
			USING ERRCODE = 'invalid_parameter_value';
	END IF;
	IF value > maximum THEN
		RAISE EXCEPTION '% is too large: % cores, at most %', field, frameq._clip(value::text), maximum
			USING ERRCODE = 'program_limit_exceeded';
	END IF;
	IF value * 100 <> pg_catalog.trunc(value * 100) THEN
		RAISE EXCEPTION '% must be a multiple of 0.01 cores, not %', field, frameq._clip(value::text)
			USING ERRCODE = 'invalid_parameter_value';
	END IF;
	RETURN (value * 100)::int;
END
$$;

CREATE OR REPLACE FUNCTION frameq._nonneg(value bigint, field text, maximum bigint DEFAULT NULL)
RETURNS bigint LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
	IF value < 0 THEN
		RAISE EXCEPTION '% must not be negative, not %', field, value
			USING ERRCODE = 'invalid_parameter_value';
	END IF;
	IF maximum IS NOT NULL AND value > maximum THEN
		RAISE EXCEPTION '% is too large: %, at most %', field, value, maximum
			USING ERRCODE = 'program_limit_exceeded';
	END IF;
	RETURN value;
END
$$;

CREATE OR REPLACE FUNCTION frameq._name(value text, field text)
RETURNS text LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
	PERFORM frameq._not_null(value, field);
	PERFORM frameq._bounded(value, field, 100);
	IF value OPERATOR(pg_catalog.!~) '^[A-Za-z0-9_.:@+-]{1,100}$' THEN
		RAISE EXCEPTION '% "%" is not a valid name', field, frameq._clip(value)
			USING ERRCODE = 'invalid_parameter_value',
				  HINT = 'Names are 1 to 100 letters, digits and _ . : @ + -.';
	END IF;
	RETURN value;
END
$$;

CREATE OR REPLACE FUNCTION frameq._show_id(show text) RETURNS int
LANGUAGE plpgsql STABLE AS $$
DECLARE
	result int;
BEGIN
	SELECT s.id INTO result FROM frameq.show s WHERE s.name = frameq._not_null(_show_id.show, 'show');
	IF NOT FOUND THEN
		RAISE EXCEPTION 'show "%" does not exist', frameq._clip(show) USING ERRCODE = 'undefined_object';
	END IF;
	RETURN result;
END
$$;

CREATE OR REPLACE FUNCTION frameq._allocation_id(allocation text) RETURNS int
LANGUAGE plpgsql STABLE AS $$
DECLARE
	result int;
BEGIN
	SELECT a.id INTO result FROM frameq.allocation a
	 WHERE a.name = frameq._not_null(_allocation_id.allocation, 'allocation');
	IF NOT FOUND THEN
		RAISE EXCEPTION 'allocation "%" does not exist', frameq._clip(allocation)
			USING ERRCODE = 'undefined_object';
	END IF;
	RETURN result;
END
$$;

/*
 * ---------------------------------------------------------------------
 * Administration
 * ---------------------------------------------------------------------
 */

CREATE OR REPLACE FUNCTION frameq.create_allocation(name text, tag text DEFAULT NULL) RETURNS int
LANGUAGE plpgsql AS $$
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

CREATE OR REPLACE FUNCTION frameq.create_show(name text) RETURNS int
LANGUAGE plpgsql AS $$
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

CREATE OR REPLACE FUNCTION frameq.create_limit(name text, max_running int) RETURNS int
LANGUAGE plpgsql AS $$
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

CREATE OR REPLACE FUNCTION frameq.create_folder(show text, name text, max_cores numeric DEFAULT NULL,
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

CREATE OR REPLACE FUNCTION frameq.set_limit(name text, max_running int) RETURNS void
LANGUAGE plpgsql AS $$
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

CREATE OR REPLACE FUNCTION frameq.register_host(name text, allocation text, cores numeric, memory bigint,
												gpus int DEFAULT 0, gpu_memory bigint DEFAULT 0,
												tags text[] DEFAULT '{}')
RETURNS text LANGUAGE plpgsql AS $$
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

CREATE OR REPLACE FUNCTION frameq.set_host_state(host text, state text) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
	h frameq.host;
BEGIN
	IF state IS NULL OR state NOT IN ('up', 'down', 'repair') THEN
		RAISE EXCEPTION 'state must be up, down or repair, not %', coalesce(frameq._clip(state), 'null')
			USING ERRCODE = CASE WHEN state IS NULL THEN 'null_value_not_allowed'
								 ELSE 'invalid_parameter_value' END;
	END IF;
	h := frameq._host_lock_by_name(host);
	IF state <> 'up' THEN
		/* its work is ordered killed; the frames stay held until that is confirmed */
		PERFORM frameq._kill_order(x.id, pg_catalog.format('host set %s', set_host_state.state), 'waiting')
		   FROM frameq.proc x WHERE x.host = h.id AND x.state = 'running';
	END IF;
	UPDATE frameq.host x SET state = set_host_state.state,
		   down_reason = CASE WHEN set_host_state.state = 'up' THEN NULL ELSE 'operator' END
	 WHERE x.id = h.id;
END
$$;

CREATE OR REPLACE FUNCTION frameq._reason(reason text) RETURNS text
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
	PERFORM frameq._not_null(reason, 'reason');
	PERFORM frameq._bounded(reason, 'reason', 500);
	IF reason = '' THEN
		RAISE EXCEPTION 'reason must not be empty' USING ERRCODE = 'invalid_parameter_value';
	END IF;
	RETURN reason;
END
$$;

/*
 * ---------------------------------------------------------------------
 * Submission
 * ---------------------------------------------------------------------
 */

CREATE OR REPLACE FUNCTION frameq._frame_numbers(spec text, field text) RETURNS SETOF int
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
	item text;
	m text[];
	first int;
	last int;
	step int;
	total bigint := 0;
BEGIN
	IF spec IS NULL OR pg_catalog.btrim(spec) = '' THEN
		RAISE EXCEPTION '% must be a frame range such as "1-100", "1-100x5" or "1,3,7"', field
			USING ERRCODE = 'invalid_parameter_value';
	END IF;
	PERFORM frameq._bounded(spec, field, 262144);
	FOREACH item IN ARRAY pg_catalog.string_to_array(pg_catalog.replace(spec, ' ', ''), ',') LOOP
		m := pg_catalog.regexp_match(item, '^(-?[0-9]{1,9})(?:-(-?[0-9]{1,9})(?:x([0-9]{1,9}))?)?$');
		IF m IS NULL THEN
			RAISE EXCEPTION '% has a malformed item "%"', field, frameq._clip(item)
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
			PERFORM frameq._too_big(field, 'more than 1000000 frames');
		END IF;
		RETURN QUERY SELECT pg_catalog.generate_series(first, last, step);
	END LOOP;
END
$$;

CREATE OR REPLACE FUNCTION frameq._spec_int(obj jsonb, key text, path text, dflt int,
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
	IF n <> pg_catalog.trunc(n) OR n < minimum OR n > maximum THEN
		RAISE EXCEPTION '%.% must be a whole number from % to %, not %', path, key,
			minimum, maximum, frameq._clip(n::text)
			USING ERRCODE = CASE WHEN n > maximum THEN 'program_limit_exceeded'
								 ELSE 'invalid_parameter_value' END;
	END IF;
	RETURN n::int;
END
$$;

CREATE OR REPLACE FUNCTION frameq._spec_size(obj jsonb, key text, path text) RETURNS bigint
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
	v jsonb := frameq._spec_value(obj, key, path, 'size');
	n numeric;
BEGIN
	IF v IS NULL THEN
		RETURN 0;
	END IF;
	BEGIN
		IF pg_catalog.jsonb_typeof(v) = 'number' THEN
			n := v::numeric;
		ELSIF pg_catalog.length(v #>> '{}') <= 64 THEN
			n := pg_catalog.pg_size_bytes(v #>> '{}');
		END IF;
	EXCEPTION
		WHEN invalid_parameter_value THEN
			n := NULL;
		WHEN numeric_value_out_of_range THEN
			n := 'Infinity';	/* a well-formed size past bigint: too large */
	END;
	IF n > (1::bigint << 50) THEN
		RAISE EXCEPTION '%.% is too large: %, at most 2^50 bytes', path, key, frameq._clip(v::text)
			USING ERRCODE = 'program_limit_exceeded';
	END IF;
	IF n IS NULL OR n < 0 OR n <> pg_catalog.trunc(n) THEN
		RAISE EXCEPTION '%.% must be a size in bytes (or such as "4GB"), not %', path, key,
			frameq._clip(v::text)
			USING ERRCODE = 'invalid_parameter_value';
	END IF;
	RETURN n::bigint;
END
$$;

/* a JSON array of strings (tags, limit names) as text[]; empty if absent */
CREATE OR REPLACE FUNCTION frameq._spec_tags(obj jsonb, key text, path text) RETURNS text[]
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
	v jsonb := frameq._spec_value(obj, key, path, 'array');
BEGIN
	IF v IS NULL THEN
		RETURN '{}';
	END IF;
	IF pg_catalog.jsonb_array_length(v) > 64 THEN
		PERFORM frameq._too_big(path || '.' || key,
			pg_catalog.format('%s elements, at most 64', pg_catalog.jsonb_array_length(v)));
	END IF;
	IF EXISTS (SELECT 1 FROM pg_catalog.jsonb_array_elements(v) e
				WHERE pg_catalog.jsonb_typeof(e) <> 'string' OR e #>> '{}' = '') THEN
		RAISE EXCEPTION '%.% must be an array of non-empty strings', path, key
			USING ERRCODE = 'invalid_parameter_value';
	END IF;
	RETURN ARRAY(SELECT DISTINCT e FROM pg_catalog.jsonb_array_elements_text(v) e ORDER BY 1);
END
$$;

CREATE OR REPLACE FUNCTION frameq._spec_unknown(obj jsonb, allowed text[], path text) RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
	k text;
BEGIN
	SELECT key INTO k FROM pg_catalog.jsonb_object_keys(obj) key WHERE key <> ALL (allowed)
	 ORDER BY 1 LIMIT 1;
	IF k IS NOT NULL THEN
		RAISE EXCEPTION '%.% is not a known field', path, frameq._clip(k)
			USING ERRCODE = 'invalid_parameter_value',
				  HINT = pg_catalog.format('Known fields: %s.', pg_catalog.array_to_string(allowed, ', '));
	END IF;
END
$$;

/*
 * The longest a layer's command becomes, in bytes, once the agent-side
 * tokens are replaced for any of its frames (src/booking.c
 * expand_command: #FRAME#, #ZFRAME# (zero-padded to 4), #JOB#, #LAYER#,
 * matched left to right without overlap, as regexp_matches does).
 */
CREATE FUNCTION frameq._expanded_length(command text, job_name text, layer_name text,
										low int, high int)
RETURNS bigint LANGUAGE sql IMMUTABLE AS $$
	SELECT pg_catalog.octet_length(command)
		   + coalesce(sum(t.n * (CASE t.token
									WHEN 'FRAME' THEN w.width
									WHEN 'ZFRAME' THEN greatest(w.width, 4)
									WHEN 'JOB' THEN pg_catalog.octet_length(job_name)
									ELSE pg_catalog.octet_length(layer_name) END
								 - pg_catalog.length(t.token) - 2)), 0)
	  FROM (SELECT greatest(pg_catalog.length(low::text), pg_catalog.length(high::text)) AS width) w
	  LEFT JOIN (SELECT m[1] AS token, count(*) AS n
				   FROM pg_catalog.regexp_matches(command, '#(FRAME|ZFRAME|JOB|LAYER)#', 'g') m
				  GROUP BY 1) t ON true
$$;

/* a layer's command: present, at most 64 kB, and at most 64 kB expanded for every frame */
CREATE FUNCTION frameq._check_command(command text, path text, job_name text, layer_name text,
									  low int, high int)
RETURNS void LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
	expanded bigint;
BEGIN
	IF pg_catalog.octet_length(command) > 65536 THEN
		PERFORM frameq._too_big(path || '.command',
			pg_catalog.format('%s bytes, at most 65536', pg_catalog.octet_length(command)));
	END IF;
	expanded := frameq._expanded_length(command, job_name, layer_name, low, high);
	IF expanded > 65536 THEN
		PERFORM frameq._too_big(path || '.command',
			pg_catalog.format('%s bytes once its tokens are expanded, at most 65536', expanded));
	END IF;
END
$$;

/* a layer's env: at most 256 variables and 64 kB, names as the shell has them, string values */
CREATE FUNCTION frameq._check_env(env jsonb, path text) RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
	bad text;
BEGIN
	IF env IS NULL THEN
		RETURN '{}';
	END IF;
	IF (SELECT count(*) FROM pg_catalog.jsonb_object_keys(env)) > 256 THEN
		PERFORM frameq._too_big(path || '.env', 'more than 256 variables');
	END IF;
	IF pg_catalog.octet_length(env::text) > 65536 THEN
		PERFORM frameq._too_big(path || '.env', 'more than 65536 bytes');
	END IF;
	SELECT e.key INTO bad FROM pg_catalog.jsonb_each(env) e
	 WHERE pg_catalog.jsonb_typeof(e.value) <> 'string'
		OR e.key !~ '^[A-Za-z_][A-Za-z0-9_]{0,255}$'
	 ORDER BY 1 LIMIT 1;
	IF FOUND THEN
		RAISE EXCEPTION '%.env must map variable names to strings; "%" does not', path, frameq._clip(bad)
			USING ERRCODE = 'invalid_parameter_value';
	END IF;
	RETURN env;
END
$$;
CREATE OR REPLACE FUNCTION frameq.submit(spec jsonb) RETURNS bigint
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
	n_layer bigint;
	n_distinct bigint;
	low int;
	high int;
	job_id bigint;
	layer_id bigint;
	lim text;
	lim_id int;
BEGIN
	IF spec IS NULL OR jsonb_typeof(spec) <> 'object' THEN
		RAISE EXCEPTION 'spec must be a JSON object' USING ERRCODE = 'invalid_parameter_value';
	END IF;
	IF pg_catalog.octet_length(spec::text) > 64 * 1024 * 1024 THEN
		PERFORM frameq._too_big('spec', 'more than 64 MB');
	END IF;
	PERFORM frameq._spec_unknown(spec, ARRAY['show', 'folder', 'name', 'priority',
		'max_retries', 'auto_eat', 'max_cores', 'max_gpus', 'paused', 'layers'], 'spec');

	v := frameq._spec_value(spec, 'show', 'spec', 'string');
	IF v IS NULL THEN
		RAISE EXCEPTION 'spec.show is required' USING ERRCODE = 'invalid_parameter_value';
	END IF;
	SELECT s.id INTO show_id FROM frameq.show s WHERE s.name = v #>> '{}';
	IF NOT FOUND THEN
		RAISE EXCEPTION 'spec.show: show "%" does not exist', frameq._clip(v #>> '{}')
			USING ERRCODE = 'undefined_object';
	END IF;
	/* a frameq_submit role submits to the shows granted to it only */
	PERFORM frameq._authorize_show(show_id);

	v := frameq._spec_value(spec, 'folder', 'spec', 'string');
	IF v IS NOT NULL THEN
		SELECT f.id INTO folder_id FROM frameq.folder f WHERE f.show = show_id AND f.name = v #>> '{}';
		IF NOT FOUND THEN
			RAISE EXCEPTION 'spec.folder: folder "%" does not exist in show "%"',
				frameq._clip(v #>> '{}'), spec ->> 'show' USING ERRCODE = 'undefined_object';
		END IF;
	END IF;

	v := frameq._spec_value(spec, 'name', 'spec', 'string');
	IF v IS NULL OR v #>> '{}' = '' THEN
		RAISE EXCEPTION 'spec.name is required' USING ERRCODE = 'invalid_parameter_value';
	END IF;
	job_name := frameq._bounded(v #>> '{}', 'spec.name', 200);
	/* names reach shell commands through #JOB#: no spaces or shell characters */
	IF job_name !~ '^[A-Za-z0-9_.:@+-]{1,200}$' THEN
		RAISE EXCEPTION 'spec.name "%" is not a valid job name', frameq._clip(job_name)
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
	IF jsonb_array_length(layers) > 1000 THEN
		PERFORM frameq._too_big('spec.layers',
			pg_catalog.format('%s layers, at most 1000', jsonb_array_length(layers)));
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
		PERFORM frameq._bounded(v #>> '{}', path || '.name', 100);
		IF (v #>> '{}') !~ '^[A-Za-z0-9_.:@+-]{1,100}$' THEN
			RAISE EXCEPTION '%.name "%" is not a valid layer name', path, frameq._clip(v #>> '{}')
				USING ERRCODE = 'invalid_parameter_value',
					  HINT = 'Layer names are 1 to 100 letters, digits and _ . : @ + -.';
		END IF;
		IF (v #>> '{}') = ANY (l_name) THEN
			RAISE EXCEPTION '%.name "%" is used by an earlier layer', path, frameq._clip(v #>> '{}')
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
		SELECT count(*), count(DISTINCT n), min(n), max(n) INTO n_layer, n_distinct, low, high
		  FROM frameq._frame_numbers(v #>> '{}', path || '.range') n;
		n_frames := n_frames + n_layer;
		PERFORM frameq._check_command(l_command[i + 1], path, job_name, l_name[i + 1], low, high);
		IF n_layer <> n_distinct THEN
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
		l_tags := l_tags || to_jsonb(frameq._tags(frameq._spec_tags(layer, 'tags', path), path || '.tags'));
		l_env := l_env || frameq._check_env(frameq._spec_value(layer, 'env', path, 'object'), path);
		l_limits := l_limits || to_jsonb(frameq._spec_tags(layer, 'limits', path));
		IF jsonb_array_length(l_limits[i + 1]) > 12 THEN
			PERFORM frameq._too_big(path || '.limits',
				pg_catalog.format('%s limits, at most 12', jsonb_array_length(l_limits[i + 1])));
		END IF;
		FOR lim IN SELECT jsonb_array_elements_text(l_limits[i + 1]) LOOP
			IF NOT EXISTS (SELECT 1 FROM frameq.limits lm WHERE lm.name = lim) THEN
				RAISE EXCEPTION '%.limits: limit "%" does not exist', path, frameq._clip(lim)
					USING ERRCODE = 'undefined_object';
			END IF;
		END LOOP;
	END LOOP;
	IF n_frames > 1000000 THEN
		PERFORM frameq._too_big('spec.layers', 'more than 1000000 frames in all');
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

/*
 * For the rest of the calling function (which must carry a SET lock_timeout
 * clause, so that this ends with it): wait at most frameq.lock_wait for any
 * lock, then fail with 55P03.  For the agent's calls, whose waits a role
 * outside frameq_admin could otherwise make unbounded.
 */
CREATE FUNCTION frameq._bound_lock_waits() RETURNS void
LANGUAGE sql VOLATILE AS $$
	SELECT pg_catalog.set_config('lock_timeout',
		coalesce(pg_catalog.current_setting('frameq.lock_wait', true), '1s'), true)
$$;

/*
 * ---------------------------------------------------------------------
 * Host agent: attach and heartbeat
 * ---------------------------------------------------------------------
 */

CREATE OR REPLACE FUNCTION frameq.attach(host text, token text, boot_id text,
							  OUT epoch bigint, OUT lease_ttl interval, OUT kill bigint[],
							  OUT host_id int, OUT channel text)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
	h frameq.host := frameq._host_lock(host, token);
	p record;
BEGIN
	/* a reboot's releases and the kill orders wait at most frameq.lock_wait for others' locks */
	PERFORM frameq._bound_lock_waits();
	PERFORM frameq._not_null(boot_id, 'boot_id');
	PERFORM frameq._bounded(boot_id, 'boot_id', 200);
	IF boot_id = '' THEN
		RAISE EXCEPTION 'boot_id must not be empty' USING ERRCODE = 'invalid_parameter_value';
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

CREATE OR REPLACE FUNCTION frameq.heartbeat(host text, token text, epoch bigint, running bigint[],
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
	IF cardinality(running) > 100000 THEN
		PERFORM frameq._too_big('running', pg_catalog.format('%s procs, at most 100000', cardinality(running)));
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

	/*
	 * Confirm kills and losses.  A row lock held outside frameq_admin (a
	 * submitter's open kill_frame, a render's fence) must not hold up the
	 * renewal below: the releases wait at most frameq.lock_wait for a lock
	 * (frameq's own holders, such as the worker sending kill orders, are
	 * done long before), then are given up together; the next heartbeat
	 * confirms what this one could not.
	 */
	IF EXISTS (SELECT 1 FROM frameq.proc x
				WHERE x.host = h.id AND x.id <> ALL (heartbeat.running)
				  AND (x.state = 'killing'
					   OR (x.epoch = h.epoch AND x.booked_at < h.last_renewal_at))) THEN
		BEGIN
			PERFORM frameq._bound_lock_waits();
			/* kill orders the host no longer lists are confirmed dead */
			FOR p IN SELECT x.id, x.want_state FROM frameq.proc x
					  WHERE x.host = h.id AND x.state = 'killing' AND x.id <> ALL (heartbeat.running)
					  LOOP
				PERFORM frameq._release(p.id, 'killed', p.want_state);
			END LOOP;
			/* bookings the host has demonstrably seen and no longer runs were lost */
			FOR p IN SELECT x.id FROM frameq.proc x
					  WHERE x.host = h.id AND x.state = 'running' AND x.epoch = h.epoch
						AND x.booked_at < h.last_renewal_at AND x.id <> ALL (heartbeat.running)
					  LOOP
				PERFORM frameq._release(p.id, 'lost_by_agent', 'waiting');
			END LOOP;
		EXCEPTION WHEN lock_not_available THEN
			RAISE LOG 'frameq: heartbeat of host "%" left its releases to the next heartbeat: a row it needs is locked by another session', h.name;
		END;
	END IF;
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
