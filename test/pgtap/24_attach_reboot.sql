/*
 * attach(host, token, boot_id): a new lease epoch.  On the same boot id the
 * earlier agent's renders may still run, so its procs become kill orders
 * (keeping the wanted state of orders already given) and come back in the
 * kill list; the frames stay held.  On a different boot id the machine has
 * rebooted and nothing of its earlier life can run: its procs are released
 * at once as host_rebooted, into waiting (or a kill order's wanted state),
 * without using a retry.  A host that went down only because it lost its
 * lease comes back up on attach; one an operator took down (or declared
 * dead, or put in repair) stays as the operator left it.
 */
BEGIN;
\ir include/helpers.psql

SELECT plan(36);

SELECT * FROM fqtest.farm('t24', cores => '{8,8}', attach => false) \gset
SELECT frameq.submit($${"show": "t24show", "name": "t24-job", "max_retries": 0,
	"layers": [{"name": "l", "command": "c", "range": "1-20"}]}$$) AS job \gset

SELECT * FROM frameq.attach('t24-h1', :'tok1', 'boot-a') \gset a1_
SELECT is(:a1_epoch::bigint, 1::bigint, 'the first attach starts epoch 1');
SELECT is(:'a1_kill'::bigint[], '{}'::bigint[], 'with nothing to kill');
SELECT proc AS p1, frame AS f1 FROM frameq.reserve('t24-h1', :'tok1', 1, 1) \gset
SELECT proc AS p2, frame AS f2 FROM frameq.reserve('t24-h1', :'tok1', 1, 1) \gset
SELECT proc AS p3, frame AS f3 FROM frameq.reserve('t24-h1', :'tok1', 1, 1) \gset
SELECT frameq.kill_frame(:f3, 'bad render') \g /dev/null

CREATE TEMP VIEW t24_usage AS
SELECT string_agg(format('%s %s: %s cores, %s running', kind, name, used_cores, running), E'\n' ORDER BY kind, name) AS usage
  FROM frameq.usage WHERE name LIKE 't24%';
SELECT usage AS usage_before FROM t24_usage \gset

-- ------------------------------------------------------------- same boot

SELECT * FROM frameq.attach('t24-h1', :'tok1', 'boot-a') \gset a2_
SELECT is(:a2_epoch::bigint, 2::bigint, 'attach again on the same boot starts epoch 2');
SELECT is(:'a2_kill'::bigint[], (SELECT array_agg(x ORDER BY x) FROM unnest(ARRAY[:p1, :p2, :p3]::bigint[]) x),
		  'and returns every proc of the earlier epoch to kill');
SELECT results_eq(format($$SELECT p.id, f.state, p.state, p.epoch, p.kill_reason, p.want_state FROM frameq.proc p JOIN frameq.frame f ON f.id = p.frame
						   WHERE p.id IN (%s, %s, %s) ORDER BY p.id$$, :p1, :p2, :p3),
				  format($$SELECT * FROM (VALUES (%s::bigint, 'running', 'killing', 1::bigint, 'agent re-attached', 'waiting'),
												(%s, 'running', 'killing', 1, 'agent re-attached', 'waiting'),
												(%s, 'running', 'killing', 1, 'bad render', 'dead')) v ORDER BY 1$$, :p1, :p2, :p3),
				  'the running procs become kill orders that want their frames waiting; the earlier kill order keeps its reason and dead; all frames stay running');
SELECT is((SELECT usage FROM t24_usage), :'usage_before', 'the three procs still count against the host and every cap');
SELECT is((SELECT count(*)::int FROM frameq.run WHERE job = :job AND ended_at IS NULL), 3, 'their three runs are still open');
SELECT ok(NOT frameq.owns(:p1, frameq._run_secret(:p1)) AND NOT frameq.owns(:p2, frameq._run_secret(:p2)), 'owns() is false for the re-attached host''s earlier procs');
SELECT is(frameq.complete('t24-h1', :'tok1', 2, :p1, 0), 'stale',
		  'the new agent''s report of an earlier epoch''s proc under the new epoch is stale');
