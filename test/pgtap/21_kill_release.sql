/*
 * Releasing kill orders: the wanted end state of a kill order (dead for
 * kill_frame, waiting for retry_frame, eaten for eat_frame) is applied only
 * when one of the release conditions of doc/design.md, invariant 2,
 * holds, and the run record says which:
 *
 *	 a heartbeat that no longer lists the proc        -> 'killed'
 *	 complete() from the killing proc                 -> 'killed', exit recorded
 *	 confirm_host_dead()                               -> 'operator'
 *	 attach() with a different boot id                 -> 'host_rebooted'
 *
 * (lease expiry, 'host_lost', is in 26_worker_steps.sql.)  None of these
 * uses up a retry, whatever the exit status.
 *
 * The caps ledger applies a release when the releasing transaction commits
 * (see 08_complete.sql), so after a release this file asserts the ledger
 * together with this transaction's pending releases, as check() does.
 */
BEGIN;
\ir include/helpers.psql

SELECT plan(39);

SELECT * FROM fqtest.farm('t21', cores => '{4,4,4,4}', memory => '{8589934592}') \gset

/* max_retries 0: a release that wrongly counted a failure would end the frame dead */
SELECT frameq.submit($${"show": "t21show", "name": "t21-rel", "max_retries": 0,
	"layers": [{"name": "l", "command": "c", "range": "1-12"}]}$$) AS job \gset
CREATE TEMP TABLE b ON COMMIT DROP AS SELECT *, 't21-h1'::text AS host FROM frameq.reserve('t21-h1', :'tok1', :epoch1, 3);
INSERT INTO b SELECT *, 't21-h2' FROM frameq.reserve('t21-h2', :'tok2', :epoch2, 3);
INSERT INTO b SELECT *, 't21-h3' FROM frameq.reserve('t21-h3', :'tok3', :epoch3, 2);
INSERT INTO b SELECT *, 't21-h4' FROM frameq.reserve('t21-h4', :'tok4', :epoch4, 2);
SELECT is((SELECT string_agg(host || ':' || frame_number, ' ' ORDER BY frame_number) FROM b),
		  't21-h1:1 t21-h1:2 t21-h1:3 t21-h2:4 t21-h2:5 t21-h2:6 t21-h3:7 t21-h3:8 t21-h4:9 t21-h4:10',
		  'the fixture runs frames 1-3 on h1, 4-6 on h2, 7-8 on h3, 9-10 on h4');
SELECT proc AS pa1, frame AS fa1 FROM b WHERE frame_number = 1 \gset
SELECT proc AS pa2, frame AS fa2 FROM b WHERE frame_number = 2 \gset
SELECT proc AS pa3, frame AS fa3 FROM b WHERE frame_number = 3 \gset
SELECT proc AS pb1, frame AS fb1 FROM b WHERE frame_number = 4 \gset
SELECT proc AS pb2, frame AS fb2 FROM b WHERE frame_number = 5 \gset
SELECT proc AS pb3, frame AS fb3 FROM b WHERE frame_number = 6 \gset
SELECT proc AS pc1, frame AS fc1 FROM b WHERE frame_number = 7 \gset
SELECT proc AS pc2, frame AS fc2 FROM b WHERE frame_number = 8 \gset
SELECT proc AS pd1, frame AS fd1 FROM b WHERE frame_number = 9 \gset
SELECT proc AS pd2, frame AS fd2 FROM b WHERE frame_number = 10 \gset

/* one row per frame of the job: what it is now and how its last run ended */
CREATE TEMP VIEW t21_frame AS
SELECT f.id AS frame, f.state, f.retries, f.attempts, p.state AS proc_state,
	   r.reason, r.end_state, r.exit_status, r.exit_signal, r.max_rss, r.kill_reason, h.name AS run_host
  FROM frameq.frame f
  LEFT JOIN frameq.proc p ON p.frame = f.id
  LEFT JOIN LATERAL (SELECT * FROM frameq.run x WHERE x.frame = f.id ORDER BY x.started_at DESC LIMIT 1) r ON true
  LEFT JOIN frameq.host h ON h.id = r.host;

