/*
 * Administration: allocations, shows, subscriptions, folders, limits, hosts
 * and job settings.  Each success path is checked row by row (cores are
 * stored as centicores: 1.5 cores -> 150), and each refusal by its SQLSTATE
 * and by fqtest.state() being unchanged afterwards.
 *
 * Not covered here: frameq_limit notifications.  A NOTIFY is delivered only
 * after commit, and a pgTAP file never commits, so they are tested from
 * outside (test/scripts).
 */
BEGIN;
\ir include/helpers.psql

SELECT plan(154);

-- ------------------------------------------------------------ allocations

SELECT frameq.create_allocation('t01.lon', 'lon') AS alloc \gset
SELECT frameq.create_allocation('t01.par') AS alloc2 \gset

SELECT is((SELECT format('%s/%s', name, tag) FROM frameq.allocation WHERE id = :alloc),
		  't01.lon/lon', 'create_allocation stores the name and the tag under the id it returns');
SELECT is((SELECT tag FROM frameq.allocation WHERE id = :alloc2), NULL,
		  'create_allocation without a tag stores no tag');
SELECT isnt(:alloc2, :alloc, 'two allocations get two ids');

SELECT * FROM fqtest.refuses($$SELECT frameq.create_allocation('t01.lon')$$, '42710',
	'allocation "t01.lon" already exists', 'create_allocation refuses a name in use with 42710');
SELECT * FROM fqtest.refuses($$SELECT frameq.create_allocation(NULL)$$, '22004', 'name must not be null',
	'create_allocation refuses a null name with 22004');
SELECT * FROM fqtest.refuses($$SELECT frameq.create_allocation('')$$, '22023', '%not a valid name%',
	'create_allocation refuses an empty name with 22023');
SELECT * FROM fqtest.refuses($$SELECT frameq.create_allocation('lon general')$$, '22023', '%not a valid name%',
	'create_allocation refuses a name with a space with 22023');
SELECT * FROM fqtest.refuses(format('SELECT frameq.create_allocation(%L)', repeat('a', 101)), '54000',
	'name is too large%', 'create_allocation refuses a 101-character name with 54000');

-- ------------------------------------------------------------------ shows

SELECT frameq.create_show('t01show') AS show \gset
SELECT frameq.create_show('t01other') AS show2 \gset

SELECT is((SELECT name FROM frameq.show WHERE id = :show), 't01show',
		  'create_show stores the name under the id it returns');
SELECT * FROM fqtest.refuses($$SELECT frameq.create_show('t01show')$$, '42710',
	'show "t01show" already exists', 'create_show refuses a name in use with 42710');
SELECT * FROM fqtest.refuses($$SELECT frameq.create_show(NULL)$$, '22004', NULL,
	'create_show refuses a null name with 22004');
SELECT * FROM fqtest.refuses($$SELECT frameq.create_show('a/b')$$, '22023', '%not a valid name%',
	'create_show refuses a name with a slash with 22023');

-- ---------------------------------------------------------- subscriptions

SELECT lives_ok($$SELECT frameq.set_subscription('t01show', 't01.lon', 1.5, 10)$$,
				'set_subscription accepts fractional cores');
SELECT results_eq(
	format('SELECT size_cc, burst_cc FROM frameq.subscription WHERE show = %s AND allocation = %s',
		   :show, :alloc),
	$$VALUES (150, 1000)$$,
	'set_subscription stores 1.5 cores as 150 centicores and a burst of 10 as 1000');
SELECT changed_at AS sub_changed FROM frameq.subscription WHERE show = :show AND allocation = :alloc \gset

SELECT lives_ok($$SELECT frameq.set_subscription('t01show', 't01.lon', 2.25, 4)$$,
				'set_subscription on an existing subscription succeeds');
SELECT results_eq(
	format('SELECT size_cc, burst_cc, changed_at > %L FROM frameq.subscription WHERE show = %s',
		   :'sub_changed', :show),
	$$VALUES (225, 400, true)$$,
	'set_subscription again updates the one row in place and moves its changed_at');

SELECT * FROM fqtest.refuses($$SELECT frameq.set_subscription('t01nope', 't01.lon', 1, 1)$$, '42704',
	'show "t01nope" does not exist', 'set_subscription refuses an unknown show with 42704');
SELECT * FROM fqtest.refuses($$SELECT frameq.set_subscription('t01show', 't01.nope', 1, 1)$$, '42704',
	'allocation "t01.nope" does not exist', 'set_subscription refuses an unknown allocation with 42704');
