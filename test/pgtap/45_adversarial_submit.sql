/*
 * Adversarial inputs to submit() and to the job and frame actions
 * (set_job, kill_frame, retry_frame, eat_frame, kill_job): specs that are
 * not objects, unknown and mistyped fields, JSON nested 1,000 deep and
 * objects of 10,000 keys, numbers out of range, names with control
 * characters, and the bounds on commands (64 kB before and after token
 * expansion), env (256 variables, 64 kB), tags (64 of 64 characters) and
 * layers (1,000).  Called by frameq_admin, and by frameq_submit on the show
 * it was granted (and on one it was not).  Each case must fail with its
 * own SQLSTATE, change nothing, leave check() clean and quote at most 64
 * characters of what it was given; see include/adversarial.psql.
 *
 * Cases marked "(assumed)" pin a code the documents do not name; the rest
 * are required.
 */
BEGIN;
\ir include/adversarial.psql

SELECT plan(3 + 2 * 171);
SELECT * FROM fqadv.farm_checks();

-- -------------------------------------------------- submit: the spec itself
SELECT r FROM (VALUES
	($$SELECT frameq.submit(NULL)$$, '22023', 'submit: NULL spec'),
	($$SELECT frameq.submit('null')$$, '22023', 'submit: JSON null'),
	($$SELECT frameq.submit('[]')$$, '22023', 'submit: an array'),
	($$SELECT frameq.submit('"spec"')$$, '22023', 'submit: a string'),
	($$SELECT frameq.submit('42')$$, '22023', 'submit: a number'),
	($$SELECT frameq.submit('{}')$$, '22023', 'submit: an empty object'),
	($$SELECT frameq.submit(fqadv.deep(1000))$$, '22023', 'submit: an array nested 1000 deep'),
	($$SELECT frameq.submit(fqadv.spec(jsonb_build_object('x', fqadv.deep(1000))))$$, '22023', 'submit: unknown field nested 1000 deep'),
	($$SELECT frameq.submit(fqadv.spec() || fqadv.obj(10000))$$, '22023', 'submit: 10000 unknown fields'),
	($$SELECT frameq.submit(fqadv.spec('{"colour": "red"}'))$$, '22023', 'submit: unknown field'),
	($$SELECT frameq.submit('{"show": "advshow", "name": "j", "layers": [{"name": "l", "command": "a\u0000b", "range": "1"}]}')$$, '22P05', 'submit: command with \u0000'),
	($$SELECT frameq.submit('{"show": "advshow", "name": "j", "layers": [')$$, '22P02', 'submit: truncated JSON')
) AS c(call, expected, label), LATERAL fqadv.expect('adv_admin', c.call, c.expected, c.label) r;

