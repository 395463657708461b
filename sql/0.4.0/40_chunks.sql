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
/* frameq.submit: replaced in its final form by 50_depends.sql */

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
