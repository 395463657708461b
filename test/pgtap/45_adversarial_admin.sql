/*
 * Adversarial inputs to the administration functions, called by
 * frameq_admin: NULL in every argument, malformed and oversized names and
 * tags, huge, negative and not-a-number amounts, control characters and
 * unicode, unknown and retired objects.  Each case must fail with its own
 * SQLSTATE (never XX000 or a bare P0001), change nothing, leave check()
 * clean and quote at most 64 characters of what it was given; see
 * include/adversarial.psql.  Past a bound (a name, tag or text too long, a
 * number above its maximum) is 54000, malformed (wrong form, negative, NaN,
 * below a minimum) 22023, NULL 22004, unknown 42704 (doc/reference.md,
 * doc/security.md "Bounded inputs").
 *
 * Cases marked "(assumed)" pin a code the documents do not name; the rest
 * are required.
 */
BEGIN;
\ir include/adversarial.psql

SELECT plan(3 + 2 * 153);
SELECT * FROM fqadv.farm_checks();

-- ------------------------------------------------------- create_allocation
SELECT r FROM (VALUES
	($$SELECT frameq.create_allocation(NULL)$$, '22004', 'create_allocation: NULL name'),
	($$SELECT frameq.create_allocation(NULL, 'x')$$, '22004', 'create_allocation: NULL name with a tag'),
	($$SELECT frameq.create_allocation('')$$, '22023', 'create_allocation: empty name'),
	($$SELECT frameq.create_allocation('a b')$$, '22023', 'create_allocation: name with a space'),
	($$SELECT frameq.create_allocation(E'a\nb')$$, '22023', 'create_allocation: name with a newline'),
	($$SELECT frameq.create_allocation(E'a\x01b')$$, '22023', 'create_allocation: name with \x01'),
	($$SELECT frameq.create_allocation('pööl')$$, '22023', 'create_allocation: unicode name'),
	($$SELECT frameq.create_allocation(repeat('a', 101))$$, '54000', 'create_allocation: 101-character name'),
	($$SELECT frameq.create_allocation(repeat('a', 10485760))$$, '54000', 'create_allocation: 10 MB name'),
	($$SELECT frameq.create_allocation('adv.pool')$$, '42710', 'create_allocation: existing name'),
	($$SELECT frameq.create_allocation('adv.t1', '')$$, '22023', 'create_allocation: empty tag'),
	($$SELECT frameq.create_allocation('adv.t2', repeat('t', 65))$$, '54000', 'create_allocation: 65-character tag'),
	($$SELECT frameq.create_allocation('adv.t3', repeat('t', 1048576))$$, '54000', 'create_allocation: 1 MB tag'),
	($$SELECT frameq.create_allocation('adv.t4', repeat('t', 10485760))$$, '54000', 'create_allocation: 10 MB tag'),
	($$SELECT frameq.create_allocation('adv.t5', E'a\nb')$$, '22023', 'create_allocation: tag with a newline')
) AS c(call, expected, label), LATERAL fqadv.expect('adv_admin', c.call, c.expected, c.label) r;

-- ------------------------------------------------------------- create_show
SELECT r FROM (VALUES
	($$SELECT frameq.create_show(NULL)$$, '22004', 'create_show: NULL name'),
	($$SELECT frameq.create_show('')$$, '22023', 'create_show: empty name'),
	($$SELECT frameq.create_show(E'sh\now')$$, '22023', 'create_show: name with a newline'),
	($$SELECT frameq.create_show(E'\x01')$$, '22023', 'create_show: name \x01'),
	($$SELECT frameq.create_show(E'a\tb')$$, '22023', 'create_show: name with a tab'),
	($$SELECT frameq.create_show('shöw')$$, '22023', 'create_show: unicode name'),
	($$SELECT frameq.create_show('a' || chr(8232) || 'b')$$, '22023', 'create_show: name with U+2028'),
	($$SELECT frameq.create_show('a' || chr(8203) || 'b')$$, '22023', 'create_show: name with a zero-width space'),
	($$SELECT frameq.create_show('x;drop')$$, '22023', 'create_show: name with a semicolon'),
	($$SELECT frameq.create_show(repeat('s', 101))$$, '54000', 'create_show: 101-character name'),
	($$SELECT frameq.create_show(repeat('s', 10485760))$$, '54000', 'create_show: 10 MB name'),
	($$SELECT frameq.create_show('advshow')$$, '42710', 'create_show: existing name')
) AS c(call, expected, label), LATERAL fqadv.expect('adv_admin', c.call, c.expected, c.label) r;

