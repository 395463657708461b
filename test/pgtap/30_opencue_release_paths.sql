/*
 * OpenCue's release paths (the ways OpenCue frees a running frame, listed
 * in doc/reliability.md), one scenario each, against doc/design.md,
 * invariant 2, "kill before release": a running frame is never bookable
 * before proof of death.
 * OpenCue's production incident (issue #2438) was a frame put back in the
 * queue while its first host was still rendering it; it was re-booked
 * elsewhere and two hosts wrote the same output.
 *
 * Each scenario has its own allocation, show and two hosts, A (where the
 * frame runs first) and B (which would take the frame if it were freed too
 * early).  Step by step it checks that B's reserve() does not book the frame
 * and that the frame stays 'running' with its proc until proof of death
 * arrives.  After that proof the frame is booked exactly once, and the old
 * run's late reports are answered 'stale' and change nothing (the new
 * booking is untouched, owns(old) is false, owns(new) is true).
 *
 *   1. host marked down while alive (set_host_state 'down')
 *   2. lost proc: the host stops reporting; only lease expiry frees it
 *   3. orphan (running frame, no proc): impossible by construction;
 *      check() reports one that is forced
 *   4. failed kill: a kill order that is never confirmed
 *   5. late reports after a free, for every way of freeing
 *   6. retry, eat, kill, kill_job of a running frame (OpenCue freed at once)
 *
 * Everything runs in one transaction.  A release's ledger charge is given
 * back only at commit (the ledger reads high until then), so no cap in
 * this file is set tight enough for that to matter, except in a savepoint
 * that is rolled back.  Lease expiry is simulated by moving a host's
 * last_renewal_at and lease_expires_at into the past as superuser and
 * calling frameq._expire_leases(), the background worker's step.
 */
BEGIN;
\ir include/helpers.psql

SELECT plan(216);

-- ------------------------------------------------------------------ helpers

CREATE SCHEMA t30;

/* the agents of this file: name, token, current epoch */
CREATE TABLE t30.agent (name text PRIMARY KEY, token text NOT NULL, epoch bigint);

CREATE FUNCTION t30.host(p_name text, p_alloc text, p_cores numeric) RETURNS void
LANGUAGE sql AS $$
	INSERT INTO t30.agent (name, token)
	VALUES (p_name, frameq.register_host(p_name, p_alloc, p_cores, 17179869184))
$$;

/* attach as an agent would, remember the epoch; returns the kill list */
CREATE FUNCTION t30.attach(p_name text, p_boot text) RETURNS bigint[]
LANGUAGE plpgsql AS $$
DECLARE
	a t30.agent;
	r record;
BEGIN
	SELECT * INTO STRICT a FROM t30.agent x WHERE x.name = p_name;
	SELECT * INTO r FROM frameq.attach(a.name, a.token, p_boot);
	UPDATE t30.agent x SET epoch = r.epoch WHERE x.name = p_name;
	RETURN r.kill;
END
$$;

/* reserve() on a host with its current epoch; returns the frames booked, in order */
CREATE FUNCTION t30.book(p_name text, p_max int DEFAULT NULL) RETURNS bigint[]
LANGUAGE plpgsql AS $$
DECLARE
	a t30.agent;
	got bigint[];
BEGIN
	SELECT * INTO STRICT a FROM t30.agent x WHERE x.name = p_name;
	SELECT coalesce(array_agg(r.frame ORDER BY r.frame), '{}') INTO got
	  FROM frameq.reserve(a.name, a.token, a.epoch, p_max) r;
	RETURN got;
END
$$;

/* heartbeat() with the current (or a given) epoch; returns the kill list */
CREATE FUNCTION t30.hb(p_name text, p_running bigint[], p_epoch bigint DEFAULT NULL)
RETURNS bigint[]
LANGUAGE plpgsql AS $$
DECLARE
	a t30.agent;
	k bigint[];
BEGIN
	SELECT * INTO STRICT a FROM t30.agent x WHERE x.name = p_name;
	SELECT h.kill INTO k FROM frameq.heartbeat(a.name, a.token, coalesce(p_epoch, a.epoch), p_running) h;
	RETURN k;
END
$$;

/* complete() with the current (or a given) epoch */
CREATE FUNCTION t30.done(p_name text, p_proc bigint, p_status int, p_signal int,
						 p_epoch bigint DEFAULT NULL)
RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
	a t30.agent;
BEGIN
	SELECT * INTO STRICT a FROM t30.agent x WHERE x.name = p_name;
	RETURN frameq.complete(a.name, a.token, coalesce(p_epoch, a.epoch), p_proc, p_status, p_signal);
END
$$;

CREATE FUNCTION t30.epoch(p_name text) RETURNS bigint
LANGUAGE sql AS $$ SELECT epoch FROM t30.agent WHERE name = p_name $$;

CREATE FUNCTION t30.frame(p_job bigint, p_number int) RETURNS bigint
LANGUAGE sql AS $$ SELECT id FROM frameq.frame WHERE job = p_job AND number = p_number $$;

CREATE FUNCTION t30.proc_of(p_frame bigint) RETURNS bigint
LANGUAGE sql AS $$ SELECT id FROM frameq.proc WHERE frame = p_frame $$;

/* "running, proc 123 killing on t30-1a", or "waiting, no proc" */
CREATE FUNCTION t30.held(p_frame bigint) RETURNS text
LANGUAGE sql AS $$
	SELECT CASE WHEN p.id IS NULL THEN format('%s, no proc', f.state)
				ELSE format('%s, proc %s %s on %s', f.state, p.id, p.state, h.name) END
	  FROM frameq.frame f
	  LEFT JOIN frameq.proc p ON p.frame = f.id
	  LEFT JOIN frameq.host h ON h.id = p.host
	 WHERE f.id = p_frame
$$;

