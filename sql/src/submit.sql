
/*
 * ---------------------------------------------------------------------
 * submit.sql: submission and job control (frameq_submit, scoped to its
 * granted shows; frameq_admin).  submit() checks a whole job spec before
 * it writes anything; its bounds are listed in util.sql.
 * ---------------------------------------------------------------------
 */

/* one frame range item list: "1-100", "1-100x5", "1,3,7", or a mix */
CREATE FUNCTION frameq._frame_numbers(spec text, field text) RETURNS SETOF int
LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
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

/*
 * A task's frame numbers as text, the one form everything shows (the
 * frames view, the #FRAMESPEC# command token): "7" for a task of one
 * number (numbers NULL); "1-5", or "1-9x2" for a step above 1, when the
 * numbers climb by one step; otherwise the numbers in range order, "7,3".
 * plpgsql: a quarter of the cost of the same in LANGUAGE sql, per call.
 */
CREATE FUNCTION frameq._frame_spec(number int, numbers int[]) RETURNS text
LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	lo int;
	hi int;
	step bigint;
BEGIN
	IF numbers IS NULL OR pg_catalog.cardinality(numbers) < 2 THEN
		RETURN number::text;
	END IF;
	lo := pg_catalog.array_lower(numbers, 1);
	hi := pg_catalog.array_upper(numbers, 1);
	step := numbers[lo + 1]::bigint - numbers[lo];
	FOR i IN lo + 2 .. hi LOOP
		EXIT WHEN step <= 0;
		IF numbers[i]::bigint - numbers[i - 1] <> step THEN
			step := 0;
		END IF;
	END LOOP;
	IF step <= 0 THEN
		RETURN pg_catalog.array_to_string(numbers, ',');
	END IF;
	RETURN numbers[lo]::text || '-' || numbers[hi]::text
		   || CASE WHEN step > 1 THEN 'x' || step::text ELSE '' END;
END
$$;

/*
 * A layer's tasks: its frame numbers in range order, cut into runs of
 * chunk numbers (the last may be shorter).  first is the task's frame
 * number; numbers NULL for a task of one number (frameq.frame.numbers).
 */
CREATE FUNCTION frameq._frame_tasks(spec text, field text, chunk int)
RETURNS TABLE (first int, numbers int[])
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
	SELECT t.a[1], CASE WHEN pg_catalog.cardinality(t.a) > 1 THEN t.a END
	  FROM (SELECT pg_catalog.array_agg(x.n ORDER BY x.o) AS a
			  FROM frameq._frame_numbers(spec, field) WITH ORDINALITY AS x(n, o)
			 GROUP BY (x.o - 1) / chunk) t
$$;

/* spec's field key, NULL if absent or null, 22023 unless it is of type want */
CREATE FUNCTION frameq._spec_value(obj jsonb, key text, path text, want text)
RETURNS jsonb LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
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

/* an integer field from minimum to maximum; dflt if absent */
CREATE FUNCTION frameq._spec_int(obj jsonb, key text, path text, dflt int,
								 minimum int, maximum int)
RETURNS int LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
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

/* a boolean field; dflt if absent */
CREATE FUNCTION frameq._spec_bool(obj jsonb, key text, path text, dflt bool)
RETURNS bool LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
	SELECT coalesce(frameq._spec_value(obj, key, path, 'boolean')::bool, dflt)
$$;

/* a size field, in bytes or such as "4GB"; 0 if absent */
CREATE FUNCTION frameq._spec_size(obj jsonb, key text, path text) RETURNS bigint
LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
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
CREATE FUNCTION frameq._spec_tags(obj jsonb, key text, path text) RETURNS text[]
LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
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

/* 22023 if obj has a field not in allowed */
CREATE FUNCTION frameq._spec_unknown(obj jsonb, allowed text[], path text) RETURNS void
LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
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
 * A job's or a layer's requeue and retry-delay fields, checked, as one
 * object with each of the four keys present (null where the spec has
 * none: a layer's null follows its job's value, a job's is frameq's
 * default): requeue_exit_codes (distinct exit statuses 1 to 255, at most
 * 32; [] is a value, none), requeue_delay and retry_delay (durations, in
 * seconds), max_requeues (0 to 1000).
 */
CREATE FUNCTION frameq._spec_requeue(obj jsonb, path text) RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	codes jsonb := frameq._spec_value(obj, 'requeue_exit_codes', path, 'array');
BEGIN
	IF pg_catalog.jsonb_array_length(codes) > 32 THEN
		PERFORM frameq._too_big(path || '.requeue_exit_codes',
			pg_catalog.format('%s codes, at most 32', pg_catalog.jsonb_array_length(codes)));
	END IF;
	IF EXISTS (SELECT 1 FROM pg_catalog.jsonb_array_elements(codes) e
				WHERE CASE WHEN pg_catalog.jsonb_typeof(e) <> 'number' THEN true
						   ELSE e::numeric <> pg_catalog.trunc(e::numeric) OR e::numeric NOT BETWEEN 1 AND 255
					  END) THEN
		RAISE EXCEPTION '%.requeue_exit_codes must be an array of exit statuses from 1 to 255', path
			USING ERRCODE = 'invalid_parameter_value';
	END IF;
	IF (SELECT count(DISTINCT e::numeric) FROM pg_catalog.jsonb_array_elements(codes) e)
	   <> pg_catalog.jsonb_array_length(codes) THEN
		RAISE EXCEPTION '%.requeue_exit_codes lists an exit status more than once', path
			USING ERRCODE = 'invalid_parameter_value';
	END IF;
	RETURN pg_catalog.jsonb_build_object(
		'requeue_exit_codes', CASE WHEN codes IS NOT NULL THEN
			coalesce((SELECT pg_catalog.jsonb_agg(x.e::numeric::int ORDER BY x.o)
						FROM pg_catalog.jsonb_array_elements(codes) WITH ORDINALITY x(e, o)), '[]') END,
		'requeue_delay', frameq._duration(obj -> 'requeue_delay', path || '.requeue_delay', true),
		'max_requeues', frameq._spec_int(obj, 'max_requeues', path, NULL, 0, 1000),
		'retry_delay', frameq._duration(obj -> 'retry_delay', path || '.retry_delay', true));