-- -------------------------------------------------------- set_subscription
SELECT r FROM (VALUES
	($$SELECT frameq.set_subscription(NULL, 'adv.pool', 1, 1)$$, '22004', 'set_subscription: NULL show'),
	($$SELECT frameq.set_subscription('advshow', NULL, 1, 1)$$, '22004', 'set_subscription: NULL allocation'),
	($$SELECT frameq.set_subscription('advshow', 'adv.pool', NULL, 1)$$, '22004', 'set_subscription: NULL size'),
	($$SELECT frameq.set_subscription('advshow', 'adv.pool', 1, NULL)$$, '22004', 'set_subscription: NULL burst'),
	($$SELECT frameq.set_subscription('nosuchshow', 'adv.pool', 1, 1)$$, '42704', 'set_subscription: unknown show'),
	($$SELECT frameq.set_subscription('advshow', 'nosuch.pool', 1, 1)$$, '42704', 'set_subscription: unknown allocation'),
	($$SELECT frameq.set_subscription(repeat('s', 10485760), 'adv.pool', 1, 1)$$, '42704', 'set_subscription: 10 MB show'),
	($$SELECT frameq.set_subscription('advshow', repeat('a', 10485760), 1, 1)$$, '42704', 'set_subscription: 10 MB allocation'),
	($$SELECT frameq.set_subscription('advshow', 'adv.pool', -1, 1)$$, '22023', 'set_subscription: size -1'),
	($$SELECT frameq.set_subscription('advshow', 'adv.pool', 1e30, 1e30)$$, '54000', 'set_subscription: size 1e30'),
	($$SELECT frameq.set_subscription('advshow', 'adv.pool', 'NaN', 1)$$, '22023', 'set_subscription: size NaN'),
	($$SELECT frameq.set_subscription('advshow', 'adv.pool', 0.001, 1)$$, '22023', 'set_subscription: size 0.001'),
	($$SELECT frameq.set_subscription('advshow', 'adv.pool', 10000000.01, 1)$$, '54000', 'set_subscription: size above 10 000 000'),
	($$SELECT frameq.set_subscription('advshow', 'adv.pool', 1, -1)$$, '22023', 'set_subscription: burst -1'),
	($$SELECT frameq.set_subscription('advshow', 'adv.pool', 1, 'Infinity')$$, '54000', 'set_subscription: burst Infinity'),
	($$SELECT frameq.set_subscription('advshow', 'adv.pool', 1, '-Infinity')$$, '22023', 'set_subscription: burst -Infinity'),
	($$SELECT frameq.set_subscription('advshow', 'adv.pool', 'abc', 1)$$, '22P02', 'set_subscription: size not a number')
) AS c(call, expected, label), LATERAL fqadv.expect('adv_admin', c.call, c.expected, c.label) r;

