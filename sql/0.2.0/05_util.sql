/*
 * ---------------------------------------------------------------------
 * Quoting what a caller gave us.  An error message quotes at most 64
 * characters of any value, so a hostile 10 MB argument cannot become a
 * 10 MB log line.  src/util.c's frameq_clip() is the same rule for C.
 * ---------------------------------------------------------------------
 */
CREATE FUNCTION frameq._clip(value text) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
	SELECT CASE WHEN pg_catalog.length(value) > 64
				THEN pg_catalog.substr(value, 1, 64) OPERATOR(pg_catalog.||) '...'
				ELSE value END
$$;
