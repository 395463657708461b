/*
 * The caps ledger lives in shared memory but follows the transaction: a
 * booking's charge is applied at once and undone if its (sub)transaction
 * aborts; a release is deferred to commit and forgotten if its
 * (sub)transaction aborts.  Here, within one transaction, with savepoints.
 * Whole transactions (commit, rollback, PREPARE) are in
 * 13_prepare_and_commit.sql.
 */
BEGIN;
\ir include/helpers.psql

SELECT plan(19);

SELECT * FROM fqtest.farm('t12', gpus => 2) \gset
SELECT frameq.create_limit('t12.lic', 10) AS lim \gset
SELECT frameq.create_folder('t12show', 'f', 100) AS folder \gset
SELECT frameq.submit($${"show": "t12show", "folder": "f", "name": "sp", "max_cores": 100,
	"layers": [{"name": "l", "command": "c", "range": "1-8", "gpus": 0, "limits": ["t12.lic"]}]}$$) AS job \gset

/* the ledger rows of this file's entities, as one text value */
\set my_ledger 'SELECT coalesce(string_agg(format($f$%s %s/%s %s cc %s gpus %s running$f$, kind, id, id2, used_cc, used_gpus, running), $f$; $f$ ORDER BY kind), $f$empty$f$) FROM frameq.ledger() WHERE (kind = $f$job$f$ AND id = ' :job ') OR (kind = $f$folder$f$ AND id = ' :folder ') OR (kind = $f$limit$f$ AND id = ' :lim ') OR (kind = $f$subscription$f$ AND id = ' :show ' AND id2 = ' :alloc ')'

SELECT fqtest.state() AS before \gset
SELECT is((:my_ledger), 'empty', 'the ledger starts with nothing for this file''s job, folder, limit and subscription');

-- ------------------------------------------ a booking rolled back

SAVEPOINT booking;
SELECT is((SELECT count(*)::int FROM frameq.reserve('t12-h1', :'tok1', :epoch1, 2)), 2, 'two frames are booked in a savepoint');
SELECT is((:my_ledger),
		  'folder ' || :folder || '/0 200 cc 0 gpus 2 running; job ' || :job || '/0 200 cc 0 gpus 2 running; '
		  'limit ' || :lim || '/0 200 cc 0 gpus 2 running; subscription ' || :show || '/' || :alloc || ' 200 cc 0 gpus 2 running',
		  'the charge is in the ledger at once, for the folder, job, limit and subscription');
ROLLBACK TO SAVEPOINT booking;
SELECT is((:my_ledger), 'empty', 'rolling back to the savepoint takes the charge out of the ledger');
SELECT is(fqtest.state(), :'before', 'rolling back to the savepoint leaves everything as it was');

-- ------------------------------- nested savepoints, inner rolled back

SAVEPOINT outer_sp;
SELECT is((SELECT count(*)::int FROM frameq.reserve('t12-h1', :'tok1', :epoch1, 1)), 1, 'one frame is booked in an outer savepoint');
SAVEPOINT inner_sp;
SELECT is((SELECT count(*)::int FROM frameq.reserve('t12-h1', :'tok1', :epoch1, 3)), 3, 'three more in an inner savepoint');
SELECT is((SELECT used_cc FROM frameq.ledger() WHERE kind = 'job' AND id = :job), 400, 'the ledger charges the job 400');
ROLLBACK TO SAVEPOINT inner_sp;
SELECT results_eq(format($$SELECT used_cc, running FROM frameq.ledger() WHERE kind = 'job' AND id = %s$$, :job),
				  'VALUES (100, 1)', 'rolling back the inner savepoint undoes only its three charges');
SELECT is((SELECT idle_cc FROM frameq.host WHERE id = :host1), 700, 'and only its three cores of the host');
RELEASE SAVEPOINT outer_sp;
SELECT results_eq(format($$SELECT used_cc, running FROM frameq.ledger() WHERE kind = 'job' AND id = %s$$, :job),
				  'VALUES (100, 1)', 'releasing the outer savepoint keeps its charge');

-- ------------------------------------------ a release rolled back

SELECT id AS p1 FROM frameq.proc WHERE job = :job \gset
SELECT fqtest.state() AS before_release \gset
SAVEPOINT release_sp;
DELETE FROM frameq.proc WHERE id = :p1;
SELECT is((SELECT idle_cc FROM frameq.host WHERE id = :host1), 800, 'a release in a savepoint gives the host its core back');
SELECT results_eq(format($$SELECT used_cc, running FROM frameq.ledger() WHERE kind = 'job' AND id = %s$$, :job),
				  'VALUES (100, 1)', 'the ledger keeps the released proc''s charge until commit');
ROLLBACK TO SAVEPOINT release_sp;
SELECT is(fqtest.state(), :'before_release', 'rolling back the release restores the proc, the frame, the host and the ledger');
SELECT ok(frameq.owns(:p1, frameq._run_secret(:p1)), 'the proc is live again');
SELECT is_empty('SELECT * FROM frameq.check()', 'check() finds nothing wrong after the rolled-back release');

-- and a booking after all of that is charged exactly once
SELECT is((SELECT count(*)::int FROM frameq.reserve('t12-h1', :'tok1', :epoch1, 2)), 2, 'two more frames book');
SELECT results_eq(format($$SELECT used_cc, running FROM frameq.ledger() WHERE kind = 'job' AND id = %s$$, :job),
				  'VALUES (300, 3)', 'the ledger charges the job exactly its three live procs');
SELECT is_empty('SELECT * FROM frameq.check()', 'check() finds nothing wrong at the end');

SELECT * FROM finish();
ROLLBACK;