SELECT is((SELECT count(*)::int FROM frameq.proc WHERE id = :p1), 1, 'and releases nothing');

SELECT is((SELECT kill FROM frameq.heartbeat('t24-h1', :'tok1', 2, ARRAY[:p2]::bigint[])), ARRAY[:p2]::bigint[],
		  'the new agent''s heartbeat still listing one of them gets it back to kill');
SELECT results_eq(format($$SELECT f.id, f.state, f.retries, r.reason, r.end_state FROM frameq.frame f JOIN frameq.run r ON r.frame = f.id
						   WHERE f.id IN (%s, %s) ORDER BY f.id$$, :f1, :f3),
				  format($$VALUES (%s::bigint, 'waiting', 0, 'killed', 'waiting'), (%s, 'dead', 0, 'killed', 'dead')$$, :f1, :f3),
				  'and confirms the two it no longer lists: killed, into waiting and dead');

-- ------------------------------------------------------------- a reboot

SELECT proc AS p4, frame AS f4 FROM frameq.reserve('t24-h1', :'tok1', 2, 1) \gset
SELECT frameq.eat_frame(:f4) \g /dev/null
SELECT proc AS p5, frame AS f5 FROM frameq.reserve('t24-h1', :'tok1', 2, 1) \gset
SELECT * FROM frameq.attach('t24-h1', :'tok1', 'boot-b') \gset a3_
SELECT is(:a3_epoch::bigint, 3::bigint, 'attach with a different boot id starts epoch 3');
SELECT is(:'a3_kill'::bigint[], '{}'::bigint[], 'and has nothing to kill: nothing of the earlier boot can run');
SELECT is((SELECT count(*)::int FROM frameq.proc WHERE host = :host1), 0, 'every proc of the earlier boot is released at once');
/* p4 re-booked frame 1 (its second attempt), p5 frame 4 */
SELECT results_eq(format($$SELECT f.number, f.state, f.retries, f.attempts, r.reason, r.end_state FROM frameq.frame f JOIN frameq.run r ON r.frame = f.id
						   WHERE r.proc IN (%s, %s, %s) ORDER BY f.number$$, :p2, :p4, :p5),
				  $$VALUES (1, 'eaten', 0, 2, 'host_rebooted', 'eaten'),
						   (2, 'waiting', 0, 1, 'host_rebooted', 'waiting'),
						   (4, 'waiting', 0, 1, 'host_rebooted', 'waiting')$$,
				  'as host_rebooted: the kill order of the same-boot attach and the running proc back to waiting, the eaten one eaten, no retry used');
SELECT results_eq(format($$SELECT state, boot_id, idle_cc FROM frameq.host WHERE id = %s$$, :host1),
				  $$VALUES ('up', 'boot-b', 800)$$, 'the host is up under its new boot id and entirely idle');
SELECT is(frameq.complete('t24-h1', :'tok1', 2, :p5, 0), 'stale',
		  'a late report of the earlier boot''s proc, under its own epoch, is stale');
SELECT is((SELECT state FROM frameq.frame WHERE id = :f5), 'waiting', 'and did not make the frame succeed');
SELECT is((SELECT string_agg(frame_number::text, ',' ORDER BY frame_number) FROM frameq.reserve('t24-h1', :'tok1', 3, 3)),
		  '2,4,5', 'the frames released to waiting are bookable again, lowest numbers first');

-- ------------------------------------------------------------- host state on attach

/* only this test's hosts may expire here: leave every other host's lease alone */
UPDATE frameq.host SET last_renewal_at = clock_timestamp() WHERE name NOT LIKE 't24-%' AND lease_expires_at IS NOT NULL;
UPDATE frameq.host SET last_renewal_at = clock_timestamp() - frameq.lease_period() - interval '1 second' WHERE id = :host1;
SELECT is(frameq._expire_leases('-infinity'), 1::bigint, 'h1 loses its lease');
SELECT results_eq(format($$SELECT state, down_reason, epoch FROM frameq.host WHERE id = %s$$, :host1),
				  $$VALUES ('down', 'lease_lost', 4::bigint)$$, 'h1 is down because it lost its lease, at epoch 4');
