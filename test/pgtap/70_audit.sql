/*
 * The audit trail (doc/reference.md, "Audit trail"): every operator and
 * administration function that succeeds leaves exactly one row in view
 * actions, with the login that acted (session_user, which SET ROLE does
 * not change), the function's name, the ids it acted on and its arguments
 * and outcome, never a host token, a run secret, a command or an env
 * value.  The agent's calls leave none.  A call that fails leaves none,
 * nor does one whose transaction fails after it.  comment_job validates
 * its text (SQLSTATE, nothing changed).  frameq_reader reads the view; no
 * role but the owner touches the table, and even the owner cannot update
 * it.
 */
BEGIN;
\ir include/helpers.psql

SELECT plan(92);

CREATE ROLE t70_admin IN ROLE frameq_admin;
CREATE ROLE t70_sub IN ROLE frameq_submit;
CREATE ROLE t70_reader IN ROLE frameq_reader;
CREATE ROLE t70_other;

/* the trail's rows after a mark, in order */
CREATE FUNCTION fqtest.t70_since(mark bigint)
RETURNS TABLE (role text, action text, job bigint, layer bigint, frame bigint, host int, detail jsonb)
LANGUAGE sql AS $$
	SELECT a.role, a.action, a.job, a.layer, a.frame, a.host, a.detail
	  FROM frameq.actions a WHERE a.id > mark ORDER BY a.id
$$;
CREATE FUNCTION fqtest.t70_rows() RETURNS bigint LANGUAGE sql AS $$ SELECT count(*) FROM frameq.action $$;
SELECT coalesce(max(id), 0) AS mark0 FROM frameq.action \gset

-- ------------------------------------------------------ administration, by an admin

SET SESSION AUTHORIZATION t70_admin;
SELECT frameq.create_allocation('t70.pool', 't70tag') AS alloc \gset
SELECT frameq.create_show('t70show') AS show \gset
SELECT frameq.set_subscription('t70show', 't70.pool', 10, 20) \g /dev/null
SELECT frameq.create_folder('t70show', 't70f', 4, 1) AS folder \gset
SELECT frameq.set_folder_limits(:folder, 5, NULL) \g /dev/null
SELECT frameq.create_limit('t70.lic', 3) AS lim \gset
SELECT frameq.set_limit('t70.lic', 4) \g /dev/null
SELECT frameq.register_host('t70-h1', 't70.pool', 8, 17179869184, 0, 0, '{a}') AS tok1 \gset
SELECT frameq.register_host('t70-h2', 't70.pool', 4, 17179869184) AS tok2 \gset
SELECT frameq.rotate_host_token('t70-h2') AS tok2b \gset
SELECT frameq.grant_show('t70show', 't70_sub') \g /dev/null
SELECT frameq.grant_show('t70show', 't70_reader') \g /dev/null
SELECT frameq.revoke_show('t70show', 't70_reader') \g /dev/null
RESET SESSION AUTHORIZATION;
SELECT id AS h1 FROM frameq.host WHERE name = 't70-h1' \gset
SELECT id AS h2 FROM frameq.host WHERE name = 't70-h2' \gset

SELECT results_eq(format($$SELECT action FROM fqtest.t70_since(%s)$$, :mark0),
	$$VALUES ('create_allocation'), ('create_show'), ('set_subscription'), ('create_folder'),
			 ('set_folder_limits'), ('create_limit'), ('set_limit'), ('register_host'),
			 ('register_host'), ('rotate_host_token'), ('grant_show'), ('grant_show'), ('revoke_show')$$,
	'thirteen administration calls: thirteen rows, in the order of the calls, named after the functions');
SELECT is((SELECT count(*)::int FROM fqtest.t70_since(:mark0) WHERE role = 't70_admin'), 13,
	'each row names the login that acted (session_user)');