-- ------------------------------------------ submit: show, folder and job fields
SELECT r FROM (VALUES
	($$SELECT frameq.submit(fqadv.spec(drop => '{show}'))$$, '22023', 'submit: no show'),
	($$SELECT frameq.submit(fqadv.spec('{"show": 1}'))$$, '22023', 'submit: show a number'),
	($$SELECT frameq.submit(fqadv.spec('{"show": ["advshow"]}'))$$, '22023', 'submit: show an array'),
	($$SELECT frameq.submit(fqadv.spec('{"show": "nosuchshow"}'))$$, '42704', 'submit: unknown show'),
	($$SELECT frameq.submit(fqadv.spec(jsonb_build_object('show', repeat('s', 10485760))))$$, '42704', 'submit: 10 MB show'),
	($$SELECT frameq.submit(fqadv.spec('{"folder": "nosuchfolder"}'))$$, '42704', 'submit: unknown folder'),
	($$SELECT frameq.submit(fqadv.spec(jsonb_build_object('folder', repeat('f', 10485760))))$$, '42704', 'submit: 10 MB folder'),
	($$SELECT frameq.submit(fqadv.spec('{"folder": 1}'))$$, '22023', 'submit: folder a number'),
	($$SELECT frameq.submit(fqadv.spec(drop => '{name}'))$$, '22023', 'submit: no name'),
	($$SELECT frameq.submit(fqadv.spec('{"name": ""}'))$$, '22023', 'submit: empty name'),
	($$SELECT frameq.submit(fqadv.spec('{"name": "a b"}'))$$, '22023', 'submit: name with a space'),
	($$SELECT frameq.submit(fqadv.spec('{"name": "a\nb"}'))$$, '22023', 'submit: name with a newline'),
	($$SELECT frameq.submit(fqadv.spec('{"name": "a\u0001b"}'))$$, '22023', 'submit: name with \x01'),
	($$SELECT frameq.submit(fqadv.spec('{"name": "shöt"}'))$$, '22023', 'submit: unicode name'),
	($$SELECT frameq.submit(fqadv.spec('{"name": "$(reboot)"}'))$$, '22023', 'submit: name with shell characters'),
	($$SELECT frameq.submit(fqadv.spec(jsonb_build_object('name', repeat('n', 201))))$$, '54000', 'submit: 201-character name'),
	($$SELECT frameq.submit(fqadv.spec(jsonb_build_object('name', repeat('n', 10485760))))$$, '54000', 'submit: 10 MB name'),
	($$SELECT frameq.submit(fqadv.spec('{"name": ["j"]}'))$$, '22023', 'submit: name an array'),
	($$SELECT frameq.submit(fqadv.spec('{"priority": 1e30}'))$$, '54000', 'submit: priority 1e30'),
	($$SELECT frameq.submit(fqadv.spec('{"priority": -1000001}'))$$, '22023', 'submit: priority -1000001'),
	($$SELECT frameq.submit(fqadv.spec('{"priority": 1.5}'))$$, '22023', 'submit: priority 1.5'),
	($$SELECT frameq.submit(fqadv.spec('{"priority": "1"}'))$$, '22023', 'submit: priority a string'),
	($$SELECT frameq.submit(fqadv.spec('{"max_retries": -1}'))$$, '22023', 'submit: max_retries -1'),
	($$SELECT frameq.submit(fqadv.spec('{"max_retries": 1001}'))$$, '54000', 'submit: max_retries 1001'),
	($$SELECT frameq.submit(fqadv.spec('{"max_cores": -1}'))$$, '22023', 'submit: max_cores -1'),
	($$SELECT frameq.submit(fqadv.spec('{"max_cores": 1e30}'))$$, '54000', 'submit: max_cores 1e30'),
	($$SELECT frameq.submit(fqadv.spec('{"max_cores": 0.001}'))$$, '22023', 'submit: max_cores 0.001'),
	($$SELECT frameq.submit(fqadv.spec('{"max_gpus": -1}'))$$, '22023', 'submit: max_gpus -1'),
	($$SELECT frameq.submit(fqadv.spec('{"max_gpus": 1000000}'))$$, '54000', 'submit: max_gpus 1e6'),
	($$SELECT frameq.submit(fqadv.spec('{"auto_eat": "yes"}'))$$, '22023', 'submit: auto_eat a string'),
	($$SELECT frameq.submit(fqadv.spec('{"paused": 1}'))$$, '22023', 'submit: paused a number')
) AS c(call, expected, label), LATERAL fqadv.expect('adv_admin', c.call, c.expected, c.label) r;