END
$$;

/* the exit codes of a _spec_requeue object as a column's value (NULL: none given) */
CREATE FUNCTION frameq._requeue_codes(requeue jsonb) RETURNS int[]
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
	SELECT CASE WHEN pg_catalog.jsonb_typeof(requeue -> 'requeue_exit_codes') = 'array'
				THEN ARRAY(SELECT pg_catalog.jsonb_array_elements_text(requeue -> 'requeue_exit_codes')::int)
		   END
$$;

/*
 * The longest a layer's command becomes, in bytes, once the agent-side
 * tokens are replaced for any of its tasks (src/booking.c expand_command:
 * #FRAME#, #FRAME_START#, #FRAME_END#, #ZFRAME# (zero-padded to 4), #JOB#,
 * #LAYER#, #FRAMESPEC#, matched left to right without overlap, as
 * regexp_matches does).  low and high are the layer's lowest and highest
 * frame numbers; spec_length the longest frame spec of its tasks (NULL:
 * every task is one number, no longer than low or high).
 */
CREATE FUNCTION frameq._expanded_length(command text, job_name text, layer_name text,
										low int, high int, spec_length int DEFAULT NULL)
RETURNS bigint LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
	SELECT pg_catalog.octet_length(command)
		   + coalesce(sum(t.n * (CASE t.token
									WHEN 'ZFRAME' THEN greatest(w.width, 4)
									WHEN 'JOB' THEN pg_catalog.octet_length(job_name)
									WHEN 'LAYER' THEN pg_catalog.octet_length(layer_name)
									WHEN 'FRAMESPEC' THEN coalesce(spec_length, w.width)
									ELSE w.width END
								 - pg_catalog.length(t.token) - 2)), 0)
	  FROM (SELECT greatest(pg_catalog.length(low::text), pg_catalog.length(high::text)) AS width) w
	  LEFT JOIN (SELECT m[1] AS token, count(*) AS n
				   FROM pg_catalog.regexp_matches(command,
						'#(FRAME|FRAME_START|FRAME_END|ZFRAME|JOB|LAYER|FRAMESPEC)#', 'g') m
				  GROUP BY 1) t ON true
$$;

/*
 * A layer's command: present, at most 64 kB, and at most 64 kB expanded
 * for every task (spec_length: see _expanded_length)
 */
CREATE FUNCTION frameq._check_command(command text, path text, job_name text, layer_name text,
									  low int, high int, spec_length int DEFAULT NULL)
RETURNS void LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	expanded bigint;
BEGIN
	IF pg_catalog.octet_length(command) > 65536 THEN
		PERFORM frameq._too_big(path || '.command',
			pg_catalog.format('%s bytes, at most 65536', pg_catalog.octet_length(command)));
	END IF;
	expanded := frameq._expanded_length(command, job_name, layer_name, low, high, spec_length);
	IF expanded > 65536 THEN
		PERFORM frameq._too_big(path || '.command',
			pg_catalog.format('%s bytes once its tokens are expanded, at most 65536', expanded));
	END IF;
END
$$;

/* a layer's env: at most 256 variables and 64 kB, names as the shell has them, string values */
CREATE FUNCTION frameq._check_env(env jsonb, path text) RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
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

/*
 * A layer's progress_pattern: a non-empty string of at most 1,000
 * characters that compiles as a regular expression (the agent matches it
 * against each line of the render's output, and reads a percentage from
 * its first group); NULL if absent.
 */
CREATE FUNCTION frameq._progress_pattern(obj jsonb, path text) RETURNS text
LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	field text := path || '.progress_pattern';
	pattern text := frameq._spec_value(obj, 'progress_pattern', path, 'string') #>> '{}';
BEGIN
	IF pattern IS NULL THEN
		RETURN NULL;
	END IF;
	PERFORM frameq._bounded(pattern, field, 1000);
	IF pattern = '' THEN
		RAISE EXCEPTION '% must not be empty', field USING ERRCODE = 'invalid_parameter_value';
	END IF;
	BEGIN
		PERFORM '' ~ pattern;
	EXCEPTION WHEN invalid_regular_expression THEN
		RAISE EXCEPTION '% is not a valid regular expression: %', field, SQLERRM
			USING ERRCODE = 'invalid_parameter_value';
	END;
	RETURN pattern;
END
$$;

/*
 * A job from its JSON spec (doc/reference.md): every field is checked
 * first, then the job, its layers, their limits and their frames are
 * written.  Returns the job's id.
 */