SELECT results_eq(format($$SELECT job, layer, frame, host, detail FROM fqtest.t70_since(%s) WHERE action = 'create_allocation'$$, :mark0),
	format($$VALUES (NULL::bigint, NULL::bigint, NULL::bigint, NULL::int, '{"name": "t70.pool", "tag": "t70tag", "allocation": %s}'::jsonb)$$, :alloc),
	'create_allocation: its arguments and the new allocation''s id');
SELECT results_eq(format($$SELECT detail FROM fqtest.t70_since(%s) WHERE action = 'create_show'$$, :mark0),
	format($$VALUES ('{"name": "t70show", "show": %s}'::jsonb)$$, :show), 'create_show: the name and the new id');
SELECT results_eq(format($$SELECT detail FROM fqtest.t70_since(%s) WHERE action = 'set_subscription'$$, :mark0),
	$$VALUES ('{"show": "t70show", "allocation": "t70.pool", "size": 10, "burst": 20}'::jsonb)$$,
	'set_subscription: show, allocation, size and burst');
SELECT results_eq(format($$SELECT detail FROM fqtest.t70_since(%s) WHERE action = 'create_folder'$$, :mark0),
	format($$VALUES ('{"show": "t70show", "name": "t70f", "max_cores": 4, "max_gpus": 1, "folder": %s}'::jsonb)$$, :folder),
	'create_folder: its arguments and the new id');
SELECT results_eq(format($$SELECT detail FROM fqtest.t70_since(%s) WHERE action = 'set_folder_limits'$$, :mark0),
	format($$VALUES ('{"folder": %s, "max_cores": 5, "max_gpus": null}'::jsonb)$$, :folder),
	'set_folder_limits: a cap lifted shows as null');
SELECT results_eq(format($$SELECT action, detail FROM fqtest.t70_since(%s) WHERE action LIKE '%%_limit'$$, :mark0),
	format($$VALUES ('create_limit', '{"name": "t70.lic", "max_running": 3, "limit": %s}'::jsonb),
					('set_limit', '{"name": "t70.lic", "max_running": 4, "limit": %s}'::jsonb)$$, :lim, :lim),
	'create_limit and set_limit: name, max_running, the limit''s id');
