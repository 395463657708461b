/*
 * complete_many(host, token, epoch, procs, exit_statuses, exit_signals,
 * max_rss, oom) (doc/reference.md): complete() for each element, answered
 * in order, each on its own (stale, duplicate); arrays of different
 * lengths, null elements, negatives and more than 1,000 reports refused
 * whole, changing nothing.  And a reserve() after completions in the same
 * transaction books into the caps they freed (the ledger counts the
 * transaction's own releases), but not after they were rolled back.
 *
 * The file is one transaction (BEGIN ... ROLLBACK), which is the agent's
 * path: report what ended, book what fits, commit once.
 */
BEGIN;
\ir include/helpers.psql

SELECT plan(52);

SELECT * FROM fqtest.farm('t78', cores => '{4,4}') \gset
/* max_retries 1: a failed frame goes back to waiting once; no host blocks */
SELECT frameq.submit($${"show": "t78show", "name": "t78-job", "max_retries": 1, "host_failure_limit": 0,
	"layers": [{"name": "l", "command": "c", "range": "1-8", "memory": "1GB"}]}$$) AS job \gset
CREATE TEMP TABLE booked AS
	SELECT b.proc, b.frame_number FROM frameq.reserve('t78-h1', :'tok1', :epoch1, 4) b;
SELECT proc AS p1 FROM booked WHERE frame_number = 1 \gset
SELECT proc AS p2 FROM booked WHERE frame_number = 2 \gset
SELECT proc AS p3 FROM booked WHERE frame_number = 3 \gset
SELECT proc AS p4 FROM booked WHERE frame_number = 4 \gset
SELECT proc AS q1 FROM frameq.reserve('t78-h2', :'tok2', :epoch2, 1) \gset

-- ------------------------------------------------------------------ answers, in order

SELECT is(frameq.complete_many('t78-h1', :'tok1', :epoch1,
								ARRAY[:p3, :p1, :p2]::bigint[], '{1, 0, 0}', '{0, 0, 9}', '{100, NULL, 300}'),
		  '{accepted,accepted,accepted}', 'three reports, each accepted');
SELECT results_eq(
	format($$SELECT frame_number, state, retries FROM frameq.frames WHERE job = %s AND frame_number <= 3
			 ORDER BY frame_number$$, :job),
	$$VALUES (1, 'succeeded'::text, 0), (2, 'waiting', 1), (3, 'waiting', 1)$$,
	'each frame settled as complete() would: exit 0 succeeded, a signal and an exit 1 each used a retry');
SELECT results_eq(
	format($$SELECT r.proc, r.reason, r.exit_status, r.exit_signal, r.max_rss FROM frameq.runs r
			 WHERE r.proc IN (%s, %s, %s) ORDER BY r.proc = %s DESC, r.proc = %s DESC$$, :p1, :p2, :p3, :p1, :p2),
	format($$VALUES (%s::bigint, 'completed'::text, 0, 0, NULL::bigint), (%s, 'completed', 0, 9, 300::bigint),
					(%s, 'completed', 1, 0, 100)$$, :p1, :p2, :p3),
	'each run ended with its own element''s status, signal and peak (NULL: none)');
SELECT is((SELECT count(*)::int FROM frameq.proc WHERE id IN (:p1, :p2, :p3)), 0, 'their procs are gone');

SELECT is(frameq.complete_many('t78-h1', :'tok1', :epoch1,
								ARRAY[:p3, :p1, :p2]::bigint[], '{1, 0, 0}', '{0, 0, 9}'),
		  '{duplicate,duplicate,duplicate}', 'the same batch again: each a duplicate');
SELECT is(frameq.complete_many('t78-h1', :'tok1', :epoch1, ARRAY[:p1]::bigint[], '{3}'),
		  '{stale}', 'a report of an ended run with another status: stale');

SELECT fqtest.state() AS before_mixed \gset
SELECT is(frameq.complete_many('t78-h1', :'tok1', :epoch1,
								ARRAY[:p4, 99999999, :p4, :q1]::bigint[], '{0, 0, 0, 0}'),
		  '{accepted,stale,duplicate,stale}',
		  'in order: accepted, an unknown proc stale, the same proc again duplicate, another host''s proc stale');
SELECT is((SELECT state FROM frameq.frames WHERE job = :job AND frame_number = 4), 'succeeded', 'the live one settled');
SELECT ok(EXISTS (SELECT 1 FROM frameq.proc WHERE id = :q1), 'the other host''s proc is untouched');
SELECT is((SELECT count(*)::int FROM frameq.run WHERE proc = :q1 AND ended_at IS NOT NULL), 0,
		  'and its run goes on');