CREATE FUNCTION t30.holding(p_proc bigint, p_state text, p_host text) RETURNS text
LANGUAGE sql AS $$ SELECT format('running, proc %s %s on %s', p_proc, p_state, p_host) $$;

/* how a run ended: "killed -> waiting"; " -> " while it is open */
CREATE FUNCTION t30.ended(p_proc bigint) RETURNS text
LANGUAGE sql AS $$
	SELECT format('%s -> %s', reason, end_state) FROM frameq.run WHERE proc = p_proc
$$;

/* everything about a frame's current booking that a late report must not touch */
CREATE FUNCTION t30.booking(p_frame bigint) RETURNS text
LANGUAGE sql AS $$
	SELECT format('frame %s version %s attempts %s retries %s; proc %s host %s epoch %s %s booked %s;'
				  ' run started %s ended %s reason %s',
				  f.state, f.version, f.attempts, f.retries, p.id, p.host, p.epoch, p.state,
				  p.booked_at, r.started_at, r.ended_at, r.reason)
	  FROM frameq.frame f
	  LEFT JOIN frameq.proc p ON p.frame = f.id
	  LEFT JOIN frameq.run r ON r.proc = p.id
	 WHERE f.id = p_frame
$$;

/* (runs of the frame, open runs) */
CREATE FUNCTION t30.runs(p_frame bigint) RETURNS text
LANGUAGE sql AS $$
	SELECT format('%s runs, %s open', count(*), count(*) FILTER (WHERE ended_at IS NULL))
	  FROM frameq.run WHERE frame = p_frame
$$;

/* the host stopped reporting: its last renewal is a lease period ago, plus "beyond" */
CREATE FUNCTION t30.lapse(p_name text, p_beyond interval) RETURNS void
LANGUAGE sql AS $$
	UPDATE frameq.host
	   SET last_renewal_at = clock_timestamp() - frameq.lease_period() - p_beyond,
		   lease_expires_at = clock_timestamp() - frameq.lease_period() - p_beyond + frameq._lease_ttl()
	 WHERE name = p_name
$$;

/*
 * The old run (old_proc on old_host, booked under old_epoch) reports late,
 * after its frame was freed and booked again as new_proc on new_host:
 * 10 assertions.
 */
CREATE FUNCTION t30.late_reports(old_host text, old_proc bigint, old_epoch bigint,
								 new_host text, new_proc bigint, p_frame bigint, label text)
RETURNS SETOF text
LANGUAGE plpgsql AS $$
DECLARE
	before text := fqtest.state();
	fp text := t30.booking(p_frame);
BEGIN
	RETURN NEXT is(t30.done(old_host, old_proc, 0, 0, old_epoch), 'stale',
				   label || ': a late complete(exit 0) of the old run is stale');
	RETURN NEXT is(t30.done(old_host, old_proc, 1, 0, old_epoch), 'stale',
				   label || ': a late complete(exit 1) of the old run is stale');
	RETURN NEXT is(t30.done(old_host, old_proc, 0, 9, old_epoch), 'stale',
				   label || ': a late complete(signal 9) of the old run is stale');
	RETURN NEXT is(fqtest.state(), before, label || ': the late completes change nothing at all');
	RETURN NEXT is(t30.hb(old_host, ARRAY[old_proc]), ARRAY[old_proc],
				   label || ': a heartbeat still listing the old proc gets it back to kill (zombie)');
	RETURN NEXT is(t30.booking(p_frame), fp,
				   label || ': that heartbeat leaves the new booking untouched');
	RETURN NEXT is(t30.book(new_host), '{}'::bigint[],
				   label || ': after the late reports the frame is not bookable again');
	RETURN NEXT is(frameq.owns(old_proc, frameq._run_secret(old_proc)), false, label || ': owns(old proc) is false');
	RETURN NEXT is(frameq.owns(new_proc, frameq._run_secret(new_proc)), true, label || ': owns(new proc) is true');
	RETURN NEXT is_empty('SELECT * FROM frameq.check()', label || ': check() is clean');
END
$$;

SELECT current_setting('frameq.lease_ttl')::interval AS ttl \gset

-- =====================================================================
-- 1. Host marked down while alive.  OpenCue: a host whose ping is 300 s
--    old is set DOWN and its procs cleared (lostProc, exit 399) while
--    RQD may still be rendering; since PR #2441 it kills first but
--    defers only up to 20 minutes.  frameq: 'down' is a kill order only.
-- =====================================================================

SELECT frameq.create_allocation('t30.s1') \g /dev/null
SELECT frameq.create_show('t30s1') \g /dev/null
SELECT frameq.set_subscription('t30s1', 't30.s1', 100, 100) \g /dev/null
SELECT t30.host('t30-1a', 't30.s1', 4), t30.host('t30-1b', 't30.s1', 4) \g /dev/null
SELECT t30.attach('t30-1a', 'boot-1a'), t30.attach('t30-1b', 'boot-1b') \g /dev/null
SELECT frameq.submit($${"show": "t30s1", "name": "s1",
	"layers": [{"name": "l", "command": "c", "range": "1-2"}]}$$) AS j1 \gset
SELECT t30.frame(:j1, 1) AS f1, t30.frame(:j1, 2) AS f1b \gset

SELECT is(t30.book('t30-1a', 1), ARRAY[:f1]::bigint[], '1: host A books frame 1');
SELECT t30.proc_of(:f1) AS p1a \gset
SELECT is(t30.book('t30-1b'), ARRAY[:f1b]::bigint[],
		  '1: host B books frame 2, the only waiting frame (B can book; frame 1 is not offered)');

SELECT frameq.set_host_state('t30-1a', 'down') \g /dev/null
SELECT is(t30.held(:f1), t30.holding(:p1a, 'killing', 't30-1a'),
		  '1: A marked down: frame 1 stays running with its proc, now a kill order');
SELECT results_eq(format('SELECT want_state, kill_reason, kill_at IS NOT NULL FROM frameq.proc WHERE id = %s', :p1a),
				  $$VALUES ('waiting'::text, 'host set down'::text, true)$$,
				  '1: the kill order wants the frame waiting, says why and when');
