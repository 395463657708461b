/*
 * The background worker's SQL steps, called directly (src/worker.c runs
 * them once a round; the worker itself is tested from outside a
 * transaction).
 *
 *	frameq._expire_leases(since): a host whose last renewal (or "since",
 *	  the server's start or last clock jump, if later) is more than
 *	  frameq.lease_period() = lease_ttl * (1 + clock_drift) + lease_margin
 *	  old loses its lease: its procs are released as host_lost (into
 *	  waiting, or a kill order's wanted state, without a retry), its epoch
 *	  moves on, its lease is cleared, and it is marked down with
 *	  down_reason lease_lost (a host the operator had taken down or put in
 *	  repair stays as the operator left it).  Not a moment before.
 *	frameq._send_kills(resend_ms): stamps kill_sent_at on every kill order
 *	  never sent or not sent for resend_ms, and nothing else.
 *	frameq._rearm_leases(): every current lease runs lease_ttl from now.
 *
 * The boundary is placed by moving last_renewal_at as superuser.  Hosts and
 * kill orders of other tests, if any are committed, are set aside inside
 * this transaction so that the counts these steps return are this file's.
 */
BEGIN;
\ir include/helpers.psql

SELECT plan(42);

UPDATE frameq.host SET last_renewal_at = clock_timestamp() + interval '1 hour' WHERE lease_expires_at IS NOT NULL;
UPDATE frameq.proc SET kill_sent_at = clock_timestamp() + interval '1 hour' WHERE state = 'killing';

SELECT frameq.create_allocation('t26.pool') AS alloc \gset
SELECT frameq.create_show('t26show') AS show \gset
SELECT frameq.set_subscription('t26show', 't26.pool', 100, 100) \g /dev/null
SELECT frameq.register_host(h, 't26.pool', 4, 8589934592) FROM unnest(ARRAY['t26-a', 't26-b', 't26-c', 't26-d', 't26-e', 't26-f']) h \g /dev/null
/* brevity, not practice: the six hosts are re-keyed to one token */
SELECT 't26-secret' AS tok \gset
UPDATE frameq.host SET token_hash = sha256(convert_to(:'tok', 'UTF8')) WHERE name LIKE 't26-%';
SELECT frameq.attach(h, :'tok', 'boot-1') FROM unnest(ARRAY['t26-a', 't26-b', 't26-c', 't26-d', 't26-f']) h \g /dev/null
SELECT current_setting('frameq.lease_ttl')::interval AS ttl \gset
SELECT frameq.lease_period() AS period \gset

SELECT frameq.submit($${"show": "t26show", "name": "t26-job", "max_retries": 0,
	"layers": [{"name": "l", "command": "c", "range": "1-20"}]}$$) AS job \gset
CREATE TEMP TABLE b ON COMMIT DROP AS
SELECT 'a1'::text AS k, * FROM frameq.reserve('t26-a', :'tok', 1, 1);
INSERT INTO b SELECT 'a2', * FROM frameq.reserve('t26-a', :'tok', 1, 1);
INSERT INTO b SELECT 'b1', * FROM frameq.reserve('t26-b', :'tok', 1, 1);
INSERT INTO b SELECT 'b2', * FROM frameq.reserve('t26-b', :'tok', 1, 1);
INSERT INTO b SELECT 'c1', * FROM frameq.reserve('t26-c', :'tok', 1, 1);
INSERT INTO b SELECT 'd1', * FROM frameq.reserve('t26-d', :'tok', 1, 1);
INSERT INTO b SELECT 'f1', * FROM frameq.reserve('t26-f', :'tok', 1, 1);
SELECT proc AS pa1, frame AS fa1 FROM b WHERE k = 'a1' \gset
SELECT proc AS pa2, frame AS fa2 FROM b WHERE k = 'a2' \gset
SELECT proc AS pb1, frame AS fb1 FROM b WHERE k = 'b1' \gset
SELECT proc AS pb2, frame AS fb2 FROM b WHERE k = 'b2' \gset
SELECT proc AS pc1, frame AS fc1 FROM b WHERE k = 'c1' \gset
SELECT proc AS pd1, frame AS fd1 FROM b WHERE k = 'd1' \gset
SELECT proc AS pf1, frame AS ff1 FROM b WHERE k = 'f1' \gset
SELECT frameq.kill_frame(:fa2, 'bad render') \g /dev/null
SELECT frameq.set_host_state('t26-c', 'down') \g /dev/null
SELECT frameq.set_host_state('t26-d', 'repair') \g /dev/null

