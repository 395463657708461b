/*
 * Dependencies (sql/src/depends.sql; doc/design.md, "Dependencies"): job
 * after_jobs, layer after and after_frames, depend_job(), drop_depends(),
 * the depends view, and every path that meets a dependency: a
 * prerequisite's release to succeeded (complete), eat_frame of a waiting
 * or dead prerequisite, a job finishing, drop_depends.  A task with an
 * unmet dependency is 'depend' from its creation, is never booked, and is
 * 'waiting' in the transaction that meets its last dependency.  A dead
 * prerequisite holds its dependents; a met dependency stays met.  Every
 * refusal changes nothing.  check() is clean after each step.
 */
BEGIN;
\ir include/helpers.psql

SELECT plan(98);

SELECT * FROM fqtest.farm('t54', cores => '{64,8}') \gset

/* the state of one task: by job id, layer name and frame number */
CREATE FUNCTION pg_temp.st(job bigint, layer text, number int) RETURNS text
LANGUAGE sql AS $$
	SELECT f.state FROM frameq.frame f JOIN frameq.layer l ON l.id = f.layer
	 WHERE f.job = st.job AND l.name = st.layer AND f.number = st.number
$$;
/* the states of a layer's tasks, in frame order */
CREATE FUNCTION pg_temp.states(job bigint, layer text) RETURNS text
LANGUAGE sql AS $$
	SELECT string_agg(f.state, ',' ORDER BY f.number) FROM frameq.frame f
	  JOIN frameq.layer l ON l.id = f.layer WHERE f.job = states.job AND l.name = states.layer
$$;
/* book what host 1 can take; (layer name, number) of each task booked, of one job if named */
CREATE FUNCTION pg_temp.book(tok text, epoch bigint, job bigint DEFAULT NULL) RETURNS text
LANGUAGE sql AS $$
	SELECT coalesce(string_agg(l.name || ' ' || b.frame_number, ',' ORDER BY l.name, b.frame_number), '')
	  FROM frameq.reserve('t54-h1', tok, epoch, 100) b JOIN frameq.layer l ON l.id = b.layer
	 WHERE book.job IS NULL OR b.job = book.job
$$;
/* report a task's proc finished with this exit status */
CREATE FUNCTION pg_temp.done(tok text, epoch bigint, job bigint, layer text, number int, status int DEFAULT 0)
RETURNS text LANGUAGE sql AS $$
	SELECT frameq.complete('t54-h1', tok, epoch, p.id, status)
	  FROM frameq.proc p JOIN frameq.frame f ON f.id = p.frame JOIN frameq.layer l ON l.id = f.layer
	 WHERE f.job = done.job AND l.name = done.layer AND f.number = done.number
$$;
CREATE FUNCTION pg_temp.task(job bigint, layer text, number int) RETURNS bigint
LANGUAGE sql AS $$
	SELECT f.id FROM frameq.frame f JOIN frameq.layer l ON l.id = f.layer
	 WHERE f.job = task.job AND l.name = task.layer AND f.number = task.number
$$;

/* ---------------------------------------------------------- layer on layer */
SELECT frameq.submit($${"show": "t54show", "name": "pipe", "priority": 50,
	"layers": [{"name": "render", "command": "r #FRAME#", "range": "1-3"},
			   {"name": "comp", "command": "c #FRAME#", "range": "1-3", "after": ["render"]},
			   {"name": "den", "command": "d #FRAME#", "range": "1-4", "after_frames": ["render"]}]}$$) AS pipe \gset

SELECT is(pg_temp.states(:pipe, 'render'), 'waiting,waiting,waiting', 'render: waiting from the submit');
SELECT is(pg_temp.states(:pipe, 'comp'), 'depend,depend,depend', 'comp (after render): depend from the submit');
SELECT is(pg_temp.states(:pipe, 'den'), 'depend,depend,depend,waiting',
	'den (after render frame by frame): 1-3 depend, 4 (no render frame 4) waiting');
SELECT results_eq($$SELECT total, waiting, depend FROM frameq.job_progress WHERE job = $$ || :pipe,
	$$VALUES (10::bigint, 4::bigint, 6::bigint)$$, 'job_progress counts the depend tasks');
SELECT is((SELECT count(*)::int FROM frameq.depends WHERE job = :pipe AND kind = 'layer' AND NOT satisfied), 1,
	'depends: one layer dependency, unmet');
SELECT is((SELECT count(*)::int FROM frameq.depends WHERE job = :pipe AND kind = 'frame' AND NOT satisfied), 3,
	'depends: three frame edges, unmet');
