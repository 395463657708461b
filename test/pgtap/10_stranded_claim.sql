/*
 * Classic failure 1: the stranded claim.  reserve() charges the caps
 * ledger, moves the frame to running, inserts the proc, takes the host's
 * capacity and opens the run record.  If any later step fails, nothing of
 * the earlier ones may remain: no frame left running without a proc, no
 * attempt counted, no capacity or ledger charge held.  Each failure is
 * injected with a trigger created (and dropped) inside this transaction.
 */
BEGIN;
\ir include/helpers.psql

SELECT plan(23);

SELECT * FROM fqtest.farm('t10') \gset
SELECT frameq.submit($${"show": "t10show", "name": "stranded", "max_cores": 6,
	"layers": [{"name": "l", "command": "c", "range": "1-3"}]}$$) AS job \gset

CREATE FUNCTION pg_temp.refuse() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	RAISE EXCEPTION 'refused by the test on %', TG_TABLE_NAME USING ERRCODE = 'TQ001';
END
$$;
/* refuses only the second frame's run record: one booking has succeeded by then */
CREATE FUNCTION pg_temp.refuse_second() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF (SELECT number FROM frameq.frame WHERE id = NEW.frame) = 2 THEN
		RAISE EXCEPTION 'refused by the test on frame 2' USING ERRCODE = 'TQ001';
	END IF;
	RETURN NEW;
END
$$;

SELECT fqtest.state() AS before \gset

-- ----------------------------------- the run record cannot be written

CREATE TRIGGER t10_refuse BEFORE INSERT ON frameq.run FOR EACH ROW EXECUTE FUNCTION pg_temp.refuse();
SELECT throws_ok(format('SELECT * FROM frameq.reserve(%L, %L, %s)', 't10-h1', :'tok1', :epoch1),
				 'TQ001', 'refused by the test on run',
				 'reserve fails when the run record cannot be written');
SELECT results_eq(
	format($$SELECT count(*)::int, count(*) FILTER (WHERE state = 'waiting')::int, sum(attempts)::int, sum(version)::int
			  FROM frameq.frame WHERE job = %s$$, :job),
	'VALUES (3, 3, 0, 0)', 'every frame is still waiting, with no attempt counted');
SELECT is((SELECT count(*)::int FROM frameq.proc WHERE job = :job), 0, 'no proc exists');
SELECT is((SELECT count(*)::int FROM frameq.run WHERE job = :job), 0, 'no run record exists');
SELECT is_empty(format($$SELECT * FROM frameq.ledger() WHERE (kind = 'job' AND id = %s)
						 OR (kind = 'subscription' AND id = %s)$$, :job, :show),
				'the ledger holds nothing for the job or its subscription');
SELECT results_eq(format('SELECT idle_cc, idle_memory FROM frameq.host WHERE id = %s', :host1),
				  $$VALUES (800, 17179869184::bigint)$$, 'the host''s idle capacity is unchanged');
SELECT is(fqtest.state(), :'before', 'nothing at all changed');
DROP TRIGGER t10_refuse ON frameq.run;

-- ------------------- the second booking fails after the first succeeded

CREATE TRIGGER t10_refuse_second BEFORE INSERT ON frameq.run FOR EACH ROW EXECUTE FUNCTION pg_temp.refuse_second();
SELECT throws_ok(format('SELECT * FROM frameq.reserve(%L, %L, %s)', 't10-h1', :'tok1', :epoch1),
				 'TQ001', 'refused by the test on frame 2',
				 'reserve fails when the second booking''s run record cannot be written');
SELECT is((SELECT count(*)::int FROM frameq.proc WHERE job = :job), 0,
		  'the first booking of the failed reserve is gone too: no proc exists');
SELECT is((SELECT sum(attempts)::int FROM frameq.frame WHERE job = :job), 0, 'no attempt is counted');
SELECT is(fqtest.state(), :'before', 'nothing at all changed after the half-done reserve');
DROP TRIGGER t10_refuse_second ON frameq.run;

-- ------------------------------------- the host cannot be updated

CREATE TRIGGER t10_refuse BEFORE UPDATE ON frameq.host FOR EACH ROW EXECUTE FUNCTION pg_temp.refuse();
SELECT throws_ok(format('SELECT * FROM frameq.reserve(%L, %L, %s)', 't10-h1', :'tok1', :epoch1),
				 'TQ001', 'refused by the test on host',
				 'reserve fails when the host''s capacity cannot be taken');
SELECT is(fqtest.state(), :'before', 'nothing at all changed after the failed capacity update');
DROP TRIGGER t10_refuse ON frameq.host;

-- ------------------------------------- the proc cannot be inserted

CREATE TRIGGER t10_refuse BEFORE INSERT ON frameq.proc FOR EACH ROW EXECUTE FUNCTION pg_temp.refuse();
SELECT throws_ok(format('SELECT * FROM frameq.reserve(%L, %L, %s)', 't10-h1', :'tok1', :epoch1),
				 'TQ001', 'refused by the test on proc',
				 'reserve fails when the proc cannot be inserted');
SELECT is(fqtest.state(), :'before', 'nothing at all changed after the failed proc insert');
DROP TRIGGER t10_refuse ON frameq.proc;

-- ------------------------- the frame cannot be moved to running

CREATE TRIGGER t10_refuse BEFORE UPDATE ON frameq.frame FOR EACH ROW EXECUTE FUNCTION pg_temp.refuse();
SELECT throws_ok(format('SELECT * FROM frameq.reserve(%L, %L, %s)', 't10-h1', :'tok1', :epoch1),
				 'TQ001', 'refused by the test on frame',
				 'reserve fails when the frame cannot be moved to running (after its ledger charge)');
SELECT is(fqtest.state(), :'before', 'nothing at all changed after the failed frame update');
DROP TRIGGER t10_refuse ON frameq.frame;

-- --------------------------------------- and then everything works

SELECT is((SELECT count(*)::int FROM frameq.reserve('t10-h1', :'tok1', :epoch1)), 3,
		  'with the fault gone, reserve books all three frames');
SELECT results_eq(
	format($$SELECT count(*) FILTER (WHERE state = 'running')::int, sum(attempts)::int FROM frameq.frame WHERE job = %s$$, :job),
	'VALUES (3, 3)', 'each frame is running on its first attempt: the failed reserves counted none');
SELECT results_eq(
	format($$SELECT used_cc, running FROM frameq.ledger() WHERE kind = 'job' AND id = %s$$, :job),
	'VALUES (300, 3)', 'the ledger charges the job exactly the three procs: the failed reserves left nothing behind');
SELECT is((SELECT idle_cc FROM frameq.host WHERE id = :host1), 500, 'the host has exactly 5 idle cores');
SELECT is((SELECT count(*)::int FROM frameq.run WHERE job = :job), 3, 'there are exactly three run records');
SELECT is_empty('SELECT * FROM frameq.check()', 'check() finds nothing wrong');

SELECT * FROM finish();
ROLLBACK;
