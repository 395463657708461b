/*
 * report_log(host, token, epoch, proc, log) (doc/reference.md): an agent
 * tells where a render's output is; runs.log shows it.  Fenced like the
 * agent's other calls: the token, then the host's current epoch and
 * lease (FQ001, FQ002); only a run of that host, booked under that epoch
 * and not yet ended, is written (true), anything else is left (false).
 * Bounded (54000), not null (22004), not empty (22023).
 */
BEGIN;
\ir include/helpers.psql

SELECT plan(31);

SELECT * FROM fqtest.farm('t67', cores => '{2,2}') \gset
SELECT frameq.submit($${"show": "t67show", "name": "t67-job",
	"layers": [{"name": "l", "command": "c", "range": "1-6"}]}$$) AS job \gset
SELECT proc AS p1 FROM frameq.reserve('t67-h1', :'tok1', :epoch1, 1) \gset
SELECT proc AS p2 FROM frameq.reserve('t67-h2', :'tok2', :epoch2, 1) \gset
SELECT proc AS p3 FROM frameq.reserve('t67-h1', :'tok1', :epoch1, 1) \gset

SELECT is((SELECT log FROM frameq.runs WHERE proc = :p1), NULL, 'a run has no log until its agent reports one');
SELECT is(frameq.report_log('t67-h1', :'tok1', :epoch1, :p1, 'render01:/var/log/frameq/t67-job/l.0001.log'), true,
	'the host reports its render''s log');
SELECT is((SELECT log FROM frameq.runs WHERE proc = :p1), 'render01:/var/log/frameq/t67-job/l.0001.log',
	'runs.log shows it');
SELECT is(frameq.report_log('t67-h1', :'tok1', :epoch1, :p1, 'render01:/tmp/other.log'), true, 'a later report');
SELECT is((SELECT log FROM frameq.runs WHERE proc = :p1), 'render01:/tmp/other.log', 'replaces the earlier one');

-- ------------------------------------------------------------------ fencing

SELECT fqtest.state() AS before \gset
SELECT is(frameq.report_log('t67-h1', :'tok1', :epoch1, :p2, 'render01:/x'), false,
	'a host reporting another host''s run is refused (false)');
SELECT is((SELECT log FROM frameq.run WHERE proc = :p2), NULL, 'and that run has no log');
SELECT is(frameq.report_log('t67-h1', :'tok1', :epoch1, 12345, 'render01:/x'), false, 'an unknown proc: false');
SELECT * FROM fqtest.refuses(format($$SELECT frameq.report_log('t67-h1', 'wrong', %s, %s, 'h:/x')$$, :epoch1, :p1),
	'28P01', 'invalid token for host "t67-h1"', 'a wrong token raises 28P01');
SELECT is(frameq.report_log('t67-h2', :'tok2', :epoch2, :p1, 'render02:/x'), false,
	'another host, with its own token and epoch, naming this host''s run: false');
SELECT is(fqtest.state(), :'before', 'nothing changed');
SELECT * FROM fqtest.refuses(format($$SELECT frameq.report_log('t67-h1', %L, %s, %s, 'h:/x')$$, :'tok1', :epoch1 + 1, :p1),
	'FQ001', NULL, 'an epoch that is not the host''s raises FQ001');
UPDATE frameq.host SET lease_expires_at = clock_timestamp() - interval '1 second' WHERE id = :host1;
SELECT * FROM fqtest.refuses(format($$SELECT frameq.report_log('t67-h1', %L, %s, %s, 'h:/x')$$, :'tok1', :epoch1, :p1),
	'FQ002', NULL, 'a lease that is over raises FQ002');
UPDATE frameq.host SET lease_expires_at = clock_timestamp() + interval '1 minute' WHERE id = :host1;

/* an ended run keeps what it had */
SELECT frameq.complete('t67-h1', :'tok1', :epoch1, :p1, 0) \g /dev/null
SELECT is(frameq.report_log('t67-h1', :'tok1', :epoch1, :p1, 'render01:/late.log'), false,
	'a report for a run that has ended is refused (false)');
SELECT is((SELECT log FROM frameq.runs WHERE proc = :p1), 'render01:/tmp/other.log', 'and its log stays');

/* a run of an earlier epoch: the new agent's epoch does not fit it */
SELECT epoch AS epoch1b FROM frameq.attach('t67-h1', :'tok1', 'boot-1') \gset
SELECT * FROM fqtest.refuses(format($$SELECT frameq.report_log('t67-h1', %L, %s, %s, 'h:/x')$$, :'tok1', :epoch1, :p3),
	'FQ001', NULL, 'after a re-attach the old epoch raises FQ001');
SELECT is(frameq.report_log('t67-h1', :'tok1', :epoch1b, :p3, 'render01:/x'), false,
	'and the new epoch may not write a run booked under the old one');

-- ------------------------------------------------------------------ bounds

SELECT * FROM fqtest.refuses(format($$SELECT frameq.report_log('t67-h2', %L, %s, %s, repeat('x', 1025))$$, :'tok2', :epoch2, :p2),
	'54000', 'log is too large: 1025 characters, at most 1024', 'a log past 1024 characters raises 54000');
SELECT is(frameq.report_log('t67-h2', :'tok2', :epoch2, :p2, repeat('x', 1024)), true, '1024 characters are kept');
SELECT * FROM fqtest.refuses(format($$SELECT frameq.report_log('t67-h2', %L, %s, %s, NULL)$$, :'tok2', :epoch2, :p2),
	'22004', 'log must not be null', 'a null log raises 22004');
SELECT * FROM fqtest.refuses(format($$SELECT frameq.report_log('t67-h2', %L, %s, %s, '')$$, :'tok2', :epoch2, :p2),
	'22023', 'log must not be empty', 'an empty log raises 22023');
SELECT * FROM fqtest.refuses(format($$SELECT frameq.report_log('t67-h2', %L, %s, NULL, 'h:/x')$$, :'tok2', :epoch2),
	'22004', 'proc must not be null', 'a null proc raises 22004');

SELECT ok(has_function_privilege('frameq_agent', 'frameq.report_log(text, text, bigint, bigint, text)', 'EXECUTE')
		  AND NOT has_function_privilege('frameq_reader', 'frameq.report_log(text, text, bigint, bigint, text)', 'EXECUTE')
		  AND NOT has_function_privilege('frameq_submit', 'frameq.report_log(text, text, bigint, bigint, text)', 'EXECUTE'),
	'only agents may report a log');

SELECT * FROM finish();
ROLLBACK;