SELECT is((SELECT count(*)::int FROM frameq.dispatch_queue q JOIN frameq.layer l ON l.id = q.layer
			WHERE l.job = :pipe AND l.name = 'comp'), 0, 'comp is not in the dispatch queue');
SELECT is_empty('SELECT * FROM frameq.check()', 'check() is clean after the submit');

SELECT is(pg_temp.book(:'tok1', :epoch1), 'den 4,render 1,render 2,render 3',
	'a booking gets render 1-3 and den 4, nothing that depends');

SELECT is(pg_temp.done(:'tok1', :epoch1, :pipe, 'render', 2), 'accepted', 'render 2 completes');
SELECT is(pg_temp.states(:pipe, 'den'), 'depend,waiting,depend,running',
	'den 2 is waiting in the transaction that completed render 2; den 1 and 3 still depend');
SELECT is(pg_temp.states(:pipe, 'comp'), 'depend,depend,depend', 'comp still depends: render 1 and 3 run');
SELECT is((SELECT count(*)::int FROM frameq.dispatch_queue q JOIN frameq.layer l ON l.id = q.layer
			WHERE l.job = :pipe AND l.name = 'den' AND q.priority = 50), 1, 'den is queued again');
SELECT is(pg_temp.done(:'tok1', :epoch1, :pipe, 'render', 1), 'accepted', 'render 1 completes');
SELECT is(pg_temp.states(:pipe, 'comp'), 'depend,depend,depend', 'comp still depends: render 3 runs');
SELECT is(pg_temp.done(:'tok1', :epoch1, :pipe, 'render', 3), 'accepted', 'render 3, the last, completes');
SELECT is(pg_temp.states(:pipe, 'comp'), 'waiting,waiting,waiting',
	'comp 1-3 are waiting in the transaction that completed the last render frame');
SELECT is(pg_temp.states(:pipe, 'den'), 'waiting,waiting,waiting,running', 'den 1-3 waiting');
SELECT is((SELECT bool_and(satisfied) FROM frameq.depends WHERE job = :pipe), true, 'every dependency of pipe is met');
SELECT is_empty('SELECT * FROM frameq.check()', 'check() is clean after the prerequisites ended');

/* a met dependency stays met: render 2 retried */
SELECT lives_ok(format('SELECT frameq.retry_frame(%s)', pg_temp.task(:pipe, 'render', 2)),
	'render 2 is retried');
SELECT is(pg_temp.st(:pipe, 'render', 2), 'waiting', 'render 2 is waiting again');
SELECT is(pg_temp.states(:pipe, 'comp'), 'waiting,waiting,waiting', 'comp stays waiting: its dependency was met');
SELECT is(pg_temp.st(:pipe, 'den', 2), 'waiting', 'den 2 stays waiting');

/* ---------------------------------------------------- a dead prerequisite */
SELECT frameq.submit($${"show": "t54show", "name": "deadpipe", "priority": 60, "max_retries": 0,
	"layers": [{"name": "render", "command": "r", "range": "1-2"},
			   {"name": "comp", "command": "c", "range": "1-2", "after_frames": ["render"]},
			   {"name": "all", "command": "a", "range": "1", "after": ["render"]}]}$$) AS dp \gset
SELECT is(pg_temp.book(:'tok1', :epoch1, :dp), 'render 1,render 2',
	'deadpipe (first in policy order): its render frames are booked, nothing that depends');
SELECT is(pg_temp.done(:'tok1', :epoch1, :dp, 'render', 1, 1), 'accepted', 'render 1 fails (no retries)');
SELECT is(pg_temp.st(:dp, 'render', 1), 'dead', 'render 1 is dead');
SELECT is(pg_temp.st(:dp, 'comp', 1), 'depend', 'comp 1 stays depend: a dead prerequisite holds it');
SELECT is(pg_temp.done(:'tok1', :epoch1, :dp, 'render', 2), 'accepted', 'render 2 succeeds');
SELECT is(pg_temp.st(:dp, 'comp', 2), 'waiting', 'comp 2 is waiting');
SELECT is(pg_temp.st(:dp, 'all', 1), 'depend', 'all (after render) stays depend: render 1 is dead');
SELECT is_empty('SELECT * FROM frameq.check()', 'check() is clean with a dead prerequisite');
SELECT lives_ok(format('SELECT frameq.eat_frame(%s)', pg_temp.task(:dp, 'render', 1)), 'the dead render 1 is eaten');
SELECT is(pg_temp.st(:dp, 'comp', 1), 'waiting', 'eating the dead prerequisite frees comp 1');
SELECT is(pg_temp.st(:dp, 'all', 1), 'waiting', 'and the layer that waited for all of render');
SELECT is_empty('SELECT * FROM frameq.check()', 'check() is clean after the eat');