SELECT is(t30.ended(:p1a), ' -> ', '1: the first run is still open');
SELECT is(t30.book('t30-1b'), '{}'::bigint[], '1: B cannot book frame 1 after A is marked down');
SELECT is(frameq.owns(:p1a, frameq._run_secret(:p1a)), false, '1: owns() is false for the kill order: A must not publish');
SELECT is((SELECT idle_cores FROM frameq.hosts WHERE name = 't30-1a'), 3.00::numeric(12,2),
		  '1: the kill order still holds its core on A');

SELECT is(t30.hb('t30-1a', ARRAY[:p1a]::bigint[]), ARRAY[:p1a]::bigint[],
		  '1: A, still alive, heartbeats listing the proc and gets it back in the kill list');
SELECT is(t30.held(:f1), t30.holding(:p1a, 'killing', 't30-1a'),
		  '1: a heartbeat that still lists the proc keeps frame 1 held');
SELECT is(t30.book('t30-1b'), '{}'::bigint[], '1: B still cannot book frame 1');

SAVEPOINT s1_up;
SELECT frameq.set_host_state('t30-1a', 'up') \g /dev/null
SELECT is(t30.held(:f1), t30.holding(:p1a, 'killing', 't30-1a'),
		  '1: putting A back up does not withdraw the kill order');
SELECT is(t30.book('t30-1a') || t30.book('t30-1b'), '{}'::bigint[],
		  '1: with A up again, neither A nor B can book frame 1');
ROLLBACK TO SAVEPOINT s1_up;

SELECT is(t30.hb('t30-1a', '{}'), '{}'::bigint[],
		  '1: A heartbeats without the proc: nothing is left to kill');
SELECT is(t30.ended(:p1a), 'killed -> waiting', '1: that heartbeat is the proof of death: the run ends killed');
SELECT is(t30.held(:f1), 'waiting, no proc', '1: frame 1 is waiting, without a proc');
SELECT is(t30.book('t30-1b'), ARRAY[:f1]::bigint[], '1: now B books frame 1');
SELECT t30.proc_of(:f1) AS p1b \gset
SELECT is(t30.book('t30-1b'), '{}'::bigint[], '1: and only once');
SELECT is(t30.runs(:f1), '2 runs, 1 open', '1: frame 1 has two runs, one of them open');
SELECT is((SELECT retries FROM frameq.frame WHERE id = :f1), 0, '1: the host''s fault used no retry');

SELECT t30.booking(:f1) AS fp1 \gset
SELECT is(t30.done('t30-1a', :p1a, 0, 0), 'stale', '1: A''s late complete of the old run is stale');
SELECT is(t30.booking(:f1), :'fp1', '1: and leaves B''s booking untouched');
SELECT is(frameq.owns(:p1a, frameq._run_secret(:p1a)), false, '1: owns(old proc) is false');
SELECT is(frameq.owns(:p1b, frameq._run_secret(:p1b)), true, '1: owns(new proc) is true');
SELECT is_empty('SELECT * FROM frameq.check()', '1: check() is clean');

-- =====================================================================
-- 2. Lost proc: the host stops reporting.  OpenCue: clearOrphanedProcs
--    and checkHardwareState free procs by a 300 s ping timer.  frameq:
--    only a lease older than lease_period() = ttl*(1+drift)+margin, by
--    which time the agent has self-fenced.
-- =====================================================================

SELECT frameq.create_allocation('t30.s2') \g /dev/null
SELECT frameq.create_show('t30s2') \g /dev/null
SELECT frameq.set_subscription('t30s2', 't30.s2', 100, 100) \g /dev/null
SELECT t30.host('t30-2a', 't30.s2', 4), t30.host('t30-2b', 't30.s2', 4) \g /dev/null
SELECT t30.attach('t30-2a', 'boot-2a'), t30.attach('t30-2b', 'boot-2b') \g /dev/null
SELECT frameq.submit($${"show": "t30s2", "name": "s2",
	"layers": [{"name": "l", "command": "c", "range": "1-2"}]}$$) AS j2 \gset
SELECT t30.frame(:j2, 1) AS f2, t30.frame(:j2, 2) AS f2b \gset
SELECT id AS h2a FROM frameq.host WHERE name = 't30-2a' \gset

SELECT is(t30.book('t30-2a', 1), ARRAY[:f2]::bigint[], '2: host A books frame 1');
SELECT t30.proc_of(:f2) AS p2a \gset
SELECT t30.epoch('t30-2a') AS e2a \gset
SELECT is(t30.book('t30-2b'), ARRAY[:f2b]::bigint[], '2: host B books frame 2');

-- A goes silent.  Its lease_ttl has run out, but not the lease period.
SELECT t30.lapse('t30-2a', '-1 second') \g /dev/null
SELECT * FROM fqtest.refuses(format('SELECT t30.hb(%L, ARRAY[%s]::bigint[])', 't30-2a', :p2a), 'FQ002',
	'lease of host "t30-2a" has expired%', '2: A''s heartbeat after its ttl does not revive the lease');
SELECT * FROM fqtest.refuses($$SELECT t30.book('t30-2a')$$, 'FQ002', NULL,
	'2: A cannot book on its expired lease');
SELECT frameq._expire_leases(clock_timestamp() - interval '1 day') \g /dev/null
SELECT is(t30.held(:f2), t30.holding(:p2a, 'running', 't30-2a'),
		  '2: last renewal just inside the lease period: _expire_leases releases nothing');
SELECT results_eq(format('SELECT state, epoch FROM frameq.host WHERE id = %s', :h2a),
				  format('VALUES (%L, %s::bigint)', 'up', :e2a),
				  '2: and leaves A up, in its epoch');
SELECT is(t30.book('t30-2b'), '{}'::bigint[], '2: B cannot book frame 1 while A might still render it');

