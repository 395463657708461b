/*
 * The trust boundary on the lock side (doc/security.md), what one session
 * can see of it:
 *  - reserve() hands each booking its run secret, frameq._run_secret(proc);
 *  - owns() without the right secret is false and locks nothing; with it,
 *    it is true and fences the proc row (KEY SHARE);
 *  - complete() naming another host's proc answers 'stale' and locks
 *    nothing;
 *  - the ledger's rebuild leaves the reader of ledger(), frameq.usage or
 *    check() with nothing stronger than AccessShareLock on frameq.proc;
 *  - the host lock is not an advisory lock SQL can name;
 *  - messages quote at most 64 characters of a host name;
 *  - a retired host's name and token stop working.
 *
 * A row lock taken by this transaction shows as the row's xmax (a row
 * this transaction inserted has xmax 0 until something locks or deletes
 * it), so "locks nothing" is asserted as xmax = 0.
 */
BEGIN;
\ir include/helpers.psql

SELECT plan(28);

SELECT * FROM fqtest.farm('t41', cores => '{8,8}') \gset
SELECT frameq.submit($${"show": "t41show", "name": "j",
	"layers": [{"name": "l", "command": "c", "range": "1-5"}]}$$) AS job \gset

-- ------------------------------------------------------------ run secrets

CREATE TEMP TABLE booked ON COMMIT DROP AS SELECT * FROM frameq.reserve('t41-h1', :'tok1', :epoch1, 2);
SELECT is((SELECT count(*)::int FROM booked), 2, 'h1 books two frames');
SELECT is((SELECT count(*)::int FROM booked WHERE run_secret = frameq._run_secret(proc)), 2,
		  'each booking carries its run secret, frameq._run_secret(proc)');
SELECT ok((SELECT bool_and(run_secret ~ '^[0-9a-f]{32}$') FROM booked),
		  'a run secret is 32 hex digits');
SELECT isnt((SELECT min(run_secret) FROM booked), (SELECT max(run_secret) FROM booked),
			'two procs have two secrets');
SELECT proc AS p1, run_secret AS s1 FROM booked ORDER BY frame_number LIMIT 1 \gset
SELECT proc AS p2 FROM booked ORDER BY frame_number DESC LIMIT 1 \gset

SELECT is((SELECT has_table_privilege('frameq_reader', 'frameq.run_secret_key', 'SELECT')), false,
		  'frameq_reader cannot read the run secret key');
SELECT is((SELECT has_function_privilege('frameq_agent', 'frameq._run_secret(bigint)', 'EXECUTE')), false,
		  'frameq_agent cannot compute run secrets');

-- ------------------------------------------------------------------ owns()

SELECT is((SELECT xmax::text FROM frameq.proc WHERE id = :p1), '0', 'the proc row starts unlocked');
SELECT is(frameq.owns(:p1), false, 'owns() without a secret is false');
SELECT is(frameq.owns(:p1, 'deadbeefdeadbeefdeadbeefdeadbeef'), false, 'owns() with a wrong secret is false');
SELECT is(frameq.owns(:p1, :'s1' || 'x'), false, 'owns() with the secret and more is false');
SELECT is(frameq.owns(:p2, :'s1'), false, 'owns() with another proc''s secret is false');
SELECT is((SELECT xmax::text FROM frameq.proc WHERE id = :p1), '0', '... and none of them locked the row');
SET LOCAL ROLE frameq_reader;
SELECT is(frameq.owns(:p1), false, 'owns() by frameq_reader without the secret is false');
RESET ROLE;
SELECT is((SELECT xmax::text FROM frameq.proc WHERE id = :p1), '0', '... and locks nothing');
SELECT is(frameq.owns(:p1, :'s1'), true, 'owns() with the proc''s own secret is true');
SELECT isnt((SELECT xmax::text FROM frameq.proc WHERE id = :p1), '0', '... and fences the proc row');
SELECT is(frameq.owns(12345678901, frameq._run_secret(12345678901)), false,
		  'owns() of a proc that does not exist is false');

-- --------------------------------------------- complete() of another host

SELECT is(frameq.complete('t41-h2', :'tok2', :epoch2, :p2, 0), 'stale',
		  'h2 completing h1''s proc is stale');
SELECT is((SELECT xmax::text FROM frameq.proc WHERE id = :p2), '0', '... and locked nothing of it');
SELECT is(frameq.complete('t41-h1', :'tok1', :epoch1 + 1, :p2, 0), 'stale',
		  'h1 completing its proc under another epoch is stale');
SELECT is((SELECT xmax::text FROM frameq.proc WHERE id = :p2), '0', '... and locked nothing either');

-- ------------------------------------------------------------- host lock

SELECT is(frameq._lock_host(:host1, 0), true, 'the host lock can be taken');
SELECT is((SELECT count(*)::int FROM pg_locks
			WHERE locktype = 'advisory' AND pid = pg_backend_pid()
			  AND classid = 18001 AND objid = :host1 AND objsubid NOT IN (1, 2)),
		  1, 'it is an advisory tag no pg_advisory_* function can name (field 4 is not 1 or 2)');

-- -------------------------------------------------------- clipped names

SELECT fqtest.throws_like(format($$SELECT frameq.attach(%L, 'x', 'b')$$, repeat('n', 100000)),
						  '42704', 'host "' || repeat('n', 64) || '..." is not registered',
						  'attach quotes at most 64 characters of an unknown name');
SELECT fqtest.throws_like(format($$SELECT * FROM frameq.reserve(%L, 'x', 1)$$, repeat('r', 100000)),
						  '42704', 'host "' || repeat('r', 64) || '..." is not registered',
						  'reserve quotes at most 64 characters of an unknown name');

-- ---------------------------------------------------------- retired hosts

UPDATE frameq.host SET retired_at = clock_timestamp() WHERE name = 't41-h2';
SELECT fqtest.throws_like(format($$SELECT * FROM frameq.reserve('t41-h2', %L, %s)$$, :'tok2', :epoch2),
						  '42704', 'host "t41-h2" is not registered',
						  'a retired host''s name and token no longer book');

-- ------------------------------- a booking type older or newer than the library

ALTER TYPE frameq.booking DROP ATTRIBUTE run_secret;
SELECT is((SELECT count(*)::int FROM frameq.reserve('t41-h1', :'tok1', :epoch1, 1)), 1,
		  'without run_secret in frameq.booking, reserve() still books');
ALTER TYPE frameq.booking ADD ATTRIBUTE run_secret text;
SELECT is((SELECT run_secret = frameq._run_secret(proc) FROM frameq.reserve('t41-h1', :'tok1', :epoch1, 1)), true,
		  'with run_secret after a dropped attribute, reserve() fills it by name');

SELECT * FROM finish();
ROLLBACK;
