/*
 * submit(spec): frame ranges, defaults, explicit settings, and rejection of
 * bad specs as a whole, with a message that names the offending field and
 * not one job, layer or frame row written.
 */
BEGIN;
\ir include/helpers.psql

SELECT plan(131);

SELECT frameq.create_allocation('t02.pool') AS alloc \gset
SELECT frameq.create_show('t02show') AS show \gset
SELECT frameq.create_show('t02other') AS other_show \gset
SELECT frameq.create_folder('t02show', 'fx') AS folder \gset
SELECT frameq.create_folder('t02other', 'elsewhere') AS other_folder \gset
SELECT frameq.create_limit('t02.lic', 3) AS lim \gset

-- ------------------------------------------------------- ranges, defaults

SELECT frameq.submit($${
	"show": "t02show", "name": "ranges",
	   "layers": [
		{"name": "plain",   "command": "r #FRAME#", "range": "1-100"},
		{"name": "stepped", "command": "r #FRAME#", "range": "1-100x5"},
		{"name": "listed",  "command": "r #FRAME#", "range": "1,3,7"},
		{"name": "mixed",   "command": "r #FRAME#", "range": "1-3,10"},
		{"name": "single",  "command": "r #FRAME#", "range": "42"}
	]}$$) AS job \gset

SELECT is((SELECT count(*)::int FROM frameq.layer WHERE job = :job), 5, 'a five-layer spec makes five layers');
SELECT results_eq(
	format($$SELECT f.number FROM frameq.frame f JOIN frameq.layer l ON l.id = f.layer
			  WHERE l.job = %s AND l.name = 'plain' ORDER BY 1$$, :job),
	'SELECT generate_series(1, 100)',
	'range "1-100" makes exactly frames 1 to 100');
SELECT results_eq(
	format($$SELECT f.number FROM frameq.frame f JOIN frameq.layer l ON l.id = f.layer
			  WHERE l.job = %s AND l.name = 'stepped' ORDER BY 1$$, :job),
	'SELECT generate_series(1, 96, 5)',
	'range "1-100x5" makes exactly the 20 frames 1, 6, ..., 96');
SELECT results_eq(
	format($$SELECT f.number FROM frameq.frame f JOIN frameq.layer l ON l.id = f.layer
			  WHERE l.job = %s AND l.name = 'listed' ORDER BY 1$$, :job),
	'VALUES (1), (3), (7)',
	'range "1,3,7" makes exactly frames 1, 3 and 7');
SELECT results_eq(
	format($$SELECT f.number FROM frameq.frame f JOIN frameq.layer l ON l.id = f.layer
			  WHERE l.job = %s AND l.name = 'mixed' ORDER BY 1$$, :job),
	'VALUES (1), (2), (3), (10)',
	'range "1-3,10" makes exactly frames 1, 2, 3 and 10');
SELECT results_eq(
	format($$SELECT f.number FROM frameq.frame f JOIN frameq.layer l ON l.id = f.layer
			  WHERE l.job = %s AND l.name = 'single' ORDER BY 1$$, :job),
	'VALUES (42)',
	'range "42" makes exactly frame 42');
SELECT results_eq(
	format($$SELECT count(*)::int, count(*) FILTER (WHERE state = 'waiting')::int,
				   sum(attempts)::int, sum(retries)::int
			  FROM frameq.frame WHERE job = %s$$, :job),
	'VALUES (128, 128, 0, 0)',
	'every new frame is waiting, with no attempts and no retries');
