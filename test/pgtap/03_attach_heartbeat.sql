/*
 * attach() and heartbeat() basics: tokens, epochs, and a lease that is
 * renewed but never revived; then what a new epoch does to the procs of the
 * old one (kill orders on the same boot, release on a new boot) and what a
 * heartbeat confirms.  An expired lease is simulated by moving
 * lease_expires_at into the past as superuser.
 */
BEGIN;
\ir include/helpers.psql

SELECT plan(63);

SELECT frameq.create_allocation('t03.pool') AS alloc \gset
SELECT frameq.register_host('t03-h1', 't03.pool', 4, 8589934592) AS tok \gset
SELECT frameq.register_host('t03-h2', 't03.pool', 4, 8589934592) AS tok2 \gset
SELECT current_setting('frameq.lease_ttl')::interval AS ttl \gset

SELECT results_eq($$SELECT epoch, lease_expires_at IS NULL, boot_id IS NULL FROM frameq.host WHERE name = 't03-h1'$$,
				  $$VALUES (0::bigint, true, true)$$,
				  'a registered host starts at epoch 0 with no lease and no boot id');

-- ----------------------------------------------------------------- attach

SELECT * FROM fqtest.refuses($$SELECT frameq.attach('t03-h1', 'not-the-token', 'boot-a')$$, '28P01',
	'invalid token for host "t03-h1"', 'attach refuses a wrong token with 28P01');
SELECT * FROM fqtest.refuses(format('SELECT frameq.attach(%L, %L, %L)', 't03-h1', :'tok2', 'boot-a'), '28P01',
	NULL, 'attach refuses another host''s token with 28P01');
SELECT * FROM fqtest.refuses($$SELECT frameq.attach('t03-h1', NULL, 'boot-a')$$, '28P01', NULL,
	'attach refuses a null token with 28P01');
SELECT * FROM fqtest.refuses(format('SELECT frameq.attach(%L, %L, %L)', 't03-nope', :'tok', 'boot-a'), '42704',
	'host "t03-nope" is not registered', 'attach refuses an unknown host with 42704');
SELECT * FROM fqtest.refuses(format('SELECT frameq.attach(%L, %L, NULL)', 't03-h1', :'tok'), '22004',
	'boot_id must not be null', 'attach refuses a null boot id with 22004');
SELECT * FROM fqtest.refuses(format('SELECT frameq.attach(%L, %L, %L)', 't03-h1', :'tok', ''), '22023',
	NULL, 'attach refuses an empty boot id with 22023');

SELECT clock_timestamp() AS before_attach \gset
SELECT * FROM frameq.attach('t03-h1', :'tok', 'boot-a') \gset a1_
SELECT clock_timestamp() AS after_attach \gset

SELECT is(:a1_epoch::bigint, 1::bigint, 'the first attach returns epoch 1');
SELECT is(:'a1_lease_ttl'::interval, :'ttl'::interval, 'attach returns the configured lease_ttl');
SELECT is(:'a1_kill'::bigint[], '{}'::bigint[], 'attach of a host without procs orders nothing killed');
SELECT results_eq(
	format($$SELECT epoch, boot_id,
				   lease_expires_at BETWEEN %L::timestamptz + %L::interval AND %L::timestamptz + %L::interval,
				   last_renewal_at BETWEEN %L AND %L
			  FROM frameq.host WHERE name = 't03-h1'$$,
		   :'before_attach', :'ttl', :'after_attach', :'ttl', :'before_attach', :'after_attach'),
	$$VALUES (1::bigint, 'boot-a', true, true)$$,
	'attach stores the epoch and boot id, and a lease that runs lease_ttl from now');
SELECT is((SELECT epoch FROM frameq.host WHERE name = 't03-h2'), 0::bigint,
		  'attaching one host leaves another host''s epoch alone');

SELECT * FROM frameq.attach('t03-h1', :'tok', 'boot-a') \gset a2_
SELECT is(:a2_epoch::bigint, 2::bigint, 'attaching again bumps the epoch to 2');
SELECT is((SELECT epoch FROM frameq.host WHERE name = 't03-h1'), 2::bigint, 'the host row holds epoch 2');

-- -------------------------------------------------------------- heartbeat

SELECT * FROM fqtest.refuses(format('SELECT frameq.heartbeat(%L, %L, 1, %L)', 't03-h1', :'tok', '{}'), 'FQ001',
	'lease epoch 1 of host "t03-h1" is not current', 'heartbeat with the previous epoch raises FQ001');
SELECT * FROM fqtest.refuses(format('SELECT frameq.heartbeat(%L, %L, 3, %L)', 't03-h1', :'tok', '{}'), 'FQ001',
	NULL, 'heartbeat with a future epoch raises FQ001');
SELECT * FROM fqtest.refuses(format('SELECT frameq.heartbeat(%L, %L, 2, %L)', 't03-h1', 'bad', '{}'), '28P01',
	NULL, 'heartbeat with a wrong token raises 28P01');