SELECT is(frameq.lease_period(),
		  current_setting('frameq.lease_ttl')::interval * (1 + current_setting('frameq.clock_drift')::float8)
		  + current_setting('frameq.lease_margin')::interval,
		  'lease_period() is lease_ttl * (1 + clock_drift) + lease_margin');
SELECT cmp_ok(frameq.lease_period(), '>', :'ttl'::interval, 'and longer than lease_ttl');

-- ------------------------------------------------------------- the boundary

/* a: 1 ms past the period; b: 1 s short of it; f: past lease_ttl but within the period; c, d: past it */
UPDATE frameq.host SET last_renewal_at = clock_timestamp() - frameq.lease_period() - interval '1 millisecond' WHERE name = 't26-a';
UPDATE frameq.host SET last_renewal_at = clock_timestamp() - frameq.lease_period() + interval '1 second' WHERE name = 't26-b';
UPDATE frameq.host SET last_renewal_at = clock_timestamp() - :'ttl'::interval - interval '1 second' WHERE name = 't26-f';
UPDATE frameq.host SET last_renewal_at = clock_timestamp() - frameq.lease_period() - interval '1 second' WHERE name IN ('t26-c', 't26-d');
SELECT string_agg(format('%s %s %s', name, epoch, lease_expires_at), ',' ORDER BY name) AS leases_bf
  FROM frameq.host WHERE name IN ('t26-b', 't26-f') \gset

SELECT is(frameq._expire_leases('-infinity'), 3::bigint, '_expire_leases releases the three hosts past the lease period');
SELECT results_eq($$SELECT name, state, down_reason, epoch, lease_expires_at IS NULL FROM frameq.host WHERE name LIKE 't26-%' ORDER BY name$$,
				  $$VALUES ('t26-a', 'down', 'lease_lost', 2::bigint, true),
						   ('t26-b', 'up', NULL, 1, false),
						   ('t26-c', 'down', 'operator', 2, true),
						   ('t26-d', 'repair', 'operator', 2, true),
						   ('t26-e', 'up', NULL, 0, true),
						   ('t26-f', 'up', NULL, 1, false)$$,
				  'a is down for lease loss at epoch 2; c and d keep the operator''s state; b (1 s short), f (past the ttl only) and e (never attached) are untouched');
SELECT is((SELECT string_agg(format('%s %s %s', name, epoch, lease_expires_at), ',' ORDER BY name) FROM frameq.host WHERE name IN ('t26-b', 't26-f')),
		  :'leases_bf', 'b and f keep their epoch and their lease to the microsecond');
SELECT results_eq(format($$SELECT f.id, f.state, f.retries, f.attempts, r.reason, r.end_state FROM frameq.frame f JOIN frameq.run r ON r.frame = f.id
						   WHERE r.proc IN (%s, %s, %s, %s) ORDER BY f.id$$, :pa1, :pa2, :pc1, :pd1),
				  format($$SELECT * FROM (VALUES (%s::bigint, 'waiting', 0, 1, 'host_lost', 'waiting'),
												(%s, 'dead', 0, 1, 'host_lost', 'dead'),
												(%s, 'waiting', 0, 1, 'host_lost', 'waiting'),
												(%s, 'waiting', 0, 1, 'host_lost', 'waiting')) v ORDER BY 1$$, :fa1, :fa2, :fc1, :fd1),
				  'their procs are released as host_lost: the running ones back to waiting, the kill order dead as wanted, no retry used');
SELECT is((SELECT count(*)::int FROM frameq.proc WHERE id IN (:pa1, :pa2, :pc1, :pd1)), 0, 'none of their procs is left');
SELECT results_eq($$SELECT name, idle_cc FROM frameq.host WHERE name IN ('t26-a', 't26-c', 't26-d') ORDER BY name$$,
				  $$VALUES ('t26-a', 400), ('t26-c', 400), ('t26-d', 400)$$, 'their cores are free');
SELECT results_eq(format($$SELECT id, state, frameq.owns(id, frameq._run_secret(id)) FROM frameq.proc WHERE id IN (%s, %s, %s) ORDER BY id$$, :pb1, :pb2, :pf1),
				  format($$SELECT x, 'running', true FROM unnest(ARRAY[%s, %s, %s]::bigint[]) x ORDER BY x$$, :pb1, :pb2, :pf1),
				  'the procs of b and f are untouched');