/* eat_frame of a waiting prerequisite */
SELECT frameq.submit($${"show": "t54show", "name": "eatpipe", "priority": 1,
	"layers": [{"name": "render", "command": "r", "range": "1"},
			   {"name": "comp", "command": "c", "range": "1", "after": ["render"]}]}$$) AS ep \gset
SELECT lives_ok(format('SELECT frameq.eat_frame(%s)', pg_temp.task(:ep, 'render', 1)), 'a waiting prerequisite is eaten');
SELECT is(pg_temp.st(:ep, 'comp', 1), 'waiting', 'its dependent is waiting');

/* a running prerequisite eaten: the kill order's release frees the dependent */
SELECT frameq.submit($${"show": "t54show", "name": "killpipe", "priority": 70,
	"layers": [{"name": "render", "command": "r", "range": "1"},
			   {"name": "comp", "command": "c", "range": "1", "after_frames": ["render"]}]}$$) AS kp \gset
SELECT is(pg_temp.book(:'tok1', :epoch1, :kp), 'render 1', 'killpipe: render 1 runs');
SELECT lives_ok(format('SELECT frameq.eat_frame(%s)', pg_temp.task(:kp, 'render', 1)),
	'eat_frame of the running prerequisite: a kill order');
SELECT is(pg_temp.st(:kp, 'comp', 1), 'depend', 'comp still depends while render 1 may run');
SELECT is((SELECT kill FROM frameq.heartbeat('t54-h1', :'tok1', :epoch1,
		ARRAY(SELECT p.id FROM frameq.proc p WHERE p.host = :host1 AND p.frame <> pg_temp.task(:kp, 'render', 1)))
		)::text IS NOT NULL, true, 'a heartbeat that no longer lists render 1 confirms the kill');
SELECT is(pg_temp.st(:kp, 'render', 1), 'eaten', 'render 1 is eaten on its release');
SELECT is(pg_temp.st(:kp, 'comp', 1), 'waiting', 'and comp 1 is waiting in that transaction');

/* auto_eat: a prerequisite that uses up its retries ends eaten, which meets the dependency */
SELECT frameq.submit($${"show": "t54show", "name": "autoeat", "priority": 70, "max_retries": 0, "auto_eat": true,
	"layers": [{"name": "render", "command": "r", "range": "1"},
			   {"name": "comp", "command": "c", "range": "1", "after": ["render"]}]}$$) AS ae \gset
SELECT is(pg_temp.book(:'tok1', :epoch1, :ae), 'render 1', 'autoeat: render 1 runs');
SELECT is(pg_temp.done(:'tok1', :epoch1, :ae, 'render', 1, 3), 'accepted', 'render 1 fails with no retries left');
SELECT is(pg_temp.st(:ae, 'render', 1), 'eaten', 'auto_eat: it ends eaten');
SELECT is(pg_temp.st(:ae, 'comp', 1), 'waiting', 'which frees comp 1');
SELECT is_empty('SELECT * FROM frameq.check()', 'check() is clean after the kill order and auto_eat paths');

/* ------------------------------------------------------------ job on job */
SELECT frameq.submit($${"show": "t54show", "name": "sim", "priority": 1,
	"layers": [{"name": "l", "command": "s", "range": "1-2"}]}$$) AS sim \gset
SELECT frameq.submit(jsonb_build_object('show', 't54show', 'name', 'light', 'priority', 1,
	'after_jobs', jsonb_build_array(:sim),
	'layers', jsonb_build_array(jsonb_build_object('name', 'l', 'command', 'x', 'range', '1-2')))) AS light \gset
SELECT is(pg_temp.states(:light, 'l'), 'depend,depend', 'a job after another: depend from the submit');
SELECT is((SELECT deps_left FROM frameq.layer WHERE job = :light), 1, 'its layer counts one unmet dependency');
SELECT lives_ok(format('SELECT frameq.eat_frame(%s)', pg_temp.task(:sim, 'l', 1)), 'sim 1 is eaten');
SELECT is(pg_temp.states(:light, 'l'), 'depend,depend', 'light still depends: sim 2 waits');
SELECT lives_ok(format('SELECT frameq.eat_frame(%s)', pg_temp.task(:sim, 'l', 2)), 'sim 2, the last, is eaten');
SELECT is((SELECT state FROM frameq.job WHERE id = :sim), 'finished', 'sim is finished');
SELECT is(pg_temp.states(:light, 'l'), 'waiting,waiting', 'light is waiting in the transaction that finished sim');
SELECT is_empty('SELECT * FROM frameq.check()', 'check() is clean after the job dependency was met');

