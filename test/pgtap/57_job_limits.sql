/*
 * A job's limits on failure (src/limits.c, doc/reference.md "Job limits
 * on failure"):
 * - spec fields host_failure_limit and max_dead_frames: defaults, bounds,
 *   refusals that name the field and change nothing;
 * - a host that fails a job's runs host_failure_limit times is blocked
 *   for the job: job_host_blocks lists it, reserve() gives it none of the
 *   job's tasks while other hosts go on booking them and it goes on
 *   booking other jobs; what counts as a failure and what does not;
 *   unblock_host() and its refusals, for admins and for submitters;
 * - max_dead_frames pauses the job when its dead tasks reach it (retries
 *   used up, kill_frame of a waiting task, a kill order confirmed), with
 *   job_progress.paused_reason saying so; resumed, it pauses again only
 *   when one more task dies; an operator's pause shows 'operator';
 * - check()'s host block rules, and the worker's settling of what a
 *   release left to it (job_limit_check).
 *
 * Each job is submitted at a higher priority than every job before it, so
 * that a reserve() of one task books from the job under test.
 */
BEGIN;
\ir include/helpers.psql

SELECT plan(117);

SELECT * FROM fqtest.farm('t57', cores => '{16,16,16}') \gset

/* one task of the job first in policy order, on this host: its proc */
CREATE FUNCTION fqtest.book1(host text, tok text, epoch bigint) RETURNS bigint
LANGUAGE sql AS $$ SELECT b.proc FROM frameq.reserve(host, tok, epoch, 1) b $$;
/* the job of a proc */
CREATE FUNCTION fqtest.job_of(proc bigint) RETURNS bigint
LANGUAGE sql AS $$ SELECT p.job FROM frameq.proc p WHERE p.id = proc $$;
/* a job's failure count on a host, as (failures, blocked) */
CREATE FUNCTION fqtest.count_of(job bigint, host int) RETURNS text
LANGUAGE sql AS $$
	SELECT coalesce((SELECT format('%s failures, %s', f.failures,
								   CASE WHEN f.blocked_at IS NULL THEN 'not blocked' ELSE 'blocked' END)
					   FROM frameq.job_host_failure f WHERE f.job = count_of.job AND f.host = count_of.host),
					'no count')
$$;

-- ------------------------------------------------------------ the fields

SELECT frameq.submit('{"show": "t57show", "name": "plain", "priority": -10,
	"layers": [{"name": "l", "command": "c", "range": "1-50"}]}') AS plain \gset
