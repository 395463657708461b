/*
 * Issue 16, set_job(job, changes jsonb): every job field, checked as
 * submit checks it (the field named, SQLSTATE, nothing changed), JSON null
 * giving the default, a field left out left as it is; the positional
 * set_job still works through it; pausing a finished job is refused.
 */
BEGIN;
\ir include/helpers.psql

SELECT plan(59);

SELECT * FROM fqtest.farm('t61', cores => '{8}') \gset
SELECT frameq.submit($${"show": "t61show", "name": "j",
	"layers": [{"name": "a", "command": "c #FRAME#", "range": "1-10"}]}$$) AS job \gset
CREATE FUNCTION pg_temp.job() RETURNS text LANGUAGE sql AS $$
	SELECT format('%s', (j.priority, j.max_retries, j.auto_eat, j.max_cc, j.max_gpus, j.state, j.timeout,
						 j.timeout_no_output, j.requeue_exit_codes, j.requeue_delay, j.max_requeues,
						 j.retry_delay, j.host_failure_limit, j.max_dead_frames))
	  FROM frameq.job j WHERE j.name = 'j' $$;
CREATE FUNCTION pg_temp.set(changes text) RETURNS text LANGUAGE sql AS $$
	SELECT format('SELECT frameq.set_job(%s, %L::jsonb)', (SELECT max(id) FROM frameq.job WHERE name = 'j'),
				  changes) $$;

SELECT is(pg_temp.job(), '(0,3,f,,,active,,,,,,,,)', 'submit''s defaults');

/* 1: every field */
SELECT lives_ok(pg_temp.set($${"priority": 50, "max_retries": 7, "auto_eat": true, "max_cores": 4.5,
	"max_gpus": 2, "timeout": "3h", "timeout_no_output": "10m", "requeue_exit_codes": [75],
	"requeue_delay": 90, "max_requeues": 4, "retry_delay": "30s", "host_failure_limit": 0,
	"max_dead_frames": 12}$$), 'every field at once');
SELECT is(pg_temp.job(), '(50,7,t,450,2,active,10800,600,{75},90,4,30,0,12)', 'each stored as submit stores it');
SELECT lives_ok(pg_temp.set('{"priority": -5}'), 'one field');
SELECT is(pg_temp.job(), '(-5,7,t,450,2,active,10800,600,{75},90,4,30,0,12)', 'the others left as they were');
SELECT lives_ok(pg_temp.set('{"paused": true}'), 'paused');
SELECT is((SELECT state FROM frameq.job WHERE id = :job), 'paused', 'the job is paused');
SELECT lives_ok(pg_temp.set('{"paused": false}'), 'resumed');
SELECT is((SELECT state FROM frameq.job WHERE id = :job), 'active', 'the job is active');
SELECT is((SELECT count(*)::int FROM frameq.check()), 0, 'check() is clean');

/* 2: null gives the default */
SELECT lives_ok(pg_temp.set($${"priority": null, "max_retries": null, "auto_eat": null, "max_cores": null,
	"max_gpus": null, "timeout": null, "timeout_no_output": null, "requeue_exit_codes": null,
	"requeue_delay": null, "max_requeues": null, "retry_delay": null, "host_failure_limit": null,
	"max_dead_frames": null}$$), 'null for every field');
SELECT is(pg_temp.job(), '(0,3,f,,,active,,,,,,,,)', 'submit''s defaults again');
SELECT lives_ok(pg_temp.set('{"paused": true}'), 'paused again');
SELECT lives_ok(pg_temp.set('{"paused": null}'), 'paused null');
SELECT is((SELECT state FROM frameq.job WHERE id = :job), 'active', 'null paused is the default: not paused');

/* 3: validation */
SELECT pg_temp.job() AS before \gset
SELECT * FROM fqtest.refuses(pg_temp.set('"x"'), '22023', 'changes must be a JSON object', 'not an object');
SELECT * FROM fqtest.refuses(pg_temp.set('{"name": "x"}'), '22023', 'changes.name is not a known field%',
	'an unknown field');