-- ----------------------------------------------------------- create_folder
SELECT r FROM (VALUES
	($$SELECT frameq.create_folder(NULL, 'f')$$, '22004', 'create_folder: NULL show'),
	($$SELECT frameq.create_folder('advshow', NULL)$$, '22004', 'create_folder: NULL name'),
	($$SELECT frameq.create_folder('nosuchshow', 'f')$$, '42704', 'create_folder: unknown show'),
	($$SELECT frameq.create_folder(repeat('s', 10485760), 'f')$$, '42704', 'create_folder: 10 MB show'),
	($$SELECT frameq.create_folder('advshow', '')$$, '22023', 'create_folder: empty name'),
	($$SELECT frameq.create_folder('advshow', E'f\nx')$$, '22023', 'create_folder: name with a newline'),
	($$SELECT frameq.create_folder('advshow', repeat('f', 10485760))$$, '54000', 'create_folder: 10 MB name'),
	($$SELECT frameq.create_folder('advshow', 'f', -1)$$, '22023', 'create_folder: max_cores -1'),
	($$SELECT frameq.create_folder('advshow', 'f', 'NaN')$$, '22023', 'create_folder: max_cores NaN'),
	($$SELECT frameq.create_folder('advshow', 'f', 1e30)$$, '54000', 'create_folder: max_cores 1e30'),
	($$SELECT frameq.create_folder('advshow', 'f', 1, -1)$$, '22023', 'create_folder: max_gpus -1'),
	($$SELECT frameq.create_folder('advshow', 'f', 1, 2147483647)$$, '54000', 'create_folder: max_gpus 2^31-1'),
	($$SELECT frameq.create_folder('advshow', 'f', 1, '1e30')$$, '22P02', 'create_folder: max_gpus ''1e30'' as text'),
	($$SELECT frameq.create_folder('advshow', 'f', 1, '99999999999')$$, '22003', 'create_folder: max_gpus beyond int'),
	($$SELECT frameq.create_folder('advshow', 'advfolder')$$, '42710', 'create_folder: existing folder')
) AS c(call, expected, label), LATERAL fqadv.expect('adv_admin', c.call, c.expected, c.label) r;

-- ------------------------------------------------------- set_folder_limits
SELECT r FROM (VALUES
	($$SELECT frameq.set_folder_limits(NULL, 1, 1)$$, '22004', 'set_folder_limits: NULL folder'),
	($$SELECT frameq.set_folder_limits(-1, 1, 1)$$, '42704', 'set_folder_limits: folder -1'),
	($$SELECT frameq.set_folder_limits(2147483647, 1, 1)$$, '42704', 'set_folder_limits: folder 2^31-1'),
	($$SELECT frameq.set_folder_limits({folder1}, -0.01, 1)$$, '22023', 'set_folder_limits: max_cores -0.01'),
	($$SELECT frameq.set_folder_limits({folder1}, 'NaN', 1)$$, '22023', 'set_folder_limits: max_cores NaN'),
	($$SELECT frameq.set_folder_limits({folder1}, 1, -1)$$, '22023', 'set_folder_limits: max_gpus -1'),
	($$SELECT frameq.set_folder_limits({folder1}, 1, 100001)$$, '54000', 'set_folder_limits: max_gpus 100001'),
	($$SELECT frameq.set_folder_limits('abc', 1, 1)$$, '22P02', 'set_folder_limits: folder not a number')
) AS c(call, expected, label), LATERAL fqadv.expect('adv_admin', c.call, c.expected, c.label) r;

