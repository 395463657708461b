/*
 * Review: doc/security.md, "Bounded inputs": "Every argument has a bound.
 * Past it a call fails with 54000 ... Error messages ... quote at most 64
 * characters of any value they were given."
 *
 * - The "already exists" / "is used by an earlier layer" messages quote a
 *   whole (valid, so up to 100 characters) name unclipped.
 * - A host token has no bound: attach/heartbeat/reserve/complete hash a
 *   token of any size (here 20 MB) and answer 28P01, not 54000.
 * - owns()'s secret has no bound either (answers false for 20 MB).
 */
BEGIN;
\ir include/helpers.psql

SELECT plan(10);

CREATE FUNCTION fqtest.message_of(sql text) RETURNS text
LANGUAGE plpgsql AS $$
BEGIN
	EXECUTE sql;
	RETURN NULL;
EXCEPTION WHEN OTHERS THEN
	RETURN SQLERRM;
END
$$;

SELECT frameq.create_allocation(repeat('A', 100)) \g /dev/null
SELECT frameq.create_show('r50show') \g /dev/null
SELECT frameq.set_subscription('r50show', repeat('A', 100), 100, 100) \g /dev/null
SELECT frameq.create_folder('r50show', repeat('F', 100)) \g /dev/null
SELECT frameq.create_limit(repeat('L', 100), 3) \g /dev/null
SELECT frameq.register_host(repeat('H', 100), repeat('A', 100), 8, 8589934592) AS tok \gset

SELECT unalike(fqtest.message_of(format('SELECT frameq.create_allocation(%L)', repeat('A', 100))),
	'%' || repeat('A', 65) || '%', 'a duplicate allocation name is quoted at most 64 characters');
SELECT unalike(fqtest.message_of(format('SELECT frameq.create_folder(%L, %L)', 'r50show', repeat('F', 100))),
	'%' || repeat('F', 65) || '%', 'a duplicate folder name is quoted at most 64 characters');
SELECT unalike(fqtest.message_of(format('SELECT frameq.create_limit(%L, 1)', repeat('L', 100))),
	'%' || repeat('L', 65) || '%', 'a duplicate limit name is quoted at most 64 characters');
SELECT unalike(fqtest.message_of(format('SELECT frameq.register_host(%L, %L, 1, 1)',
	repeat('H', 100), repeat('A', 100))),
	'%' || repeat('H', 65) || '%', 'a duplicate host name is quoted at most 64 characters');
SELECT unalike(fqtest.message_of(format('SELECT frameq.submit(%L)', jsonb_build_object('show', 'r50show',
	'name', 'j', 'layers', jsonb_build_array(
		jsonb_build_object('name', repeat('R', 100), 'command', 'x', 'range', '1'),
		jsonb_build_object('name', repeat('R', 100), 'command', 'x', 'range', '1'))))),
	'%' || repeat('R', 65) || '%', 'a duplicate layer name is quoted at most 64 characters');

/* the token and the run secret */
SELECT fqtest.throws_like(format('SELECT frameq.attach(%L, repeat(''t'', 20000000), ''b'')', repeat('H', 100)),
	'54000', '%token%', 'a 20 MB token to attach() is refused with 54000');
SELECT fqtest.throws_like(format('SELECT frameq.heartbeat(%L, repeat(''t'', 20000000), 1, ''{}'')', repeat('H', 100)),
	'54000', '%token%', 'a 20 MB token to heartbeat() is refused with 54000');
SELECT fqtest.throws_like(format('SELECT frameq.reserve(%L, repeat(''t'', 20000000), 1, 1)', repeat('H', 100)),
	'54000', '%token%', 'a 20 MB token to reserve() is refused with 54000');
SELECT fqtest.throws_like(format('SELECT frameq.complete(%L, repeat(''t'', 20000000), 1, 1, 0)', repeat('H', 100)),
	'54000', '%token%', 'a 20 MB token to complete() is refused with 54000');
SELECT fqtest.throws_like('SELECT frameq.owns(1, repeat(''s'', 20000000))',
	'54000', '%secret%', 'a 20 MB secret to owns() is refused with 54000');

SELECT * FROM finish();
ROLLBACK;
