/*
 * reserve(): what it picks (doc/design.md, Scheduling policy).  Each scenario has its own
 * allocation and shows, so that hosts of one scenario never see the work of
 * another.  reserve() returns bookings in the order it made them; the
 * assertions read that order WITH ORDINALITY.
 */
BEGIN;
\ir include/helpers.psql

SELECT plan(23);

-- ------------------------------------------------------ tags are any-of

SELECT frameq.create_allocation('t05.tags') \g /dev/null
SELECT frameq.create_show('t05tags') \g /dev/null
SELECT frameq.set_subscription('t05tags', 't05.tags', 100, 100) \g /dev/null
SELECT frameq.register_host('t05-tagged', 't05.tags', 8, 17179869184, 0, 0, '{linux,gpu}') AS tok_tagged \gset
SELECT frameq.register_host('t05-bare', 't05.tags', 8, 17179869184) AS tok_bare \gset
SELECT epoch AS e_tagged FROM frameq.attach('t05-tagged', :'tok_tagged', 'b') \gset
SELECT epoch AS e_bare FROM frameq.attach('t05-bare', :'tok_bare', 'b') \gset
SELECT frameq.submit($${"show": "t05tags", "name": "tags", "layers": [
	{"name": "windows", "command": "c", "range": "1-2", "tags": ["windows"]},
	{"name": "gpu_or_mac", "command": "c", "range": "1-2", "tags": ["mac", "gpu"]},
	{"name": "untagged", "command": "c", "range": "1-2"}]}$$) AS tags_job \gset

SELECT is(
	(SELECT array_agg(format('%s:%s', l.name, b.frame_number) ORDER BY b.ordinality)
	   FROM frameq.reserve('t05-tagged', :'tok_tagged', :e_tagged) WITH ORDINALITY b
	   JOIN frameq.layer l ON l.id = b.layer),
	'{gpu_or_mac:1,gpu_or_mac:2,untagged:1,untagged:2}'::text[],
	'a host tagged linux,gpu books layers sharing any tag and untagged layers, not a windows layer');
SELECT is((SELECT count(*)::int FROM frameq.reserve('t05-bare', :'tok_bare', :e_bare)), 0,
		  'a host without tags gets nothing from a layer that needs a tag');
SELECT is((SELECT count(*)::int FROM frameq.frame f JOIN frameq.layer l ON l.id = f.layer
			WHERE l.job = :tags_job AND l.name = 'windows' AND f.state = 'waiting'), 2,
		  'both frames of the windows layer are still waiting');

-- ----------------------------------------------------------- resource fit

SELECT frameq.create_allocation('t05.fit') \g /dev/null
SELECT frameq.create_show('t05fit') \g /dev/null
SELECT frameq.set_subscription('t05fit', 't05.fit', 100, 100) \g /dev/null
-- 8 cores, 8 GiB, 1 gpu with 4 GiB
SELECT frameq.register_host('t05-fit', 't05.fit', 8, 8589934592, 1, 4294967296) AS tok_fit \gset
SELECT epoch AS e_fit FROM frameq.attach('t05-fit', :'tok_fit', 'b') \gset
SELECT frameq.submit($${"show": "t05fit", "name": "fit", "layers": [
	{"name": "nine_cores", "command": "c", "range": "1", "cores": 9},
	{"name": "nine_gib", "command": "c", "range": "1", "memory": "9GB"},
	{"name": "two_gpus", "command": "c", "range": "1", "gpus": 2},
	{"name": "five_gib_gpu", "command": "c", "range": "1", "gpus": 1, "gpu_memory": "5GB"},
	{"name": "gpu", "command": "c", "range": "1-3", "gpus": 1, "gpu_memory": "3GB"},
	{"name": "three_gib", "command": "c", "range": "1-5", "memory": "3GB"},
	{"name": "rest", "command": "c", "range": "1-10"}]}$$) AS fit_job \gset