-- ----------------------------------------------------------- submit: layers
SELECT r FROM (VALUES
	($$SELECT frameq.submit(fqadv.spec(drop => '{layers}'))$$, '22023', 'submit: no layers'),
	($$SELECT frameq.submit(fqadv.spec('{"layers": []}'))$$, '22023', 'submit: empty layers'),
	($$SELECT frameq.submit(fqadv.spec('{"layers": {}}'))$$, '22023', 'submit: layers an object'),
	($$SELECT frameq.submit(fqadv.spec('{"layers": [1]}'))$$, '22023', 'submit: a layer that is a number'),
	($$SELECT frameq.submit(fqadv.spec('{"layers": [null]}'))$$, '22023', 'submit: a layer that is null'),
	($$SELECT frameq.submit(fqadv.spec(jsonb_build_object('layers', fqadv.layers(1001))))$$, '54000', 'submit: 1001 layers'),
	($$SELECT frameq.submit(fqadv.spec(layer => fqadv.obj(10000)))$$, '22023', 'submit: a layer with 10000 unknown fields'),
	($$SELECT frameq.submit(fqadv.spec(ldrop => '{name}'))$$, '22023', 'submit: layer without a name'),
	($$SELECT frameq.submit(fqadv.spec(layer => '{"name": ""}'))$$, '22023', 'submit: empty layer name'),
	($$SELECT frameq.submit(fqadv.spec(layer => '{"name": "l\u0001"}'))$$, '22023', 'submit: layer name with \x01'),
	($$SELECT frameq.submit(fqadv.spec(layer => '{"name": "l\n"}'))$$, '22023', 'submit: layer name with a newline'),
	($$SELECT frameq.submit(fqadv.spec(layer => jsonb_build_object('name', repeat('l', 10485760))))$$, '54000', 'submit: 10 MB layer name'),
	($$SELECT frameq.submit(fqadv.spec('{"layers": [{"name": "l", "command": "x", "range": "1"}, {"name": "l", "command": "x", "range": "1"}]}'))$$, '22023', 'submit: two layers of one name'),
	($$SELECT frameq.submit(fqadv.spec(ldrop => '{command}'))$$, '22023', 'submit: layer without a command'),
	($$SELECT frameq.submit(fqadv.spec(layer => '{"command": "   "}'))$$, '22023', 'submit: blank command'),
	($$SELECT frameq.submit(fqadv.spec(layer => '{"command": ["render"]}'))$$, '22023', 'submit: command an array'),
	($$SELECT frameq.submit(fqadv.spec(layer => jsonb_build_object('command', repeat('c', 65537))))$$, '54000', 'submit: command of 64 kB + 1'),
	($$SELECT frameq.submit(fqadv.spec(layer => jsonb_build_object('command', repeat('c', 10485760))))$$, '54000', 'submit: 10 MB command'),
	($$SELECT frameq.submit(fqadv.spec(layer => jsonb_build_object('command', repeat('#JOB#', 209715))))$$, '54000', 'submit: 1 MB command of #JOB#'),
	($$SELECT frameq.submit(fqadv.spec(jsonb_build_object('name', repeat('j', 200)), jsonb_build_object('command', repeat('#JOB#', 2000))))$$, '54000', 'submit: 10 kB command of #JOB# that expands to 400 kB'),
	($$SELECT frameq.submit(fqadv.spec(layer => jsonb_build_object('name', repeat('l', 100), 'command', repeat('#LAYER#', 1000))))$$, '54000', 'submit: 7 kB command of #LAYER# that expands to 100 kB'),
	($$SELECT frameq.submit(fqadv.spec(layer => jsonb_build_object('range', '123456789', 'command', repeat('#FRAME#', 9000))))$$, '54000', 'submit: 63 kB command of #FRAME# that expands to 81 kB'),
	($$SELECT frameq.submit(fqadv.spec(layer => jsonb_build_object('range', '123456789', 'command', repeat('#ZFRAME#', 8000))))$$, '54000', 'submit: 64 kB command of #ZFRAME# that expands to 72 kB')
) AS c(call, expected, label), LATERAL fqadv.expect('adv_admin', c.call, c.expected, c.label) r;

