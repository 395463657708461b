/*
 * frameq keeps one expression state per backend for a CHECK constraint, a
 * trigger's WHEN condition or a partial index's predicate of its tables
 * when the expression is made of plain nodes and PostgreSQL's own
 * functions (src/exprcache.c).  A reference to the whole row (host.*,
 * OLD.*, NEW.*) is a plain Var, but its evaluation keeps the row's
 * descriptor, made at its first use in the memory of that first
 * statement: a state kept past that statement reads the freed
 * descriptor.  Such states must be built for each statement, as
 * PostgreSQL builds them.  Statement after statement in one session, a
 * partial index whose predicate reads the whole row holds exactly the
 * rows that meet it, a CHECK constraint on the row's text refuses long
 * rows and lets short ones through, and a trigger WHEN (OLD.* IS DISTINCT
 * FROM NEW.*) fires for the updates that change the row and no others.
 */
BEGIN;
\ir include/helpers.psql
CREATE EXTENSION IF NOT EXISTS amcheck;
CREATE EXTENSION IF NOT EXISTS pageinspect;

SELECT plan(17);

SELECT * FROM fqtest.farm('t84', cores => '{8,8}') \gset

-- ---------------------------- a partial index whose predicate reads the row

/* hash_record is immutable and PostgreSQL's own: the predicate's state is kept */
CREATE INDEX t84_even ON frameq.host (id) WHERE hash_record(host) % 2 = 0;
SELECT lives_ok(format('UPDATE frameq.host SET epoch = epoch + 1 WHERE id IN (%s, %s)',
					   :host1, :host2), 'hosts updated under a whole-row predicate');
SELECT count(*) FROM pg_class \g /dev/null
SELECT lives_ok(format('UPDATE frameq.host SET epoch = epoch + 1 WHERE id IN (%s, %s)',
					   :host1, :host2), 'a second time');
SELECT length(string_agg(relname, ',')) FROM pg_class \g /dev/null
SELECT lives_ok(format('UPDATE frameq.host SET epoch = epoch + 1 WHERE id IN (%s, %s)',
					   :host1, :host2), 'a third');
SELECT length(string_agg(relname || relnamespace, ',')) FROM pg_class \g /dev/null
SELECT lives_ok(format('UPDATE frameq.host SET epoch = epoch + 1 WHERE id IN (%s, %s)',
					   :host1, :host2), 'a fourth');
SELECT is(fqtest.index_wrong('frameq.t84_even', format('host.id IN (%s, %s)', :host1, :host2)),
		  '0 extra, 0 missing',
		  'the index holds exactly the hosts that meet its predicate');
DROP INDEX frameq.t84_even;

-- ---------------------------------------- a CHECK constraint on the row's text

ALTER TABLE frameq.host ADD CONSTRAINT t84_short CHECK (length(host::text) < 2000);
SELECT lives_ok(format('UPDATE frameq.host SET tags = ''{a}'' WHERE id = %s', :host1),
	'a short row passes a whole-row constraint');
SELECT fqtest.throws_like(format('UPDATE frameq.host SET tags = array_fill(''x''::text, ARRAY[1500])'
								 ' WHERE id = %s', :host1),
	'23514', '%"t84_short"%', 'a long one is refused');
SELECT length(string_agg(relname, ',')) FROM pg_class \g /dev/null
SELECT lives_ok(format('UPDATE frameq.host SET tags = ''{b}'' WHERE id = %s', :host1),
	'a short row passes again');
SELECT fqtest.throws_like(format('UPDATE frameq.host SET tags = array_fill(''y''::text, ARRAY[1500])'
								 ' WHERE id = %s', :host1),
	'23514', '%"t84_short"%', 'and a long one is refused again');
SELECT lives_ok(format('UPDATE frameq.host SET tags = ''{c}'' WHERE id = %s', :host1),
	'and a short one passes a third time');
SELECT is((SELECT tags FROM frameq.host WHERE id = :host1), '{c}', 'the last short row is kept');
ALTER TABLE frameq.host DROP CONSTRAINT t84_short;

-- ------------------------------------- a WHEN condition that compares the rows

CREATE TABLE fqtest.t84_fired (host int);
CREATE FUNCTION fqtest.t84_note() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO fqtest.t84_fired VALUES (NEW.id);
	RETURN NULL;
END
$$;
CREATE TRIGGER t84_changed AFTER UPDATE ON frameq.host
	FOR EACH ROW WHEN (OLD.* IS DISTINCT FROM NEW.*) EXECUTE FUNCTION fqtest.t84_note();
SELECT lives_ok(format('UPDATE frameq.host SET epoch = epoch + 1 WHERE id = %s', :host1),
	'an update that changes the row');
SELECT lives_ok(format('UPDATE frameq.host SET epoch = epoch WHERE id = %s', :host1),
	'one that does not');
SELECT length(string_agg(relname, ',')) FROM pg_class \g /dev/null
SELECT lives_ok(format('UPDATE frameq.host SET epoch = epoch + 1 WHERE id = %s', :host1),
	'another that changes it');
SELECT lives_ok(format('UPDATE frameq.host SET epoch = epoch WHERE id = %s', :host1),
	'another that does not');
SELECT lives_ok(format('UPDATE frameq.host SET epoch = epoch + 1 WHERE id = %s', :host1),
	'a third that changes it');
SELECT is((SELECT count(*)::int FROM fqtest.t84_fired WHERE host = :host1), 3,
		  'the trigger fired for the three updates that changed the row, and only those');
DROP TRIGGER t84_changed ON frameq.host;

SELECT * FROM finish();
ROLLBACK;