SELECT is(frameq._expire_leases('-infinity'), 0::bigint, 'called again at once, _expire_leases finds nothing more');

SELECT * FROM fqtest.refuses(format($$SELECT frameq.heartbeat('t26-a', %L, 1, ARRAY[%s]::bigint[])$$, :'tok', :pa1), 'FQ001', NULL,
	'the expired host''s agent cannot renew under its old epoch (FQ001)');
SELECT * FROM fqtest.refuses(format($$SELECT * FROM frameq.reserve('t26-a', %L, 1)$$, :'tok'), 'FQ001', NULL,
	'nor book under it (FQ001)');
SELECT is(frameq.complete('t26-a', :'tok', 1, :pa1, 0), 'stale', 'and its report of a released proc is stale');
SELECT is((SELECT state FROM frameq.frame WHERE id = :fa1), 'waiting', 'so the frame does not succeed on it');

UPDATE frameq.host SET last_renewal_at = clock_timestamp() - frameq.lease_period() - interval '1 millisecond' WHERE name = 't26-b';
SELECT is(frameq._expire_leases('-infinity'), 1::bigint, 'b, moved 1 ms past the period, expires');
SELECT results_eq($$SELECT state, down_reason, epoch FROM frameq.host WHERE name = 't26-b'$$,
				  $$VALUES ('down', 'lease_lost', 2::bigint)$$, 'b is down for lease loss at epoch 2');
SELECT is((SELECT count(*)::int FROM frameq.proc WHERE id IN (:pb1, :pb2)), 0, 'and both its procs are released');

-- ------------------------------------------------------------- since

UPDATE frameq.host SET last_renewal_at = clock_timestamp() - frameq.lease_period() - interval '1 second' WHERE name = 't26-f';
SELECT is(frameq._expire_leases(clock_timestamp()), 0::bigint,
		  'with "since" just now (the server has just started) no lease expires, however old its renewal');
SELECT is(frameq._expire_leases(clock_timestamp() - frameq.lease_period() + interval '1 second'), 0::bigint,
		  'nor with "since" one second short of a lease period ago');
SELECT is((SELECT count(*)::int FROM frameq.proc WHERE id = :pf1), 1, 'f''s proc is still held');
SELECT is(frameq._expire_leases(clock_timestamp() - frameq.lease_period() - interval '1 millisecond'), 1::bigint,
		  'with "since" just past a lease period ago, f expires');
SELECT results_eq(format($$SELECT f.state, r.reason FROM frameq.frame f JOIN frameq.run r ON r.frame = f.id WHERE r.proc = %s$$, :pf1),
				  $$VALUES ('waiting', 'host_lost')$$, 'its proc is released as host_lost');

-- ------------------------------------------------------------- re-arming

SELECT frameq.attach(h, :'tok', 'boot-1') FROM unnest(ARRAY['t26-a', 't26-b']) h \g /dev/null
UPDATE frameq.host SET last_renewal_at = '2000-01-01', lease_expires_at = clock_timestamp() + interval '1 second' WHERE name = 't26-a';
SELECT count(*)::int AS current_leases FROM frameq.host WHERE lease_expires_at IS NOT NULL \gset
SELECT clock_timestamp() AS t0 \gset
SELECT is(frameq._rearm_leases(), :current_leases::bigint, '_rearm_leases re-arms every current lease and counts them');
SELECT clock_timestamp() AS t1 \gset
SELECT results_eq(format($$SELECT name, lease_expires_at BETWEEN %L::timestamptz + %L::interval AND %L::timestamptz + %L::interval
						   FROM frameq.host WHERE name IN ('t26-a', 't26-b') ORDER BY name$$, :'t0', :'ttl', :'t1', :'ttl'),
				  $$VALUES ('t26-a', true), ('t26-b', true)$$, 'each current lease now runs lease_ttl from now');
SELECT results_eq($$SELECT name, lease_expires_at IS NULL, last_renewal_at = '2000-01-01' FROM frameq.host WHERE name IN ('t26-a', 't26-c', 't26-e') ORDER BY name$$,
				  $$VALUES ('t26-a', false, true), ('t26-c', true, false), ('t26-e', true, NULL)$$,
				  'leases that are gone stay gone, and no renewal is invented');

-- ------------------------------------------------------------- sending kills

