/*
 * Hard caps (doc/design.md, invariant 4): a job's max cores and gpus, a folder's
 * max cores and gpus, a subscription's burst and a limit's max_running each
 * stop bookings exactly at the cap, while hosts still have room (so that it
 * is the cap, not the host, that stopped them).  Lowering a cap below usage
 * kills nothing and stops new bookings; check() stays clean.  Raising it
 * lets bookings resume.
 *
 * Every scenario has its own allocation and show.
 */
BEGIN;
\ir include/helpers.psql

SELECT plan(32);

-- ------------------------------------------------------------ job caps

SELECT frameq.create_allocation('t07.job') \g /dev/null
SELECT frameq.create_show('t07job') \g /dev/null
SELECT frameq.set_subscription('t07job', 't07.job', 100, 100) \g /dev/null
SELECT frameq.register_host('t07-job1', 't07.job', 16, 68719476736, 8, 0) AS tok_j1 \gset
SELECT frameq.register_host('t07-job2', 't07.job', 16, 68719476736, 8, 0) AS tok_j2 \gset
SELECT epoch AS e_j1 FROM frameq.attach('t07-job1', :'tok_j1', 'b') \gset
SELECT epoch AS e_j2 FROM frameq.attach('t07-job2', :'tok_j2', 'b') \gset
SELECT frameq.submit($${"show": "t07job", "name": "capped", "max_cores": 3,
	"layers": [{"name": "l", "command": "c", "range": "1-20"}]}$$) AS j_capped \gset
SELECT frameq.submit($${"show": "t07job", "name": "gpu_capped", "max_gpus": 2,
	"layers": [{"name": "l", "command": "c", "range": "1-20", "gpus": 1}]}$$) AS j_gpu \gset
SELECT frameq.submit($${"show": "t07job", "name": "uncapped",
	"layers": [{"name": "l", "command": "c", "range": "1-20"}]}$$) AS j_free \gset

SELECT is((SELECT count(*)::int FROM frameq.reserve('t07-job1', :'tok_j1', :e_j1, 10)), 10,
		  'a reserve of 10 frames on a 16-core host books 10');
SELECT results_eq(
	format($$SELECT job, count(*)::int FROM frameq.proc WHERE job IN (%s, %s, %s) GROUP BY job ORDER BY job$$,
		   :j_capped, :j_gpu, :j_free),
	format('VALUES (%s::bigint, 3), (%s::bigint, 2), (%s::bigint, 5)', :j_capped, :j_gpu, :j_free),
	'a job with max_cores 3 gets 3 frames, one with max_gpus 2 gets 2 gpu frames, the uncapped job the rest');
SELECT results_eq(
	format($$SELECT id, used_cores, max_cores, used_gpus, max_gpus, running FROM frameq.usage
			  WHERE kind = 'job' AND id IN (%s, %s) ORDER BY id$$, :j_capped, :j_gpu),
	format('VALUES (%s::bigint, 3.00::numeric(12,2), 3.00::numeric(12,2), 0, NULL::int, 3), (%s::bigint, 2.00, NULL, 2, 2, 2)',
		   :j_capped, :j_gpu),
	'usage shows both capped jobs exactly at their caps');

-- lower the caps below usage
SELECT frameq.set_job(:j_capped, max_cores => 1) \g /dev/null
SELECT frameq.set_job(:j_gpu, max_gpus => 1) \g /dev/null
SELECT frameq.set_job(:j_free, paused => true) \g /dev/null
SELECT is((SELECT count(*)::int FROM frameq.reserve('t07-job2', :'tok_j2', :e_j2)), 0,
		  'after lowering the job caps below usage, another host books nothing of those jobs');
SELECT results_eq(
	format($$SELECT count(*)::int, count(*) FILTER (WHERE state = 'running')::int FROM frameq.proc
			  WHERE job IN (%s, %s)$$, :j_capped, :j_gpu),
	'VALUES (5, 5)', 'lowering job caps kills nothing: all 5 procs still run, none ordered killed');
SELECT is_empty('SELECT * FROM frameq.check()', 'check() is clean with jobs over their lowered caps');