SELECT * FROM fqtest.refuses(pg_temp.set('{"priority": 2000000}'), '54000', 'changes.priority must be a whole number%',
	'priority past its bound');
SELECT * FROM fqtest.refuses(pg_temp.set('{"priority": "high"}'), '22023', 'changes.priority must be a number',
	'priority not a number');
SELECT * FROM fqtest.refuses(pg_temp.set('{"max_retries": -1}'), '22023', 'changes.max_retries%',
	'negative max_retries');
SELECT * FROM fqtest.refuses(pg_temp.set('{"auto_eat": 1}'), '22023', 'changes.auto_eat must be a boolean',
	'auto_eat not a boolean');
SELECT * FROM fqtest.refuses(pg_temp.set('{"max_cores": -1}'), '22023', 'changes.max_cores must be zero or more%',
	'negative max_cores');
SELECT * FROM fqtest.refuses(pg_temp.set('{"max_cores": 1.234}'), '22023', 'changes.max_cores must be a multiple%',
	'max_cores with three decimals');
SELECT * FROM fqtest.refuses(pg_temp.set('{"max_gpus": 200000}'), '54000', 'changes.max_gpus%',
	'max_gpus past its bound');
SELECT * FROM fqtest.refuses(pg_temp.set('{"timeout": "1x"}'), '22023', 'changes.timeout must be a duration%',
	'a malformed timeout');
SELECT * FROM fqtest.refuses(pg_temp.set('{"timeout_no_output": 99999999}'), '54000',
	'changes.timeout_no_output is too large%', 'timeout_no_output past its bound');
SELECT * FROM fqtest.refuses(pg_temp.set('{"requeue_exit_codes": [3, 3]}'), '22023',
	'changes.requeue_exit_codes lists an exit status more than once', 'a repeated exit code');
SELECT * FROM fqtest.refuses(pg_temp.set('{"requeue_delay": "-"}'), '22023', 'changes.requeue_delay%',
	'a malformed requeue_delay');
SELECT * FROM fqtest.refuses(pg_temp.set('{"max_requeues": 1001}'), '54000', 'changes.max_requeues%',
	'max_requeues past its bound');
SELECT * FROM fqtest.refuses(pg_temp.set('{"host_failure_limit": 1001}'), '54000', 'changes.host_failure_limit%',
	'host_failure_limit past its bound');
SELECT * FROM fqtest.refuses(pg_temp.set('{"max_dead_frames": 0}'), '22023', 'changes.max_dead_frames%',
	'max_dead_frames of 0');
SELECT * FROM fqtest.refuses('SELECT frameq.set_job(-7, ''{}''::jsonb)', '42704', 'job -7 does not exist',
	'an unknown job');
SELECT is(pg_temp.job(), :'before', 'no refused change touched the job');

/* 4: the positional form, through the same owner */
SELECT lives_ok(format('SELECT frameq.set_job(%s, priority => 9, max_cores => 2)', :job), 'positional');
SELECT is((SELECT (priority, max_cc)::text FROM frameq.job WHERE id = :job), '(9,200)', 'applied');
SELECT lives_ok(format('SELECT frameq.set_job(%s, clear_caps => true)', :job), 'clear_caps');
SELECT is((SELECT (priority, max_cc, max_gpus)::text FROM frameq.job WHERE id = :job), '(9,,)', 'caps cleared');

SELECT is(fqtest.attempt(format('SELECT frameq.set_job(%s, ''{"priority": 1}'')', :job)), '22P02',
	'an untyped literal goes to the positional form, as a priority (documented: cast it to jsonb)');
SELECT lives_ok(format('SELECT frameq.set_job(%s, changes => ''{"priority": 1}'')', :job),
	'or name the argument');

/* 5: a finished job: fields yes, pause no; a killed one likewise */
UPDATE frameq.job SET state = 'finished' WHERE id = :job;
SELECT * FROM fqtest.refuses(pg_temp.set('{"paused": true}'), '55000', 'job % is finished: it cannot be paused%',
	'a finished job is not paused');
SELECT lives_ok(pg_temp.set('{"max_retries": 5}'), 'a finished job''s other fields may change');

SELECT * FROM finish();
ROLLBACK;
