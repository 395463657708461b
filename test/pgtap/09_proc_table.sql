/*
 * The proc table is the single place where a booking lives: its triggers
 * keep the ledger, the host's capacity, the run record and the frame in
 * step whatever writes to it.  A direct INSERT is a booking (checked
 * against every cap), a bare DELETE is a release, a booking is immutable
 * apart from its kill order, and TRUNCATE is refused.
 *
 * Direct inserts come first: check() is asserted after them, before any
 * release in this transaction makes the ledger read high (see
 * 08_complete.sql).
 */
BEGIN;
\ir include/helpers.psql

SELECT plan(44);

SELECT * FROM fqtest.farm('t09') \gset
SELECT frameq.create_show('t09tight') AS show_tight \gset
SELECT frameq.set_subscription('t09tight', 't09.pool', 1, 1) \g /dev/null
SELECT frameq.create_limit('t09.lic', 1) AS lim \gset

SELECT frameq.submit($${"show": "t09show", "name": "ops",
	"layers": [{"name": "l", "command": "c", "range": "1-3"}]}$$) AS j_ops \gset
SELECT frameq.submit($${"show": "t09show", "name": "capped", "max_cores": 1,
	"layers": [{"name": "l", "command": "c", "range": "1-3"}]}$$) AS j_capped \gset
SELECT frameq.submit($${"show": "t09show", "name": "licensed",
	"layers": [{"name": "l", "command": "c", "range": "1-3", "limits": ["t09.lic"]}]}$$) AS j_lic \gset
SELECT frameq.submit($${"show": "t09show", "name": "direct", "paused": true,
	"layers": [{"name": "l", "command": "c", "range": "1-2"}]}$$) AS j_direct \gset
SELECT frameq.submit($${"show": "t09tight", "name": "tight", "paused": true,
	"layers": [{"name": "l", "command": "c", "range": "1-2"}]}$$) AS j_tight \gset

SELECT is((SELECT count(*)::int FROM frameq.reserve('t09-h1', :'tok1', :epoch1, 100)), 5,
		  'the fixture books 3 frames of ops, 1 of the capped job and 1 licensed frame');
SELECT is((SELECT idle_cc FROM frameq.host WHERE id = :host1), 300, 'the host has 3 idle cores');

/*
 * A direct insert of a proc for frame number N of a job, as reserve() would
 * make it: the frame is moved to running in the same statement.
 */
\set insert_booked 'WITH f AS (UPDATE frameq.frame fr SET state = $q$running$q$, attempts = attempts + 1, version = version + 1 WHERE fr.job = %1$s AND fr.number = %2$s RETURNING fr.id, fr.job, fr.layer) INSERT INTO frameq.proc (id, frame, host, epoch, job, layer, show, allocation, limits, cores_cc, memory, gpus, gpu_memory) SELECT %3$s, f.id, %4$s, %5$s, f.job, f.layer, %6$s, %7$s, %8$L, %9$s, 0, 0, 0 FROM f'

-- ---------------------------------------------- direct INSERT and caps

SELECT * FROM fqtest.refuses(format(:'insert_booked', :j_capped, 2, 900001, :host1, :epoch1, :show, :alloc, '{}', 100),
	'FQ004', 'booking proc 900001 would exceed a cap',
	'a direct INSERT of a proc beyond the job''s max_cores is refused with FQ004');
SELECT * FROM fqtest.refuses(format(:'insert_booked', :j_lic, 2, 900002, :host1, :epoch1, :show, :alloc, '{' || :lim || '}', 100),
	'FQ004', 'booking proc 900002 would exceed a cap',
	'a direct INSERT of a proc beyond a limit''s max_running is refused with FQ004');
SELECT * FROM fqtest.refuses(format(:'insert_booked', :j_direct, 1, 900003, :host1, :epoch1, :show, :alloc, '{}', 400),
	'FQ005', NULL, 'a direct INSERT of a proc larger than the host''s idle cores is refused with FQ005');

SELECT lives_ok(format(:'insert_booked', :j_tight, 1, 900004, :host1, :epoch1, :show_tight, :alloc, '{}', 100),
				'a direct INSERT of a proc within every cap succeeds');
SELECT results_eq(
	format($$SELECT r.frame, r.host, r.cores_cc, r.ended_at IS NULL FROM frameq.run r WHERE r.proc = 900004$$),
	format($$SELECT id, %s, 100, true FROM frameq.frame WHERE job = %s AND number = 1$$, :host1, :j_tight),
	'the directly inserted proc gets an open run record');
