/*
 * frameq keeps the planned predicates of its tables' partial indexes for
 * the backend's life (src/exprcache.c), and opens the indexes of a table
 * an INSERT or UPDATE writes when the statement starts.  Each row written
 * must still get exactly the index entries its predicates ask for: after
 * bookings (claims update frames, procs are inserted), a kill order (a proc
 * made killing) and an index of a frameq table dropped and made again
 * under the same name with the opposite predicate, every partial index
 * holds an entry for each row of this test that meets its predicate
 * (amcheck's heapallindexed) and none for a row that does not (the index's
 * leaf items, read with pageinspect, against the rows' ctids: the updates
 * here are not HOT, so each entry points at its row's live version).
 */
BEGIN;
\ir include/helpers.psql
CREATE EXTENSION IF NOT EXISTS amcheck;
CREATE EXTENSION IF NOT EXISTS pageinspect;

SELECT plan(10);

/*
 * The partial indexes of a table whose entries disagree with their
 * predicates for the rows "rows" selects (fqtest.index_wrong), each as
 * "index: n extra, m missing; "; none: ''.
 */
CREATE FUNCTION fqtest.t83_wrong(tab regclass, rows text) RETURNS text
LANGUAGE sql AS $$
SELECT coalesce(string_agg(format('%s: %s; ', w.idx, w.wrong), '' ORDER BY w.idx::text), '')
  FROM (SELECT i.indexrelid::regclass AS idx, fqtest.index_wrong(i.indexrelid, rows) AS wrong
		  FROM pg_index i WHERE i.indrelid = tab AND i.indpred IS NOT NULL) w
 WHERE w.wrong <> '0 extra, 0 missing'
$$;

SELECT * FROM fqtest.farm('t83', cores => '{8}') \gset
SELECT frameq.submit($${"show": "t83show", "name": "j",
	"layers": [{"name": "l", "command": "r #FRAME#", "range": "1-10", "timeout": "1h"}]}$$) AS job \gset

-- bookings one at a time and four at once: each statement after the first
-- uses the predicates kept from it
SELECT is((SELECT count(*)::int FROM frameq.reserve('t83-h1', :'tok1', :epoch1, 1)), 1, 'a first booking');
SELECT is((SELECT count(*)::int FROM frameq.reserve('t83-h1', :'tok1', :epoch1, 1)), 1, 'a second');
SELECT is((SELECT count(*)::int FROM frameq.reserve('t83-h1', :'tok1', :epoch1, 4)), 4, 'four at once');

SELECT is(fqtest.t83_wrong('frameq.frame', format('frame.job = %s', :job)), '',
		  'every partial index of frame holds exactly the frames that meet its predicate');
SELECT is(fqtest.t83_wrong('frameq.proc', format('proc.job = %s', :job)), '',
		  'and of proc: the six running procs with their deadlines');

-- a kill order makes a proc killing: it enters proc_kill_orders, leaves proc_timeout_due
SELECT frameq.kill_frame((SELECT f.id FROM frameq.frame f WHERE f.job = :job AND f.number = 1),
						 'index test') \g /dev/null
SELECT is(fqtest.t83_wrong('frameq.proc', format('proc.job = %s', :job)), '',
		  'after a kill order too');

-- an index of a frameq table, made again with the opposite predicate: the
-- host's room is 800 cc less 600 booked; each booking below takes 100 more
-- (an update of idle_cc, now an indexed column: not HOT)
CREATE INDEX t83_roomy ON frameq.host (id) WHERE idle_cc >= 100;
SELECT is((SELECT count(*)::int FROM frameq.reserve('t83-h1', :'tok1', :epoch1, 1)), 1,
		  'a booking leaves the host 100 cc');
SELECT is(fqtest.t83_wrong('frameq.host', format('host.id = %s', :host1)), '',
		  'and the index whose predicate it meets holds it');
DROP INDEX frameq.t83_roomy;
CREATE INDEX t83_roomy ON frameq.host (id) WHERE idle_cc < 100;
SELECT is((SELECT count(*)::int FROM frameq.reserve('t83-h1', :'tok1', :epoch1, 1)), 1,
		  'a booking leaves it none');
SELECT is(fqtest.t83_wrong('frameq.host', format('host.id = %s', :host1)), '',
		  'and the index made again holds it by its new predicate');

SELECT * FROM finish();
ROLLBACK;
