/*
 * Every input has a bound (doc/security.md, "Bounded inputs"): past it a
 * call gets 54000, a malformed value 22023; the message names the field
 * and quotes at most 64 characters of what it was given; nothing changes.
 * A command that would expand past 64 kB for any of its frames is refused
 * at submit, so no poison job can reach reserve(), and a normal job next
 * to such an attempt books as before.
 */
BEGIN;
\ir include/helpers.psql

SELECT plan(61);

SELECT * FROM fqtest.farm('t47', memory => '{8589934592}') \gset

/* one layer around a command, named by a 200-character job name */
CREATE FUNCTION fqtest.spec(command text, job_name text DEFAULT 't47') RETURNS text
LANGUAGE sql AS $$
	SELECT jsonb_build_object('show', 't47show', 'name', job_name,
		'layers', jsonb_build_array(jsonb_build_object('name', 'l', 'command', command,
													   'range', '1-3')))::text
$$;
CREATE FUNCTION fqtest.message_of(sql text) RETURNS text
LANGUAGE plpgsql AS $$
BEGIN
	EXECUTE sql;
	RETURN NULL;
EXCEPTION WHEN OTHERS THEN
	RETURN SQLERRM;
END
$$;

/* commands: before and after expansion */
SELECT * FROM fqtest.refuses(format('SELECT frameq.submit(%L)', fqtest.spec(repeat('#JOB#', 209716))),
	'54000', 'spec.layers[0].command is too large: 1048580 bytes, at most 65536',
	'a 1 MB command of #JOB# is refused with 54000');
SELECT * FROM fqtest.refuses(format('SELECT frameq.submit(%L)',
	fqtest.spec(repeat('#JOB#', 400), repeat('j', 200))),
	'54000', 'spec.layers[0].command is too large: 80000 bytes once its tokens are expanded, at most 65536',
	'a 2 kB command whose #JOB# tokens expand past 64 kB is refused with 54000');
SELECT * FROM fqtest.refuses(format('SELECT frameq.submit(%L)',
	fqtest.spec(repeat('#JOB#', 10922) || 'xxxxx', 'jobjob')),
	'54000', '%65537 bytes once its tokens are expanded%', 'one byte over 64 kB once #JOB# is expanded is refused');
SELECT lives_ok(format('SELECT frameq.submit(%L)', fqtest.spec(repeat('#JOB#', 10922) || 'xxxx', 'jobjob')),
	'a command that expands to exactly 65536 bytes is accepted');
SELECT lives_ok(format('SELECT frameq.submit(%L)', fqtest.spec(repeat('#ZFRAME#', 8192))),
	'a command of exactly 65536 bytes, expanded to exactly 65536, is accepted');
SELECT is(frameq._expanded_length('a#FRAME#b#ZFRAME#c#JOB#d#LAYER#e#JOB#LAYER#', 'job', 'ly', -100000, 7),
	length('a-100000b-100000cjobdlyejobLAYER#')::bigint,
	'the expansion bound counts tokens as the agent expands them: left to right, no overlap, signs, padding');
SELECT is(frameq._expanded_length('#ZFRAME#', 'j', 'l', 1, 5), 4::bigint, '#ZFRAME# pads to 4 digits');

/* the poison job never gets in; a normal job next to it books */
SELECT frameq.submit('{"show": "t47show", "name": "normal", "priority": 1,
	"layers": [{"name": "l", "command": "render #FRAME#", "range": "1-2"}]}') AS normal \gset
SELECT is((SELECT count(*) FROM frameq.reserve('t47-h1', :'tok1', :epoch1, 10) b WHERE b.job = :normal),
	2::bigint, 'a normal job books on the host next to the refused poison submissions');

/* env, tags, layers, limits */
SELECT * FROM fqtest.refuses(format('SELECT frameq.submit(%L)', jsonb_build_object('show', 't47show', 'name', 'e',
	'layers', jsonb_build_array(jsonb_build_object('name', 'l', 'command', 'c', 'range', '1',
		'env', (SELECT jsonb_object_agg('V' || i, 'x') FROM generate_series(1, 257) i))))),
	'54000', 'spec.layers[0].env is too large: more than 256 variables', 'an env of 257 variables is refused');
