/*
 * Adversarial calls to the host agent's functions (attach, heartbeat,
 * reserve, complete) and to owns(), by a frameq_agent login: NULL in every
 * argument, wrong, empty, 10 MB and other hosts' tokens, stale, negative
 * and future epochs, a lease that is gone, retired hosts and replaced
 * tokens, other hosts' procs, out-of-range max_frames, exit statuses and
 * run secrets.  Each case must get its own SQLSTATE (or, where frameq
 * answers instead of failing, that answer), change nothing, leave check()
 * clean and quote at most 64 characters of what it was given; see
 * include/adversarial.psql.  A 10 MB host name must not become a 10 MB
 * error message (and so a 10 MB log line).
 *
 * Cases marked "(assumed)" pin a code the documents do not name; the rest
 * are required.
 */
BEGIN;
\ir include/adversarial.psql

SELECT plan(3 + 2 * 93 + 4);
SELECT * FROM fqadv.farm_checks();

-- ------------------------------------------------------------------ attach
SELECT r FROM (VALUES
	($$SELECT frameq.attach(NULL, '{tok1}', 'boot-1')$$, '22004', 'attach: NULL host'),
	($$SELECT frameq.attach('adv-h1', NULL, 'boot-1')$$, '28P01', 'attach: NULL token'),
	($$SELECT frameq.attach('adv-h1', '{tok1}', NULL)$$, '22004', 'attach: NULL boot_id'),
	($$SELECT frameq.attach('adv-h1', 'not-the-token', 'boot-1')$$, '28P01', 'attach: wrong token'),
	($$SELECT frameq.attach('adv-h1', '{tok2}', 'boot-1')$$, '28P01', 'attach: another host''s token'),
	($$SELECT frameq.attach('adv-h1', '', 'boot-1')$$, '28P01', 'attach: empty token'),
	($$SELECT frameq.attach('adv-h1', upper('{tok1}'), 'boot-1')$$, '28P01', 'attach: token in upper case'),
	($$SELECT frameq.attach('adv-h1', repeat('t', 10485760), 'boot-1')$$, '54000', 'attach: 10 MB token'),
	($$SELECT frameq.attach('nosuchhost', '{tok1}', 'boot-1')$$, '42704', 'attach: unknown host'),
	($$SELECT frameq.attach('', '{tok1}', 'boot-1')$$, '42704', 'attach: empty host'),
	($$SELECT frameq.attach('ADV-H1', '{tok1}', 'boot-1')$$, '42704', 'attach: host name in upper case'),
	($$SELECT frameq.attach(E'adv-h1\n', '{tok1}', 'boot-1')$$, '42704', 'attach: host name with a newline'),
	($$SELECT frameq.attach(repeat('h', 10485760), '{tok1}', 'boot-1')$$, '42704', 'attach: 10 MB host'),
	($$SELECT frameq.attach('adv-h1', '{tok1}', '')$$, '22023', 'attach: empty boot_id'),
	($$SELECT frameq.attach('adv-h1', '{tok1}', repeat('b', 201))$$, '54000', 'attach: 201-character boot_id'),
	($$SELECT frameq.attach('adv-h1', '{tok1}', repeat('b', 10485760))$$, '54000', 'attach: 10 MB boot_id'),
	($$SELECT frameq.attach('adv-h3', '{tok3}', 'boot-3')$$, '42704', 'attach: retired host'),
	($$SELECT frameq.attach('adv-h4', '{tok4old}', 'boot-4')$$, '28P01', 'attach: token replaced by rotate_host_token')
) AS c(call, expected, label), LATERAL fqadv.expect('adv_agent', c.call, c.expected, c.label) r;