SELECT is((SELECT idle_cc FROM frameq.host WHERE id = :host1), 200, 'the directly inserted proc takes a core of the host');
SELECT results_eq(
	format($$SELECT used_cc, running FROM frameq.ledger() WHERE kind = 'subscription' AND id = %s AND id2 = %s$$,
		   :show_tight, :alloc),
	'VALUES (100, 1)', 'the directly inserted proc is charged to the subscription in the ledger');
SELECT * FROM fqtest.refuses(format(:'insert_booked', :j_tight, 2, 900005, :host1, :epoch1, :show_tight, :alloc, '{}', 100),
	'FQ004', NULL, 'a second direct INSERT beyond the subscription''s burst of 1 core is refused with FQ004');
SELECT is_empty('SELECT * FROM frameq.check()', 'check() is clean after the direct inserts');

/*
 * A direct INSERT for a frame that is still waiting.  Either answer keeps
 * doc/design.md, invariant 1 (a frame is running iff it has a proc): the
 * insert moves the frame to running, or it is refused.  Leaving a waiting
 * frame with a proc is not an answer: check() flags it and the proc can
 * never be released.
 */
SELECT id AS f_direct2 FROM frameq.frame WHERE job = :j_direct AND number = 2 \gset
SAVEPOINT waiting_frame;
SELECT fqtest.attempt(format(
	$$INSERT INTO frameq.proc (id, frame, host, epoch, job, layer, show, allocation, cores_cc, memory, gpus, gpu_memory)
	  SELECT 900006, f.id, %s, %s, f.job, f.layer, %s, %s, 100, 0, 0, 0 FROM frameq.frame f WHERE f.id = %s$$,
	:host1, :epoch1, :show, :alloc, :f_direct2)) AS waiting_insert \gset
SELECT ok((SELECT (f.state = 'running') = EXISTS (SELECT 1 FROM frameq.proc p WHERE p.frame = f.id)
			 FROM frameq.frame f WHERE f.id = :f_direct2),
		  format('a direct INSERT of a proc for a waiting frame leaves it running with the proc, or neither (insert: %s)',
				 :'waiting_insert'));
SELECT is_empty('SELECT * FROM frameq.check()', 'check() is clean after a direct INSERT for a waiting frame');
SELECT is(fqtest.attempt('DELETE FROM frameq.proc WHERE id = 900006'), 'ok',
		  'a directly inserted proc (if any) for a formerly waiting frame can be released by DELETE');
ROLLBACK TO SAVEPOINT waiting_frame;

/*
 * A direct INSERT whose copied keys (job, show) are not its frame's: the
 * ledger would charge the wrong job, and the frame's own job could run
 * past its cap.  Refusing it, or charging the frame's real job, are both
 * right; accepting it as given is not.
 */
SELECT id AS f_capped3 FROM frameq.frame WHERE job = :j_capped AND number = 3 \gset
SAVEPOINT wrong_keys;
SELECT fqtest.attempt(format(
	$$WITH f AS (UPDATE frameq.frame fr SET state = 'running', attempts = attempts + 1, version = version + 1
				  WHERE fr.id = %s RETURNING fr.id, fr.layer)
	  INSERT INTO frameq.proc (id, frame, host, epoch, job, layer, show, allocation, cores_cc, memory, gpus, gpu_memory)
	  SELECT 900007, f.id, %s, %s, %s, f.layer, %s, %s, 100, 0, 0, 0 FROM f$$,
	:f_capped3, :host1, :epoch1, :j_ops, :show, :alloc)) AS wrong_keys_insert \gset
SELECT cmp_ok((SELECT count(*)::int FROM frameq.proc p JOIN frameq.frame f ON f.id = p.frame WHERE f.job = :j_capped),
			  '<=', 1,
			  format('a job with max_cores 1 never holds two procs, whatever job a direct INSERT names (insert: %s)',
					 :'wrong_keys_insert'));
SELECT is_empty('SELECT * FROM frameq.check()', 'check() is clean after a direct INSERT naming another job than its frame''s');
ROLLBACK TO SAVEPOINT wrong_keys;

-- --------------------------------------------------- a bare DELETE releases

SELECT proc AS p_ops1, frame AS f_ops1 FROM frameq.frames WHERE job = :j_ops AND frame_number = 1 \gset
SELECT proc AS p_ops2, frame AS f_ops2 FROM frameq.frames WHERE job = :j_ops AND frame_number = 2 \gset
SELECT proc AS p_ops3, frame AS f_ops3 FROM frameq.frames WHERE job = :j_ops AND frame_number = 3 \gset
SELECT id AS p_capped FROM frameq.proc WHERE job = :j_capped \gset
SELECT idle_cc AS idle_before FROM frameq.host WHERE id = :host1 \gset

