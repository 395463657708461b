/*
 * Issue 15, heartbeat's report: what is stored (last_line cut to 200
 * characters, progress, last_output_at = now - idle; a value not reported
 * leaves the stored one; the last of two entries for a proc wins), and
 * what is ignored without an error, the lease renewed all the same:
 * entries for procs not live on the host under its epoch, malformed
 * entries, a report that is not an array or past its bounds (10,000
 * entries, 4 MB).  The four-argument call of older agents still works,
 * and only frameq_agent may call heartbeat.
 */
BEGIN;
\ir include/helpers.psql

SELECT plan(42);

SELECT * FROM fqtest.farm('t57', cores => '{8,8}') \gset
SELECT frameq.submit($${"show": "t57show", "name": "j", "timeout_no_output": 60,
	"layers": [{"name": "l", "command": "c", "range": "1-3"}]}$$) AS job \gset
SELECT proc AS p1 FROM frameq.reserve('t57-h1', :'tok1', :epoch1, 1) \gset
SELECT proc AS p2 FROM frameq.reserve('t57-h1', :'tok1', :epoch1, 1) \gset
SELECT proc AS q1 FROM frameq.reserve('t57-h2', :'tok2', :epoch2, 1) \gset

/* the report as stored, and the lease's last renewal */
CREATE FUNCTION pg_temp.stored(p bigint) RETURNS text LANGUAGE sql AS $$
	SELECT format('%s | %s | %s | %s', state, last_line, progress,
				  round(date_part('epoch', clock_timestamp() - last_output_at)))
	  FROM frameq.proc WHERE id = p
$$;
CREATE FUNCTION pg_temp.renewed() RETURNS timestamptz LANGUAGE sql AS $$
	SELECT last_renewal_at FROM frameq.host WHERE name = 't57-h1'
$$;
CREATE TEMP TABLE tok AS SELECT :'tok1'::text AS token;
CREATE TEMP TABLE live AS SELECT unnest(ARRAY[:p1, :p2]::bigint[]) AS p;
/* a heartbeat of h1 listing p1 and p2 with this report; its kill list */
CREATE FUNCTION pg_temp.hb(report jsonb) RETURNS bigint[] LANGUAGE sql AS $$
	SELECT kill FROM frameq.heartbeat('t57-h1', (SELECT token FROM pg_temp.tok),
									  (SELECT epoch FROM frameq.host WHERE name = 't57-h1'),
									  (SELECT array_agg(p) FROM pg_temp.live), report)
$$;

-- --------------------------------------------------------------- stored

SELECT is(pg_temp.hb(jsonb_build_array(
			jsonb_build_object('proc', :p1, 'idle', 12, 'last_line', repeat('x', 500), 'progress', 12.5),
			jsonb_build_object('proc', :p2, 'idle', 0, 'last_line', ''))), '{}'::bigint[],
		  'a report within the limits kills nothing');
SELECT is(pg_temp.stored(:p1), 'running | ' || repeat('x', 200) || ' | 12.5 | 12',
		  'last_line is cut to 200 characters; progress and the last output are stored');
SELECT is(pg_temp.stored(:p2), 'running |  |  | 0', 'an empty last line and no progress');
SELECT is(pg_temp.hb(jsonb_build_array(jsonb_build_object('proc', :p1))), '{}'::bigint[],
		  'an entry with only its proc');
SELECT is(pg_temp.stored(:p1), 'running | ' || repeat('x', 200) || ' | 12.5 | 12',
		  '... leaves the stored values as they were');
SELECT is(pg_temp.hb(jsonb_build_array(
			jsonb_build_object('proc', :p1, 'last_line', 'first', 'idle', 5, 'progress', null),
			jsonb_build_object('proc', :p1, 'last_line', 'second', 'idle', null))), '{}'::bigint[],
		  'two entries for one proc');
SELECT is(pg_temp.stored(:p1), 'running | second | 12.5 | 12',
		  '... the last one wins, and null values leave the stored ones');

-- --------------------------------------------------------------- ignored

SELECT pg_temp.renewed() AS r0 \gset
SELECT is(pg_temp.hb(jsonb_build_array(
			jsonb_build_object('proc', :q1, 'idle', 1000, 'last_line', 'not mine'),
			jsonb_build_object('proc', 1, 'idle', 1000),
			jsonb_build_object('proc', :p2, 'idle', 1000) || '{"extra": 1}')),
		  '{}'::bigint[],
		  'entries for another host''s proc, an unknown proc, or with an unknown field');
SELECT is(pg_temp.stored(:q1), 'running |  |  | ', '... leave the other host''s proc alone');
SELECT is(pg_temp.stored(:p2), 'running |  |  | 0', '... and the malformed entry''s proc');
SELECT ok(pg_temp.renewed() > :'r0'::timestamptz, '... and the lease is renewed');