SELECT proc AS k1, frame AS fk1 FROM frameq.reserve('t26-a', :'tok', 3, 1) \gset
SELECT proc AS k2, frame AS fk2 FROM frameq.reserve('t26-a', :'tok', 3, 1) \gset
SELECT proc AS k3, frame AS fk3 FROM frameq.reserve('t26-b', :'tok', 3, 1) \gset
SELECT frameq.kill_frame(:fk1, 'one') \g /dev/null
SELECT frameq.retry_frame(:fk3) \g /dev/null

SELECT is(frameq._send_kills(5000), 2::bigint, '_send_kills sends the two kill orders never sent');
SELECT results_eq(format($$SELECT id, kill_sent_at IS NOT NULL FROM frameq.proc WHERE id IN (%s, %s, %s) ORDER BY id$$, :k1, :k2, :k3),
				  format($$SELECT x, x <> %s FROM unnest(ARRAY[%s, %s, %s]::bigint[]) x ORDER BY x$$, :k2, :k1, :k2, :k3),
				  'it stamps kill_sent_at on both, and not on the running proc');
SELECT string_agg(id || ' ' || kill_sent_at, ',' ORDER BY id) AS sent FROM frameq.proc WHERE id IN (:k1, :k3) \gset
SELECT is(frameq._send_kills(5000), 0::bigint, 'called again at once it sends nothing');
SELECT is((SELECT string_agg(id || ' ' || kill_sent_at, ',' ORDER BY id) FROM frameq.proc WHERE id IN (:k1, :k3)), :'sent',
		  'and stamps nothing');
UPDATE frameq.proc SET kill_sent_at = clock_timestamp() - interval '4 seconds' WHERE id = :k1;
SELECT is(frameq._send_kills(5000), 0::bigint, 'a kill order sent 4 s ago is not sent again with a 5 s interval');
UPDATE frameq.proc SET kill_sent_at = clock_timestamp() - interval '6 seconds' WHERE id = :k1;
SELECT clock_timestamp() AS t0 \gset
SELECT is(frameq._send_kills(5000), 1::bigint, 'one sent 6 s ago is sent again');
SELECT results_eq(format($$SELECT id, kill_sent_at >= %L FROM frameq.proc WHERE id IN (%s, %s) ORDER BY id$$, :'t0', :k1, :k3),
				  format($$SELECT x, x = %s FROM unnest(ARRAY[%s, %s]::bigint[]) x ORDER BY x$$, :k1, :k1, :k3),
				  'and only its stamp moves');
SELECT is(frameq._send_kills(100000), 0::bigint, 'with a longer interval nothing is due');
SELECT frameq.kill_frame(:fk2, 'two') \g /dev/null
SELECT is(frameq._send_kills(100000), 1::bigint, 'a new kill order is sent at once, whatever the interval');
SELECT results_eq(format($$SELECT id, state, want_state FROM frameq.proc WHERE id IN (%s, %s, %s) ORDER BY id$$, :k1, :k2, :k3),
				  format($$SELECT * FROM (VALUES (%s::bigint, 'killing', 'dead'), (%s, 'killing', 'dead'), (%s, 'killing', 'waiting')) v ORDER BY 1$$, :k1, :k2, :k3),
				  'sending changes nothing else: the three kill orders are still held');
SELECT is((SELECT count(*)::int FROM frameq.run WHERE proc IN (:k1, :k2, :k3) AND ended_at IS NULL), 3, 'their runs are still open');

/* a sent kill order is released like any other when its host's lease expires */
UPDATE frameq.host SET last_renewal_at = clock_timestamp() - frameq.lease_period() - interval '1 second' WHERE name = 't26-a';
SELECT is(frameq._expire_leases('-infinity'), 1::bigint, 'a expires again');
SELECT results_eq(format($$SELECT f.id, f.state, r.reason FROM frameq.frame f JOIN frameq.run r ON r.frame = f.id WHERE r.proc IN (%s, %s) ORDER BY f.id$$, :k1, :k2),
				  format($$SELECT * FROM (VALUES (%s::bigint, 'dead', 'host_lost'), (%s, 'dead', 'host_lost')) v ORDER BY 1$$, :fk1, :fk2),
				  'its two sent kill orders end dead, as host_lost');
SELECT is(frameq._send_kills(0), 1::bigint, 'with no interval, the one kill order left (on b) is sent again');
SELECT is_empty('SELECT * FROM frameq.check()', 'check() is clean at the end');

SELECT * FROM finish();
ROLLBACK;