/* a finished job with no dead task: a new dependent is free at once */
SELECT frameq.submit(jsonb_build_object('show', 't54show', 'name', 'after-done', 'priority', 1,
	'after_jobs', jsonb_build_array(:sim),
	'layers', jsonb_build_array(jsonb_build_object('name', 'l', 'command', 'x', 'range', '1')))) AS ad \gset
SELECT is(pg_temp.states(:ad, 'l'), 'waiting', 'a dependency on a job already done is met at the submit');

/* -------------------------------------------------------------- depend_job */
SELECT frameq.submit($${"show": "t54show", "name": "base", "priority": 1,
	"layers": [{"name": "l", "command": "b", "range": "1"}]}$$) AS base \gset
SELECT frameq.submit($${"show": "t54show", "name": "top", "priority": 1,
	"layers": [{"name": "l", "command": "t", "range": "1-2"}]}$$) AS top \gset
SELECT lives_ok(format('SELECT frameq.depend_job(%s, %s)', :top, :base), 'depend_job(top, base)');
SELECT is(pg_temp.states(:top, 'l'), 'depend,depend', 'top''s waiting tasks are depend now');
SELECT lives_ok(format('SELECT frameq.depend_job(%s, %s)', :top, :base), 'the same dependency again changes nothing');
SELECT is((SELECT count(*)::int FROM frameq.depend WHERE job = :top), 1, 'one dependency row');
SELECT fqtest.refuses(format('SELECT frameq.depend_job(%s, %s)', :base, :top), '42P17', '%depend on itself%',
	'depend_job making a cycle');
SELECT fqtest.refuses(format('SELECT frameq.depend_job(%s, %s)', :base, :base), '42P17', '%depend on itself%',
	'depend_job of a job on itself');
SELECT fqtest.refuses(format('SELECT frameq.depend_job(%s, 999999999)', :base), '42704', '%999999999%does not exist%',
	'depend_job on a job that does not exist');
SELECT is(frameq.drop_depends(:top), 2, 'drop_depends(top) frees its 2 tasks');
SELECT is(pg_temp.states(:top, 'l'), 'waiting,waiting', 'top is waiting');
SELECT is_empty('SELECT * FROM frameq.check()', 'check() is clean after drop_depends');

/* drop_depends of one layer */
SELECT frameq.submit($${"show": "t54show", "name": "two", "priority": 1,
	"layers": [{"name": "a", "command": "a", "range": "1"},
			   {"name": "b", "command": "b", "range": "1-2", "after_frames": ["a"]},
			   {"name": "c", "command": "c", "range": "1", "after": ["a"]}]}$$) AS two \gset
SELECT is(frameq.drop_depends(:two, 'b'), 1, 'drop_depends(two, ''b'') frees b 1 (b 2 had nothing to wait for)');
SELECT is(pg_temp.states(:two, 'c'), 'depend', 'layer c keeps its dependency');
SELECT fqtest.refuses(format('SELECT frameq.drop_depends(%s, ''nope'')', :two), '42704', '%no layer "nope"%',
	'drop_depends of a layer the job does not have');

/* ------------------------------------------------ frame by frame, chunked */
SELECT frameq.submit($${"show": "t54show", "name": "chunky", "priority": -10,
	"layers": [{"name": "render", "command": "r", "range": "1-10"},
			   {"name": "comp", "command": "c #FRAMESPEC#", "range": "1-10", "chunk": 5,
				"after_frames": ["render"]},
			   {"name": "big", "command": "b", "range": "1-10", "chunk": 3},
			   {"name": "den", "command": "d", "range": "4-5,11", "after_frames": ["big"]}]}$$) AS ch \gset
SELECT results_eq(format($$SELECT f.number, f.deps_left FROM frameq.frame f JOIN frameq.layer l ON l.id = f.layer
						   WHERE f.job = %s AND l.name = 'comp' ORDER BY 1$$, :ch),
	$$VALUES (1, 5), (6, 5)$$, 'a chunk of 5 after an unchunked layer waits for its 5 frames');