-- ------------------------------------------------- submit: ranges and resources
SELECT r FROM (VALUES
	($$SELECT frameq.submit(fqadv.spec(ldrop => '{range}'))$$, '22023', 'submit: layer without a range'),
	($$SELECT frameq.submit(fqadv.spec(layer => '{"range": ""}'))$$, '22023', 'submit: empty range'),
	($$SELECT frameq.submit(fqadv.spec(layer => '{"range": "abc"}'))$$, '22023', 'submit: range abc'),
	($$SELECT frameq.submit(fqadv.spec(layer => '{"range": "5-1"}'))$$, '22023', 'submit: range that ends before it starts'),
	($$SELECT frameq.submit(fqadv.spec(layer => '{"range": "1-10x0"}'))$$, '22023', 'submit: range step 0'),
	($$SELECT frameq.submit(fqadv.spec(layer => '{"range": "1-2000000"}'))$$, '54000', 'submit: 2000000 frames'),
	($$SELECT frameq.submit(fqadv.spec(layer => '{"range": "1,1"}'))$$, '22023', 'submit: a frame twice'),
	($$SELECT frameq.submit(fqadv.spec(layer => '{"range": "-2147483649"}'))$$, '22023', 'submit: frame number beyond int'),
	($$SELECT frameq.submit(fqadv.spec(layer => '{"range": 1}'))$$, '22023', 'submit: range a number'),
	($$SELECT frameq.submit(fqadv.spec(layer => jsonb_build_object('range', repeat('x', 1048576))))$$, '54000', 'submit: 1 MB range (past 262144 characters)'),
	($$SELECT frameq.submit(fqadv.spec(layer => '{"cores": 0}'))$$, '22023', 'submit: cores 0'),
	($$SELECT frameq.submit(fqadv.spec(layer => '{"cores": -1}'))$$, '22023', 'submit: cores -1'),
	($$SELECT frameq.submit(fqadv.spec(layer => '{"cores": 1e30}'))$$, '54000', 'submit: cores 1e30'),
	($$SELECT frameq.submit(fqadv.spec(layer => '{"cores": 0.001}'))$$, '22023', 'submit: cores 0.001'),
	($$SELECT frameq.submit(fqadv.spec(layer => '{"cores": "1"}'))$$, '22023', 'submit: cores a string'),
	($$SELECT frameq.submit(fqadv.spec(layer => '{"cores": 2, "cores_max": 1, "threadable": true}'))$$, '22023', 'submit: cores_max below cores'),
	($$SELECT frameq.submit(fqadv.spec(layer => '{"cores": 1, "cores_max": 2}'))$$, '22023', 'submit: cores_max above cores, not threadable'),
	($$SELECT frameq.submit(fqadv.spec(layer => '{"threadable": "true"}'))$$, '22023', 'submit: threadable a string'),
	($$SELECT frameq.submit(fqadv.spec(layer => '{"memory": -1}'))$$, '22023', 'submit: memory -1'),
	($$SELECT frameq.submit(fqadv.spec(layer => '{"memory": "abc"}'))$$, '22023', 'submit: memory abc'),
	($$SELECT frameq.submit(fqadv.spec(layer => '{"memory": "1e30 GB"}'))$$, '54000', 'submit: memory 1e30 GB (assumed)'),
	($$SELECT frameq.submit(fqadv.spec(layer => '{"memory": 2251799813685248}'))$$, '54000', 'submit: memory 2^51'),
	($$SELECT frameq.submit(fqadv.spec(layer => '{"memory": 1.5}'))$$, '22023', 'submit: memory 1.5 bytes'),
	($$SELECT frameq.submit(fqadv.spec(layer => '{"gpus": -1}'))$$, '22023', 'submit: gpus -1'),
	($$SELECT frameq.submit(fqadv.spec(layer => '{"gpus": 2147483647}'))$$, '54000', 'submit: gpus 2^31-1'),
	($$SELECT frameq.submit(fqadv.spec(layer => '{"gpu_memory": -1}'))$$, '22023', 'submit: gpu_memory -1'),
	($$SELECT frameq.submit(fqadv.spec(layer => '{"dispatch_order": 1e30}'))$$, '54000', 'submit: dispatch_order 1e30')
) AS c(call, expected, label), LATERAL fqadv.expect('adv_admin', c.call, c.expected, c.label) r;

