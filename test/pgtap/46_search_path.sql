/*
 * Shadowed functions and operators against every function a frameq role
 * can call (doc/security.md: no role gains privileges through frameq).
 *
 * A role with CREATE on schema "evil" plants there look-alikes of what
 * frameq's bodies use: functions (sha256, convert_to, length, format,
 * jsonb_typeof, array_position, pg_notify, current_setting,
 * clock_timestamp, now, generate_series, regexp_match, ... with
 * pg_catalog's signatures and with closer ones), aggregates (count(*),
 * sum, max, string_agg, array_agg) and operators (= <> < > <= >= + - * /
 * % || ~ !~ ~~ -> ->> #> #>> ? @> <@ && over text, int, bigint, numeric,
 * float8, bool, bytea, jsonb, arrays, interval and timestamptz, same-type
 * and cross-type).  Each trap bumps the sequence evil.fired (which no
 * rollback undoes) and raises EV001.
 *
 * Then every function that frameq_admin, frameq_agent, frameq_submit or
 * frameq_reader may execute (every SECURITY DEFINER one and lease_period)
 * is called with valid arguments on a farm built first, so that its body
 * runs past its argument checks, by a member of the role it is granted to,
 * with search_path = 'evil, pg_catalog' (the traps before pg_catalog);
 * then again by the role that planted the traps (no grants: 42501).  The
 * views and check() are read the same way.  Every call must end as
 * expected and evil.fired must never have been used.  And every function
 * of schema frameq must pin search_path to pg_catalog, pg_temp (on 0.1.0
 * most do not; lease_period() is what made the worker's superuser run a
 * planted operator).
 */
BEGIN;
\ir include/helpers.psql

CREATE SCHEMA t46;

/* ---------------------------------------------------------------- pins */
CREATE TEMP TABLE t46_pins ON COMMIT DROP AS
SELECT p.oid::regprocedure::text AS fn FROM pg_proc p
 WHERE p.pronamespace = 'frameq'::regnamespace
   AND NOT coalesce(p.proconfig @> ARRAY['search_path=pg_catalog, pg_temp'], false);

/* ---------------------------------------------------------------- roles */
CREATE ROLE t46_evil;
CREATE ROLE t46_admin IN ROLE frameq_admin;
CREATE ROLE t46_agent IN ROLE frameq_agent;
CREATE ROLE t46_reader IN ROLE frameq_reader;
CREATE ROLE t46_submitter IN ROLE frameq_submit;
CREATE SCHEMA evil AUTHORIZATION t46_evil;

/* ---------------------------------------------------------------- farm */
SELECT frameq.create_allocation('t46.pool') \g /dev/null
SELECT frameq.create_show('t46show') \g /dev/null
SELECT frameq.set_subscription('t46show', 't46.pool', 100, 100) \g /dev/null
SELECT frameq.create_folder('t46show', 't46f', 50, 4) AS folder \gset
SELECT frameq.create_limit('t46.lic', 10) \g /dev/null
SELECT frameq.register_host('t46-h1', 't46.pool', 8, 17179869184) AS tok1 \gset
SELECT frameq.register_host('t46-h2', 't46.pool', 4, 17179869184) AS tok2 \gset
SELECT frameq.register_host('t46-h3', 't46.pool', 4, 17179869184) AS tok3 \gset
SELECT frameq.register_host('t46-h4', 't46.pool', 4, 17179869184) AS tok4 \gset
SELECT epoch AS e1 FROM frameq.attach('t46-h1', :'tok1', 'boot-1') \gset
SELECT epoch AS e2 FROM frameq.attach('t46-h2', :'tok2', 'boot-1') \gset
SELECT epoch AS e3 FROM frameq.attach('t46-h3', :'tok3', 'boot-1') \gset
SELECT frameq.submit($${"show": "t46show", "folder": "t46f", "name": "t46-a", "max_cores": 20,
	"host_failure_limit": 1, "max_dead_frames": 1,
	"layers": [{"name": "l", "command": "render #IFRAME# #JOB#", "range": "1-10", "memory": "1GB",
				"limits": ["t46.lic"], "env": {"A": "b"}}]}$$) AS ja \gset
