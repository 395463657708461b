/*
 * Every function, view and trigger that 0.6.0 adds or changes, in its final
 * form (sql/src/), in the install script's order; what 0.6.0 removes is
 * dropped first.  Functions new in 0.6.0 are revoked from PUBLIC at the
 * end; the pieces after this one grant those of the public API.
 * Generated from the topic files: edit those.
 */

DROP TRIGGER frame_queue_inserted ON frameq.frame;

DROP FUNCTION frameq._queue_layers(bigint[]);

DROP FUNCTION frameq._frame_queue_inserted();

CREATE FUNCTION frameq._layer_framed_latest(layers bigint[]) RETURNS bigint
	AS 'MODULE_PATHNAME', 'frameq_layer_framed_latest' LANGUAGE C VOLATILE
	SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION frameq._frame_keys_check(jobs bigint[], layers bigint[]) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	bad record;
BEGIN
	/* what a key takes: no delete, nor change of id or job, until we end */
	PERFORM 1 FROM frameq.layer l
	 WHERE l.id OPERATOR(pg_catalog.=) ANY (layers)
	 ORDER BY l.id FOR KEY SHARE OF l;
	SELECT p.job, p.layer, l.job AS owner INTO bad
	  FROM unnest(jobs, layers) p(job, layer)
	  LEFT JOIN frameq.layer l ON l.id OPERATOR(pg_catalog.=) p.layer
	 WHERE l.job IS DISTINCT FROM p.job
	 LIMIT 1;
	IF NOT FOUND THEN
		RETURN;
	ELSIF bad.owner IS NULL THEN
		RAISE EXCEPTION 'a frame names layer %, which does not exist', bad.layer
			USING ERRCODE = 'foreign_key_violation';
	ELSIF NOT EXISTS (SELECT 1 FROM frameq.job j WHERE j.id OPERATOR(pg_catalog.=) bad.job) THEN
		RAISE EXCEPTION 'a frame names job %, which does not exist', bad.job
			USING ERRCODE = 'foreign_key_violation';
	END IF;
	RAISE EXCEPTION 'a frame names job % and layer %, which is of job %', bad.job, bad.layer, bad.owner
		USING ERRCODE = 'foreign_key_violation';
END
$$;

CREATE FUNCTION frameq._frame_keys_frozen() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
	RAISE EXCEPTION 'column "%" of a frame cannot be changed',
		CASE WHEN OLD.job IS DISTINCT FROM NEW.job THEN 'job' ELSE 'layer' END
		USING ERRCODE = 'integrity_constraint_violation';
END
$$;

CREATE TRIGGER frame_keys_frozen BEFORE UPDATE OF job, layer ON frameq.frame
	FOR EACH ROW WHEN (OLD.job IS DISTINCT FROM NEW.job OR OLD.layer IS DISTINCT FROM NEW.layer)
	EXECUTE FUNCTION frameq._frame_keys_frozen();

CREATE FUNCTION frameq._layer_keep_framed() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
	IF frameq._layer_framed_latest(ARRAY[OLD.id]) IS NOT NULL THEN
		RAISE EXCEPTION 'layer % is named by frames', OLD.id
			USING ERRCODE = 'foreign_key_violation',
				  DETAIL = 'Its id and its job cannot change while frames name it.';
	END IF;
	RETURN NEW;
END
$$;

CREATE TRIGGER layer_keep_framed BEFORE UPDATE OF id, job ON frameq.layer
	FOR EACH ROW WHEN (OLD.id <> NEW.id OR OLD.job <> NEW.job)
	EXECUTE FUNCTION frameq._layer_keep_framed();

CREATE FUNCTION frameq._layer_deleted_framed() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	named bigint;
BEGIN
	named := frameq._layer_framed_latest(ARRAY(SELECT o.id FROM old_layers o));
	IF named IS NOT NULL THEN
		RAISE EXCEPTION 'layer % is named by frames', named
			USING ERRCODE = 'foreign_key_violation',
				  HINT = 'Delete its frames first, in the same statement or before it.';
	END IF;
	RETURN NULL;
END
$$;

CREATE TRIGGER layer_deleted_framed AFTER DELETE ON frameq.layer
	REFERENCING OLD TABLE AS old_layers
	FOR EACH STATEMENT EXECUTE FUNCTION frameq._layer_deleted_framed();

CREATE FUNCTION frameq._keep_framed_truncate() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
	IF frameq._layer_framed_latest(NULL) IS NOT NULL THEN
		RAISE EXCEPTION 'cannot truncate frameq.%: frames name its rows', TG_TABLE_NAME
			USING ERRCODE = 'feature_not_supported';
	END IF;
	RETURN NULL;
END
$$;

CREATE TRIGGER job_keep_framed_truncate BEFORE TRUNCATE ON frameq.job
	FOR EACH STATEMENT EXECUTE FUNCTION frameq._keep_framed_truncate();

CREATE TRIGGER layer_keep_framed_truncate BEFORE TRUNCATE ON frameq.layer
	FOR EACH STATEMENT EXECUTE FUNCTION frameq._keep_framed_truncate();

CREATE FUNCTION frameq._largest_host_memory(layer bigint) RETURNS bigint
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
	SELECT max(h.memory)
	  FROM frameq.layer l
	  JOIN frameq.job j ON j.id OPERATOR(pg_catalog.=) l.job
	  JOIN frameq.subscription s ON s.show OPERATOR(pg_catalog.=) j.show
	  JOIN frameq.host h ON h.allocation OPERATOR(pg_catalog.=) s.allocation
	 WHERE l.id OPERATOR(pg_catalog.=) $1 AND h.retired_at IS NULL
	   AND (pg_catalog.cardinality(l.tags) OPERATOR(pg_catalog.=) 0
			OR h.tags OPERATOR(pg_catalog.&&) l.tags)
	   AND h.cores_cc OPERATOR(pg_catalog.>=) l.min_cc AND h.gpus OPERATOR(pg_catalog.>=) l.gpus
	   AND h.gpu_memory OPERATOR(pg_catalog.>=) l.gpu_memory
$$;

CREATE FUNCTION frameq._queue_layers(layers bigint[], raised_layer bigint DEFAULT NULL,
									 raised_memory bigint DEFAULT NULL) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp SET plan_cache_mode = force_generic_plan AS $$
DECLARE
	all_layers bigint[] := CASE WHEN raised_layer IS NULL THEN layers ELSE layers || raised_layer END;
	held_layers bigint[] := '{}';
