/*
 * Classic failure 2: double dispatch.  A frame is never both queued and
 * booked, and never booked twice: every running frame has exactly one
 * proc, no waiting frame has one, no two bookings (on one host or across
 * hosts) name the same frame, and a frame has at most one open run record.
 * Concurrent sessions are the isolation specs' business; this is the
 * single-session part.
 */
BEGIN;
\ir include/helpers.psql

SELECT plan(15);

SELECT * FROM fqtest.farm('t11', cores => '{4,4,8}') \gset
SELECT frameq.submit($${"show": "t11show", "name": "dd",
	"layers": [{"name": "a", "command": "c", "range": "1-6"}, {"name": "b", "command": "c", "range": "1-4"}]}$$) AS job \gset

CREATE TEMP TABLE booked (host text, proc bigint, frame bigint) ON COMMIT DROP;
INSERT INTO booked SELECT 't11-h1', proc, frame FROM frameq.reserve('t11-h1', :'tok1', :epoch1);
INSERT INTO booked SELECT 't11-h2', proc, frame FROM frameq.reserve('t11-h2', :'tok2', :epoch2);
INSERT INTO booked SELECT 't11-h3', proc, frame FROM frameq.reserve('t11-h3', :'tok3', :epoch3);

SELECT results_eq($$SELECT host, count(*)::int FROM booked GROUP BY host ORDER BY host$$,
				  $$VALUES ('t11-h1', 4), ('t11-h2', 4), ('t11-h3', 2)$$,
				  'three hosts book 4, 4 and the last 2 of the 10 frames');
SELECT is((SELECT count(DISTINCT frame)::int FROM booked), 10, 'the 10 bookings name 10 different frames');
SELECT is_empty($$SELECT frame FROM booked WHERE host = 't11-h1' INTERSECT SELECT frame FROM booked WHERE host = 't11-h2'$$,
				'no frame is booked on both the first and the second host');
SELECT is((SELECT count(*)::int FROM frameq.reserve('t11-h3', :'tok3', :epoch3)), 0,
		  'with every frame booked, a host with 6 idle cores books nothing more');
SELECT is((SELECT count(*)::int FROM frameq.reserve('t11-h1', :'tok1', :epoch1, 5)), 0,
		  'a host asking again books nothing more');
SELECT is_empty(format($$SELECT f.id FROM frameq.frame f WHERE f.job = %s AND f.state = 'running'
						 AND (SELECT count(*) FROM frameq.proc p WHERE p.frame = f.id) <> 1$$, :job),
				'every running frame has exactly one proc');
SELECT is_empty(format($$SELECT f.id FROM frameq.frame f JOIN frameq.proc p ON p.frame = f.id
						 WHERE f.job = %s AND f.state <> 'running'$$, :job),
				'no frame that is not running has a proc');
SELECT bag_eq(format('SELECT id, frame FROM frameq.proc WHERE job = %s', :job),
			  'SELECT proc, frame FROM booked',
			  'the procs are exactly the bookings handed out, frame for frame');
SELECT is_empty($$SELECT frame FROM frameq.run WHERE ended_at IS NULL GROUP BY frame HAVING count(*) > 1$$,
				'no frame has two open run records');
SELECT is_empty('SELECT * FROM frameq.check()', 'check() finds nothing wrong after the bookings');

-- release one frame and book it again: still one proc, one open run
SELECT proc AS p_first, frame AS f_first FROM booked WHERE host = 't11-h1' ORDER BY frame LIMIT 1 \gset
DELETE FROM frameq.proc WHERE id = :p_first;
SELECT is((SELECT array_agg(frame) FROM frameq.reserve('t11-h2', :'tok2', :epoch2)), NULL::bigint[],
		  'the second host, full, books nothing even though a frame is waiting again');
SELECT is((SELECT array_agg(frame) FROM frameq.reserve('t11-h3', :'tok3', :epoch3)), ARRAY[:f_first]::bigint[],
		  'the third host books the released frame, and only it');
SELECT is((SELECT count(*)::int FROM frameq.proc WHERE frame = :f_first), 1, 'the rebooked frame has exactly one proc');
SELECT results_eq(format('SELECT count(*)::int, count(*) FILTER (WHERE ended_at IS NULL)::int FROM frameq.run WHERE frame = %s', :f_first),
				  'VALUES (2, 1)', 'the rebooked frame has two run records, one of them open');
SELECT is((SELECT state FROM frameq.frame WHERE id = :f_first), 'running', 'the rebooked frame is running');

SELECT * FROM finish();
ROLLBACK;