-- ------------------------------------------------- create_limit, set_limit
SELECT r FROM (VALUES
	($$SELECT frameq.create_limit(NULL, 1)$$, '22004', 'create_limit: NULL name'),
	($$SELECT frameq.create_limit('l', NULL)$$, '22004', 'create_limit: NULL max_running'),
	($$SELECT frameq.create_limit('', 1)$$, '22023', 'create_limit: empty name'),
	($$SELECT frameq.create_limit(repeat('l', 10485760), 1)$$, '54000', 'create_limit: 10 MB name'),
	($$SELECT frameq.create_limit(E'l\x01', 1)$$, '22023', 'create_limit: name with \x01'),
	($$SELECT frameq.create_limit('l', -1)$$, '22023', 'create_limit: max_running -1'),
	($$SELECT frameq.create_limit('l', 10000001)$$, '54000', 'create_limit: max_running above 10 000 000'),
	($$SELECT frameq.create_limit('l', 2147483647)$$, '54000', 'create_limit: max_running 2^31-1'),
	($$SELECT frameq.create_limit('advlim', 1)$$, '42710', 'create_limit: existing limit'),
	($$SELECT frameq.create_limit('l', '1e6')$$, '22P02', 'create_limit: max_running ''1e6'' as text'),
	($$SELECT frameq.set_limit(NULL, 1)$$, '22004', 'set_limit: NULL name'),
	($$SELECT frameq.set_limit('advlim', NULL)$$, '22004', 'set_limit: NULL max_running'),
	($$SELECT frameq.set_limit('nosuchlimit', 1)$$, '42704', 'set_limit: unknown limit'),
	($$SELECT frameq.set_limit(repeat('l', 10485760), 1)$$, '42704', 'set_limit: 10 MB name'),
	($$SELECT frameq.set_limit('advlim', -1)$$, '22023', 'set_limit: max_running -1'),
	($$SELECT frameq.set_limit('advlim', 2147483647)$$, '54000', 'set_limit: max_running 2^31-1')
) AS c(call, expected, label), LATERAL fqadv.expect('adv_admin', c.call, c.expected, c.label) r;

