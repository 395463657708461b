/*
 * Names have one rule, frameq._name() (sql/src/util.sql): submit (its
 * final form in 50_depends.sql) checks a job's and each layer's name
 * through it, as the administration functions
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
/* frameq.submit: replaced in its final form by 50_depends.sql */