SELECT * FROM fqtest.refuses(format('SELECT frameq.heartbeat(%L, %L, 2, %L)', 't03-nope', :'tok', '{}'), '42704',
	NULL, 'heartbeat of an unknown host raises 42704');
SELECT * FROM fqtest.refuses(format('SELECT frameq.heartbeat(%L, %L, NULL, %L)', 't03-h1', :'tok', '{}'), '22004',
	NULL, 'heartbeat with a null epoch raises 22004');

-- renewal: pretend the lease is about to run out, then renew it
UPDATE frameq.host SET lease_expires_at = clock_timestamp() + interval '2 seconds',
	   last_renewal_at = clock_timestamp() - :'ttl'::interval + interval '2 seconds'
 WHERE name = 't03-h1';
SELECT last_renewal_at AS old_renewal FROM frameq.host WHERE name = 't03-h1' \gset
SELECT clock_timestamp() AS before_hb \gset
SELECT * FROM frameq.heartbeat('t03-h1', :'tok', 2, '{}') \gset hb_
SELECT clock_timestamp() AS after_hb \gset

SELECT is(:'hb_lease_ttl'::interval, :'ttl'::interval, 'heartbeat returns the configured lease_ttl');
SELECT is(:'hb_kill'::bigint[], '{}'::bigint[], 'heartbeat of a host without procs orders nothing killed');
SELECT results_eq(
	format($$SELECT epoch,
				   lease_expires_at BETWEEN %L::timestamptz + %L::interval AND %L::timestamptz + %L::interval,
				   last_renewal_at > %L
			  FROM frameq.host WHERE name = 't03-h1'$$,
		   :'before_hb', :'ttl', :'after_hb', :'ttl', :'old_renewal'),
	$$VALUES (2::bigint, true, true)$$,
	'heartbeat renews the lease to lease_ttl from now and keeps the epoch');

SELECT is((SELECT kill FROM frameq.heartbeat('t03-h1', :'tok', 2, '{4242, 17}')), '{17,4242}'::bigint[],
		  'heartbeat orders procs the host runs but does not hold killed at once (zombies)');

-- expiry: a lapsed lease is never revived
UPDATE frameq.host SET lease_expires_at = clock_timestamp() - interval '1 second' WHERE name = 't03-h1';
SELECT * FROM fqtest.refuses(format('SELECT frameq.heartbeat(%L, %L, 2, %L)', 't03-h1', :'tok', '{}'), 'FQ002',
	'lease of host "t03-h1" has expired', 'heartbeat on an expired lease raises FQ002');
SELECT ok((SELECT lease_expires_at < clock_timestamp() FROM frameq.host WHERE name = 't03-h1'),
		  'the expired lease is still expired after the refused heartbeat');

UPDATE frameq.host SET lease_expires_at = NULL WHERE name = 't03-h1';
SELECT * FROM fqtest.refuses(format('SELECT frameq.heartbeat(%L, %L, 2, %L)', 't03-h1', :'tok', '{}'), 'FQ002',
	NULL, 'heartbeat on a host with no lease at all raises FQ002');

SELECT * FROM frameq.attach('t03-h1', :'tok', 'boot-a') \gset a3_
SELECT is(:a3_epoch::bigint, 3::bigint, 'attach after the lease expired starts epoch 3');
SELECT ok((SELECT lease_expires_at > clock_timestamp() FROM frameq.host WHERE name = 't03-h1'),
		  'attach after expiry grants a current lease');
SELECT lives_ok(format('SELECT frameq.heartbeat(%L, %L, 3, %L)', 't03-h1', :'tok', '{}'),
				'heartbeat under the new epoch succeeds');

-- ------------------------------------------- procs across epochs and boots

SELECT frameq.create_show('t03show') \g /dev/null
SELECT frameq.set_subscription('t03show', 't03.pool', 100, 100) \g /dev/null
SELECT frameq.submit($${"show": "t03show", "name": "epochs",
	"layers": [{"name": "l", "command": "c", "range": "1-3"}]}$$) AS job \gset
SELECT proc AS p1, frame AS f1 FROM frameq.reserve('t03-h1', :'tok', 3, 1) \gset
SELECT proc AS p2, frame AS f2 FROM frameq.reserve('t03-h1', :'tok', 3, 1) \gset
SELECT proc AS p3, frame AS f3 FROM frameq.reserve('t03-h1', :'tok', 3, 1) \gset

SELECT is((SELECT kill FROM frameq.heartbeat('t03-h1', :'tok', 3, ARRAY[:p1, :p2, :p3]::bigint[])), '{}'::bigint[],
		  'a heartbeat listing its three live procs orders nothing killed');

SELECT * FROM frameq.attach('t03-h1', :'tok', 'boot-a') \gset a4_
SELECT is(:'a4_kill'::bigint[], (SELECT array_agg(x ORDER BY x) FROM unnest(ARRAY[:p1, :p2, :p3]::bigint[]) x),
		  'attach again on the same boot returns the earlier epoch''s procs as kill orders');