-- ----------------------------------------------------------- register_host
SELECT r FROM (VALUES
	($$SELECT frameq.register_host(NULL, 'adv.pool', 4, 1024)$$, '22004', 'register_host: NULL name'),
	($$SELECT frameq.register_host('adv-n', NULL, 4, 1024)$$, '22004', 'register_host: NULL allocation'),
	($$SELECT frameq.register_host('adv-n', 'adv.pool', NULL, 1024)$$, '22004', 'register_host: NULL cores'),
	($$SELECT frameq.register_host('adv-n', 'adv.pool', 4, NULL)$$, '22004', 'register_host: NULL memory'),
	($$SELECT frameq.register_host('adv-n', 'adv.pool', 4, 1024, NULL)$$, '22004', 'register_host: NULL gpus'),
	($$SELECT frameq.register_host('adv-n', 'adv.pool', 4, 1024, 0, NULL)$$, '22004', 'register_host: NULL gpu_memory'),
	($$SELECT frameq.register_host('adv-n', 'adv.pool', 4, 1024, 0, 0, NULL)$$, '22004', 'register_host: NULL tags'),
	($$SELECT frameq.register_host('adv-n', 'adv.pool', 4, 1024, 0, 0, '{a,NULL}')$$, '22004', 'register_host: tags containing NULL'),
	($$SELECT frameq.register_host('', 'adv.pool', 4, 1024)$$, '22023', 'register_host: empty name'),
	($$SELECT frameq.register_host(E'adv\n-n', 'adv.pool', 4, 1024)$$, '22023', 'register_host: name with a newline'),
	($$SELECT frameq.register_host('höst', 'adv.pool', 4, 1024)$$, '22023', 'register_host: unicode name'),
	($$SELECT frameq.register_host(repeat('h', 10485760), 'adv.pool', 4, 1024)$$, '54000', 'register_host: 10 MB name'),
	($$SELECT frameq.register_host('adv-n', 'nosuch.pool', 4, 1024)$$, '42704', 'register_host: unknown allocation'),
	($$SELECT frameq.register_host('adv-n', repeat('a', 10485760), 4, 1024)$$, '42704', 'register_host: 10 MB allocation'),
	($$SELECT frameq.register_host('adv-h1', 'adv.pool', 4, 1024)$$, '42710', 'register_host: name of a registered host'),
	($$SELECT frameq.register_host('adv-n', 'adv.pool', 0, 1024)$$, '22023', 'register_host: cores 0'),
	($$SELECT frameq.register_host('adv-n', 'adv.pool', -1, 1024)$$, '22023', 'register_host: cores -1'),
	($$SELECT frameq.register_host('adv-n', 'adv.pool', 1e30, 1024)$$, '54000', 'register_host: cores 1e30'),
	($$SELECT frameq.register_host('adv-n', 'adv.pool', 'NaN', 1024)$$, '22023', 'register_host: cores NaN'),
	($$SELECT frameq.register_host('adv-n', 'adv.pool', 'Infinity', 1024)$$, '54000', 'register_host: cores Infinity'),
	($$SELECT frameq.register_host('adv-n', 'adv.pool', 0.001, 1024)$$, '22023', 'register_host: cores 0.001'),
	($$SELECT frameq.register_host('adv-n', 'adv.pool', 100001, 1024)$$, '54000', 'register_host: cores above 100 000'),
	($$SELECT frameq.register_host('adv-n', 'adv.pool', 4, 0)$$, '22023', 'register_host: memory 0'),
	($$SELECT frameq.register_host('adv-n', 'adv.pool', 4, -1)$$, '22023', 'register_host: memory -1'),
	($$SELECT frameq.register_host('adv-n', 'adv.pool', 4, (1::bigint << 50) + 1)$$, '54000', 'register_host: memory above 2^50'),
	($$SELECT frameq.register_host('adv-n', 'adv.pool', 4, '1e30')$$, '22P02', 'register_host: memory ''1e30'' as text'),
	($$SELECT frameq.register_host('adv-n', 'adv.pool', 4, 1024, -1)$$, '22023', 'register_host: gpus -1'),
	($$SELECT frameq.register_host('adv-n', 'adv.pool', 4, 1024, 2147483647)$$, '54000', 'register_host: gpus 2^31-1'),
	($$SELECT frameq.register_host('adv-n', 'adv.pool', 4, 1024, 0, -1)$$, '22023', 'register_host: gpu_memory -1'),
	($$SELECT frameq.register_host('adv-n', 'adv.pool', 4, 1024, 0, 0, '{""}')$$, '22023', 'register_host: empty tag'),
	($$SELECT frameq.register_host('adv-n', 'adv.pool', 4, 1024, 0, 0, ARRAY(SELECT 't' || i FROM generate_series(1, 65) i))$$, '54000', 'register_host: 65 tags'),
	($$SELECT frameq.register_host('adv-n', 'adv.pool', 4, 1024, 0, 0, ARRAY[repeat('t', 65)])$$, '54000', 'register_host: 65-character tag'),
	($$SELECT frameq.register_host('adv-n', 'adv.pool', 4, 1024, 0, 0, ARRAY[repeat('t', 10485760)])$$, '54000', 'register_host: 10 MB tag'),
	($$SELECT frameq.register_host('adv-n', 'adv.pool', 4, 1024, 0, 0, ARRAY[E'a\nb'])$$, '22023', 'register_host: tag with a newline'),
	($$SELECT frameq.register_host('adv-n', 'adv.pool', 4, 1024, 0, 0, '{{a,b},{c,d}}')$$, '22023', 'register_host: two-dimensional tags (assumed)')
) AS c(call, expected, label), LATERAL fqadv.expect('adv_admin', c.call, c.expected, c.label) r;