-- past the lease period, but the worker started (or saw a clock jump) recently
SELECT t30.lapse('t30-2a', '1 second') \g /dev/null
SELECT frameq._expire_leases(clock_timestamp() - interval '1 second') \g /dev/null
SELECT is(t30.held(:f2), t30.holding(:p2a, 'running', 't30-2a'),
		  '2: a lease period since the last renewal, but not since the worker''s start: nothing released');
SELECT is(t30.book('t30-2b'), '{}'::bigint[], '2: B still cannot book frame 1');

-- past the lease period: A has self-fenced by now
SELECT cmp_ok(frameq._expire_leases(clock_timestamp() - interval '1 day'), '>=', 1::bigint,
			  '2: the last renewal a lease period ago: _expire_leases expires a lease');
SELECT is(t30.ended(:p2a), 'host_lost -> waiting', '2: the run ends host_lost, the frame wanted waiting');
SELECT results_eq(format('SELECT state, down_reason, epoch, lease_expires_at IS NULL FROM frameq.host WHERE id = %s', :h2a),
				  format('VALUES (%L, %L, %s::bigint, true)', 'down', 'lease_lost', :e2a + 1),
				  '2: A is down for lease loss, its epoch moved on');
SELECT is(t30.book('t30-2b'), ARRAY[:f2]::bigint[], '2: now B books frame 1');
SELECT t30.proc_of(:f2) AS p2b \gset
SELECT is(t30.book('t30-2b'), '{}'::bigint[], '2: and only once');
SELECT is(t30.runs(:f2), '2 runs, 1 open', '2: frame 1 has two runs, one of them open');
SELECT is((SELECT retries FROM frameq.frame WHERE id = :f2), 0, '2: host_lost used no retry');

SELECT * FROM fqtest.refuses(format('SELECT t30.hb(%L, ARRAY[%s]::bigint[], %s)', 't30-2a', :p2a, :e2a), 'FQ001',
	'lease epoch % of host "t30-2a" is not current', '2: A''s late heartbeat in its old epoch is refused');
SELECT is(t30.attach('t30-2a', 'boot-2a'), '{}'::bigint[],
		  '2: A attaches again (same boot): nothing of it is left to kill');
SELECT * FROM t30.late_reports('t30-2a', :p2a, :e2a, 't30-2b', :p2b, :f2, '2 (lease lost)');

-- =====================================================================
-- 3. Orphan: a frame 'running' with no proc.  OpenCue finds them by query
--    (clearOrphanedFrames) because its proc delete and frame update are
--    separate.  frameq: deleting a proc releases its frame in the same
--    statement, so an orphan can only be forced, and check() reports it.
-- =====================================================================

SELECT frameq.create_allocation('t30.s3') \g /dev/null
SELECT frameq.create_show('t30s3') \g /dev/null
SELECT frameq.set_subscription('t30s3', 't30.s3', 100, 100) \g /dev/null
SELECT t30.host('t30-3a', 't30.s3', 4), t30.host('t30-3b', 't30.s3', 4) \g /dev/null
SELECT t30.attach('t30-3a', 'boot-3a'), t30.attach('t30-3b', 'boot-3b') \g /dev/null
SELECT frameq.submit($${"show": "t30s3", "name": "s3",
	"layers": [{"name": "l", "command": "c", "range": "1-3"}]}$$) AS j3 \gset
SELECT t30.frame(:j3, 1) AS f31, t30.frame(:j3, 2) AS f32, t30.frame(:j3, 3) AS f33 \gset

SELECT is(t30.book('t30-3a', 3), ARRAY[:f31, :f32, :f33]::bigint[], '3: host A books frames 1-3');
SELECT t30.proc_of(:f31) AS p31, t30.proc_of(:f32) AS p32, t30.proc_of(:f33) AS p33 \gset

DELETE FROM frameq.proc WHERE id = :p31;
SELECT is(t30.held(:f31), 'waiting, no proc',
		  '3: a bare DELETE of a running proc moves its frame out of running in the same statement');
SELECT is(t30.ended(:p31), 'operator -> waiting', '3: and closes its run as an operator release');

SELECT frameq.kill_frame(:f32, 'bad frame') \g /dev/null
DELETE FROM frameq.proc WHERE id = :p32;
SELECT is(t30.held(:f32), 'dead, no proc',
		  '3: a bare DELETE of a kill order applies the wanted end state (dead)');
SELECT is_empty(format($$SELECT id FROM frameq.frame WHERE job = %s AND state = 'running'
						  AND NOT EXISTS (SELECT 1 FROM frameq.proc p WHERE p.frame = frame.id)$$, :j3),
				'3: no frame of the job is running without a proc');
SELECT is_empty('SELECT * FROM frameq.check()', '3: check() is clean after the bare deletes');
SELECT * FROM fqtest.refuses(format('UPDATE frameq.proc SET frame = %s WHERE id = %s', :f31, :p33), '23000',
	'column "frame" of a proc cannot be changed', '3: a proc cannot be moved off its frame');

SAVEPOINT s3_orphan;
SET session_replication_role = replica;
DELETE FROM frameq.proc WHERE id = :p33;
RESET session_replication_role;
SELECT is(t30.held(:f33), 'running, no proc', '3: with triggers bypassed, frame 3 is running without a proc');
SELECT ok(EXISTS (SELECT 1 FROM frameq.check()
				   WHERE invariant = 'one run at a time'
					 AND detail = format('frame %s is running but has no proc', :f33)),
		  '3: check() reports the running frame without a proc');
SELECT is(t30.book('t30-3b'), ARRAY[:f31]::bigint[],
		  '3: B books the waiting frame 1 but not the orphan (it is not waiting)');
ROLLBACK TO SAVEPOINT s3_orphan;
SELECT is(t30.held(:f33), t30.holding(:p33, 'running', 't30-3a'), '3: rolled back, frame 3 has its proc again');
SELECT is_empty('SELECT * FROM frameq.check()', '3: and check() is clean again');