/* h1 runs frames 1-3, h2 frame 4; the rest wait */
CREATE TEMP TABLE t46_b ON COMMIT DROP AS SELECT * FROM frameq.reserve('t46-h1', :'tok1', :e1, 3);
INSERT INTO t46_b SELECT * FROM frameq.reserve('t46-h2', :'tok2', :e2, 1);
SELECT proc AS p1, frame AS f1 FROM t46_b WHERE frame_number = 1 \gset
SELECT proc AS p2, frame AS f2 FROM t46_b WHERE frame_number = 2 \gset
SELECT proc AS p3, frame AS f3 FROM t46_b WHERE frame_number = 3 \gset
SELECT proc AS p4, frame AS f4 FROM t46_b WHERE frame_number = 4 \gset
SELECT id AS f9 FROM frameq.frame WHERE job = :ja AND number = 9 \gset
SELECT id AS f10 FROM frameq.frame WHERE job = :ja AND number = 10 \gset
SELECT frameq.submit($${"show": "t46show", "name": "t46-k",
	"layers": [{"name": "l", "command": "c", "range": "1-2"}]}$$) AS jk \gset

/* ---------------------------------------------------------------- traps */
SET LOCAL ROLE t46_evil;
SET LOCAL search_path = pg_catalog;
GRANT USAGE ON SCHEMA evil TO PUBLIC;
CREATE SEQUENCE evil.fired;
GRANT USAGE, SELECT ON SEQUENCE evil.fired TO PUBLIC;
DO $do$
DECLARE
	sig text;
	ret text;
	body text;
	o record;
	n int := 0;
	ty text;