SELECT results_eq(
	format('SELECT show, folder, name, priority, max_retries, auto_eat, max_cc, max_gpus, state
			  FROM frameq.job WHERE id = %s', :job),
	format($$VALUES (%s, NULL::int, 'ranges', 0, 3, false, NULL::int, NULL::int, 'active')$$, :show),
	'a job gets priority 0, max_retries 3, no auto_eat, no caps, no folder and is active by default');
SELECT results_eq(
	format('SELECT name, dispatch_order, min_cc, max_cc, threadable, memory, gpus, gpu_memory, tags, env
			  FROM frameq.layer WHERE job = %s ORDER BY id', :job),
	$$VALUES ('plain',   0, 100, 100, false, 0::bigint, 0, 0::bigint, '{}'::text[], '{}'::jsonb),
			 ('stepped', 1, 100, 100, false, 0::bigint, 0, 0::bigint, '{}'::text[], '{}'::jsonb),
			 ('listed',  2, 100, 100, false, 0::bigint, 0, 0::bigint, '{}'::text[], '{}'::jsonb),
			 ('mixed',   3, 100, 100, false, 0::bigint, 0, 0::bigint, '{}'::text[], '{}'::jsonb),
			 ('single',  4, 100, 100, false, 0::bigint, 0, 0::bigint, '{}'::text[], '{}'::jsonb)$$,
	'layers default to 1 core, dispatch order = their index, no memory, gpus, tags or env');
SELECT results_eq(
	format('SELECT total, waiting, running FROM frameq.job_progress WHERE job = %s', :job),
	'VALUES (128::bigint, 128::bigint, 0::bigint)',
	'job_progress counts the 128 frames, all waiting');

-- ------------------------------------------------------ explicit settings

SELECT frameq.submit($${
	"show": "t02show", "folder": "fx", "name": "explicit", "priority": 10,
	"max_retries": 1, "auto_eat": true, "max_cores": 4.5, "max_gpus": 2, "paused": true,
	   "layers": [
		{"name": "sim", "command": "sim #FRAME#", "range": "1-2", "cores": 2.5,
		 "cores_max": 4, "threadable": true, "memory": "4GB", "gpus": 1,
		 "gpu_memory": 1073741824, "tags": ["b", "a", "b"], "limits": ["t02.lic"],
		 "dispatch_order": 7, "env": {"A": "1", "B_2": "x"}},
		{"name": "comp", "command": "comp", "range": "1", "memory": "512MB"}
	]}$$) AS job2 \gset

SELECT results_eq(
	format('SELECT show, folder, name, priority, max_retries, auto_eat, max_cc, max_gpus, state
			  FROM frameq.job WHERE id = %s', :job2),
	format($$VALUES (%s, %s, 'explicit', 10, 1, true, 450, 2, 'paused')$$, :show, :folder),
	'a job stores its folder, priority, retries, auto_eat, caps (4.5 cores as 450) and starts paused');
SELECT results_eq(
	format($$SELECT min_cc, max_cc, threadable, memory, gpus, gpu_memory, tags, dispatch_order, env
			  FROM frameq.layer WHERE job = %s AND name = 'sim'$$, :job2),
	$$VALUES (250, 400, true, 4294967296::bigint, 1, 1073741824::bigint, '{a,b}'::text[], 7,
			  '{"A": "1", "B_2": "x"}'::jsonb)$$,
	'a layer stores 2.5 to 4 cores as 250 to 400, "4GB" as 4294967296 bytes, tags sorted and distinct');
SELECT is((SELECT memory FROM frameq.layer WHERE job = :job2 AND name = 'comp'), 536870912::bigint,
		  'memory "512MB" is stored as 536870912 bytes');
SELECT is((SELECT dispatch_order FROM frameq.layer WHERE job = :job2 AND name = 'comp'), 1,
		  'a layer without dispatch_order gets its index even when another layer sets one');
SELECT results_eq(
	format($$SELECT ll.limit_id FROM frameq.layer_limit ll JOIN frameq.layer l ON l.id = ll.layer
			  WHERE l.job = %s$$, :job2),
	format('VALUES (%s)', :lim),
	'a layer''s limits are attached to it, and only to it');

-- ------------------------------------------------------------ bad specs

/*
 * Specs submit refuses: each row is one refusal, which fqtest.refuses()
 * turns into two assertions: the SQLSTATE and a message matching the LIKE
 * pattern, and fqtest.state() (which counts job, layer and frame rows)
 * unchanged after it.
 */
SELECT r.tap
  FROM (VALUES
	('submit refuses a spec that is not an object',
	 '[]'::jsonb,
	 '22023', 'spec must be a JSON object'),
	('submit refuses a null spec',
	 NULL,
	 '22023', 'spec must be a JSON object'),
	('submit refuses an unknown top-level field and names it',
	 '{"show": "t02show", "name": "x", "colour": "red",
	   "layers": [{"name": "a", "command": "c", "range": "1"}]}',
	 '22023', '%spec.colour%'),
	('submit refuses an unknown layer field and names it',
	 '{"show": "t02show", "name": "x",
	   "layers": [{"name": "a", "command": "c", "range": "1", "colour": "red"}]}',
	 '22023', '%spec.layers[0].colour%'),
	('submit refuses a spec without a show and names spec.show',
	 '{"name": "x",
	   "layers": [{"name": "a", "command": "c", "range": "1"}]}',
	 '22023', '%spec.show%'),
	('submit refuses a spec without a name and names spec.name',
	 '{"show": "t02show",
	   "layers": [{"name": "a", "command": "c", "range": "1"}]}',
	 '22023', '%spec.name%'),
	('submit refuses an empty name and names spec.name',
	 '{"show": "t02show", "name": ""}',
	 '22023', '%spec.name%'),
	('submit refuses a spec without layers and names spec.layers',
	 '{"show": "t02show", "name": "x"}',
	 '22023', '%spec.layers%'),
	('submit refuses an empty layer list and names spec.layers',
	 '{"show": "t02show", "name": "x", "layers": []}',
	 '22023', '%spec.layers%'),
	('submit refuses a layer without a name and names spec.layers[0].name',
	 '{"show": "t02show", "name": "x",
	   "layers": [{"command": "c", "range": "1"}]}',
	 '22023', '%spec.layers[0].name%'),
	('submit refuses a layer without a command and names spec.layers[0].command',
	 '{"show": "t02show", "name": "x",
	   "layers": [{"name": "a", "range": "1"}]}',
	 '22023', '%spec.layers[0].command%'),
	('submit refuses a layer without a range and names spec.layers[0].range',
	 '{"show": "t02show", "name": "x",
	   "layers": [{"name": "a", "command": "c"}]}',
	 '22023', '%spec.layers[0].range%'),
	('submit refuses a job name with a space and names spec.name',
	 '{"show": "t02show", "name": "a b",
	   "layers": [{"name": "a", "command": "c", "range": "1"}]}',
	 '22023', 'spec.name "a b" is not a valid job name'),
	('submit refuses a job name of 201 characters',
	 '{"show": "t02show", "name": "jjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjj",
	   "layers": [{"name": "a", "command": "c", "range": "1"}]}',
	 '54000', 'spec.name is too large: 201 characters, at most 200'),
	('submit refuses a layer name with a shell character and names it',
	 '{"show": "t02show", "name": "x",
	   "layers": [{"name": "a;b", "command": "c", "range": "1"}]}',
	 '22023', 'spec.layers[0].name "a;b" is not a valid layer name'),
	('submit refuses a layer name of 101 characters',
	 '{"show": "t02show", "name": "x",
	   "layers": [{"name": "lllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllll", "command": "c", "range": "1"}]}',
	 '54000', 'spec.layers[0].name is too large: 101 characters, at most 100'),
	('submit refuses two layers with one name and names the second',
	 '{"show": "t02show", "name": "x",
	   "layers": [{"name": "a", "command": "c", "range": "1"}, {"name": "a", "command": "c", "range": "1"}]}',
	 '22023', '%spec.layers[1].name%'),
	-- malformed ranges
	('submit refuses range "1-" and names spec.layers[0].range',
	 '{"show": "t02show", "name": "x",
	   "layers": [{"name": "a", "command": "c", "range": "1-"}]}',
	 '22023', '%spec.layers[0].range%'),
	('submit refuses range "a-b" and names spec.layers[0].range',
	 '{"show": "t02show", "name": "x",
	   "layers": [{"name": "a", "command": "c", "range": "a-b"}]}',
	 '22023', '%spec.layers[0].range%'),
	('submit refuses the backwards range "10-1" and names spec.layers[0].range',
	 '{"show": "t02show", "name": "x",
	   "layers": [{"name": "a", "command": "c", "range": "10-1"}]}',
	 '22023', '%spec.layers[0].range%'),
	('submit refuses the zero step "1-10x0" and names spec.layers[0].range',
	 '{"show": "t02show", "name": "x",
	   "layers": [{"name": "a", "command": "c", "range": "1-10x0"}]}',
	 '22023', '%spec.layers[0].range%'),
	('submit refuses the duplicate frame in "1,1" and names spec.layers[0].range',
	 '{"show": "t02show", "name": "x",
	   "layers": [{"name": "a", "command": "c", "range": "1,1"}]}',
	 '22023', '%spec.layers[0].range%'),
	('submit refuses the overlapping items of "1-5,3-7" and names spec.layers[0].range',
	 '{"show": "t02show", "name": "x",
	   "layers": [{"name": "a", "command": "c", "range": "1-5,3-7"}]}',
	 '22023', '%spec.layers[0].range%'),
	('submit refuses an empty range and names spec.layers[0].range',
	 '{"show": "t02show", "name": "x",
	   "layers": [{"name": "a", "command": "c", "range": ""}]}',
	 '22023', '%spec.layers[0].range%'),
	('submit refuses a range of two million frames and names spec.layers[0].range',
	 '{"show": "t02show", "name": "x",
	   "layers": [{"name": "a", "command": "c", "range": "1-2000000"}]}',
	 '54000', '%spec.layers[0].range%'),
	('submit names the second layer''s range when that one is malformed',
	 '{"show": "t02show", "name": "x",
	   "layers": [{"name": "a", "command": "c", "range": "1-3"}, {"name": "b", "command": "c", "range": "3-"}]}',
	 '22023', '%spec.layers[1].range%'),
	-- things that do not exist
	('submit refuses an unknown show with 42704 and names spec.show',
	 '{"show": "t02nope", "name": "x",
	   "layers": [{"name": "a", "command": "c", "range": "1"}]}',
	 '42704', '%spec.show%t02nope%'),
	('submit refuses an unknown folder with 42704 and names spec.folder',
	 '{"show": "t02show", "folder": "nope", "name": "x",
	   "layers": [{"name": "a", "command": "c", "range": "1"}]}',
	 '42704', '%spec.folder%nope%'),
	('submit refuses a folder of another show with 42704',
	 '{"show": "t02show", "folder": "elsewhere", "name": "x",
	   "layers": [{"name": "a", "command": "c", "range": "1"}]}',
	 '42704', '%spec.folder%'),
	('submit refuses an unknown limit with 42704 and names spec.layers[0].limits',
	 '{"show": "t02show", "name": "x",
	   "layers": [{"name": "a", "command": "c", "range": "1", "limits": ["t02.nope"]}]}',
	 '42704', '%spec.layers[0].limits%t02.nope%'),
	-- resources
	('submit refuses cores_max above cores without threadable',
	 '{"show": "t02show", "name": "x",
	   "layers": [{"name": "a", "command": "c", "range": "1", "cores": 1, "cores_max": 4}]}',
	 '22023', '%spec.layers[0].cores_max%threadable%'),
	('submit refuses cores_max below cores',
	 '{"show": "t02show", "name": "x",
	   "layers": [{"name": "a", "command": "c", "range": "1", "cores": 4, "cores_max": 2, "threadable": true}]}',
	 '22023', '%spec.layers[0].cores_max%'),
	('submit refuses zero cores and names spec.layers[0].cores',
	 '{"show": "t02show", "name": "x",
	   "layers": [{"name": "a", "command": "c", "range": "1", "cores": 0}]}',
	 '22023', '%spec.layers[0].cores%'),
	('submit refuses negative cores and names spec.layers[0].cores',
	 '{"show": "t02show", "name": "x",
	   "layers": [{"name": "a", "command": "c", "range": "1", "cores": -1}]}',
	 '22023', '%spec.layers[0].cores%'),
	('submit refuses cores with three decimals',
	 '{"show": "t02show", "name": "x",
	   "layers": [{"name": "a", "command": "c", "range": "1", "cores": 1.005}]}',
	 '22023', '%spec.layers[0].cores%'),
	('submit refuses an absurd 100001 cores',
	 '{"show": "t02show", "name": "x",
	   "layers": [{"name": "a", "command": "c", "range": "1", "cores": 100001}]}',
	 '54000', '%spec.layers[0].cores%'),
	('submit refuses negative memory and names spec.layers[0].memory',
	 '{"show": "t02show", "name": "x",
	   "layers": [{"name": "a", "command": "c", "range": "1", "memory": -1}]}',
	 '22023', '%spec.layers[0].memory%'),
	('submit refuses memory "-4GB"',
	 '{"show": "t02show", "name": "x",
	   "layers": [{"name": "a", "command": "c", "range": "1", "memory": "-4GB"}]}',
	 '22023', '%spec.layers[0].memory%'),
	('submit refuses memory "lots"',
	 '{"show": "t02show", "name": "x",
	   "layers": [{"name": "a", "command": "c", "range": "1", "memory": "lots"}]}',
	 '22023', '%spec.layers[0].memory%'),
	('submit refuses a fractional byte count of gpu memory',
	 '{"show": "t02show", "name": "x",
	   "layers": [{"name": "a", "command": "c", "range": "1", "gpu_memory": 1.5}]}',
	 '22023', '%spec.layers[0].gpu_memory%'),
	('submit refuses negative gpus',
	 '{"show": "t02show", "name": "x",
	   "layers": [{"name": "a", "command": "c", "range": "1", "gpus": -1}]}',
	 '22023', '%spec.layers[0].gpus%'),
	('submit refuses a negative job max_cores and names spec.max_cores',
	 '{"show": "t02show", "name": "x", "max_cores": -2,
	   "layers": [{"name": "a", "command": "c", "range": "1"}]}',
	 '22023', '%spec.max_cores%'),
	('submit refuses negative max_retries',
	 '{"show": "t02show", "name": "x", "max_retries": -1,
	   "layers": [{"name": "a", "command": "c", "range": "1"}]}',
	 '22023', '%spec.max_retries%'),
	('submit refuses a fractional priority',
	 '{"show": "t02show", "name": "x", "priority": 1.5,
	   "layers": [{"name": "a", "command": "c", "range": "1"}]}',
	 '22023', '%spec.priority%'),
	-- wrong JSON types
	('submit refuses a numeric show and says it must be a string',
	 '{"show": 5, "name": "x",
	   "layers": [{"name": "a", "command": "c", "range": "1"}]}',
	 '22023', '%spec.show%string%'),
	('submit refuses a string priority and says it must be a number',
	 '{"show": "t02show", "name": "x", "priority": "high",
	   "layers": [{"name": "a", "command": "c", "range": "1"}]}',
	 '22023', '%spec.priority%number%'),
	('submit refuses a string for paused and says it must be a boolean',
	 '{"show": "t02show", "name": "x", "paused": "yes",
	   "layers": [{"name": "a", "command": "c", "range": "1"}]}',
	 '22023', '%spec.paused%boolean%'),
	('submit refuses layers given as an object and says they must be an array',
	 '{"show": "t02show", "name": "x",
	   "layers": {"name": "a", "command": "c", "range": "1"}}',
	 '22023', '%spec.layers%array%'),
	('submit refuses a layer that is a string',
	 '{"show": "t02show", "name": "x", "layers": ["a"]}',
	 '22023', '%spec.layers[0]%object%'),
	('submit refuses a numeric range and says it must be a string',
	 '{"show": "t02show", "name": "x",
	   "layers": [{"name": "a", "command": "c", "range": 5}]}',
	 '22023', '%spec.layers[0].range%string%'),
	('submit refuses cores given as a string',
	 '{"show": "t02show", "name": "x",
	   "layers": [{"name": "a", "command": "c", "range": "1", "cores": "2"}]}',
	 '22023', '%spec.layers[0].cores%number%'),
	('submit refuses threadable given as a number',
	 '{"show": "t02show", "name": "x",
	   "layers": [{"name": "a", "command": "c", "range": "1", "threadable": 1}]}',
	 '22023', '%spec.layers[0].threadable%boolean%'),
	('submit refuses tags given as a string',
	 '{"show": "t02show", "name": "x",
	   "layers": [{"name": "a", "command": "c", "range": "1", "tags": "linux"}]}',
	 '22023', '%spec.layers[0].tags%array%'),
	('submit refuses a tag that is not a string',
	 '{"show": "t02show", "name": "x",
	   "layers": [{"name": "a", "command": "c", "range": "1", "tags": ["linux", 3]}]}',
	 '22023', '%spec.layers[0].tags%'),
	('submit refuses env given as an array',
	 '{"show": "t02show", "name": "x",
	   "layers": [{"name": "a", "command": "c", "range": "1", "env": ["A=1"]}]}',
	 '22023', '%spec.layers[0].env%object%'),
	('submit refuses an env value that is not a string',
	 '{"show": "t02show", "name": "x",
	   "layers": [{"name": "a", "command": "c", "range": "1", "env": {"A": 1}}]}',
	 '22023', '%spec.layers[0].env%')
	   ) AS c(description, spec, sqlstate, message),
	   LATERAL fqtest.refuses(format('SELECT frameq.submit(%L::jsonb)', c.spec),
							  c.sqlstate, c.message, c.description) AS r(tap);