-- ------------------------------------------------- submit: tags, limits, env
SELECT r FROM (VALUES
	($$SELECT frameq.submit(fqadv.spec(layer => '{"tags": "linux"}'))$$, '22023', 'submit: tags a string'),
	($$SELECT frameq.submit(fqadv.spec(layer => '{"tags": [1]}'))$$, '22023', 'submit: a tag that is a number'),
	($$SELECT frameq.submit(fqadv.spec(layer => '{"tags": [""]}'))$$, '22023', 'submit: empty tag'),
	($$SELECT frameq.submit(fqadv.spec(layer => '{"tags": [null]}'))$$, '22023', 'submit: a tag that is null'),
	($$SELECT frameq.submit(fqadv.spec(layer => jsonb_build_object('tags', (SELECT jsonb_agg('t' || i) FROM generate_series(1, 65) i))))$$, '54000', 'submit: 65 tags'),
	($$SELECT frameq.submit(fqadv.spec(layer => jsonb_build_object('tags', jsonb_build_array(repeat('t', 65)))))$$, '54000', 'submit: 65-character tag'),
	($$SELECT frameq.submit(fqadv.spec(layer => jsonb_build_object('tags', jsonb_build_array(repeat('t', 1048576)))))$$, '54000', 'submit: 1 MB tag'),
	($$SELECT frameq.submit(fqadv.spec(layer => '{"tags": ["a\nb"]}'))$$, '22023', 'submit: tag with a newline'),
	($$SELECT frameq.submit(fqadv.spec(layer => '{"limits": ["nosuchlimit"]}'))$$, '42704', 'submit: unknown limit'),
	($$SELECT frameq.submit(fqadv.spec(layer => jsonb_build_object('limits', jsonb_build_array(repeat('l', 10485760)))))$$, '42704', 'submit: 10 MB limit name'),
	($$SELECT frameq.submit(fqadv.spec(layer => jsonb_build_object('limits', (SELECT jsonb_agg(format('advlim%s', to_char(i, 'FM00'))) FROM generate_series(1, 13) i))))$$, '54000', 'submit: 13 limits'),
	($$SELECT frameq.submit(fqadv.spec(layer => '{"limits": [1]}'))$$, '22023', 'submit: a limit that is a number'),
	($$SELECT frameq.submit(fqadv.spec(layer => '{"env": "A=1"}'))$$, '22023', 'submit: env a string'),
	($$SELECT frameq.submit(fqadv.spec(layer => '{"env": ["A=1"]}'))$$, '22023', 'submit: env an array'),
	($$SELECT frameq.submit(fqadv.spec(layer => '{"env": {"A": 1}}'))$$, '22023', 'submit: env value a number'),
	($$SELECT frameq.submit(fqadv.spec(layer => '{"env": {"A": null}}'))$$, '22023', 'submit: env value null'),
	($$SELECT frameq.submit(fqadv.spec(layer => '{"env": {"1A": "x"}}'))$$, '22023', 'submit: env name starting with a digit'),
	($$SELECT frameq.submit(fqadv.spec(layer => '{"env": {"A B": "x"}}'))$$, '22023', 'submit: env name with a space'),
	($$SELECT frameq.submit(fqadv.spec(layer => '{"env": {"A\nB": "x"}}'))$$, '22023', 'submit: env name with a newline'),
	($$SELECT frameq.submit(fqadv.spec(layer => '{"env": {"A=B": "x"}}'))$$, '22023', 'submit: env name with ='),
	($$SELECT frameq.submit(fqadv.spec(layer => '{"env": {"": "x"}}'))$$, '22023', 'submit: empty env name'),
	($$SELECT frameq.submit(fqadv.spec(layer => jsonb_build_object('env', jsonb_build_object('A', fqadv.deep(1000)))))$$, '22023', 'submit: env value nested 1000 deep'),
	($$SELECT frameq.submit(fqadv.spec(layer => jsonb_build_object('env', fqadv.obj(257))))$$, '54000', 'submit: 257 env variables'),
	($$SELECT frameq.submit(fqadv.spec(layer => jsonb_build_object('env', fqadv.obj(10000))))$$, '54000', 'submit: 10000 env variables'),
	($$SELECT frameq.submit(fqadv.spec(layer => jsonb_build_object('env', fqadv.obj(1, 65537))))$$, '54000', 'submit: one env value of 64 kB + 1'),
	($$SELECT frameq.submit(fqadv.spec(layer => jsonb_build_object('env', fqadv.obj(10, 7000))))$$, '54000', 'submit: 10 env values of 7000 characters (70 kB)'),
	($$SELECT frameq.submit(fqadv.spec(layer => jsonb_build_object('env', jsonb_build_object(repeat('E', 10485760), 'x'))))$$, '54000', 'submit: 10 MB env name')
) AS c(call, expected, label), LATERAL fqadv.expect('adv_admin', c.call, c.expected, c.label) r;