BEGIN
	/* functions: name(args) and what they return */
	FOR sig, ret IN VALUES
		('sha256(bytea)', 'bytea'), ('convert_to(text, name)', 'bytea'), ('convert_from(bytea, name)', 'text'),
		('length(text)', 'int'), ('length(bytea)', 'int'), ('octet_length(text)', 'int'),
		('char_length(text)', 'int'), ('btrim(text)', 'text'), ('btrim(text, text)', 'text'),
		('format(text)', 'text'), ('format(text, text)', 'text'), ('format(text, text, text)', 'text'),
		('format(text, int)', 'text'), ('format(text, bigint)', 'text'), ('format(text, text, int)', 'text'),
		('format(text, text, bigint)', 'text'), ('format(text, numeric)', 'text'),
		('jsonb_typeof(jsonb)', 'text'), ('jsonb_array_length(jsonb)', 'int'),
		('jsonb_object_keys(jsonb)', 'SETOF text'), ('jsonb_array_elements(jsonb)', 'SETOF jsonb'),
		('jsonb_array_elements_text(jsonb)', 'SETOF text'),
		('jsonb_each(jsonb, OUT key text, OUT value jsonb)', 'SETOF record'),
		('jsonb_each_text(jsonb, OUT key text, OUT value text)', 'SETOF record'),
		('jsonb_build_object(text, text)', 'jsonb'), ('jsonb_build_object(text, bigint)', 'jsonb'),
		('json_build_object(text, bigint, text, text)', 'json'), ('jsonb_strip_nulls(jsonb)', 'jsonb'),
		('to_jsonb(anyelement)', 'jsonb'), ('to_json(anyelement)', 'json'),
		('array_position(anyarray, anyelement)', 'int'), ('array_length(anyarray, int)', 'int'),
		('cardinality(anyarray)', 'int'), ('array_to_string(anyarray, text)', 'text'),
		('string_to_array(text, text)', 'text[]'), ('unnest(anyarray)', 'SETOF anyelement'),
		('pg_notify(text, text)', 'void'), ('current_setting(text)', 'text'),
		('current_setting(text, bool)', 'text'), ('set_config(text, text, bool)', 'text'),
		('clock_timestamp()', 'timestamptz'), ('now()', 'timestamptz'),
		('statement_timestamp()', 'timestamptz'), ('transaction_timestamp()', 'timestamptz'),
		('generate_series(int, int, int)', 'SETOF int'), ('generate_series(int, int)', 'SETOF int'),
		('generate_series(bigint, bigint)', 'SETOF bigint'),
		('regexp_match(text, text)', 'text[]'), ('regexp_matches(text, text)', 'SETOF text[]'),
		('regexp_replace(text, text, text)', 'text'), ('substr(text, int, int)', 'text'),
		('substr(text, int)', 'text'), ('lower(text)', 'text'), ('upper(text)', 'text'),
		('replace(text, text, text)', 'text'), ('split_part(text, text, int)', 'text'),
		('left(text, int)', 'text'), ('right(text, int)', 'text'), ('repeat(text, int)', 'text'),
		('quote_literal(text)', 'text'), ('quote_ident(text)', 'text'), ('md5(text)', 'text'),
		('encode(bytea, text)', 'text'), ('decode(text, text)', 'bytea'), ('int8send(bigint)', 'bytea'),
		('random()', 'float8'), ('gen_random_uuid()', 'uuid'), ('pg_backend_pid()', 'int'),
		('make_interval(secs numeric)', 'interval'),
		('pg_advisory_xact_lock(int, int)', 'void'), ('pg_advisory_xact_lock(bigint)', 'void'),
		('pg_try_advisory_xact_lock(int, int)', 'bool'), ('pg_advisory_lock(int, int)', 'void'),
		('abs(int)', 'int'), ('abs(numeric)', 'numeric'), ('round(numeric, int)', 'numeric'),
		('round(numeric)', 'numeric'), ('ceil(numeric)', 'numeric'), ('floor(numeric)', 'numeric'),
		('trunc(numeric, int)', 'numeric'), ('extract(text, timestamptz)', 'numeric'),
		('date_part(text, timestamptz)', 'float8'), ('has_function_privilege(text, text)', 'bool'),
		('pg_has_role(oid, text)', 'bool'), ('pg_has_role(name, text)', 'bool')
	LOOP
		n := n + 1;
		EXECUTE format($f$CREATE FUNCTION evil.%s RETURNS %s LANGUAGE plpgsql AS $b$
BEGIN
	PERFORM pg_catalog.nextval('evil.fired'::pg_catalog.regclass);
	RAISE EXCEPTION USING ERRCODE = 'EV001', MESSAGE = %L;
END
$b$$f$, sig, ret, 'trap evil.' || sig || ' ran');
	END LOOP;

	/* aggregates, over a trap transition function */
	CREATE FUNCTION evil._agg(state bigint) RETURNS bigint LANGUAGE plpgsql AS $b$
	BEGIN PERFORM pg_catalog.nextval('evil.fired'::pg_catalog.regclass);
		  RAISE EXCEPTION USING ERRCODE = 'EV001', MESSAGE = 'trap aggregate ran'; END $b$;
	CREATE FUNCTION evil._agg(state bigint, v anyelement) RETURNS bigint LANGUAGE plpgsql AS $b$
	BEGIN PERFORM pg_catalog.nextval('evil.fired'::pg_catalog.regclass);
		  RAISE EXCEPTION USING ERRCODE = 'EV001', MESSAGE = 'trap aggregate ran'; END $b$;
	CREATE FUNCTION evil._agg(state bigint, v text, d text) RETURNS bigint LANGUAGE plpgsql AS $b$
	BEGIN PERFORM pg_catalog.nextval('evil.fired'::pg_catalog.regclass);
		  RAISE EXCEPTION USING ERRCODE = 'EV001', MESSAGE = 'trap aggregate ran'; END $b$;
	CREATE AGGREGATE evil.count(*) (SFUNC = evil._agg, STYPE = bigint);
	FOREACH ty IN ARRAY ARRAY['int', 'bigint', 'numeric', 'text', 'bool', 'timestamptz', 'anyelement'] LOOP
		EXECUTE format('CREATE AGGREGATE evil.count(%1$s) (SFUNC = evil._agg, STYPE = bigint)', ty);
	END LOOP;
	FOREACH ty IN ARRAY ARRAY['int', 'bigint', 'numeric'] LOOP
		EXECUTE format('CREATE AGGREGATE evil.sum(%1$s) (SFUNC = evil._agg, STYPE = bigint)', ty);
		EXECUTE format('CREATE AGGREGATE evil.max(%1$s) (SFUNC = evil._agg, STYPE = bigint)', ty);
		EXECUTE format('CREATE AGGREGATE evil.min(%1$s) (SFUNC = evil._agg, STYPE = bigint)', ty);
	END LOOP;
	CREATE AGGREGATE evil.bool_or(bool) (SFUNC = evil._agg, STYPE = bigint);
	CREATE AGGREGATE evil.bool_and(bool) (SFUNC = evil._agg, STYPE = bigint);
	CREATE AGGREGATE evil.array_agg(bigint) (SFUNC = evil._agg, STYPE = bigint);
	CREATE AGGREGATE evil.array_agg(int) (SFUNC = evil._agg, STYPE = bigint);
	CREATE AGGREGATE evil.array_agg(text) (SFUNC = evil._agg, STYPE = bigint);
	CREATE AGGREGATE evil.string_agg(text, text) (SFUNC = evil._agg, STYPE = bigint);
	CREATE AGGREGATE evil.jsonb_agg(jsonb) (SFUNC = evil._agg, STYPE = bigint);
	CREATE AGGREGATE evil.jsonb_object_agg(text, text) (SFUNC = evil._agg, STYPE = bigint);

	/*
	 * operators: for each pair pg_catalog can evaluate (directly or through
	 * an implicit cast), one in evil with exactly those operand types and
	 * the result pg_catalog gives
	 */
	FOR o IN
		WITH cmp(op) AS (VALUES ('='), ('<>'), ('<'), ('>'), ('<='), ('>=')),
		ar(op) AS (VALUES ('+'), ('-'), ('*'), ('/'), ('%')),
		same(t) AS (VALUES ('text'), ('int'), ('bigint'), ('smallint'), ('numeric'), ('float8'),
						   ('timestamptz'), ('interval'), ('bytea'), ('bool'), ('jsonb'), ('name'),
						   ('oid'), ('text[]'), ('int[]'), ('bigint[]'), ('"char"')),
		num(l, r) AS (VALUES ('int', 'int'), ('bigint', 'bigint'), ('numeric', 'numeric'),
							 ('float8', 'float8'), ('bigint', 'int'), ('int', 'bigint'),
							 ('int', 'numeric'), ('numeric', 'int'), ('bigint', 'numeric'),
							 ('numeric', 'bigint'), ('int', 'float8'), ('float8', 'int'),
							 ('numeric', 'float8'), ('float8', 'numeric'), ('smallint', 'int'),
							 ('int', 'smallint')),
		pairs(op, l, r) AS (
			SELECT op, t, t FROM cmp, same
			UNION ALL SELECT op, l, r FROM cmp, num WHERE l <> r
			UNION ALL SELECT op, 'name', 'text' FROM cmp
			UNION ALL SELECT op, 'text', 'name' FROM cmp
			UNION ALL SELECT op, l, r FROM ar, num
			UNION ALL VALUES ('+', 'timestamptz', 'interval'), ('-', 'timestamptz', 'interval'),
				('-', 'timestamptz', 'timestamptz'), ('+', 'interval', 'interval'),
				('-', 'interval', 'interval'), ('*', 'interval', 'float8'), ('/', 'interval', 'float8'),
				('*', 'interval', 'int'), ('/', 'interval', 'int'), ('*', 'interval', 'numeric'),
				('/', 'interval', 'numeric'), ('*', 'float8', 'interval'), ('*', 'int', 'interval'),
				('||', 'text', 'text'), ('||', 'text', 'int'), ('||', 'text', 'bigint'),
				('||', 'text', 'numeric'), ('||', 'int', 'text'), ('||', 'bigint', 'text'),
				('||', 'text[]', 'text'), ('||', 'text[]', 'text[]'), ('||', 'bigint[]', 'bigint'),
				('||', 'int[]', 'int'), ('||', 'jsonb', 'jsonb'), ('||', 'bytea', 'bytea'),
				('~', 'text', 'text'), ('!~', 'text', 'text'), ('~*', 'text', 'text'),
				('~~', 'text', 'text'), ('!~~', 'text', 'text'), ('~~*', 'text', 'text'),
				('->', 'jsonb', 'text'), ('->>', 'jsonb', 'text'), ('->', 'jsonb', 'int'),
				('->>', 'jsonb', 'int'), ('#>', 'jsonb', 'text[]'), ('#>>', 'jsonb', 'text[]'),
				('?', 'jsonb', 'text'), ('?|', 'jsonb', 'text[]'), ('?&', 'jsonb', 'text[]'),
				('@>', 'jsonb', 'jsonb'), ('<@', 'jsonb', 'jsonb'), ('-', 'jsonb', 'text'),
				('@>', 'text[]', 'text[]'), ('<@', 'text[]', 'text[]'), ('&&', 'text[]', 'text[]'),
				('@>', 'int[]', 'int[]'), ('<@', 'int[]', 'int[]'), ('&&', 'int[]', 'int[]'),
				('@>', 'bigint[]', 'bigint[]'), ('&&', 'bigint[]', 'bigint[]'),
				('-', NULL, 'int'), ('-', NULL, 'bigint'), ('-', NULL, 'numeric'), ('-', NULL, 'float8'))
		SELECT * FROM pairs
	LOOP
		BEGIN
			IF o.l IS NULL THEN
				EXECUTE format('SELECT pg_catalog.pg_typeof(%s NULL::%s)::text', o.op, o.r) INTO ret;
			ELSE
				EXECUTE format('SELECT pg_catalog.pg_typeof(NULL::%s %s NULL::%s)::text', o.l, o.op, o.r) INTO ret;
			END IF;
		EXCEPTION WHEN OTHERS THEN
			CONTINUE;		/* pg_catalog has no such operator: nothing to shadow */
		END;
		n := n + 1;
		EXECUTE format($f$CREATE FUNCTION evil._op%s(%s) RETURNS %s LANGUAGE plpgsql AS $b$
BEGIN
	PERFORM pg_catalog.nextval('evil.fired'::pg_catalog.regclass);
	RAISE EXCEPTION USING ERRCODE = 'EV001', MESSAGE = %L;
END
$b$$f$, n, concat_ws(', ', o.l, o.r), ret,
			format('trap operator evil.%s(%s) ran', o.op, concat_ws(', ', o.l, o.r)));
		EXECUTE format('CREATE OPERATOR evil.%s (%s RIGHTARG = %s, FUNCTION = evil._op%s)', o.op,
					   CASE WHEN o.l IS NULL THEN '' ELSE format('LEFTARG = %s,', o.l) END, o.r, n);
	END LOOP;