-- the opposite corruption, OpenCue #2438's shape: the frame queued while its proc lives
SAVEPOINT s3_queued;
UPDATE frameq.frame SET state = 'waiting' WHERE id = :f33;
SELECT ok(EXISTS (SELECT 1 FROM frameq.check()
				   WHERE invariant = 'one run at a time'
					 AND detail = format('proc %s holds frame %s, which is waiting', :p33, :f33)),
		  '3: check() reports a waiting frame that still has a proc');
SELECT is(t30.book('t30-3b'), ARRAY[:f31]::bigint[],
		  '3: even then B does not book frame 3 a second time (one proc per frame)');
SELECT is(t30.proc_of(:f33), :p33::bigint, '3: frame 3 keeps its one proc, on A');
ROLLBACK TO SAVEPOINT s3_queued;

SELECT is(t30.book('t30-3b'), ARRAY[:f31]::bigint[], '3: B books frame 1');
SELECT t30.proc_of(:f31) AS p31b \gset
DELETE FROM frameq.proc WHERE job = :j3;
SELECT results_eq(format($$SELECT t30.held(id) FROM frameq.frame WHERE job = %s ORDER BY number$$, :j3),
				  $$VALUES ('waiting, no proc'), ('dead, no proc'), ('waiting, no proc')$$,
				  '3: one DELETE of procs on two hosts moves every frame out of running');
SELECT is((SELECT string_agg(t30.ended(x), ', ' ORDER BY x) FROM unnest(ARRAY[:p31b, :p33]::bigint[]) x),
		  'operator -> waiting, operator -> waiting', '3: and closes both runs');
SELECT is_empty('SELECT * FROM frameq.check()', '3: check() is clean');

-- =====================================================================
-- 4. Failed kill: the kill order is never confirmed (A keeps listing the
--    proc).  OpenCue: after the kill RPC failed it released at once (exit
--    302), later deferred up to 20 minutes, then released as DEAD.
--    frameq: the frame stays held for as long as it takes; only lease
--    loss, confirm_host_dead, a reboot or a confirming report frees it.
-- =====================================================================

SELECT frameq.create_allocation('t30.s4') \g /dev/null
SELECT frameq.create_show('t30s4') \g /dev/null
SELECT frameq.set_subscription('t30s4', 't30.s4', 100, 100) \g /dev/null
SELECT t30.host('t30-4a', 't30.s4', 1), t30.host('t30-4b', 't30.s4', 4) \g /dev/null
SELECT t30.attach('t30-4a', 'boot-4a'), t30.attach('t30-4b', 'boot-4b') \g /dev/null
SELECT frameq.submit($${"show": "t30s4", "name": "s4",
	"layers": [{"name": "l", "command": "c", "range": "1-2"}]}$$) AS j4 \gset
SELECT t30.frame(:j4, 1) AS f4, t30.frame(:j4, 2) AS f4b \gset
SELECT id AS h4a FROM frameq.host WHERE name = 't30-4a' \gset

SELECT is(t30.book('t30-4a'), ARRAY[:f4]::bigint[], '4: host A (one core) books frame 1 and is full');
SELECT t30.proc_of(:f4) AS p4a \gset
SELECT frameq.retry_frame(:f4) \g /dev/null
SELECT is(t30.held(:f4), t30.holding(:p4a, 'killing', 't30-4a'), '4: retry_frame makes a kill order; frame 1 is held');
SELECT is(t30.book('t30-4a'), '{}'::bigint[],
		  '4: A books nothing although frame 2 waits: the kill order still holds A''s core');

SAVEPOINT s4_cap;
SELECT frameq.set_job(:j4, max_cores => 1) \g /dev/null
SELECT is(t30.book('t30-4b'), '{}'::bigint[],
		  '4: with the job capped at 1 core, B cannot book frame 2: the kill order counts against the cap');
ROLLBACK TO SAVEPOINT s4_cap;
SELECT results_eq(format($$SELECT used_cc, running FROM frameq.ledger() WHERE kind = 'job' AND id = %s$$, :j4),
				  'VALUES (100, 1)', '4: the ledger charges the job for the kill order');

SELECT is(t30.book('t30-4b'), ARRAY[:f4b]::bigint[], '4: B books frame 2, and not frame 1');

SELECT is(t30.hb('t30-4a', ARRAY[:p4a]::bigint[]), ARRAY[:p4a]::bigint[], '4: heartbeat 1 lists the proc: kill it');
SELECT is(t30.book('t30-4b'), '{}'::bigint[], '4: after heartbeat 1, B cannot book frame 1');
SELECT is(t30.hb('t30-4a', ARRAY[:p4a]::bigint[]), ARRAY[:p4a]::bigint[], '4: heartbeat 2 lists the proc: kill it');
SELECT is(t30.book('t30-4b'), '{}'::bigint[], '4: after heartbeat 2, B cannot book frame 1');
SELECT is(t30.hb('t30-4a', ARRAY[:p4a]::bigint[]), ARRAY[:p4a]::bigint[], '4: heartbeat 3 lists the proc: kill it');
SELECT is(t30.book('t30-4b'), '{}'::bigint[], '4: after heartbeat 3, B cannot book frame 1');
SELECT is(t30.held(:f4), t30.holding(:p4a, 'killing', 't30-4a'), '4: frame 1 is still held by the kill order');

-- a day-old kill order, resent: still no release (there is no kill timeout)
UPDATE frameq.proc SET kill_at = clock_timestamp() - interval '1 day',
	   kill_sent_at = clock_timestamp() - interval '1 day' WHERE id = :p4a;
SELECT cmp_ok(frameq._send_kills(0), '>=', 1::bigint, '4: the worker resends the kill order');
SELECT frameq._expire_leases(clock_timestamp() - interval '1 day') \g /dev/null
SELECT is(t30.held(:f4), t30.holding(:p4a, 'killing', 't30-4a'),
		  '4: a day-old unconfirmed kill order on a live lease is still held');