-- --------------------------------------------------------------- heartbeat
SELECT r FROM (VALUES
	($$SELECT frameq.heartbeat(NULL, '{tok1}', {ep1}, '{}')$$, '22004', 'heartbeat: NULL host'),
	($$SELECT frameq.heartbeat('adv-h1', NULL, {ep1}, '{}')$$, '28P01', 'heartbeat: NULL token'),
	($$SELECT frameq.heartbeat('adv-h1', '{tok1}', NULL, '{}')$$, '22004', 'heartbeat: NULL epoch'),
	($$SELECT frameq.heartbeat('adv-h1', '{tok1}', {ep1}, '{NULL}')$$, '22004', 'heartbeat: running holds NULL'),
	($$SELECT frameq.heartbeat('adv-h1', '{tok1}', {ep1}, ARRAY[{proc1}, NULL])$$, '22004', 'heartbeat: running holds a proc and NULL'),
	($$SELECT frameq.heartbeat('adv-h1', 'not-the-token', {ep1}, '{}')$$, '28P01', 'heartbeat: wrong token'),
	($$SELECT frameq.heartbeat('adv-h1', '{tok2}', {ep1}, '{}')$$, '28P01', 'heartbeat: another host''s token'),
	($$SELECT frameq.heartbeat('adv-h2', '{tok1}', {ep2}, '{}')$$, '28P01', 'heartbeat: own token for another host'),
	($$SELECT frameq.heartbeat('adv-h1', '{tok1}', {ep1} - 1, ARRAY[{proc1}])$$, 'FQ001', 'heartbeat: stale epoch'),
	($$SELECT frameq.heartbeat('adv-h1', '{tok1}', -1, ARRAY[{proc1}])$$, 'FQ001', 'heartbeat: epoch -1'),
	($$SELECT frameq.heartbeat('adv-h1', '{tok1}', {ep1} + 1, ARRAY[{proc1}])$$, 'FQ001', 'heartbeat: future epoch'),
	($$SELECT frameq.heartbeat('adv-h1', '{tok1}', 9223372036854775807, ARRAY[{proc1}])$$, 'FQ001', 'heartbeat: epoch 2^63-1'),
	($$SELECT frameq.heartbeat('adv-h1', '{tok1}', '1e30', '{}')$$, '22P02', 'heartbeat: epoch ''1e30'' as text'),
	($$SELECT frameq.heartbeat('adv-h1', '{tok1}', {ep1}, '{abc}')$$, '22P02', 'heartbeat: running not numbers'),
	($$SELECT frameq.heartbeat('adv-h1', '{tok1}', {ep1}, ARRAY(SELECT generate_series(1::bigint, 100001)))$$, '54000', 'heartbeat: 100001 procs running'),
	($$SELECT frameq.heartbeat('nosuchhost', '{tok1}', {ep1}, '{}')$$, '42704', 'heartbeat: unknown host'),
	($$SELECT frameq.heartbeat(repeat('h', 10485760), '{tok1}', {ep1}, '{}')$$, '42704', 'heartbeat: 10 MB host'),
	($$SELECT frameq.heartbeat('adv-h5', '{tok5}', {ep5}, '{}')$$, 'FQ002', 'heartbeat: lease gone'),
	($$SELECT frameq.heartbeat('adv-h5', '{tok5}', {ep5} - 1, '{}')$$, 'FQ001', 'heartbeat: epoch before confirm_host_dead'),
	($$SELECT frameq.heartbeat('adv-h3', '{tok3}', 0, '{}')$$, '42704', 'heartbeat: retired host'),
	($$SELECT frameq.heartbeat('adv-h4', '{tok4old}', 0, '{}')$$, '28P01', 'heartbeat: token replaced by rotate_host_token')
) AS c(call, expected, label), LATERAL fqadv.expect('adv_agent', c.call, c.expected, c.label) r;

-- ----------------------------------------------------------------- reserve
SELECT r FROM (VALUES
	($$SELECT frameq.reserve(NULL, '{tok1}', {ep1})$$, '22004', 'reserve: NULL host'),
	($$SELECT frameq.reserve('adv-h1', NULL, {ep1})$$, '22004', 'reserve: NULL token'),
	($$SELECT frameq.reserve('adv-h1', '{tok1}', NULL)$$, '22004', 'reserve: NULL epoch'),
	($$SELECT frameq.reserve('adv-h1', '{tok1}', {ep1}, 0)$$, '22023', 'reserve: max_frames 0'),
	($$SELECT frameq.reserve('adv-h1', '{tok1}', {ep1}, -1)$$, '22023', 'reserve: max_frames -1'),
	($$SELECT frameq.reserve('adv-h1', '{tok1}', {ep1}, 1001)$$, '54000', 'reserve: max_frames 1001'),
	($$SELECT frameq.reserve('adv-h1', '{tok1}', {ep1}, 1000000)$$, '54000', 'reserve: max_frames 1e6'),
	($$SELECT frameq.reserve('adv-h1', '{tok1}', {ep1}, 2147483647)$$, '54000', 'reserve: max_frames 2^31-1'),
	($$SELECT frameq.reserve('adv-h1', '{tok1}', {ep1}, '1e6')$$, '22P02', 'reserve: max_frames ''1e6'' as text'),
	($$SELECT frameq.reserve('adv-h1', 'not-the-token', {ep1})$$, '28P01', 'reserve: wrong token'),
	($$SELECT frameq.reserve('adv-h1', '{tok2}', {ep1})$$, '28P01', 'reserve: another host''s token'),
	($$SELECT frameq.reserve('adv-h1', repeat('t', 10485760), {ep1})$$, '54000', 'reserve: 10 MB token'),
	($$SELECT frameq.reserve('adv-h1', '{tok1}', {ep1} - 1)$$, 'FQ001', 'reserve: stale epoch'),
	($$SELECT frameq.reserve('adv-h1', '{tok1}', -1)$$, 'FQ001', 'reserve: epoch -1'),
	($$SELECT frameq.reserve('adv-h2', '{tok2}', {ep2} + 1)$$, 'FQ001', 'reserve: future epoch'),
	($$SELECT frameq.reserve('nosuchhost', '{tok1}', {ep1})$$, '42704', 'reserve: unknown host'),
	($$SELECT frameq.reserve(repeat('h', 10485760), '{tok1}', {ep1})$$, '42704', 'reserve: 10 MB host'),
	($$SELECT frameq.reserve('adv-h5', '{tok5}', {ep5})$$, 'FQ002', 'reserve: lease gone'),
	($$SELECT frameq.reserve('adv-h3', '{tok3}', 0)$$, '42704', 'reserve: retired host'),
	($$SELECT frameq.reserve('adv-h4', '{tok4old}', 0)$$, '28P01', 'reserve: token replaced by rotate_host_token')
) AS c(call, expected, label), LATERAL fqadv.expect('adv_agent', c.call, c.expected, c.label) r;

