/*
 * reserve() reads the host, the subscriptions, the dispatch queue, the
 * job, its folder, the layer and its limits, and the run secret key below
 * the executor (src/rowread.c), keeping per backend where each column is
 * and which relation each table is.  In one session, after bookings have
 * kept them: a column renamed away, or of another type, is an error that
 * names it (42703); a column of the same name that has moved (renamed
 * away, and another added under its name) is read where it is now; a
 * table replaced by another of the same name is read, not the old one.
 * (The snapshots the reads see: isolation spec i17_direct_reads.)
 */
BEGIN;
\ir include/helpers.psql

SELECT plan(10);

SELECT * FROM fqtest.farm('t81', cores => '{8}') \gset
SELECT frameq.create_limit('t81lic', 10);
SELECT frameq.submit($${"show": "t81show", "name": "j",
	"layers": [{"name": "l", "command": "r #FRAME#", "range": "1-20", "limits": ["t81lic"]}]}$$)
	AS job \gset

SELECT is((SELECT count(*)::int FROM frameq.reserve('t81-h1', :'tok1', :epoch1, 1)), 1,
		  'a first booking keeps where the columns are');

-- ------------------------------------------------- a column gone, or retyped

ALTER TABLE frameq.job RENAME COLUMN priority TO t81_priority;
SELECT fqtest.throws_like(format('SELECT count(*) FROM frameq.reserve(%L, %L, %s, 1)',
								 't81-h1', :'tok1', :epoch1),
	'42703', '%frameq.job has no column priority of type integer%',
	'a column renamed away is an error naming it');
ALTER TABLE frameq.job RENAME COLUMN t81_priority TO priority;
SELECT is((SELECT count(*)::int FROM frameq.reserve('t81-h1', :'tok1', :epoch1, 1)), 1,
		  'and back under its name, it is read again');

ALTER TABLE frameq.layer ALTER COLUMN dispatch_order TYPE bigint;
SELECT fqtest.throws_like(format('SELECT count(*) FROM frameq.reserve(%L, %L, %s, 1)',
								 't81-h1', :'tok1', :epoch1),
	'42703', '%frameq.layer has no column dispatch_order of type integer%',
	'a column of another type is an error naming it');
ALTER TABLE frameq.layer ALTER COLUMN dispatch_order TYPE int;

-- ------------------------------------------- a column moved under its name

ALTER TABLE frameq.host RENAME COLUMN state TO t81_state;
ALTER TABLE frameq.host ADD COLUMN state text;
UPDATE frameq.host SET state = 'down' WHERE id = :host1;
SELECT is((SELECT count(*)::int FROM frameq.reserve('t81-h1', :'tok1', :epoch1, 1)), 0,
		  'a column added under a moved one''s name is the one read (down: nothing booked)');
UPDATE frameq.host SET state = 'up' WHERE id = :host1;
SELECT is((SELECT count(*)::int FROM frameq.reserve('t81-h1', :'tok1', :epoch1, 1)), 1,
		  'and up again, the host books');
ALTER TABLE frameq.host DROP COLUMN state;
ALTER TABLE frameq.host RENAME COLUMN t81_state TO state;

-- ------------------------------------------------ a table replaced by another

SELECT is((SELECT count(*)::int FROM frameq.reserve('t81-h1', :'tok1', :epoch1, 1)), 1,
		  'the limit of 10 lets a fourth frame book');
ALTER INDEX frameq.limits_pkey RENAME TO t81_limits_pkey;
ALTER TABLE frameq.limits RENAME TO t81_limits;
CREATE TABLE frameq.limits (LIKE frameq.t81_limits INCLUDING ALL);
INSERT INTO frameq.limits SELECT id, name, 0, changed_at FROM frameq.t81_limits;
SELECT is((SELECT count(*)::int FROM frameq.reserve('t81-h1', :'tok1', :epoch1, 1)), 0,
		  'the new table of that name is read: its limit of 0 books nothing');
UPDATE frameq.limits SET max_running = 10;
SELECT is((SELECT count(*)::int FROM frameq.reserve('t81-h1', :'tok1', :epoch1, 1)), 1,
		  'and its limit raised, the layer books again');
SELECT is((SELECT count(*)::int FROM frameq.proc WHERE job = :job), 5, 'five procs in all');

SELECT * FROM finish();
ROLLBACK;