SELECT * FROM fqtest.refuses(format($$SELECT frameq.heartbeat('t24-h1', %L, 3, '{}')$$, :'tok1'), 'FQ001', NULL,
	'its agent''s heartbeat of epoch 3 is refused with FQ001');
SELECT * FROM frameq.attach('t24-h1', :'tok1', 'boot-b') \gset a4_
SELECT results_eq(format($$SELECT state, down_reason, epoch, lease_expires_at > clock_timestamp() FROM frameq.host WHERE id = %s$$, :host1),
				  $$VALUES ('up', NULL, 5::bigint, true)$$, 'attach brings a host down for lease loss back up, at epoch 5 with a current lease');
SELECT is((SELECT count(*)::int FROM frameq.reserve('t24-h1', :'tok1', 5, 1)), 1, 'and it books again');

SELECT frameq.set_host_state('t24-h1', 'down') \g /dev/null
SELECT * FROM frameq.attach('t24-h1', :'tok1', 'boot-b') \gset a5_
SELECT results_eq(format($$SELECT state, down_reason, epoch FROM frameq.host WHERE id = %s$$, :host1),
				  $$VALUES ('down', 'operator', 6::bigint)$$, 'a host an operator took down stays down on attach');
SELECT is((SELECT count(*)::int FROM frameq.reserve('t24-h1', :'tok1', 6)), 0, 'and books nothing');
SELECT frameq.set_host_state('t24-h1', 'repair') \g /dev/null
SELECT frameq.attach('t24-h1', :'tok1', 'boot-c') \g /dev/null
SELECT results_eq(format($$SELECT state, down_reason FROM frameq.host WHERE id = %s$$, :host1),
				  $$VALUES ('repair', 'operator')$$, 'a host in repair stays in repair on attach, even after a reboot');

/* the operator took h2 down; later its lease was lost too: the operator's word stands */
SELECT frameq.attach('t24-h2', :'tok2', 'boot-a') \g /dev/null
SELECT frameq.set_host_state('t24-h2', 'down') \g /dev/null
UPDATE frameq.host SET last_renewal_at = clock_timestamp() - frameq.lease_period() - interval '1 second' WHERE id = :host2;
SELECT is(frameq._expire_leases('-infinity'), 1::bigint, 'h2, down by the operator, loses its lease');
SELECT results_eq(format($$SELECT state, down_reason FROM frameq.host WHERE id = %s$$, :host2),
				  $$VALUES ('down', 'operator')$$, 'it stays down by the operator, not by lease loss');
SELECT frameq.attach('t24-h2', :'tok2', 'boot-a') \g /dev/null
SELECT results_eq(format($$SELECT state, down_reason FROM frameq.host WHERE id = %s$$, :host2),
				  $$VALUES ('down', 'operator')$$, 'so attach does not bring it up');
SELECT frameq.set_host_state('t24-h2', 'up') \g /dev/null
SELECT frameq.confirm_host_dead('t24-h2') \g /dev/null
SELECT frameq.attach('t24-h2', :'tok2', 'boot-b') \g /dev/null
SELECT results_eq(format($$SELECT state, down_reason FROM frameq.host WHERE id = %s$$, :host2),
				  $$VALUES ('down', 'operator')$$, 'a host the operator declared dead stays down when it attaches again');

SELECT * FROM fqtest.refuses($$SELECT frameq.attach('t24-h1', 'wrong', 'boot-c')$$, '28P01', NULL,
	'attach with a wrong token raises 28P01 and changes nothing');
SELECT is_empty('SELECT * FROM frameq.check()', 'check() is clean at the end');

SELECT * FROM finish();
ROLLBACK;
