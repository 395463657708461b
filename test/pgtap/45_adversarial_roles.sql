/*
 * Who may call what: every public function, the internal ones and the
 * tables, called with valid arguments by each role that must not, gets
 * 42501 (insufficient_privilege) and changes nothing.
 *     a role with no grants   nothing at all
 *     frameq_reader           owns(), check(), ledger(), worker_status(),
 *                             lease_period() only
 *     frameq_agent            attach, heartbeat, reserve, complete, owns
 *     frameq_submit           the jobs of shows granted with grant_show()
 *                             (here: none of advshow's), and nothing else
 *     frameq_admin            no agent entry points
 * and nobody but the extension's owner calls an internal function (a
 * name starting with "_"), reads the run secrets' key or token hashes, or
 * writes a table directly (doc/security.md).  See include/adversarial.psql
 * for the harness and the farm.
 */
BEGIN;
\ir include/adversarial.psql

SELECT plan(4 + 2 * 200);
SELECT * FROM fqadv.farm_checks();

CREATE TEMP TABLE matrix ON COMMIT DROP AS
WITH calls(n, fn, call, allowed) AS (VALUES
	(1, 'create_allocation', $$SELECT frameq.create_allocation('adv.new')$$, '{adv_admin}'::text[]),
	(2, 'create_show', $$SELECT frameq.create_show('advnew')$$, '{adv_admin}'),
	(3, 'set_subscription', $$SELECT frameq.set_subscription('advshow', 'adv.pool', 2, 2)$$, '{adv_admin}'),
	(4, 'create_folder', $$SELECT frameq.create_folder('advshow', 'advnew')$$, '{adv_admin}'),
	(5, 'set_folder_limits', $$SELECT frameq.set_folder_limits({folder1}, 1, 1)$$, '{adv_admin}'),
	(6, 'create_limit', $$SELECT frameq.create_limit('advnew', 1)$$, '{adv_admin}'),
	(7, 'set_limit', $$SELECT frameq.set_limit('advlim', 1)$$, '{adv_admin}'),
	(8, 'register_host', $$SELECT frameq.register_host('adv-new', 'adv.pool', 1, 1024)$$, '{adv_admin}'),
	(9, 'set_host_state', $$SELECT frameq.set_host_state('adv-h2', 'down')$$, '{adv_admin}'),
	(10, 'confirm_host_dead', $$SELECT frameq.confirm_host_dead('adv-h2')$$, '{adv_admin}'),
	(11, 'grant_show', $$SELECT frameq.grant_show('advshow', 'adv_none')$$, '{adv_admin}'),
	(29, 'revoke_show', $$SELECT frameq.revoke_show('advshow.g', 'adv_submit')$$, '{adv_admin}'),
	(12, 'rotate_host_token', $$SELECT frameq.rotate_host_token('adv-h2')$$, '{adv_admin}'),
	(13, 'retire_host', $$SELECT frameq.retire_host('adv-h5')$$, '{adv_admin}'),
	(14, 'submit', $$SELECT frameq.submit(fqadv.spec())$$, '{adv_admin}'),
	(15, 'set_job', $$SELECT frameq.set_job({job1}, 5)$$, '{adv_admin}'),
	(16, 'kill_frame', $$SELECT frameq.kill_frame({frame3}, 'why')$$, '{adv_admin}'),
	(17, 'retry_frame', $$SELECT frameq.retry_frame({frame1})$$, '{adv_admin}'),
	(18, 'eat_frame', $$SELECT frameq.eat_frame({frame3})$$, '{adv_admin}'),
	(19, 'kill_job', $$SELECT frameq.kill_job({job1}, 'why')$$, '{adv_admin}'),
	(20, 'attach', $$SELECT frameq.attach('adv-h1', '{tok1}', 'boot-1')$$, '{adv_agent}'),
	(21, 'heartbeat', $$SELECT frameq.heartbeat('adv-h1', '{tok1}', {ep1}, ARRAY[{proc1}])$$, '{adv_agent}'),
	(22, 'reserve', $$SELECT frameq.reserve('adv-h1', '{tok1}', {ep1})$$, '{adv_agent}'),
	(23, 'complete', $$SELECT frameq.complete('adv-h1', '{tok1}', {ep1}, {proc1}, 0)$$, '{adv_agent}'),
	(24, 'owns', $$SELECT frameq.owns({proc1})$$, '{adv_agent,adv_reader,adv_admin}'),
	(25, 'check', $$SELECT count(*) FROM frameq.check()$$, '{adv_reader,adv_admin}'),
	(26, 'ledger', $$SELECT count(*) FROM frameq.ledger()$$, '{adv_reader,adv_admin}'),
	(27, 'worker_status', $$SELECT frameq.worker_status()$$, '{adv_reader,adv_admin}'),
	(28, 'lease_period', $$SELECT frameq.lease_period()$$, '{adv_reader,adv_admin}'),
	/* internal functions: the extension's owner only */
	(31, '_release', $$SELECT frameq._release({proc1}, 'operator', 'waiting')$$, '{}'),
	(32, '_kill_order', $$SELECT frameq._kill_order({proc1}, 'x', 'dead')$$, '{}'),
	(33, '_ledger_reset', $$SELECT frameq._ledger_reset()$$, '{}'),
	(34, '_host_lock', $$SELECT frameq._host_lock('adv-h1', '{tok1}')$$, '{}'),
	(35, '_host_lock_by_name', $$SELECT frameq._host_lock_by_name('adv-h1')$$, '{}'),
	(36, '_frame_action', $$SELECT frameq._frame_action({frame3}, 'x', 'dead', '{waiting}', 'dead')$$, '{}'),
	(37, '_expire_leases', $$SELECT frameq._expire_leases(now(), now() + interval '1 day')$$, '{}'),
	(38, '_send_kills', $$SELECT frameq._send_kills(0)$$, '{}'),
	(39, '_rearm_leases', $$SELECT frameq._rearm_leases()$$, '{}'),
	(40, '_finish_job_if_done', $$SELECT frameq._finish_job_if_done({job1})$$, '{}'),
	(41, '_run_secret', $$SELECT frameq._run_secret({proc1})$$, '{}'),
	(42, '_lock_host', $$SELECT frameq._lock_host(1, 0)$$, '{}'),
	/* tables: written through the functions only, secrets read by nobody */
	(51, 'table host', $$SELECT token_hash FROM frameq.host LIMIT 1$$, '{}'),
	(52, 'table host', $$UPDATE frameq.host SET token_hash = sha256('x') RETURNING id$$, '{}'),
	(53, 'table allocation', $$INSERT INTO frameq.allocation (name) VALUES ('adv.direct') RETURNING id$$, '{}'),
	(54, 'table proc', $$UPDATE frameq.proc SET kill_reason = 'x' RETURNING id$$, '{}'),
	(55, 'table run', $$DELETE FROM frameq.run RETURNING proc$$, '{}'),
	(56, 'table run_secret_key', $$SELECT count(*) FROM frameq.run_secret_key$$, '{}')
), roles(m, role) AS (VALUES
	(1, 'adv_none'), (2, 'adv_reader'), (3, 'adv_agent'), (4, 'adv_submit'), (5, 'adv_admin')
)
SELECT c.fn, c.call, o.role, row_number() OVER (ORDER BY c.n, o.m) AS k
  FROM calls c CROSS JOIN roles o
 WHERE o.role <> ALL (c.allowed);

SELECT is((SELECT count(*)::int FROM matrix), 200, 'the matrix has 200 calls that must be refused');

SELECT r FROM (SELECT * FROM matrix ORDER BY k OFFSET 0) c,
	LATERAL fqadv.expect(c.role, c.call, '42501', format('%s: %s by %s', c.fn, left(c.call, 60), c.role)) r;

SELECT * FROM fqadv.summary();
SELECT * FROM finish();
ROLLBACK;