END
$do$;
RESET ROLE;
RESET search_path;

/*
 * Run code as role who with search_path = 'evil, pg_catalog'; 'ok', or
 * the SQLSTATE and message it failed with.  The function's own SET clause
 * puts the path back when it returns; the role it puts back itself (a
 * SET LOCAL of a setting the function has no SET clause for outlives it).
 */
CREATE FUNCTION t46.call(who text, code text) RETURNS text
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	result text := 'ok';
	prior text := pg_catalog.current_setting('role');
BEGIN
	PERFORM pg_catalog.set_config('role', who, true);
	PERFORM pg_catalog.set_config('search_path', 'evil, pg_catalog', true);
	BEGIN
		EXECUTE code;
	EXCEPTION WHEN OTHERS THEN
		result := pg_catalog.concat(SQLSTATE, ': ', SQLERRM);
	END;
	PERFORM pg_catalog.set_config('role', prior, true);
	RETURN result;
END
$$;

/* ---------------------------------------------------------------- calls */
CREATE TEMP TABLE t46_calls (ord serial, fn text, who text, code text, want text) ON COMMIT DROP;
INSERT INTO t46_calls (fn, who, code, want) VALUES
	/* administration, by a member of frameq_admin */
	('create_allocation', 't46_admin', $$SELECT frameq.create_allocation('t46.pool2', 't46tag')$$, 'ok'),
	('create_show', 't46_admin', $$SELECT frameq.create_show('t46show2')$$, 'ok'),
	('set_subscription', 't46_admin', $$SELECT frameq.set_subscription('t46show2', 't46.pool2', 10.5, 20)$$, 'ok'),
	('create_folder', 't46_admin', $$SELECT frameq.create_folder('t46show2', 't46f2', 5, 1)$$, 'ok'),
	('set_folder_limits', 't46_admin', format($$SELECT frameq.set_folder_limits(%s, 6.25, 2)$$, :folder), 'ok'),
	('create_limit', 't46_admin', $$SELECT frameq.create_limit('t46.lic2', 5)$$, 'ok'),
	('set_limit', 't46_admin', $$SELECT frameq.set_limit('t46.lic2', 6)$$, 'ok'),
	('register_host', 't46_admin',
	 $$SELECT frameq.register_host('t46-h9', 't46.pool2', 4.5, 8589934592, 1, 1073741824, ARRAY['a', 'b'])$$, 'ok'),
	('grant_show', 't46_admin', $$SELECT frameq.grant_show('t46show', 't46_submitter')$$, 'ok'),
	('grant_show', 't46_admin', $$SELECT frameq.grant_show('t46show2', 't46_submitter')$$, 'ok'),
	('revoke_show', 't46_admin', $$SELECT frameq.revoke_show('t46show2', 't46_submitter')$$, 'ok'),
	('rotate_host_token', 't46_admin', $$SELECT frameq.rotate_host_token('t46-h4')$$, 'ok'),
	('retire_host', 't46_admin', $$SELECT frameq.retire_host('t46-h9')$$, 'ok'),
	('submit', 't46_admin', $${"show": "t46show2", "folder": "t46f2", "name": "t46-b", "priority": 3,
		"max_retries": 2, "auto_eat": false, "max_cores": 4, "max_gpus": 0, "paused": false,
		"layers": [{"name": "one", "command": "r #IFRAME# #JOB# #LAYER#", "range": "1-5,7,9-20x3",
					"cores": 1.5, "cores_max": 3, "threadable": true, "memory": "2GB", "gpus": 0,
					"gpu_memory": "0", "tags": ["x", "y"], "limits": ["t46.lic2"], "dispatch_order": 1,
					"env": {"K": "v", "L": "w"}}]}$$, 'ok'),
	('set_job', 't46_admin', format($$SELECT frameq.set_job(%s, 5, 4.5, 1, false, false)$$, :jk), 'ok'),
	/* the agent's calls, by a member of frameq_agent */
	('attach', 't46_agent', format($$SELECT * FROM frameq.attach('t46-h3', %L, 'boot-2')$$, :'tok3'), 'ok'),
	('reserve', 't46_agent', format($$SELECT * FROM frameq.reserve('t46-h1', %L, %s, 1)$$, :'tok1', :e1), 'ok'),
	('heartbeat', 't46_agent',
	 format($$SELECT * FROM frameq.heartbeat('t46-h1', %L, %s, '{%s,%s,%s}')$$, :'tok1', :e1, :p1, :p2, :p3), 'ok'),
	('complete', 't46_agent', format($$SELECT frameq.complete('t46-h1', %L, %s, %s, 0, 0, 1048576)$$,
									 :'tok1', :e1, :p1), 'ok'),
	('complete', 't46_agent', format($$SELECT frameq.complete('t46-h2', %L, %s, %s, 1, 0)$$, :'tok2', :e2, :p4), 'ok'),
	('complete_many', 't46_agent', format($$SELECT frameq.complete_many('t46-h1', %L, %s, ARRAY[%s]::bigint[], '{0}',
																		'{0}', '{1048576}', '{false}')$$,
										  :'tok1', :e1, :p3), 'ok'),
	('owns', 't46_agent', format($$SELECT frameq.owns(%s)$$, :p2), 'ok'),
	('report_log', 't46_agent', format($$SELECT frameq.report_log('t46-h1', %L, %s, %s, 'm:/x')$$, :'tok1', :e1, :p2), 'ok'),
	/* a submitter on a show granted to it */
	('submit', 't46_submitter', $${"show": "t46show", "name": "t46-c",
		"layers": [{"name": "l", "command": "c #IFRAME#", "range": "1-3", "env": {"A": "b"}, "tags": ["t"]}]}$$, 'ok'),
	('set_job', 't46_submitter', format($$SELECT frameq.set_job(%s, 7)$$, :ja), 'ok'),
	('set_job', 't46_submitter', format($$SELECT frameq.set_job(%s, '{"priority": 8, "timeout": "1h", "requeue_exit_codes": [3]}'::jsonb)$$, :ja), 'ok'),
	('set_layer', 't46_submitter', format($$SELECT frameq.set_layer(%s, 'l', '{"memory": "2GB", "cores": 1.5, "tags": ["t"], "limits": ["t46.lic"], "env": {"B": "c"}, "progress_pattern": "([0-9]+)%%", "paused": false}')$$, :ja), 'ok'),
	('add_frames', 't46_submitter', format($$SELECT frameq.add_frames(%s, 'l', '11-13,20')$$, :ja), 'ok'),
	('depend_job', 't46_submitter', format($$SELECT frameq.depend_job(%s, %s)$$, :ja, :jk), 'ok'),
	('drop_depends', 't46_submitter', format($$SELECT frameq.drop_depends(%s)$$, :ja), 'ok'),
	('kill_frame', 't46_submitter', format($$SELECT frameq.kill_frame(%s, 'shadow test')$$, :f2), 'ok'),
	('retry_frame', 't46_submitter', format($$SELECT frameq.retry_frame(%s)$$, :f1), 'ok'),
	('retry_frame', 't46_submitter', format($$SELECT frameq.retry_frame(%s)$$, :f3), 'ok'),
	('eat_frame', 't46_submitter', format($$SELECT frameq.eat_frame(%s)$$, :f9), 'ok'),
	('kill_frame', 't46_submitter', format($$SELECT frameq.kill_frame(%s, 'shadow test')$$, :f10), 'ok'),
	('kill_job', 't46_submitter', format($$SELECT frameq.kill_job(%s, 'shadow test')$$, :jk), 'ok'),
	/* h2's failure of frame 4 blocked it for t46-a (host_failure_limit 1) */
	('unblock_host', 't46_submitter', format($$SELECT frameq.unblock_host(%s, 't46-h2')$$, :ja), 'ok'),
	('retry_frames', 't46_submitter', format($$SELECT frameq.retry_frames(%s, NULL, '{dead,eaten,running,waiting}')$$, :ja), 'ok'),
	('eat_frames', 't46_submitter', format($$SELECT frameq.eat_frames(%s, NULL, '{dead,depend}')$$, :ja), 'ok'),
	('kill_frames', 't46_submitter', format($$SELECT frameq.kill_frames(%s, NULL, 'shadow test')$$, :ja), 'ok'),
	('comment_job', 't46_submitter', format($$SELECT frameq.comment_job(%s, E'looked at\tit')$$, :ja), 'ok'),
	/* operator actions on hosts */
	('set_host_state', 't46_admin', $$SELECT frameq.set_host_state('t46-h2', 'repair')$$, 'ok'),
	('set_host_state', 't46_admin', $$SELECT frameq.set_host_state('t46-h2', 'up')$$, 'ok'),
	('set_host_state', 't46_admin', $$SELECT frameq.set_host_state('t46-h1', 'down')$$, 'ok'),
	('confirm_host_dead', 't46_admin', $$SELECT frameq.confirm_host_dead('t46-h1')$$, 'ok'),
	/* reading, by a member of frameq_reader */
	('owns', 't46_reader', format($$SELECT frameq.owns(%s)$$, :p3), 'ok'),
	('check', 't46_reader', $$SELECT * FROM frameq.check()$$, 'ok'),
	('ledger', 't46_reader', $$SELECT * FROM frameq.ledger()$$, 'ok'),
	('worker_status', 't46_reader', $$SELECT * FROM frameq.worker_status()$$, 'ok'),
	('lease_period', 't46_reader', $$SELECT frameq.lease_period()$$, 'ok'),
	('frames', 't46_reader', $$SELECT * FROM frameq.frames$$, 'ok'),
	('job_progress', 't46_reader', $$SELECT * FROM frameq.job_progress$$, 'ok'),
	('usage', 't46_reader', $$SELECT * FROM frameq.usage$$, 'ok'),
	('hosts', 't46_reader', $$SELECT * FROM frameq.hosts$$, 'ok'),
	('runs', 't46_reader', $$SELECT * FROM frameq.runs$$, 'ok'),
	('_ledger_parked', 't46_reader', $$SELECT * FROM frameq.dispatch_parked$$, 'ok'),
	('depends', 't46_reader', $$SELECT * FROM frameq.depends$$, 'ok'),
	('job_host_blocks', 't46_reader', $$SELECT * FROM frameq.job_host_blocks$$, 'ok'),
	('actions', 't46_reader', $$SELECT * FROM frameq.actions$$, 'ok'),
	('_frame_spec', 't46_reader', $$SELECT frame_spec FROM frameq.frames$$, 'ok'),
	('_frame_spec', 't46_reader', $$SELECT frameq._frame_spec(7, '{7,9,11}'), frameq._frame_spec(7, '{7,3}')$$, 'ok'),
	('metrics', 't46_reader', $$SELECT * FROM frameq.metrics$$, 'ok'),
	/* history (0.6.0) */
	('prune', 't46_admin', $$SELECT frameq.prune('1 day')$$, 'ok'),
	('check', 't46_admin', $$SELECT * FROM frameq.check()$$, 'ok');