SELECT results_eq(format($$SELECT host, detail FROM fqtest.t70_since(%s) WHERE action = 'register_host'$$, :mark0),
	format($$VALUES (%s, '{"name": "t70-h1", "allocation": "t70.pool", "cores": 8, "memory": 17179869184,
						   "gpus": 0, "gpu_memory": 0, "tags": ["a"]}'::jsonb),
					(%s, '{"name": "t70-h2", "allocation": "t70.pool", "cores": 4, "memory": 17179869184,
						   "gpus": 0, "gpu_memory": 0, "tags": []}'::jsonb)$$, :h1, :h2),
	'register_host: the new host''s id and its arguments, not the token it returned');
SELECT results_eq(format($$SELECT host, detail FROM fqtest.t70_since(%s) WHERE action = 'rotate_host_token'$$, :mark0),
	format($$VALUES (%s, '{"host": "t70-h2"}'::jsonb)$$, :h2),
	'rotate_host_token: which host, not its new token');
SELECT results_eq(format($$SELECT action, detail FROM fqtest.t70_since(%s) WHERE action LIKE '%%_show' AND action <> 'create_show'$$, :mark0),
	$$VALUES ('grant_show', '{"show": "t70show", "role": "t70_sub"}'::jsonb),
			 ('grant_show', '{"show": "t70show", "role": "t70_reader"}'::jsonb),
			 ('revoke_show', '{"show": "t70show", "role": "t70_reader"}'::jsonb)$$,
	'grant_show and revoke_show: the show and the role');

-- ------------------------------------------------------ the agent's calls record nothing

SELECT fqtest.t70_rows() AS n \gset
SELECT epoch AS e1 FROM frameq.attach('t70-h1', :'tok1', 'boot-1') \gset
SELECT epoch AS e2 FROM frameq.attach('t70-h2', :'tok2b', 'boot-1') \gset
SELECT is(fqtest.t70_rows(), :n::bigint, 'attach records nothing');

-- ------------------------------------------------------ job control, by a submitter

SELECT coalesce(max(id), 0) AS mark1 FROM frameq.action \gset
SET SESSION AUTHORIZATION t70_sub;
SELECT frameq.submit($${"show": "t70show", "folder": "t70f", "name": "t70-a",
	"layers": [{"name": "l", "command": "render --key=CMDSECRET #IFRAME#", "range": "1-4",
				"env": {"API_KEY": "ENVSECRET"}},
			   {"name": "m", "command": "c", "range": "1-2", "after": ["l"]}]}$$) AS ja \gset
SELECT frameq.submit($${"show": "t70show", "name": "t70-b", "paused": true,
	"layers": [{"name": "l", "command": "c", "range": "1-2"}]}$$) AS jb \gset
RESET SESSION AUTHORIZATION;
SELECT results_eq(format($$SELECT role, action, job, layer, frame, host, detail FROM fqtest.t70_since(%s)$$, :mark1),
	format($$VALUES ('t70_sub', 'submit', %s::bigint, NULL::bigint, NULL::bigint, NULL::int,
					 '{"show": "t70show", "folder": "t70f", "name": "t70-a", "layers": 2, "frames": 6, "paused": false}'::jsonb),
					('t70_sub', 'submit', %s, NULL, NULL, NULL,
					 '{"show": "t70show", "folder": null, "name": "t70-b", "layers": 1, "frames": 2, "paused": true}'::jsonb)$$,
		   :ja, :jb),
	'submit: a row per job, with its id and a summary of the spec (show, folder, name, sizes), not the spec');

SELECT fqtest.t70_rows() AS n \gset
CREATE TEMP TABLE t70_booked ON COMMIT DROP AS SELECT * FROM frameq.reserve('t70-h1', :'tok1', :e1, 2);
SELECT frame AS fsucc, proc AS psucc FROM t70_booked ORDER BY frame_number LIMIT 1 \gset
SELECT frame AS frun, proc AS prun, run_secret AS secret FROM t70_booked ORDER BY frame_number DESC LIMIT 1 \gset
SELECT frameq.heartbeat('t70-h1', :'tok1', :e1, ARRAY[:psucc, :prun]::bigint[]) \g /dev/null
SELECT frameq.complete('t70-h1', :'tok1', :e1, :psucc, 0) \g /dev/null
SELECT is((SELECT state FROM frameq.frame WHERE id = :fsucc), 'succeeded', '(one of the two frames booked succeeded)');
SELECT is(fqtest.t70_rows(), :n::bigint, 'reserve, heartbeat and complete record nothing');
SELECT id AS lay_l FROM frameq.layer WHERE job = :ja AND name = 'l' \gset
SELECT id AS lay_m FROM frameq.layer WHERE job = :ja AND name = 'm' \gset
SELECT min(id) AS fwait FROM frameq.frame WHERE layer = :lay_l AND state = 'waiting' \gset

SELECT coalesce(max(id), 0) AS mark2 FROM frameq.action \gset
SET SESSION AUTHORIZATION t70_sub;
SELECT frameq.set_job(:ja, priority => 5, paused => true) \g /dev/null
SELECT frameq.set_job(:ja, paused => false, clear_caps => true) \g /dev/null
SELECT frameq.kill_frame(:frun, 'wrong camera') \g /dev/null
SELECT frameq.kill_frame(:fwait, 'not needed') \g /dev/null
SELECT frameq.kill_frame(:fwait, 'again') \g /dev/null
SELECT frameq.retry_frame(:fwait) \g /dev/null
SELECT frameq.eat_frame(:fwait) \g /dev/null
SELECT frameq.depend_job(:jb, :ja) \g /dev/null
SELECT frameq.drop_depends(:ja, 'm') \g /dev/null
SELECT frameq.drop_depends(:jb) \g /dev/null
SELECT frameq.comment_job(:ja, E'retake approved\tby sup\nsee ticket 12') \g /dev/null
SELECT frameq.unblock_host(:ja, 't70-h1') \g /dev/null
SELECT frameq.kill_job(:jb, 'superseded') \g /dev/null
RESET SESSION AUTHORIZATION;

SELECT results_eq(format($$SELECT action FROM fqtest.t70_since(%s)$$, :mark2),
	$$VALUES ('set_job'), ('set_job'), ('kill_frame'), ('kill_frame'), ('kill_frame'), ('retry_frame'),
			 ('eat_frame'), ('depend_job'), ('drop_depends'), ('drop_depends'), ('comment_job'),
			 ('unblock_host'), ('kill_job')$$,
	'thirteen job and frame calls: thirteen rows, in order (a call that changed nothing is recorded too)');
SELECT is((SELECT count(*)::int FROM fqtest.t70_since(:mark2) WHERE role = 't70_sub'), 13,
	'each names the submitter that acted');
SELECT results_eq(format($$SELECT job, layer, frame, host, detail FROM fqtest.t70_since(%s) WHERE action = 'set_job'$$, :mark2),
	format($$VALUES (%s::bigint, NULL::bigint, NULL::bigint, NULL::int, '{"changes": {"priority": 5, "paused": true}}'::jsonb),
					(%s, NULL, NULL, NULL, '{"changes": {"paused": false, "max_cores": null, "max_gpus": null}}'::jsonb)$$, :ja, :ja),
	'set_job: the job and the arguments given, as the changes they make (clear_caps: both caps to null), not those left out');
SELECT results_eq(format($$SELECT job, layer, frame, host, detail FROM fqtest.t70_since(%s) WHERE action = 'kill_frame'$$, :mark2),
	format($$VALUES (%s::bigint, %s::bigint, %s::bigint, %s::int, '{"reason": "wrong camera", "outcome": "kill order"}'::jsonb),
					(%s, %s, %s, NULL, '{"reason": "not needed", "outcome": "dead"}'::jsonb),
					(%s, %s, %s, NULL, '{"reason": "again", "outcome": "nothing"}'::jsonb)$$,
		   :ja, :lay_l, :frun, :h1, :ja, :lay_l, :fwait, :ja, :lay_l, :fwait),
	'kill_frame: job, layer, frame, the host of a running frame; the reason and what was done');
SELECT results_eq(format($$SELECT action, job, layer, frame, host, detail FROM fqtest.t70_since(%s) WHERE action IN ('retry_frame', 'eat_frame')$$, :mark2),
	format($$VALUES ('retry_frame', %s::bigint, %s::bigint, %s::bigint, NULL::int, '{"outcome": "waiting"}'::jsonb),
					('eat_frame', %s, %s, %s, NULL, '{"outcome": "eaten"}'::jsonb)$$,
		   :ja, :lay_l, :fwait, :ja, :lay_l, :fwait),
	'retry_frame and eat_frame: the frame''s ids and what was done');
SELECT results_eq(format($$SELECT job, layer, detail FROM fqtest.t70_since(%s) WHERE action IN ('depend_job', 'drop_depends')$$, :mark2),
	format($$VALUES (%s::bigint, NULL::bigint, '{"on_job": %s}'::jsonb),
					(%s, %s, '{"layer": "m", "freed": 2}'::jsonb),
					(%s, NULL, '{"layer": null, "freed": 2}'::jsonb)$$, :jb, :ja, :ja, :lay_m, :jb),
	'depend_job: the job and the job it waits for; drop_depends: the layer named and the tasks freed');
SELECT results_eq(format($$SELECT job, detail FROM fqtest.t70_since(%s) WHERE action = 'comment_job'$$, :mark2),
	format($$VALUES (%s::bigint, jsonb_build_object('text', E'retake approved\tby sup\nsee ticket 12'))$$, :ja),
	'comment_job: the job and the text as given (tab and newline kept)');
SELECT results_eq(format($$SELECT job, host, detail FROM fqtest.t70_since(%s) WHERE action = 'unblock_host'$$, :mark2),
	format($$VALUES (%s::bigint, %s::int, '{"host": "t70-h1", "was_blocked": false}'::jsonb)$$, :ja, :h1),
	'unblock_host: the job, the host, and whether it was blocked');
SELECT results_eq(format($$SELECT job, detail FROM fqtest.t70_since(%s) WHERE action = 'kill_job'$$, :mark2),
	format($$VALUES (%s::bigint, '{"reason": "superseded", "frames": 2}'::jsonb)$$, :jb),
	'kill_job: the job, the reason, and how many live tasks it killed');

-- ------------------------------------------------------ hosts, by an admin

SELECT coalesce(max(id), 0) AS mark3 FROM frameq.action \gset
SET SESSION AUTHORIZATION t70_admin;
SELECT frameq.set_host_state('t70-h2', 'repair') \g /dev/null
SELECT frameq.set_host_state('t70-h2', 'up') \g /dev/null
SELECT frameq.confirm_host_dead('t70-h1') \g /dev/null
SELECT frameq.retire_host('t70-h2') \g /dev/null
RESET SESSION AUTHORIZATION;
SELECT results_eq(format($$SELECT role, action, job, frame, host, detail FROM fqtest.t70_since(%s)$$, :mark3),
	format($$VALUES ('t70_admin', 'set_host_state', NULL::bigint, NULL::bigint, %s::int, '{"host": "t70-h2", "state": "repair", "was": "up"}'::jsonb),
					('t70_admin', 'set_host_state', NULL, NULL, %s, '{"host": "t70-h2", "state": "up", "was": "repair"}'::jsonb),
					('t70_admin', 'confirm_host_dead', NULL, NULL, %s, '{"host": "t70-h1", "released": 1}'::jsonb),
					('t70_admin', 'retire_host', NULL, NULL, %s, '{"host": "t70-h2"}'::jsonb)$$, :h2, :h2, :h1, :h2),
	'set_host_state, confirm_host_dead (with the procs it released) and retire_host: the host and the arguments');

-- ------------------------------------------------------ never a secret

SELECT is((SELECT count(*)::int FROM frameq.actions a, unnest(ARRAY[:'tok1', :'tok2', :'tok2b', :'secret']) s
			WHERE strpos(a.detail::text, s) > 0), 0,
	'no row holds a host token (registered or rotated) or a run secret');
SELECT is((SELECT count(*)::int FROM frameq.actions a
			WHERE a.detail::text LIKE '%ENVSECRET%' OR a.detail::text LIKE '%API_KEY%'
			   OR a.detail::text LIKE '%CMDSECRET%'), 0,
	'no row holds an env value or name, or a command, of a submitted spec');

-- ------------------------------------------------------ role is the login, not SET ROLE

SELECT coalesce(max(id), 0) AS mark4 FROM frameq.action \gset
SET LOCAL ROLE t70_admin;
SELECT frameq.comment_job(:ja, 'as a role') \g /dev/null
RESET ROLE;
SELECT results_eq(format($$SELECT role FROM fqtest.t70_since(%s)$$, :mark4), $$VALUES (session_user::text COLLATE "default")$$,
	'after SET ROLE the row names the login (session_user), not the role set');

-- ------------------------------------------------------ a call that fails records nothing

SELECT fqtest.t70_rows() AS n \gset
SELECT * FROM fqtest.refuses(format($$SELECT frameq.kill_frame(%s, 'x')$$, :fsucc), '55000', '%nothing to kill',
	'kill_frame on a succeeded frame fails');
SELECT * FROM fqtest.refuses(format($$SELECT frameq.eat_frame(%s)$$, :fsucc), '55000', '%nothing to eat',
	'eat_frame on a succeeded frame fails');
SELECT * FROM fqtest.refuses(format($$SELECT frameq.kill_frame(%s, '')$$, :fwait), '22023', NULL,
	'kill_frame with an empty reason fails');
SELECT * FROM fqtest.refuses(format($$SELECT frameq.set_job(%s, priority => 2000000)$$, :ja), '54000', NULL,
	'set_job with a priority past its bound fails');
SELECT * FROM fqtest.refuses($$SELECT frameq.submit('{"show": "t70show", "name": "x", "layers": []}')$$, '22023',
	'spec.layers must be a non-empty array', 'submit of a bad spec fails');
SELECT * FROM fqtest.refuses(format($$SELECT frameq.retry_frame(%s)$$, (SELECT min(id) FROM frameq.frame WHERE job = :jb)),
	'55000', '%killed job', 'retry_frame of a killed job''s frame fails');
SELECT * FROM fqtest.refuses(format($$SELECT frameq.depend_job(%s, %s)$$, :ja, :ja), '42P17', NULL,
	'depend_job on itself fails');
SELECT * FROM fqtest.refuses($$SELECT frameq.register_host('t70-h1', 't70.pool', 8, 1)$$, '42710', NULL,
	'register_host of a name in use fails');
SELECT * FROM fqtest.refuses($$SELECT frameq.create_show('t70show')$$, '42710', NULL, 'create_show of a name in use fails');
SELECT * FROM fqtest.refuses($$SELECT frameq.set_host_state('t70-h1', 'asleep')$$, '22023', NULL,
	'set_host_state to no state fails');
SELECT is(fqtest.t70_rows(), :n::bigint, 'none of the failed calls left a row');

/* the row is written in the call's transaction: a statement failing after the call takes it back */
SELECT id AS fw FROM frameq.frame WHERE job = :ja AND state = 'waiting' ORDER BY id LIMIT 1 \gset
SELECT is(fqtest.attempt(format($$SELECT frameq.kill_frame(%s, 'then fail'), 1 / 0$$, :fw)), '22012',
	'a kill_frame that succeeds in a statement that then fails');
SELECT is(fqtest.t70_rows(), :n::bigint, 'leaves no row');
SELECT is((SELECT state FROM frameq.frame WHERE id = :fw), 'waiting', 'and no kill');

-- ------------------------------------------------------ comment_job's validation

SELECT fqtest.t70_rows() AS n \gset
SELECT * FROM fqtest.refuses($$SELECT frameq.comment_job(NULL, 'x')$$, '22004', 'job must not be null',
	'comment_job: a null job is 22004');
SELECT * FROM fqtest.refuses(format($$SELECT frameq.comment_job(%s, NULL)$$, :ja), '22004', 'text must not be null',
	'comment_job: a null text is 22004');
SELECT * FROM fqtest.refuses(format($$SELECT frameq.comment_job(%s, '')$$, :ja), '22023', 'text must not be empty',
	'comment_job: an empty text is 22023');
SELECT * FROM fqtest.refuses(format($$SELECT frameq.comment_job(%s, E'  \t\n ')$$, :ja), '22023', 'text must not be empty',
	'comment_job: a text of blanks only is 22023');
SELECT * FROM fqtest.refuses(format($$SELECT frameq.comment_job(%s, repeat('x', 2001))$$, :ja), '54000',
	'text is too large: 2001 characters, at most 2000', 'comment_job: 2,001 characters is 54000');
SELECT * FROM fqtest.refuses(format($$SELECT frameq.comment_job(%s, E'bell \x07')$$, :ja), '22023',
	'text must not hold control characters%', 'comment_job: a control character is 22023');
SELECT * FROM fqtest.refuses($$SELECT frameq.comment_job(-1, 'x')$$, '42704', 'job -1 does not exist',
	'comment_job: a job that does not exist is 42704');
SELECT is(fqtest.t70_rows(), :n::bigint, 'no refused comment left a row');
SELECT lives_ok(format($$SELECT frameq.comment_job(%s, repeat('x', 2000))$$, :ja), 'comment_job takes 2,000 characters');
SELECT is((SELECT length(detail ->> 'text') FROM frameq.actions ORDER BY id DESC LIMIT 1), 2000, 'and keeps them all');

-- ------------------------------------------------------ who may comment, read, write

/* as a role, inside a subtransaction: 'ok', or the SQLSTATE and message it failed with */
CREATE FUNCTION fqtest.t70_as(who text, sql text) RETURNS text
LANGUAGE plpgsql AS $$
BEGIN
	EXECUTE format('SET LOCAL ROLE %I', who);
	EXECUTE sql;
	RESET ROLE;
	RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
	RETURN SQLSTATE || ': ' || SQLERRM;
END
$$;
CREATE ROLE t70_sub2 IN ROLE frameq_submit;
SELECT fqtest.t70_rows() AS n \gset
SELECT fqtest.state() AS before \gset
SELECT alike(fqtest.t70_as('t70_other', format($$SELECT frameq.comment_job(%s, 'x')$$, :ja)), '42501: %',
	'a role with no frameq role cannot comment');
SELECT is(fqtest.t70_as('t70_sub2', format($$SELECT frameq.comment_job(%s, 'x')$$, :ja)),
	'42501: permission denied for show "t70show"', 'a submitter without the job''s show cannot comment on it');
SELECT alike(fqtest.t70_as('t70_sub', $$SELECT * FROM frameq.actions$$), '42501: %',
	'a submitter cannot read the trail');
SELECT alike(fqtest.t70_as('t70_sub', $$INSERT INTO frameq.action (action) VALUES ('forged')$$), '42501: %',
	'nor write to its table');
SELECT alike(fqtest.t70_as('t70_sub', $$SELECT frameq._audit('forged', NULL, NULL, NULL, NULL, NULL)$$), '42501: %',
	'nor call _audit');
SELECT is(fqtest.t70_as('t70_reader', $$SELECT count(*) FROM frameq.actions$$), 'ok', 'frameq_reader reads the view');
SELECT alike(fqtest.t70_as('t70_reader', $$SELECT * FROM frameq.action$$), '42501: %', 'but not the table');
SELECT is(fqtest.t70_as('t70_admin', $$SELECT count(*) FROM frameq.actions$$), 'ok',
	'frameq_admin reads the view (it is a reader)');
SELECT alike(fqtest.t70_as('t70_admin', $$UPDATE frameq.action SET role = 'someone'$$), '42501: %',
	'an admin cannot update the table');
SELECT alike(fqtest.t70_as('t70_admin', $$DELETE FROM frameq.action$$), '42501: %', 'nor delete from it');
SELECT alike(fqtest.t70_as('t70_admin', $$TRUNCATE frameq.action$$), '42501: %', 'nor truncate it');
SELECT alike(fqtest.t70_as('t70_admin', $$INSERT INTO frameq.action (action) VALUES ('forged')$$), '42501: %',
	'nor insert into it');
SELECT is(fqtest.t70_rows(), :n::bigint, 'none of these left or removed a row');
SELECT is(fqtest.state(), :'before', 'or changed anything');
SELECT fqtest.t70_rows() AS n \gset
SELECT fqtest.throws_like($$UPDATE frameq.action SET role = 'someone'$$, '42501',
	'the audit trail is append-only%', 'even the owner cannot update a row');
SELECT is(fqtest.t70_rows(), :n::bigint, 'and nothing was changed');

-- ------------------------------------------------------ _audit's own guards

SELECT coalesce(max(id), 0) AS mark5 FROM frameq.action \gset
SELECT frameq._audit('t_scrub', 1, NULL, NULL, NULL, jsonb_build_object(
	'token', 'T', 'host_token', 'T', 'run_secret', 'S', 'Password', 'P', 'keep', 'k',
	'changes', jsonb_build_object('env', jsonb_build_object('B', 'vb', 'A', 'va'), 'memory', '8G',
								  'command', repeat('c', 2001)),
	'layers', jsonb_build_array(jsonb_build_object('env', jsonb_build_object('C', 'vc'), 'secret', 'S')))) \g /dev/null
SELECT results_eq(format($$SELECT detail FROM fqtest.t70_since(%s)$$, :mark5),
	format($$VALUES (jsonb_build_object('keep', 'k',
		'changes', jsonb_build_object('env', jsonb_build_array('A', 'B'), 'memory', '8G',
									  'command', repeat('c', 2000) || '... (2001 characters)'),
		'layers', jsonb_build_array(jsonb_build_object('env', jsonb_build_array('C')))))$$),
	'_audit drops keys naming a token, a secret or a password, keeps only the names of env variables, clips long strings, at any depth');
SELECT fqtest.throws_like($$SELECT frameq._audit('t_big', NULL, NULL, NULL, NULL,
		(SELECT jsonb_object_agg(i::text, repeat('x', 1000)) FROM generate_series(1, 70) i))$$, '54000',
	'audit detail is too large%', '_audit refuses a detail past 64 kB');
SELECT fqtest.throws_like($$SELECT frameq._audit('t_arr', NULL, NULL, NULL, NULL, '[1]')$$, '22023', NULL,
	'_audit refuses a detail that is not an object');
SELECT fqtest.throws_like($$SELECT frameq._audit('Bad-Name', NULL, NULL, NULL, NULL, NULL)$$, '23514', NULL,
	'_audit refuses an action name that is not lower case and _');

-- ------------------------------------------------------ who writes the trail, and who never does

/*
 * Every entry point an admin or a submitter may call, and no agent or
 * reader, is an action: its body calls _audit (or _audit_frame).  A new
 * operator function that forgets to fails here, by name.
 */
SELECT is(ARRAY(SELECT p.proname::text FROM pg_proc p
				 WHERE p.pronamespace = 'frameq'::regnamespace AND p.prosecdef
				   AND (has_function_privilege('frameq_admin', p.oid, 'EXECUTE')
						OR has_function_privilege('frameq_submit', p.oid, 'EXECUTE'))
				   AND NOT has_function_privilege('frameq_reader', p.oid, 'EXECUTE')
				   AND NOT has_function_privilege('frameq_agent', p.oid, 'EXECUTE')
				   AND p.prosrc !~ 'frameq\._audit(_frame)?\('
				   /* it hands its arguments to set_job(job, changes), which records them once */
				   AND p.oid <> 'frameq.set_job(bigint, int, numeric, int, bool, bool)'::regprocedure
				 ORDER BY 1), '{}'::text[],
	'every operator and administration entry point writes the trail');
/* and only those: no internal function an agent's call or the worker may run, no trigger */
SELECT is(ARRAY(SELECT p.proname::text FROM pg_proc p
				 WHERE p.pronamespace = 'frameq'::regnamespace
				   AND p.prosrc ~ 'frameq\._audit(_frame)?\('
				   AND p.proname <> '_audit_frame'
				   AND NOT (p.prosecdef AND (has_function_privilege('frameq_admin', p.oid, 'EXECUTE')
											 OR has_function_privilege('frameq_submit', p.oid, 'EXECUTE'))
							AND NOT has_function_privilege('frameq_agent', p.oid, 'EXECUTE'))
				 ORDER BY 1), '{}'::text[],
	'no function but those entry points calls _audit: nothing on an agent''s path, no worker step');
SELECT is(ARRAY(SELECT t.tgname::text FROM pg_trigger t JOIN pg_proc p ON p.oid = t.tgfoid
				 WHERE p.pronamespace = 'frameq'::regnamespace AND p.prosrc ~ '_audit'
				 ORDER BY 1), '{}'::text[],
	'no trigger writes the trail');

SELECT * FROM finish();
ROLLBACK;