-- ---------------------------------------------- set_host_state, confirm_host_dead
SELECT r FROM (VALUES
	($$SELECT frameq.set_host_state(NULL, 'down')$$, '22004', 'set_host_state: NULL host'),
	($$SELECT frameq.set_host_state('adv-h1', NULL)$$, '22004', 'set_host_state: NULL state'),
	($$SELECT frameq.set_host_state('adv-h1', 'UP')$$, '22023', 'set_host_state: state UP'),
	($$SELECT frameq.set_host_state('adv-h1', '')$$, '22023', 'set_host_state: empty state'),
	($$SELECT frameq.set_host_state('adv-h1', E'down\n')$$, '22023', 'set_host_state: state with a newline'),
	($$SELECT frameq.set_host_state('adv-h1', repeat('d', 10485760))$$, '22023', 'set_host_state: 10 MB state'),
	($$SELECT frameq.set_host_state('nosuchhost', 'down')$$, '42704', 'set_host_state: unknown host'),
	($$SELECT frameq.set_host_state('', 'down')$$, '42704', 'set_host_state: empty host'),
	($$SELECT frameq.set_host_state(repeat('h', 10485760), 'down')$$, '42704', 'set_host_state: 10 MB host'),
	($$SELECT frameq.set_host_state('adv-h3', 'down')$$, '42704', 'set_host_state: retired host'),
	($$SELECT frameq.confirm_host_dead(NULL)$$, '22004', 'confirm_host_dead: NULL host'),
	($$SELECT frameq.confirm_host_dead('nosuchhost')$$, '42704', 'confirm_host_dead: unknown host'),
	($$SELECT frameq.confirm_host_dead(E'adv-h1\n')$$, '42704', 'confirm_host_dead: host name with a newline'),
	($$SELECT frameq.confirm_host_dead(repeat('h', 10485760))$$, '42704', 'confirm_host_dead: 10 MB host'),
	($$SELECT frameq.confirm_host_dead('adv-h3')$$, '42704', 'confirm_host_dead: retired host')
) AS c(call, expected, label), LATERAL fqadv.expect('adv_admin', c.call, c.expected, c.label) r;

-- ------------------------------- grant_show, rotate_host_token, retire_host
SELECT r FROM (VALUES
	($$SELECT frameq.grant_show(NULL, 'adv_submit')$$, '22004', 'grant_show: NULL show'),
	($$SELECT frameq.grant_show('advshow', NULL)$$, '22004', 'grant_show: NULL role'),
	($$SELECT frameq.grant_show('nosuchshow', 'adv_submit')$$, '42704', 'grant_show: unknown show'),
	($$SELECT frameq.grant_show(repeat('s', 10485760), 'adv_submit')$$, '42704', 'grant_show: 10 MB show'),
	($$SELECT frameq.grant_show('advshow', 'adv_nosuchrole')$$, '42704', 'grant_show: unknown role'),
	($$SELECT frameq.grant_show('advshow', repeat('r', 10485760))$$, '42704', 'grant_show: 10 MB role'),
	($$SELECT frameq.revoke_show(NULL, 'adv_submit')$$, '22004', 'revoke_show: NULL show'),
	($$SELECT frameq.revoke_show('advshow.g', NULL)$$, '22004', 'revoke_show: NULL role'),
	($$SELECT frameq.revoke_show('nosuchshow', 'adv_submit')$$, '42704', 'revoke_show: unknown show'),
	($$SELECT frameq.revoke_show('advshow.g', 'adv_nosuchrole')$$, '42704', 'revoke_show: unknown role'),
	($$SELECT frameq.revoke_show(repeat('s', 10485760), 'adv_submit')$$, '42704', 'revoke_show: 10 MB show'),
	($$SELECT frameq.rotate_host_token(NULL)$$, '22004', 'rotate_host_token: NULL host'),
	($$SELECT frameq.rotate_host_token('nosuchhost')$$, '42704', 'rotate_host_token: unknown host'),
	($$SELECT frameq.rotate_host_token(repeat('h', 10485760))$$, '42704', 'rotate_host_token: 10 MB host'),
	($$SELECT frameq.rotate_host_token('adv-h3')$$, '42704', 'rotate_host_token: retired host'),
	($$SELECT frameq.retire_host(NULL)$$, '22004', 'retire_host: NULL host'),
	($$SELECT frameq.retire_host('nosuchhost')$$, '42704', 'retire_host: unknown host'),
	($$SELECT frameq.retire_host(repeat('h', 10485760))$$, '42704', 'retire_host: 10 MB host'),
	($$SELECT frameq.retire_host('adv-h3')$$, '42704', 'retire_host: host already retired'),
	($$SELECT frameq.retire_host('adv-h1')$$, '55006', 'retire_host: host with a live proc')
) AS c(call, expected, label), LATERAL fqadv.expect('adv_admin', c.call, c.expected, c.label) r;

SELECT * FROM fqadv.summary();
SELECT * FROM finish();
ROLLBACK;
