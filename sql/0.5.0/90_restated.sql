/*
 * Every function, view and trigger that 0.5.0 adds or changes, in its final
 * form (sql/src/), in the install script's order; what 0.5.0 removes is
 * dropped first.  Functions new in 0.5.0 are revoked from PUBLIC at the
 * end; the pieces after this one grant those of the public API.
 * Generated from the topic files: edit those.
 */

DROP TRIGGER frame_queue_waiting ON frameq.frame;

DROP FUNCTION frameq._frame_queue_waiting();

DROP FUNCTION frameq._insert_tasks(bigint, bigint, text, int, bool, bool, bigint[]);

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
							  AND f.state OPERATOR(pg_catalog.=) 'waiting');
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
	l_after jsonb[] := '{}';
	l_after_frames jsonb[] := '{}';
	l_count bigint[] := '{}';
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
		'max_retries', 'auto_eat', 'max_cores', 'max_gpus', 'paused', 'layers', 'after_jobs'], 'spec');

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
	after_jobs := frameq._spec_after_jobs(spec);

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
			'dispatch_order', 'env', 'chunk', 'after', 'after_frames'], path);

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
		l_limits := l_limits || to_jsonb(frameq._spec_tags(layer, 'limits', path));
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
							max_cc, max_gpus, state)
	VALUES (show_id, folder_id, job_name, priority, max_retries, auto_eat,
			max_cc, max_gpus, CASE WHEN paused THEN 'paused' ELSE 'active' END)
	RETURNING j.id INTO job_id;

	unmet_jobs := frameq._submit_job_depends(job_id, after_jobs);

	FOR i IN 1 .. array_length(l_name, 1) LOOP
		INSERT INTO frameq.layer (job, name, command, dispatch_order, min_cc, max_cc,
								  threadable, memory, gpus, gpu_memory, tags, env, deps_left)
		VALUES (job_id, l_name[i], l_command[i], l_order[i], l_min_cc[i], l_max_cc[i],
				l_threadable[i], l_memory[i], l_gpus[i], l_gpu_memory[i],
				ARRAY(SELECT jsonb_array_elements_text(l_tags[i])), l_env[i],
				unmet_jobs + jsonb_array_length(l_after[i]))
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
	/* each kind in a statement of its own, so the common one runs alone */
	IF OLD.frees_by_number AND NEW.numbers IS NULL THEN
		/* one number: at most one task of each layer waiting for it */
		FOR r IN UPDATE frameq.frame f
					SET deps_left = f.deps_left - 1,
						state = CASE WHEN f.deps_left = 1 AND f.state = 'depend' THEN 'waiting' ELSE f.state END,
						version = f.version + CASE WHEN f.deps_left = 1 AND f.state = 'depend' THEN 1 ELSE 0 END
				   FROM frameq.depend d
				  WHERE d.on_layer = NEW.layer AND d.kind = 'frames' AND NOT d.satisfied
					AND f.layer = d.layer AND f.number = NEW.number AND f.deps_left > 0
			  RETURNING f.job, f.layer, f.number, f.state, f.deps_left LOOP
			IF r.deps_left = 0 AND r.state = 'waiting' THEN
				PERFORM frameq._frame_waiting(r.layer, r.number), frameq._announce_ready(r.job, r.layer, 1);
			END IF;
		END LOOP;
	ELSIF OLD.frees_by_number THEN
		FOR r IN WITH less AS (
					UPDATE frameq.frame f
					   SET deps_left = f.deps_left - 1,
						   state = CASE WHEN f.deps_left = 1 AND f.state = 'depend' THEN 'waiting' ELSE f.state END,
						   version = f.version + CASE WHEN f.deps_left = 1 AND f.state = 'depend' THEN 1 ELSE 0 END
					  FROM frameq.depend d
					 WHERE d.on_layer = NEW.layer AND d.kind = 'frames' AND NOT d.satisfied
					   AND f.layer = d.layer AND f.number = ANY (NEW.numbers) AND f.deps_left > 0
					RETURNING f.job, f.layer, f.number, f.state, f.deps_left)
				 SELECT x.job, x.layer, min(x.number) AS low, count(*) AS freed
				   FROM less x WHERE x.deps_left = 0 AND x.state = 'waiting'
				  GROUP BY x.job, x.layer LOOP
			PERFORM frameq._frame_waiting(r.layer, r.low), frameq._announce_ready(r.job, r.layer, r.freed);
		END LOOP;
	END IF;
	IF NOT NEW.prereq THEN
		RETURN NULL;
	END IF;
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