-- ----------------------------------------------------------------- set_job
SELECT r FROM (VALUES
	($$SELECT frameq.set_job(NULL, 1)$$, '22004', 'set_job: NULL job'),
	($$SELECT frameq.set_job(-1, 1)$$, '42704', 'set_job: job -1'),
	($$SELECT frameq.set_job(9223372036854775807, 1)$$, '42704', 'set_job: job 2^63-1'),
	($$SELECT frameq.set_job('abc', 1)$$, '22P02', 'set_job: job not a number'),
	($$SELECT frameq.set_job({job1}, 1000001)$$, '54000', 'set_job: priority 1000001'),
	($$SELECT frameq.set_job({job1}, -2147483648)$$, '22023', 'set_job: priority -2^31'),
	($$SELECT frameq.set_job({job1}, max_cores => -1)$$, '22023', 'set_job: max_cores -1'),
	($$SELECT frameq.set_job({job1}, max_cores => 'NaN')$$, '22023', 'set_job: max_cores NaN'),
	($$SELECT frameq.set_job({job1}, max_cores => 1e30)$$, '54000', 'set_job: max_cores 1e30'),
	($$SELECT frameq.set_job({job1}, max_gpus => -1)$$, '22023', 'set_job: max_gpus -1'),
	($$SELECT frameq.set_job({job1}, max_gpus => 2147483647)$$, '54000', 'set_job: max_gpus 2^31-1'),
	($$SELECT frameq.set_job({job1}, clear_caps => NULL)$$, '22004', 'set_job: NULL clear_caps (assumed)')
) AS c(call, expected, label), LATERAL fqadv.expect('adv_admin', c.call, c.expected, c.label) r;

-- ------------------------------ kill_frame, retry_frame, eat_frame, kill_job
SELECT r FROM (VALUES
	($$SELECT frameq.kill_frame(NULL, 'why')$$, '22004', 'kill_frame: NULL frame'),
	($$SELECT frameq.kill_frame({frame3}, NULL)$$, '22004', 'kill_frame: NULL reason'),
	($$SELECT frameq.kill_frame({frame3}, '')$$, '22023', 'kill_frame: empty reason'),
	($$SELECT frameq.kill_frame({frame3}, repeat('r', 501))$$, '54000', 'kill_frame: 501-character reason'),
	($$SELECT frameq.kill_frame({frame3}, repeat('r', 10485760))$$, '54000', 'kill_frame: 10 MB reason'),
	($$SELECT frameq.kill_frame(-1, 'why')$$, '42704', 'kill_frame: frame -1'),
	($$SELECT frameq.kill_frame(9223372036854775807, 'why')$$, '42704', 'kill_frame: frame 2^63-1'),
	($$SELECT frameq.kill_frame('x', 'why')$$, '22P02', 'kill_frame: frame not a number'),
	($$SELECT frameq.retry_frame(NULL)$$, '22004', 'retry_frame: NULL frame'),
	($$SELECT frameq.retry_frame(-1)$$, '42704', 'retry_frame: frame -1'),
	($$SELECT frameq.retry_frame(0)$$, '42704', 'retry_frame: frame 0'),
	($$SELECT frameq.eat_frame(NULL)$$, '22004', 'eat_frame: NULL frame'),
	($$SELECT frameq.eat_frame(-1)$$, '42704', 'eat_frame: frame -1'),
	($$SELECT frameq.eat_frame(9223372036854775807)$$, '42704', 'eat_frame: frame 2^63-1'),
	($$SELECT frameq.kill_job(NULL, 'why')$$, '22004', 'kill_job: NULL job'),
	($$SELECT frameq.kill_job({job1}, NULL)$$, '22004', 'kill_job: NULL reason'),
	($$SELECT frameq.kill_job({job1}, '')$$, '22023', 'kill_job: empty reason'),
	($$SELECT frameq.kill_job({job1}, repeat('r', 10485760))$$, '54000', 'kill_job: 10 MB reason'),
	($$SELECT frameq.kill_job(-1, 'why')$$, '42704', 'kill_job: job -1')
) AS c(call, expected, label), LATERAL fqadv.expect('adv_admin', c.call, c.expected, c.label) r;