UPDATE t46_calls SET code = format('SELECT frameq.submit(%L::jsonb)', code) WHERE fn = 'submit';

/* the role that planted the traps has no grant: each call is refused before its body runs */
INSERT INTO t46_calls (fn, who, code, want)
SELECT fn, 't46_evil', code, '42501: %' FROM t46_calls WHERE ord IN (SELECT min(ord) FROM t46_calls GROUP BY fn)
 ORDER BY ord;

/* every function one of frameq's roles may execute */
CREATE TEMP TABLE t46_callable ON COMMIT DROP AS
SELECT DISTINCT p.proname::text AS fn FROM pg_proc p, unnest(ARRAY['frameq_admin', 'frameq_agent',
		'frameq_submit', 'frameq_reader']) r
 WHERE p.pronamespace = 'frameq'::regnamespace
   AND (p.prosecdef OR has_function_privilege(r, p.oid, 'EXECUTE'));

SELECT plan(5 + (SELECT count(*)::int FROM t46_calls));

SELECT is_empty($$SELECT fn FROM t46_pins ORDER BY fn$$,
	'every function of schema frameq pins search_path to pg_catalog, pg_temp');
SELECT is((SELECT count(*)::int FROM pg_operator WHERE oprnamespace = 'evil'::regnamespace) > 150
		  AND (SELECT count(*)::int FROM pg_proc WHERE pronamespace = 'evil'::regnamespace) > 250, true,
	'the traps are in place (more than 150 operators and 250 functions in schema evil)');