SELECT * FROM fqtest.refuses($$SELECT frameq.set_subscription('t01show', 't01.lon', NULL, 1)$$, '22004',
	'size must not be null', 'set_subscription refuses a null size with 22004');
SELECT * FROM fqtest.refuses($$SELECT frameq.set_subscription('t01show', 't01.lon', 1, NULL)$$, '22004',
	'burst must not be null', 'set_subscription refuses a null burst with 22004');
SELECT * FROM fqtest.refuses($$SELECT frameq.set_subscription(NULL, 't01.lon', 1, 1)$$, '22004',
	'show must not be null', 'set_subscription refuses a null show with 22004');
SELECT * FROM fqtest.refuses($$SELECT frameq.set_subscription('t01show', 't01.lon', -1, 1)$$, '22023',
	'size %', 'set_subscription refuses a negative size with 22023');
SELECT * FROM fqtest.refuses($$SELECT frameq.set_subscription('t01show', 't01.lon', 1, 10000001)$$, '54000',
	'burst %', 'set_subscription refuses an absurd burst of 10000001 cores with 54000');
SELECT * FROM fqtest.refuses($$SELECT frameq.set_subscription('t01show', 't01.lon', 1.005, 2)$$, '22023',
	'size %', 'set_subscription refuses cores with three decimals with 22023');

-- ---------------------------------------------------------------- folders

SELECT frameq.create_folder('t01show', 'lighting', 2.5, 2) AS folder \gset
SELECT frameq.create_folder('t01show', 'comp') AS folder2 \gset
SELECT frameq.create_folder('t01other', 'lighting') AS folder3 \gset

SELECT results_eq(
	format('SELECT show, name, max_cc, max_gpus FROM frameq.folder WHERE id = %s', :folder),
	format('VALUES (%s, %L, 250, 2)', :show, 'lighting'),
	'create_folder stores the show, the name and 2.5 cores as 250 centicores');
SELECT results_eq(
	format('SELECT max_cc IS NULL, max_gpus IS NULL FROM frameq.folder WHERE id = %s', :folder2),
	$$VALUES (true, true)$$,
	'create_folder without caps leaves both caps open (NULL)');
SELECT is((SELECT show FROM frameq.folder WHERE id = :folder3), :show2,
		  'create_folder accepts a name another show already uses');

SELECT * FROM fqtest.refuses($$SELECT frameq.create_folder('t01show', 'lighting')$$, '42710',
	'folder "lighting" already exists in show "t01show"',
	'create_folder refuses a name in use in the same show with 42710');
SELECT * FROM fqtest.refuses($$SELECT frameq.create_folder('t01nope', 'x')$$, '42704', NULL,
	'create_folder refuses an unknown show with 42704');
SELECT * FROM fqtest.refuses($$SELECT frameq.create_folder('t01show', NULL)$$, '22004', NULL,
	'create_folder refuses a null name with 22004');
SELECT * FROM fqtest.refuses($$SELECT frameq.create_folder('t01show', 'two words')$$, '22023',
	'%not a valid name%', 'create_folder refuses a bad name with 22023');
SELECT * FROM fqtest.refuses($$SELECT frameq.create_folder('t01show', 'x', -1)$$, '22023', 'max_cores %',
	'create_folder refuses negative max_cores with 22023');
SELECT * FROM fqtest.refuses($$SELECT frameq.create_folder('t01show', 'x', 0.001)$$, '22023', 'max_cores %',
	'create_folder refuses max_cores finer than 0.01 with 22023');
SELECT * FROM fqtest.refuses($$SELECT frameq.create_folder('t01show', 'x', 1, -1)$$, '22023', 'max_gpus %',
	'create_folder refuses negative max_gpus with 22023');

SELECT changed_at AS folder_changed FROM frameq.folder WHERE id = :folder \gset
SELECT lives_ok(format('SELECT frameq.set_folder_limits(%s, 3.75, 4)', :folder),
				'set_folder_limits succeeds on an existing folder');
SELECT results_eq(
	format('SELECT max_cc, max_gpus, changed_at > %L FROM frameq.folder WHERE id = %s',
		   :'folder_changed', :folder),
	$$VALUES (375, 4, true)$$,
	'set_folder_limits stores 3.75 cores as 375 centicores and moves changed_at');