SELECT * FROM fqtest.refuses(format('SELECT frameq.submit(%L)', jsonb_build_object('show', 't47show', 'name', 'e',
	'layers', jsonb_build_array(jsonb_build_object('name', 'l', 'command', 'c', 'range', '1',
		'env', jsonb_build_object('BIG', repeat('x', 65536)))))),
	'54000', 'spec.layers[0].env is too large: more than 65536 bytes', 'an env of more than 64 kB is refused');
SELECT * FROM fqtest.refuses(format('SELECT frameq.submit(%L)', jsonb_build_object('show', 't47show', 'name', 'e',
	'layers', jsonb_build_array(jsonb_build_object('name', 'l', 'command', 'c', 'range', '1',
		'env', jsonb_build_object('A' || repeat('B', 300), 'x'))))),
	'22023', '%env must map variable names to strings; "ABBBB%..." does not',
	'a 301-character variable name is malformed, and quoted clipped');
SELECT * FROM fqtest.refuses(format('SELECT frameq.submit(%L)', jsonb_build_object('show', 't47show', 'name', 'e',
	'layers', jsonb_build_array(jsonb_build_object('name', 'l', 'command', 'c', 'range', '1',
		'env', jsonb_build_object('A', jsonb_build_object('deep', 1)))))),
	'22023', '%env must map variable names to strings%', 'a nested env value is malformed');
SELECT * FROM fqtest.refuses(format('SELECT frameq.submit(%L)', jsonb_build_object('show', 't47show', 'name', 'e',
	'layers', jsonb_build_array(jsonb_build_object('name', 'l', 'command', 'c', 'range', '1',
		'tags', (SELECT jsonb_agg('t' || i) FROM generate_series(1, 65) i))))),
	'54000', 'spec.layers[0].tags is too large: 65 elements, at most 64', '65 layer tags are refused');
SELECT * FROM fqtest.refuses(format('SELECT frameq.submit(%L)', jsonb_build_object('show', 't47show', 'name', 'e',
	'layers', jsonb_build_array(jsonb_build_object('name', 'l', 'command', 'c', 'range', '1',
		'tags', jsonb_build_array(repeat('t', 65)))))),
	'54000', 'spec.layers[0].tags element is too large: 65 characters, at most 64', 'a 65-character tag is refused');
SELECT * FROM fqtest.refuses(format('SELECT frameq.submit(%L)', jsonb_build_object('show', 't47show', 'name', 'e',
	'layers', jsonb_build_array(jsonb_build_object('name', 'l', 'command', 'c', 'range', '1',
		'tags', jsonb_build_array(E'a\nb'))))),
	'22023', '%is not a valid tag%', 'a tag with a newline is malformed');
SELECT * FROM fqtest.refuses(format('SELECT frameq.submit(%L)', jsonb_build_object('show', 't47show', 'name', 'e',
	'layers', (SELECT jsonb_agg(jsonb_build_object('name', 'l' || i, 'command', 'c', 'range', '1'))
				 FROM generate_series(1, 1001) i))),
	'54000', 'spec.layers is too large: 1001 layers, at most 1000', '1,001 layers are refused before any is read');
SELECT * FROM fqtest.refuses(format('SELECT frameq.submit(%L)', jsonb_build_object('show', 't47show', 'name', 'e',
	'layers', jsonb_build_array(jsonb_build_object('name', 'l', 'command', 'c', 'range', '1',
		'limits', (SELECT jsonb_agg('lim' || i) FROM generate_series(1, 13) i))))),
	'54000', 'spec.layers[0].limits is too large: 13 limits, at most 12', '13 limits on a layer are refused with 54000');
SELECT * FROM fqtest.refuses(format('SELECT frameq.submit(%L)', jsonb_build_object('show', 't47show',
	'name', repeat('n', 201), 'layers', jsonb_build_array(jsonb_build_object('name', 'l', 'command', 'c', 'range', '1')))),
	'54000', 'spec.name is too large: 201 characters, at most 200', 'a 201-character job name is refused with 54000');
SELECT * FROM fqtest.refuses(format('SELECT frameq.submit(%L)', jsonb_build_object('show', 't47show',
	'name', 'n', 'layers', jsonb_build_array(jsonb_build_object('name', 'l', 'command', 'c',
		'range', repeat('1,', 140000) || '1')))),
	'54000', 'spec.layers[0].range is too large%', 'a range text of 280,001 characters is refused with 54000');