SELECT is(
	(SELECT array_agg(format('%s:%s', l.name, b.frame_number) ORDER BY b.ordinality)
	   FROM frameq.reserve('t05-fit', :'tok_fit', :e_fit) WITH ORDINALITY b
	   JOIN frameq.layer l ON l.id = b.layer),
	'{gpu:1,three_gib:1,three_gib:2,rest:1,rest:2,rest:3,rest:4,rest:5}'::text[],
	'a host books only layers whose cores, memory, gpus and gpu memory fit what it has free');
SELECT results_eq(
	$$SELECT idle_cc, idle_memory, idle_gpus, idle_gpu_memory FROM frameq.host WHERE name = 't05-fit'$$,
	$$VALUES (0, 2147483648::bigint, 0, 1073741824::bigint)$$,
	'the host is left with 0 cores, 2 GiB, 0 gpus and 1 GiB of gpu memory');
SELECT is((SELECT count(*)::int FROM frameq.frame f JOIN frameq.layer l ON l.id = f.layer
			WHERE l.job = :fit_job AND l.name IN ('nine_cores', 'nine_gib', 'two_gpus', 'five_gib_gpu')
			  AND f.state = 'waiting'), 4,
		  'the four layers that can never fit this host are untouched');

-- -------------------------------------- shows by usage/size, size 0 last

SELECT frameq.create_allocation('t05.share') \g /dev/null
SELECT frameq.create_show('t05busy') AS show_busy \gset
SELECT frameq.create_show('t05small') AS show_small \gset
SELECT frameq.create_show('t05none') AS show_none \gset
SELECT frameq.set_subscription('t05busy', 't05.share', 10, 100) \g /dev/null
SELECT frameq.set_subscription('t05small', 't05.share', 2, 100) \g /dev/null
SELECT frameq.set_subscription('t05none', 't05.share', 0, 100) \g /dev/null
SELECT frameq.register_host('t05-s0', 't05.share', 9, 17179869184) AS tok_s0 \gset
SELECT epoch AS e_s0 FROM frameq.attach('t05-s0', :'tok_s0', 'b') \gset
SELECT frameq.submit($${"show": "t05busy", "name": "busy",
	"layers": [{"name": "l", "command": "c", "range": "1-20"}]}$$) AS busy_job \gset
-- t05busy now uses 9 of its 10 cores: ratio 0.9
SELECT is((SELECT count(*)::int FROM frameq.reserve('t05-s0', :'tok_s0', :e_s0)), 9,
		  'the only show with work books 9 cores (usage/size 0.9)');
SELECT frameq.submit($${"show": "t05small", "name": "small",
	"layers": [{"name": "l", "command": "c", "range": "1-20"}]}$$) AS small_job \gset
SELECT frameq.submit($${"show": "t05none", "name": "none",
	"layers": [{"name": "l", "command": "c", "range": "1-20"}]}$$) AS none_job \gset
-- five one-core hosts, one booking each
SELECT frameq.register_host('t05-s1', 't05.share', 1, 17179869184) AS tok_s1 \gset
SELECT frameq.register_host('t05-s2', 't05.share', 1, 17179869184) AS tok_s2 \gset
SELECT frameq.register_host('t05-s3', 't05.share', 1, 17179869184) AS tok_s3 \gset
SELECT frameq.register_host('t05-s4', 't05.share', 1, 17179869184) AS tok_s4 \gset
SELECT frameq.register_host('t05-s5', 't05.share', 1, 17179869184) AS tok_s5 \gset
SELECT frameq.attach('t05-s1', :'tok_s1', 'b') \g /dev/null
SELECT frameq.attach('t05-s2', :'tok_s2', 'b') \g /dev/null
SELECT frameq.attach('t05-s3', :'tok_s3', 'b') \g /dev/null
SELECT frameq.attach('t05-s4', :'tok_s4', 'b') \g /dev/null
SELECT frameq.attach('t05-s5', :'tok_s5', 'b') \g /dev/null

SELECT is((SELECT job FROM frameq.reserve('t05-s1', :'tok_s1', 1)), :small_job::bigint,
		  'a show at 0 of 2 cores comes before one at 9 of 10 and one with no entitlement');