SELECT lives_ok(format('SELECT frameq.set_folder_limits(%s, NULL, NULL)', :folder),
				'set_folder_limits accepts NULL caps');
SELECT results_eq(
	format('SELECT max_cc IS NULL, max_gpus IS NULL FROM frameq.folder WHERE id = %s', :folder),
	$$VALUES (true, true)$$,
	'set_folder_limits with NULL caps removes both caps');

SELECT * FROM fqtest.refuses($$SELECT frameq.set_folder_limits(-5, 1, 1)$$, '42704',
	'folder -5 does not exist', 'set_folder_limits refuses an unknown folder with 42704');
SELECT * FROM fqtest.refuses($$SELECT frameq.set_folder_limits(NULL, 1, 1)$$, '22004',
	'folder must not be null', 'set_folder_limits refuses a null folder with 22004');
SELECT * FROM fqtest.refuses(format('SELECT frameq.set_folder_limits(%s, -0.5, 1)', :folder), '22023',
	'max_cores %', 'set_folder_limits refuses negative max_cores with 22023');
SELECT * FROM fqtest.refuses(format('SELECT frameq.set_folder_limits(%s, 1, -2)', :folder), '22023',
	'max_gpus %', 'set_folder_limits refuses negative max_gpus with 22023');
SELECT * FROM fqtest.refuses(format('SELECT frameq.set_folder_limits(%s, 10000001, 1)', :folder), '54000',
	'max_cores %', 'set_folder_limits refuses an absurd 10000001 cores with 54000');

-- ----------------------------------------------------------------- limits

SELECT frameq.create_limit('t01.arnold', 5) AS lim \gset
SELECT results_eq(format('SELECT name, max_running FROM frameq.limits WHERE id = %s', :lim),
				  $$VALUES ('t01.arnold', 5)$$,
				  'create_limit stores the name and max_running under the id it returns');
SELECT changed_at AS limit_changed FROM frameq.limits WHERE id = :lim \gset
SELECT lives_ok($$SELECT frameq.set_limit('t01.arnold', 7)$$, 'set_limit succeeds on an existing limit');
SELECT results_eq(format('SELECT max_running, changed_at > %L FROM frameq.limits WHERE id = %s',
						 :'limit_changed', :lim),
				  $$VALUES (7, true)$$, 'set_limit stores the new max_running and moves changed_at');
SELECT lives_ok($$SELECT frameq.set_limit('t01.arnold', 0)$$, 'set_limit accepts zero (nothing may run)');
SELECT is((SELECT max_running FROM frameq.limits WHERE id = :lim), 0, 'set_limit stores zero');

SELECT * FROM fqtest.refuses($$SELECT frameq.create_limit('t01.arnold', 1)$$, '42710',
	'limit "t01.arnold" already exists', 'create_limit refuses a name in use with 42710');
SELECT * FROM fqtest.refuses($$SELECT frameq.create_limit('t01.x', NULL)$$, '22004',
	'max_running must not be null', 'create_limit refuses a null max_running with 22004');
SELECT * FROM fqtest.refuses($$SELECT frameq.create_limit(NULL, 1)$$, '22004', NULL,
	'create_limit refuses a null name with 22004');
SELECT * FROM fqtest.refuses($$SELECT frameq.create_limit('t01.x', -1)$$, '22023', 'max_running %',
	'create_limit refuses a negative max_running with 22023');
SELECT * FROM fqtest.refuses($$SELECT frameq.create_limit('t01.x', 10000001)$$, '54000', 'max_running %',
	'create_limit refuses an absurd max_running with 54000');
SELECT * FROM fqtest.refuses($$SELECT frameq.create_limit('t01 x', 1)$$, '22023', '%not a valid name%',
	'create_limit refuses a bad name with 22023');
SELECT * FROM fqtest.refuses($$SELECT frameq.set_limit('t01.nope', 1)$$, '42704',
	'limit "t01.nope" does not exist', 'set_limit refuses an unknown limit with 42704');
SELECT * FROM fqtest.refuses($$SELECT frameq.set_limit('t01.arnold', NULL)$$, '22004', NULL,
	'set_limit refuses a null max_running with 22004');
SELECT * FROM fqtest.refuses($$SELECT frameq.set_limit('t01.arnold', -3)$$, '22023', 'max_running %',
	'set_limit refuses a negative max_running with 22023');

-- ------------------------------------------------------------------ hosts

SELECT frameq.register_host('t01-h1', 't01.lon', 1.5, 8589934592, 2, 4294967296,
							'{linux,gpu}') AS tok \gset