/* a later copy answers duplicate even when it comes first in proc order */
SELECT proc AS p5 FROM frameq.reserve('t78-h1', :'tok1', :epoch1, 1) \gset
SELECT proc AS p6 FROM frameq.reserve('t78-h1', :'tok1', :epoch1, 1) \gset
SELECT is(frameq.complete_many('t78-h1', :'tok1', :epoch1, ARRAY[:p6, :p5, :p6]::bigint[], '{0, 0, 0}'),
		  '{accepted,accepted,duplicate}', 'the first copy of a proc is the one accepted');
SELECT is(frameq.complete_many('t78-h1', :'tok1', :epoch1, '{}', '{}'), '{}', 'an empty batch answers an empty array');

/* oom per element */
SELECT proc AS p7 FROM frameq.reserve('t78-h1', :'tok1', :epoch1, 1) \gset
SELECT is(frameq.complete_many('t78-h1', :'tok1', :epoch1, ARRAY[:p7]::bigint[], '{0}', '{9}',
								ARRAY[1288490188]::bigint[], '{true}'),
		  '{accepted}', 'an oom element');
SELECT results_eq(format($$SELECT reason FROM frameq.runs WHERE proc = %s$$, :p7), $$VALUES ('oom'::text)$$,
				  'is an oom run');
SELECT is((SELECT f.memory FROM frameq.frames f JOIN frameq.run r ON r.frame = f.frame WHERE r.proc = :p7),
		  1610612736::bigint, 'and its task''s memory is raised to 1.5 times its booking of 1 GiB');

-- ------------------------------------------------------------------ refused whole

SELECT proc AS p8 FROM frameq.reserve('t78-h1', :'tok1', :epoch1, 1) \gset
SELECT * FROM fqtest.refuses(format($$SELECT frameq.complete_many('t78-h1', %L, %s, ARRAY[%s]::bigint[], '{0, 0}')$$,
									:'tok1', :epoch1, :p8),
	'22023', 'exit_statuses has 2 elements, procs has 1', 'arrays of different lengths: 22023');
SELECT * FROM fqtest.refuses(format($$SELECT frameq.complete_many('t78-h1', %L, %s, ARRAY[%s]::bigint[], '{0}', '{0, 0}')$$,
									:'tok1', :epoch1, :p8),
	'22023', 'exit_signals has 2 elements, procs has 1', 'an optional array of another length: 22023');
SELECT * FROM fqtest.refuses(format($$SELECT frameq.complete_many('t78-h1', %L, %s, ARRAY[%s, NULL]::bigint[], '{0, 0}')$$,
									:'tok1', :epoch1, :p8),
	'22004', 'procs[2] must not be null', 'a null proc: 22004, the element named');
SELECT * FROM fqtest.refuses(format($$SELECT frameq.complete_many('t78-h1', %L, %s, ARRAY[%s]::bigint[], '{NULL}')$$,
									:'tok1', :epoch1, :p8),
	'22004', 'exit_statuses[1] must not be null', 'a null exit status: 22004');
SELECT * FROM fqtest.refuses(format($$SELECT frameq.complete_many('t78-h1', %L, %s, ARRAY[%s, 99]::bigint[], '{0, 0}', '{0, -1}')$$,
									:'tok1', :epoch1, :p8),
	'22023', 'exit_signals[2] must not be negative', 'a negative signal: 22023, nothing settled');
SELECT * FROM fqtest.refuses(format($$SELECT frameq.complete_many('t78-h1', %L, %s, ARRAY[%s]::bigint[], '{0}', NULL, '{-5}')$$,
									:'tok1', :epoch1, :p8),
	'22023', 'max_rss[1] must not be negative', 'a negative peak: 22023');
SELECT * FROM fqtest.refuses(format($$SELECT frameq.complete_many('t78-h1', %L, %s, ARRAY[[%s]]::bigint[], '{{0}}')$$,
									:'tok1', :epoch1, :p8),
	'22023', 'procs must be a one-dimensional array', 'a two-dimensional array: 22023');
SELECT * FROM fqtest.refuses(format($$SELECT frameq.complete_many('t78-h1', %L, %s, array_fill(%s::bigint, '{1001}'),
																   array_fill(0, '{1001}'))$$,
									:'tok1', :epoch1, :p8),
	'54000', 'procs has 1001 elements, more than 1000', '1,001 reports: 54000');
/* the bound is checked before an array is unpacked (that copy would be the cost) */
SELECT * FROM fqtest.refuses(format($$SELECT frameq.complete_many('t78-h1', %L, %s, ARRAY[%s]::bigint[], '{0}',
																   NULL, NULL, array_fill(false, '{5000000}'))$$,
									:'tok1', :epoch1, :p8),
	'54000', 'oom has 5000000 elements, more than 1000', 'an oom array of 5,000,000: 54000, named');
