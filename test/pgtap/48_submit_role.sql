/*
 * frameq_submit (doc/security.md): a role granted a show with grant_show()
 * submits and controls that show's jobs and nothing else: not another
 * show's jobs, not hosts, not caps.  Grants follow role membership, and
 * revoke_show() takes them back.  Every refusal is 42501 and changes
 * nothing.
 */
BEGIN;
\ir include/helpers.psql

SELECT plan(38);

SELECT frameq.create_allocation('t48.pool') \g /dev/null
SELECT frameq.create_show('t48a') \g /dev/null
SELECT frameq.create_show('t48b') \g /dev/null
SELECT frameq.set_subscription('t48a', 't48.pool', 10, 10) \g /dev/null
SELECT frameq.set_subscription('t48b', 't48.pool', 10, 10) \g /dev/null
SELECT frameq.submit('{"show": "t48b", "name": "theirs",
	"layers": [{"name": "l", "command": "c", "range": "1-3"}]}') AS theirs \gset
SELECT min(id) AS their_frame FROM frameq.frame WHERE job = :theirs \gset

CREATE ROLE t48_artists NOLOGIN IN ROLE frameq_submit;
CREATE ROLE t48_alice LOGIN IN ROLE t48_artists;
CREATE ROLE t48_bob LOGIN IN ROLE frameq_submit;
SELECT lives_ok($$SELECT frameq.grant_show('t48a', 't48_artists')$$, 'an admin grants show t48a to a group role');
SELECT lives_ok($$SELECT frameq.grant_show('t48a', 't48_artists')$$, 'granting it again changes nothing');
SELECT results_eq($$SELECT show, role FROM frameq.show_grants WHERE show LIKE 't48%'$$,
	$$VALUES ('t48a', 't48_artists'::text)$$, 'show_grants lists the grant');
SELECT * FROM fqtest.refuses($$SELECT frameq.grant_show('t48a', 't48_nobody')$$, '42704',
	'role "t48_nobody" does not exist', 'granting to a role that does not exist is refused');

SET ROLE t48_alice;
SELECT frameq.submit('{"show": "t48a", "name": "mine",
	"layers": [{"name": "l", "command": "c", "range": "1-3"}]}') AS mine \gset
RESET ROLE;
SELECT is((SELECT s.name FROM frameq.job j JOIN frameq.show s ON s.id = j.show WHERE j.id = :mine),
	't48a', 'a member of the granted group submits to show t48a');
SELECT min(id) AS my_frame FROM frameq.frame WHERE job = :mine \gset

/* fqtest.refuses runs as whoever calls it: run each refusal as alice */
CREATE FUNCTION fqtest.as_alice(sql text) RETURNS text
LANGUAGE plpgsql AS $$
BEGIN
	SET LOCAL ROLE t48_alice;
	EXECUTE sql;
	RESET ROLE;
	RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
	RETURN SQLSTATE || ': ' || SQLERRM;
END
$$;
GRANT EXECUTE ON FUNCTION fqtest.as_alice(text) TO PUBLIC;
GRANT USAGE ON SCHEMA fqtest TO PUBLIC;