SELECT frameq.register_host('t01-h2', 't01.lon', 4, 1073741824) AS tok2 \gset

SELECT matches(:'tok'::text, '^[0-9a-f]{64}$', 'register_host returns a 64-hex-digit token');
SELECT isnt(:'tok'::text, :'tok2', 'two hosts get two different tokens');
SELECT results_eq(
	$$SELECT allocation, cores_cc, memory, gpus, gpu_memory, tags, state, epoch,
			 idle_cc, idle_memory, idle_gpus, idle_gpu_memory, lease_expires_at IS NULL
		FROM frameq.host WHERE name = 't01-h1'$$,
	format($$VALUES (%s, 150, 8589934592::bigint, 2, 4294967296::bigint, '{linux,gpu}'::text[],
					 'up', 0::bigint, 150, 8589934592::bigint, 2, 4294967296::bigint, true)$$, :alloc),
	'register_host stores 1.5 cores as 150 centicores, the resources and tags, all idle, up, never attached');
SELECT results_eq(
	$$SELECT gpus, gpu_memory, tags FROM frameq.host WHERE name = 't01-h2'$$,
	$$VALUES (0, 0::bigint, '{}'::text[])$$,
	'register_host defaults to no gpus, no gpu memory and no tags');
SELECT is((SELECT token_hash FROM frameq.host WHERE name = 't01-h1'),
		  sha256(convert_to(:'tok', 'UTF8')), 'register_host stores the sha256 hash of the token');
SELECT is((SELECT count(*)::int FROM frameq.host h
			WHERE strpos(row_to_json(h)::text, :'tok') > 0
			   OR strpos(row_to_json(h)::text, upper(:'tok')) > 0
			   OR strpos(encode(h.token_hash, 'escape'), :'tok') > 0),
		  0, 'the token itself is stored nowhere in frameq.host');

SELECT * FROM fqtest.refuses($$SELECT frameq.register_host('t01-h1', 't01.lon', 1, 1)$$, '42710',
	'host "t01-h1" is already registered', 'register_host refuses a name in use with 42710');
SELECT * FROM fqtest.refuses($$SELECT frameq.register_host('t01-h3', 't01.nope', 1, 1)$$, '42704',
	'allocation "t01.nope" does not exist', 'register_host refuses an unknown allocation with 42704');
SELECT * FROM fqtest.refuses($$SELECT frameq.register_host('t01-h3', 't01.lon', NULL, 1)$$, '22004',
	'cores must not be null', 'register_host refuses null cores with 22004');
SELECT * FROM fqtest.refuses($$SELECT frameq.register_host('t01-h3', 't01.lon', 1, NULL)$$, '22004',
	'memory must not be null', 'register_host refuses null memory with 22004');
SELECT * FROM fqtest.refuses($$SELECT frameq.register_host(NULL, 't01.lon', 1, 1)$$, '22004',
	'name must not be null', 'register_host refuses a null name with 22004');
SELECT * FROM fqtest.refuses($$SELECT frameq.register_host('t01-h3', 't01.lon', 1, 1, 0, 0, NULL)$$, '22004',
	NULL, 'register_host refuses null tags with 22004');
SELECT * FROM fqtest.refuses($$SELECT frameq.register_host('t01-h3', 't01.lon', 1, 1, 0, 0, '{a,NULL}')$$, '22004',
	NULL, 'register_host refuses tags containing null with 22004');
SELECT * FROM fqtest.refuses($$SELECT frameq.register_host('t01-h3', 't01.lon', 0, 1)$$, '22023',
	'cores must be positive%', 'register_host refuses zero cores with 22023');
SELECT * FROM fqtest.refuses($$SELECT frameq.register_host('t01-h3', 't01.lon', -4, 1)$$, '22023',
	'cores %', 'register_host refuses negative cores with 22023');
SELECT * FROM fqtest.refuses($$SELECT frameq.register_host('t01-h3', 't01.lon', 1.001, 1)$$, '22023',
	'cores must be a multiple of 0.01%', 'register_host refuses cores with three decimals with 22023');
SELECT * FROM fqtest.refuses($$SELECT frameq.register_host('t01-h3', 't01.lon', 100001, 1)$$, '54000',
	'cores is too large%', 'register_host refuses an absurd 100001 cores with 54000');
SELECT * FROM fqtest.refuses($$SELECT frameq.register_host('t01-h3', 't01.lon', 1, -1)$$, '22023',
	'memory %', 'register_host refuses negative memory with 22023');
