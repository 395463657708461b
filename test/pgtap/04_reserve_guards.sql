/*
 * reserve(): who may book, and how much.  Wrong tokens, unknown hosts,
 * stale epochs and expired leases are errors that change nothing; hosts
 * that are not up and paused jobs get no rows; max_frames is validated and
 * honoured, with frameq.max_frames_per_reserve as its default.
 */
BEGIN;
\ir include/helpers.psql

SELECT plan(38);

SELECT * FROM fqtest.farm('t04', cores => '{32,32}', memory => '{68719476736}', attach => false) \gset
SELECT epoch FROM frameq.attach('t04-h1', :'tok1', 'boot-1') \gset
SELECT frameq.submit($${"show": "t04show", "name": "guards",
	"layers": [{"name": "render", "command": "render #FRAME#", "range": "1-40"}]}$$) AS job \gset

-- ----------------------------------------------------------------- errors

SELECT * FROM fqtest.refuses(format('SELECT * FROM frameq.reserve(%L, %L, %s)', 't04-h1', 'bad', :epoch),
	'28P01', 'invalid token for host "t04-h1"', 'reserve with a wrong token raises 28P01');
SELECT * FROM fqtest.refuses(format('SELECT * FROM frameq.reserve(%L, %L, %s)', 't04-h1', :'tok2', :epoch),
	'28P01', NULL, 'reserve with another host''s token raises 28P01');
SELECT * FROM fqtest.refuses(format('SELECT * FROM frameq.reserve(%L, %L, %s)', 't04-nope', :'tok1', :epoch),
	'42704', 'host "t04-nope" is not registered', 'reserve for an unknown host raises 42704');
SELECT * FROM fqtest.refuses(format('SELECT * FROM frameq.reserve(NULL, %L, %s)', :'tok1', :epoch),
	'22004', NULL, 'reserve with a null host raises 22004');
SELECT * FROM fqtest.refuses(format('SELECT * FROM frameq.reserve(%L, NULL, %s)', 't04-h1', :epoch),
	'22004', NULL, 'reserve with a null token raises 22004');
SELECT * FROM fqtest.refuses(format('SELECT * FROM frameq.reserve(%L, %L, NULL)', 't04-h1', :'tok1'),
	'22004', NULL, 'reserve with a null epoch raises 22004');
SELECT * FROM fqtest.refuses(format('SELECT * FROM frameq.reserve(%L, %L, %s)', 't04-h1', :'tok1', :epoch - 1),
	'FQ001', 'lease epoch 0 of host "t04-h1" is not current', 'reserve with a stale epoch raises FQ001');
SELECT * FROM fqtest.refuses(format('SELECT * FROM frameq.reserve(%L, %L, %s)', 't04-h1', :'tok1', :epoch + 1),
	'FQ001', NULL, 'reserve with a future epoch raises FQ001');
SELECT * FROM fqtest.refuses(format('SELECT * FROM frameq.reserve(%L, %L, 0)', 't04-h2', :'tok2'),
	'FQ002', NULL, 'reserve for a host that never attached raises FQ002');

UPDATE frameq.host SET lease_expires_at = clock_timestamp() - interval '1 second' WHERE name = 't04-h1';
SELECT * FROM fqtest.refuses(format('SELECT * FROM frameq.reserve(%L, %L, %s)', 't04-h1', :'tok1', :epoch),
	'FQ002', 'lease of host "t04-h1" has expired', 'reserve on an expired lease raises FQ002');
UPDATE frameq.host SET lease_expires_at = clock_timestamp() + interval '1 hour' WHERE name = 't04-h1';

SELECT * FROM fqtest.refuses(format('SELECT * FROM frameq.reserve(%L, %L, %s, 0)', 't04-h1', :'tok1', :epoch),
	'22023', 'max_frames must be between 1 and 1000%', 'reserve with max_frames 0 raises 22023');
SELECT * FROM fqtest.refuses(format('SELECT * FROM frameq.reserve(%L, %L, %s, 1001)', 't04-h1', :'tok1', :epoch),
	'54000', 'max_frames must be between 1 and 1000%', 'reserve with max_frames 1001 raises 54000');
SELECT * FROM fqtest.refuses(format('SELECT * FROM frameq.reserve(%L, %L, %s, -1)', 't04-h1', :'tok1', :epoch),
	'22023', NULL, 'reserve with a negative max_frames raises 22023');

-- --------------------------------------------------------- nothing to book

SELECT fqtest.state() AS before \gset
UPDATE frameq.host SET state = 'repair' WHERE name = 't04-h1';
SELECT is((SELECT count(*)::int FROM frameq.reserve('t04-h1', :'tok1', :epoch)), 0,
		  'a host in repair gets no bookings');
UPDATE frameq.host SET state = 'down' WHERE name = 't04-h1';
SELECT is((SELECT count(*)::int FROM frameq.reserve('t04-h1', :'tok1', :epoch)), 0,
		  'a host that is down gets no bookings');
UPDATE frameq.host SET state = 'up' WHERE name = 't04-h1';
SELECT is(fqtest.state(), :'before', 'reserve on a host that is not up changed nothing');

SELECT frameq.set_job(:job, paused => true) \g /dev/null
SELECT fqtest.state() AS before \gset
SELECT is((SELECT count(*)::int FROM frameq.reserve('t04-h1', :'tok1', :epoch)), 0,
		  'a paused job gets no bookings');
SELECT is(fqtest.state(), :'before', 'reserve with only a paused job changed nothing');
SELECT frameq.set_job(:job, paused => false) \g /dev/null

-- ------------------------------------------------------------- max_frames

SELECT is((SELECT count(*)::int FROM frameq.reserve('t04-h1', :'tok1', :epoch)), 16,
		  'reserve without max_frames books frameq.max_frames_per_reserve (16) frames');
SET LOCAL frameq.max_frames_per_reserve = 3;
SELECT is((SELECT count(*)::int FROM frameq.reserve('t04-h1', :'tok1', :epoch)), 3,
		  'reserve follows frameq.max_frames_per_reserve when it is set to 3');
SELECT is((SELECT count(*)::int FROM frameq.reserve('t04-h1', :'tok1', :epoch, 2)), 2,
		  'an explicit max_frames of 2 wins over the setting');
SELECT is((SELECT count(*)::int FROM frameq.reserve('t04-h1', :'tok1', :epoch, 1000)), 11,
		  'max_frames 1000 books what the host has room for: the remaining 11 cores');
SELECT results_eq(
	format($$SELECT count(*)::int, count(*) FILTER (WHERE state = 'running')::int FROM frameq.frame WHERE job = %s$$, :job),
	'VALUES (40, 32)', '32 of the 40 frames are running after the four reserves');
SELECT is((SELECT idle_cc FROM frameq.host WHERE name = 't04-h1'), 0, 'the host has no idle cores left');
SELECT is_empty('SELECT * FROM frameq.check()', 'check() finds nothing wrong');

SELECT * FROM finish();
ROLLBACK;