BEGIN
	IF current_setting('transaction_isolation') = 'read committed' THEN
		/*
		 * The jobs of these layers only: OFFSET 0 keeps _hold_job out of
		 * the scan of layer, where a plan (a sequential scan of a small
		 * table) could call it first, on every job's layer.
		 */
		held_layers := ARRAY(SELECT x.id FROM (SELECT l.id, l.job FROM frameq.layer l
												WHERE l.id = ANY (all_layers) OFFSET 0) x
							  WHERE frameq._hold_job(x.job));
		/*
		 * A layer whose job's lock is not to be had may be under an edit
		 * (set_layer holds it in EXCLUSIVE): read it after the edit ends
		 * (the statement below has a later snapshot), so as not to write
		 * or rely on rows of its old values.  Rare: only while a tidy, a
		 * depend_job or an edit of the job is in flight.
		 */
		IF cardinality(held_layers) < cardinality(all_layers) THEN
			PERFORM 1 FROM frameq.layer l
			  WHERE l.id = ANY (all_layers) AND l.id <> ALL (held_layers) ORDER BY l.id FOR SHARE;
		END IF;
	END IF;
	WITH wanted AS (
			SELECT l.id AS layer, l.memory FROM frameq.layer l WHERE l.id = ANY (layers)
			UNION
			SELECT f.layer, f.memory FROM frameq.frame f
			 WHERE f.layer = ANY (layers) AND f.state = 'waiting' AND f.not_before IS NULL
			   AND f.memory IS NOT NULL
			UNION
			SELECT raised_layer, raised_memory WHERE raised_layer IS NOT NULL),
		 seen AS (
			SELECT q.layer, q.tag, q.priority, q.memory, q.min_cc, q.gpus, q.gpu_memory,
				   q.dispatch_order
			  FROM frameq.dispatch_queue q
			 WHERE q.layer = ANY (held_layers)),
		 held AS (
			SELECT q.layer, q.tag, q.priority, q.memory, q.min_cc, q.gpus, q.gpu_memory,
				   q.dispatch_order
			  FROM frameq.dispatch_queue q
			 WHERE q.layer = ANY (all_layers) AND q.layer <> ALL (held_layers)
			   FOR KEY SHARE OF q SKIP LOCKED),
		 queued AS (
			INSERT INTO frameq.dispatch_queue
				(show, tag, gpu, priority, job, dispatch_order, layer, min_cc, memory, gpus, gpu_memory,
				 mem_class, core_class)
			SELECT j.show, t.tag, l.gpus > 0, j.priority, j.id, l.dispatch_order,
				   l.id, l.min_cc, w.memory, l.gpus, l.gpu_memory,
				   frameq._memory_class(w.memory), frameq._cores_class(l.min_cc)
			  FROM wanted w
			  JOIN frameq.layer l ON l.id = w.layer AND NOT l.paused
			  JOIN frameq.job j ON j.id = l.job
			 CROSS JOIN LATERAL (SELECT DISTINCT x AS tag
								   FROM unnest(CASE WHEN cardinality(l.tags) = 0
													THEN ARRAY['']::text[] ELSE l.tags END) x) t
			 WHERE NOT EXISTS (SELECT 1 FROM seen h
								WHERE h.layer = l.id AND h.tag = t.tag AND h.priority = j.priority
								  AND h.memory = w.memory AND h.min_cc = l.min_cc AND h.gpus = l.gpus
								  AND h.gpu_memory = l.gpu_memory
								  AND h.dispatch_order = l.dispatch_order)
			   AND NOT EXISTS (SELECT 1 FROM held h
								WHERE h.layer = l.id AND h.tag = t.tag AND h.priority = j.priority
								  AND h.memory = w.memory AND h.min_cc = l.min_cc AND h.gpus = l.gpus
								  AND h.gpu_memory = l.gpu_memory
								  AND h.dispatch_order = l.dispatch_order)
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

CREATE FUNCTION frameq._frame_inserted() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	jobs bigint[];
	layers bigint[];
	waiting bigint[];
BEGIN
	SELECT array_agg(p.job ORDER BY p.layer, p.job), array_agg(p.layer ORDER BY p.layer, p.job),
		   array_agg(p.layer ORDER BY p.layer) FILTER (WHERE p.waiting)
	  INTO jobs, layers, waiting
	  FROM (SELECT n.job, n.layer, bool_or(n.state OPERATOR(pg_catalog.=) 'waiting') AS waiting
			  FROM new_frames n GROUP BY n.job, n.layer) p;
	PERFORM frameq._frame_keys_check(jobs, layers);
	PERFORM frameq._queue_layers(coalesce(waiting, '{}'));
	RETURN NULL;
END
$$;

CREATE TRIGGER frame_inserted AFTER INSERT ON frameq.frame
	REFERENCING NEW TABLE AS new_frames
	FOR EACH STATEMENT EXECUTE FUNCTION frameq._frame_inserted();

CREATE FUNCTION frameq._layer_has_waiting(layer bigint) RETURNS bool
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
	SELECT EXISTS (SELECT 1 FROM frameq.frame f
					WHERE f.layer OPERATOR(pg_catalog.=) $1 AND f.state OPERATOR(pg_catalog.=) 'waiting'
					  AND f.not_before IS NULL AND f.memory IS NULL)
		OR EXISTS (SELECT 1 FROM frameq.frame f
					WHERE f.layer OPERATOR(pg_catalog.=) $1 AND f.state OPERATOR(pg_catalog.=) 'waiting'
					  AND f.not_before IS NULL AND f.memory IS NOT NULL)
$$;

CREATE FUNCTION frameq._row_has_waiting(layer bigint, memory bigint) RETURNS bool
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
	SELECT EXISTS (SELECT 1 FROM frameq.frame f
					WHERE f.layer OPERATOR(pg_catalog.=) $1 AND f.state OPERATOR(pg_catalog.=) 'waiting'
					  AND f.not_before IS NULL AND f.memory IS NULL
					  AND $2 OPERATOR(pg_catalog.=) (SELECT l.memory FROM frameq.layer l
													  WHERE l.id OPERATOR(pg_catalog.=) $1))
		OR EXISTS (SELECT 1 FROM frameq.frame f
					WHERE f.layer OPERATOR(pg_catalog.=) $1 AND f.state OPERATOR(pg_catalog.=) 'waiting'
					  AND f.not_before IS NULL AND f.memory OPERATOR(pg_catalog.=) $2)
$$;

CREATE FUNCTION frameq._row_current(q frameq.dispatch_queue) RETURNS bool
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
	SELECT EXISTS (SELECT 1 FROM frameq.layer l
					WHERE l.id OPERATOR(pg_catalog.=) q.layer AND NOT l.paused
					  AND q.tag OPERATOR(pg_catalog.=) ANY (
							CASE WHEN pg_catalog.cardinality(l.tags) OPERATOR(pg_catalog.=) 0
								 THEN ARRAY['']::text[] ELSE l.tags END)
					  AND q.min_cc OPERATOR(pg_catalog.=) l.min_cc
					  AND q.memory OPERATOR(pg_catalog.>=) l.memory
					  AND q.gpus OPERATOR(pg_catalog.=) l.gpus
					  AND q.gpu_memory OPERATOR(pg_catalog.=) l.gpu_memory
					  AND q.dispatch_order OPERATOR(pg_catalog.=) l.dispatch_order)
$$;

CREATE OR REPLACE FUNCTION frameq._dispatch_tidy(stale tid[], emptied bigint[], parked tid[]) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	jobs bigint[];
	edited bigint[];
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
		/*
		 * Rows that no longer say what their layer is (set_layer): the
		 * layer's current rows first, as for a stale priority above, so
		 * that deleting them cannot leave a waiting layer without one
		 */
		edited := ARRAY(SELECT DISTINCT q.layer FROM frameq.dispatch_queue q
						 WHERE q.layer OPERATOR(pg_catalog.=) ANY (emptied) AND NOT frameq._row_current(q));
		IF pg_catalog.cardinality(edited) OPERATOR(pg_catalog.>) 0 THEN
			PERFORM frameq._queue_layers(edited);
		END IF;
		jobs := frameq._claim_jobs(ARRAY(SELECT DISTINCT x.job FROM frameq.dispatch_queue x
										  WHERE x.layer OPERATOR(pg_catalog.=) ANY (emptied)));
		DELETE FROM frameq.dispatch_queue q
		 WHERE q.ctid OPERATOR(pg_catalog.=) ANY (ARRAY(
				SELECT x.ctid FROM frameq.dispatch_queue x
				 WHERE x.layer OPERATOR(pg_catalog.=) ANY (emptied)
				   AND x.job OPERATOR(pg_catalog.=) ANY (jobs) FOR UPDATE SKIP LOCKED))
		   AND (NOT frameq._row_has_waiting(q.layer, q.memory) OR NOT frameq._row_current(q));
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
		   AND frameq._layer_has_waiting(l.id)))
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
		   AND frameq._layer_has_waiting(l.id)
		   AND (NOT EXISTS (SELECT 1 FROM frameq.dispatch_queue q
							 WHERE q.layer OPERATOR(pg_catalog.=) l.id
							   AND q.tag OPERATOR(pg_catalog.=) t.tag
							   AND q.priority OPERATOR(pg_catalog.=) j.priority)
				/* a raised size's row may be missing where the layer's is not */
				OR EXISTS (SELECT 1 FROM frameq.frame f
							WHERE f.layer OPERATOR(pg_catalog.=) l.id
							  AND f.state OPERATOR(pg_catalog.=) 'waiting' AND f.not_before IS NULL
							  AND f.memory IS NOT NULL))))
$$;

CREATE OR REPLACE FUNCTION frameq.create_allocation(name text, tag text DEFAULT NULL) RETURNS int
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

CREATE OR REPLACE FUNCTION frameq.create_show(name text) RETURNS int
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

CREATE OR REPLACE FUNCTION frameq.set_subscription(show text, allocation text, size numeric, burst numeric)
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