SELECT is(t30.book('t30-4b'), '{}'::bigint[], '4: B still cannot book frame 1');
SELECT is((SELECT idle_cc FROM frameq.host WHERE id = :h4a), 0, '4: and A''s core is still taken');
SELECT * FROM fqtest.refuses(format($$UPDATE frameq.proc SET state = 'running', want_state = NULL, kill_at = NULL WHERE id = %s$$, :p4a),
	'23000', 'a kill order cannot be withdrawn', '4: the kill order cannot be withdrawn');

SAVEPOINT s4_same_boot;
SELECT is(t30.attach('t30-4a', 'boot-4a'), ARRAY[:p4a]::bigint[],
		  '4: A re-attaches with the same boot id: the proc comes back as a kill order');
SELECT is(t30.held(:f4), t30.holding(:p4a, 'killing', 't30-4a'), '4: a same-boot attach is no proof of death');
SELECT is(t30.book('t30-4b'), '{}'::bigint[], '4: B cannot book frame 1 after a same-boot attach');
ROLLBACK TO SAVEPOINT s4_same_boot;

SAVEPOINT s4_free;
-- (a) a heartbeat that no longer lists it
SELECT is(t30.hb('t30-4a', '{}'), '{}'::bigint[], '4a: A finally heartbeats without the proc');
SELECT is(t30.ended(:p4a), 'killed -> waiting', '4a: the run ends killed, frame 1 waiting');
SELECT is(t30.book('t30-4b'), ARRAY[:f4]::bigint[], '4a: B books frame 1');
SELECT is(t30.book('t30-4a') || t30.book('t30-4b'), '{}'::bigint[], '4a: exactly once');
ROLLBACK TO SAVEPOINT s4_free;
-- (b) lease loss
SELECT t30.lapse('t30-4a', '1 second') \g /dev/null
SELECT frameq._expire_leases(clock_timestamp() - interval '1 day') \g /dev/null
SELECT is(t30.ended(:p4a), 'host_lost -> waiting', '4b: lease loss ends the run host_lost, frame 1 waiting');
SELECT is(t30.book('t30-4b'), ARRAY[:f4]::bigint[], '4b: B books frame 1');
SELECT is(t30.book('t30-4b'), '{}'::bigint[], '4b: exactly once');
ROLLBACK TO SAVEPOINT s4_free;
-- (c) the operator says the machine is off
SELECT frameq.confirm_host_dead('t30-4a') \g /dev/null
SELECT is(t30.ended(:p4a), 'operator -> waiting', '4c: confirm_host_dead ends the run (operator), frame 1 waiting');
SELECT is(t30.book('t30-4b'), ARRAY[:f4]::bigint[], '4c: B books frame 1');
SELECT is(t30.book('t30-4b'), '{}'::bigint[], '4c: exactly once');
ROLLBACK TO SAVEPOINT s4_free;
-- (d) the machine rebooted
SELECT is(t30.attach('t30-4a', 'boot-4a-2'), '{}'::bigint[], '4d: A attaches with a new boot id: nothing to kill');
SELECT is(t30.ended(:p4a), 'host_rebooted -> waiting', '4d: the run ends host_rebooted, frame 1 waiting');
SELECT is(t30.book('t30-4b'), ARRAY[:f4]::bigint[], '4d: B books frame 1');
SELECT is(t30.book('t30-4a') || t30.book('t30-4b'), '{}'::bigint[], '4d: exactly once');
ROLLBACK TO SAVEPOINT s4_free;
SELECT is(t30.held(:f4), t30.holding(:p4a, 'killing', 't30-4a'), '4: (rolled back to the unconfirmed kill order)');
SELECT is_empty('SELECT * FROM frameq.check()', '4: check() is clean with the kill order pending');