SELECT frameq.kill_frame(:fa1, 'bad render') \g /dev/null
SELECT frameq.retry_frame(:fa2) \g /dev/null
SELECT frameq.eat_frame(:fa3) \g /dev/null
SELECT frameq.kill_frame(:fb1, 'bad render') \g /dev/null
SELECT frameq.retry_frame(:fb2) \g /dev/null
SELECT frameq.eat_frame(:fb3) \g /dev/null
SELECT frameq.kill_frame(:fc1, 'bad render') \g /dev/null
SELECT frameq.eat_frame(:fd1) \g /dev/null
SELECT is((SELECT count(*)::int FROM frameq.proc WHERE host IN (:host1, :host2, :host3, :host4) AND state = 'killing'), 8,
		  'eight kill orders are outstanding; frames 8 and 10 run normally');

-- ------------------------------------------------- a heartbeat that still lists them

SELECT is((SELECT kill FROM frameq.heartbeat('t21-h1', :'tok1', :epoch1, ARRAY[:pa1, :pa2, :pa3]::bigint[])),
		  (SELECT array_agg(x ORDER BY x) FROM unnest(ARRAY[:pa1, :pa2, :pa3]::bigint[]) x),
		  'a heartbeat still listing its three kill orders gets all three back to kill');
SELECT results_eq(format($$SELECT state, proc_state FROM t21_frame WHERE frame IN (%s, %s, %s)$$, :fa1, :fa2, :fa3),
				  $$VALUES ('running', 'killing'), ('running', 'killing'), ('running', 'killing')$$,
				  'while the host lists them they stay running, held by their kill orders');

-- ------------------------------------------------- heartbeat confirms: 'killed'

SELECT is((SELECT kill FROM frameq.heartbeat('t21-h1', :'tok1', :epoch1, ARRAY[:pa1]::bigint[])), ARRAY[:pa1]::bigint[],
		  'a heartbeat listing only the first kill order gets only it back to kill');
SELECT results_eq(format($$SELECT frame, state, retries, attempts, proc_state, reason, end_state, exit_status, kill_reason, run_host
						   FROM t21_frame WHERE frame IN (%s, %s, %s) ORDER BY frame$$, :fa1, :fa2, :fa3),
				  format($$VALUES (%s::bigint, 'running', 0, 1, 'killing', NULL, NULL, NULL::int, NULL, 't21-h1'),
								  (%s, 'waiting', 0, 1, NULL, 'killed', 'waiting', NULL, 'retried by operator', 't21-h1'),
								  (%s, 'eaten', 0, 1, NULL, 'killed', 'eaten', NULL, 'eaten by operator', 't21-h1')$$,
						 :fa1, :fa2, :fa3),
				  'the two it no longer lists are released as killed into their wanted states, waiting and eaten, without a retry');
SELECT is((SELECT idle_cc FROM frameq.host WHERE id = :host1), 300, 'h1 has the cores of the two released procs back');
SELECT is((SELECT kill FROM frameq.heartbeat('t21-h1', :'tok1', :epoch1, '{}')), '{}'::bigint[],
		  'a heartbeat listing nothing confirms the last kill order and has nothing left to kill');
SELECT results_eq(format($$SELECT state, retries, reason, end_state, kill_reason FROM t21_frame WHERE frame = %s$$, :fa1),
				  $$VALUES ('dead', 0, 'killed', 'dead', 'bad render')$$,
				  'the killed frame is dead, its run record says killed and why');
SELECT is((SELECT idle_cc FROM frameq.host WHERE id = :host1), 400, 'h1 is entirely idle again');
SELECT is((SELECT count(*)::int FROM frameq.run WHERE frame IN (:fa1, :fa2, :fa3)), 3,
		  'each of the three frames has exactly one run record');