-- raise it again
SELECT frameq.set_job(:j_capped, max_cores => 5) \g /dev/null
SELECT is((SELECT count(*)::int FROM frameq.reserve('t07-job2', :'tok_j2', :e_j2) WHERE job = :j_capped), 2,
		  'raising the job cap from 3 used to 5 lets exactly 2 more frames book');
SELECT is((SELECT used_cores FROM frameq.usage WHERE kind = 'job' AND id = :j_capped), 5.00::numeric(12,2),
		  'the job now uses exactly its 5 cores');

-- --------------------------------------------------------- folder caps

SELECT frameq.create_allocation('t07.folder') \g /dev/null
SELECT frameq.create_show('t07folder') \g /dev/null
SELECT frameq.set_subscription('t07folder', 't07.folder', 100, 100) \g /dev/null
SELECT frameq.create_folder('t07folder', 'cores4', 4) AS f_cores \gset
SELECT frameq.create_folder('t07folder', 'gpus2', NULL, 2) AS f_gpus \gset
SELECT frameq.register_host('t07-fold1', 't07.folder', 32, 68719476736, 8, 0) AS tok_f1 \gset
SELECT frameq.register_host('t07-fold2', 't07.folder', 32, 68719476736, 8, 0) AS tok_f2 \gset
SELECT epoch AS e_f1 FROM frameq.attach('t07-fold1', :'tok_f1', 'b') \gset
SELECT epoch AS e_f2 FROM frameq.attach('t07-fold2', :'tok_f2', 'b') \gset
SELECT frameq.submit($${"show": "t07folder", "folder": "cores4", "name": "a",
	"layers": [{"name": "l", "command": "c", "range": "1-3"}]}$$) AS jf_a \gset
SELECT frameq.submit($${"show": "t07folder", "folder": "cores4", "name": "b",
	"layers": [{"name": "l", "command": "c", "range": "1-3"}]}$$) AS jf_b \gset
SELECT frameq.submit($${"show": "t07folder", "folder": "gpus2", "name": "g",
	"layers": [{"name": "l", "command": "c", "range": "1-5", "gpus": 1}]}$$) AS jf_g \gset
SELECT frameq.submit($${"show": "t07folder", "name": "outside",
	"layers": [{"name": "l", "command": "c", "range": "1-3"}]}$$) AS jf_out \gset

SELECT is((SELECT count(*)::int FROM frameq.reserve('t07-fold1', :'tok_f1', :e_f1, 100)), 9,
		  'a 32-core host books 4 folder frames, 2 gpu-folder frames and 3 frames outside folders');
SELECT results_eq(
	format($$SELECT job, count(*)::int FROM frameq.proc WHERE job IN (%s, %s, %s, %s) GROUP BY job ORDER BY job$$,
		   :jf_a, :jf_b, :jf_g, :jf_out),
	format('VALUES (%s::bigint, 3), (%s::bigint, 1), (%s::bigint, 2), (%s::bigint, 3)', :jf_a, :jf_b, :jf_g, :jf_out),
	'a folder capped at 4 cores runs 4 frames across its two jobs, one capped at 2 gpus runs 2 gpu frames');
SELECT results_eq(
	format($$SELECT id, used_cores, max_cores, used_gpus, max_gpus, running FROM frameq.usage
			  WHERE kind = 'folder' AND id IN (%s, %s) ORDER BY id$$, :f_cores, :f_gpus),
	format('VALUES (%s::bigint, 4.00::numeric(12,2), 4.00::numeric(12,2), 0, NULL::int, 4), (%s::bigint, 2.00, NULL, 2, 2, 2)',
		   :f_cores, :f_gpus),
	'usage shows both folders exactly at their caps');

SELECT frameq.set_folder_limits(:f_cores, 2, NULL) \g /dev/null
SELECT frameq.set_folder_limits(:f_gpus, NULL, 0) \g /dev/null
SELECT is((SELECT count(*)::int FROM frameq.reserve('t07-fold2', :'tok_f2', :e_f2, 100)), 0,
		  'after lowering the folder caps below usage, another host books nothing of their jobs');
