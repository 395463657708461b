/*
 * Names have one rule, frameq._name() (sql/src/util.sql): submit checks a
 * job's and each layer's name through it, as the administration functions
 * check the names they are given, instead of spelling the pattern twice
 * more.  _name gains its kind and its maximum length (the 0.3.0
 * _name(value, field) had both fixed), so the old one is dropped; the
 * administration functions' two-argument calls reach the new one through
 * its defaults.
 */
DROP FUNCTION frameq._name(text, text);

/*
 * The rule for names, in one place: 1 to max_length (100 unless given)
 * letters, digits and _ . : @ + -, so no spaces and no shell characters
 * (job and layer names reach commands through #JOB# and #LAYER#).  kind
 * is what the message calls the value: 'name' for allocations, shows,
 * folders, limits and hosts, 'job name' (200 characters), 'layer name'.
 * doc/reference.md states the rule for users; the agent applies it to
 * its --host before it ever connects.
 */
CREATE FUNCTION frameq._name(value text, field text, kind text DEFAULT 'name',
							 max_length int DEFAULT 100)
RETURNS text LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
BEGIN
	PERFORM frameq._not_null(value, field);
	PERFORM frameq._bounded(value, field, max_length);
	IF value OPERATOR(pg_catalog.!~) pg_catalog.format('^[A-Za-z0-9_.:@+-]{1,%s}$', max_length) THEN
		RAISE EXCEPTION '% "%" is not a valid %', field, frameq._clip(value), kind
			USING ERRCODE = 'invalid_parameter_value',
				  HINT = pg_catalog.format('%s%ss are 1 to %s letters, digits and _ . : @ + -.',
										   pg_catalog.upper(pg_catalog.left(kind, 1)),
										   pg_catalog.substr(kind, 2), max_length);
	END IF;
	RETURN value;
END
$$;

REVOKE ALL ON FUNCTION frameq._name(text, text, text, int) FROM PUBLIC;

/*
 * A job from its JSON spec (doc/reference.md): every field is checked
 * first, then the job, its layers, their limits and their frames are
 * written.  Returns the job's id.
 */
CREATE OR REPLACE FUNCTION frameq.submit(spec jsonb) RETURNS bigint
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
	job_name := frameq._name(v #>> '{}', 'spec.name', 'job name', 200);
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