-- =====================================================================
-- 5. Late reports after a free.  OpenCue: a late FrameCompleteReport
--    stopped the new run and re-freed the frame (PR #2506); a reported
--    frame without a proc was not killed once the frame had left RUNNING
--    (the kill is frame-scoped).  frameq: every late report of the old
--    run is stale, and a heartbeat listing it gets it killed at once.
--    Once per way of freeing the frame.
-- =====================================================================

SELECT frameq.create_allocation('t30.s5') \g /dev/null
SELECT frameq.create_show('t30s5') \g /dev/null
SELECT frameq.set_subscription('t30s5', 't30.s5', 100, 100) \g /dev/null
SELECT t30.host('t30-5a', 't30.s5', 4), t30.host('t30-5b', 't30.s5', 4) \g /dev/null
SELECT t30.attach('t30-5a', 'boot-5a'), t30.attach('t30-5b', 'boot-5b') \g /dev/null
SELECT frameq.submit($${"show": "t30s5", "name": "s5",
	"layers": [{"name": "l", "command": "c", "range": "1"}]}$$) AS j5 \gset
SELECT t30.frame(:j5, 1) AS f5 \gset

SELECT is(t30.book('t30-5a'), ARRAY[:f5]::bigint[], '5: host A books the frame');
SELECT t30.proc_of(:f5) AS p5a \gset
SELECT t30.epoch('t30-5a') AS e5a \gset
SAVEPOINT s5;

-- (a) lost by the agent: A's own word, in two heartbeats
SELECT is(t30.hb('t30-5a', '{}'), '{}'::bigint[], '5a: a heartbeat right after the booking does not list it');
SELECT is(t30.held(:f5), t30.holding(:p5a, 'running', 't30-5a'),
		  '5a: A may not have seen the booking yet: the frame stays held');
SELECT is(t30.book('t30-5b'), '{}'::bigint[], '5a: B cannot book the frame');
SELECT is(t30.hb('t30-5a', '{}'), '{}'::bigint[], '5a: the next heartbeat still does not list it');
SELECT is(t30.ended(:p5a), 'lost_by_agent -> waiting', '5a: A has seen it and does not run it: lost_by_agent');
SELECT is(t30.book('t30-5b'), ARRAY[:f5]::bigint[], '5a: B books the frame');
SELECT t30.proc_of(:f5) AS p5b \gset
SELECT * FROM t30.late_reports('t30-5a', :p5a, :e5a, 't30-5b', :p5b, :f5, '5a (lost by agent)');
ROLLBACK TO SAVEPOINT s5;

-- (b) a kill order confirmed by the run's own complete
SELECT frameq.retry_frame(:f5) \g /dev/null
SELECT is(t30.book('t30-5b'), '{}'::bigint[], '5b: B cannot book the frame ordered killed');
SELECT is(t30.done('t30-5a', :p5a, 143, 0), 'accepted', '5b: A reports the killed run ended (143)');
SELECT is(t30.ended(:p5a), 'killed -> waiting', '5b: the complete confirms the kill');
SELECT is(t30.book('t30-5b'), ARRAY[:f5]::bigint[], '5b: B books the frame');
SELECT t30.proc_of(:f5) AS p5b \gset
SELECT fqtest.state() AS before5b \gset
SELECT is(t30.done('t30-5a', :p5a, 143, 0), 'duplicate', '5b: the same complete again is a duplicate');
SELECT is(fqtest.state(), :'before5b', '5b: and changes nothing');
SELECT * FROM t30.late_reports('t30-5a', :p5a, :e5a, 't30-5b', :p5b, :f5, '5b (kill confirmed by complete)');
ROLLBACK TO SAVEPOINT s5;

-- (c) lease lost; A comes back (same boot) and reports
SELECT t30.lapse('t30-5a', '1 second') \g /dev/null
SELECT frameq._expire_leases(clock_timestamp() - interval '1 day') \g /dev/null
SELECT is(t30.ended(:p5a), 'host_lost -> waiting', '5c: the lease is lost: host_lost');
SELECT is(t30.book('t30-5b'), ARRAY[:f5]::bigint[], '5c: B books the frame');
SELECT t30.proc_of(:f5) AS p5b \gset
SELECT * FROM fqtest.refuses(format('SELECT t30.hb(%L, ARRAY[%s]::bigint[])', 't30-5a', :p5a), 'FQ001', NULL,
	'5c: A''s heartbeat in its lost epoch is refused');
SELECT is(t30.attach('t30-5a', 'boot-5a'), '{}'::bigint[], '5c: A attaches again: nothing of it to kill');
SELECT * FROM t30.late_reports('t30-5a', :p5a, :e5a, 't30-5b', :p5b, :f5, '5c (lease lost)');
ROLLBACK TO SAVEPOINT s5;

-- (d) the operator wrongly confirms A dead while it still renders
SELECT frameq.confirm_host_dead('t30-5a') \g /dev/null
SELECT is(t30.ended(:p5a), 'operator -> waiting', '5d: confirm_host_dead releases the run (operator)');
SELECT is(t30.book('t30-5b'), ARRAY[:f5]::bigint[], '5d: B books the frame');
SELECT t30.proc_of(:f5) AS p5b \gset
SELECT * FROM fqtest.refuses(format('SELECT t30.hb(%L, ARRAY[%s]::bigint[])', 't30-5a', :p5a), 'FQ001', NULL,
	'5d: A, still alive, heartbeats in its old epoch: refused');
SELECT is(t30.attach('t30-5a', 'boot-5a'), '{}'::bigint[], '5d: A attaches again: nothing of it to kill');
SELECT * FROM t30.late_reports('t30-5a', :p5a, :e5a, 't30-5b', :p5b, :f5, '5d (confirmed dead)');
ROLLBACK TO SAVEPOINT s5;

-- (e) A rebooted
SELECT is(t30.attach('t30-5a', 'boot-5a-2'), '{}'::bigint[], '5e: A attaches with a new boot id');
SELECT is(t30.ended(:p5a), 'host_rebooted -> waiting', '5e: its run ends host_rebooted');
SELECT is(t30.book('t30-5b'), ARRAY[:f5]::bigint[], '5e: B books the frame');
SELECT t30.proc_of(:f5) AS p5b \gset
SELECT * FROM t30.late_reports('t30-5a', :p5a, :e5a, 't30-5b', :p5b, :f5, '5e (rebooted)');
ROLLBACK TO SAVEPOINT s5;

-- =====================================================================
-- 6. retry / eat / kill of a running frame, and kill_job.  OpenCue freed
--    the frame at once and killed the process by frame id afterwards.
--    frameq: kill orders; the wanted state applies on confirmation.
-- =====================================================================

SELECT frameq.create_allocation('t30.s6') \g /dev/null
SELECT frameq.create_show('t30s6') \g /dev/null
SELECT frameq.set_subscription('t30s6', 't30.s6', 100, 100) \g /dev/null
SELECT t30.host('t30-6a', 't30.s6', 5), t30.host('t30-6b', 't30.s6', 4) \g /dev/null
SELECT t30.attach('t30-6a', 'boot-6a'), t30.attach('t30-6b', 'boot-6b') \g /dev/null
SELECT frameq.submit($${"show": "t30s6", "name": "s6",
	"layers": [{"name": "l", "command": "c", "range": "1-4"}]}$$) AS j6 \gset
SELECT frameq.submit($${"show": "t30s6", "name": "s6k",
	"layers": [{"name": "l", "command": "c", "range": "1"}]}$$) AS j6k \gset
SELECT t30.frame(:j6, 1) AS f61, t30.frame(:j6, 2) AS f62, t30.frame(:j6, 3) AS f63,
	   t30.frame(:j6, 4) AS f64, t30.frame(:j6k, 1) AS f6k \gset

SELECT is(t30.book('t30-6a'), ARRAY[:f61, :f62, :f63, :f64, :f6k]::bigint[],
		  '6: host A books the four frames of one job and the frame of another');
SELECT t30.proc_of(:f61) AS p61, t30.proc_of(:f62) AS p62, t30.proc_of(:f63) AS p63,
	   t30.proc_of(:f64) AS p64, t30.proc_of(:f6k) AS p6k \gset

SELECT frameq.retry_frame(:f61) \g /dev/null
SELECT frameq.eat_frame(:f62) \g /dev/null
SELECT frameq.kill_frame(:f63, 'bad frame') \g /dev/null
SELECT frameq.kill_job(:j6k, 'job killed') \g /dev/null

SELECT results_eq(format($$SELECT f.state, p.id, p.state, p.want_state, p.kill_reason
							 FROM frameq.frame f JOIN frameq.proc p ON p.frame = f.id
							WHERE f.id IN (%s, %s, %s, %s) ORDER BY f.job, f.number$$, :f61, :f62, :f63, :f6k),
				  format($$VALUES ('running', %s::bigint, 'killing', 'waiting', 'retried by operator'),
								  ('running', %s, 'killing', 'eaten', 'eaten by operator'),
								  ('running', %s, 'killing', 'dead', 'bad frame'),
								  ('running', %s, 'killing', 'dead', 'job killed')$$, :p61, :p62, :p63, :p6k),
				  '6: retry, eat, kill and kill_job leave each frame running, its proc a kill order with the wanted state');
SELECT is((SELECT state FROM frameq.job WHERE id = :j6k), 'killed', '6: the killed job is killed at once');
SELECT is(t30.book('t30-6b'), '{}'::bigint[], '6: B can book none of the four');
SELECT is(ARRAY[frameq.owns(:p61, frameq._run_secret(:p61)), frameq.owns(:p62, frameq._run_secret(:p62)), frameq.owns(:p63, frameq._run_secret(:p63)), frameq.owns(:p6k, frameq._run_secret(:p6k)), frameq.owns(:p64, frameq._run_secret(:p64))],
		  ARRAY[false, false, false, false, true], '6: owns() is false for the kill orders, true for the untouched run');
SELECT is(t30.hb('t30-6a', ARRAY[:p61, :p62, :p63, :p64, :p6k]::bigint[]),
		  (SELECT array_agg(x ORDER BY x) FROM unnest(ARRAY[:p61, :p62, :p63, :p6k]::bigint[]) x),
		  '6: A heartbeats listing all five: the four kill orders come back');
SELECT is(t30.book('t30-6b'), '{}'::bigint[], '6: B still can book none of them');
SELECT is((SELECT count(*)::int FROM frameq.frame WHERE id IN (:f61, :f62, :f63, :f6k) AND state = 'running'), 4,
		  '6: all four are still running');

SELECT is(t30.done('t30-6a', :p62, 0, 0), 'accepted', '6: the eaten frame''s run reports exit 0');
SELECT is(t30.held(:f62), 'eaten, no proc', '6: that confirms the kill: the frame is eaten, not succeeded');
SELECT is(t30.done('t30-6a', :p63, 0, 9), 'accepted', '6: the killed frame''s run reports signal 9');
SELECT is(t30.held(:f63), 'dead, no proc', '6: the killed frame is dead');
SELECT is(t30.hb('t30-6a', ARRAY[:p64]::bigint[]), '{}'::bigint[],
		  '6: A heartbeats listing only the untouched run: nothing left to kill');
SELECT is(t30.held(:f61), 'waiting, no proc', '6: the retried frame is waiting');
SELECT is(t30.held(:f6k), 'dead, no proc', '6: the killed job''s frame is dead');
SELECT is(t30.held(:f64), t30.holding(:p64, 'running', 't30-6a'), '6: the untouched run is untouched');
SELECT results_eq(format($$SELECT reason, end_state, exit_status, exit_signal, kill_reason
							 FROM frameq.runs WHERE proc IN (%s, %s, %s, %s) ORDER BY job, frame$$, :p61, :p62, :p63, :p6k),
				  $$VALUES ('killed', 'waiting', NULL::int, NULL::int, 'retried by operator'),
						   ('killed', 'eaten', 0, 0, 'eaten by operator'),
						   ('killed', 'dead', 0, 9, 'bad frame'),
						   ('killed', 'dead', NULL, NULL, 'job killed')$$,
				  '6: each run ends with reason killed, the wanted end state, exit and kill reason');
SELECT is((SELECT sum(retries)::int FROM frameq.frame WHERE id IN (:f61, :f62, :f63, :f6k)), 0,
		  '6: operator kills use no retry');
SELECT is((SELECT state FROM frameq.job WHERE id = :j6k), 'killed', '6: the killed job stays killed');
SELECT is(t30.book('t30-6b'), ARRAY[:f61]::bigint[], '6: B books the retried frame, and only it');
SELECT t30.proc_of(:f61) AS p61b \gset
SELECT is(t30.book('t30-6b') || t30.book('t30-6a'), '{}'::bigint[], '6: exactly once; eaten and dead frames are never booked');
SELECT t30.booking(:f61) AS fp6 \gset
SELECT is(t30.done('t30-6a', :p61, 0, 0), 'stale', '6: the retried run''s late complete is stale');
SELECT is(t30.hb('t30-6a', ARRAY[:p61, :p64]::bigint[]), ARRAY[:p61]::bigint[],
		  '6: a heartbeat still listing the retried run gets it back as a zombie');
SELECT is(t30.booking(:f61), :'fp6', '6: and B''s booking is untouched');
SELECT is(ARRAY[frameq.owns(:p61, frameq._run_secret(:p61)), frameq.owns(:p61b, frameq._run_secret(:p61b))], ARRAY[false, true], '6: owns(old) false, owns(new) true');
SELECT is_empty('SELECT * FROM frameq.check()', '6: check() is clean');

SELECT * FROM finish();
ROLLBACK;