SELECT is((SELECT count(*)::int FROM frameq.proc WHERE job IN (:jf_a, :jf_b, :jf_g) AND state = 'running'), 6,
		  'lowering folder caps kills nothing: all 6 procs still run');
SELECT is_empty('SELECT * FROM frameq.check()', 'check() is clean with folders over their lowered caps');
SELECT frameq.set_folder_limits(:f_cores, 5, NULL) \g /dev/null
SELECT is((SELECT count(*)::int FROM frameq.reserve('t07-fold2', :'tok_f2', :e_f2, 100)), 1,
		  'raising the folder cap from 4 used to 5 lets exactly one more frame book');

-- -------------------------------------------------- subscription burst

SELECT frameq.create_allocation('t07.burst') AS a_burst \gset
SELECT frameq.create_show('t07burst') AS s_burst \gset
SELECT frameq.set_subscription('t07burst', 't07.burst', 2, 4) \g /dev/null
SELECT frameq.register_host('t07-burst1', 't07.burst', 16, 68719476736) AS tok_b1 \gset
SELECT frameq.register_host('t07-burst2', 't07.burst', 16, 68719476736) AS tok_b2 \gset
SELECT epoch AS e_b1 FROM frameq.attach('t07-burst1', :'tok_b1', 'b') \gset
SELECT epoch AS e_b2 FROM frameq.attach('t07-burst2', :'tok_b2', 'b') \gset
SELECT frameq.submit($${"show": "t07burst", "name": "burst",
	"layers": [{"name": "l", "command": "c", "range": "1-20", "cores": 1.5}]}$$) AS jb \gset

SELECT is((SELECT count(*)::int FROM frameq.reserve('t07-burst1', :'tok_b1', :e_b1)), 2,
		  'a show with burst 4 gets two 1.5-core frames (3 cores); a third would make 4.5');
SELECT results_eq(
	format($$SELECT used_cores, max_cores, running FROM frameq.usage WHERE kind = 'subscription' AND id = %s$$, :s_burst),
	'VALUES (3.00::numeric(12,2), 4.00::numeric(12,2), 2)', 'usage shows the subscription at 3 of its 4 burst cores');
SELECT frameq.set_subscription('t07burst', 't07.burst', 2, 4.5) \g /dev/null
SELECT is((SELECT count(*)::int FROM frameq.reserve('t07-burst2', :'tok_b2', :e_b2)), 1,
		  'raising the burst to 4.5 lets exactly one more 1.5-core frame book');
SELECT is((SELECT count(*)::int FROM frameq.reserve('t07-burst2', :'tok_b2', :e_b2)), 0,
		  'at exactly its burst the show books nothing more');
SELECT frameq.set_subscription('t07burst', 't07.burst', 2, 1) \g /dev/null
SELECT is((SELECT count(*)::int FROM frameq.reserve('t07-burst2', :'tok_b2', :e_b2)), 0,
		  'after lowering the burst below usage the show books nothing');
SELECT is((SELECT count(*)::int FROM frameq.proc WHERE job = :jb AND state = 'running'), 3,
		  'lowering the burst kills nothing: all 3 procs still run');
SELECT is((SELECT used_cores FROM frameq.usage WHERE kind = 'subscription' AND id = :s_burst), 4.50::numeric(12,2),
		  'usage still reports the 4.5 cores in use, above the new burst');
SELECT is_empty('SELECT * FROM frameq.check()', 'check() is clean with a show over its lowered burst');

-- ---------------------------------------------------------------- limits

SELECT frameq.create_allocation('t07.limit') \g /dev/null
SELECT frameq.create_show('t07limit') \g /dev/null
SELECT frameq.set_subscription('t07limit', 't07.limit', 100, 100) \g /dev/null
SELECT frameq.create_limit('t07.licence', 2) AS lim \gset
SELECT frameq.register_host('t07-lim1', 't07.limit', 8, 68719476736) AS tok_l1 \gset
SELECT frameq.register_host('t07-lim2', 't07.limit', 8, 68719476736) AS tok_l2 \gset
SELECT epoch AS e_l1 FROM frameq.attach('t07-lim1', :'tok_l1', 'b') \gset
SELECT epoch AS e_l2 FROM frameq.attach('t07-lim2', :'tok_l2', 'b') \gset
SELECT frameq.submit($${"show": "t07limit", "name": "lic", "layers": [
	{"name": "licensed", "command": "c", "range": "1-10", "limits": ["t07.licence"]},
	{"name": "free", "command": "c", "range": "1-10"}]}$$) AS jl \gset
