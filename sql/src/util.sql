
/*
 * ---------------------------------------------------------------------
 * util.sql: checking arguments and quoting them.
 *
 * Every error names the offending field and carries a specific SQLSTATE;
 * nothing is written before all checks have passed.  Every argument has a
 * bound; a value past it gets 54000 (program_limit_exceeded), a malformed
 * one 22023 (invalid_parameter_value), a missing one 22004; the message
 * quotes at most 64 characters of the value (frameq._clip), so a hostile
 * 10 MB argument cannot become a 10 MB log line.  The bounds, in one place
 * (doc/security.md lists them for users):
 *
 *	names (hosts, shows, allocations, folders, limits, layers)	100 characters
 *	job names												200 characters
 *	tags: per host, layer or allocation						64, of 64 characters each
 *	a command, before and after its tokens are expanded		65,536 bytes
 *	a layer's env											256 variables, 65,536 bytes
 *	layers per job											1,000
 *	limits per layer										12
 *	frames per job											1,000,000
 *	frame numbers per task (a layer's chunk)				100,000
 *	a frame range's text									262,144 characters
 *	a whole job spec										64 MB
 *	a reason, a boot id										500 / 200 characters
 *	procs listed in one heartbeat							100,000
 *	a heartbeat's report: entries, bytes					10,000, 4 MB (past them it is ignored)
 *	a duration (timeouts, delays)							365 days (31,536,000 s)
 *	a layer's progress_pattern								1,000 characters
 *	a job comment (comment_job)								2,000 characters
 *	an audit row's detail (admin.sql, _audit)				64 kB; strings in it 2,000 characters
 * ---------------------------------------------------------------------
 */

/*
 * At most 64 characters of a value, for a message.  src/util.c's
 * frameq_clip() is the same rule for C.
 */
CREATE FUNCTION frameq._clip(value text) RETURNS text
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
	SELECT CASE WHEN pg_catalog.length(value) > 64
				THEN pg_catalog.substr(value, 1, 64) OPERATOR(pg_catalog.||) '...'
				ELSE value END
$$;

CREATE FUNCTION frameq._too_big(field text, what text) RETURNS void
LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
BEGIN
	RAISE EXCEPTION '% is too large: %', field, what USING ERRCODE = 'program_limit_exceeded';
END
$$;

/* a text argument: at most max_len characters (NULL passes: callers decide) */
CREATE FUNCTION frameq._bounded(value text, field text, max_len int) RETURNS text
LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
BEGIN
	IF pg_catalog.length(value) > max_len THEN
		PERFORM frameq._too_big(field, pg_catalog.format('%s characters, at most %s',
														 pg_catalog.length(value), max_len));
	END IF;
	RETURN value;
END
$$;

CREATE FUNCTION frameq._not_null(value anyelement, field text)
RETURNS anyelement LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
BEGIN
	IF value IS NULL THEN
		RAISE EXCEPTION '% must not be null', field USING ERRCODE = 'null_value_not_allowed';
	END IF;
	RETURN value;
END
$$;

/* tags of a host, a layer or an allocation: 0 to 64 names of 1 to 64 characters */
CREATE FUNCTION frameq._tags(tags text[], field text) RETURNS text[]
LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
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
CREATE FUNCTION frameq._cc(value numeric, field text, allow_zero bool DEFAULT true,
						   maximum numeric DEFAULT 10000000)
RETURNS int LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
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

CREATE FUNCTION frameq._nonneg(value bigint, field text, maximum bigint DEFAULT NULL)
RETURNS bigint LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
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

/* a reason given by an operator or a submitter: 1 to 500 characters */
CREATE FUNCTION frameq._reason(reason text) RETURNS text
LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
BEGIN
	PERFORM frameq._not_null(reason, 'reason');
	PERFORM frameq._bounded(reason, 'reason', 500);
	IF reason = '' THEN
		RAISE EXCEPTION 'reason must not be empty' USING ERRCODE = 'invalid_parameter_value';
	END IF;
	RETURN reason;
END
$$;

/* a show's id by name, or 42704 */
CREATE FUNCTION frameq._show_id(show text) RETURNS int
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
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

/* an allocation's id by name, or 42704 */
CREATE FUNCTION frameq._allocation_id(allocation text) RETURNS int
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
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
 * A duration field of a spec (timeouts, delays), in whole seconds: a JSON
 * number of seconds, or a string of one or more of <n>d, <n>h, <n>m, <n>s
 * in that order ("90s", "2h", "1h30m", "1d12h").  NULL for SQL NULL or a
 * JSON null (the field is absent).  0 is refused like a negative number
 * (for a timeout, absent means none) unless zero_ok (a delay of 0 is no
 * delay); past 365 days is 54000.  field names the field in messages
 * (spec.layers[0].timeout).  The one place durations are read.
 */
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
