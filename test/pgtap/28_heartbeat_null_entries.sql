/*
 * A heartbeat whose running list holds a NULL (an agent bug: a proc it
 * lost track of).  A NULL is no proc: the heartbeat is refused with 22004
 * and changes nothing; the kill order it did not list stays held.
 *
 * Before the fix heartbeat() took the NULL as one more listed id: the
 * zombie scan returned the NULL itself (kill list {P, NULL}, an answer
 * the agent cannot act on).
 */
BEGIN;
\ir include/helpers.psql

SELECT plan(4);

SELECT * FROM fqtest.farm('t28', cores => '{4}', memory => '{8589934592}') \gset
SELECT frameq.submit($${"show": "t28show", "name": "t28-job",
	"layers": [{"name": "l", "command": "c", "range": "1-2"}]}$$) AS job \gset
SELECT proc AS p1, frame AS f1 FROM frameq.reserve('t28-h1', :'tok1', :epoch1, 1) \gset
SELECT proc AS p2, frame AS f2 FROM frameq.reserve('t28-h1', :'tok1', :epoch1, 1) \gset
SELECT frameq.kill_frame(:f1, 'bad render') \g /dev/null

SELECT fqtest.state() AS before \gset
SELECT fqtest.attempt(format($$CREATE TEMP TABLE hb_null ON COMMIT DROP AS
							   SELECT * FROM frameq.heartbeat('t28-h1', %L, %s, ARRAY[%s, NULL]::bigint[])$$,
							 :'tok1', :epoch1, :p2)) AS outcome \gset

SELECT is(:'outcome'::text, '22004', 'a heartbeat listing a null is refused with 22004');
SELECT is(fqtest.state(), :'before', 'the refused heartbeat changed nothing');
SELECT is((SELECT state FROM frameq.proc WHERE id = :p1), 'killing', 'the kill order is still held');
SELECT is_empty('SELECT * FROM frameq.check()', 'check() is clean at the end');

SELECT * FROM finish();
ROLLBACK;