DELETE FROM frameq.proc WHERE id = :p_ops1;
SELECT is((SELECT count(*)::int FROM frameq.proc WHERE id = :p_ops1), 0, 'a bare DELETE removes the proc');
SELECT results_eq(format('SELECT state, attempts, retries FROM frameq.frame WHERE id = %s', :f_ops1),
				  $$VALUES ('waiting', 1, 0)$$,
				  'a bare DELETE puts the frame back to waiting, keeping its attempt and using no retry');
SELECT results_eq(
	format('SELECT ended_at IS NOT NULL, reason, end_state, exit_status IS NULL FROM frameq.run WHERE proc = %s', :p_ops1),
	$$VALUES (true, 'operator', 'waiting', true)$$,
	'a bare DELETE closes the run record with reason operator and no exit status');
SELECT is((SELECT idle_cc FROM frameq.host WHERE id = :host1), :idle_before + 100,
		  'a bare DELETE gives the proc''s core back to the host');
SELECT is((SELECT frame FROM frameq.reserve('t09-h1', :'tok1', :epoch1, 1)), :f_ops1::bigint,
		  'the released frame can be booked again');

UPDATE frameq.proc SET state = 'killing', kill_reason = 't09 eat', kill_at = clock_timestamp(), want_state = 'eaten'
 WHERE id = :p_ops2;
DELETE FROM frameq.proc WHERE id = :p_ops2;
SELECT is((SELECT state FROM frameq.frame WHERE id = :f_ops2), 'eaten',
		  'a bare DELETE of a kill order applies the state the kill order wanted');
SELECT results_eq(format('SELECT reason, kill_reason, end_state FROM frameq.run WHERE proc = %s', :p_ops2),
				  $$VALUES ('operator', 't09 eat', 'eaten')$$,
				  'its run record says operator, with the kill reason and the eaten end state');

-- ------------------------------------------------- a booking is immutable

SELECT * FROM fqtest.refuses(format('UPDATE frameq.proc SET cores_cc = 200 WHERE id = %s', :p_ops3), '23000',
	'column "cores_cc" of a proc cannot be changed', 'UPDATE of a proc''s cores is refused with 23000');
SELECT * FROM fqtest.refuses(format('UPDATE frameq.proc SET memory = 1 WHERE id = %s', :p_ops3), '23000',
	NULL, 'UPDATE of a proc''s memory is refused with 23000');
SELECT * FROM fqtest.refuses(format('UPDATE frameq.proc SET frame = %s WHERE id = %s', :f_ops1, :p_ops3), '23000',
	NULL, 'UPDATE of a proc''s frame is refused with 23000');
SELECT * FROM fqtest.refuses(format('UPDATE frameq.proc SET epoch = epoch + 1 WHERE id = %s', :p_ops3), '23000',
	NULL, 'UPDATE of a proc''s epoch is refused with 23000');
SELECT * FROM fqtest.refuses(format('UPDATE frameq.proc SET id = id + 1 WHERE id = %s', :p_ops3), '23000',
	NULL, 'UPDATE of a proc''s id (its run token) is refused with 23000');

SELECT lives_ok(format('UPDATE frameq.proc SET kill_sent_at = clock_timestamp() WHERE id = %s', :p_capped),
				'UPDATE of a proc''s kill bookkeeping is allowed');
UPDATE frameq.proc SET state = 'killing', kill_reason = 't09', kill_at = clock_timestamp(), want_state = 'waiting'
 WHERE id = :p_ops3;
SELECT * FROM fqtest.refuses(
	format($$UPDATE frameq.proc SET state = 'running', kill_reason = NULL, kill_at = NULL, want_state = NULL WHERE id = %s$$, :p_ops3),
	'23000', 'a kill order cannot be withdrawn', 'withdrawing a kill order is refused with 23000');

-- ---------------------------------------------------------------- TRUNCATE

SELECT * FROM fqtest.refuses('TRUNCATE frameq.proc', '0A000', 'frameq.proc cannot be truncated',
	'TRUNCATE of the proc table is refused with 0A000');
SELECT * FROM fqtest.refuses('TRUNCATE frameq.proc CASCADE', '0A000', NULL,
	'TRUNCATE ... CASCADE of the proc table is refused with 0A000');

SELECT * FROM finish();
ROLLBACK;