SELECT frameq.submit($${"show": "t07limit", "name": "lic2", "layers": [
	{"name": "licensed", "command": "c", "range": "1-10", "limits": ["t07.licence"]}]}$$) AS jl2 \gset

SELECT is(
	(SELECT array_agg(format('%s:%s', l.name, b.frame_number) ORDER BY b.ordinality)
	   FROM frameq.reserve('t07-lim1', :'tok_l1', :e_l1) WITH ORDINALITY b JOIN frameq.layer l ON l.id = b.layer),
	'{licensed:1,licensed:2,free:1,free:2,free:3,free:4,free:5,free:6}'::text[],
	'a limit of 2 stops its layer after 2 frames; the job''s other layer fills the host');
SELECT results_eq(
	format($$SELECT running, max_running FROM frameq.usage WHERE kind = 'limit' AND id = %s$$, :lim),
	'VALUES (2, 2)', 'usage shows the limit at 2 of 2');
SELECT is((SELECT count(*)::int FROM frameq.reserve('t07-lim2', :'tok_l2', :e_l2) b
			WHERE b.layer IN (SELECT id FROM frameq.layer WHERE name = 'licensed' AND job IN (:jl, :jl2))), 0,
		  'another job''s layer with the same limit books nothing on another host');
SELECT frameq.set_limit('t07.licence', 3) \g /dev/null
SELECT is((SELECT count(*)::int FROM frameq.proc WHERE :lim = ANY (limits)), 2,
		  'two procs count against the limit before it is raised');
SELECT is((SELECT count(*)::int FROM frameq.reserve('t07-lim2', :'tok_l2', :e_l2) b
			WHERE b.layer IN (SELECT id FROM frameq.layer WHERE name = 'licensed' AND job IN (:jl, :jl2))), 1,
		  'raising the limit to 3 lets exactly one more licensed frame book on the host''s 4 idle cores');
SELECT frameq.set_limit('t07.licence', 1) \g /dev/null
SELECT frameq.register_host('t07-lim3', 't07.limit', 8, 68719476736) AS tok_l3 \gset
SELECT epoch AS e_l3 FROM frameq.attach('t07-lim3', :'tok_l3', 'b') \gset
SELECT is((SELECT count(*)::int FROM frameq.reserve('t07-lim3', :'tok_l3', :e_l3) b
			WHERE b.layer IN (SELECT id FROM frameq.layer WHERE name = 'licensed' AND job IN (:jl, :jl2))), 0,
		  'after lowering the limit to 1 below its 3 running, no licensed frame books');
SELECT is((SELECT count(*)::int FROM frameq.proc WHERE :lim = ANY (limits) AND state = 'running'), 3,
		  'lowering the limit kills nothing: all 3 licensed procs still run');
SELECT is_empty('SELECT * FROM frameq.check()', 'check() is clean with a limit over its lowered max');

-- ------------------------------------------------------------ the ledger

SELECT results_eq(
	format($$SELECT kind, id, used_cc, running FROM frameq.ledger()
			  WHERE (kind = 'job' AND id IN (%s, %s)) OR (kind = 'folder' AND id = %s)
				 OR (kind = 'limit' AND id = %s)
			  ORDER BY kind, id$$, :j_capped, :jb, :f_cores, :lim),
	format($$VALUES ('folder', %s::bigint, 500, 5), ('job', %s::bigint, 500, 5), ('job', %s::bigint, 450, 3),
					('limit', %s::bigint, 300, 3)$$, :f_cores, :j_capped, :jb, :lim),
	'the ledger holds exactly what the procs hold for the capped job, folder, show''s job and limit');

SELECT * FROM finish();
ROLLBACK;