/* the hint of a name's refusal states the rule, for each kind of name */
CREATE FUNCTION fqtest.hint_of(code text) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
	hint text;
BEGIN
	EXECUTE code;
	RETURN NULL;
EXCEPTION WHEN invalid_parameter_value THEN
	GET STACKED DIAGNOSTICS hint = PG_EXCEPTION_HINT;
	RETURN hint;
END
$$;
SELECT is(fqtest.hint_of($$SELECT frameq.create_show('a b')$$),
		  'Names are 1 to 100 letters, digits and _ . : @ + -.',
		  'a refused show name''s hint states the rule for names');
SELECT is(fqtest.hint_of($$SELECT frameq.submit('{"show": "t02show", "name": "a b",
			"layers": [{"name": "a", "command": "c", "range": "1"}]}')$$),
		  'Job names are 1 to 200 letters, digits and _ . : @ + -.',
		  'a refused job name''s hint states the rule for job names');
SELECT is(fqtest.hint_of($$SELECT frameq.submit('{"show": "t02show", "name": "x",
			"layers": [{"name": "a b", "command": "c", "range": "1"}]}')$$),
		  'Layer names are 1 to 100 letters, digits and _ . : @ + -.',
		  'a refused layer name''s hint states the rule for layer names');

-- ------------------------------------------------------------ a big job

SELECT frameq.submit($${"show": "t02show", "name": "big",
	   "layers": [{"name": "all", "command": "r #FRAME#", "range": "1-100000"}]}$$) AS big \gset
SELECT results_eq(
	format($$SELECT count(*)::int, count(DISTINCT number)::int, min(number), max(number),
				   count(*) FILTER (WHERE state = 'waiting')::int
			  FROM frameq.frame WHERE job = %s$$, :big),
	'VALUES (100000, 100000, 1, 100000, 100000)',
	'a 100000-frame job submits with exactly frames 1 to 100000, all waiting');

SELECT * FROM finish();
ROLLBACK;