/* each malformed entry: nothing stored, nothing killed, the lease renewed */
SELECT is(pg_temp.hb(jsonb_build_array(e)), '{}'::bigint[], format('malformed entry %s is ignored', e))
  FROM unnest(ARRAY[
	'5', '"x"', 'null', '[1]',
	format('{"proc": "%s", "idle": 1000}', :p1),
	format('{"proc": %s.5, "idle": 1000}', :p1),
	'{"proc": -3, "idle": 1000}',
	'{"proc": 1e40, "idle": 1000}',
	format('{"proc": %s, "idle": -1}', :p1),
	format('{"proc": %s, "idle": "1000"}', :p1),
	format('{"proc": %s, "idle": 1e10}', :p1),
	format('{"proc": %s, "idle": 1000, "progress": 101}', :p1),
	format('{"proc": %s, "idle": 1000, "progress": -1}', :p1),
	format('{"proc": %s, "idle": 1000, "last_line": 7}', :p1)]::jsonb[]) e;
SELECT is(pg_temp.stored(:p1), 'running | second | 12.5 | 12', 'none of them changed the proc');

/* reports that are not an array, or past their bounds, are ignored whole */
SELECT is(pg_temp.hb(r), '{}'::bigint[], format('a report of %s is ignored', d))
  FROM (VALUES
	(jsonb_build_object('proc', :p1, 'idle', 1000), 'an object'),
	('"stalled"'::jsonb, 'a string'),
	((SELECT jsonb_agg(jsonb_build_object('proc', :p1, 'idle', 1000)) FROM generate_series(1, 10001)),
	 '10,001 entries'),
	(jsonb_build_array(jsonb_build_object('proc', :p1, 'idle', 1000, 'last_line', repeat('z', 4200000))),
	 'over 4 MB')) t(r, d);
SELECT is(pg_temp.stored(:p1), 'running | second | 12.5 | 12', 'and the proc is unchanged');
SELECT ok(pg_temp.renewed() > :'r0'::timestamptz, 'every one renewed the lease');
SELECT is(pg_temp.hb((SELECT jsonb_agg(jsonb_build_object('proc', :p1, 'idle', 30)) FROM generate_series(1, 10000))),
		  '{}'::bigint[], 'a report of 10,000 entries is read');
SELECT is(pg_temp.stored(:p1), 'running | second | 12.5 | 30', '... and stored');

/* a report for a kill order of an earlier epoch (same boot): stored nowhere */
SELECT epoch AS epoch1b FROM frameq.attach('t57-h1', :'tok1', 'boot-1') \gset
SELECT ok(:p1 = ANY (kill), 'after a re-attach the old procs are kill orders')
  FROM frameq.heartbeat('t57-h1', :'tok1', :epoch1b, ARRAY[:p1, :p2]::bigint[],
						jsonb_build_array(jsonb_build_object('proc', :p1, 'idle', 1, 'last_line', 'old epoch')));
SELECT is(pg_temp.stored(:p1), 'killing | second | 12.5 | 30', 'a proc of an earlier epoch is not live here: ignored');

-- --------------------------------------------------------------- older agents, privileges

SELECT is(cardinality(kill), 2, 'the four-argument heartbeat of older agents still works')
  FROM frameq.heartbeat('t57-h1', :'tok1', :epoch1b, ARRAY[:p1, :p2]::bigint[]);
SELECT is(cardinality(kill), 2, 'and so does a NULL report')
  FROM frameq.heartbeat('t57-h1', :'tok1', :epoch1b, ARRAY[:p1, :p2]::bigint[], NULL);
SELECT ok(has_function_privilege('frameq_agent', 'frameq.heartbeat(text, text, bigint, bigint[], jsonb)', 'EXECUTE')
		  AND NOT has_function_privilege('frameq_submit', 'frameq.heartbeat(text, text, bigint, bigint[], jsonb)', 'EXECUTE')
		  AND NOT has_function_privilege('frameq_reader', 'frameq.heartbeat(text, text, bigint, bigint[], jsonb)', 'EXECUTE'),
		  'heartbeat is executable by frameq_agent only');
SELECT is((SELECT count(*)::int FROM pg_proc WHERE proname = 'heartbeat'
			AND pronamespace = 'frameq'::regnamespace), 1, 'there is one heartbeat');
SELECT is((SELECT array_agg(attname::text ORDER BY attnum) FROM pg_attribute
			 WHERE attrelid = 'frameq.frames'::regclass AND attnum BETWEEN 11 AND 14),
		  '{frame_spec,last_line,progress,last_output_at}'::text[],
		  'the frames view gains last_line, progress and last_output_at after frame_spec');
SELECT is_empty('SELECT * FROM frameq.check()', 'check() is clean at the end');

SELECT * FROM finish();
ROLLBACK;