-- ------------------------------------------------- complete from a killing proc: 'killed'

SELECT is(frameq.complete('t21-h2', :'tok2', :epoch2, :pb1, 1), 'accepted',
		  'complete() from the killed proc with a failing exit is accepted');
SELECT is(frameq.complete('t21-h2', :'tok2', :epoch2, :pb2, 0), 'accepted',
		  'complete() from the retried proc with exit 0 is accepted');
SELECT is(frameq.complete('t21-h2', :'tok2', :epoch2, :pb3, 0, 9, 123456), 'accepted',
		  'complete() from the eaten proc with signal 9 is accepted');
SELECT results_eq(format($$SELECT frame, state, retries, attempts, proc_state, reason, end_state, exit_status, exit_signal, max_rss
						   FROM t21_frame WHERE frame IN (%s, %s, %s) ORDER BY frame$$, :fb1, :fb2, :fb3),
				  format($$VALUES (%s::bigint, 'dead', 0, 1, NULL::text, 'killed', 'dead', 1, 0, NULL::bigint),
								  (%s, 'waiting', 0, 1, NULL, 'killed', 'waiting', 0, 0, NULL),
								  (%s, 'eaten', 0, 1, NULL, 'killed', 'eaten', 0, 9, 123456)$$,
						 :fb1, :fb2, :fb3),
				  'each ends in its kill order''s wanted state as killed, with its exit status, signal and rss; the failing exit uses no retry');
SELECT isnt((SELECT state FROM frameq.frame WHERE id = :fb2), 'succeeded',
			'a retried frame whose proc exits 0 after the kill order is not succeeded');
SELECT is(frameq.complete('t21-h2', :'tok2', :epoch2, :pb1, 1), 'duplicate',
		  'the same report of the killed proc again is a duplicate');
SELECT is(frameq.complete('t21-h2', :'tok2', :epoch2, :pb2, 1), 'stale',
		  'a different report of a released proc is stale');
SELECT is((SELECT idle_cc FROM frameq.host WHERE id = :host2), 400, 'h2 is entirely idle again');

-- ------------------------------------------------- confirm_host_dead: 'operator'

SELECT lives_ok($$SELECT frameq.confirm_host_dead('t21-h3')$$, 'confirm_host_dead succeeds');
SELECT results_eq(format($$SELECT frame, state, retries, attempts, proc_state, reason, end_state, kill_reason
						   FROM t21_frame WHERE frame IN (%s, %s) ORDER BY frame$$, :fc1, :fc2),
				  format($$VALUES (%s::bigint, 'dead', 0, 1, NULL::text, 'operator', 'dead', 'bad render'),
								  (%s, 'waiting', 0, 1, NULL, 'operator', 'waiting', NULL)$$, :fc1, :fc2),
				  'its kill order ends in the wanted state and its running proc back in the queue, both as operator, without a retry');
SELECT results_eq(format($$SELECT epoch, state, down_reason, lease_expires_at IS NULL, idle_cc FROM frameq.host WHERE id = %s$$, :host3),
				  format($$VALUES (%s::bigint + 1, 'down', 'operator', true, 400)$$, :epoch3),
				  'the host''s epoch moves on, its lease is gone, it is down by the operator and entirely idle');
SELECT * FROM fqtest.refuses(format($$SELECT frameq.heartbeat('t21-h3', %L, %s, ARRAY[%s, %s]::bigint[])$$, :'tok3', :epoch3, :pc1, :pc2),
	'FQ001', NULL, 'the dead host''s agent, if it was not dead after all, is fenced: its heartbeat raises FQ001');
SELECT is(frameq.complete('t21-h3', :'tok3', :epoch3, :pc2, 0), 'stale',
		  'and its completion of the released proc is stale');
SELECT results_eq(format($$SELECT state, reason FROM t21_frame WHERE frame = %s$$, :fc2), $$VALUES ('waiting', 'operator')$$,
				  'the stale completion did not make the frame succeed');