SELECT * FROM fqtest.refuses(format($$SELECT frameq.complete_many('t78-h1', 'wrong', %s, ARRAY[%s]::bigint[], '{0}')$$,
									:epoch1, :p8),
	'28P01', 'invalid token for host "t78-h1"', 'a wrong token: 28P01');
SELECT * FROM fqtest.refuses(format($$SELECT frameq.complete_many('t78-h1', %L, %s, NULL, '{0}')$$, :'tok1', :epoch1),
	'22004', 'procs must not be null', 'procs null: 22004');
SELECT is(frameq.complete_many('t78-h1', :'tok1', :epoch1 + 1, ARRAY[:p8]::bigint[], '{0}'), '{stale}',
		  'an epoch the proc was not booked under: stale, as complete() answers');
SELECT ok(EXISTS (SELECT 1 FROM frameq.proc WHERE id = :p8), 'and the proc goes on');

-- ------------------------------------------------------------------ the caps its own releases freed

/*
 * A second job, capped at 2 cores, on its own show's top priority: both
 * its 1-core procs on h2, the cap full.
 */
SELECT frameq.complete_many('t78-h1', :'tok1', :epoch1, ARRAY[:p8, :q1]::bigint[], '{0, 0}') \g /dev/null
SELECT frameq.complete('t78-h2', :'tok2', :epoch2, :q1, 0) \g /dev/null
SELECT frameq.set_job(:job, paused => true) \g /dev/null
SELECT frameq.submit($${"show": "t78show", "name": "t78-capped", "max_cores": 2,
	"layers": [{"name": "l", "command": "c", "range": "1-10", "memory": "1GB"}]}$$) AS capped \gset
CREATE TEMP TABLE capped_procs AS SELECT proc FROM frameq.reserve('t78-h2', :'tok2', :epoch2, 4);
SELECT is((SELECT count(*)::int FROM capped_procs), 2, 'the capped job books 2 procs, its cap');
SELECT is((SELECT count(*)::int FROM frameq.reserve('t78-h2', :'tok2', :epoch2, 2)), 0,
		  'and no more while they run');

SAVEPOINT undone;
SELECT is(frameq.complete_many('t78-h2', :'tok2', :epoch2, (SELECT array_agg(proc ORDER BY proc) FROM capped_procs),
								'{0, 0}'),
		  '{accepted,accepted}', 'both reported');
ROLLBACK TO SAVEPOINT undone;
SELECT is((SELECT count(*)::int FROM frameq.reserve('t78-h2', :'tok2', :epoch2, 2)), 0,
		  'reports rolled back free nothing: still no booking');

SELECT is(frameq.complete_many('t78-h2', :'tok2', :epoch2, (SELECT array_agg(proc ORDER BY proc) FROM capped_procs),
								'{0, 0}'),
		  '{accepted,accepted}', 'both reported again');
SELECT is((SELECT used_cores FROM frameq.usage WHERE kind = 'job' AND id = :capped), 2.00,
		  'the ledger still counts them until the commit');
CREATE TEMP TABLE rebooked AS SELECT proc FROM frameq.reserve('t78-h2', :'tok2', :epoch2, 4);
SELECT is((SELECT count(*)::int FROM rebooked), 2,
		  'a reserve in the same transaction books into the 2 cores they freed');
SELECT is((SELECT count(*)::int FROM frameq.reserve('t78-h2', :'tok2', :epoch2, 2)), 0,
		  'and not one more: the cap holds');
SELECT is((SELECT count(*)::int FROM frameq.proc WHERE job = :capped), 2, 'two procs of the job');

/* h1 is another client: the cap counts h2's new procs at once */
SELECT is((SELECT count(*)::int FROM frameq.reserve('t78-h1', :'tok1', :epoch1, 2)), 0,
		  'another host books none of the capped job');

/* one more release frees one more core, for one booking */
SELECT is(frameq.complete_many('t78-h2', :'tok2', :epoch2,
								(SELECT array_agg(proc ORDER BY proc) FROM rebooked), '{0, 0}', NULL, NULL, '{false, false}'),
		  '{accepted,accepted}', 'the two new ones end too');
SELECT is((SELECT count(*)::int FROM frameq.reserve('t78-h2', :'tok2', :epoch2, 4)), 2,
		  'and their room is booked again: 2');
SELECT is((SELECT count(*)::int FROM frameq.check()), 0, 'check() finds nothing wrong');

SELECT * FROM finish();
ROLLBACK;
