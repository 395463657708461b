/*
 * Issue 15, the fields: frameq._duration (the one reader of durations),
 * and submit's job and layer fields timeout, timeout_no_output and
 * progress_pattern: their defaults, how a layer follows its job, what a
 * booking carries (the deadline on the proc, the pattern in the booking
 * row), and every refusal, with its SQLSTATE, the field named and nothing
 * changed.
 */
BEGIN;
\ir include/helpers.psql

SELECT plan(64);

-- ------------------------------------------------------ _duration

SELECT results_eq(
	$$SELECT frameq._duration(v, 'f') FROM (VALUES
		('1'::jsonb), ('90'), ('"90s"'), ('"2h"'), ('"1h30m"'), ('"1d"'), ('"1d2h3m4s"'),
		('"0h1s"'), ('"45m"'), ('31536000'), ('"365d"'), ('"8760h"')) t(v)$$,
	$$VALUES (1), (90), (90), (7200), (5400), (86400), (93784), (1), (2700), (31536000),
			 (31536000), (31536000)$$,
	'durations: whole seconds, or d, h, m, s in that order, up to 365 days');
SELECT is(frameq._duration(NULL, 'f'), NULL, 'no value: NULL');
SELECT is(frameq._duration('null', 'f'), NULL, 'a JSON null: NULL (the field is absent)');

-- malformed: 22023, naming the field
SELECT fqtest.throws_like(format($$SELECT frameq._duration(%L, 'spec.timeout')$$, v),
						  '22023', 'spec.timeout must be a duration above 0%',
						  format('duration %s is refused with 22023 naming the field', v))
  FROM unnest(ARRAY['0', '-5', '1.5', '"0s"', '"0h0m"', '""', '"90"', '"1m30h"', '"2H"',
					'"1h 30m"', '"h"', '"-5s"', '"1.5h"', 'true', '[]', '{}']) v;
-- past the bound: 54000
SELECT fqtest.throws_like(format($$SELECT frameq._duration(%L, 'spec.timeout')$$, v),
						  '54000', 'spec.timeout is too large%',
						  format('duration %s is refused with 54000', v))
  FROM unnest(ARRAY['31536001', '"366d"', '"8761h"', '"99999999999999999999d"', '1e30',
					to_jsonb(repeat('1', 65) || 's')::text]) v;

-- ------------------------------------------------------ submit: defaults

SELECT * FROM fqtest.farm('t55', cores => '{8}') \gset

SELECT frameq.submit($${"show": "t55show", "name": "plain",
	"layers": [{"name": "l", "command": "c", "range": "1"}]}$$) AS plain \gset
SELECT results_eq(format($$SELECT timeout, timeout_no_output FROM frameq.job WHERE id = %s$$, :plain),
				  $$VALUES (NULL::int, NULL::int)$$, 'a job without timeouts has none');
SELECT results_eq(format($$SELECT timeout, timeout_no_output, progress_pattern
							 FROM frameq.layer WHERE job = %s$$, :plain),
				  $$VALUES (NULL::int, NULL::int, NULL::text)$$,
				  'a layer without timeouts follows its job; it has no progress pattern');
CREATE TEMP TABLE b ON COMMIT DROP AS SELECT * FROM frameq.reserve('t55-h1', :'tok1', :epoch1, 1);
SELECT is((SELECT progress_pattern FROM b), NULL, 'its booking carries no progress pattern');
SELECT is((SELECT timeout_at FROM frameq.proc p JOIN b ON b.proc = p.id), NULL,
		  'its proc has no deadline');
SELECT results_eq($$SELECT last_line, progress, last_output_at, kill_cause
					  FROM frameq.proc p JOIN b ON b.proc = p.id$$,
				  $$VALUES (NULL::text, NULL::real, NULL::timestamptz, NULL::text)$$,
				  'and nothing reported yet');
SELECT results_eq(format($$SELECT last_line, progress, last_output_at FROM frameq.frames
							 WHERE job = %s$$, :plain),
				  $$VALUES (NULL::text, NULL::real, NULL::timestamptz)$$,
				  'frames shows NULL for what has not been reported');

-- ------------------------------------------------------ submit: values

SELECT frameq.submit($${"show": "t55show", "name": "timed", "timeout": "2h",
	"timeout_no_output": 600,
	"layers": [{"name": "follows", "command": "c", "range": "1"},
			   {"name": "own", "command": "c", "range": "1", "timeout": 90,
				"timeout_no_output": "5m", "progress_pattern": "([0-9]+)% done"}]}$$) AS timed \gset
SELECT results_eq(format($$SELECT timeout, timeout_no_output FROM frameq.job WHERE id = %s$$, :timed),
				  $$VALUES (7200, 600)$$, 'the job''s timeouts are stored in seconds');