SELECT results_eq(format('SELECT host_failure_limit, max_dead_frames, paused_reason, host_blocks
							FROM frameq.job WHERE id = %s', :plain),
	$$VALUES (NULL::int, NULL::int, NULL::text, false)$$,
	'a spec without the fields stores neither (the defaults), no pause reason, no blocks');
SELECT is(frameq._default_host_failure_limit(), 3, 'the default host failure limit is 3');
SELECT is((SELECT paused_reason FROM frameq.job_progress WHERE job = :plain), NULL,
	'job_progress.paused_reason is NULL for an active job');

SELECT frameq.submit('{"show": "t57show", "name": "edges", "priority": -20,
	"host_failure_limit": 1000, "max_dead_frames": 1000000,
	"layers": [{"name": "l", "command": "c", "range": "1"}]}') AS edges \gset
SELECT results_eq(format('SELECT host_failure_limit, max_dead_frames FROM frameq.job WHERE id = %s', :edges),
	$$VALUES (1000, 1000000)$$, 'the largest values are taken');
SELECT frameq.submit('{"show": "t57show", "name": "low", "priority": -20, "paused": true,
	"host_failure_limit": 0, "max_dead_frames": 1,
	"layers": [{"name": "l", "command": "c", "range": "1"}]}') AS low \gset
SELECT results_eq(format('SELECT host_failure_limit, max_dead_frames FROM frameq.job WHERE id = %s', :low),
	$$VALUES (0, 1)$$, 'the smallest values are taken (0: no host is ever blocked)');
SELECT is((SELECT paused_reason FROM frameq.job_progress WHERE job = :low), 'operator',
	'a job submitted paused shows paused_reason operator');
SELECT frameq.submit('{"show": "t57show", "name": "nulls", "priority": -20,
	"host_failure_limit": null, "max_dead_frames": null,
	"layers": [{"name": "l", "command": "c", "range": "1"}]}') AS nulls \gset
SELECT results_eq(format('SELECT host_failure_limit, max_dead_frames FROM frameq.job WHERE id = %s', :nulls),
	$$VALUES (NULL::int, NULL::int)$$, 'null is the same as leaving a field out');

SELECT * FROM fqtest.refuses($$SELECT frameq.submit('{"show": "t57show", "name": "x", "host_failure_limit": -1,
	"layers": [{"name": "l", "command": "c", "range": "1"}]}')$$,
	'22023', 'spec.host_failure_limit must be a whole number from 0 to 1000, not -1',
	'a negative host_failure_limit is refused with 22023');
SELECT * FROM fqtest.refuses($$SELECT frameq.submit('{"show": "t57show", "name": "x", "host_failure_limit": 1001,
	"layers": [{"name": "l", "command": "c", "range": "1"}]}')$$,
	'54000', 'spec.host_failure_limit must be a whole number from 0 to 1000, not 1001',
	'a host_failure_limit past 1000 is refused with 54000');
SELECT * FROM fqtest.refuses($$SELECT frameq.submit('{"show": "t57show", "name": "x", "host_failure_limit": 2.5,
	"layers": [{"name": "l", "command": "c", "range": "1"}]}')$$,
	'22023', 'spec.host_failure_limit must be a whole number%', 'a fractional host_failure_limit is refused');
SELECT * FROM fqtest.refuses($$SELECT frameq.submit('{"show": "t57show", "name": "x", "host_failure_limit": "3",
	"layers": [{"name": "l", "command": "c", "range": "1"}]}')$$,
	'22023', 'spec.host_failure_limit must be a number', 'a host_failure_limit that is a string is refused');
SELECT * FROM fqtest.refuses($$SELECT frameq.submit('{"show": "t57show", "name": "x", "max_dead_frames": 0,
	"layers": [{"name": "l", "command": "c", "range": "1"}]}')$$,
	'22023', 'spec.max_dead_frames must be a whole number from 1 to 1000000, not 0',
	'a max_dead_frames of 0 is refused with 22023');
SELECT * FROM fqtest.refuses($$SELECT frameq.submit('{"show": "t57show", "name": "x", "max_dead_frames": 1000001,
	"layers": [{"name": "l", "command": "c", "range": "1"}]}')$$,
	'54000', 'spec.max_dead_frames must be a whole number from 1 to 1000000, not 1000001',
	'a max_dead_frames past 1000000 is refused with 54000');
SELECT * FROM fqtest.refuses($$SELECT frameq.submit('{"show": "t57show", "name": "x", "max_dead_frames": [2],
	"layers": [{"name": "l", "command": "c", "range": "1"}]}')$$,
	'22023', 'spec.max_dead_frames must be a number', 'a max_dead_frames that is an array is refused');

-- ------------------------------------------------- blocking after N failures

SELECT frameq.submit('{"show": "t57show", "name": "flaky", "priority": 10, "max_retries": 100,
	"host_failure_limit": 2, "layers": [{"name": "l", "command": "c", "range": "1-20"}]}') AS flaky \gset
CREATE TEMP TABLE b1 AS SELECT proc, frame_number FROM frameq.reserve('t57-h1', :'tok1', :epoch1, 4);
SELECT is((SELECT count(*)::int FROM b1 JOIN frameq.proc p ON p.id = b1.proc WHERE p.job = :flaky), 4,
	'h1 books four tasks of the flaky job');
SELECT proc AS p1 FROM b1 WHERE frame_number = 1 \gset
SELECT proc AS p2 FROM b1 WHERE frame_number = 2 \gset
SELECT proc AS p3 FROM b1 WHERE frame_number = 3 \gset
SELECT proc AS p4 FROM b1 WHERE frame_number = 4 \gset

SELECT is(frameq.complete('t57-h1', :'tok1', :epoch1, :p1, 1), 'accepted', 'h1 reports its first task failed');
SELECT is(fqtest.count_of(:flaky, :host1), '1 failures, not blocked', 'one failure is counted, below the limit of 2');
SELECT is((SELECT counted_since FROM frameq.job_host_failure WHERE job = :flaky AND host = :host1),
		  (SELECT ended_at FROM frameq.run WHERE proc = :p1), 'the count runs from the end of the failed run');
SELECT is((SELECT count(*)::int FROM frameq.job_host_blocks WHERE job = :flaky), 0, 'no host is blocked yet');
SELECT is(frameq.complete('t57-h1', :'tok1', :epoch1, :p2, 0), 'accepted', 'its second task succeeds');
SELECT is(fqtest.count_of(:flaky, :host1), '1 failures, not blocked', 'a success is not counted');
SELECT is(frameq.complete('t57-h1', :'tok1', :epoch1, :p3, 0, 11), 'accepted', 'its third task dies of a signal');
SELECT is(fqtest.count_of(:flaky, :host1), '2 failures, blocked', 'a signal counts: the second failure blocks h1');
SELECT results_eq(format('SELECT job, host, failures, since FROM frameq.job_host_blocks WHERE job = %s', :flaky),
	format('SELECT %s::bigint, %L::text, 2, ended_at FROM frameq.run WHERE proc = %s', :flaky, 't57-h1', :p3),
	'job_host_blocks lists h1 for the job, with its failures, since the blocking run ended');
SELECT ok((SELECT host_blocks FROM frameq.job WHERE id = :flaky), 'the job is marked as having a blocked host');

SELECT is(fqtest.job_of(fqtest.book1('t57-h1', :'tok1', :epoch1)), :'plain'::bigint,
	'a blocked h1 books the next job in policy order instead');
SELECT is((SELECT count(*)::int FROM frameq.reserve('t57-h1', :'tok1', :epoch1, 3) b
			WHERE b.job = :flaky), 0, 'however many it asks for, none of them is the flaky job''s');
SELECT fqtest.book1('t57-h2', :'tok2', :epoch2) AS q1 \gset
SELECT is(fqtest.job_of(:q1), :'flaky'::bigint, 'h2 still books the flaky job');
SELECT is((SELECT count(*)::int FROM frameq.frame WHERE job = :flaky AND state = 'waiting'), 17,
	'the job''s tasks still wait, for the other hosts');
SELECT is_empty('SELECT * FROM frameq.check()', 'check() is clean with h1 blocked');

SELECT blocked_at AS since3 FROM frameq.job_host_failure WHERE job = :flaky AND host = :host1 \gset
SELECT is(frameq.complete('t57-h1', :'tok1', :epoch1, :p4, 2), 'accepted',
	'a task h1 was running when it was blocked fails too');
SELECT is(fqtest.count_of(:flaky, :host1), '3 failures, blocked', 'it is counted on');
SELECT is((SELECT blocked_at FROM frameq.job_host_failure WHERE job = :flaky AND host = :host1), :'since3'::timestamptz,
	'the block still dates from the failure that made it');

/* what does not count: a confirmed kill order, an operator's release */
SELECT frameq.kill_frame((SELECT frame FROM frameq.proc WHERE id = :q1), 'bad frame') \g /dev/null
SELECT is(frameq.complete('t57-h2', :'tok2', :epoch2, :q1, 1, 9), 'accepted', 'h2 confirms a kill order');
SELECT is((SELECT reason FROM frameq.run WHERE proc = :q1), 'killed', 'its run ended killed');
SELECT is(fqtest.count_of(:flaky, :host2), 'no count', 'a killed run does not count against the host');
SELECT fqtest.book1('t57-h2', :'tok2', :epoch2) AS q2 \gset
DELETE FROM frameq.proc WHERE id = :q2;
SELECT is((SELECT reason FROM frameq.run WHERE proc = :q2), 'operator', 'a bare DELETE releases as operator');
SELECT is(fqtest.count_of(:flaky, :host2), 'no count', 'an operator''s release does not count against the host');

-- ---------------------------------------------------------- unblock_host

SELECT * FROM fqtest.refuses($$SELECT frameq.unblock_host(NULL, 't57-h1')$$,
	'22004', 'job must not be null', 'unblock_host without a job is refused with 22004');
SELECT * FROM fqtest.refuses(format('SELECT frameq.unblock_host(%s, NULL)', :flaky),
	'22004', 'host must not be null', 'unblock_host without a host is refused with 22004');
SELECT * FROM fqtest.refuses($$SELECT frameq.unblock_host(987654321, 't57-h1')$$,
	'42704', 'job 987654321 does not exist', 'unblock_host of an unknown job is refused with 42704');
SELECT * FROM fqtest.refuses(format('SELECT frameq.unblock_host(%s, %L)', :flaky, 't57-nope'),
	'42704', 'host "t57-nope" is not registered', 'unblock_host of an unknown host is refused with 42704');
SELECT * FROM fqtest.refuses(format('SELECT frameq.unblock_host(%s, %L)', :flaky, repeat('h', 101)),
	'54000', 'host is too large: 101 characters, at most 100', 'unblock_host of a 101-character host is refused with 54000');

SELECT fqtest.state() AS before \gset
SELECT lives_ok(format('SELECT frameq.unblock_host(%s, %L)', :flaky, 't57-h3'), 'unblocking a host with no count succeeds');
SELECT is(fqtest.state(), :'before', 'and changes nothing');

SELECT lives_ok(format('SELECT frameq.unblock_host(%s, %L)', :flaky, 't57-h1'), 'unblock_host lifts h1''s block');
SELECT is(fqtest.count_of(:flaky, :host1), 'no count', 'its count is gone');
SELECT is((SELECT count(*)::int FROM frameq.job_host_blocks WHERE job = :flaky), 0, 'job_host_blocks no longer lists it');
SELECT ok(NOT (SELECT host_blocks FROM frameq.job WHERE id = :flaky), 'the job has no blocked host left, and says so');
SELECT fqtest.book1('t57-h1', :'tok1', :epoch1) AS p5 \gset
SELECT is(fqtest.job_of(:p5), :'flaky'::bigint, 'h1 books the flaky job again');
SELECT is(frameq.complete('t57-h1', :'tok1', :epoch1, :p5, 1), 'accepted', 'and fails it');
SELECT is(fqtest.count_of(:flaky, :host1), '1 failures, not blocked', 'the count starts afresh');
SELECT lives_ok(format('SELECT frameq.unblock_host(%s, %L)', :flaky, 't57-h1'), 'unblocking a host below the limit');
SELECT is(fqtest.count_of(:flaky, :host1), 'no count', 'resets its count');

/* a limit of 1 blocks at the first failure; the mark stays while any block does */
SELECT frameq.submit('{"show": "t57show", "name": "one", "priority": 20, "max_retries": 100,
	"host_failure_limit": 1, "layers": [{"name": "l", "command": "c", "range": "1-20"}]}') AS one \gset
SELECT frameq.complete('t57-h1', :'tok1', :epoch1, fqtest.book1('t57-h1', :'tok1', :epoch1), 1) \g /dev/null
SELECT frameq.complete('t57-h2', :'tok2', :epoch2, fqtest.book1('t57-h2', :'tok2', :epoch2), 1) \g /dev/null
SELECT results_eq(format('SELECT host FROM frameq.job_host_blocks WHERE job = %s ORDER BY host', :one),
	$$VALUES ('t57-h1'::text), ('t57-h2')$$, 'with a limit of 1, one failure each blocks h1 and h2');
SELECT frameq.unblock_host(:one, 't57-h1') \g /dev/null
SELECT ok((SELECT host_blocks FROM frameq.job WHERE id = :one), 'unblocking h1 leaves the job marked: h2 is still blocked');
SELECT is(fqtest.job_of(fqtest.book1('t57-h2', :'tok2', :epoch2)), :'flaky'::bigint,
	'h2 still gets none of the job''s tasks');
SELECT is(fqtest.job_of(fqtest.book1('t57-h1', :'tok1', :epoch1)), :'one'::bigint, 'h1 gets them again');
SELECT frameq.unblock_host(:one, 't57-h2') \g /dev/null
SELECT ok(NOT (SELECT host_blocks FROM frameq.job WHERE id = :one), 'unblocking h2 too clears the mark');

/* a limit of 0 counts nothing */
SELECT frameq.submit('{"show": "t57show", "name": "never", "priority": 30, "max_retries": 100,
	"host_failure_limit": 0, "layers": [{"name": "l", "command": "c", "range": "1-5"}]}') AS never \gset
SELECT frameq.complete('t57-h3', :'tok3', :epoch3, fqtest.book1('t57-h3', :'tok3', :epoch3), 1) \g /dev/null
SELECT frameq.complete('t57-h3', :'tok3', :epoch3, fqtest.book1('t57-h3', :'tok3', :epoch3), 1) \g /dev/null
SELECT is(fqtest.count_of(:never, :host3), 'no count', 'with host_failure_limit 0 no failure is counted');
SELECT is(fqtest.job_of(fqtest.book1('t57-h3', :'tok3', :epoch3)), :'never'::bigint, 'and the host books the job on');
SELECT frameq.kill_job(:never, 'done with it') \g /dev/null

/* a submitter unblocks hosts for its own shows' jobs only */
SELECT frameq.create_show('t57other') \g /dev/null
SELECT frameq.set_subscription('t57other', 't57.pool', 10, 10) \g /dev/null
SELECT frameq.submit('{"show": "t57other", "name": "theirs", "priority": 40, "max_retries": 100,
	"host_failure_limit": 1, "layers": [{"name": "l", "command": "c", "range": "1-5"}]}') AS theirs \gset
SELECT frameq.complete('t57-h3', :'tok3', :epoch3, fqtest.book1('t57-h3', :'tok3', :epoch3), 1) \g /dev/null
SELECT is(fqtest.count_of(:theirs, :host3), '1 failures, blocked', 'h3 is blocked for the other show''s job');
SELECT frameq.complete('t57-h1', :'tok1', :epoch1, fqtest.book1('t57-h1', :'tok1', :epoch1), 1) \g /dev/null
SELECT is(fqtest.count_of(:theirs, :host1), '1 failures, blocked', 'and h1 too');
SELECT frameq.kill_job(:theirs, 'done with it') \g /dev/null

CREATE ROLE t57_artist LOGIN IN ROLE frameq_submit;
SELECT frameq.grant_show('t57show', 't57_artist') \g /dev/null
SELECT frameq.grant_show('t57other', 't57_artist') \g /dev/null
SELECT frameq.revoke_show('t57other', 't57_artist') \g /dev/null
CREATE FUNCTION fqtest.as_artist(sql text) RETURNS text
LANGUAGE plpgsql AS $$
BEGIN
	SET LOCAL ROLE t57_artist;
	EXECUTE sql;
	RESET ROLE;
	RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
	RETURN SQLSTATE || ': ' || SQLERRM;
END
$$;
GRANT USAGE ON SCHEMA fqtest TO PUBLIC;
GRANT EXECUTE ON FUNCTION fqtest.as_artist(text) TO PUBLIC;
SELECT fqtest.state() AS before \gset
SELECT is(fqtest.as_artist(format('SELECT frameq.unblock_host(%s, %L)', :theirs, 't57-h3')),
	'42501: permission denied for show "t57other"', 'a submitter cannot unblock a host for another show''s job');
SELECT is(fqtest.state(), :'before', 'which changes nothing');
SELECT frameq.grant_show('t57other', 't57_artist') \g /dev/null
SELECT is(fqtest.as_artist(format('SELECT frameq.unblock_host(%s, %L)', :theirs, 't57-h3')), 'ok',
	'granted the show, it can');
SELECT is(fqtest.count_of(:theirs, :host3), 'no count', 'and h3''s block is gone');
SELECT is(fqtest.as_artist(format('SELECT count(*) FROM frameq.job_host_blocks WHERE job = %s', :theirs)),
	'42501: permission denied for view job_host_blocks', 'the view is for readers: a submitter alone cannot read it');
GRANT frameq_reader TO t57_artist;
SELECT is(fqtest.as_artist(format('SELECT count(*) FROM frameq.job_host_blocks WHERE job = %s', :theirs)), 'ok',
	'frameq_reader reads it');

-- ------------------------------------------------------- max_dead_frames

SELECT frameq.submit('{"show": "t57show", "name": "doomed", "priority": 50, "max_retries": 0,
	"max_dead_frames": 2, "host_failure_limit": 0,
	"layers": [{"name": "l", "command": "c", "range": "1-10"}]}') AS doomed \gset
CREATE TEMP TABLE b3 AS SELECT proc, frame_number FROM frameq.reserve('t57-h3', :'tok3', :epoch3, 3);
SELECT proc AS d1 FROM b3 WHERE frame_number = 1 \gset
SELECT proc AS d2 FROM b3 WHERE frame_number = 2 \gset
SELECT proc AS d3 FROM b3 WHERE frame_number = 3 \gset
SELECT is(frameq.complete('t57-h3', :'tok3', :epoch3, :d1, 1), 'accepted', 'a task of the job fails with no retry left');
SELECT results_eq(format('SELECT state, dead, paused_reason FROM frameq.job_progress WHERE job = %s', :doomed),
	$$VALUES ('active', 1::bigint, NULL::text)$$, 'one dead task: the job stays active');
SELECT is(frameq.complete('t57-h3', :'tok3', :epoch3, :d2, 1), 'accepted', 'a second one fails');
SELECT results_eq(format('SELECT state, dead, paused_reason FROM frameq.job_progress WHERE job = %s', :doomed),
	$$VALUES ('paused', 2::bigint, 'max_dead_frames: 2 of its tasks are dead, the limit is 2')$$,
	'two dead tasks reach max_dead_frames: the job is paused, and job_progress says why');
SELECT is((SELECT count(*)::int FROM frameq.reserve('t57-h3', :'tok3', :epoch3, 1) b WHERE b.job = :doomed), 0,
	'a paused job is booked no more');
SELECT is(frameq.complete('t57-h3', :'tok3', :epoch3, :d3, 1), 'accepted', 'its third running task fails while it is paused');
SELECT results_eq(format('SELECT state, dead, paused_reason FROM frameq.job_progress WHERE job = %s', :doomed),
	$$VALUES ('paused', 3::bigint, 'max_dead_frames: 2 of its tasks are dead, the limit is 2')$$,
	'it stays paused, for the reason it paused');

SELECT frameq.set_job(:doomed, paused => false) \g /dev/null
SELECT results_eq(format('SELECT j.state, j.paused_reason, p.paused_reason FROM frameq.job j
							JOIN frameq.job_progress p ON p.job = j.id WHERE j.id = %s', :doomed),
	$$VALUES ('active', NULL::text, NULL::text)$$, 'resumed, with its reason gone, it runs on over its limit');
SELECT frameq.kill_frame((SELECT min(id) FROM frameq.frame WHERE job = :doomed AND state = 'waiting'), 'not needed') \g /dev/null
SELECT results_eq(format('SELECT state, dead, paused_reason FROM frameq.job_progress WHERE job = %s', :doomed),
	$$VALUES ('paused', 4::bigint, 'max_dead_frames: 4 of its tasks are dead, the limit is 2')$$,
	'one more task dying (kill_frame of a waiting task) pauses it again');

SELECT frameq.set_job(:doomed, paused => false) \g /dev/null
SELECT fqtest.book1('t57-h3', :'tok3', :epoch3) AS d4 \gset
SELECT is(fqtest.job_of(:d4), :'doomed'::bigint, 'resumed, it is booked again');
SELECT frameq.kill_frame((SELECT frame FROM frameq.proc WHERE id = :d4), 'stop it') \g /dev/null
SELECT is((SELECT state FROM frameq.job WHERE id = :doomed), 'active',
	'a kill order is not a death yet: the job stays active');
SELECT is(frameq.complete('t57-h3', :'tok3', :epoch3, :d4, 0, 15), 'accepted', 'h3 confirms the kill');
SELECT results_eq(format('SELECT state, dead, paused_reason FROM frameq.job_progress WHERE job = %s', :doomed),
	$$VALUES ('paused', 5::bigint, 'max_dead_frames: 5 of its tasks are dead, the limit is 2')$$,
	'the kill order confirmed leaves the task dead: paused again');

SELECT frameq.set_job(:doomed, paused => false) \g /dev/null
SELECT fqtest.book1('t57-h3', :'tok3', :epoch3) AS d5 \gset
SELECT frameq.set_job(:doomed, paused => true) \g /dev/null
SELECT results_eq(format('SELECT j.paused_reason, p.paused_reason FROM frameq.job j
							JOIN frameq.job_progress p ON p.job = j.id WHERE j.id = %s', :doomed),
	$$VALUES (NULL::text, 'operator')$$, 'paused by set_job, job_progress shows operator');
SELECT is(frameq.complete('t57-h3', :'tok3', :epoch3, :d5, 1), 'accepted', 'a task dies while an operator has it paused');
SELECT results_eq(format('SELECT state, dead, paused_reason FROM frameq.job_progress WHERE job = %s', :doomed),
	$$VALUES ('paused', 6::bigint, 'operator')$$, 'the pause stays the operator''s');

/* the count is of tasks dead now: retried ones no longer count */
SELECT frameq.retry_frame(id) FROM frameq.frame WHERE job = :doomed AND state = 'dead' \g /dev/null
SELECT frameq.set_job(:doomed, paused => false) \g /dev/null
SELECT frameq.complete('t57-h3', :'tok3', :epoch3, fqtest.book1('t57-h3', :'tok3', :epoch3), 1) \g /dev/null
SELECT results_eq(format('SELECT state, dead FROM frameq.job_progress WHERE job = %s', :doomed),
	$$VALUES ('active', 1::bigint)$$, 'after its dead tasks are retried, one death is below the limit again');
SELECT frameq.complete('t57-h3', :'tok3', :epoch3, fqtest.book1('t57-h3', :'tok3', :epoch3), 1) \g /dev/null
SELECT results_eq(format('SELECT state, dead FROM frameq.job_progress WHERE job = %s', :doomed),
	$$VALUES ('paused', 2::bigint)$$, 'and the second pauses it');
SELECT frameq.kill_job(:doomed, 'enough') \g /dev/null
SELECT results_eq(format('SELECT state, paused_reason FROM frameq.job_progress WHERE job = %s', :doomed),
	$$VALUES ('killed', NULL::text)$$, 'kill_job kills the paused job: no pause reason shown');

/* without max_dead_frames, deaths never pause */
SELECT frameq.submit('{"show": "t57show", "name": "tough", "priority": 60, "max_retries": 0,
	"host_failure_limit": 0, "layers": [{"name": "l", "command": "c", "range": "1-10"}]}') AS tough \gset
SELECT frameq.complete('t57-h3', :'tok3', :epoch3, fqtest.book1('t57-h3', :'tok3', :epoch3), 1) FROM generate_series(1, 3) \g /dev/null
SELECT results_eq(format('SELECT state, dead FROM frameq.job_progress WHERE job = %s', :tough),
	$$VALUES ('active', 3::bigint)$$, 'a job without max_dead_frames stays active with 3 dead tasks');
SELECT frameq.kill_job(:tough, 'enough') \g /dev/null
SELECT is_empty('SELECT * FROM frameq.check()', 'check() is clean');

-- -------------------------------------------------------- check()'s rules

SELECT frameq.submit('{"show": "t57show", "name": "judged", "priority": 70, "max_retries": 100,
	"layers": [{"name": "l", "command": "c", "range": "1-10"}]}') AS judged \gset
SELECT frameq.complete('t57-h2', :'tok2', :epoch2, fqtest.book1('t57-h2', :'tok2', :epoch2), 1) FROM generate_series(1, 3) \g /dev/null
SELECT is(fqtest.count_of(:judged, :host2), '3 failures, blocked', 'the default limit blocks h2 at its third failure');
SELECT is_empty('SELECT * FROM frameq.check()', 'check() is clean');

SAVEPOINT broken;
UPDATE frameq.job_host_failure SET blocked_at = NULL WHERE job = :judged AND host = :host2;
SELECT results_eq('SELECT invariant, detail FROM frameq.check()',
	format($$VALUES ('host blocks', 'host t57-h2 has failed job %s 3 times, its host_failure_limit is 3, but it is not blocked')$$, :judged),
	'check(): a host at its limit that is not blocked');
ROLLBACK TO broken;
UPDATE frameq.job_host_failure SET failures = 2 WHERE job = :judged AND host = :host2;
SELECT results_eq('SELECT invariant, detail FROM frameq.check()',
	format($$VALUES ('host blocks', 'host t57-h2 has failed job %s 2 times, its host_failure_limit is 3, but it is blocked')$$, :judged),
	'check(): a host blocked below its limit');
ROLLBACK TO broken;
UPDATE frameq.job SET host_blocks = false WHERE id = :judged;
SELECT results_eq('SELECT invariant, detail FROM frameq.check()',
	format($$VALUES ('host blocks', 'host t57-h2 is blocked for job %s, but the job is not marked: reserve() would book it there')$$, :judged),
	'check(): a block that reserve() would not see');
INSERT INTO frameq.job_limit_check (job) VALUES (:judged);
SELECT is_empty('SELECT * FROM frameq.check()', 'check(): not while the worker has yet to settle the job');
SELECT is(frameq._settle_job_limits(), 1::bigint, 'the worker''s step settles it');
SELECT ok((SELECT host_blocks FROM frameq.job WHERE id = :judged), 'the job is marked');
SELECT is((SELECT count(*)::int FROM frameq.job_limit_check), 0, 'and it is no longer listed');
ROLLBACK TO broken;
UPDATE frameq.job_host_failure SET failures = 4 WHERE job = :judged AND host = :host2;
SELECT results_eq('SELECT invariant, detail FROM frameq.check() WHERE detail LIKE ''%runs there failed%''',
	format($$SELECT 'host blocks'::text, format('job %s counts 4 failures on host t57-h2 since %%s, but only 3 of its runs there failed since',
											  counted_since) FROM frameq.job_host_failure WHERE job = %s AND host = %s$$,
		   :judged, :judged, :host2),
	'check(): a count above the failed runs it can have counted');
ROLLBACK TO broken;

/* the worker pauses a job whose death it was left, and only then */
SELECT frameq.submit('{"show": "t57show", "name": "left", "priority": 80, "max_retries": 0,
	"max_dead_frames": 1, "host_failure_limit": 0,
	"layers": [{"name": "l", "command": "c", "range": "1-10"}]}') AS left_job \gset
SELECT frameq.complete('t57-h1', :'tok1', :epoch1, fqtest.book1('t57-h1', :'tok1', :epoch1), 1) \g /dev/null
SELECT frameq.set_job(:left_job, paused => false) \g /dev/null
INSERT INTO frameq.job_limit_check (job) VALUES (:left_job);
SELECT is(frameq._settle_job_limits(), 1::bigint, 'the worker settles a job it was left without a death');
SELECT is((SELECT state FROM frameq.job WHERE id = :left_job), 'active', 'and does not pause it');
INSERT INTO frameq.job_limit_check (job, died) VALUES (:left_job, true);
SELECT is(frameq._settle_job_limits(), 1::bigint, 'it settles a job it was left with a death');
SELECT results_eq(format('SELECT state, paused_reason FROM frameq.job_progress WHERE job = %s', :left_job),
	$$VALUES ('paused', 'max_dead_frames: 1 of its tasks are dead, the limit is 1')$$,
	'and pauses it: its dead task reaches the limit');
SELECT is_empty('SELECT * FROM frameq.check()', 'check() is clean at the end');

SELECT * FROM finish();
ROLLBACK;