DROP TRIGGER frame_prereq_done ON frameq.frame;
CREATE TRIGGER frame_prereq_done AFTER UPDATE OF state ON frameq.frame
	FOR EACH ROW WHEN ((NEW.prereq OR OLD.frees_by_number) AND NEW.state IN ('succeeded', 'eaten')
					   AND OLD.state NOT IN ('succeeded', 'eaten'))
	EXECUTE FUNCTION frameq._prereq_done();

CREATE FUNCTION frameq._frees_once() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
	NEW.frees_by_number := false;
	RETURN NEW;
END
$$;

CREATE TRIGGER frame_frees_once BEFORE UPDATE OF state ON frameq.frame
	FOR EACH ROW WHEN (OLD.frees_by_number AND NEW.state IN ('succeeded', 'eaten'))
	EXECUTE FUNCTION frameq._frees_once();

CREATE OR REPLACE FUNCTION frameq._frame_gate() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp SET plan_cache_mode = force_generic_plan AS $$
DECLARE
	held bool;
	unmet int;
	queued bool := false;
BEGIN
	IF NEW.deps_left > 0 THEN
		NEW.state := 'depend';
		RETURN NEW;
	END IF;
	held := current_setting('transaction_isolation') = 'read committed' AND frameq._hold_job(NEW.job);
	IF held THEN
		SELECT l.deps_left,
			   NOT EXISTS (SELECT 1 FROM unnest(CASE WHEN cardinality(l.tags) = 0
													THEN ARRAY['']::text[] ELSE l.tags END) t(tag)
							WHERE NOT EXISTS (SELECT 1 FROM frameq.dispatch_queue q
											   WHERE q.layer = l.id AND q.tag = t.tag
												 AND q.priority = j.priority))
		  INTO unmet, queued
		  FROM frameq.layer l JOIN frameq.job j ON j.id = l.job
		 WHERE l.id = NEW.layer;
	END IF;
	IF NOT held OR unmet > 0 THEN
		IF (SELECT l.deps_left FROM frameq.layer l WHERE l.id = NEW.layer FOR SHARE) > 0 THEN
			NEW.state := 'depend';
			RETURN NEW;
		END IF;
		queued := false;
	END IF;
	IF NOT queued THEN
		PERFORM frameq._queue_layers(ARRAY[NEW.layer]);
	END IF;
	RETURN NEW;
END
$$;

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

CREATE OR REPLACE FUNCTION frameq.check() RETURNS TABLE (invariant text, detail text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
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
	  JOIN frameq.frame f ON f.layer = d.layer AND f.state = 'waiting' AND f.number < d.low;

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
	   AND EXISTS (SELECT 1 FROM frameq.frame f WHERE f.layer = l.id AND f.state = 'waiting')
	   AND NOT EXISTS (SELECT 1 FROM frameq.dispatch_queue q
						WHERE q.layer = l.id AND q.job = j.id AND q.show = j.show AND q.tag = t.tag
						  AND q.gpu = (l.gpus > 0) AND q.dispatch_order = l.dispatch_order
						  AND (q.min_cc, q.memory, q.gpus, q.gpu_memory)
							  = (l.min_cc, l.memory, l.gpus, l.gpu_memory)
						  AND (q.mem_class, q.core_class)
							  = (frameq._memory_class(l.memory), frameq._cores_class(l.min_cc)));

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
END
$$;

REVOKE ALL ON FUNCTION
	frameq._hold_job(bigint),
	frameq._claim_jobs(bigint[]),
	frameq._lock_job(bigint),
	frameq._frees_once(),
	frameq._insert_tasks(bigint, bigint, text, int, bool, bool, bigint[], bool[])
	FROM PUBLIC;