SELECT * FROM fqtest.refuses(format('SELECT frameq.submit(%L)', jsonb_build_object('show', 't47show',
	'name', 'n', repeat('k', 1000000), 1, 'layers', '[]'::jsonb)),
	'22023', 'spec.kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk... is not a known field',
	'an unknown 1 MB key is named, clipped to 64 characters');

/* administration */
SELECT * FROM fqtest.refuses(format('SELECT frameq.create_allocation(%L, %L)', 't47.b', repeat('t', 10000000)),
	'54000', 'tag element is too large: 10000000 characters, at most 64', 'create_allocation refuses a 10 MB tag');
SELECT * FROM fqtest.refuses($$SELECT frameq.create_allocation('t47.c', '')$$,
	'22023', '%is not a valid tag%', 'create_allocation refuses an empty tag');
SELECT * FROM fqtest.refuses($$SELECT frameq.register_host('t47-h2', 't47.pool', 1, 1, 0, 0, ARRAY[''])$$,
	'22023', 'tags element "" is not a valid tag', 'register_host refuses an empty tag');
SELECT * FROM fqtest.refuses(format('SELECT frameq.register_host(%L, %L, 1, 1, 0, 0, %L)', 't47-h2', 't47.pool',
	(SELECT array_agg('t' || i) FROM generate_series(1, 65) i)),
	'54000', 'tags is too large: 65 tags, at most 64', 'register_host refuses 65 tags');
SELECT * FROM fqtest.refuses(format('SELECT frameq.register_host(%L, %L, 1, 1)', repeat('h', 10000000), 't47.pool'),
	'54000', 'name is too large: 10000000 characters, at most 100', 'register_host refuses a 10 MB name with 54000');
SELECT * FROM fqtest.refuses(format('SELECT frameq.register_host(%L, %L, 1, 1)', 't47-h2', repeat('a', 1000000)),
	'42704', 'allocation "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa..." does not exist',
	'an unknown 1 MB allocation name is quoted clipped');
SELECT * FROM fqtest.refuses(format('SELECT frameq.set_subscription(%L, %L, 1, 1)', repeat('s', 1000000), 't47.pool'),
	'42704', 'show "ssssssssssssssssssssssssssssssssssssssssssssssssssssssssssssssss..." does not exist',
	'an unknown 1 MB show name is quoted clipped');
SELECT * FROM fqtest.refuses(format('SELECT frameq.set_host_state(%L, %L)', 't47-h1', repeat('x', 1000000)),
	'22023', 'state must be up, down, repair or drain, not xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx...',
	'a 1 MB host state is quoted clipped');
SELECT * FROM fqtest.refuses('SELECT frameq.set_subscription(''t47show'', ''t47.pool'', ''NaN'', 1)',
	'22023', 'size must be a number of cores, not NaN', 'NaN cores are malformed');
SELECT * FROM fqtest.refuses('SELECT frameq.set_subscription(''t47show'', ''t47.pool'', 1e300, 1)',
	'54000', 'size is too large: 1000000000000000000000000000000000000000000000000000000000000000...%',
	'1e300 cores are too large, quoted clipped');

/* agent entry points */
SELECT * FROM fqtest.refuses(format('SELECT frameq.attach(%L, %L, %L)', 't47-h1', :'tok1', repeat('b', 201)),
	'54000', 'boot_id is too large: 201 characters, at most 200', 'attach refuses a 201-character boot id');
SELECT * FROM fqtest.refuses(format('SELECT frameq.heartbeat(%L, %L, %s, %L)', 't47-h1', :'tok1', :epoch1,
	(SELECT array_agg(i) FROM generate_series(1, 100001) i)),
	'54000', 'running is too large: 100001 procs, at most 100000', 'a heartbeat listing 100,001 procs is refused');

/* every message stays short, whatever it was given */
SELECT cmp_ok(length(fqtest.message_of(format('SELECT frameq.create_show(%L)', repeat('x', 10000000)))), '<', 200,
	'a 10 MB show name makes a message of under 200 characters');

SELECT is_empty('SELECT * FROM frameq.check()', 'check() is clean');

SELECT * FROM finish();
ROLLBACK;
