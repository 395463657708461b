/*
 * The lease period has one definition, in C (src/lease.c), which the
 * worker's quarantine uses too; 0.1.0 and 0.2.0 wrote the formula again
 * in SQL.
 */
CREATE OR REPLACE FUNCTION frameq.lease_period() RETURNS interval
	AS 'MODULE_PATHNAME', 'frameq_lease_period' LANGUAGE C STABLE
	SET search_path = pg_catalog, pg_temp;