SELECT is((SELECT job FROM frameq.reserve('t05-s2', :'tok_s2', 1)), :small_job::bigint,
		  'at 1 of 2 cores (0.5) it still comes before the show at 0.9');
SELECT is((SELECT job FROM frameq.reserve('t05-s3', :'tok_s3', 1)), :busy_job::bigint,
		  'at 2 of 2 cores (1.0) it comes after the show at 0.9');
SELECT frameq.set_job(:small_job, paused => true) \g /dev/null
SELECT is((SELECT job FROM frameq.reserve('t05-s4', :'tok_s4', 1)), :busy_job::bigint,
		  'a show at 10 of 10 cores still comes before a show with no entitlement');
SELECT frameq.set_job(:busy_job, paused => true) \g /dev/null
SELECT is((SELECT job FROM frameq.reserve('t05-s5', :'tok_s5', 1)), :none_job::bigint,
		  'a show with no entitlement books when no entitled show has work');
SELECT results_eq(
	format($$SELECT job, count(*)::int FROM frameq.proc WHERE job IN (%s, %s, %s) GROUP BY job ORDER BY job$$,
		   :busy_job, :small_job, :none_job),
	format('VALUES (%s::bigint, 11), (%s::bigint, 2), (%s::bigint, 1)', :busy_job, :small_job, :none_job),
	'the busy show runs 11 frames, the small one 2, the unentitled one 1');

-- ------------------------------------------ job priority, then job age

SELECT frameq.create_allocation('t05.prio') \g /dev/null
SELECT frameq.create_show('t05prio') \g /dev/null
SELECT frameq.set_subscription('t05prio', 't05.prio', 100, 100) \g /dev/null
SELECT frameq.register_host('t05-prio', 't05.prio', 8, 17179869184) AS tok_prio \gset
SELECT epoch AS e_prio FROM frameq.attach('t05-prio', :'tok_prio', 'b') \gset
SELECT frameq.submit($${"show": "t05prio", "name": "old_low",
	"layers": [{"name": "l", "command": "c", "range": "1-2"}]}$$) AS j_old_low \gset
SELECT frameq.submit($${"show": "t05prio", "name": "mid_high", "priority": 5,
	"layers": [{"name": "l", "command": "c", "range": "1-2"}]}$$) AS j_mid_high \gset
SELECT frameq.submit($${"show": "t05prio", "name": "new_high", "priority": 5,
	"layers": [{"name": "l", "command": "c", "range": "1-2"}]}$$) AS j_new_high \gset
SELECT frameq.submit($${"show": "t05prio", "name": "newest_top", "priority": 9, "paused": true,
	"layers": [{"name": "l", "command": "c", "range": "1-2"}]}$$) AS j_paused \gset

SELECT is(
	(SELECT array_agg(format('%s:%s', j.name, b.frame_number) ORDER BY b.ordinality)
	   FROM frameq.reserve('t05-prio', :'tok_prio', :e_prio, 5) WITH ORDINALITY b
	   JOIN frameq.job j ON j.id = b.job),
	'{mid_high:1,mid_high:2,new_high:1,new_high:2,old_low:1}'::text[],
	'higher priority jobs come first, older first among equals, and a paused job not at all');
SELECT frameq.set_job(:j_old_low, priority => 10) \g /dev/null
SELECT frameq.set_job(:j_paused, paused => false) \g /dev/null
SELECT is(
	(SELECT array_agg(format('%s:%s', j.name, b.frame_number) ORDER BY b.ordinality)
	   FROM frameq.reserve('t05-prio', :'tok_prio', :e_prio, 3) WITH ORDINALITY b
	   JOIN frameq.job j ON j.id = b.job),
	'{old_low:2,newest_top:1,newest_top:2}'::text[],
	'raising a job''s priority and resuming a job take effect at the next reserve');

-- ------------------------------- layer dispatch order, then frame number