SELECT fqtest.state() AS before \gset
SELECT is(fqtest.as_alice($$SELECT frameq.submit('{"show": "t48b", "name": "x",
	"layers": [{"name": "l", "command": "c", "range": "1"}]}')$$),
	'42501: permission denied for show "t48b"', 'she cannot submit to show t48b');
SELECT is(fqtest.as_alice(format('SELECT frameq.set_job(%s, priority => 99)', :theirs)),
	'42501: permission denied for show "t48b"', 'she cannot change a job of show t48b');
SELECT is(fqtest.as_alice(format('SELECT frameq.kill_job(%s, %L)', :theirs, 'mine now')),
	'42501: permission denied for show "t48b"', 'she cannot kill a job of show t48b');
SELECT is(fqtest.as_alice(format('SELECT frameq.kill_frame(%s, %L)', :their_frame, 'x')),
	'42501: permission denied for show "t48b"', 'she cannot kill a frame of show t48b');
SELECT is(fqtest.as_alice(format('SELECT frameq.retry_frame(%s)', :their_frame)),
	'42501: permission denied for show "t48b"', 'she cannot retry a frame of show t48b');
SELECT is(fqtest.as_alice(format('SELECT frameq.eat_frame(%s)', :their_frame)),
	'42501: permission denied for show "t48b"', 'she cannot eat a frame of show t48b');
SELECT is(left(fqtest.as_alice($$SELECT frameq.create_show('t48c')$$), 5), '42501', 'she cannot create a show');
SELECT is(left(fqtest.as_alice($$SELECT frameq.set_subscription('t48a', 't48.pool', 100, 100)$$), 5), '42501',
	'she cannot raise her show''s subscription');
SELECT is(left(fqtest.as_alice($$SELECT frameq.register_host('t48-h', 't48.pool', 1, 1)$$), 5), '42501',
	'she cannot register a host');
SELECT is(left(fqtest.as_alice($$SELECT frameq.set_host_state('t48-h', 'down')$$), 5), '42501',
	'she cannot set a host''s state');
SELECT is(left(fqtest.as_alice($$SELECT frameq.grant_show('t48b', 't48_alice')$$), 5), '42501',
	'she cannot grant herself another show');
SELECT is(left(fqtest.as_alice($$SELECT frameq.create_limit('t48.lic', 1)$$), 5), '42501',
	'she cannot create a limit');
SELECT is(left(fqtest.as_alice($$INSERT INTO frameq.show_grant VALUES (2, 1)$$), 5), '42501',
	'she cannot write the grants table');
SELECT is(left(fqtest.as_alice($$SELECT frameq._authorize_show(2)$$), 5), '42501',
	'she cannot call frameq''s internal functions');
SELECT is(fqtest.state(), :'before', 'none of her refused calls changed anything');

/* her own show: everything a submitter needs */
SELECT is(fqtest.as_alice(format('SELECT frameq.set_job(%s, priority => 5, max_cores => 2)', :mine)), 'ok',
	'she sets priority and caps of her own job');
SELECT is((SELECT (priority, max_cc) FROM frameq.job WHERE id = :mine), (5, 200), 'and they are set');
SELECT is(fqtest.as_alice(format('SELECT frameq.kill_frame(%s, %L)', :my_frame, 'bad frame')), 'ok',
	'she kills a frame of her job');
SELECT is(fqtest.as_alice(format('SELECT frameq.retry_frame(%s)', :my_frame)), 'ok', 'she retries it');
SELECT is(fqtest.as_alice(format('SELECT frameq.eat_frame(%s)', :my_frame)), 'ok', 'she eats it');
SELECT is((SELECT state FROM frameq.frame WHERE id = :my_frame), 'eaten', 'the frame is eaten');
SELECT is(fqtest.as_alice(format('SELECT frameq.kill_job(%s, %L)', :mine, 'done with it')), 'ok',
	'she kills her job');
SELECT is((SELECT state FROM frameq.job WHERE id = :mine), 'killed', 'the job is killed');

/* a submitter with no grant has no show at all */
SET ROLE t48_bob;
SELECT throws_ok($$SELECT frameq.submit('{"show": "t48a", "name": "x",
	"layers": [{"name": "l", "command": "c", "range": "1"}]}')$$, '42501',
	'permission denied for show "t48a"', 'a frameq_submit member with no grant cannot submit');
RESET ROLE;

/* revoked: the group loses the show */
SELECT lives_ok($$SELECT frameq.revoke_show('t48a', 't48_artists')$$, 'an admin revokes the grant');
SELECT is(fqtest.as_alice($$SELECT frameq.submit('{"show": "t48a", "name": "x",
	"layers": [{"name": "l", "command": "c", "range": "1"}]}')$$),
	'42501: permission denied for show "t48a"', 'after the revoke she cannot submit to t48a either');

/* SET ROLE counts, not the login: an admin acting as alice is alice */
CREATE ROLE t48_ops LOGIN IN ROLE frameq_admin;
GRANT t48_alice TO t48_ops;
SET ROLE t48_ops;
SELECT lives_ok($$SELECT frameq.submit('{"show": "t48b", "name": "ops",
	"layers": [{"name": "l", "command": "c", "range": "1"}]}')$$, 'a member of frameq_admin submits to any show');
SET ROLE t48_alice;
SELECT throws_ok($$SELECT frameq.submit('{"show": "t48b", "name": "x",
	"layers": [{"name": "l", "command": "c", "range": "1"}]}')$$, '42501', NULL,
	'the same session after SET ROLE alice is held to her grants');
RESET ROLE;

/* a frameq_submit member is no reader, agent or admin */
SELECT ok(NOT has_function_privilege('t48_bob', 'frameq.check()', 'EXECUTE'), 'frameq_submit does not get check()');
SELECT ok(NOT has_function_privilege('t48_bob', 'frameq.reserve(text,text,bigint,integer)', 'EXECUTE'),
	'frameq_submit does not get reserve()');
SELECT ok(NOT has_function_privilege('t48_bob', 'frameq.confirm_host_dead(text)', 'EXECUTE'),
	'frameq_submit does not get confirm_host_dead()');

SELECT is_empty('SELECT * FROM frameq.check()', 'check() is clean');

SELECT * FROM finish();
ROLLBACK;