-- ---------------------------------------------------------------- complete
SELECT r FROM (VALUES
	($$SELECT frameq.complete(NULL, '{tok1}', {ep1}, {proc1}, 0)$$, '22004', 'complete: NULL host'),
	($$SELECT frameq.complete('adv-h1', NULL, {ep1}, {proc1}, 0)$$, '22004', 'complete: NULL token'),
	($$SELECT frameq.complete('adv-h1', '{tok1}', NULL, {proc1}, 0)$$, '22004', 'complete: NULL epoch'),
	($$SELECT frameq.complete('adv-h1', '{tok1}', {ep1}, NULL, 0)$$, '22004', 'complete: NULL proc'),
	($$SELECT frameq.complete('adv-h1', '{tok1}', {ep1}, {proc1}, NULL)$$, '22004', 'complete: NULL exit_status'),
	($$SELECT frameq.complete('adv-h1', '{tok1}', {ep1}, {proc1}, 0, -1)$$, '22023', 'complete: exit_signal -1'),
	($$SELECT frameq.complete('adv-h1', '{tok1}', {ep1}, {proc1}, 0, 0, -1)$$, '22023', 'complete: max_rss -1'),
	($$SELECT frameq.complete('adv-h1', '{tok1}', {ep1}, {proc1}, '1e30')$$, '22P02', 'complete: exit_status ''1e30'' as text'),
	($$SELECT frameq.complete('adv-h1', 'not-the-token', {ep1}, {proc1}, 0)$$, '28P01', 'complete: wrong token'),
	($$SELECT frameq.complete('adv-h1', '{tok2}', {ep1}, {proc1}, 0)$$, '28P01', 'complete: another host''s token'),
	($$SELECT frameq.complete('adv-h2', '{tok1}', {ep2}, {proc2}, 0)$$, '28P01', 'complete: own token for another host''s proc'),
	($$SELECT frameq.complete('nosuchhost', '{tok1}', {ep1}, {proc1}, 0)$$, '42704', 'complete: unknown host'),
	($$SELECT frameq.complete(repeat('h', 10485760), '{tok1}', {ep1}, {proc1}, 0)$$, '42704', 'complete: 10 MB host'),
	($$SELECT frameq.complete('adv-h1', '{tok1}', {ep1}, {proc2}, 0)$$, '=stale', 'complete: another host''s proc'),
	($$SELECT frameq.complete('adv-h1', '{tok1}', {ep2}, {proc2}, 1, 9)$$, '=stale', 'complete: another host''s proc, its epoch, a failure'),
	($$SELECT frameq.complete('adv-h1', '{tok1}', {ep1} - 1, {proc1}, 0)$$, '=stale', 'complete: own proc, stale epoch'),
	($$SELECT frameq.complete('adv-h1', '{tok1}', -1, {proc1}, 0)$$, '=stale', 'complete: own proc, epoch -1'),
	($$SELECT frameq.complete('adv-h1', '{tok1}', {ep1}, -1, 0)$$, '=stale', 'complete: proc -1'),
	($$SELECT frameq.complete('adv-h1', '{tok1}', {ep1}, 0, 0)$$, '=stale', 'complete: proc 0'),
	($$SELECT frameq.complete('adv-h1', '{tok1}', {ep1}, 9223372036854775807, 0)$$, '=stale', 'complete: proc 2^63-1'),
	($$SELECT frameq.complete('adv-h3', '{tok3}', 0, {proc1}, 0)$$, '42704', 'complete: retired host'),
	($$SELECT frameq.complete('adv-h4', '{tok4old}', 0, {proc1}, 0)$$, '28P01', 'complete: token replaced by rotate_host_token')
) AS c(call, expected, label), LATERAL fqadv.expect('adv_agent', c.call, c.expected, c.label) r;

