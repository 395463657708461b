/*
 * complete(): the host's report that a proc ended.  Outcomes 'accepted',
 * 'duplicate' and 'stale'; the frame's next state (succeeded, a retry,
 * dead, eaten, or a kill order's wanted state); the proc deleted, the host's
 * capacity back, the run record closed; the job finished when every frame
 * is terminal.
 *
 * The caps ledger releases a proc only when the releasing transaction
 * commits (src/ledger.c: "between a release and its commit the ledger reads
 * high, never low").  A pgTAP file never commits, so what is asserted here
 * is what the releasing transaction itself sees: frameq.ledger() still
 * counts the completed proc, while the host's capacity (a table row) is
 * back at once.  The release after commit is asserted from outside a
 * transaction in 13_prepare_and_commit.sql.
 */
BEGIN;
\ir include/helpers.psql

SELECT plan(60);

SELECT * FROM fqtest.farm('t08', cores => '{8,8}') \gset

SELECT frameq.submit($${"show": "t08show", "name": "ok",
	"layers": [{"name": "l", "command": "c", "range": "1-2"}]}$$) AS j_ok \gset
SELECT frameq.submit($${"show": "t08show", "name": "retry", "max_retries": 1,
	"layers": [{"name": "l", "command": "c", "range": "1"}]}$$) AS j_retry \gset
SELECT frameq.submit($${"show": "t08show", "name": "eat", "max_retries": 0, "auto_eat": true,
	"layers": [{"name": "l", "command": "c", "range": "1"}]}$$) AS j_eat \gset
SELECT frameq.submit($${"show": "t08show", "name": "kill",
	"layers": [{"name": "l", "command": "c", "range": "1"}]}$$) AS j_kill \gset

CREATE TEMP TABLE booked ON COMMIT DROP AS SELECT * FROM frameq.reserve('t08-h1', :'tok1', :epoch1);
SELECT proc AS p_ok1, frame AS f_ok1 FROM booked WHERE job = :j_ok AND frame_number = 1 \gset
SELECT proc AS p_ok2, frame AS f_ok2 FROM booked WHERE job = :j_ok AND frame_number = 2 \gset
SELECT proc AS p_retry, frame AS f_retry FROM booked WHERE job = :j_retry \gset
SELECT proc AS p_eat, frame AS f_eat FROM booked WHERE job = :j_eat \gset
SELECT proc AS p_kill, frame AS f_kill FROM booked WHERE job = :j_kill \gset

SELECT is((SELECT count(*)::int FROM booked), 5, 'the fixture books all five frames on one host');
SELECT is((SELECT idle_cc FROM frameq.host WHERE id = :host1), 300, 'the host has 3 of its 8 cores idle');

-- ------------------------------------------------------- errors and stale

SELECT * FROM fqtest.refuses(format('SELECT frameq.complete(%L, %L, %s, %s, 0)', 't08-h1', 'bad', :epoch1, :p_ok1),
	'28P01', NULL, 'complete with a wrong token raises 28P01');
SELECT * FROM fqtest.refuses(format('SELECT frameq.complete(%L, %L, %s, %s, 0)', 't08-h1', :'tok2', :epoch1, :p_ok1),
	'28P01', NULL, 'complete naming one host with another host''s token raises 28P01');
SELECT * FROM fqtest.refuses(format('SELECT frameq.complete(%L, %L, %s, %s, 0)', 't08-nope', :'tok1', :epoch1, :p_ok1),
	'42704', NULL, 'complete for an unknown host raises 42704');
SELECT * FROM fqtest.refuses(format('SELECT frameq.complete(%L, %L, %s, NULL, 0)', 't08-h1', :'tok1', :epoch1),
	'22004', NULL, 'complete with a null proc raises 22004');
SELECT * FROM fqtest.refuses(format('SELECT frameq.complete(%L, %L, %s, %s, NULL)', 't08-h1', :'tok1', :epoch1, :p_ok1),
	'22004', NULL, 'complete with a null exit status raises 22004');
SELECT * FROM fqtest.refuses(format('SELECT frameq.complete(%L, %L, %s, %s, 0, -1)', 't08-h1', :'tok1', :epoch1, :p_ok1),
	'22023', NULL, 'complete with a negative signal raises 22023');
SELECT * FROM fqtest.refuses(format('SELECT frameq.complete(%L, %L, %s, %s, 0, 0, -1)', 't08-h1', :'tok1', :epoch1, :p_ok1),
	'22023', NULL, 'complete with a negative max_rss raises 22023');