SELECT results_eq(
	format($$SELECT state, want_state, kill_reason IS NOT NULL FROM frameq.proc WHERE id IN (%s, %s, %s)$$, :p1, :p2, :p3),
	$$VALUES ('killing', 'waiting', true), ('killing', 'waiting', true), ('killing', 'waiting', true)$$,
	'the three procs are kill orders that will put their frames back to waiting');
SELECT results_eq(format($$SELECT state FROM frameq.frame WHERE id IN (%s, %s, %s)$$, :f1, :f2, :f3),
				  $$VALUES ('running'), ('running'), ('running')$$,
				  'their frames stay running until the kill is confirmed');
SELECT ok(NOT frameq.owns(:p1, frameq._run_secret(:p1)), 'owns() is false for a proc under a kill order');
SELECT is(frameq.complete('t03-h1', :'tok', 4, :p1, 0), 'stale',
		  'a completion of an old epoch''s proc reported under the new epoch is stale');
SELECT is((SELECT state FROM frameq.proc WHERE id = :p1), 'killing', 'the stale completion left the kill order in place');

/*
 * The old agent reports, under the proc's own epoch, that a process under a
 * kill order ended.  Taking that as the kill's confirmation, or as stale
 * (a later heartbeat confirms it), are both safe; what must not happen is
 * the frame succeeding on the word of a lease that is gone.
 */
SELECT frameq.complete('t03-h1', :'tok', 3, :p3, 0) AS old_epoch_outcome \gset
SELECT ok(:'old_epoch_outcome' IN ('accepted', 'stale'),
		  format('a completion under the proc''s own, older epoch is accepted or stale (%s)', :'old_epoch_outcome'));
SELECT is((SELECT f.state FROM frameq.frame f WHERE f.id = :f3),
		  CASE :'old_epoch_outcome' WHEN 'accepted' THEN 'waiting' ELSE 'running' END,
		  'the frame of a kill order never succeeds on an old epoch''s report: it waits again or stays held');
SELECT is((SELECT state FROM frameq.proc WHERE id = :p3), CASE :'old_epoch_outcome' WHEN 'stale' THEN 'killing' END,
		  'the kill order is released if the report was accepted, and kept if it was stale');
DELETE FROM frameq.proc WHERE id = :p3;

SELECT is((SELECT kill FROM frameq.heartbeat('t03-h1', :'tok', 4, ARRAY[:p1]::bigint[])), ARRAY[:p1]::bigint[],
		  'a heartbeat still listing one kill order gets it back to kill');
SELECT results_eq(format($$SELECT state FROM frameq.frame WHERE id = %s$$, :f2), $$VALUES ('waiting')$$,
				  'the kill order the heartbeat no longer lists is confirmed: its frame waits again');
SELECT results_eq(format($$SELECT reason, end_state FROM frameq.run WHERE proc = %s$$, :p2),
				  $$VALUES ('killed', 'waiting')$$, 'its run record says killed');

SELECT * FROM frameq.attach('t03-h1', :'tok', 'boot-b') \gset a5_
SELECT is(:'a5_kill'::bigint[], '{}'::bigint[], 'attach with a new boot id has nothing left to kill');
SELECT is((SELECT count(*)::int FROM frameq.proc WHERE id = :p1), 0,
		  'attach with a new boot id releases the earlier boot''s procs at once');
SELECT results_eq(format($$SELECT r.reason, f.state FROM frameq.run r JOIN frameq.frame f ON f.id = r.frame WHERE r.proc = %s$$, :p1),
				  $$VALUES ('host_rebooted', 'waiting')$$, 'its run record says host_rebooted and its frame waits again');

-- a booking the host has demonstrably seen (a renewal after it) and no longer lists was lost
SELECT proc AS p4 FROM frameq.reserve('t03-h1', :'tok', 5, 1) \gset
SELECT is((SELECT kill FROM frameq.heartbeat('t03-h1', :'tok', 5, '{}')), '{}'::bigint[],
		  'the first heartbeat after a booking may not list it yet');
SELECT ok(frameq.owns(:p4, frameq._run_secret(:p4)), 'and the booking stays live');
SELECT is((SELECT kill FROM frameq.heartbeat('t03-h1', :'tok', 5, '{}')), '{}'::bigint[],
		  'a later heartbeat that still does not list it orders nothing killed');
SELECT results_eq(format($$SELECT r.reason, f.state, f.retries FROM frameq.run r JOIN frameq.frame f ON f.id = r.frame WHERE r.proc = %s$$, :p4),
				  $$VALUES ('lost_by_agent', 'waiting', 0)$$,
				  'it releases the booking as lost_by_agent, back to waiting without using a retry');
SELECT is((SELECT idle_cc FROM frameq.host WHERE name = 't03-h1'), 400, 'the host is entirely idle again');

SELECT * FROM finish();
ROLLBACK;