CREATE FUNCTION frameq.submit(spec jsonb) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
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
	host_failure_limit int;
	max_dead_frames int;
	paused bool;
	timeout int;
	timeout_no_output int;
	requeue jsonb;
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
	l_chunk int[] := '{}';
	l_after jsonb[] := '{}';
	l_after_frames jsonb[] := '{}';
	l_requeue jsonb[] := '{}';
	l_count bigint[] := '{}';
	l_timeout int[] := '{}';
	l_timeout_no_output int[] := '{}';
	l_progress_pattern text[] := '{}';
	l_id bigint[] := '{}';
	after_jobs bigint[];
	unmet_jobs int;
	write_order int[];
	edge_bound bigint := 0;
	spec_length int;
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
		'max_retries', 'auto_eat', 'max_cores', 'max_gpus', 'paused', 'layers', 'after_jobs',
		'timeout', 'timeout_no_output', 'host_failure_limit', 'max_dead_frames',
		'requeue_exit_codes', 'requeue_delay', 'max_requeues', 'retry_delay'], 'spec');

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
	job_name := frameq._name(v #>> '{}', 'spec.name', 'job name', 200);
	priority := frameq._spec_int(spec, 'priority', 'spec', 0, -1000000, 1000000);
	max_retries := frameq._spec_int(spec, 'max_retries', 'spec', 3, 0, 1000);
	auto_eat := frameq._spec_bool(spec, 'auto_eat', 'spec', false);
	paused := frameq._spec_bool(spec, 'paused', 'spec', false);
	max_cc := frameq._cc(frameq._spec_value(spec, 'max_cores', 'spec', 'number')::numeric,
						 'spec.max_cores');
	max_gpus := frameq._spec_int(spec, 'max_gpus', 'spec', NULL, 0, 100000);
	/* absent: NULL, the default (src/limits.c) */
	host_failure_limit := frameq._spec_int(spec, 'host_failure_limit', 'spec', NULL, 0, 1000);
	max_dead_frames := frameq._spec_int(spec, 'max_dead_frames', 'spec', NULL, 1, 1000000);
	after_jobs := frameq._spec_after_jobs(spec);
	timeout := frameq._duration(spec -> 'timeout', 'spec.timeout');
	timeout_no_output := frameq._duration(spec -> 'timeout_no_output', 'spec.timeout_no_output');
	requeue := frameq._spec_requeue(spec, 'spec');

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
			'dispatch_order', 'env', 'chunk', 'after', 'after_frames', 'timeout',
			'timeout_no_output', 'progress_pattern', 'requeue_exit_codes', 'requeue_delay',
			'max_requeues', 'retry_delay'], path);

		v := frameq._spec_value(layer, 'name', path, 'string');
		IF v IS NULL OR v #>> '{}' = '' THEN
			RAISE EXCEPTION '%.name is required', path USING ERRCODE = 'invalid_parameter_value';
		END IF;
		PERFORM frameq._name(v #>> '{}', path || '.name', 'layer name');
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
		l_count := l_count || n_layer;
		/* frame numbers per task; a chunk past the layer's frames is one task */
		l_chunk := l_chunk || frameq._spec_int(layer, 'chunk', path, 1, 1, 100000);
		spec_length := NULL;
		IF l_chunk[i + 1] > 1 AND pg_catalog.strpos(l_command[i + 1], '#FRAMESPEC#') > 0 THEN
			SELECT max(pg_catalog.octet_length(frameq._frame_spec(t.first, t.numbers)))
			  INTO spec_length
			  FROM frameq._frame_tasks(v #>> '{}', path || '.range', l_chunk[i + 1]) t;
		END IF;
		PERFORM frameq._check_command(l_command[i + 1], path, job_name, l_name[i + 1], low, high,
									  spec_length);
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
		l_timeout := l_timeout || frameq._duration(layer -> 'timeout', path || '.timeout');
		l_timeout_no_output := l_timeout_no_output
			|| frameq._duration(layer -> 'timeout_no_output', path || '.timeout_no_output');
		l_progress_pattern := l_progress_pattern || frameq._progress_pattern(layer, path);
		l_limits := l_limits || to_jsonb(frameq._spec_tags(layer, 'limits', path));
		l_requeue := l_requeue || frameq._spec_requeue(layer, path);
		l_after := l_after || to_jsonb(frameq._spec_tags(layer, 'after', path));
		/* a layer waited for whole is not waited for frame by frame as well */
		l_after_frames := l_after_frames || to_jsonb(ARRAY(
			SELECT a FROM unnest(frameq._spec_tags(layer, 'after_frames', path)) a
			 WHERE NOT l_after[i + 1] ? a));
		edge_bound := edge_bound + n_layer * jsonb_array_length(l_after_frames[i + 1]);
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
	/* dependencies: names known, no cycle, and a bound on frame-by-frame edges */
	write_order := frameq._layer_order(l_name, l_after, l_after_frames);
	IF edge_bound > frameq._max_frame_edges() THEN
		PERFORM frameq._too_big('spec.layers', pg_catalog.format(
			'up to %s frame-by-frame dependencies (frames times after_frames layers), at most %s',
			edge_bound, frameq._max_frame_edges()));
	END IF;

	/* everything checked: write */
	INSERT INTO frameq.job AS j (show, folder, name, priority, max_retries, auto_eat,
							max_cc, max_gpus, state, timeout, timeout_no_output,
							requeue_exit_codes, requeue_delay, max_requeues, retry_delay,
							host_failure_limit, max_dead_frames)
	VALUES (show_id, folder_id, job_name, priority, max_retries, auto_eat,
			max_cc, max_gpus, CASE WHEN paused THEN 'paused' ELSE 'active' END,
			timeout, timeout_no_output,
			frameq._requeue_codes(requeue), (requeue ->> 'requeue_delay')::int,
			(requeue ->> 'max_requeues')::int, (requeue ->> 'retry_delay')::int,
			host_failure_limit, max_dead_frames)
	RETURNING j.id INTO job_id;

	unmet_jobs := frameq._submit_job_depends(job_id, after_jobs);

	FOR i IN 1 .. array_length(l_name, 1) LOOP
		INSERT INTO frameq.layer (job, name, command, dispatch_order, min_cc, max_cc,
								  threadable, memory, gpus, gpu_memory, tags, env, deps_left,
								  timeout, timeout_no_output, progress_pattern,
								  requeue_exit_codes, requeue_delay, max_requeues, retry_delay, chunk)
		VALUES (job_id, l_name[i], l_command[i], l_order[i], l_min_cc[i], l_max_cc[i],
				l_threadable[i], l_memory[i], l_gpus[i], l_gpu_memory[i],
				ARRAY(SELECT jsonb_array_elements_text(l_tags[i])), l_env[i],
				unmet_jobs + jsonb_array_length(l_after[i]),
				l_timeout[i], l_timeout_no_output[i], l_progress_pattern[i],
				frameq._requeue_codes(l_requeue[i]), (l_requeue[i] ->> 'requeue_delay')::int,
				(l_requeue[i] ->> 'max_requeues')::int, (l_requeue[i] ->> 'retry_delay')::int,
				l_chunk[i])
		RETURNING layer.id INTO layer_id;
		l_id := l_id || layer_id;
		INSERT INTO frameq.layer_limit (layer, limit_id)
		SELECT layer_id, lm.id FROM frameq.limits lm
		 WHERE lm.name IN (SELECT jsonb_array_elements_text(l_limits[i]));
	END LOOP;
	/* layer on layer: a dependency row each */
	INSERT INTO frameq.depend (kind, job, layer, on_job, on_layer)
	SELECT 'layer', job_id, l_id[x], job_id, l_id[array_position(l_name, a)]
	  FROM generate_series(1, array_length(l_name, 1)) x
	 CROSS JOIN LATERAL jsonb_array_elements_text(l_after[x]) a;
	/* frame by frame into an unchunked layer: a row per layer waited for */
	INSERT INTO frameq.depend (kind, job, layer, on_job, on_layer)
	SELECT DISTINCT 'frames', job_id, l_id[x], job_id, l_id[array_position(l_name, a)]
	  FROM generate_series(1, array_length(l_name, 1)) x
	 CROSS JOIN LATERAL jsonb_array_elements_text(l_after_frames[x]) a
	 WHERE l_chunk[x] = 1;
	/* the tasks, every layer after those it waits for frame by frame */
	FOREACH i IN ARRAY write_order LOOP
		PERFORM frameq._insert_tasks(job_id, l_id[i], l_range[i], l_chunk[i],
			unmet_jobs + jsonb_array_length(l_after[i]) > 0,
			EXISTS (SELECT 1 FROM generate_series(1, array_length(l_name, 1)) x
					 WHERE l_after[x] ? l_name[i] OR (l_after_frames[x] ? l_name[i] AND l_chunk[x] > 1)),
			ARRAY(SELECT l_id[array_position(l_name, a)]
					FROM jsonb_array_elements_text(l_after_frames[i]) a),
			ARRAY(SELECT l_range[array_position(l_name, a)] = l_range[i]
					FROM jsonb_array_elements_text(l_after_frames[i]) a));
	END LOOP;
	PERFORM frameq._announce_job_ready(job_id);
	/* a summary, not the spec: no command, no env */
	PERFORM frameq._audit('submit', job_id, NULL, NULL, NULL, pg_catalog.jsonb_build_object(
		'show', spec ->> 'show', 'folder', spec ->> 'folder', 'name', job_name,
		'layers', pg_catalog.array_length(l_name, 1), 'frames', n_frames, 'paused', paused));
	RETURN job_id;
END
$$;

/*
 * Change a job's priority or caps, pause or resume it: the positional form
 * of set_job(job, changes), which owns the logic.  Its arguments are
 * checked here under their own names; NULL leaves a field as it is, and
 * clear_caps sets both caps to the values given (NULL: no cap).
 */
CREATE FUNCTION frameq.set_job(job bigint, priority int DEFAULT NULL,
							   max_cores numeric DEFAULT NULL, max_gpus int DEFAULT NULL,
							   paused bool DEFAULT NULL, clear_caps bool DEFAULT false)
RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	changes jsonb := '{}';
BEGIN
	PERFORM frameq._authorize_job(job);
	PERFORM frameq._cc(max_cores, 'max_cores');
	PERFORM frameq._nonneg(max_gpus, 'max_gpus', 100000);
	IF priority NOT BETWEEN -1000000 AND 1000000 THEN
		RAISE EXCEPTION 'priority must be from -1000000 to 1000000, not %', priority
			USING ERRCODE = CASE WHEN priority > 0 THEN 'program_limit_exceeded'
								 ELSE 'invalid_parameter_value' END;
	END IF;
	PERFORM frameq._not_null(clear_caps, 'clear_caps');
	IF priority IS NOT NULL THEN
		changes := changes || jsonb_build_object('priority', priority);
	END IF;
	IF clear_caps OR max_cores IS NOT NULL THEN
		changes := changes || jsonb_build_object('max_cores', max_cores);
	END IF;
	IF clear_caps OR max_gpus IS NOT NULL THEN
		changes := changes || jsonb_build_object('max_gpus', max_gpus);
	END IF;
	IF paused IS NOT NULL THEN
		changes := changes || jsonb_build_object('paused', paused);
	END IF;
	PERFORM frameq.set_job(frameq._not_null(job, 'job'), changes);
END
$$;

/*
 * ---------------------------------------------------------------------
 * Editing what was submitted (doc/reference.md, "Editing jobs and
 * layers"): set_job(job, changes), set_layer, add_frames.  Every field is
 * checked by the same function submit() checks it with, under the path
 * "changes" (changes.memory), before anything is written.  JSON null
 * gives a field its default: for a layer's field that has a job-level
 * value, following the job again; for any other, submit's default.
 * ---------------------------------------------------------------------
 */

/*
 * A job's fields (submit's job-level fields but show, folder, name,
 * layers and after_jobs), as the caller's JSON object gives them; a field
 * left out stays as it is.  Pausing or resuming a finished or killed job
 * is refused (55000).  The owner of every change to a job's fields.
 */
CREATE FUNCTION frameq.set_job(job bigint, changes jsonb) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
	j frameq.job;
	v_priority int;
	v_max_retries int;
	v_auto_eat bool;
	v_paused bool;
	v_max_cc int;
	v_max_gpus int;
	v_host_failure_limit int;
	v_max_dead_frames int;
	v_timeout int;
	v_timeout_no_output int;
	requeue jsonb;
	caps_changed bool;
	was_paused bool;
BEGIN
	PERFORM frameq._authorize_job(job);
	PERFORM frameq._not_null(job, 'job');
	IF changes IS NULL OR jsonb_typeof(changes) <> 'object' THEN
		RAISE EXCEPTION 'changes must be a JSON object' USING ERRCODE = 'invalid_parameter_value';
	END IF;
	IF pg_catalog.octet_length(changes::text) > 65536 THEN
		PERFORM frameq._too_big('changes', 'more than 65536 bytes');
	END IF;
	PERFORM frameq._spec_unknown(changes, ARRAY['priority', 'max_retries', 'auto_eat', 'max_cores',
		'max_gpus', 'paused', 'timeout', 'timeout_no_output', 'host_failure_limit',
		'max_dead_frames', 'requeue_exit_codes', 'requeue_delay', 'max_requeues', 'retry_delay'],
		'changes');
	v_priority := frameq._spec_int(changes, 'priority', 'changes', 0, -1000000, 1000000);
	v_max_retries := frameq._spec_int(changes, 'max_retries', 'changes', 3, 0, 1000);
	v_auto_eat := frameq._spec_bool(changes, 'auto_eat', 'changes', false);
	v_paused := frameq._spec_bool(changes, 'paused', 'changes', false);
	v_max_cc := frameq._cc(frameq._spec_value(changes, 'max_cores', 'changes', 'number')::numeric,
						   'changes.max_cores');
	v_max_gpus := frameq._spec_int(changes, 'max_gpus', 'changes', NULL, 0, 100000);
	v_host_failure_limit := frameq._spec_int(changes, 'host_failure_limit', 'changes', NULL, 0, 1000);
	v_max_dead_frames := frameq._spec_int(changes, 'max_dead_frames', 'changes', NULL, 1, 1000000);
	v_timeout := frameq._duration(changes -> 'timeout', 'changes.timeout');
	v_timeout_no_output := frameq._duration(changes -> 'timeout_no_output', 'changes.timeout_no_output');
	requeue := frameq._spec_requeue(changes, 'changes');
	caps_changed := changes ?| ARRAY['max_cores', 'max_gpus'];

	SELECT * INTO j FROM frameq.job x WHERE x.id = set_job.job FOR NO KEY UPDATE;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'job % does not exist', job USING ERRCODE = 'undefined_object';
	END IF;
	was_paused := j.state = 'paused';
	IF changes ? 'paused' AND j.state IN ('finished', 'killed') THEN
		RAISE EXCEPTION 'job % is %: it cannot be paused or resumed', job, j.state
			USING ERRCODE = 'object_not_in_prerequisite_state';
	END IF;
	UPDATE frameq.job x SET
		priority = CASE WHEN changes ? 'priority' THEN v_priority ELSE x.priority END,
		max_retries = CASE WHEN changes ? 'max_retries' THEN v_max_retries ELSE x.max_retries END,
		auto_eat = CASE WHEN changes ? 'auto_eat' THEN v_auto_eat ELSE x.auto_eat END,
		max_cc = CASE WHEN changes ? 'max_cores' THEN v_max_cc ELSE x.max_cc END,
		max_gpus = CASE WHEN changes ? 'max_gpus' THEN v_max_gpus ELSE x.max_gpus END,
		state = CASE WHEN NOT changes ? 'paused' THEN x.state
					 WHEN v_paused THEN 'paused' ELSE 'active' END,
		/* the job's own reason for a pause goes with any pause or resume */
		paused_reason = CASE WHEN NOT changes ? 'paused' THEN x.paused_reason END,
		timeout = CASE WHEN changes ? 'timeout' THEN v_timeout ELSE x.timeout END,
		timeout_no_output = CASE WHEN changes ? 'timeout_no_output' THEN v_timeout_no_output
								 ELSE x.timeout_no_output END,
		host_failure_limit = CASE WHEN changes ? 'host_failure_limit' THEN v_host_failure_limit
								  ELSE x.host_failure_limit END,
		max_dead_frames = CASE WHEN changes ? 'max_dead_frames' THEN v_max_dead_frames
							   ELSE x.max_dead_frames END,
		requeue_exit_codes = CASE WHEN changes ? 'requeue_exit_codes'
								  THEN frameq._requeue_codes(requeue) ELSE x.requeue_exit_codes END,
		requeue_delay = CASE WHEN changes ? 'requeue_delay' THEN (requeue ->> 'requeue_delay')::int
							 ELSE x.requeue_delay END,
		max_requeues = CASE WHEN changes ? 'max_requeues' THEN (requeue ->> 'max_requeues')::int
							ELSE x.max_requeues END,
		retry_delay = CASE WHEN changes ? 'retry_delay' THEN (requeue ->> 'retry_delay')::int
						   ELSE x.retry_delay END,
		caps_changed_at = CASE WHEN caps_changed THEN clock_timestamp() ELSE x.caps_changed_at END
	 WHERE x.id = set_job.job
	RETURNING * INTO j;
	IF caps_changed THEN
		PERFORM pg_notify('frameq_limit', json_build_object(
			'kind', 'job', 'id', job, 'max_cores', j.max_cc / 100.0, 'max_gpus', j.max_gpus)::text);
	END IF;
	IF was_paused AND j.state = 'active' THEN
		PERFORM frameq._announce_job_ready(j.id);
	END IF;
	/* the changes asked for (the positional form's arguments, as changes) */
	PERFORM frameq._audit('set_job', j.id, NULL, NULL, NULL,
		pg_catalog.jsonb_build_object('changes', changes));
END
$$;

/*
 * A layer as changes would leave it: each field changes gives checked as
 * submit checks it (cores_max against cores and threadable as they will
 * be; a threadable layer's cores_max left out rises with cores if need
 * be), each it leaves out as it is.  The command is checked against every
 * frame number the layer has.  Writes nothing.
 */
CREATE FUNCTION frameq._edited_layer(l frameq.layer, changes jsonb, job_name text)
RETURNS frameq.layer LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	p constant text := 'changes';
	n frameq.layer := l;
	v jsonb;
	requeue jsonb := frameq._spec_requeue(changes, p);
	low int;
	high int;
	spec_length int;
BEGIN
	IF changes ? 'threadable' THEN
		n.threadable := frameq._spec_bool(changes, 'threadable', p, false);
	END IF;
	IF changes ? 'cores' THEN
		n.min_cc := coalesce(frameq._cc(frameq._spec_value(changes, 'cores', p, 'number')::numeric,
										'changes.cores', false, 100000), 100);
	END IF;
	v := frameq._spec_value(changes, 'cores_max', p, 'number');
	IF v IS NOT NULL THEN
		n.max_cc := frameq._cc(v::numeric, 'changes.cores_max', false, 100000);
		IF n.max_cc < n.min_cc THEN
			RAISE EXCEPTION 'changes.cores_max must not be below the layer''s cores'
				USING ERRCODE = 'invalid_parameter_value';
		END IF;
		IF n.max_cc > n.min_cc AND NOT n.threadable THEN
			RAISE EXCEPTION 'changes.cores_max above the layer''s cores needs "threadable": true'
				USING ERRCODE = 'invalid_parameter_value';
		END IF;
	ELSIF changes ? 'cores_max' OR NOT n.threadable THEN
		n.max_cc := n.min_cc;
	ELSE
		n.max_cc := greatest(n.max_cc, n.min_cc);
	END IF;
	IF changes ? 'memory' THEN
		n.memory := frameq._spec_size(changes, 'memory', p);
	END IF;
	IF changes ? 'gpus' THEN
		n.gpus := frameq._spec_int(changes, 'gpus', p, 0, 0, 1024);
	END IF;
	IF changes ? 'gpu_memory' THEN
		n.gpu_memory := frameq._spec_size(changes, 'gpu_memory', p);
	END IF;
	IF changes ? 'dispatch_order' THEN
		/* submit's default: the layer's place in its job */
		n.dispatch_order := frameq._spec_int(changes, 'dispatch_order', p,
			(SELECT count(*)::int FROM frameq.layer x WHERE x.job = l.job AND x.id < l.id),
			-1000000, 1000000);
	END IF;
	IF changes ? 'tags' THEN
		n.tags := frameq._tags(frameq._spec_tags(changes, 'tags', p), 'changes.tags');
	END IF;
	IF changes ? 'env' THEN
		n.env := frameq._check_env(frameq._spec_value(changes, 'env', p, 'object'), p);
	END IF;
	IF changes ? 'timeout' THEN
		n.timeout := frameq._duration(changes -> 'timeout', 'changes.timeout');
	END IF;
	IF changes ? 'timeout_no_output' THEN
		n.timeout_no_output := frameq._duration(changes -> 'timeout_no_output',
												'changes.timeout_no_output');
	END IF;
	IF changes ? 'progress_pattern' THEN
		n.progress_pattern := frameq._progress_pattern(changes, p);
	END IF;
	IF changes ? 'requeue_exit_codes' THEN
		n.requeue_exit_codes := frameq._requeue_codes(requeue);
	END IF;
	IF changes ? 'requeue_delay' THEN
		n.requeue_delay := (requeue ->> 'requeue_delay')::int;
	END IF;
	IF changes ? 'max_requeues' THEN
		n.max_requeues := (requeue ->> 'max_requeues')::int;
	END IF;
	IF changes ? 'retry_delay' THEN
		n.retry_delay := (requeue ->> 'retry_delay')::int;
	END IF;
	IF changes ? 'paused' THEN
		n.paused := frameq._spec_bool(changes, 'paused', p, false);
	END IF;
	IF changes ? 'command' THEN
		v := frameq._spec_value(changes, 'command', p, 'string');
		IF v IS NULL OR btrim(v #>> '{}') = '' THEN
			RAISE EXCEPTION 'changes.command must be a non-empty string'
				USING ERRCODE = 'invalid_parameter_value';
		END IF;
		n.command := v #>> '{}';
		SELECT min(x.n), max(x.n) INTO low, high
		  FROM frameq.frame f CROSS JOIN LATERAL unnest(coalesce(f.numbers, ARRAY[f.number])) x(n)
		 WHERE f.layer = l.id;
		IF l.chunk > 1 AND strpos(n.command, '#FRAMESPEC#') > 0 THEN
			SELECT max(octet_length(frameq._frame_spec(f.number, f.numbers))) INTO spec_length
			  FROM frameq.frame f WHERE f.layer = l.id;
		END IF;
		PERFORM frameq._check_command(n.command, p, job_name, l.name, low, high, spec_length);
	END IF;
	RETURN n;
END
$$;

/* changes.limits as limit ids, checked as submit checks a layer's limits; NULL if absent */
CREATE FUNCTION frameq._edited_limits(changes jsonb) RETURNS int[]
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	names text[];
	lim text;
BEGIN
	IF NOT changes ? 'limits' THEN
		RETURN NULL;
	END IF;
	names := frameq._spec_tags(changes, 'limits', 'changes');
	IF cardinality(names) > 12 THEN
		PERFORM frameq._too_big('changes.limits',
			pg_catalog.format('%s limits, at most 12', cardinality(names)));
	END IF;
	FOREACH lim IN ARRAY names LOOP
		IF NOT EXISTS (SELECT 1 FROM frameq.limits lm WHERE lm.name = lim) THEN
			RAISE EXCEPTION 'changes.limits: limit "%" does not exist', frameq._clip(lim)
				USING ERRCODE = 'undefined_object';
		END IF;
	END LOOP;
	RETURN ARRAY(SELECT lm.id FROM frameq.limits lm WHERE lm.name = ANY (names) ORDER BY lm.id);
END
$$;

/*
 * The layer of that name, for an edit: the caller may act on the job's
 * show; the job's dispatch lock is taken in EXCLUSIVE (every transaction
 * making its tasks waiting, or relying on its queue rows, ends before;
 * those that follow read the layer under FOR SHARE, which waits for the
 * edit); the layer's row is locked by the caller, after any dependency
 * rows.  A killed job is refused (55000).  READ COMMITTED only: what
 * follows reads with snapshots taken after the lock.
 */
CREATE FUNCTION frameq._edit_lock(job bigint, layer text, what text) RETURNS frameq.layer
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	j frameq.job;
	l frameq.layer;
BEGIN
	PERFORM frameq._not_null(job, 'job');
	PERFORM frameq._not_null(layer, 'layer');
	IF current_setting('transaction_isolation') <> 'read committed' THEN
		RAISE EXCEPTION '% must run in a READ COMMITTED transaction', what
			USING ERRCODE = 'feature_not_supported',
				  HINT = 'A transaction snapshot taken earlier may miss tasks made waiting since.';
	END IF;
	PERFORM frameq._authorize_job(job);
	PERFORM frameq._lock_job(job);
	SELECT * INTO j FROM frameq.job x WHERE x.id = _edit_lock.job;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'job % does not exist', job USING ERRCODE = 'undefined_object';
	END IF;
	IF j.state = 'killed' THEN
		RAISE EXCEPTION 'job % is killed: % refuses it', job, what
			USING ERRCODE = 'object_not_in_prerequisite_state';
	END IF;
	SELECT * INTO l FROM frameq.layer x WHERE x.job = _edit_lock.job AND x.name = _edit_lock.layer;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'layer "%" does not exist in job %', frameq._clip(layer), job
			USING ERRCODE = 'undefined_object';
	END IF;
	RETURN l;
END
$$;

/*
 * Change a layer's fields (doc/reference.md, "set_layer").  Running tasks
 * keep their booking; every later booking uses the new values.  A change
 * of what the layer's dispatch queue rows carry (cores, memory, gpus,
 * gpu_memory, tags, dispatch_order) or a resume queues the layer anew
 * (_queue_layers): rows of the old values are passed over or tidied by
 * reserve() (_row_current).  A memory raised to at least a task's raised
 * memory (frame.memory, an OOM retry) takes the task back to its layer's.
 */
CREATE FUNCTION frameq.set_layer(job bigint, layer text, changes jsonb) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
	j frameq.job;
	o frameq.layer;
	n frameq.layer;
	limit_ids int[];
	low int;
BEGIN
	IF changes IS NULL OR jsonb_typeof(changes) <> 'object' THEN
		RAISE EXCEPTION 'changes must be a JSON object' USING ERRCODE = 'invalid_parameter_value';
	END IF;
	IF pg_catalog.octet_length(changes::text) > 262144 THEN
		PERFORM frameq._too_big('changes', 'more than 262144 bytes');
	END IF;
	IF changes ?| ARRAY['name', 'range', 'chunk', 'after', 'after_frames'] THEN
		RAISE EXCEPTION 'changes.% cannot be edited', (SELECT k FROM jsonb_object_keys(changes) k
			WHERE k IN ('name', 'range', 'chunk', 'after', 'after_frames') ORDER BY 1 LIMIT 1)
			USING ERRCODE = 'invalid_parameter_value',
				  HINT = 'New frames: add_frames. Dependencies: depend_job, drop_depends.';
	END IF;
	PERFORM frameq._spec_unknown(changes, ARRAY['command', 'cores', 'cores_max', 'threadable',
		'memory', 'gpus', 'gpu_memory', 'tags', 'limits', 'dispatch_order', 'env', 'timeout',
		'timeout_no_output', 'progress_pattern', 'requeue_exit_codes', 'requeue_delay',
		'max_requeues', 'retry_delay', 'paused'], 'changes');
	o := frameq._edit_lock(job, layer, 'set_layer');
	SELECT * INTO j FROM frameq.job x WHERE x.id = o.job;
	n := frameq._edited_layer(o, changes, j.name);
	limit_ids := frameq._edited_limits(changes);
	/*
	 * Tasks an OOM raised to no more than the layer's new memory: back to
	 * the layer's.  Before the layer's row is locked: a release holding
	 * such a task may be waiting to read the layer (the gate).
	 */
	IF n.memory > o.memory THEN
		WITH back AS (
				UPDATE frameq.frame f SET memory = NULL
				 WHERE f.layer = o.id AND f.memory IS NOT NULL AND f.memory <= n.memory
				RETURNING f.number, f.state, f.not_before)
		SELECT min(b.number) INTO low FROM back b WHERE b.state = 'waiting' AND b.not_before IS NULL;
		IF low IS NOT NULL THEN
			PERFORM frameq._frame_waiting(o.id, low);
		END IF;
	END IF;
	SELECT x.* INTO o FROM frameq.layer x WHERE x.id = o.id FOR NO KEY UPDATE;
	UPDATE frameq.layer x SET
		command = n.command, dispatch_order = n.dispatch_order, min_cc = n.min_cc,
		max_cc = n.max_cc, threadable = n.threadable, memory = n.memory, gpus = n.gpus,
		gpu_memory = n.gpu_memory, tags = n.tags, env = n.env, timeout = n.timeout,
		timeout_no_output = n.timeout_no_output, progress_pattern = n.progress_pattern,
		requeue_exit_codes = n.requeue_exit_codes, requeue_delay = n.requeue_delay,
		max_requeues = n.max_requeues, retry_delay = n.retry_delay, paused = n.paused
	 WHERE x.id = o.id;
	IF limit_ids IS NOT NULL THEN
		DELETE FROM frameq.layer_limit ll WHERE ll.layer = o.id AND ll.limit_id <> ALL (limit_ids);
		INSERT INTO frameq.layer_limit (layer, limit_id)
		SELECT o.id, x FROM unnest(limit_ids) x
		 WHERE NOT EXISTS (SELECT 1 FROM frameq.layer_limit ll WHERE ll.layer = o.id AND ll.limit_id = x);
	END IF;
	/*
	 * Whatever the job's state but finished: a resume in flight cannot
	 * see this change, and queues the layer's old values
	 */
	IF j.state <> 'finished' AND NOT n.paused
	   AND (o.paused OR low IS NOT NULL
			OR (o.min_cc, o.memory, o.gpus, o.gpu_memory, o.tags, o.dispatch_order)
			   IS DISTINCT FROM (n.min_cc, n.memory, n.gpus, n.gpu_memory, n.tags, n.dispatch_order)) THEN
		PERFORM frameq._queue_layers(ARRAY[o.id]);
		PERFORM frameq._announce_ready(j.id, o.id, (SELECT count(*) FROM frameq.frame f
			WHERE f.layer = o.id AND f.state = 'waiting' AND f.not_before IS NULL));
	END IF;
	/* env values are reduced to their names by _audit */
	PERFORM frameq._audit('set_layer', j.id, o.id, NULL, NULL,
		pg_catalog.jsonb_build_object('layer', set_layer.layer, 'changes', changes));
END
$$;

/*
 * New tasks at the end of a layer (doc/reference.md, "add_frames"): the
 * frame numbers of range, none of which the layer has, cut into tasks of
 * the layer's chunk; held as a submitted task would be by the layer's and
 * the job's unmet dependencies, and holding the layers that wait for this
 * one (under the dependency rows' locks, which a prerequisite's last end
 * takes too: either it sees the new tasks, or they see it met).  A layer
 * with frame-by-frame dependencies not yet met, either way, is refused
 * (0A000).  A finished job is active again; a killed one is refused.
 * Returns the tasks added.
 */
CREATE FUNCTION frameq.add_frames(job bigint, layer text, range text) RETURNS int
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
	j frameq.job;
	l frameq.layer;
	n_new bigint;
	n_distinct bigint;
	low int;
	high int;
	taken int;
	prereq bool;
	spec_length int;
	added int;
BEGIN
	l := frameq._edit_lock(job, layer, 'add_frames');
	SELECT * INTO j FROM frameq.job x WHERE x.id = l.job;
	SELECT count(*), count(DISTINCT x), min(x), max(x) INTO n_new, n_distinct, low, high
	  FROM frameq._frame_numbers(range, 'range') x;
	IF n_new <> n_distinct THEN
		RAISE EXCEPTION 'range lists a frame more than once' USING ERRCODE = 'invalid_parameter_value';
	END IF;
	SELECT min(x.n) INTO taken
	  FROM frameq.frame f CROSS JOIN LATERAL unnest(coalesce(f.numbers, ARRAY[f.number])) x(n)
	 WHERE f.layer = l.id AND x.n IN (SELECT frameq._frame_numbers(range, 'range'));
	IF taken IS NOT NULL THEN
		RAISE EXCEPTION 'range: frame % is in layer "%" of job % already', taken, frameq._clip(l.name), j.id
			USING ERRCODE = 'unique_violation';
	END IF;
	IF (SELECT sum(coalesce(cardinality(f.numbers), 1)) FROM frameq.frame f WHERE f.job = j.id)
	   + n_new > 1000000 THEN
		PERFORM frameq._too_big('range', pg_catalog.format(
			'job %s would have more than 1000000 frames in all', j.id));
	END IF;
	IF l.chunk > 1 AND strpos(l.command, '#FRAMESPEC#') > 0 THEN
		SELECT max(octet_length(frameq._frame_spec(t.first, t.numbers))) INTO spec_length
		  FROM frameq._frame_tasks(range, 'range', l.chunk) t;
	END IF;
	SELECT least(low, min(x.n)), greatest(high, max(x.n)) INTO low, high
	  FROM frameq.frame f CROSS JOIN LATERAL unnest(coalesce(f.numbers, ARRAY[f.number])) x(n)
	 WHERE f.layer = l.id;
	IF frameq._expanded_length(l.command, j.name, l.name, low, high, spec_length) > 65536 THEN
		PERFORM frameq._too_big('range', pg_catalog.format(
			'layer "%s"''s command would be longer than 65536 bytes once its tokens are expanded',
			frameq._clip(l.name)));
	END IF;
	/* lock order: dependency rows, then the layer's row, then tasks */
	PERFORM 1 FROM frameq.depend d
	  WHERE d.on_layer = l.id AND d.kind = 'layer' AND NOT d.satisfied ORDER BY d.id FOR UPDATE;
	prereq := FOUND;
	SELECT x.* INTO l FROM frameq.layer x WHERE x.id = l.id FOR NO KEY UPDATE;
	IF EXISTS (SELECT 1 FROM frameq.depend d
				WHERE d.kind = 'frames' AND (d.layer = l.id OR d.on_layer = l.id) AND NOT d.satisfied)
	   OR EXISTS (SELECT 1 FROM frameq.frame f JOIN frameq.frame_depend fd ON fd.frame = f.id
				   WHERE f.layer = l.id AND NOT fd.satisfied)
	   OR EXISTS (SELECT 1 FROM frameq.frame f JOIN frameq.frame_depend fd ON fd.on_frame = f.id
				   WHERE f.layer = l.id AND NOT fd.satisfied) THEN
		RAISE EXCEPTION 'layer "%" of job % has frame-by-frame dependencies not yet met', frameq._clip(l.name), j.id
			USING ERRCODE = 'feature_not_supported',
				  HINT = 'add_frames cannot give new tasks their share of them; drop_depends drops them.';
	END IF;
	/* a release finishing the job waits for this, and then sees the new tasks */
	SELECT * INTO j FROM frameq.job x WHERE x.id = j.id FOR NO KEY UPDATE;
	IF j.state = 'finished' THEN
		UPDATE frameq.job x SET state = 'active', finished_at = NULL WHERE x.id = j.id;
	END IF;
	PERFORM frameq._insert_tasks(j.id, l.id, range, l.chunk, l.deps_left > 0, prereq, '{}', '{}');
	SELECT count(*), min(t.first) INTO added, low FROM frameq._frame_tasks(range, 'range', l.chunk) t;
	IF l.deps_left = 0 THEN
		PERFORM frameq._frame_waiting(l.id, low);
		PERFORM frameq._announce_ready(j.id, l.id, added);
	END IF;
	PERFORM frameq._audit('add_frames', j.id, l.id, NULL, NULL,
		pg_catalog.jsonb_build_object('layer', add_frames.layer, 'range', range, 'tasks', added));
	RETURN added;
END
$$;
