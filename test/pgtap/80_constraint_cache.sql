/*
 * frameq keeps its tables' CHECK constraints and row triggers' WHEN
 * conditions planned for the backend's life (src/exprcache.c); each is
 * still checked on every row, and always as it is defined now.  In one
 * session, after the booking path has written frame, proc, run and host:
 * their constraints refuse bad rows (23514, naming the constraint) again
 * and again; a constraint added, dropped, or made to mean something else by
 * replacing the function it calls (one the planner inlines) is enforced as
 * it now stands at the session's next statement; a trigger recreated with
 * another WHEN condition fires on the new one only.
 */
BEGIN;
\ir include/helpers.psql

SELECT plan(16);

SELECT * FROM fqtest.farm('t78', cores => '{8}') \gset
SELECT frameq.submit($${"show": "t78show", "name": "j",
	"layers": [{"name": "l", "command": "r #FRAME#", "range": "1-10"}]}$$) AS job \gset

-- the booking path writes all four tables, twice: their constraints are cached
SELECT is((SELECT count(*)::int FROM frameq.reserve('t78-h1', :'tok1', :epoch1, 1)), 1,
		  'a first booking');
SELECT proc FROM frameq.reserve('t78-h1', :'tok1', :epoch1, 1) \gset
SELECT ok(:proc > 0, 'and a second');

-- ------------------------------------------ the cached constraints still refuse

SELECT fqtest.throws_like(format('UPDATE frameq.proc SET progress = 101 WHERE id = %s', :proc),
	'23514', '%"proc_progress_check"%', 'a proc''s progress above 100 is refused');
SELECT fqtest.throws_like(format('UPDATE frameq.proc SET progress = 101 WHERE id = %s', :proc),
	'23514', '%"proc_progress_check"%', 'and refused again');
SELECT fqtest.throws_like(format('UPDATE frameq.frame SET attempts = -1 WHERE job = %s', :job),
	'23514', '%"frame_attempts_check"%', 'negative attempts of a frame are refused');
SELECT fqtest.throws_like(format('UPDATE frameq.host SET idle_cc = cores_cc + 1 WHERE id = %s', :host1),
	'23514', '%"host_idle_within_capacity"%', 'more idle cores than a host has are refused');
SELECT fqtest.throws_like(format('UPDATE frameq.run SET log = repeat(''x'', 1025) WHERE proc = %s', :proc),
	'23514', '%"run_log_check"%', 'a run log over 1,024 characters is refused');

-- --------------------------------------- a constraint added, then dropped

ALTER TABLE frameq.host ADD CONSTRAINT t78_epoch CHECK (epoch < 1000);
SELECT fqtest.throws_like(format('UPDATE frameq.host SET epoch = 5000 WHERE id = %s', :host1),
	'23514', '%"t78_epoch"%', 'a constraint added in the session is enforced at once');
ALTER TABLE frameq.host DROP CONSTRAINT t78_epoch;
SELECT lives_ok(format('UPDATE frameq.host SET epoch = 5000 WHERE id = %s', :host1),
	'and no longer once it is dropped');

-- ----------------------- a constraint whose function (inlined) is replaced

/* no SET clause, so that the planner inlines it: the cached plan holds its body */
CREATE FUNCTION fqtest.t78_small(v bigint) RETURNS bool
	LANGUAGE sql IMMUTABLE AS 'SELECT v < 1000000';
ALTER TABLE frameq.host ADD CONSTRAINT t78_small CHECK (fqtest.t78_small(epoch));
SELECT lives_ok(format('UPDATE frameq.host SET epoch = 5001 WHERE id = %s', :host1),
	'a constraint calling an inlined function lets a row through');
SELECT fqtest.throws_like(format('UPDATE frameq.host SET epoch = 2000000 WHERE id = %s', :host1),
	'23514', '%"t78_small"%', 'and refuses what the function refuses');
CREATE OR REPLACE FUNCTION fqtest.t78_small(v bigint) RETURNS bool
	LANGUAGE sql IMMUTABLE AS 'SELECT v < 10';
SELECT fqtest.throws_like(format('UPDATE frameq.host SET epoch = 5002 WHERE id = %s', :host1),
	'23514', '%"t78_small"%', 'the function replaced: the constraint refuses what it now refuses');
ALTER TABLE frameq.host DROP CONSTRAINT t78_small;
UPDATE frameq.host SET epoch = :epoch1 WHERE id = :host1;

-- -------------------------------- a WHEN condition, and the trigger recreated

CREATE FUNCTION fqtest.t78_refuse() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	RAISE EXCEPTION 't78 trigger fired' USING ERRCODE = 'P0001';
END
$$;
CREATE TRIGGER t78_when BEFORE UPDATE ON frameq.host
	FOR EACH ROW WHEN (NEW.down_reason = 'operator') EXECUTE FUNCTION fqtest.t78_refuse();
SELECT fqtest.throws_like(format('UPDATE frameq.host SET down_reason = ''operator'' WHERE id = %s', :host1),
	'P0001', 't78 trigger fired', 'a WHEN condition that holds fires its trigger');
SELECT lives_ok(format('UPDATE frameq.host SET down_reason = ''lease_lost'' WHERE id = %s', :host1),
	'one that does not hold does not');
DROP TRIGGER t78_when ON frameq.host;
CREATE TRIGGER t78_when BEFORE UPDATE ON frameq.host
	FOR EACH ROW WHEN (NEW.down_reason = 'lease_lost') EXECUTE FUNCTION fqtest.t78_refuse();
SELECT fqtest.throws_like(format('UPDATE frameq.host SET down_reason = ''lease_lost'' WHERE id = %s', :host1),
	'P0001', 't78 trigger fired', 'the trigger recreated fires on its new condition');
SELECT lives_ok(format('UPDATE frameq.host SET down_reason = ''operator'' WHERE id = %s', :host1),
	'and no longer on the old one');
DROP TRIGGER t78_when ON frameq.host;

SELECT * FROM finish();
ROLLBACK;