-- ------------------------------------------------- attach after a reboot: 'host_rebooted'

SELECT * FROM frameq.attach('t21-h4', :'tok4', 'boot-2') \gset a4_
SELECT is(:'a4_kill'::bigint[], '{}'::bigint[], 'attach with a new boot id has nothing to kill');
SELECT is(:a4_epoch::bigint, :epoch4::bigint + 1, 'and starts the next epoch');
SELECT results_eq(format($$SELECT frame, state, retries, attempts, proc_state, reason, end_state, kill_reason
						   FROM t21_frame WHERE frame IN (%s, %s) ORDER BY frame$$, :fd1, :fd2),
				  format($$VALUES (%s::bigint, 'eaten', 0, 1, NULL::text, 'host_rebooted', 'eaten', 'eaten by operator'),
								  (%s, 'waiting', 0, 1, NULL, 'host_rebooted', 'waiting', NULL)$$, :fd1, :fd2),
				  'the kill order ends eaten and the running proc back in the queue, both as host_rebooted, without a retry');
SELECT results_eq(format($$SELECT state, idle_cc, boot_id FROM frameq.host WHERE id = %s$$, :host4),
				  $$VALUES ('up', 400, 'boot-2')$$, 'the rebooted host is up, idle, with its new boot id');

-- ------------------------------------------------- afterwards

SELECT is((SELECT count(*)::int FROM frameq.proc WHERE host IN (:host1, :host2, :host3, :host4)), 0, 'no proc is left on any host');
SELECT results_eq(format($$SELECT reason, count(*)::int FROM frameq.run WHERE job = %s GROUP BY reason ORDER BY reason$$, :job),
				  $$VALUES ('host_rebooted', 2), ('killed', 6), ('operator', 2)$$,
				  'ten runs, each closed once: six killed, two operator, two host_rebooted');
SELECT is((SELECT count(*)::int FROM frameq.run WHERE job = :job AND (ended_at IS NULL OR end_state IS NULL)), 0,
		  'every run record is closed with its end state');
SELECT results_eq(format($$SELECT state, count(*)::int, sum(retries)::int, sum(attempts)::int FROM frameq.frame WHERE job = %s GROUP BY state ORDER BY state$$, :job),
				  $$VALUES ('dead', 3, 0, 3), ('eaten', 3, 0, 3), ('waiting', 6, 0, 4)$$,
				  'three frames dead, three eaten, six waiting; no retry used; one attempt for each booked frame');
SELECT results_eq(format($$SELECT sum(used_cc)::int, sum(running)::int FROM
						   (SELECT * FROM frameq.ledger() UNION ALL SELECT * FROM frameq._ledger_pending()) l
						   WHERE (kind = 'job' AND id = %s) OR (kind = 'subscription' AND id = %s AND id2 = %s)$$,
						 :job, :show, :alloc),
				  $$VALUES (0, 0)$$,
				  'with this transaction''s releases applied, the job and the subscription are charged nothing');
SELECT is((SELECT state FROM frameq.job WHERE id = :job), 'active', 'the job is still active: six of its frames wait');

SELECT is((SELECT string_agg(frame_number::text, ',' ORDER BY frame_number) FROM frameq.reserve('t21-h1', :'tok1', :epoch1)),
		  '2,5,8,10', 'the frames released to waiting are bookable again, lowest numbers first');
SELECT results_eq(format($$SELECT state, attempts, retries FROM frameq.frame WHERE id IN (%s, %s, %s, %s) ORDER BY id$$, :fa2, :fb2, :fc2, :fd2),
				  $$VALUES ('running', 2, 0), ('running', 2, 0), ('running', 2, 0), ('running', 2, 0)$$,
				  'each of them now runs its second attempt with no retry used');
SELECT is_empty('SELECT * FROM frameq.check()', 'check() is clean at the end');

SELECT * FROM finish();
ROLLBACK;