SELECT * FROM fqtest.refuses($$SELECT frameq.register_host('t01-h3', 't01.lon', 1, 0)$$, '22023',
	'memory must be positive', 'register_host refuses zero memory with 22023');
SELECT * FROM fqtest.refuses($$SELECT frameq.register_host('t01-h3', 't01.lon', 1, 1, -1)$$, '22023',
	'gpus %', 'register_host refuses negative gpus with 22023');
SELECT * FROM fqtest.refuses($$SELECT frameq.register_host('t01-h3', 't01.lon', 1, 1, 0, -1)$$, '22023',
	'gpu_memory %', 'register_host refuses negative gpu memory with 22023');
SELECT * FROM fqtest.refuses($$SELECT frameq.register_host('t01 h3', 't01.lon', 1, 1)$$, '22023',
	'%not a valid name%', 'register_host refuses a bad name with 22023');

-- ---------------------------------------------------------------- set_job

SELECT frameq.submit($${"show": "t01show", "folder": "comp", "name": "t01job",
						"layers": [{"name": "render", "command": "render #FRAME#", "range": "1-3"}]}$$) AS job \gset
SELECT caps_changed_at AS job_caps_changed FROM frameq.job WHERE id = :job \gset

SELECT lives_ok(format('SELECT frameq.set_job(%s, priority => 50)', :job), 'set_job sets a priority');
SELECT results_eq(format('SELECT priority, max_cc, max_gpus, state, caps_changed_at = %L FROM frameq.job WHERE id = %s',
						 :'job_caps_changed', :job),
				  $$VALUES (50, NULL::int, NULL::int, 'active', true)$$,
				  'set_job with only a priority changes the priority and nothing else');
SELECT lives_ok(format('SELECT frameq.set_job(%s, max_cores => 2.5, max_gpus => 1)', :job),
				'set_job sets caps');
SELECT results_eq(format('SELECT priority, max_cc, max_gpus, caps_changed_at > %L FROM frameq.job WHERE id = %s',
						 :'job_caps_changed', :job),
				  $$VALUES (50, 250, 1, true)$$,
				  'set_job stores 2.5 cores as 250 centicores, keeps the priority and moves caps_changed_at');
SELECT lives_ok(format('SELECT frameq.set_job(%s, paused => true)', :job), 'set_job pauses a job');
SELECT results_eq(format('SELECT state, priority, max_cc, max_gpus FROM frameq.job WHERE id = %s', :job),
				  $$VALUES ('paused', 50, 250, 1)$$, 'set_job paused => true pauses the job and keeps its settings');
SELECT lives_ok(format('SELECT frameq.set_job(%s, paused => false)', :job), 'set_job resumes a job');
SELECT is((SELECT state FROM frameq.job WHERE id = :job), 'active', 'set_job paused => false makes the job active again');

SELECT * FROM fqtest.refuses($$SELECT frameq.set_job(-1, priority => 1)$$, '42704',
	'job -1 does not exist', 'set_job refuses an unknown job with 42704');
SELECT * FROM fqtest.refuses($$SELECT frameq.set_job(NULL, priority => 1)$$, '22004',
	'job must not be null', 'set_job refuses a null job with 22004');
SELECT * FROM fqtest.refuses(format('SELECT frameq.set_job(%s, max_cores => -1)', :job), '22023',
	'max_cores %', 'set_job refuses negative max_cores with 22023');
SELECT * FROM fqtest.refuses(format('SELECT frameq.set_job(%s, max_cores => 1.234)', :job), '22023',
	'max_cores %', 'set_job refuses max_cores with three decimals with 22023');
SELECT * FROM fqtest.refuses(format('SELECT frameq.set_job(%s, max_gpus => -1)', :job), '22023',
	'max_gpus %', 'set_job refuses negative max_gpus with 22023');
SELECT * FROM fqtest.refuses(format('SELECT frameq.set_job(%s, priority => 2000000)', :job), '54000',
	'priority %', 'set_job refuses an absurd priority with 54000');

UPDATE frameq.job SET state = 'finished', finished_at = clock_timestamp() WHERE id = :job;
SELECT * FROM fqtest.refuses(format('SELECT frameq.set_job(%s, paused => true)', :job), '55000',
	NULL, 'set_job refuses to pause a finished job with 55000');

SELECT * FROM finish();
ROLLBACK;