SELECT is(t46.call('t46_evil', $$SELECT 1::bigint + 1, 'a'::text || 1, pg_catalog.length('a')$$)
		  LIKE 'EV001: trap operator evil.+(bigint, int) ran', true,
	'a trap fires for a caller that resolves through evil');
SELECT is_empty($$SELECT fn FROM t46_callable EXCEPT SELECT fn FROM t46_calls WHERE want = 'ok'$$,
	'every function a frameq role may execute has a call below');

CREATE FUNCTION t46.run_calls() RETURNS SETOF text LANGUAGE plpgsql AS $$
DECLARE
	c record;
	got text;
	d text;
BEGIN
	FOR c IN SELECT * FROM t46_calls ORDER BY ord LOOP
		got := t46.call(c.who, c.code);
		d := format('%s as %s, with schema evil before pg_catalog: %s', c.fn, c.who,
					CASE WHEN c.want = 'ok' THEN 'no trap, no error' ELSE 'refused with 42501' END);
		IF got LIKE c.want THEN
			RETURN NEXT ok(true, d);
		ELSE
			RETURN NEXT ok(false, d) || E'\n' || diag(format(E'    call: %s\n    got: %s', c.code, got));
		END IF;
	END LOOP;
END
$$;
/* the probe above bumped evil.fired once; nothing may have since */
SELECT last_value AS fired_before FROM evil.fired \gset
SELECT * FROM t46.run_calls();

SELECT is((SELECT last_value FROM evil.fired), :fired_before::bigint, 'no trap ever ran in a frameq body');

SELECT * FROM finish();
ROLLBACK;
