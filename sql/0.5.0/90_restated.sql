/*
 * Every function, view and trigger that 0.5.0 adds or changes, in its final
 * form (sql/src/), in the install script's order; what 0.5.0 removes is
 * dropped first.  Functions new in 0.5.0 are revoked from PUBLIC at the
 * end; the pieces after this one grant those of the public API.
 * Generated from the topic files: edit those.
 */

DROP TRIGGER frame_queue_waiting ON frameq.frame;

DROP FUNCTION frameq._frame_queue_waiting();

DROP FUNCTION frameq.heartbeat(text, text, bigint, bigint[]);

DROP FUNCTION frameq.complete(text, text, bigint, bigint, int, int, bigint);

DROP FUNCTION frameq._insert_tasks(bigint, bigint, text, int, bool, bool, bigint[]);

CREATE FUNCTION frameq._duration(value jsonb, field text, zero_ok bool DEFAULT false) RETURNS int
LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	max_seconds constant int := 365 * 86400;
	t text := pg_catalog.jsonb_typeof(value);
	m text[];
	n numeric;
BEGIN
	IF value IS NULL OR t = 'null' THEN
		RETURN NULL;
	END IF;
	IF t = 'number' THEN
		n := value::numeric;
		IF n <> pg_catalog.trunc(n) THEN
			n := NULL;
		END IF;
	ELSIF t = 'string' THEN
		IF pg_catalog.length(value #>> '{}') > 64 THEN
			PERFORM frameq._too_big(field, pg_catalog.format('%s characters, at most 64',
															 pg_catalog.length(value #>> '{}')));
		END IF;
		m := pg_catalog.regexp_match(value #>> '{}',
									 '^(?:([0-9]+)d)?(?:([0-9]+)h)?(?:([0-9]+)m)?(?:([0-9]+)s)?$');
		IF m IS NOT NULL AND (value #>> '{}') <> '' THEN
			n := coalesce(m[1]::numeric, 0) * 86400 + coalesce(m[2]::numeric, 0) * 3600
				 + coalesce(m[3]::numeric, 0) * 60 + coalesce(m[4]::numeric, 0);
		END IF;
	END IF;
	IF n > max_seconds THEN
		RAISE EXCEPTION '% is too large: %, at most 365 days (% seconds)', field,
			frameq._clip(value::text), max_seconds
			USING ERRCODE = 'program_limit_exceeded';
	END IF;
	IF n IS NULL OR n < 0 OR (n = 0 AND NOT zero_ok) THEN
		RAISE EXCEPTION '% must be a duration%: whole seconds, or a string such as "90s", "2h" or "1h30m", not %',
			field, CASE WHEN zero_ok THEN '' ELSE ' above 0' END, frameq._clip(value::text)
			USING ERRCODE = 'invalid_parameter_value',
				  HINT = 'Units: d, h, m, s, in that order. Leave the field out for none.';
	END IF;
	RETURN n::int;
END
$$;

CREATE FUNCTION frameq._failed_state(frame bigint) RETURNS text
	AS 'MODULE_PATHNAME', 'frameq_failed_state' LANGUAGE C STABLE STRICT
	SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION frameq._default_host_failure_limit() RETURNS int
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$ SELECT 3 $$;

CREATE FUNCTION frameq._job_blocks_mark(job bigint) RETURNS void
LANGUAGE sql SET search_path = pg_catalog, pg_temp AS $$
	UPDATE frameq.job j SET host_blocks = b.blocked
	  FROM (SELECT EXISTS (SELECT 1 FROM frameq.job_host_failure f
							WHERE f.job = _job_blocks_mark.job AND f.blocked_at IS NOT NULL)
				   AS blocked) b
	 WHERE j.id = _job_blocks_mark.job AND j.host_blocks IS DISTINCT FROM b.blocked
$$;

CREATE FUNCTION frameq._task_died() RETURNS trigger
	AS 'MODULE_PATHNAME', 'frameq_task_died' LANGUAGE C
	SET search_path = pg_catalog, pg_temp;

CREATE TRIGGER frame_task_died AFTER UPDATE OF state ON frameq.frame
	FOR EACH ROW WHEN (NEW.state = 'dead' AND OLD.state IS DISTINCT FROM 'dead')
	EXECUTE FUNCTION frameq._task_died();

CREATE FUNCTION frameq._pause_for_dead(job bigint) RETURNS bool
	AS 'MODULE_PATHNAME', 'frameq_pause_for_dead' LANGUAGE C VOLATILE STRICT
	SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION frameq._hold_job(job bigint) RETURNS boolean
	AS 'MODULE_PATHNAME', 'frameq_hold_job_sql' LANGUAGE C VOLATILE STRICT
	SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION frameq._claim_jobs(jobs bigint[]) RETURNS bigint[]
	AS 'MODULE_PATHNAME', 'frameq_claim_jobs' LANGUAGE C VOLATILE STRICT
	SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION frameq._lock_job(job bigint) RETURNS void
	AS 'MODULE_PATHNAME', 'frameq_lock_job' LANGUAGE C VOLATILE STRICT
	SET search_path = pg_catalog, pg_temp;

CREATE OR REPLACE FUNCTION frameq._queue_layers(layers bigint[]) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp SET plan_cache_mode = force_generic_plan AS $$
DECLARE
	held_layers bigint[] := '{}';
BEGIN
	IF current_setting('transaction_isolation') = 'read committed' THEN
		/*
		 * The jobs of these layers only: OFFSET 0 keeps _hold_job out of
		 * the scan of layer, where a plan (a sequential scan of a small
		 * table) could call it first, on every job's layer.
		 */
		held_layers := ARRAY(SELECT x.id FROM (SELECT l.id, l.job FROM frameq.layer l
												WHERE l.id = ANY (layers) OFFSET 0) x
							  WHERE frameq._hold_job(x.job));
	END IF;
	WITH seen AS (
			SELECT q.layer, q.tag, q.priority FROM frameq.dispatch_queue q
			 WHERE q.layer = ANY (held_layers)),
		 held AS (
			SELECT q.layer, q.tag, q.priority FROM frameq.dispatch_queue q
			 WHERE q.layer = ANY (layers) AND q.layer <> ALL (held_layers)
			   FOR KEY SHARE OF q SKIP LOCKED),
		 queued AS (
			INSERT INTO frameq.dispatch_queue
				(show, tag, gpu, priority, job, dispatch_order, layer, min_cc, memory, gpus, gpu_memory,
				 mem_class, core_class)
			SELECT j.show, t.tag, l.gpus > 0, j.priority, j.id, l.dispatch_order,
				   l.id, l.min_cc, l.memory, l.gpus, l.gpu_memory,
				   frameq._memory_class(l.memory), frameq._cores_class(l.min_cc)
			  FROM frameq.layer l
			  JOIN frameq.job j ON j.id = l.job
			 CROSS JOIN LATERAL (SELECT DISTINCT x AS tag
								   FROM unnest(CASE WHEN cardinality(l.tags) = 0
													THEN ARRAY['']::text[] ELSE l.tags END) x) t
			 WHERE l.id = ANY (layers)
			   AND NOT EXISTS (SELECT 1 FROM seen h
								WHERE h.layer = l.id AND h.tag = t.tag AND h.priority = j.priority)
			   AND NOT EXISTS (SELECT 1 FROM held h
								WHERE h.layer = l.id AND h.tag = t.tag AND h.priority = j.priority)
			RETURNING show, tag, gpu, mem_class, core_class)
	INSERT INTO frameq.dispatch_class (show, tag, gpu, mem_class, core_class)
	SELECT DISTINCT n.show, n.tag, n.gpu, n.mem_class, n.core_class
	  FROM queued n
	 WHERE NOT EXISTS (SELECT 1 FROM frameq.dispatch_class c
						WHERE c.show = n.show AND c.tag = n.tag AND c.gpu = n.gpu
						  AND c.mem_class = n.mem_class AND c.core_class = n.core_class)
		/*
		 * A transaction snapshot may be older than a prune that removed
		 * the entry it sees: list the stream again (the prune removes
		 * the duplicate).
		 */
		OR current_setting('transaction_isolation') <> 'read committed';
END
$$;

CREATE OR REPLACE FUNCTION frameq._dispatch_tidy(stale tid[], emptied bigint[], parked tid[]) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	jobs bigint[];
BEGIN
	IF pg_catalog.cardinality(stale) OPERATOR(pg_catalog.>) 0 THEN
		PERFORM frameq._queue_layers(ARRAY(
			SELECT DISTINCT q.layer FROM frameq.dispatch_queue q
			  JOIN frameq.job j ON j.id OPERATOR(pg_catalog.=) q.job
			 WHERE q.ctid OPERATOR(pg_catalog.=) ANY (stale) AND j.state OPERATOR(pg_catalog.=) 'active'
			   AND j.priority OPERATOR(pg_catalog.<>) q.priority));
		jobs := frameq._claim_jobs(ARRAY(SELECT DISTINCT x.job FROM frameq.dispatch_queue x
										  WHERE x.ctid OPERATOR(pg_catalog.=) ANY (stale)));
		DELETE FROM frameq.dispatch_queue q
		 WHERE q.ctid OPERATOR(pg_catalog.=) ANY (ARRAY(
				SELECT x.ctid FROM frameq.dispatch_queue x
				 WHERE x.ctid OPERATOR(pg_catalog.=) ANY (stale)
				   AND x.job OPERATOR(pg_catalog.=) ANY (jobs) FOR UPDATE SKIP LOCKED))
		   AND NOT EXISTS (SELECT 1 FROM frameq.job j
							WHERE j.id OPERATOR(pg_catalog.=) q.job AND j.state OPERATOR(pg_catalog.=) 'active'
							  AND j.priority OPERATOR(pg_catalog.=) q.priority);
	END IF;
	IF pg_catalog.cardinality(emptied) OPERATOR(pg_catalog.>) 0 THEN
		jobs := frameq._claim_jobs(ARRAY(SELECT DISTINCT x.job FROM frameq.dispatch_queue x
										  WHERE x.layer OPERATOR(pg_catalog.=) ANY (emptied)));
		DELETE FROM frameq.dispatch_queue q
		 WHERE q.ctid OPERATOR(pg_catalog.=) ANY (ARRAY(
				SELECT x.ctid FROM frameq.dispatch_queue x
				 WHERE x.layer OPERATOR(pg_catalog.=) ANY (emptied)
				   AND x.job OPERATOR(pg_catalog.=) ANY (jobs) FOR UPDATE SKIP LOCKED))
		   AND NOT EXISTS (SELECT 1 FROM frameq.frame f
							WHERE f.layer OPERATOR(pg_catalog.=) q.layer
							  AND f.state OPERATOR(pg_catalog.=) 'waiting' AND f.not_before IS NULL);
	END IF;
	IF pg_catalog.cardinality(parked) OPERATOR(pg_catalog.>) 0 THEN
		jobs := frameq._claim_jobs(ARRAY(SELECT DISTINCT x.job FROM frameq.dispatch_queue x
										  WHERE x.ctid OPERATOR(pg_catalog.=) ANY (parked)));
		DELETE FROM frameq.dispatch_queue q
		 WHERE q.ctid OPERATOR(pg_catalog.=) ANY (ARRAY(
				SELECT x.ctid FROM frameq.dispatch_queue x
				 WHERE x.ctid OPERATOR(pg_catalog.=) ANY (parked)
				   AND x.job OPERATOR(pg_catalog.=) ANY (jobs) FOR UPDATE SKIP LOCKED))
		   AND EXISTS (SELECT 1 FROM frameq.job j
						 LEFT JOIN frameq.folder f ON f.id OPERATOR(pg_catalog.=) j.folder
						WHERE j.id OPERATOR(pg_catalog.=) q.job
						  AND frameq._parked_over_cap(j.id, coalesce(j.max_cc, -1),
													  coalesce(j.max_gpus, -1), j.folder,
													  coalesce(f.max_cc, -1), coalesce(f.max_gpus, -1),
													  q.min_cc, q.gpus));
	END IF;
END
$$;

CREATE OR REPLACE FUNCTION frameq._queue_waiting_of(jobs bigint[]) RETURNS void
LANGUAGE sql SET search_path = pg_catalog, pg_temp AS $$
	SELECT frameq._queue_layers(ARRAY(
		SELECT l.id FROM frameq.layer l
		  JOIN frameq.job j ON j.id OPERATOR(pg_catalog.=) l.job
		 WHERE l.job OPERATOR(pg_catalog.=) ANY (jobs)
		   AND j.state OPERATOR(pg_catalog.=) 'active'
		   AND EXISTS (SELECT 1 FROM frameq.frame f
						WHERE f.layer OPERATOR(pg_catalog.=) l.id
						  AND f.state OPERATOR(pg_catalog.=) 'waiting' AND f.not_before IS NULL)))
$$;

CREATE OR REPLACE FUNCTION frameq._queue_waiting_layers() RETURNS void
LANGUAGE sql SET search_path = pg_catalog, pg_temp AS $$
	SELECT frameq._queue_layers(ARRAY(
		SELECT l.id FROM frameq.layer l
		  JOIN frameq.job j ON j.id OPERATOR(pg_catalog.=) l.job
		 CROSS JOIN LATERAL pg_catalog.unnest(
				CASE WHEN pg_catalog.cardinality(l.tags) OPERATOR(pg_catalog.=) 0
					 THEN ARRAY['']::text[] ELSE l.tags END) t(tag)
		 WHERE j.state OPERATOR(pg_catalog.=) 'active'
		   AND EXISTS (SELECT 1 FROM frameq.frame f
						WHERE f.layer OPERATOR(pg_catalog.=) l.id
						  AND f.state OPERATOR(pg_catalog.=) 'waiting' AND f.not_before IS NULL)
		   AND NOT EXISTS (SELECT 1 FROM frameq.dispatch_queue q
							WHERE q.layer OPERATOR(pg_catalog.=) l.id
							  AND q.tag OPERATOR(pg_catalog.=) t.tag
							  AND q.priority OPERATOR(pg_catalog.=) j.priority)))
$$;

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

CREATE FUNCTION frameq._requeue_codes(requeue jsonb) RETURNS int[]
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
	SELECT CASE WHEN pg_catalog.jsonb_typeof(requeue -> 'requeue_exit_codes') = 'array'
				THEN ARRAY(SELECT pg_catalog.jsonb_array_elements_text(requeue -> 'requeue_exit_codes')::int)
		   END
$$;

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
								  requeue_exit_codes, requeue_delay, max_requeues, retry_delay)
		VALUES (job_id, l_name[i], l_command[i], l_order[i], l_min_cc[i], l_max_cc[i],
				l_threadable[i], l_memory[i], l_gpus[i], l_gpu_memory[i],
				ARRAY(SELECT jsonb_array_elements_text(l_tags[i])), l_env[i],
				unmet_jobs + jsonb_array_length(l_after[i]),
				l_timeout[i], l_timeout_no_output[i], l_progress_pattern[i],
				frameq._requeue_codes(l_requeue[i]), (l_requeue[i] ->> 'requeue_delay')::int,
				(l_requeue[i] ->> 'max_requeues')::int, (l_requeue[i] ->> 'retry_delay')::int)
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
	RETURN job_id;
END
$$;

CREATE OR REPLACE FUNCTION frameq.set_job(job bigint, priority int DEFAULT NULL,
							   max_cores numeric DEFAULT NULL, max_gpus int DEFAULT NULL,
							   paused bool DEFAULT NULL, clear_caps bool DEFAULT false)
RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
	j frameq.job;
	cap_cc int := frameq._cc(max_cores, 'max_cores');
	caps_changed bool := clear_caps OR max_cores IS NOT NULL OR max_gpus IS NOT NULL;
	was_paused bool;
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
	was_paused := j.state = 'paused';
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
		/* the job's own reason for a pause goes with any pause or resume */
		paused_reason = CASE WHEN set_job.paused IS NULL THEN x.paused_reason END,
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
END
$$;

CREATE FUNCTION frameq._report_entries(report jsonb)
RETURNS TABLE (proc bigint, idle float8, last_line text, progress real)
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
	SELECT DISTINCT ON (v.proc) v.proc, v.idle, v.last_line, v.progress
	  FROM pg_catalog.jsonb_array_elements(
			   CASE WHEN pg_catalog.jsonb_typeof(report) OPERATOR(pg_catalog.=) 'array'
					 AND pg_catalog.jsonb_array_length(report) OPERATOR(pg_catalog.<=) 10000
					 AND pg_catalog.pg_column_size(report) OPERATOR(pg_catalog.<=) 4194304
				   THEN report ELSE '[]' END) WITH ORDINALITY AS r(e, n)
	 CROSS JOIN LATERAL (
			SELECT pg_catalog.jsonb_typeof(r.e -> 'proc') AS proc,
				   coalesce(pg_catalog.jsonb_typeof(r.e -> 'idle'), 'null') AS idle,
				   coalesce(pg_catalog.jsonb_typeof(r.e -> 'last_line'), 'null') AS last_line,
				   coalesce(pg_catalog.jsonb_typeof(r.e -> 'progress'), 'null') AS progress
			 WHERE pg_catalog.jsonb_typeof(r.e) OPERATOR(pg_catalog.=) 'object') t
	 CROSS JOIN LATERAL (
			/* each value, NULL if absent, null or out of its range */
			SELECT CASE WHEN t.proc OPERATOR(pg_catalog.=) 'number'
						 AND (r.e ->> 'proc')::numeric BETWEEN 1 AND 9223372036854775807
						 AND (r.e ->> 'proc')::numeric OPERATOR(pg_catalog.=)
							 pg_catalog.trunc((r.e ->> 'proc')::numeric)
					   THEN (r.e ->> 'proc')::bigint END AS proc,
				   CASE WHEN t.idle OPERATOR(pg_catalog.=) 'number'
						 AND (r.e ->> 'idle')::numeric BETWEEN 0 AND 1000000000
					   THEN (r.e ->> 'idle')::float8 END AS idle,
				   CASE WHEN t.last_line OPERATOR(pg_catalog.=) 'string'
					   THEN pg_catalog.left(r.e ->> 'last_line', 200) END AS last_line,
				   CASE WHEN t.progress OPERATOR(pg_catalog.=) 'number'
						 AND (r.e ->> 'progress')::numeric BETWEEN 0 AND 100
					   THEN (r.e ->> 'progress')::real END AS progress) v
	 WHERE v.proc IS NOT NULL
	   /* a field given is a field well formed */
	   AND (v.idle IS NOT NULL OR t.idle OPERATOR(pg_catalog.=) 'null')
	   AND (v.last_line IS NOT NULL OR t.last_line OPERATOR(pg_catalog.=) 'null')
	   AND (v.progress IS NOT NULL OR t.progress OPERATOR(pg_catalog.=) 'null')
	   AND NOT EXISTS (SELECT 1 FROM pg_catalog.jsonb_object_keys(r.e) k
						WHERE k OPERATOR(pg_catalog.<>) ALL ('{proc,idle,last_line,progress}'::text[]))
	 ORDER BY v.proc, r.n DESC
$$;

CREATE FUNCTION frameq._take_report(host_id int, epoch bigint, report jsonb) RETURNS int
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	n int;
BEGIN
	IF report IS NULL THEN
		RETURN 0;
	END IF;
	/* before the first write of procs: see _ledger_ensure */
	PERFORM frameq._ledger_ensure();
	WITH p AS (SELECT x.id, x.frame, x.job, x.layer, x.state, r.idle, r.last_line, r.progress
				 FROM frameq._report_entries(report) r
				 JOIN frameq.proc x ON x.id = r.proc
				WHERE x.host = host_id AND x.epoch = _take_report.epoch
				  FOR NO KEY UPDATE OF x SKIP LOCKED),
		 l AS (SELECT p.*,
					  CASE WHEN p.state = 'running' AND p.idle IS NOT NULL
						   THEN (SELECT coalesce(y.timeout_no_output, j.timeout_no_output)
								   FROM frameq.layer y, frameq.job j
								  WHERE y.id = p.layer AND j.id = p.job) END AS limit_s
				 FROM p),
		 k AS (SELECT l.*, coalesce(l.idle > l.limit_s, false) AS stalled FROM l),
		 u AS (UPDATE frameq.proc x
				  SET last_line = coalesce(k.last_line, x.last_line),
					  progress = coalesce(k.progress, x.progress),
					  last_output_at = coalesce(clock_timestamp() - make_interval(secs => k.idle),
												x.last_output_at),
					  state = CASE WHEN k.stalled THEN 'killing' ELSE x.state END,
					  kill_cause = CASE WHEN k.stalled THEN 'stalled' ELSE x.kill_cause END,
					  kill_reason = CASE WHEN k.stalled
										 THEN format('stalled: no output for %s s, limit %s s',
													 k.idle, k.limit_s)
										 ELSE x.kill_reason END,
					  want_state = CASE WHEN k.stalled THEN frameq._failed_state(k.frame)
										ELSE x.want_state END,
					  kill_at = CASE WHEN k.stalled THEN clock_timestamp() ELSE x.kill_at END
				 FROM k WHERE x.id = k.id
			   RETURNING k.stalled)
	SELECT count(*) FILTER (WHERE u.stalled) INTO n FROM u;
	RETURN n;
END
$$;

CREATE FUNCTION frameq.heartbeat(host text, token text, epoch bigint, running bigint[],
								 report jsonb DEFAULT NULL,
								 OUT lease_ttl interval, OUT kill bigint[])
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp SET lock_timeout = 0 AS $$
#variable_conflict use_column
DECLARE
	h frameq.host := frameq._host_lock(host, token);
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
	/* fencing, as reserve() does it (src/lease.c): FQ001, FQ002 */
	PERFORM frameq._check_lease(h.id, host, epoch);

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
			/*
			 * Kill orders the host no longer lists are confirmed dead;
			 * bookings it has demonstrably seen and no longer runs were
			 * lost.  One call, so that all are locked before any is released.
			 */
			PERFORM frameq._release_procs(
				ARRAY(SELECT x.id FROM frameq.proc x
					   WHERE x.host = h.id AND x.id <> ALL (heartbeat.running)
						 AND (x.state = 'killing'
							  OR (x.epoch = h.epoch AND x.booked_at < h.last_renewal_at))),
				NULL);
		EXCEPTION WHEN lock_not_available THEN
			RAISE LOG 'frameq: heartbeat of host "%" left its releases to the next heartbeat: a row it needs is locked by another session', h.name;
		END;
	END IF;
	/* how the renders are doing; stalled ones become kill orders, returned below */
	PERFORM frameq._take_report(h.id, h.epoch, report);
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

CREATE FUNCTION frameq.complete(host text, token text, epoch bigint, proc bigint,
								exit_status int, exit_signal int DEFAULT 0,
								max_rss bigint DEFAULT NULL, oom bool DEFAULT false)
	RETURNS text
	AS 'MODULE_PATHNAME', 'frameq_complete' LANGUAGE C VOLATILE
	SECURITY DEFINER SET search_path = pg_catalog, pg_temp;

CREATE OR REPLACE FUNCTION frameq._kill_order(proc bigint, reason text, want text) RETURNS bool
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
	PERFORM frameq._ledger_ensure();
	UPDATE frameq.proc x
	   SET state = 'killing', kill_reason = _kill_order.reason, want_state = want,
		   kill_at = coalesce(x.kill_at, clock_timestamp()),
		   /* an operator's order replaces a timeout's or a stall's: no retry is counted */
		   kill_cause = NULL
	 WHERE x.id = _kill_order.proc;
	RETURN FOUND;
END
$$;

CREATE OR REPLACE FUNCTION frameq._frame_action(frame bigint, reason text, want text, from_states text[],
									 target text)
RETURNS text LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	f frameq.frame;
	p bigint;
BEGIN
	FOR attempt IN 1 .. 100 LOOP
		SELECT x.id INTO p FROM frameq.proc x WHERE x.frame = _frame_action.frame;
		IF FOUND AND frameq._kill_order(p, reason, want) THEN
			RETURN 'kill order';
		END IF;
		/*
		 * An operator's retry of a finished frame gives it its retries and
		 * requeues back; every move here ends a delay (frame.not_before).
		 */
		UPDATE frameq.frame x SET state = target, version = x.version + 1,
			   retries = CASE WHEN target = 'waiting' THEN 0 ELSE x.retries END,
			   requeues = CASE WHEN target = 'waiting' THEN 0 ELSE x.requeues END,
			   not_before = NULL
		 WHERE x.id = _frame_action.frame AND x.state = ANY (from_states)
		RETURNING * INTO f;
		IF FOUND THEN
			IF target = 'waiting' THEN
				PERFORM frameq._frame_waiting(f.layer, f.number);
				UPDATE frameq.job j SET state = 'active', finished_at = NULL
				 WHERE j.id = f.job AND j.state = 'finished';
				IF f.state = 'waiting' AND EXISTS (SELECT 1 FROM frameq.job j
													WHERE j.id = f.job AND j.state = 'active') THEN
					PERFORM frameq._announce_ready(f.job, f.layer, 1);
				END IF;
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

CREATE OR REPLACE FUNCTION frameq.retry_frame(frame bigint) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
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
	IF frameq._end_delay(ARRAY[frame]) > 0 THEN
		RETURN;
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

CREATE FUNCTION frameq.unblock_host(job bigint, host text) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	h frameq.host;
BEGIN
	PERFORM frameq._authorize_job(frameq._not_null(unblock_host.job, 'job'));
	IF NOT EXISTS (SELECT 1 FROM frameq.job j WHERE j.id = unblock_host.job) THEN
		RAISE EXCEPTION 'job % does not exist', job USING ERRCODE = 'undefined_object';
	END IF;
	h := frameq._host_by_name(frameq._bounded(unblock_host.host, 'host', 100));
	DELETE FROM frameq.job_host_failure f WHERE f.job = unblock_host.job AND f.host = h.id;
	IF FOUND THEN
		PERFORM 1 FROM frameq.job j WHERE j.id = unblock_host.job FOR NO KEY UPDATE;
		PERFORM frameq._job_blocks_mark(unblock_host.job);
	END IF;
END
$$;

CREATE OR REPLACE FUNCTION frameq._announce_ready(job bigint, layer bigint, count bigint) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
	IF count > 0 AND NOT frameq._released_in_xact()
	   AND EXISTS (SELECT 1 FROM frameq.job j WHERE j.id = _announce_ready.job AND j.state = 'active') THEN
		PERFORM pg_notify('frameq_ready',
						  json_build_object('job', job, 'layer', layer, 'count', count)::text);
	END IF;
END
$$;

CREATE OR REPLACE FUNCTION frameq._announce_job_ready(job bigint) RETURNS void
LANGUAGE sql SET search_path = pg_catalog, pg_temp AS $$
	SELECT frameq._announce_ready(job, l.id, w.n)
	  FROM frameq.layer l
	 CROSS JOIN LATERAL (SELECT count(*) AS n FROM frameq.frame f
						  WHERE f.layer = l.id AND f.state = 'waiting' AND f.not_before IS NULL) w
	 WHERE l.job = _announce_job_ready.job AND w.n > 0
	   AND EXISTS (SELECT 1 FROM frameq.job j WHERE j.id = _announce_job_ready.job AND j.state = 'active')
	 ORDER BY l.id
$$;

CREATE OR REPLACE FUNCTION frameq._free_tasks(tasks bigint[]) RETURNS bigint
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp SET plan_cache_mode = force_generic_plan AS $$
DECLARE
	r record;
	n bigint := 0;
BEGIN
	IF tasks IS NULL OR cardinality(tasks) = 0 THEN
		RETURN 0;
	END IF;
	FOR r IN WITH freed AS (
				UPDATE frameq.frame f SET state = 'waiting', version = f.version + 1
				 WHERE f.id = ANY (tasks) AND f.state = 'depend' AND f.deps_left = 0
				RETURNING f.job, f.layer, f.number, f.state)
			 SELECT x.job, x.layer, min(x.number) AS low, count(*) AS freed
			   FROM freed x WHERE x.state = 'waiting'
			  GROUP BY x.job, x.layer LOOP
		PERFORM frameq._frame_waiting(r.layer, r.low), frameq._announce_ready(r.job, r.layer, r.freed);
		n := n + r.freed;
	END LOOP;
	RETURN n;
END
$$;

CREATE OR REPLACE FUNCTION frameq._prereq_done() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp SET plan_cache_mode = force_generic_plan AS $$
DECLARE
	r record;
BEGIN
	FOR r IN WITH met AS (
				UPDATE frameq.frame_depend e SET satisfied = true
				 WHERE e.on_frame = NEW.id AND NOT e.satisfied
				RETURNING e.frame),
			 less AS (
				UPDATE frameq.frame f
				   SET deps_left = f.deps_left - 1,
					   state = CASE WHEN f.deps_left = 1 AND f.state = 'depend' THEN 'waiting' ELSE f.state END,
					   version = f.version + CASE WHEN f.deps_left = 1 AND f.state = 'depend' THEN 1 ELSE 0 END
				  FROM met WHERE f.id = met.frame AND f.deps_left > 0
				RETURNING f.job, f.layer, f.number, f.state, f.deps_left)
			 SELECT x.job, x.layer, min(x.number) AS low, count(*) AS freed
			   FROM less x WHERE x.deps_left = 0 AND x.state = 'waiting'
			  GROUP BY x.job, x.layer LOOP
		PERFORM frameq._frame_waiting(r.layer, r.low), frameq._announce_ready(r.job, r.layer, r.freed);
	END LOOP;
	IF EXISTS (SELECT 1 FROM frameq.depend d
				WHERE d.on_layer = NEW.layer AND d.kind = 'layer' AND NOT d.satisfied) THEN
		PERFORM frameq._layer_maybe_done(NEW.layer);
	END IF;
	RETURN NULL;
END
$$;

CREATE FUNCTION frameq._frees_by_number() RETURNS trigger
	AS 'MODULE_PATHNAME', 'frameq_frees_by_number' LANGUAGE C
	SET search_path = pg_catalog, pg_temp;

CREATE TRIGGER frame_frees_by_number AFTER UPDATE OF state ON frameq.frame
	FOR EACH ROW WHEN (OLD.frees_by_number AND NEW.state IN ('succeeded', 'eaten')
					   AND OLD.state NOT IN ('succeeded', 'eaten'))
	EXECUTE FUNCTION frameq._frees_by_number();

CREATE FUNCTION frameq._frees_once() RETURNS trigger
	AS 'MODULE_PATHNAME', 'frameq_frees_once' LANGUAGE C
	SET search_path = pg_catalog, pg_temp;

CREATE TRIGGER frame_frees_once BEFORE UPDATE OF state ON frameq.frame
	FOR EACH ROW WHEN (OLD.frees_by_number AND NEW.state IN ('succeeded', 'eaten'))
	EXECUTE FUNCTION frameq._frees_once();

CREATE OR REPLACE FUNCTION frameq._frame_gate() RETURNS trigger
	AS 'MODULE_PATHNAME', 'frameq_frame_gate' LANGUAGE C
	SET search_path = pg_catalog, pg_temp;

CREATE OR REPLACE FUNCTION frameq.depend_job(job bigint, on_job bigint) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
	PERFORM frameq._not_null(job, 'job');
	PERFORM frameq._not_null(on_job, 'on_job');
	/* the job's waiting tasks are found with a snapshot taken after its row is locked */
	IF current_setting('transaction_isolation') <> 'read committed' THEN
		RAISE EXCEPTION 'depend_job must run in a READ COMMITTED transaction'
			USING ERRCODE = 'feature_not_supported',
				  HINT = 'A transaction snapshot taken earlier may miss tasks made waiting since.';
	END IF;
	PERFORM frameq._authorize_job(job);
	/*
	 * Before any row lock: every transaction making the job's tasks waiting
	 * with the lock held ends first, and those that follow read the count
	 * under FOR SHARE (the gate, frame_gate).
	 */
	PERFORM frameq._lock_job(job);
	PERFORM 1 FROM frameq.job j WHERE j.id = depend_job.job FOR NO KEY UPDATE;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'job % does not exist', job USING ERRCODE = 'undefined_object';
	END IF;
	PERFORM frameq._check_job_depend(job, on_job, 'on_job');
	IF (SELECT count(*) FROM frameq.depend d WHERE d.kind = 'job' AND d.job = depend_job.job)
	   >= frameq._max_job_depends() THEN
		PERFORM frameq._too_big('on_job', pg_catalog.format('job %s has %s job dependencies already',
															job, frameq._max_job_depends()));
	END IF;
	PERFORM frameq._add_job_depend(job, on_job);
END
$$;

CREATE OR REPLACE FUNCTION frameq.drop_depends(job bigint, layer text DEFAULT NULL) RETURNS int
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	layer_id bigint;
	ids bigint[];
	freed bigint[];
	n bigint;
BEGIN
	PERFORM frameq._not_null(job, 'job');
	PERFORM frameq._authorize_job(job);
	IF NOT EXISTS (SELECT 1 FROM frameq.job j WHERE j.id = drop_depends.job) THEN
		RAISE EXCEPTION 'job % does not exist', job USING ERRCODE = 'undefined_object';
	END IF;
	IF layer IS NOT NULL THEN
		SELECT l.id INTO layer_id FROM frameq.layer l WHERE l.job = drop_depends.job AND l.name = layer;
		IF NOT FOUND THEN
			RAISE EXCEPTION 'job % has no layer "%"', job, frameq._clip(layer)
				USING ERRCODE = 'undefined_object';
		END IF;
	END IF;
	/*
	 * Lock order as a prerequisite's end takes them: the edges (here in
	 * one fixed order), then the tasks they hold, then the dependency rows,
	 * then the layers.
	 */
	PERFORM 1 FROM frameq.frame_depend e JOIN frameq.frame f ON f.id = e.frame
	  WHERE NOT e.satisfied AND f.job = drop_depends.job
		AND f.state IN ('waiting', 'depend', 'running')
		AND (layer_id IS NULL OR f.layer = layer_id)
	  ORDER BY e.frame, e.on_frame FOR UPDATE OF e;
	/*
	 * Edges of chunked layers are met one by one; an unchunked layer's
	 * dependencies found by number are dropped whole, and each task of it
	 * counts none (a prerequisite's end then leaves it alone).
	 */
	WITH met AS (
			UPDATE frameq.frame_depend e SET satisfied = true
			  FROM frameq.frame f
			 WHERE e.frame = f.id AND NOT e.satisfied AND f.job = drop_depends.job
			   AND f.state IN ('waiting', 'depend', 'running')
			   AND (layer_id IS NULL OR f.layer = layer_id)
			RETURNING e.frame),
		 dropped AS (
			UPDATE frameq.depend d SET satisfied = true
			 WHERE d.job = drop_depends.job AND d.kind = 'frames' AND NOT d.satisfied
			   AND (layer_id IS NULL OR d.layer = layer_id)
			RETURNING d.layer),
		 found AS (
			SELECT f.id FROM frameq.frame f
			 WHERE f.layer IN (SELECT dropped.layer FROM dropped) AND f.deps_left > 0),
		 less AS (
			UPDATE frameq.frame f SET deps_left = 0
			  FROM (SELECT met.frame FROM met UNION SELECT found.id FROM found) m
			 WHERE f.id = m.frame
			RETURNING f.id, f.state)
	SELECT array_agg(x.id) INTO freed FROM less x WHERE x.state = 'depend';
	n := frameq._free_tasks(freed);
	SELECT array_agg(d.id) INTO ids FROM (
		SELECT d.id FROM frameq.depend d
		 WHERE d.job = drop_depends.job AND d.kind <> 'frames' AND NOT d.satisfied
		   AND (layer_id IS NULL OR d.layer = layer_id)
		 ORDER BY d.id FOR UPDATE) d;
	IF ids IS NOT NULL THEN
		n := n + frameq._meet_depends(ids);
	END IF;
	RETURN n;
END
$$;

CREATE OR REPLACE VIEW frameq.depends AS
SELECT d.kind, d.job, d.layer, NULL::bigint AS frame, d.on_job, d.on_layer,
	   NULL::bigint AS on_frame, d.satisfied
  FROM frameq.depend d
 WHERE d.kind <> 'frames'
UNION ALL
SELECT 'frame', f.job, f.layer, e.frame, p.job, p.layer, e.on_frame, e.satisfied
  FROM frameq.frame_depend e
  JOIN frameq.frame f ON f.id = e.frame
  JOIN frameq.frame p ON p.id = e.on_frame
UNION ALL
SELECT 'frame', f.job, f.layer, f.id, p.job, p.layer, p.id, d.satisfied OR NOT p.frees_by_number
  FROM frameq.depend d
  JOIN frameq.frame f ON f.layer = d.layer
  JOIN (SELECT x.id, x.job, x.layer, x.frees_by_number, y.n
		  FROM frameq.frame x
		 CROSS JOIN LATERAL unnest(coalesce(x.numbers, ARRAY[x.number])) y(n)) p
	ON p.layer = d.on_layer AND p.n = f.number
 WHERE d.kind = 'frames';

CREATE FUNCTION frameq._insert_tasks(job bigint, layer bigint, frame_range text, chunk int,
									 held bool, prereq bool, pre bigint[], same bool[])
RETURNS void LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	st text := CASE WHEN held THEN 'depend' ELSE 'waiting' END;
	frees bool := EXISTS (SELECT 1 FROM frameq.depend d
						   WHERE d.on_layer = _insert_tasks.layer AND d.kind = 'frames'
							 AND NOT d.satisfied);
	other bigint[] := ARRAY(SELECT p FROM unnest(pre, same) u(p, s) WHERE NOT s);
BEGIN
	IF cardinality(pre) = 0 THEN
		IF chunk = 1 THEN
			INSERT INTO frameq.frame (job, layer, number, state, prereq, frees_by_number)
			SELECT job, layer, n, st, prereq, frees FROM frameq._frame_numbers(frame_range, 'range') n;
		ELSE
			INSERT INTO frameq.frame (job, layer, number, numbers, state, prereq, frees_by_number)
			SELECT job, layer, t.first, t.numbers, st, prereq, frees
			  FROM frameq._frame_tasks(frame_range, 'range', chunk) t;
		END IF;
		RETURN;
	END IF;
	IF chunk = 1 THEN
		/* how many tasks of those layers hold each number */
		INSERT INTO frameq.frame (job, layer, number, state, prereq, frees_by_number, deps_left)
		SELECT _insert_tasks.job, _insert_tasks.layer, x.n,
			   CASE WHEN held OR k.n + coalesce(c.n, 0) > 0 THEN 'depend' ELSE 'waiting' END,
			   _insert_tasks.prereq, frees, k.n + coalesce(c.n, 0)
		  FROM frameq._frame_numbers(frame_range, 'range') x(n)
		 CROSS JOIN (SELECT count(*)::int AS n FROM unnest(same) s WHERE s) k
		  LEFT JOIN (SELECT y.n AS number, count(*)::int AS n
					   FROM (SELECT p.number AS n FROM frameq.frame p
							  WHERE p.layer = ANY (other) AND p.numbers IS NULL
							 UNION ALL
							 SELECT u.n FROM frameq.frame p CROSS JOIN LATERAL unnest(p.numbers) u(n)
							  WHERE p.layer = ANY (other) AND p.numbers IS NOT NULL) y
					  GROUP BY y.n) c ON c.number = x.n;
		RETURN;
	END IF;
	WITH pm AS (
			SELECT p.id, x.n FROM frameq.frame p
			 CROSS JOIN LATERAL unnest(coalesce(p.numbers, ARRAY[p.number])) x(n)
			 WHERE p.layer = ANY (pre)),
		 tt AS (
			SELECT t.first, t.numbers FROM frameq._frame_tasks(frame_range, 'range', chunk) t),
		 e AS (
			SELECT DISTINCT tt.first, pm.id AS on_frame
			  FROM tt CROSS JOIN LATERAL unnest(coalesce(tt.numbers, ARRAY[tt.first])) x(n)
			  JOIN pm ON pm.n = x.n),
		 c AS (SELECT e.first, count(*)::int AS n FROM e GROUP BY e.first),
		 ins AS (
			INSERT INTO frameq.frame (job, layer, number, numbers, state, prereq, frees_by_number,
									  deps_left)
			SELECT _insert_tasks.job, _insert_tasks.layer, tt.first, tt.numbers,
				   CASE WHEN held OR c.n IS NOT NULL THEN 'depend' ELSE 'waiting' END,
				   _insert_tasks.prereq, frees, coalesce(c.n, 0)
			  FROM tt LEFT JOIN c ON c.first = tt.first
			RETURNING id, number)
	INSERT INTO frameq.frame_depend (on_frame, frame)
	SELECT e.on_frame, ins.id FROM e JOIN ins ON ins.number = e.first;
END
$$;

CREATE FUNCTION frameq._time_out(at timestamptz DEFAULT NULL) RETURNS bigint
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	at_time timestamptz := coalesce(at, pg_catalog.clock_timestamp());
	n bigint;
BEGIN
	/*
	 * Nothing due, the usual answer: the earliest deadline, the first
	 * entry of the index (a min() with no parameter is planned as that
	 * whatever the statistics; an EXISTS with at_time, once its plan was
	 * generic, guessed a third of the table due and read all of it).
	 */
	IF coalesce((SELECT pg_catalog.min(y.timeout_at) FROM frameq.proc y
				  WHERE y.state OPERATOR(pg_catalog.=) 'running' AND y.timeout_at IS NOT NULL)
				OPERATOR(pg_catalog.>) at_time, true) THEN
		RETURN 0;
	END IF;
	/* before the first write of procs: see _ledger_ensure */
	PERFORM frameq._ledger_ensure();
	/* locked by an initplan and updated by primary key, as _send_kills does */
	UPDATE frameq.proc x
	   SET state = 'killing', kill_cause = 'timeout', kill_at = pg_catalog.clock_timestamp(),
		   want_state = frameq._failed_state(x.frame),
		   kill_reason = pg_catalog.format('timeout: still running %s s after its booking',
										   pg_catalog.round(pg_catalog.date_part('epoch',
											   at_time OPERATOR(pg_catalog.-) x.booked_at)))
	 WHERE x.id OPERATOR(pg_catalog.=) ANY (ARRAY(
			SELECT y.id FROM frameq.proc y
			 WHERE y.state OPERATOR(pg_catalog.=) 'running'
			   AND y.timeout_at OPERATOR(pg_catalog.<=) at_time
			 ORDER BY y.timeout_at LIMIT 1000
			   FOR NO KEY UPDATE SKIP LOCKED))
	   AND x.state OPERATOR(pg_catalog.=) 'running';
	GET DIAGNOSTICS n = ROW_COUNT;
	RETURN n;
END
$$;

CREATE FUNCTION frameq._shift_deadlines(jump interval) RETURNS bigint
LANGUAGE sql SET search_path = pg_catalog, pg_temp AS $$
	WITH s AS (
		UPDATE frameq.proc x SET timeout_at = x.timeout_at OPERATOR(pg_catalog.+) jump
		 WHERE x.state OPERATOR(pg_catalog.=) 'running' AND x.timeout_at IS NOT NULL RETURNING 1)
	SELECT pg_catalog.count(*) FROM s
$$;

CREATE FUNCTION frameq._settle_job_limits() RETURNS bigint
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	c record;
	n bigint := 0;
BEGIN
	FOR c IN SELECT x.job, x.died, x.since FROM frameq.job_limit_check x ORDER BY x.job LOOP
		BEGIN
			/* the worker's lock_timeout (frameq.lock_wait) bounds this wait */
			PERFORM 1 FROM frameq.job j WHERE j.id = c.job FOR NO KEY UPDATE;
			PERFORM frameq._job_blocks_mark(c.job);
			IF c.died THEN
				PERFORM frameq._pause_for_dead(c.job);
			END IF;
			DELETE FROM frameq.job_limit_check x WHERE x.job = c.job AND x.since = c.since;
			n := n + 1;
		EXCEPTION WHEN lock_not_available THEN
			RAISE LOG 'frameq worker: job % is still locked by another session; its limits are settled next round', c.job;
		END;
	END LOOP;
	RETURN n;
END
$$;

CREATE FUNCTION frameq._end_delay(tasks bigint[]) RETURNS bigint
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	r record;
	layers bigint[] := '{}';
	n bigint := 0;
BEGIN
	FOR r IN WITH ended AS (
				UPDATE frameq.frame f SET not_before = NULL
				 WHERE f.id = ANY (tasks) AND f.not_before IS NOT NULL
				RETURNING f.job, f.layer, f.number, f.state)
			 SELECT x.job, x.layer, min(x.number) FILTER (WHERE x.state = 'waiting') AS low,
					count(*) FILTER (WHERE x.state = 'waiting') AS bookable, count(*) AS ended
			   FROM ended x GROUP BY x.job, x.layer ORDER BY x.layer LOOP
		IF r.bookable > 0 THEN
			PERFORM frameq._frame_waiting(r.layer, r.low), frameq._announce_ready(r.job, r.layer, r.bookable);
			layers := layers || r.layer;
		END IF;
		n := n + r.ended;
	END LOOP;
	IF cardinality(layers) > 0 THEN
		PERFORM frameq._queue_layers(layers);
	END IF;
	RETURN n;
END
$$;

CREATE FUNCTION frameq._delays_ended() RETURNS bigint
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	due timestamptz := clock_timestamp();
BEGIN
	RETURN frameq._end_delay(ARRAY(
		SELECT f.id FROM frameq.frame f
		 WHERE f.state = 'waiting' AND f.not_before IS NOT NULL AND f.not_before <= due
		 ORDER BY f.not_before LIMIT 10000
		   FOR NO KEY UPDATE SKIP LOCKED));
END
$$;

CREATE OR REPLACE VIEW frameq.frames AS
SELECT f.id AS frame, f.job, f.layer, f.number AS frame_number, f.state, f.retries,
	   f.attempts, p.id AS proc, h.name AS host, p.state AS proc_state,
	   frameq._frame_spec(f.number, f.numbers) AS frame_spec,
	   p.last_line, p.progress, p.last_output_at, f.requeues, f.not_before
  FROM frameq.frame f
  LEFT JOIN frameq.proc p ON p.frame = f.id
  LEFT JOIN frameq.host h ON h.id = p.host;

CREATE OR REPLACE VIEW frameq.job_progress AS
SELECT j.id AS job, j.name, j.state,
	   count(f.id) AS total,
	   count(f.id) FILTER (WHERE f.state = 'waiting') AS waiting,
	   count(f.id) FILTER (WHERE f.state = 'depend') AS depend,
	   count(f.id) FILTER (WHERE f.state = 'running') AS running,
	   count(f.id) FILTER (WHERE f.state = 'succeeded') AS succeeded,
	   count(f.id) FILTER (WHERE f.state = 'dead') AS dead,
	   count(f.id) FILTER (WHERE f.state = 'eaten') AS eaten,
	   count(f.id) + coalesce(sum(pg_catalog.cardinality(f.numbers) - 1), 0) AS frames_total,
	   CASE WHEN j.state = 'paused' THEN coalesce(j.paused_reason, 'operator') END AS paused_reason,
	   count(f.id) FILTER (WHERE f.state = 'waiting' AND f.not_before IS NOT NULL) AS delayed
  FROM frameq.job j
  LEFT JOIN frameq.frame f ON f.job = j.id
 GROUP BY j.id;

CREATE OR REPLACE VIEW frameq.job_host_blocks AS
SELECT b.job, h.name AS host, b.failures, b.blocked_at AS since
  FROM frameq.job_host_failure b
  JOIN frameq.host h ON h.id = b.host
 WHERE b.blocked_at IS NOT NULL;

CREATE OR REPLACE FUNCTION frameq.check() RETURNS TABLE (invariant text, detail text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	late timestamptz;	/* a delay that ended before this is overdue */
BEGIN
	PERFORM frameq._ledger_ensure();
	PERFORM frameq._requeue_after_rebuild();

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
	WITH actual AS (SELECT * FROM frameq._proc_usage())
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
	  JOIN frameq.frame f ON f.layer = d.layer AND f.state = 'waiting' AND f.not_before IS NULL
						  AND f.number < d.low;

	/*
	 * A row per tag, of the job's show, resources and size classes, at any
	 * priority, unless the job or its folder is parked over its cap; and
	 * every row's stream listed in dispatch_class, where reserve() looks
	 * for the streams to read.
	 */
	RETURN QUERY
	SELECT 'no waiting frame is passed over',
		   format('layer %s of active job %s has waiting frames but no dispatch queue row for tag "%s"',
				  l.id, j.id, t.tag)
	  FROM frameq.layer l
	  JOIN frameq.job j ON j.id = l.job
	  LEFT JOIN frameq.folder fo ON fo.id = j.folder
	 CROSS JOIN LATERAL unnest(CASE WHEN cardinality(l.tags) = 0 THEN ARRAY['']::text[]
									ELSE l.tags END) t(tag)
	 WHERE j.state = 'active'
	   AND NOT frameq._parked_over_cap(j.id, coalesce(j.max_cc, -1), coalesce(j.max_gpus, -1),
									   j.folder, coalesce(fo.max_cc, -1), coalesce(fo.max_gpus, -1),
									   l.min_cc, l.gpus)
	   AND EXISTS (SELECT 1 FROM frameq.frame f
					WHERE f.layer = l.id AND f.state = 'waiting' AND f.not_before IS NULL)
	   AND NOT EXISTS (SELECT 1 FROM frameq.dispatch_queue q
						WHERE q.layer = l.id AND q.job = j.id AND q.show = j.show AND q.tag = t.tag
						  AND q.gpu = (l.gpus > 0) AND q.dispatch_order = l.dispatch_order
						  AND (q.min_cc, q.memory, q.gpus, q.gpu_memory)
							  = (l.min_cc, l.memory, l.gpus, l.gpu_memory)
						  AND (q.mem_class, q.core_class)
							  = (frameq._memory_class(l.memory), frameq._cores_class(l.min_cc)));

	/*
	 * A delayed task is not bookable, so none of the above asks about it;
	 * what must hold instead is that the worker ends its delay within a
	 * round of its time.  A minute's slack, for a worker between restarts.
	 */
	late := clock_timestamp() - interval '1 minute';
	RETURN QUERY
	SELECT 'no waiting frame is passed over',
		   format('task %s is still delayed, %s after its delay ended', f.id,
				  date_trunc('second', clock_timestamp() - f.not_before))
	  FROM frameq.frame f
	 WHERE f.state = 'waiting' AND f.not_before IS NOT NULL AND f.not_before < late;

	RETURN QUERY
	SELECT 'no waiting frame is passed over',
		   format('dispatch queue rows of layer %s are in stream (show %s, tag "%s", gpu %s, memory class %s, cores class %s), which dispatch_class does not list',
				  min(q.layer), q.show, q.tag, q.gpu, q.mem_class, q.core_class)
	  FROM frameq.dispatch_queue q
	 WHERE NOT EXISTS (SELECT 1 FROM frameq.dispatch_class c
						WHERE (c.show, c.tag, c.gpu, c.mem_class, c.core_class)
							  = (q.show, q.tag, q.gpu, q.mem_class, q.core_class))
	 GROUP BY q.show, q.tag, q.gpu, q.mem_class, q.core_class;

	/*
	 * Dependencies (depends.sql): the counts are exact, a task is 'depend'
	 * exactly when something holds it (running and finished tasks may be
	 * held: depend_job leaves them), and no unmet dependency has a
	 * prerequisite that is done.
	 */
	RETURN QUERY
	SELECT 'dependencies', format('task %s counts %s unmet frame dependencies, not %s',
								  f.id, f.deps_left, coalesce(e.n, 0))
	  FROM frameq.frame f
	  LEFT JOIN (SELECT x.frame, count(*) AS n FROM frameq.depends x
				  WHERE x.kind = 'frame' AND NOT x.satisfied GROUP BY x.frame) e ON e.frame = f.id
	 WHERE f.deps_left <> coalesce(e.n, 0);

	RETURN QUERY
	SELECT 'dependencies', format('layer %s counts %s unmet dependencies, not %s',
								  l.id, l.deps_left, n.n)
	  FROM frameq.layer l
	 CROSS JOIN LATERAL (SELECT count(*) AS n FROM frameq.depend d
						  WHERE NOT d.satisfied
							AND ((d.kind = 'layer' AND d.layer = l.id)
								 OR (d.kind = 'job' AND d.job = l.job))) n
	 WHERE l.deps_left <> n.n;

	RETURN QUERY
	SELECT 'dependencies', format('task %s is %s but %s', f.id, f.state,
								  CASE WHEN f.state = 'depend' THEN 'nothing holds it'
									   ELSE 'a dependency holds it' END)
	  FROM frameq.frame f JOIN frameq.layer l ON l.id = f.layer
	 WHERE (f.state = 'depend' AND f.deps_left = 0 AND l.deps_left = 0)
		OR (f.state = 'waiting' AND (f.deps_left > 0 OR l.deps_left > 0));

	RETURN QUERY
	SELECT 'dependencies', format('task %s still waits for task %s, which is %s', e.frame, e.on_frame, p.state)
	  FROM frameq.depends e JOIN frameq.frame p ON p.id = e.on_frame
	 WHERE e.kind = 'frame' AND NOT e.satisfied AND p.state IN ('succeeded', 'eaten');

	RETURN QUERY
	SELECT 'dependencies', format('layer %s still waits for layer %s, which is done', d.layer, d.on_layer)
	  FROM frameq.depend d
	 WHERE d.kind = 'layer' AND NOT d.satisfied
	   AND NOT EXISTS (SELECT 1 FROM frameq.frame f
						WHERE f.layer = d.on_layer AND f.state IN ('waiting', 'depend', 'running', 'dead'));

	RETURN QUERY
	SELECT 'dependencies', format('task %s of layer %s, a prerequisite, is not marked prereq', f.id, f.layer)
	  FROM frameq.depend d JOIN frameq.frame f ON f.layer = d.on_layer
	 WHERE d.kind = 'layer' AND NOT f.prereq;

	RETURN QUERY
	SELECT 'dependencies', format('job %s still waits for job %s, which is done', d.job, d.on_job)
	  FROM frameq.depend d JOIN frameq.job j ON j.id = d.on_job
	 WHERE d.kind = 'job' AND NOT d.satisfied AND j.state = 'finished'
	   AND NOT EXISTS (SELECT 1 FROM frameq.frame f WHERE f.job = j.id AND f.state = 'dead');

	/* a job whose finish the worker has yet to decide (see job_finish_check) is not wrong */
	RETURN QUERY
	SELECT 'job state', format('job %s is %s but none of its frames is live', j.id, j.state)
	  FROM frameq.job j
	 WHERE j.state IN ('active', 'paused')
	   AND NOT EXISTS (SELECT 1 FROM frameq.job_finish_check c WHERE c.job = j.id)
	   AND EXISTS (SELECT 1 FROM frameq.frame f WHERE f.job = j.id)
	   AND NOT EXISTS (SELECT 1 FROM frameq.frame f
					   WHERE f.job = j.id AND f.state IN ('waiting', 'depend', 'running'));

	RETURN QUERY
	SELECT 'job state', format('job %s is finished but frame %s is %s', j.id, f.id, f.state)
	  FROM frameq.job j JOIN frameq.frame f ON f.job = j.id
	 WHERE j.state = 'finished' AND f.state IN ('waiting', 'depend', 'running');

	/*
	 * Host blocks (src/limits.c): a host is blocked for a job exactly when
	 * its count of the job's failures has reached the job's limit; reserve()
	 * sees every block (the job is marked, unless the worker has yet to
	 * settle it: job_limit_check); and no count is above the failed runs
	 * it can have counted: the job's runs on that host that ended since the
	 * count began, completed with a non-zero exit status or a signal, or
	 * ended timeout, stalled or oom.
	 */
	RETURN QUERY
	SELECT 'host blocks', format('host %s has failed job %s %s times, its host_failure_limit is %s, but it is %s',
								 h.name, b.job, b.failures, l.lim,
								 CASE WHEN b.blocked_at IS NULL THEN 'not blocked' ELSE 'blocked' END)
	  FROM frameq.job_host_failure b
	  JOIN frameq.job j ON j.id = b.job
	  JOIN frameq.host h ON h.id = b.host
	 CROSS JOIN LATERAL (SELECT coalesce(j.host_failure_limit, frameq._default_host_failure_limit()) AS lim) l
	 WHERE (b.blocked_at IS NULL) = (l.lim > 0 AND b.failures >= l.lim);

	RETURN QUERY
	SELECT 'host blocks', format('host %s is blocked for job %s, but the job is not marked: reserve() would book it there',
								 h.name, b.job)
	  FROM frameq.job_host_failure b
	  JOIN frameq.job j ON j.id = b.job
	  JOIN frameq.host h ON h.id = b.host
	 WHERE b.blocked_at IS NOT NULL AND NOT j.host_blocks
	   AND NOT EXISTS (SELECT 1 FROM frameq.job_limit_check c WHERE c.job = b.job);

	RETURN QUERY
	WITH failed AS (
		SELECT r.job, r.host, r.ended_at FROM frameq.run r
		 WHERE r.reason IN ('timeout', 'stalled', 'oom')
			OR (r.reason = 'completed' AND (r.exit_status <> 0 OR r.exit_signal <> 0)))
	SELECT 'host blocks', format('job %s counts %s failures on host %s since %s, but only %s of its runs there failed since',
								 b.job, b.failures, h.name, b.counted_since, n.n)
	  FROM frameq.job_host_failure b
	  JOIN frameq.host h ON h.id = b.host
	 CROSS JOIN LATERAL (SELECT count(*) AS n FROM failed x
						  WHERE x.job = b.job AND x.host = b.host
							AND x.ended_at >= b.counted_since) n
	 WHERE b.failures > n.n;
END
$$;

REVOKE ALL ON FUNCTION
	frameq._duration(jsonb, text, bool),
	frameq._failed_state(bigint),
	frameq._default_host_failure_limit(),
	frameq._job_blocks_mark(bigint),
	frameq._task_died(),
	frameq._pause_for_dead(bigint),
	frameq._hold_job(bigint),
	frameq._claim_jobs(bigint[]),
	frameq._lock_job(bigint),
	frameq._spec_requeue(jsonb, text),
	frameq._requeue_codes(jsonb),
	frameq._progress_pattern(jsonb, text),
	frameq._report_entries(jsonb),
	frameq._take_report(int, bigint, jsonb),
	frameq.heartbeat(text, text, bigint, bigint[], jsonb),
	frameq.complete(text, text, bigint, bigint, int, int, bigint, bool),
	frameq.unblock_host(bigint, text),
	frameq._frees_by_number(),
	frameq._frees_once(),
	frameq._insert_tasks(bigint, bigint, text, int, bool, bool, bigint[], bool[]),
	frameq._time_out(timestamptz),
	frameq._shift_deadlines(interval),
	frameq._settle_job_limits(),
	frameq._end_delay(bigint[]),
	frameq._delays_ended()
	FROM PUBLIC;