-- -------------------------------------------------------------------- owns
SELECT r FROM (VALUES
	($$SELECT frameq.owns(NULL)$$, '=false', 'owns: NULL proc'),
	($$SELECT frameq.owns(-1)$$, '=false', 'owns: proc -1'),
	($$SELECT frameq.owns({proc1})$$, '=false', 'owns: live proc without its secret'),
	($$SELECT frameq.owns({proc2})$$, '=false', 'owns: another host''s proc without its secret'),
	($$SELECT frameq.owns({proc1}, NULL)$$, '=false', 'owns: NULL secret'),
	($$SELECT frameq.owns({proc1}, '')$$, '=false', 'owns: empty secret'),
	($$SELECT frameq.owns({proc1}, 'not-the-secret')$$, '=false', 'owns: wrong secret'),
	($$SELECT frameq.owns({proc1}, '{secret2}')$$, '=false', 'owns: another proc''s secret'),
	($$SELECT frameq.owns({proc1}, upper('{secret1}'))$$, '=false', 'owns: secret in upper case'),
	($$SELECT frameq.owns({proc1}, repeat('s', 10485760))$$, '54000', 'owns: 10 MB secret'),
	($$SELECT frameq.owns(NULL, '{secret1}')$$, '=false', 'owns: NULL proc with a secret')
) AS c(call, expected, label), LATERAL fqadv.expect('adv_agent', c.call, c.expected, c.label) r;

SELECT r FROM (VALUES
	($$SELECT frameq.owns({proc1})$$, '=false', 'owns: reader, live proc without its secret')
) AS c(call, expected, label), LATERAL fqadv.expect('adv_reader', c.call, c.expected, c.label) r;

-- ---------------------------- a heartbeat naming another host's proc
-- Host adv-h1 lists adv-h2's proc as its own: frameq treats it as a zombie
-- of adv-h1 (kill it there), and adv-h2's proc, frame and host are untouched.
SELECT md5(string_agg(x::text, '' ORDER BY x::text)) AS h2_before FROM (
	SELECT p::text AS x FROM frameq.proc p WHERE p.host = (SELECT id FROM frameq.host WHERE name = 'adv-h2')
	UNION ALL SELECT h::text FROM frameq.host h WHERE h.name = 'adv-h2'
	UNION ALL SELECT f::text FROM frameq.frame f WHERE f.id = (SELECT v::bigint FROM fqadv.fix WHERE k = 'frame2')) s \gset
SELECT v AS proc1 FROM fqadv.fix WHERE k = 'proc1' \gset
SELECT v AS proc2 FROM fqadv.fix WHERE k = 'proc2' \gset
SELECT v AS tok1 FROM fqadv.fix WHERE k = 'tok1' \gset
SELECT v AS ep1 FROM fqadv.fix WHERE k = 'ep1' \gset
SET ROLE adv_agent;
SELECT kill AS h1_kill FROM frameq.heartbeat('adv-h1', :'tok1', :ep1, ARRAY[:proc1, :proc2]::bigint[]) \gset
RESET ROLE;
SELECT is(:'h1_kill'::bigint[], ARRAY[:proc2]::bigint[],
		  'heartbeat: a host listing another host''s proc is told to kill its own process of that name');
SELECT is(md5(string_agg(x::text, '' ORDER BY x::text)), :'h2_before',
		  'heartbeat: the other host''s proc, frame and host row are untouched') FROM (
	SELECT p::text AS x FROM frameq.proc p WHERE p.host = (SELECT id FROM frameq.host WHERE name = 'adv-h2')
	UNION ALL SELECT h::text FROM frameq.host h WHERE h.name = 'adv-h2'
	UNION ALL SELECT f::text FROM frameq.frame f WHERE f.id = (SELECT v::bigint FROM fqadv.fix WHERE k = 'frame2')) s;
SELECT is((SELECT state FROM frameq.proc WHERE id = :proc1), 'running',
		  'heartbeat: the host''s own proc is still running');
SELECT is((SELECT count(*)::int FROM frameq.check()), 0, 'heartbeat: check() is clean afterwards');

SELECT * FROM fqadv.summary();
SELECT * FROM finish();
ROLLBACK;