SELECT frameq.create_allocation('t05.order') \g /dev/null
SELECT frameq.create_show('t05order') \g /dev/null
SELECT frameq.set_subscription('t05order', 't05.order', 100, 100) \g /dev/null
SELECT frameq.register_host('t05-order', 't05.order', 8, 17179869184) AS tok_order \gset
SELECT epoch AS e_order FROM frameq.attach('t05-order', :'tok_order', 'b') \gset
SELECT frameq.submit($${"show": "t05order", "name": "order", "layers": [
	{"name": "late", "command": "c", "range": "30,10,20", "dispatch_order": 5},
	{"name": "early", "command": "c", "range": "3,1,2", "dispatch_order": 1},
	{"name": "last", "command": "c", "range": "1-5", "dispatch_order": 9}]}$$) AS order_job \gset

SELECT is(
	(SELECT array_agg(format('%s:%s', l.name, b.frame_number) ORDER BY b.ordinality)
	   FROM frameq.reserve('t05-order', :'tok_order', :e_order, 7) WITH ORDINALITY b
	   JOIN frameq.layer l ON l.id = b.layer),
	'{early:1,early:2,early:3,late:10,late:20,late:30,last:1}'::text[],
	'layers book by dispatch order and frames by number, whatever order the range lists them in');

-- ------------------------------------------------------------- threading

SELECT frameq.create_allocation('t05.thread') \g /dev/null
SELECT frameq.create_show('t05thread') \g /dev/null
SELECT frameq.set_subscription('t05thread', 't05.thread', 100, 100) \g /dev/null
SELECT frameq.register_host('t05-thread', 't05.thread', 8, 17179869184) AS tok_thread \gset
SELECT epoch AS e_thread FROM frameq.attach('t05-thread', :'tok_thread', 'b') \gset
SELECT frameq.submit($${"show": "t05thread", "name": "thread", "layers": [
	{"name": "sim", "command": "c", "range": "1-3", "cores": 2, "cores_max": 6, "threadable": true}]}$$)
	AS thread_job \gset

SELECT is(
	(SELECT array_agg(format('%s:%s', b.frame_number, b.cores) ORDER BY b.ordinality)
	   FROM frameq.reserve('t05-thread', :'tok_thread', :e_thread) WITH ORDINALITY b),
	'{1:6.00,2:2.00}'::text[],
	'a threadable layer gets up to cores_max (6), then what is left (2) but never less than its cores');
SELECT results_eq(
	format($$SELECT f.number, p.cores_cc FROM frameq.proc p JOIN frameq.frame f ON f.id = p.frame
			  WHERE p.job = %s ORDER BY 1$$, :thread_job),
	'VALUES (1, 600), (2, 200)', 'the procs hold 600 and 200 centicores');
SELECT is((SELECT idle_cc FROM frameq.host WHERE name = 't05-thread'), 0, 'the threaded host has no idle cores');
SELECT is((SELECT state FROM frameq.frame WHERE job = :thread_job AND number = 3), 'waiting',
		  'the third frame waits');

SELECT frameq.register_host('t05-small', 't05.thread', 4, 17179869184) AS tok_small \gset
SELECT epoch AS e_small FROM frameq.attach('t05-small', :'tok_small', 'b') \gset
SELECT is((SELECT cores FROM frameq.reserve('t05-small', :'tok_small', :e_small)), 4.00,
		  'on a 4-core host a threadable layer with cores_max 6 gets all 4 cores');

SELECT frameq.submit($${"show": "t05thread", "name": "plain", "layers": [
	{"name": "l", "command": "c", "range": "1-2", "cores": 2}]}$$) AS plain_job \gset
SELECT frameq.register_host('t05-plain', 't05.thread', 8, 17179869184) AS tok_plain \gset
SELECT epoch AS e_plain FROM frameq.attach('t05-plain', :'tok_plain', 'b') \gset
SELECT is((SELECT array_agg(cores) FROM frameq.reserve('t05-plain', :'tok_plain', :e_plain)),
		  '{2.00,2.00}'::numeric[], 'a layer that is not threadable gets exactly its cores');

SELECT is_empty('SELECT * FROM frameq.check()', 'check() finds nothing wrong');

SELECT * FROM finish();
ROLLBACK;