SELECT results_eq(format($$SELECT f.number, f.deps_left, f.state FROM frameq.frame f JOIN frameq.layer l ON l.id = f.layer
						   WHERE f.job = %s AND l.name = 'den' ORDER BY 1$$, :ch),
	$$VALUES (4, 1, 'depend'), (5, 1, 'depend'), (11, 0, 'waiting')$$,
	'frames 4 and 5 wait for the chunk 4-6 that holds them; 11, which big lacks, waits for nothing');
SELECT lives_ok(format('SELECT frameq.eat_frame(%s)', pg_temp.task(:ch, 'big', 4)), 'big''s chunk 4-6 is eaten');
SELECT is(pg_temp.states(:ch, 'den'), 'waiting,waiting,waiting', 'den 4 and 5 are waiting');
SELECT lives_ok(format('SELECT frameq.eat_frame(f.id) FROM frameq.frame f JOIN frameq.layer l ON l.id = f.layer'
					   ' WHERE f.job = %s AND l.name = ''render'' AND f.number <= 4', :ch), 'render 1-4 are eaten');
SELECT is(pg_temp.states(:ch, 'comp'), 'depend,depend', 'comp 1-5 still waits for render 5');
SELECT lives_ok(format('SELECT frameq.eat_frame(%s)', pg_temp.task(:ch, 'render', 5)), 'render 5 is eaten');
SELECT is(pg_temp.states(:ch, 'comp'), 'waiting,depend', 'comp 1-5 is waiting, comp 6-10 still depends');
SELECT is_empty('SELECT * FROM frameq.check()', 'check() is clean with chunked dependencies');

/* ---------------------------------------------------------------- refusals */
SELECT fqtest.refuses($$SELECT frameq.submit('{"show": "t54show", "name": "x", "layers": [
	{"name": "a", "command": "a", "range": "1", "after": ["a"]}]}')$$,
	'42P17', 'spec.layers[0].after%', 'a layer after itself');
SELECT fqtest.refuses($$SELECT frameq.submit('{"show": "t54show", "name": "x", "layers": [
	{"name": "a", "command": "a", "range": "1", "after": ["b"]},
	{"name": "b", "command": "b", "range": "1", "after_frames": ["a"]}]}')$$,
	'42P17', 'spec.layers[%]%cycle%', 'two layers after each other');
SELECT fqtest.refuses($$SELECT frameq.submit('{"show": "t54show", "name": "x", "layers": [
	{"name": "a", "command": "a", "range": "1", "after": ["zz"]}]}')$$,
	'42704', 'spec.layers[0].after%"zz"%', 'a layer after a layer the job does not have');
SELECT fqtest.refuses($$SELECT frameq.submit('{"show": "t54show", "name": "x", "after_jobs": [999999999], "layers": [
	{"name": "a", "command": "a", "range": "1"}]}')$$,
	'42704', 'spec.after_jobs%999999999%', 'after_jobs naming a job that does not exist');
SELECT frameq.submit($${"show": "t54show", "name": "doomed",
	"layers": [{"name": "l", "command": "d", "range": "1"}]}$$) AS doomed \gset
SELECT frameq.kill_job(:doomed, 'test');
SELECT fqtest.refuses(format($$SELECT frameq.submit('{"show": "t54show", "name": "x", "after_jobs": [%s], "layers": [
	{"name": "a", "command": "a", "range": "1"}]}')$$, :doomed),
	'55000', 'spec.after_jobs%killed%', 'after_jobs naming a killed job');

SELECT fqtest.refuses(format('SELECT frameq.submit(%L)', jsonb_build_object('show', 't54show', 'name', 'x',
	'after_jobs', (SELECT jsonb_agg(i) FROM generate_series(1, 33) i),
	'layers', jsonb_build_array(jsonb_build_object('name', 'a', 'command', 'a', 'range', '1')))),
	'54000', 'spec.after_jobs is too large%', 'after_jobs naming 33 jobs (at most 32)');
SELECT fqtest.refuses(format('SELECT frameq.submit(%L)', jsonb_build_object('show', 't54show', 'name', 'x',
	'layers', jsonb_build_array(jsonb_build_object('name', 'big', 'command', 'b', 'range', '1-100000',
							   'after_frames', (SELECT jsonb_agg('p' || i) FROM generate_series(1, 41) i)))
			  || (SELECT jsonb_agg(jsonb_build_object('name', 'p' || i, 'command', 'p', 'range', '1'))
					FROM generate_series(1, 41) i))),
	'54000', 'spec.layers is too large%frame-by-frame%', 'frame-by-frame dependencies past the bound of 4000000');

SELECT * FROM finish();
ROLLBACK;