CREATE OR REPLACE FUNCTION frameq.create_folder(show text, name text, max_cores numeric DEFAULT NULL,
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

CREATE OR REPLACE FUNCTION frameq.set_folder_limits(folder int, max_cores numeric, max_gpus int)
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

CREATE OR REPLACE FUNCTION frameq.create_limit(name text, max_running int) RETURNS int
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

CREATE OR REPLACE FUNCTION frameq.set_limit(name text, max_running int) RETURNS void
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

CREATE OR REPLACE FUNCTION frameq.register_host(name text, allocation text, cores numeric, memory bigint,
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

CREATE OR REPLACE FUNCTION frameq.rotate_host_token(host text) RETURNS text
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

CREATE OR REPLACE FUNCTION frameq.retire_host(host text) RETURNS void
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

CREATE OR REPLACE FUNCTION frameq.grant_show(show text, role text) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
	INSERT INTO frameq.show_grant AS g (show, role)
	VALUES (frameq._show_id(show), frameq._role_oid(role))
	ON CONFLICT DO NOTHING;
	PERFORM frameq._audit('grant_show', NULL, NULL, NULL, NULL,
						  pg_catalog.jsonb_build_object('show', show, 'role', role));
END
$$;

CREATE OR REPLACE FUNCTION frameq.revoke_show(show text, role text) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
	DELETE FROM frameq.show_grant g
	 WHERE g.show = frameq._show_id(revoke_show.show) AND g.role = frameq._role_oid(revoke_show.role);
	PERFORM frameq._audit('revoke_show', NULL, NULL, NULL, NULL,
						  pg_catalog.jsonb_build_object('show', show, 'role', role));
END
$$;

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

CREATE FUNCTION frameq._action_append_only() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
	RAISE EXCEPTION 'the audit trail is append-only: its rows are never updated'
		USING ERRCODE = 'insufficient_privilege';
END
$$;

CREATE TRIGGER action_append_only BEFORE UPDATE ON frameq.action
	FOR EACH STATEMENT EXECUTE FUNCTION frameq._action_append_only();

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

CREATE OR REPLACE FUNCTION frameq.set_job(job bigint, priority int DEFAULT NULL,
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

CREATE OR REPLACE FUNCTION frameq.attach(host text, token text, boot_id text,
							  OUT epoch bigint, OUT lease_ttl interval, OUT kill bigint[],
							  OUT host_id int, OUT channel text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp SET lock_timeout = 0 AS $$
#variable_conflict use_column
DECLARE
	h frameq.host := frameq._host_lock(host, token);
	granted_at timestamptz;
BEGIN
	/* a reboot's releases and the kill orders wait at most frameq.lock_wait for others' locks */
	PERFORM frameq._bound_lock_waits();
	/* before the first write of procs: see _ledger_ensure */
	PERFORM frameq._ledger_ensure();
	PERFORM frameq._not_null(boot_id, 'boot_id');
	PERFORM frameq._bounded(boot_id, 'boot_id', 200);
	IF boot_id = '' THEN
		RAISE EXCEPTION 'boot_id must not be empty' USING ERRCODE = 'invalid_parameter_value';
	END IF;
	IF h.boot_id IS DISTINCT FROM boot_id AND h.boot_id IS NOT NULL THEN
		/* the machine rebooted: nothing of its earlier life can still run */
		PERFORM frameq._release_procs(ARRAY(SELECT x.id FROM frameq.proc x WHERE x.host = h.id),
									  'host_rebooted');
	ELSE
		/*
		 * same boot: the earlier agent's renders may live on; order them
		 * killed, locking them first in id order, as a complete_many() of
		 * the earlier agent does (it does not take the host lock)
		 */
		PERFORM 1 FROM frameq.proc x WHERE x.host = h.id AND x.state = 'running'
		 ORDER BY x.id FOR NO KEY UPDATE;
		UPDATE frameq.proc x SET state = 'killing', kill_reason = 'agent re-attached',
			   kill_at = clock_timestamp(), want_state = 'waiting'
		 WHERE x.host = h.id AND x.state = 'running';
	END IF;
	lease_ttl := frameq._lease_ttl();
	granted_at := clock_timestamp();
	UPDATE frameq.host x SET epoch = h.epoch + 1, boot_id = attach.boot_id,
		   lease_expires_at = granted_at + attach.lease_ttl,
		   lease_granted = frameq._lease_grant(x.last_renewal_at, x.lease_granted,
											   attach.lease_ttl, granted_at),
		   last_renewal_at = granted_at,
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
								 report jsonb DEFAULT NULL,
								 OUT lease_ttl interval, OUT kill bigint[])
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp SET lock_timeout = 0 AS $$
#variable_conflict use_column
DECLARE
	h frameq.host := frameq._host_lock(host, token);
	zombies bigint[];
	granted_at timestamptz;
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
	granted_at := clock_timestamp();
	UPDATE frameq.host x SET lease_expires_at = granted_at + heartbeat.lease_ttl,
		   lease_granted = frameq._lease_grant(x.last_renewal_at, x.lease_granted,
											   heartbeat.lease_ttl, granted_at),
		   last_renewal_at = granted_at
	 WHERE x.id = h.id;
	kill := ARRAY(SELECT x.id FROM frameq.proc x WHERE x.host = h.id AND x.state = 'killing'
				  UNION SELECT unnest(zombies) ORDER BY 1);
END
$$;

CREATE FUNCTION frameq.report_log(host text, token text, epoch bigint, proc bigint, log text)
RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp SET lock_timeout = 0 AS $$
DECLARE
	host_id int := frameq._authenticate(host, token);
BEGIN
	PERFORM frameq._not_null(epoch, 'epoch');
	PERFORM frameq._not_null(proc, 'proc');
	PERFORM frameq._bounded(frameq._not_null(log, 'log'), 'log', 1024);
	IF log = '' THEN
		RAISE EXCEPTION 'log must not be empty' USING ERRCODE = 'invalid_parameter_value';
	END IF;
	PERFORM frameq._check_lease(host_id, host, epoch);
	/* the run's row is locked by nothing but its own release: wait at most frameq.lock_wait */
	PERFORM frameq._bound_lock_waits();
	UPDATE frameq.run r SET log = report_log.log
	 WHERE r.proc = report_log.proc AND r.host = host_id AND r.epoch = report_log.epoch
	   AND r.ended_at IS NULL;
	RETURN FOUND;
END
$$;

CREATE FUNCTION frameq.complete_many(host text, token text, epoch bigint, procs bigint[],
									 exit_statuses int[], exit_signals int[] DEFAULT NULL,
									 max_rss bigint[] DEFAULT NULL, oom bool[] DEFAULT NULL)
	RETURNS text[]
	AS 'MODULE_PATHNAME', 'frameq_complete_many' LANGUAGE C VOLATILE
	SECURITY DEFINER SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION frameq._move_frames(tasks bigint[], from_states text[], target text)
RETURNS bigint LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	jobs bigint[];
	layers bigint[];
	lows int[];
	bookable bigint[];
	moved bigint[];
	j bigint;
BEGIN
	/* the gate reads each layer once for the whole statement (src/depends.c) */
	PERFORM frameq._gate_memo(true);
	WITH m AS (
		UPDATE frameq.frame x SET state = target, version = x.version + 1,
			   retries = CASE WHEN target = 'waiting' THEN 0 ELSE x.retries END,
			   requeues = CASE WHEN target = 'waiting' THEN 0 ELSE x.requeues END,
			   not_before = NULL, dead_reason = NULL
		 WHERE x.id = ANY (tasks) AND x.state = ANY (from_states)
		RETURNING x.job, x.layer, x.number, x.state),
	g AS (
		SELECT m.job, m.layer, min(m.number) AS low,
			   count(*) FILTER (WHERE m.state = 'waiting') AS bookable, count(*) AS moved
		  FROM m GROUP BY m.job, m.layer)
	SELECT array_agg(g.job ORDER BY g.job, g.layer), array_agg(g.layer ORDER BY g.job, g.layer),
		   array_agg(g.low ORDER BY g.job, g.layer), array_agg(g.bookable ORDER BY g.job, g.layer),
		   array_agg(g.moved ORDER BY g.job, g.layer)
	  INTO jobs, layers, lows, bookable, moved
	  FROM g;
	PERFORM frameq._gate_memo(false);
	IF jobs IS NULL THEN
		RETURN 0;
	END IF;
	IF target = 'waiting' THEN
		PERFORM frameq._frame_waiting(layers[i], lows[i]) FROM generate_subscripts(layers, 1) i;
		UPDATE frameq.job x SET state = 'active', finished_at = NULL
		 WHERE x.id = ANY (jobs) AND x.state = 'finished';
		PERFORM frameq._announce_ready(jobs[i], layers[i], bookable[i])
		   FROM generate_subscripts(layers, 1) i WHERE bookable[i] > 0;
	ELSE
		FOR j IN SELECT DISTINCT u FROM unnest(jobs) u ORDER BY u LOOP
			/*
			 * A completion in flight may have seen these tasks still live
			 * and left the job open: wait for every one of them (a release
			 * deletes its proc row, which our KEY SHARE lock waits for)
			 * before deciding whether the job is finished.  In id order,
			 * the order a complete_many() deletes a job's procs in: else
			 * we could hold one it is still to delete while waiting for
			 * one it has deleted.
			 */
			PERFORM 1 FROM frameq.proc x WHERE x.job = j ORDER BY x.id FOR KEY SHARE;
			PERFORM frameq._finish_job_if_done(j);
		END LOOP;
	END IF;
	RETURN (SELECT sum(u) FROM unnest(moved) u);
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
		IF frameq._move_frames(ARRAY[frame], from_states, target) > 0 THEN
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

CREATE OR REPLACE FUNCTION frameq.kill_frame(frame bigint, reason text) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	st text;
	outcome text;
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
	outcome := frameq._frame_action(frame, reason, 'dead', ARRAY['waiting', 'depend'], 'dead');
	PERFORM frameq._audit_frame('kill_frame', frame,
		pg_catalog.jsonb_build_object('reason', reason, 'outcome', outcome));
END
$$;

CREATE OR REPLACE FUNCTION frameq.retry_frame(frame bigint) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	outcome text;
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
		PERFORM frameq._audit_frame('retry_frame', frame, '{"outcome": "delay ended"}');
		RETURN;
	END IF;
	outcome := frameq._frame_action(frame, 'retried by operator', 'waiting',
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
	PERFORM frameq._audit_frame('retry_frame', frame,
								pg_catalog.jsonb_build_object('outcome', outcome));
END
$$;

CREATE OR REPLACE FUNCTION frameq.eat_frame(frame bigint) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	st text;
	outcome text;
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
	outcome := frameq._frame_action(frame, 'eaten by operator', 'eaten',
									ARRAY['waiting', 'depend', 'dead'], 'eaten');
	PERFORM frameq._audit_frame('eat_frame', frame,
								pg_catalog.jsonb_build_object('outcome', outcome));
END
$$;

CREATE FUNCTION frameq._bulk_layer(job bigint, layer text) RETURNS bigint
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	layer_id bigint;
BEGIN
	IF NOT EXISTS (SELECT 1 FROM frameq.job j WHERE j.id = _bulk_layer.job) THEN
		RAISE EXCEPTION 'job % does not exist', job USING ERRCODE = 'undefined_object';
	END IF;
	IF layer IS NOT NULL THEN
		SELECT l.id INTO layer_id FROM frameq.layer l
		 WHERE l.job = _bulk_layer.job AND l.name = frameq._bounded(layer, 'layer', 100);
		IF NOT FOUND THEN
			RAISE EXCEPTION 'job % has no layer "%"', job, frameq._clip(layer)
				USING ERRCODE = 'undefined_object';
		END IF;
	END IF;
	RETURN layer_id;
END
$$;

CREATE FUNCTION frameq._bulk_states(states text[], allowed text[], action text) RETURNS text[]
LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	s text;
BEGIN
	PERFORM frameq._not_null(states, 'states');
	IF cardinality(states) > 10 THEN
		PERFORM frameq._too_big('states', pg_catalog.format('%s elements, at most 10', cardinality(states)));
	END IF;
	IF cardinality(states) = 0 THEN
		RAISE EXCEPTION 'states must not be empty' USING ERRCODE = 'invalid_parameter_value';
	END IF;
	FOREACH s IN ARRAY states LOOP
		IF s IS NULL THEN
			RAISE EXCEPTION 'states must not contain null' USING ERRCODE = 'null_value_not_allowed';
		END IF;
		IF s <> ALL (allowed) THEN
			RAISE EXCEPTION 'states: % does not act on "%" tasks', action, frameq._clip(s)
				USING ERRCODE = 'invalid_parameter_value',
					  HINT = pg_catalog.format('It acts on %s.', array_to_string(allowed, ', '));
		END IF;
	END LOOP;
	RETURN states;
END
$$;

CREATE FUNCTION frameq._bulk_tasks(job bigint, layer bigint, states text[]) RETURNS bigint[]
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
	SELECT ARRAY(
		SELECT x.id FROM frameq.frame x
		 WHERE 'dead' = ANY (states) AND x.job = $1 AND x.state = 'dead'
		   AND ($2 IS NULL OR x.layer = $2)
		UNION ALL
		SELECT x.id FROM frameq.frame x
		 WHERE 'waiting' = ANY (states) AND x.job = $1 AND x.state = 'waiting'
		   AND ($2 IS NULL OR x.layer = $2)
		UNION ALL
		SELECT x.id FROM frameq.frame x
		 WHERE 'depend' = ANY (states) AND x.job = $1 AND x.state = 'depend'
		   AND ($2 IS NULL OR x.layer = $2)
		UNION ALL
		SELECT x.id FROM frameq.layer l JOIN frameq.frame x ON x.layer = l.id
		 WHERE ('succeeded' = ANY (states) OR 'eaten' = ANY (states))
		   AND l.job = $1 AND ($2 IS NULL OR l.id = $2)
		   AND x.state IN ('succeeded', 'eaten') AND x.state = ANY (states))
$$;

CREATE FUNCTION frameq._bulk_kill_orders(job bigint, layer bigint, reason text, want text)
RETURNS bigint LANGUAGE sql SET search_path = pg_catalog, pg_temp AS $$
	SELECT count(*) FROM (
		SELECT frameq._kill_order(p.id, $3, $4) AS done
		  FROM frameq.frame x JOIN frameq.proc p ON p.frame = x.id
		 WHERE x.job = $1 AND x.state = 'running' AND ($2 IS NULL OR x.layer = $2)
		 ORDER BY p.id) k
	 WHERE k.done
$$;

CREATE FUNCTION frameq.retry_frames(job bigint, layer text DEFAULT NULL,
									states text[] DEFAULT '{dead}') RETURNS int
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	layer_id bigint;
	n bigint := 0;
BEGIN
	PERFORM frameq._authorize_job(frameq._not_null(retry_frames.job, 'job'));
	layer_id := frameq._bulk_layer(retry_frames.job, retry_frames.layer);
	PERFORM frameq._bulk_states(states, ARRAY['dead', 'eaten', 'succeeded', 'running', 'waiting',
											  'depend'], 'retry_frames');
	IF 'running' = ANY (states) THEN
		n := frameq._bulk_kill_orders(retry_frames.job, layer_id, 'retried by operator', 'waiting');
	END IF;
	/* as retry_frame: neither kill_job nor a completion finishing the job passes unseen */
	PERFORM 1 FROM frameq.job j WHERE j.id = retry_frames.job FOR SHARE;
	IF EXISTS (SELECT 1 FROM frameq.job j WHERE j.id = retry_frames.job AND j.state = 'killed') THEN
		RAISE EXCEPTION 'job % is killed: its tasks cannot run again', job
			USING ERRCODE = 'object_not_in_prerequisite_state';
	END IF;
	IF 'waiting' = ANY (states) OR 'depend' = ANY (states) THEN
		n := n + frameq._end_delay(frameq._bulk_tasks(retry_frames.job, layer_id,
													  ARRAY(SELECT s FROM unnest(states) s
															 WHERE s IN ('waiting', 'depend'))));
	END IF;
	n := n + frameq._move_frames(frameq._bulk_tasks(retry_frames.job, layer_id,
													ARRAY(SELECT s FROM unnest(states) s
														   WHERE s IN ('succeeded', 'dead', 'eaten'))),
								 ARRAY['succeeded', 'dead', 'eaten'], 'waiting');
	PERFORM frameq._audit('retry_frames', retry_frames.job, layer_id, NULL, NULL,
		pg_catalog.jsonb_build_object('layer', retry_frames.layer, 'states', states, 'tasks', n));
	RETURN n;
END
$$;

CREATE FUNCTION frameq.eat_frames(job bigint, layer text DEFAULT NULL,
								  states text[] DEFAULT '{dead}') RETURNS int
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	layer_id bigint;
	n bigint;
BEGIN
	PERFORM frameq._authorize_job(frameq._not_null(eat_frames.job, 'job'));
	layer_id := frameq._bulk_layer(eat_frames.job, eat_frames.layer);
	PERFORM frameq._bulk_states(states, ARRAY['dead', 'waiting', 'depend', 'running'], 'eat_frames');
	/*
	 * The tasks first, then the kill orders: a waiting task booked meanwhile
	 * is skipped by the move (its row is running once locked) and is then
	 * found running.
	 */
	n := frameq._move_frames(frameq._bulk_tasks(eat_frames.job, layer_id,
												ARRAY(SELECT s FROM unnest(states) s
													   WHERE s IN ('waiting', 'depend', 'dead'))),
							 ARRAY['waiting', 'depend', 'dead'], 'eaten');
	IF 'running' = ANY (states) THEN
		n := n + frameq._bulk_kill_orders(eat_frames.job, layer_id, 'eaten by operator', 'eaten');
	END IF;
	PERFORM frameq._audit('eat_frames', eat_frames.job, layer_id, NULL, NULL,
		pg_catalog.jsonb_build_object('layer', eat_frames.layer, 'states', states, 'tasks', n));
	RETURN n;
END
$$;

CREATE FUNCTION frameq.kill_frames(job bigint, layer text DEFAULT NULL, reason text DEFAULT NULL)
RETURNS int
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	layer_id bigint;
	n bigint;
BEGIN
	PERFORM frameq._authorize_job(frameq._not_null(kill_frames.job, 'job'));
	layer_id := frameq._bulk_layer(kill_frames.job, kill_frames.layer);
	reason := frameq._reason(coalesce(reason, 'killed by operator'));
	/* as eat_frames: the tasks first, then the kill orders */
	n := frameq._move_frames(frameq._bulk_tasks(kill_frames.job, layer_id, ARRAY['waiting', 'depend']),
							 ARRAY['waiting', 'depend'], 'dead');
	n := n + frameq._bulk_kill_orders(kill_frames.job, layer_id, reason, 'dead');
	PERFORM frameq._audit('kill_frames', kill_frames.job, layer_id, NULL, NULL,
		pg_catalog.jsonb_build_object('layer', kill_frames.layer, 'reason', reason, 'tasks', n));
	RETURN n;
END
$$;

CREATE OR REPLACE FUNCTION frameq.kill_job(job bigint, reason text) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	j frameq.job;
	live bigint := 0;
BEGIN
	PERFORM frameq._authorize_job(job);
	PERFORM frameq._reason(reason);
	/*
	 * lock order as in complete(): the job's procs, in id order (as
	 * complete_many and _release_procs lock several), then the job row
	 */
	PERFORM 1 FROM frameq.proc x WHERE x.job = kill_job.job ORDER BY x.id FOR NO KEY UPDATE;
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
	/*
	 * Each live task as kill_frame would, set-based as kill_frames does (a
	 * loop of kill_frame asked after each task whether the job was done,
	 * reading past every task it had killed: 16 minutes for a job of
	 * 1,000,000 waiting tasks): waiting and depend ones dead at once, then
	 * running ones kill orders.
	 */
	live := frameq._move_frames(frameq._bulk_tasks(j.id, NULL, ARRAY['waiting', 'depend']),
								ARRAY['waiting', 'depend'], 'dead')
		+ frameq._bulk_kill_orders(j.id, NULL, reason, 'dead');
	PERFORM frameq._audit('kill_job', j.id, NULL, NULL, NULL,
						  pg_catalog.jsonb_build_object('reason', reason, 'frames', live));
END
$$;

CREATE OR REPLACE FUNCTION frameq.set_host_state(host text, state text) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	h frameq.host;
BEGIN
	IF state IS NULL OR state NOT IN ('up', 'down', 'repair', 'drain') THEN
		RAISE EXCEPTION 'state must be up, down, repair or drain, not %', coalesce(frameq._clip(state), 'null')
			USING ERRCODE = CASE WHEN state IS NULL THEN 'null_value_not_allowed'
								 ELSE 'invalid_parameter_value' END;
	END IF;
	h := frameq._host_lock_by_name(host);
	IF state IN ('down', 'repair') THEN
		/* its work is ordered killed; the frames stay held until that is confirmed */
		PERFORM frameq._kill_order(x.id, pg_catalog.format('host set %s', set_host_state.state), 'waiting')
		   FROM frameq.proc x WHERE x.host = h.id AND x.state = 'running'
		 /* in id order, as complete_many locks several: it does not take the host lock */
		 ORDER BY x.id;
	END IF;
	UPDATE frameq.host x SET state = set_host_state.state,
		   down_reason = CASE WHEN set_host_state.state = 'up' THEN NULL ELSE 'operator' END
	 WHERE x.id = h.id;
	PERFORM frameq._audit('set_host_state', NULL, NULL, NULL, h.id,
		pg_catalog.jsonb_build_object('host', h.name, 'state', state, 'was', h.state));
END
$$;

CREATE OR REPLACE FUNCTION frameq.confirm_host_dead(host text) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	h frameq.host := frameq._host_lock_by_name(host);
	procs bigint[];
BEGIN
	procs := ARRAY(SELECT x.id FROM frameq.proc x WHERE x.host = h.id);
	PERFORM frameq._release_procs(procs, 'operator');
	UPDATE frameq.host x SET epoch = x.epoch + 1, lease_expires_at = NULL,
		   state = CASE WHEN x.state = 'up' THEN 'down' ELSE x.state END,
		   down_reason = CASE WHEN x.state = 'up' THEN 'operator' ELSE x.down_reason END
	 WHERE x.id = h.id;
	PERFORM frameq._audit('confirm_host_dead', NULL, NULL, NULL, h.id,
		pg_catalog.jsonb_build_object('host', h.name, 'released', pg_catalog.cardinality(procs)));
END
$$;

CREATE OR REPLACE FUNCTION frameq.unblock_host(job bigint, host text) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	h frameq.host;
	was_blocked bool;
BEGIN
	PERFORM frameq._authorize_job(frameq._not_null(unblock_host.job, 'job'));
	IF NOT EXISTS (SELECT 1 FROM frameq.job j WHERE j.id = unblock_host.job) THEN
		RAISE EXCEPTION 'job % does not exist', job USING ERRCODE = 'undefined_object';
	END IF;
	h := frameq._host_by_name(frameq._bounded(unblock_host.host, 'host', 100));
	DELETE FROM frameq.job_host_failure f WHERE f.job = unblock_host.job AND f.host = h.id
	RETURNING f.blocked_at IS NOT NULL INTO was_blocked;
	IF FOUND THEN
		PERFORM 1 FROM frameq.job j WHERE j.id = unblock_host.job FOR NO KEY UPDATE;
		PERFORM frameq._job_blocks_mark(unblock_host.job);
	END IF;
	PERFORM frameq._audit('unblock_host', job, NULL, NULL, h.id,
		pg_catalog.jsonb_build_object('host', h.name, 'was_blocked', coalesce(was_blocked, false)));
END
$$;

CREATE FUNCTION frameq.comment_job(job bigint, text text) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
	PERFORM frameq._not_null(job, 'job');
	PERFORM frameq._authorize_job(job);
	PERFORM frameq._bounded(frameq._not_null(comment_job.text, 'text'), 'text', 2000);
	IF pg_catalog.btrim(comment_job.text, E' \t\n\r') = '' THEN
		RAISE EXCEPTION 'text must not be empty' USING ERRCODE = 'invalid_parameter_value';
	END IF;
	IF pg_catalog.translate(comment_job.text, E'\t\n\r', '') ~ '[[:cntrl:]]' THEN
		RAISE EXCEPTION 'text must not hold control characters (tab, newline and carriage return may)'
			USING ERRCODE = 'invalid_parameter_value';
	END IF;
	IF NOT EXISTS (SELECT 1 FROM frameq.job j WHERE j.id = comment_job.job) THEN
		RAISE EXCEPTION 'job % does not exist', job USING ERRCODE = 'undefined_object';
	END IF;
	PERFORM frameq._audit('comment_job', job, NULL, NULL, NULL,
						  pg_catalog.jsonb_build_object('text', comment_job.text));
END
$$;

CREATE OR REPLACE FUNCTION frameq._announce_job_ready(job bigint) RETURNS void
LANGUAGE sql SET search_path = pg_catalog, pg_temp AS $$
	SELECT frameq._announce_ready(job, l.id, w.n)
	  FROM frameq.layer l
	 CROSS JOIN LATERAL (SELECT (SELECT count(*) FROM frameq.frame f
								  WHERE f.layer = l.id AND f.state = 'waiting' AND f.not_before IS NULL
									AND f.memory IS NULL)
								+ (SELECT count(*) FROM frameq.frame f
									WHERE f.layer = l.id AND f.state = 'waiting' AND f.not_before IS NULL
									  AND f.memory IS NOT NULL) AS n) w
	 WHERE l.job = _announce_job_ready.job AND w.n > 0
	   AND EXISTS (SELECT 1 FROM frameq.job j WHERE j.id = _announce_job_ready.job AND j.state = 'active')
	 ORDER BY l.id
$$;

CREATE FUNCTION frameq._gate_memo(on_ bool) RETURNS void
	AS 'MODULE_PATHNAME', 'frameq_gate_memo' LANGUAGE C VOLATILE STRICT
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
	PERFORM frameq._audit('depend_job', job, NULL, NULL, NULL,
						  pg_catalog.jsonb_build_object('on_job', on_job));
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
	PERFORM frameq._audit('drop_depends', job, layer_id, NULL, NULL,
						  pg_catalog.jsonb_build_object('layer', layer, 'freed', n));
	RETURN n;
END
$$;

CREATE FUNCTION frameq._lease_period(ttl interval) RETURNS interval
	AS 'MODULE_PATHNAME', 'frameq_lease_period_for' LANGUAGE C STABLE STRICT
	SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION frameq._lease_grant(renewed timestamptz, granted interval, ttl interval,
									at timestamptz) RETURNS interval
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
	SELECT CASE WHEN renewed IS NULL OR granted IS NULL THEN ttl
				ELSE greatest(ttl, granted - (at - renewed) /
								   (1 + current_setting('frameq.clock_drift')::float8)) END
$$;

CREATE FUNCTION frameq._longest_lease_us() RETURNS bigint
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
	SELECT coalesce(max(extract(epoch FROM x.lease_granted) * 1000000), 0)::bigint
	  FROM frameq.host x
	 WHERE x.lease_expires_at IS NOT NULL AND x.retired_at IS NULL
$$;

CREATE OR REPLACE FUNCTION frameq._rearm_leases() RETURNS bigint
LANGUAGE sql SET search_path = pg_catalog, pg_temp AS $$
	WITH r AS (
		UPDATE frameq.host
		   SET lease_expires_at = pg_catalog.clock_timestamp() OPERATOR(pg_catalog.+)
								  coalesce(lease_granted, frameq._lease_ttl())
		 WHERE lease_expires_at IS NOT NULL RETURNING 1)
	SELECT pg_catalog.count(*) FROM r
$$;

CREATE OR REPLACE FUNCTION frameq._expire_leases(since timestamptz, at timestamptz DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	ttl interval := frameq._lease_ttl();
	/*
	 * "Now" as the worker read it, next to its clock-jump check: a step of
	 * the clock after that check must not make leases look old in this
	 * round (the next round sees the jump).
	 */
	at_time timestamptz := coalesce(at, pg_catalog.clock_timestamp());
	saved_timeout text := pg_catalog.current_setting('lock_timeout');
	candidate int;
	h frameq.host;
	n bigint := 0;
BEGIN
	PERFORM pg_catalog.set_config('lock_timeout',
								  pg_catalog.current_setting('frameq.lock_wait'), true);
	FOR candidate IN SELECT x.id FROM frameq.host x
					  WHERE x.lease_expires_at IS NOT NULL
						AND (greatest(x.last_renewal_at, since) OPERATOR(pg_catalog.+)
							 frameq._lease_period(coalesce(x.lease_granted, ttl)))
							OPERATOR(pg_catalog.<) at_time
					  ORDER BY x.id LOOP
		BEGIN
			IF NOT frameq._lock_host(candidate, NULL) THEN
				RAISE LOG 'frameq worker: host % skipped this round: its lock is held by another session',
					candidate;
				CONTINUE;
			END IF;
			SELECT * INTO h FROM frameq.host x WHERE x.id OPERATOR(pg_catalog.=) candidate;
			CONTINUE WHEN h.lease_expires_at IS NULL
					   OR (greatest(h.last_renewal_at, since) OPERATOR(pg_catalog.+)
						   frameq._lease_period(coalesce(h.lease_granted, ttl)))
						  OPERATOR(pg_catalog.>=) at_time;
			PERFORM frameq._release_procs(ARRAY(SELECT x.id FROM frameq.proc x
												 WHERE x.host OPERATOR(pg_catalog.=) h.id),
										  'host_lost');
			UPDATE frameq.host x SET lease_expires_at = NULL,
				   epoch = x.epoch OPERATOR(pg_catalog.+) 1,
				   state = CASE WHEN x.state OPERATOR(pg_catalog.=) 'up' THEN 'down' ELSE x.state END,
				   down_reason = CASE WHEN x.state OPERATOR(pg_catalog.=) 'up'
									  THEN 'lease_lost' ELSE x.down_reason END
			 WHERE x.id OPERATOR(pg_catalog.=) h.id;
			n := n OPERATOR(pg_catalog.+) 1;
		EXCEPTION WHEN lock_not_available OR deadlock_detected THEN
			RAISE LOG 'frameq worker: host % skipped this round: a row it needs is locked by another session (%)',
				candidate, SQLERRM;
		END;
	END LOOP;
	PERFORM pg_catalog.set_config('lock_timeout', saved_timeout, true);
	/* for metrics' frameq_lease_expired_total */
	PERFORM frameq._tally_add('lease_expired', '', n);
	RETURN n;
END
$$;

CREATE OR REPLACE FUNCTION frameq._shift_deadlines(jump interval) RETURNS bigint
LANGUAGE sql SET search_path = pg_catalog, pg_temp AS $$
	/* locked in id order first, as complete_many locks several procs */
	WITH s AS (
		UPDATE frameq.proc x SET timeout_at = x.timeout_at OPERATOR(pg_catalog.+) jump
		 WHERE x.id OPERATOR(pg_catalog.=) ANY (ARRAY(
				SELECT y.id FROM frameq.proc y
				 WHERE y.state OPERATOR(pg_catalog.=) 'running' AND y.timeout_at IS NOT NULL
				 ORDER BY y.id FOR NO KEY UPDATE))
		   AND x.state OPERATOR(pg_catalog.=) 'running' AND x.timeout_at IS NOT NULL RETURNING 1)
	SELECT pg_catalog.count(*) FROM s
$$;

CREATE FUNCTION frameq._prunable(job bigint, cutoff timestamptz) RETURNS bool
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
	SELECT EXISTS (
		SELECT 1 FROM frameq.job j
		 WHERE j.id OPERATOR(pg_catalog.=) $1
		   AND j.state OPERATOR(pg_catalog.=) ANY ('{finished,killed}'::text[])
		   AND j.finished_at OPERATOR(pg_catalog.<) $2
		   AND NOT EXISTS (SELECT 1 FROM frameq.proc p WHERE p.job OPERATOR(pg_catalog.=) j.id)
		   AND NOT EXISTS (SELECT 1 FROM frameq.depend d
							 JOIN frameq.job o ON o.id OPERATOR(pg_catalog.=) d.job
							WHERE d.kind OPERATOR(pg_catalog.=) 'job'
							  AND d.on_job OPERATOR(pg_catalog.=) j.id
							  AND o.state OPERATOR(pg_catalog.<>) ALL ('{finished,killed}'::text[]))
		   AND NOT EXISTS (SELECT 1 FROM frameq.depend d
							 JOIN frameq.job o ON o.id OPERATOR(pg_catalog.=) d.on_job
							WHERE d.kind OPERATOR(pg_catalog.=) 'job'
							  AND d.job OPERATOR(pg_catalog.=) j.id AND NOT d.satisfied
							  AND o.state OPERATOR(pg_catalog.<>) ALL ('{finished,killed}'::text[])))
$$;

CREATE FUNCTION frameq._tally_add(metric text, label text, n bigint) RETURNS void
LANGUAGE sql SET search_path = pg_catalog, pg_temp AS $$
	INSERT INTO frameq.tally AS t (metric, label, value) SELECT $1, $2, $3 WHERE $3 OPERATOR(pg_catalog.>) 0
	ON CONFLICT (metric, label) DO UPDATE SET value = t.value OPERATOR(pg_catalog.+) excluded.value
$$;

CREATE FUNCTION frameq._prune_jobs(jobs bigint[]) RETURNS bigint
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	layers bigint[] := ARRAY(SELECT l.id FROM frameq.layer l WHERE l.job = ANY (jobs));
	r record;
	n bigint;
BEGIN
	FOR r IN WITH gone AS (
				DELETE FROM frameq.run x
				 WHERE x.frame IN (SELECT f.id FROM frameq.frame f WHERE f.layer = ANY (layers))
				RETURNING x.reason)
			 SELECT coalesce(g.reason, '') AS reason, count(*) AS n FROM gone g GROUP BY 1 LOOP
		PERFORM frameq._tally_add('runs_pruned', r.reason, r.n);
	END LOOP;
	DELETE FROM frameq.frame_depend e
	 WHERE e.frame IN (SELECT f.id FROM frameq.frame f WHERE f.layer = ANY (layers));
	DELETE FROM frameq.frame_depend e
	 WHERE e.on_frame IN (SELECT f.id FROM frameq.frame f WHERE f.layer = ANY (layers));
	FOR r IN WITH gone AS (
				DELETE FROM frameq.frame f WHERE f.layer = ANY (layers) RETURNING f.state)
			 SELECT g.state, count(*) AS n FROM gone g GROUP BY 1 LOOP
		PERFORM frameq._tally_add('frames_pruned', r.state, r.n);
	END LOOP;
	DELETE FROM frameq.depend d WHERE d.job = ANY (jobs);
	DELETE FROM frameq.depend d WHERE d.kind = 'job' AND d.on_job = ANY (jobs);
	DELETE FROM frameq.layer_limit x WHERE x.layer = ANY (layers);
	DELETE FROM frameq.layer l WHERE l.id = ANY (layers);
	DELETE FROM frameq.job_host_failure x WHERE x.job = ANY (jobs);
	DELETE FROM frameq.job_limit_check x WHERE x.job = ANY (jobs);
	DELETE FROM frameq.job_finish_check x WHERE x.job = ANY (jobs);
	DELETE FROM frameq.job j WHERE j.id = ANY (jobs);
	GET DIAGNOSTICS n = ROW_COUNT;
	PERFORM frameq._tally_add('jobs_pruned', '', n);
	RETURN n;
END
$$;

CREATE FUNCTION frameq._prune_batch(cutoff timestamptz, max_jobs int, max_tasks int DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	jobs bigint[];
BEGIN
	jobs := ARRAY(SELECT j.id FROM frameq.job j
				   WHERE j.state IN ('finished', 'killed') AND j.finished_at < cutoff
					 AND frameq._prunable(j.id, cutoff)
				   ORDER BY j.finished_at, j.id LIMIT max_jobs
				   FOR UPDATE OF j SKIP LOCKED);
	/* locked: a fresh snapshot sees whatever came first */
	jobs := ARRAY(SELECT x FROM unnest(jobs) x WHERE frameq._prunable(x, cutoff));
	IF max_tasks IS NOT NULL THEN
		/* the running sum only grows: the jobs kept are a prefix */
		jobs := ARRAY(SELECT c.job FROM (
						SELECT x.job, x.ord, sum(x.tasks) OVER (ORDER BY x.ord) AS upto
						  FROM (SELECT u.job, u.ord,
									   (SELECT count(*) FROM frameq.layer l
										  JOIN frameq.frame f ON f.layer = l.id
										 WHERE l.job = u.job) AS tasks
								  FROM unnest(jobs) WITH ORDINALITY u(job, ord)) x) c
					   WHERE c.ord = 1 OR c.upto <= max_tasks
					   ORDER BY c.ord);
	END IF;
	DELETE FROM frameq.dispatch_queue q
	 WHERE q.ctid = ANY (ARRAY(SELECT y.ctid FROM frameq.dispatch_queue y
								WHERE y.job = ANY (jobs) FOR UPDATE SKIP LOCKED));
	jobs := ARRAY(SELECT x FROM unnest(jobs) x
				   WHERE NOT EXISTS (SELECT 1 FROM frameq.dispatch_queue q WHERE q.job = x));
	IF cardinality(jobs) = 0 THEN
		RETURN 0;
	END IF;
	RETURN frameq._prune_jobs(jobs);
END
$$;

CREATE FUNCTION frameq.prune(finished_before interval) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	cutoff timestamptz;
	step bigint;
	n bigint := 0;
BEGIN
	IF finished_before IS NULL THEN
		RAISE EXCEPTION 'finished_before must not be null'
			USING ERRCODE = 'null_value_not_allowed';
	ELSIF finished_before < interval '0' THEN
		RAISE EXCEPTION 'finished_before must not be negative: %', finished_before
			USING ERRCODE = 'invalid_parameter_value';
	ELSIF finished_before > interval '100 years' THEN
		RAISE EXCEPTION 'finished_before is past its bound of 100 years: %', finished_before
			USING ERRCODE = 'program_limit_exceeded';
	END IF;
	cutoff := clock_timestamp() - finished_before;
	LOOP
		step := frameq._prune_batch(cutoff, 100);
		n := n + step;
		EXIT WHEN step = 0;
	END LOOP;
	/* a person's call is an action; the worker's steps (_prune_step) are not */
	PERFORM frameq._audit('prune', NULL, NULL, NULL, NULL,
		pg_catalog.jsonb_build_object('finished_before', finished_before::text, 'jobs', n));
	RETURN n;
END
$$;

CREATE FUNCTION frameq._prune_step(retention int, max_jobs int, max_tasks int) RETURNS bigint
LANGUAGE sql SET search_path = pg_catalog, pg_temp AS $$
	SELECT frameq._prune_batch(pg_catalog.clock_timestamp() OPERATOR(pg_catalog.-)
							   pg_catalog.make_interval(secs => $1), $2, $3)
$$;

CREATE FUNCTION frameq._count_history() RETURNS bigint
LANGUAGE sql SET search_path = pg_catalog, pg_temp AS $$
	WITH counted AS (
		SELECT 'runs_ended'::text AS metric, x.reason AS label, pg_catalog.sum(x.n)::bigint AS n
		  FROM (SELECT r.reason, pg_catalog.count(*) AS n FROM frameq.run r
				 WHERE r.reason IS NOT NULL GROUP BY r.reason
				UNION ALL
				SELECT t.label, t.value FROM frameq.tally t
				 WHERE t.metric OPERATOR(pg_catalog.=) 'runs_pruned') x
		 GROUP BY x.reason
		UNION ALL
		SELECT 'frames_counted', s.state, pg_catalog.count(f.id)
		  FROM pg_catalog.unnest('{waiting,depend,running,succeeded,dead,eaten}'::text[]) s(state)
		  LEFT JOIN frameq.frame f ON f.state OPERATOR(pg_catalog.=) s.state
		 GROUP BY s.state
		UNION ALL
		SELECT 'counted_at', '',
			   pg_catalog.floor(EXTRACT(epoch FROM pg_catalog.clock_timestamp()))::bigint),
	 written AS (
		INSERT INTO frameq.tally AS t (metric, label, value)
		SELECT c.metric, c.label, c.n FROM counted c
		ON CONFLICT (metric, label) DO UPDATE
		   SET value = CASE WHEN t.metric OPERATOR(pg_catalog.=) 'runs_ended'
							THEN GREATEST(t.value, excluded.value) ELSE excluded.value END
		RETURNING 1)
	SELECT pg_catalog.count(*) FROM written
$$;

CREATE FUNCTION frameq._live_frames(OUT state text, OUT n bigint) RETURNS SETOF record
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp SET max_parallel_workers_per_gather = 0 AS $$
	SELECT f.state, pg_catalog.count(*) FROM frameq.frame f
	 WHERE f.state OPERATOR(pg_catalog.=) ANY ('{waiting,depend,running}'::text[]) GROUP BY f.state
	UNION ALL
	SELECT 'dead', pg_catalog.count(*) FROM frameq.frame f WHERE f.state OPERATOR(pg_catalog.=) 'dead'
$$;

CREATE FUNCTION frameq._count_live() RETURNS bigint
LANGUAGE sql SET search_path = pg_catalog, pg_temp AS $$
	WITH counted AS (
		SELECT 'frames_live'::text AS metric, s.state AS label, coalesce(x.n, 0) AS n
		  FROM pg_catalog.unnest('{waiting,depend,running,dead}'::text[]) s(state)
		  LEFT JOIN frameq._live_frames() x ON x.state OPERATOR(pg_catalog.=) s.state
		UNION ALL
		SELECT 'frames_live', 'delayed', pg_catalog.count(*) FROM frameq.frame f
		 WHERE f.state OPERATOR(pg_catalog.=) 'waiting' AND f.not_before IS NOT NULL
		UNION ALL
		SELECT 'live_counted_at', '',
			   pg_catalog.floor(EXTRACT(epoch FROM pg_catalog.clock_timestamp()))::bigint),
	 written AS (
		INSERT INTO frameq.tally AS t (metric, label, value)
		SELECT c.metric, c.label, c.n FROM counted c
		ON CONFLICT (metric, label) DO UPDATE SET value = excluded.value
		RETURNING 1)
	SELECT pg_catalog.count(*) FROM written
$$;

CREATE OR REPLACE VIEW frameq.frames AS
SELECT f.id AS frame, f.job, f.layer, f.number AS frame_number, f.state, f.retries,
	   f.attempts, p.id AS proc, h.name AS host, p.state AS proc_state,
	   frameq._frame_spec(f.number, f.numbers) AS frame_spec,
	   p.last_line, p.progress, p.last_output_at, f.requeues, f.not_before,
	   GREATEST(l.memory, f.memory) AS memory, f.dead_reason
  FROM frameq.frame f
  JOIN frameq.layer l ON l.id = f.layer
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
	   count(f.id) FILTER (WHERE f.state = 'waiting' AND f.not_before IS NOT NULL) AS delayed,
	   (SELECT s.name FROM frameq.show s WHERE s.id = j.show) AS show
  FROM frameq.job j
  LEFT JOIN frameq.frame f ON f.job = j.id
 GROUP BY j.id;

CREATE OR REPLACE VIEW frameq.runs AS
SELECT r.proc, r.frame, r.job, h.name AS host, r.epoch, r.started_at, r.ended_at,
	   r.exit_status, r.exit_signal, r.max_rss, r.reason, r.kill_reason, r.end_state,
	   (r.cores_cc / 100.0)::numeric(12,2) AS cores, r.memory, r.log
  FROM frameq.run r
  JOIN frameq.host h ON h.id = r.host;

CREATE OR REPLACE VIEW frameq.actions AS
SELECT a.id, a.at, a.role, a.action, a.job, a.layer, a.frame, a.host, a.detail
  FROM frameq.action a;

CREATE OR REPLACE VIEW frameq.metrics AS
WITH tallied AS (
		SELECT t.metric, t.label, t.value FROM frameq.tally t),
	 running AS (
		SELECT p.show, count(*) AS tasks, sum(p.cores_cc) AS cc FROM frameq.proc p GROUP BY p.show),
	 farm AS (
		SELECT h.state, count(*) AS n, sum(h.cores_cc) AS cc, sum(h.idle_cc) AS idle_cc
		  FROM frameq.host h WHERE h.retired_at IS NULL GROUP BY h.state)
SELECT 'frameq_frames'::text AS name, jsonb_build_object('state', t.label) AS labels,
	   t.value::float8 AS value
  FROM tallied t WHERE t.metric = 'frames_live' AND t.label <> 'delayed'
UNION ALL
SELECT 'frameq_delayed_frames', '{}', t.value::float8
  FROM tallied t WHERE t.metric = 'frames_live' AND t.label = 'delayed'
UNION ALL
SELECT 'frameq_frames_age_seconds', '{}',
	   extract(epoch FROM now())::float8 - t.value
  FROM tallied t WHERE t.metric = 'live_counted_at'
UNION ALL
SELECT 'frameq_frames_counted', jsonb_build_object('state', t.label), t.value::float8
  FROM tallied t WHERE t.metric = 'frames_counted'
UNION ALL
SELECT 'frameq_counted_age_seconds', '{}',
	   extract(epoch FROM now())::float8 - t.value
  FROM tallied t WHERE t.metric = 'counted_at'
UNION ALL
SELECT 'frameq_jobs', jsonb_build_object('state', s.state), count(j.id)::float8
  FROM unnest('{active,paused,finished,killed}'::text[]) s(state)
  LEFT JOIN frameq.job j ON j.state = s.state
 GROUP BY s.state
UNION ALL
SELECT 'frameq_running_frames', jsonb_build_object('show', sh.name), coalesce(r.tasks, 0)::float8
  FROM frameq.show sh LEFT JOIN running r ON r.show = sh.id
UNION ALL
SELECT 'frameq_running_cores', jsonb_build_object('show', sh.name), coalesce(r.cc / 100.0, 0)::float8
  FROM frameq.show sh LEFT JOIN running r ON r.show = sh.id
UNION ALL
SELECT 'frameq_oldest_waiting_seconds', jsonb_build_object('show', sh.name),
	   coalesce(extract(epoch FROM now() - (
		   SELECT min(j.submitted_at) FROM frameq.job j
			WHERE j.show = sh.id AND j.state = 'active'
			  AND EXISTS (SELECT 1 FROM frameq.frame f
						   WHERE f.job = j.id AND f.state = 'waiting'))), 0)::float8
  FROM frameq.show sh
UNION ALL
SELECT 'frameq_hosts', jsonb_build_object('state', s.state), coalesce(h.n, 0)::float8
  FROM (SELECT unnest('{up,down,repair,drain}'::text[]) UNION SELECT x.state FROM farm x) s(state)
  LEFT JOIN farm h ON h.state = s.state
UNION ALL
SELECT 'frameq_cores', jsonb_build_object('state', s.state),
	   /* idle: bookable, so of up hosts; used: booked, on any host (a drained one's too) */
	   coalesce(CASE s.state
				WHEN 'idle' THEN (SELECT sum(h.idle_cc) FROM farm h WHERE h.state = 'up')
				ELSE (SELECT sum(h.cc - h.idle_cc) FROM farm h) END, 0)::float8 / 100.0
  FROM unnest('{idle,used}'::text[]) s(state)
UNION ALL
SELECT 'frameq_kill_orders', '{}', count(*)::float8 FROM frameq.proc p WHERE p.state = 'killing'
UNION ALL
SELECT 'frameq_runs_ended_total', jsonb_build_object('reason', s.reason),
	   coalesce((SELECT t.value FROM tallied t
				  WHERE t.metric = 'runs_ended' AND t.label = s.reason), 0)::float8
  FROM (SELECT unnest('{completed,killed,timeout,stalled,oom,host_lost,host_rebooted,lost_by_agent,operator}'::text[])
		UNION SELECT t.label FROM tallied t WHERE t.metric = 'runs_ended') s(reason)
UNION ALL
SELECT 'frameq_lease_expired_total', '{}',
	   coalesce((SELECT t.value FROM tallied t WHERE t.metric = 'lease_expired'), 0)::float8
UNION ALL
SELECT 'frameq_jobs_pruned_total', '{}',
	   coalesce((SELECT t.value FROM tallied t WHERE t.metric = 'jobs_pruned'), 0)::float8;

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
						  AND f.memory IS NULL AND f.number < d.low;

	/*
	 * A row per tag, of the job's show, resources and size classes, at any
	 * priority, unless the job or its folder is parked over its cap or the
	 * layer is paused (set_layer); and
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
	 WHERE j.state = 'active' AND NOT l.paused
	   AND NOT frameq._parked_over_cap(j.id, coalesce(j.max_cc, -1), coalesce(j.max_gpus, -1),
									   j.folder, coalesce(fo.max_cc, -1), coalesce(fo.max_gpus, -1),
									   l.min_cc, l.gpus)
	   AND EXISTS (SELECT 1 FROM frameq.frame f
					WHERE f.layer = l.id AND f.state = 'waiting' AND f.not_before IS NULL
					  AND f.memory IS NULL)
	   AND NOT EXISTS (SELECT 1 FROM frameq.dispatch_queue q
						WHERE q.layer = l.id AND q.job = j.id AND q.show = j.show AND q.tag = t.tag
						  AND q.gpu = (l.gpus > 0) AND q.dispatch_order = l.dispatch_order
						  AND (q.min_cc, q.memory, q.gpus, q.gpu_memory)
							  = (l.min_cc, l.memory, l.gpus, l.gpu_memory)
						  AND (q.mem_class, q.core_class)
							  = (frameq._memory_class(l.memory), frameq._cores_class(l.min_cc)));

	/* the same for each size an OOM retry raised waiting tasks of the layer to */
	RETURN QUERY
	SELECT 'no waiting frame is passed over',
		   format('layer %s of active job %s has waiting tasks raised to %s bytes of memory but no dispatch queue row of that size for tag "%s"',
				  l.id, j.id, r.memory, t.tag)
	  FROM frameq.layer l
	  JOIN frameq.job j ON j.id = l.job
	  LEFT JOIN frameq.folder fo ON fo.id = j.folder
	 CROSS JOIN LATERAL (SELECT DISTINCT f.memory FROM frameq.frame f
						  WHERE f.layer = l.id AND f.state = 'waiting' AND f.not_before IS NULL
							AND f.memory IS NOT NULL) r
	 CROSS JOIN LATERAL unnest(CASE WHEN cardinality(l.tags) = 0 THEN ARRAY['']::text[]
									ELSE l.tags END) t(tag)
	 WHERE j.state = 'active' AND NOT l.paused
	   AND NOT frameq._parked_over_cap(j.id, coalesce(j.max_cc, -1), coalesce(j.max_gpus, -1),
									   j.folder, coalesce(fo.max_cc, -1), coalesce(fo.max_gpus, -1),
									   l.min_cc, l.gpus)
	   AND NOT EXISTS (SELECT 1 FROM frameq.dispatch_queue q
						WHERE q.layer = l.id AND q.job = j.id AND q.show = j.show AND q.tag = t.tag
						  AND q.gpu = (l.gpus > 0) AND q.dispatch_order = l.dispatch_order
						  AND (q.min_cc, q.memory, q.gpus, q.gpu_memory)
							  = (l.min_cc, r.memory, l.gpus, l.gpu_memory)
						  AND (q.mem_class, q.core_class)
							  = (frameq._memory_class(r.memory), frameq._cores_class(l.min_cc)));

	/*
	 * A raised task's memory is above its layer's (complete() raises it
	 * only above): reserve() takes a row below the layer's for stale.
	 */
	RETURN QUERY
	SELECT 'no waiting frame is passed over', format('task %s is raised to %s bytes of memory, no more than its layer''s %s',
							f.id, f.memory, l.memory)
	  FROM frameq.frame f JOIN frameq.layer l ON l.id = f.layer
	 WHERE f.state = 'waiting' AND f.not_before IS NULL AND f.memory IS NOT NULL
	   AND f.memory <= l.memory;

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

	/* what frame's keys would guard (procs.sql): its layer exists and is of its job */
	RETURN QUERY
	SELECT 'job state', CASE WHEN l.id IS NULL
							 THEN format('frame %s names layer %s, which does not exist', f.id, f.layer)
							 ELSE format('frame %s is of job %s but names layer %s, which is of job %s',
										 f.id, f.job, f.layer, l.job) END
	  FROM frameq.frame f LEFT JOIN frameq.layer l ON l.id = f.layer
	 WHERE l.job IS DISTINCT FROM f.job;

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
	frameq._layer_framed_latest(bigint[]),
	frameq._frame_keys_check(bigint[], bigint[]),
	frameq._frame_keys_frozen(),
	frameq._layer_keep_framed(),
	frameq._layer_deleted_framed(),
	frameq._keep_framed_truncate(),
	frameq._largest_host_memory(bigint),
	frameq._queue_layers(bigint[], bigint, bigint),
	frameq._frame_inserted(),
	frameq._layer_has_waiting(bigint),
	frameq._row_has_waiting(bigint, bigint),
	frameq._row_current(frameq.dispatch_queue),
	frameq._audit_scrub(jsonb),
	frameq._audit(text, bigint, bigint, bigint, int, jsonb),
	frameq._audit_frame(text, bigint, jsonb),
	frameq._action_append_only(),
	frameq.set_job(bigint, jsonb),
	frameq._edited_layer(frameq.layer, jsonb, text),
	frameq._edited_limits(jsonb),
	frameq._edit_lock(bigint, text, text),
	frameq.set_layer(bigint, text, jsonb),
	frameq.add_frames(bigint, text, text),
	frameq.report_log(text, text, bigint, bigint, text),
	frameq.complete_many(text, text, bigint, bigint[], int[], int[], bigint[], bool[]),
	frameq._move_frames(bigint[], text[], text),
	frameq._bulk_layer(bigint, text),
	frameq._bulk_states(text[], text[], text),
	frameq._bulk_tasks(bigint, bigint, text[]),
	frameq._bulk_kill_orders(bigint, bigint, text, text),
	frameq.retry_frames(bigint, text, text[]),
	frameq.eat_frames(bigint, text, text[]),
	frameq.kill_frames(bigint, text, text),
	frameq.comment_job(bigint, text),
	frameq._gate_memo(bool),
	frameq._lease_period(interval),
	frameq._lease_grant(timestamptz, interval, interval, timestamptz),
	frameq._longest_lease_us(),
	frameq._prunable(bigint, timestamptz),
	frameq._tally_add(text, text, bigint),
	frameq._prune_jobs(bigint[]),
	frameq._prune_batch(timestamptz, int, int),
	frameq.prune(interval),
	frameq._prune_step(int, int, int),
	frameq._count_history(),
	frameq._live_frames(),
	frameq._count_live()
	FROM PUBLIC;