-- ---------------------- frameq_submit: bad input on its show, and other shows
SELECT r FROM (VALUES
	($$SELECT frameq.submit(fqadv.spec('{"show": "advshow.g", "name": "a b"}'))$$, '22023', 'submit: granted show, name with a space'),
	($$SELECT frameq.submit(fqadv.spec('{"show": "advshow.g"}', jsonb_build_object('command', repeat('#JOB#', 209715))))$$, '54000', 'submit: granted show, 1 MB command of #JOB#'),
	($$SELECT frameq.submit(fqadv.spec('{"show": "advshow.g"}', jsonb_build_object('env', fqadv.obj(257))))$$, '54000', 'submit: granted show, 257 env variables'),
	($$SELECT frameq.submit(fqadv.spec('{"show": "advshow.g", "folder": "advfolder"}'))$$, '42704', 'submit: granted show, folder of another show'),
	($$SELECT frameq.submit(fqadv.spec('{"show": "advshow.g"}', '{"range": "1-2000000"}'))$$, '54000', 'submit: granted show, 2000000 frames'),
	($$SELECT frameq.set_job({jobg}, 2000000)$$, '54000', 'set_job: granted show, priority 2000000'),
	($$SELECT frameq.set_job({jobg}, max_cores => -1)$$, '22023', 'set_job: granted show, max_cores -1'),
	($$SELECT frameq.kill_frame({frameg}, '')$$, '22023', 'kill_frame: granted show, empty reason'),
	($$SELECT frameq.kill_frame({frameg}, NULL)$$, '22004', 'kill_frame: granted show, NULL reason'),
	($$SELECT frameq.kill_job({jobg}, NULL)$$, '22004', 'kill_job: granted show, NULL reason'),
	($$SELECT frameq.kill_job({jobg}, repeat('r', 10485760))$$, '54000', 'kill_job: granted show, 10 MB reason'),
	($$SELECT frameq.submit(fqadv.spec())$$, '42501', 'submit: show not granted'),
	($$SELECT frameq.submit(fqadv.spec('{"name": "a b"}'))$$, '42501', 'submit: show not granted, bad name too'),
	($$SELECT frameq.set_job({job1}, 1)$$, '42501', 'set_job: job of a show not granted'),
	($$SELECT frameq.set_job({job1}, paused => true)$$, '42501', 'set_job: pause a job of a show not granted'),
	($$SELECT frameq.kill_frame({frame3}, 'why')$$, '42501', 'kill_frame: frame of a show not granted'),
	($$SELECT frameq.kill_frame({frame1}, 'why')$$, '42501', 'kill_frame: running frame of a show not granted'),
	($$SELECT frameq.retry_frame({frame1})$$, '42501', 'retry_frame: frame of a show not granted'),
	($$SELECT frameq.eat_frame({frame3})$$, '42501', 'eat_frame: frame of a show not granted'),
	($$SELECT frameq.kill_job({job1}, 'why')$$, '42501', 'kill_job: job of a show not granted')
) AS c(call, expected, label), LATERAL fqadv.expect('adv_submit', c.call, c.expected, c.label) r;

SELECT * FROM fqadv.summary();
SELECT * FROM finish();
ROLLBACK;
