/*
 * Layer chunks (doc/reference.md, "submit"): a layer's "chunk" cuts its
 * frame numbers into tasks of that many numbers, each one frame row, booked
 * and run as one.  A task of several numbers keeps them in the new column
 * frame.numbers (NULL for one number, as every frame written before this
 * step); _frame_spec writes them as text for the frames view and the
 * #FRAMESPEC# token, and job_progress counts the numbers too
 * (frames_total).  The command bound counts the new tokens, so
 * _expanded_length and _check_command gain the longest spec of a layer's
 * tasks and their old forms are dropped.
 */
ALTER TABLE frameq.frame ADD COLUMN numbers int[]
	CHECK (pg_catalog.array_ndims(numbers) OPERATOR(pg_catalog.=) 1
		   AND pg_catalog.array_lower(numbers, 1) OPERATOR(pg_catalog.=) 1
		   AND pg_catalog.cardinality(numbers) OPERATOR(pg_catalog.>) 1
		   AND numbers[1] OPERATOR(pg_catalog.=) number
		   AND pg_catalog.array_position(numbers, NULL) IS NULL);

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

DROP FUNCTION frameq._check_command(text, text, text, text, int, int);
DROP FUNCTION frameq._expanded_length(text, text, text, int, int);

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
	l_chunk int[] := '{}';
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
			'dispatch_order', 'env', 'chunk'], path);

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
		IF l_chunk[i] = 1 THEN
			INSERT INTO frameq.frame (job, layer, number)
			SELECT job_id, layer_id, n FROM frameq._frame_numbers(l_range[i], 'range') n;
		ELSE
			INSERT INTO frameq.frame (job, layer, number, numbers)
			SELECT job_id, layer_id, t.first, t.numbers
			  FROM frameq._frame_tasks(l_range[i], 'range', l_chunk[i]) t;
		END IF;
	END LOOP;
	RETURN job_id;
END
$$;

/*
 * every frame row (a task: one frame number, or a chunk of them), with its
 * proc and host while it runs; frame_number is the task's first number
 */
CREATE OR REPLACE VIEW frameq.frames AS
SELECT f.id AS frame, f.job, f.layer, f.number AS frame_number, f.state, f.retries,
	   f.attempts, p.id AS proc, h.name AS host, p.state AS proc_state,
	   frameq._frame_spec(f.number, f.numbers) AS frame_spec
  FROM frameq.frame f
  LEFT JOIN frameq.proc p ON p.frame = f.id
  LEFT JOIN frameq.host h ON h.id = p.host;

/* each job's tasks by state, and how many frame numbers they hold */
CREATE OR REPLACE VIEW frameq.job_progress AS
SELECT j.id AS job, j.name, j.state,
	   count(f.id) AS total,
	   count(f.id) FILTER (WHERE f.state = 'waiting') AS waiting,
	   count(f.id) FILTER (WHERE f.state = 'depend') AS depend,
	   count(f.id) FILTER (WHERE f.state = 'running') AS running,
	   count(f.id) FILTER (WHERE f.state = 'succeeded') AS succeeded,
	   count(f.id) FILTER (WHERE f.state = 'dead') AS dead,
	   count(f.id) FILTER (WHERE f.state = 'eaten') AS eaten,
	   count(f.id) + coalesce(sum(pg_catalog.cardinality(f.numbers) - 1), 0) AS frames_total
  FROM frameq.job j
  LEFT JOIN frameq.frame f ON f.job = j.id
 GROUP BY j.id;

REVOKE ALL ON FUNCTION frameq._frame_spec(int, int[]), frameq._frame_tasks(text, text, int),
	frameq._expanded_length(text, text, text, int, int, int),
	frameq._check_command(text, text, text, text, int, int, int)
	FROM PUBLIC;
/* the frames view calls _frame_spec, as its reader */
GRANT EXECUTE ON FUNCTION frameq._frame_spec(int, int[]) TO frameq_reader;
