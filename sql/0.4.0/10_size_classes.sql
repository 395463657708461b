/*
 * Size classes in the dispatch queue (sql/src/dispatch.sql, "Size
 * classes"): a host no longer meets, even as one index tuple, the layers
 * that need more than twice the memory or cores it has free.  The queue's
 * rows gain their classes and the streams' index puts them ahead of the
 * policy order; dispatch_class lists the streams that have rows.  The rows
 * already queued get their classes here, and their streams are listed.
 */
CREATE FUNCTION frameq._memory_class(memory bigint) RETURNS smallint
	AS 'MODULE_PATHNAME', 'frameq_memory_class' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE
	SET search_path = pg_catalog, pg_temp;
CREATE FUNCTION frameq._cores_class(min_cc int) RETURNS smallint
	AS 'MODULE_PATHNAME', 'frameq_cores_class' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE
	SET search_path = pg_catalog, pg_temp;

ALTER TABLE frameq.dispatch_queue ADD COLUMN mem_class smallint, ADD COLUMN core_class smallint;
UPDATE frameq.dispatch_queue
   SET mem_class = frameq._memory_class(memory), core_class = frameq._cores_class(min_cc);
ALTER TABLE frameq.dispatch_queue ALTER COLUMN mem_class SET NOT NULL,
	ALTER COLUMN core_class SET NOT NULL;
DROP INDEX frameq.dispatch_queue_order;
CREATE INDEX dispatch_queue_order ON frameq.dispatch_queue
	(show, tag, gpu, mem_class, core_class, priority DESC, job, dispatch_order, layer,
	 min_cc, memory, gpus, gpu_memory);

CREATE TABLE frameq.dispatch_class (
	show		int NOT NULL,
	tag			text NOT NULL,
	gpu			bool NOT NULL,
	mem_class	smallint NOT NULL,
	core_class	smallint NOT NULL
);
CREATE INDEX dispatch_class_stream ON frameq.dispatch_class
	(show, tag, gpu, mem_class, core_class);
INSERT INTO frameq.dispatch_class (show, tag, gpu, mem_class, core_class)
SELECT DISTINCT show, tag, gpu, mem_class, core_class FROM frameq.dispatch_queue;

/* frameq._queue_layers: replaced in its final form by 50_depends.sql */

CREATE FUNCTION frameq._dispatch_class_prune() RETURNS bigint
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	removed bigint;
BEGIN
	/* the delete's snapshot must follow the lock */
	IF pg_catalog.current_setting('transaction_isolation') OPERATOR(pg_catalog.<>) 'read committed' THEN
		RETURN 0;
	END IF;
	IF NOT EXISTS (SELECT 1 FROM frameq.dispatch_class c
					WHERE NOT EXISTS (SELECT 1 FROM frameq.dispatch_queue q
									   WHERE q.show OPERATOR(pg_catalog.=) c.show
										 AND q.tag OPERATOR(pg_catalog.=) c.tag
										 AND q.gpu OPERATOR(pg_catalog.=) c.gpu
										 AND q.mem_class OPERATOR(pg_catalog.=) c.mem_class
										 AND q.core_class OPERATOR(pg_catalog.=) c.core_class)
					   OR EXISTS (SELECT 1 FROM frameq.dispatch_class d
								   WHERE (d.show, d.tag, d.gpu, d.mem_class, d.core_class)
										 OPERATOR(pg_catalog.=) (c.show, c.tag, c.gpu, c.mem_class, c.core_class)
									 AND d.ctid OPERATOR(pg_catalog.<) c.ctid)) THEN
		RETURN 0;
	END IF;
	BEGIN
		LOCK TABLE frameq.dispatch_queue IN SHARE MODE NOWAIT;
	EXCEPTION WHEN lock_not_available THEN
		RETURN 0;
	END;
	DELETE FROM frameq.dispatch_class c
	 WHERE NOT EXISTS (SELECT 1 FROM frameq.dispatch_queue q
						WHERE q.show OPERATOR(pg_catalog.=) c.show AND q.tag OPERATOR(pg_catalog.=) c.tag
						  AND q.gpu OPERATOR(pg_catalog.=) c.gpu
						  AND q.mem_class OPERATOR(pg_catalog.=) c.mem_class
						  AND q.core_class OPERATOR(pg_catalog.=) c.core_class)
		OR EXISTS (SELECT 1 FROM frameq.dispatch_class d
					WHERE (d.show, d.tag, d.gpu, d.mem_class, d.core_class)
						  OPERATOR(pg_catalog.=) (c.show, c.tag, c.gpu, c.mem_class, c.core_class)
					  AND d.ctid OPERATOR(pg_catalog.<) c.ctid);
	GET DIAGNOSTICS removed = ROW_COUNT;
	RETURN removed;
END
$$;

/* frameq.check: replaced in its final form by 50_depends.sql */

REVOKE ALL ON FUNCTION frameq._memory_class(bigint), frameq._cores_class(int),
	frameq._dispatch_class_prune() FROM PUBLIC;
