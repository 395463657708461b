/*
 * A host's credentials have a life cycle (doc/security.md): a rotated
 * token replaces the old one at commit, and nothing else about the host
 * changes; a retired host leaves the farm (only once nothing of it is
 * live), its name and token stop working, its runs stay in the history,
 * and the name can be registered again as a new host.
 */
BEGIN;
\ir include/helpers.psql

SELECT plan(26);

SELECT * FROM fqtest.farm('t49', cores => '{2}', memory => '{8589934592}') \gset
SELECT frameq.submit('{"show": "t49show", "name": "j",
	"layers": [{"name": "l", "command": "c", "range": "1-4"}]}') AS job \gset
SELECT proc AS p1 FROM frameq.reserve('t49-h1', :'tok1', :epoch1, 1) \gset

/* rotation */
SELECT frameq.rotate_host_token('t49-h1') AS tok2 \gset
SELECT isnt(:'tok2'::text, :'tok1'::text, 'rotate_host_token returns a new token');
SELECT throws_ok(format('SELECT frameq.heartbeat(%L, %L, %s, ARRAY[%s]::bigint[])', 't49-h1', :'tok1', :epoch1, :p1),
	'28P01', NULL, 'the old token no longer works');
SELECT lives_ok(format('SELECT frameq.heartbeat(%L, %L, %s, ARRAY[%s]::bigint[])', 't49-h1', :'tok2', :epoch1, :p1),
	'the new token works under the same lease epoch');
SELECT is((SELECT (epoch, state) FROM frameq.host WHERE id = :host1), (:epoch1::bigint, 'up'::text),
	'rotation leaves the epoch and the state alone');
SELECT is((SELECT state FROM frameq.proc WHERE id = :p1), 'running', 'and the host''s proc runs on');
SELECT * FROM fqtest.refuses($$SELECT frameq.rotate_host_token('t49-nope')$$, '42704', NULL,
	'rotating the token of an unknown host is refused');
SELECT * FROM fqtest.refuses('SELECT frameq.rotate_host_token(NULL)', '22004', NULL,
	'rotating the token of a null host is refused');

/* retirement waits for the host's work */
SELECT * FROM fqtest.refuses($$SELECT frameq.retire_host('t49-h1')$$, '55006',
	'host "t49-h1" still has 1 live proc(s)', 'a host with a live proc cannot retire');
SELECT is(frameq.complete('t49-h1', :'tok2', :epoch1, :p1, 0), 'accepted', 'its render completes');
SELECT lives_ok($$SELECT frameq.retire_host('t49-h1')$$, 'then the host retires');
SELECT ok((SELECT retired_at IS NOT NULL AND state = 'down' AND lease_expires_at IS NULL
			 FROM frameq.host WHERE id = :host1), 'it is marked retired, down, without a lease');
SELECT throws_ok(format('SELECT frameq.attach(%L, %L, %L)', 't49-h1', :'tok2', 'boot-1'), '42704', NULL,
	'a retired host''s name and token no longer attach');
SELECT throws_ok(format('SELECT * FROM frameq.reserve(%L, %L, %s)', 't49-h1', :'tok2', :epoch1), '42704', NULL,
	'nor book');
SELECT throws_ok(format('SELECT frameq.complete(%L, %L, %s, %s, 0)', 't49-h1', :'tok2', :epoch1, :p1), '42704', NULL,
	'nor report');
SELECT throws_ok($$SELECT frameq.set_host_state('t49-h1', 'up')$$, '42704', NULL,
	'an operator cannot bring a retired host back up by its name');
SELECT is((SELECT count(*) FROM frameq.runs WHERE host = 't49-h1'), 1::bigint, 'its run stays in the history');

/* the name again, as a new host */
SELECT frameq.register_host('t49-h1', 't49.pool', 4, 8589934592) AS tok3 \gset
SELECT id AS h2 FROM frameq.host WHERE name = 't49-h1' AND retired_at IS NULL \gset
SELECT isnt(:h2, :host1, 'the name is registered again as a new host');
SELECT epoch AS epoch2 FROM frameq.attach('t49-h1', :'tok3', 'boot-9') \gset
SELECT is((SELECT count(*) FROM frameq.reserve('t49-h1', :'tok3', :epoch2, 10)), 3::bigint,
	'the new host books the job''s three waiting frames');
SELECT is((SELECT count(DISTINCT r.host) FROM frameq.run r WHERE r.job = :job), 2::bigint,
	'the job''s runs name both hosts: the retired one and the new one');
SELECT throws_ok($$SELECT frameq.retire_host('t49-nope')$$, '42704', NULL, 'retiring an unknown host is refused');
SELECT * FROM fqtest.refuses(format('SELECT frameq.retire_host(%L)', repeat('x', 1000000)), '42704',
	'host "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx..." is not registered',
	'an unknown 1 MB host name is quoted clipped');

SELECT is_empty('SELECT * FROM frameq.check()', 'check() is clean');

SELECT * FROM finish();
ROLLBACK;