SELECT fqtest.state() AS before \gset
SELECT is(frameq.complete('t08-h1', :'tok1', :epoch1 + 1, :p_ok1, 0), 'stale',
		  'complete under a later epoch than the proc''s is stale');
SELECT is(frameq.complete('t08-h1', :'tok1', :epoch1 - 1, :p_ok1, 0), 'stale',
		  'complete under an earlier epoch than the proc''s is stale');
SELECT is(frameq.complete('t08-h2', :'tok2', :epoch2, :p_ok1, 0), 'stale',
		  'complete of a proc by another host (its own name and token) is stale');
SELECT is(frameq.complete('t08-h1', :'tok1', :epoch1, 1234567, 0), 'stale',
		  'complete of an unknown proc is stale');
SELECT is(fqtest.state(), :'before', 'the four stale reports changed nothing');
SELECT ok(frameq.owns(:p_ok1, frameq._run_secret(:p_ok1)), 'the proc is still owned after the stale reports');

-- ------------------------------------------------------------- success

SELECT is((SELECT used_cc FROM frameq.ledger() WHERE kind = 'job' AND id = :j_ok), 200,
		  'before completing, the ledger charges the job 200 centicores');
SELECT is(frameq.complete('t08-h1', :'tok1', :epoch1, :p_ok1, 0, 0, 1048576), 'accepted',
		  'complete of the live proc with exit 0 is accepted');
SELECT results_eq(format('SELECT state, retries, attempts FROM frameq.frame WHERE id = %s', :f_ok1),
				  $$VALUES ('succeeded', 0, 1)$$, 'exit 0 makes the frame succeeded, with no retry counted');
SELECT is((SELECT count(*)::int FROM frameq.proc WHERE id = :p_ok1), 0, 'the completed proc is deleted');
SELECT ok(NOT frameq.owns(:p_ok1, frameq._run_secret(:p_ok1)), 'owns() is false for the completed proc');
SELECT is((SELECT idle_cc FROM frameq.host WHERE id = :host1), 400, 'the host gets its core back at once (4 idle)');
SELECT is((SELECT used_cores FROM frameq.usage WHERE kind = 'host' AND id = :host1), 4.00::numeric(12,2),
		  'usage reports 4 cores in use on the host');
SELECT results_eq(
	format('SELECT ended_at IS NOT NULL, exit_status, exit_signal, max_rss, reason, end_state FROM frameq.run WHERE proc = %s', :p_ok1),
	$$VALUES (true, 0, 0, 1048576::bigint, 'completed', 'succeeded')$$,
	'the run record is closed with exit status 0, signal 0, max_rss and reason completed');
SELECT is((SELECT state FROM frameq.job WHERE id = :j_ok), 'active', 'the job is still active with a frame running');
SELECT results_eq(
	format($$SELECT used_cc, running FROM frameq.ledger() WHERE kind = 'job' AND id = %s$$, :j_ok),
	'VALUES (200, 2)',
	'inside the releasing transaction the ledger still counts the completed proc (released at commit)');
SELECT is_empty('SELECT * FROM frameq.check()',
		  'check() reports no broken invariant after a release inside the releasing transaction');

SELECT fqtest.state() AS before \gset
SELECT is(frameq.complete('t08-h1', :'tok1', :epoch1, :p_ok1, 0, 0, 1048576), 'duplicate',
		  'the same report again is a duplicate');
SELECT is(frameq.complete('t08-h1', :'tok1', :epoch1, :p_ok1, 0), 'duplicate',
		  'the same exit again without max_rss is still a duplicate');
SELECT is(frameq.complete('t08-h1', :'tok1', :epoch1, :p_ok1, 1), 'stale',
		  'a different exit status for a proc already completed is stale');
SELECT is(frameq.complete('t08-h2', :'tok2', :epoch2, :p_ok1, 0), 'stale',
		  'another host repeating the report is stale, not duplicate');
SELECT is(fqtest.state(), :'before', 'duplicate and stale reports changed nothing');

SELECT is(frameq.complete('t08-h1', :'tok1', :epoch1, :p_ok2, 0), 'accepted', 'the job''s last frame completes');
SELECT results_eq(format('SELECT state, finished_at IS NOT NULL FROM frameq.job WHERE id = %s', :j_ok),
				  $$VALUES ('finished', true)$$, 'the job is finished when every frame is terminal');