SELECT results_eq(format($$SELECT name, timeout, timeout_no_output, progress_pattern
							 FROM frameq.layer WHERE job = %s ORDER BY name$$, :timed),
				  $$VALUES ('follows', NULL::int, NULL::int, NULL::text),
						   ('own', 90, 300, '([0-9]+)% done')$$,
				  'a layer keeps its own values; one without follows the job (NULL)');
DELETE FROM b;
INSERT INTO b SELECT * FROM frameq.reserve('t55-h1', :'tok1', :epoch1, 2);
SELECT results_eq(format($$SELECT l.name, b.progress_pattern FROM b JOIN frameq.layer l ON l.id = b.layer
							 WHERE b.job = %s ORDER BY l.name$$, :timed),
				  $$VALUES ('follows', NULL::text), ('own', '([0-9]+)% done')$$,
				  'the booking row carries the layer''s progress pattern');
SELECT results_eq(format($$SELECT l.name, p.timeout_at - p.booked_at FROM b
							 JOIN frameq.proc p ON p.id = b.proc JOIN frameq.layer l ON l.id = b.layer
							WHERE b.job = %s ORDER BY l.name$$, :timed),
				  $$VALUES ('follows', interval '2 hours'), ('own', interval '90 seconds')$$,
				  'each proc''s deadline is its booking time plus its layer''s timeout, or else its job''s');
SELECT is((SELECT count(*)::int FROM frameq.proc p JOIN b ON b.proc = p.id
			WHERE p.timeout_at IS NOT NULL AND p.state = 'running'), 2,
		  'both are running with a deadline');
SELECT is(attname::text, 'progress_pattern', 'progress_pattern is the booking type''s last attribute')
  FROM pg_attribute WHERE attrelid = 'frameq.booking'::regclass AND attnum > 0 AND NOT attisdropped
 ORDER BY attnum DESC LIMIT 1;
SELECT is_empty('SELECT * FROM frameq.check()', 'check() is clean after the bookings');

-- a pattern at its bound is taken
SELECT lives_ok(format($$SELECT frameq.submit(%L)$$,
	jsonb_build_object('show', 't55show', 'name', 'long', 'layers', jsonb_build_array(
		jsonb_build_object('name', 'l', 'command', 'c', 'range', '1',
						   'progress_pattern', '(' || repeat('a', 998) || ')')))),
	'a progress_pattern of 1,000 characters is taken');

-- ------------------------------------------------------ submit: refusals

CREATE FUNCTION pg_temp.spec(job jsonb, layer jsonb) RETURNS jsonb LANGUAGE sql AS $$
	SELECT jsonb_build_object('show', 't55show', 'name', 'bad',
		'layers', jsonb_build_array(jsonb_build_object('name', 'a', 'command', 'c', 'range', '1'),
									jsonb_build_object('name', 'b', 'command', 'c', 'range', '1')
									|| layer)) || job
$$;
SELECT fqtest.refuses(format($$SELECT frameq.submit(%L)$$, pg_temp.spec(j, l)), code, pattern,
					  format('%s %s is refused', CASE WHEN j = '{}' THEN 'layer ' || l::text ELSE 'job ' || j::text END, code))
  FROM (VALUES
	('{"timeout": 0}'::jsonb, '{}'::jsonb, '22023', 'spec.timeout must be a duration above 0%'),
	('{"timeout": "soon"}', '{}', '22023', 'spec.timeout must be a duration%'),
	('{"timeout": "400d"}', '{}', '54000', 'spec.timeout is too large%'),
	('{"timeout_no_output": -1}', '{}', '22023', 'spec.timeout_no_output must be a duration%'),
	('{"timeout_no_output": 40000000}', '{}', '54000', 'spec.timeout_no_output is too large%'),
	('{}', '{"timeout": "1h1h"}', '22023', 'spec.layers[1].timeout must be a duration%'),
	('{}', '{"timeout": 31536001}', '54000', 'spec.layers[1].timeout is too large%'),
	('{}', '{"timeout_no_output": false}', '22023', 'spec.layers[1].timeout_no_output must be a duration%'),
	('{}', '{"progress_pattern": "(unclosed"}', '22023',
	 'spec.layers[1].progress_pattern is not a valid regular expression%'),
	('{}', '{"progress_pattern": ""}', '22023', 'spec.layers[1].progress_pattern must not be empty'),
	('{}', '{"progress_pattern": 5}', '22023', 'spec.layers[1].progress_pattern must be a string'),
	('{}', jsonb_build_object('progress_pattern', repeat('a', 1001)), '54000',
	 'spec.layers[1].progress_pattern is too large: 1001 characters, at most 1000')
  ) AS t(j, l, code, pattern);
SELECT is((SELECT count(*)::int FROM frameq.job WHERE name = 'bad'), 0, 'no refused spec left a job');

SELECT * FROM finish();
ROLLBACK;