SELECT results_eq(format('SELECT total, succeeded, running, waiting FROM frameq.job_progress WHERE job = %s', :j_ok),
				  'VALUES (2::bigint, 2::bigint, 0::bigint, 0::bigint)', 'job_progress shows 2 of 2 succeeded');

-- -------------------------------------------------------------- failures

SELECT is(frameq.complete('t08-h1', :'tok1', :epoch1, :p_retry, 1, 0, 2048), 'accepted',
		  'a failed frame''s report is accepted');
SELECT results_eq(format('SELECT state, retries, attempts FROM frameq.frame WHERE id = %s', :f_retry),
				  $$VALUES ('waiting', 1, 1)$$, 'exit 1 with max_retries 1 puts the frame back to waiting with retries 1');
SELECT results_eq(
	format('SELECT exit_status, exit_signal, max_rss, reason, end_state FROM frameq.run WHERE proc = %s', :p_retry),
	$$VALUES (1, 0, 2048::bigint, 'completed', 'waiting')$$,
	'the failed run records exit status 1, reason completed and the frame''s next state');
SELECT is((SELECT state FROM frameq.job WHERE id = :j_retry), 'active', 'a job with a frame to retry stays active');

SELECT proc AS p_retry2 FROM frameq.reserve('t08-h1', :'tok1', :epoch1, 1) \gset
SELECT results_eq(format('SELECT state, retries, attempts FROM frameq.frame WHERE id = %s', :f_retry),
				  $$VALUES ('running', 1, 2)$$, 'the retried frame is booked again: attempt 2');
SELECT is(frameq.complete('t08-h1', :'tok1', :epoch1, :p_retry2, 0, 9), 'accepted',
		  'a frame killed by signal 9 reports completion');
SELECT results_eq(format('SELECT state, retries, attempts FROM frameq.frame WHERE id = %s', :f_retry),
				  $$VALUES ('dead', 2, 2)$$, 'a second failure beyond max_retries 1 makes the frame dead');
SELECT results_eq(format('SELECT exit_status, exit_signal, reason, end_state FROM frameq.run WHERE proc = %s', :p_retry2),
				  $$VALUES (0, 9, 'completed', 'dead')$$, 'the run records signal 9 and the dead end state');
SELECT is((SELECT state FROM frameq.job WHERE id = :j_retry), 'finished', 'a job whose only frame is dead is finished');

SELECT is(frameq.complete('t08-h1', :'tok1', :epoch1, :p_eat, 3), 'accepted', 'a failure with auto_eat is accepted');
SELECT results_eq(format('SELECT state, retries FROM frameq.frame WHERE id = %s', :f_eat),
				  $$VALUES ('eaten', 1)$$, 'with max_retries 0 and auto_eat the first failure eats the frame');
SELECT is((SELECT state FROM frameq.job WHERE id = :j_eat), 'finished', 'a job whose only frame is eaten is finished');

-- ------------------------------------------------ a kill order completes

UPDATE frameq.proc SET state = 'killing', kill_reason = 't08 test', kill_at = clock_timestamp(), want_state = 'dead'
 WHERE id = :p_kill;
SELECT ok(NOT frameq.owns(:p_kill, frameq._run_secret(:p_kill)), 'owns() is false for a proc under a kill order');
SELECT is(frameq.complete('t08-h1', :'tok1', :epoch1, :p_kill, 0), 'accepted',
		  'complete of a proc under a kill order is accepted');
SELECT results_eq(format('SELECT state, retries FROM frameq.frame WHERE id = %s', :f_kill),
				  $$VALUES ('dead', 0)$$, 'it ends in the state the kill order wanted, even on exit 0, with no retry counted');
SELECT results_eq(format('SELECT reason, kill_reason, end_state FROM frameq.run WHERE proc = %s', :p_kill),
				  $$VALUES ('killed', 't08 test', 'dead')$$, 'its run record says killed, with the kill reason');

SELECT results_eq(
	format('SELECT idle_cc, idle_memory FROM frameq.host WHERE id = %s', :host1),
	$$VALUES (800, 17179869184::bigint)$$, 'with every proc completed the host is entirely idle again');
SELECT is((SELECT count(*)::int FROM frameq.proc WHERE host = :host1), 0, 'no proc is left on the host');
SELECT is((SELECT count(*)::int FROM frameq.run WHERE host = :host1 AND ended_at IS NULL), 0,
		  'no run record is left open');

SELECT * FROM finish();
ROLLBACK;
