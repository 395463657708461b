#!/usr/bin/env bash
# Many clients book and complete frames against tight caps at once, while a
# sampler reads the committed procs over and over.  Afterwards check() must
# be clean, the sampler must never have seen a cap exceeded, and every cap
# must actually have been reached (or the test would prove nothing).
#
# Caps that bind: job A's max_cores (4), folder F1's max_cores (10, shared by
# jobs A and B), show S2's burst (6 cores), limit L's max_running (3).  The
# eight 4-core hosts offer 32 cores, more than all caps together, so only
# the caps stop bookings.
set -euo pipefail

: "${FRAMEQ_TEST_TMP:=$(mktemp -d)}"
DURATION=${FRAMEQ_CONCURRENCY_SECONDS:-15}
CLIENTS=${FRAMEQ_CONCURRENCY_CLIENTS:-8}
psql_q() { psql -X -q -v ON_ERROR_STOP=1 -At "$@"; }

psql_q <<'SQL'
SET client_min_messages = warning;
DROP SCHEMA IF EXISTS conc CASCADE;
-- a farm of its own: start from an empty frameq
DROP EXTENSION IF EXISTS frameq CASCADE;
CREATE EXTENSION frameq;
CREATE SCHEMA conc;
CREATE TABLE conc.host (n int PRIMARY KEY, name text, token text, epoch bigint);
CREATE TABLE conc.violation (seen_at timestamptz DEFAULT clock_timestamp(), what text);
CREATE TABLE conc.maxseen (what text PRIMARY KEY, cap int, seen int NOT NULL DEFAULT 0);

SELECT frameq.create_allocation('conc');
SELECT frameq.create_show('conc_s1');
SELECT frameq.create_show('conc_s2');
SELECT frameq.set_subscription('conc_s1', 'conc', 20, 1000);
SELECT frameq.set_subscription('conc_s2', 'conc', 20, 6);
SELECT frameq.create_folder('conc_s1', 'f1', 10);
SELECT frameq.create_limit('conc_l', 3);

INSERT INTO conc.host
SELECT n, 'conc_h' || n, frameq.register_host('conc_h' || n, 'conc', 4, 16e9::bigint), 0
  FROM generate_series(1, 8) n;
UPDATE conc.host h SET epoch = (frameq.attach(h.name, h.token, 'boot')).epoch;

CREATE TABLE conc.job (name text PRIMARY KEY, id bigint);
INSERT INTO conc.job VALUES
 ('A', frameq.submit('{"show":"conc_s1","folder":"f1","name":"A","priority":3,"max_cores":4,
   "layers":[{"name":"r","command":"true","range":"1-5000"}]}')),
 ('B', frameq.submit('{"show":"conc_s1","folder":"f1","name":"B","priority":2,
   "layers":[{"name":"r","command":"true","range":"1-5000"}]}')),
 ('D', frameq.submit('{"show":"conc_s1","name":"D","priority":1,
   "layers":[{"name":"r","command":"true","range":"1-5000","limits":["conc_l"]}]}')),
 ('C', frameq.submit('{"show":"conc_s2","name":"C",
   "layers":[{"name":"r","command":"true","range":"1-5000"}]}'));

INSERT INTO conc.maxseen (what, cap) VALUES
 ('job A cores', 400), ('folder f1 cores', 1000), ('show s2 burst', 600), ('limit L running', 3);

CREATE FUNCTION conc.book(n int) RETURNS bigint LANGUAGE sql AS $$
	SELECT count(*) FROM conc.host h, frameq.reserve(h.name, h.token, h.epoch, 4)
	 WHERE h.n = book.n
$$;

/* complete one of the host's procs: mostly successes, some failures (retries) */
CREATE FUNCTION conc.finish(n int) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
	h conc.host;
	p bigint;
BEGIN
	SELECT * INTO h FROM conc.host WHERE conc.host.n = finish.n;
	SELECT id INTO p FROM frameq.proc
	 WHERE host = (SELECT id FROM frameq.host WHERE name = h.name)
	 ORDER BY random() LIMIT 1;
	IF p IS NULL THEN
		RETURN 'none';
	END IF;
	RETURN frameq.complete(h.name, h.token, h.epoch, p,
						   CASE WHEN random() < 0.2 THEN 1 ELSE 0 END);
END
$$;

/* one snapshot of the committed procs: every cap must hold in it */
CREATE FUNCTION conc.sample() RETURNS void LANGUAGE plpgsql AS $$
DECLARE
	a int; f int; s int; l int;
BEGIN
	SELECT coalesce(sum(p.cores_cc) FILTER (WHERE p.job = (SELECT id FROM conc.job WHERE name = 'A')), 0),
		   coalesce(sum(p.cores_cc) FILTER (WHERE p.job IN (SELECT id FROM conc.job WHERE name IN ('A', 'B'))), 0),
		   coalesce(sum(p.cores_cc) FILTER (WHERE p.job = (SELECT id FROM conc.job WHERE name = 'C')), 0),
		   count(*) FILTER (WHERE p.job = (SELECT id FROM conc.job WHERE name = 'D'))
	  INTO a, f, s, l
	  FROM frameq.proc p;
	UPDATE conc.maxseen SET seen = greatest(seen, CASE what
		WHEN 'job A cores' THEN a WHEN 'folder f1 cores' THEN f
		WHEN 'show s2 burst' THEN s ELSE l END);
	INSERT INTO conc.violation (what)
	SELECT format('%s: %s > %s', what, seen, cap) FROM conc.maxseen WHERE seen > cap;
	INSERT INTO conc.violation (what)
	SELECT format('frame %s is running without a proc', id) FROM frameq.frame fr
	 WHERE fr.state = 'running' AND NOT EXISTS (SELECT 1 FROM frameq.proc p WHERE p.frame = fr.id);
END
$$;
SQL

cat > "$FRAMEQ_TEST_TMP/cycle.sql" <<'EOF2'
\set h random(1, 8)
SELECT conc.book(:h);
SELECT conc.finish(:h);
EOF2
echo 'SELECT conc.sample();' > "$FRAMEQ_TEST_TMP/sample.sql"

pgbench -n -c 1 -T "$DURATION" -f "$FRAMEQ_TEST_TMP/sample.sql" > "$FRAMEQ_TEST_TMP/sampler.log" 2>&1 &
sampler=$!
pgbench -n -c "$CLIENTS" -j 2 -T "$DURATION" -f "$FRAMEQ_TEST_TMP/cycle.sql" > "$FRAMEQ_TEST_TMP/clients.log" 2>&1 || true
wait "$sampler" || true
grep -E 'number of (transactions|failed)|tps' "$FRAMEQ_TEST_TMP/clients.log" || true

fail=0
report() { echo "not ok: $*"; fail=1; }

# pgbench counts an aborted client as a failure: a booking must never error
if grep -q 'aborted' "$FRAMEQ_TEST_TMP/clients.log" "$FRAMEQ_TEST_TMP/sampler.log"; then
	cat "$FRAMEQ_TEST_TMP/clients.log" "$FRAMEQ_TEST_TMP/sampler.log"
	report "a client aborted"
fi

violations=$(psql_q -c "SELECT count(*) FROM conc.violation")
[ "$violations" = 0 ] || { psql_q -c "SELECT * FROM conc.violation LIMIT 10"; report "$violations cap violations seen by the sampler"; }

samples=$(grep -oE 'number of transactions actually processed: [0-9]+' "$FRAMEQ_TEST_TMP/sampler.log" | grep -oE '[0-9]+$' || echo 0)
[ "${samples:-0}" -ge 10 ] || report "the sampler ran only ${samples:-0} times"

# every cap must have been reached at some sampled moment, or nothing was tested
unreached=$(psql_q -c "SELECT string_agg(format('%s reached %s of %s', what, seen, cap), '; ')
                         FROM conc.maxseen WHERE seen <> cap")
[ -z "$unreached" ] || report "caps never reached: $unreached"

completed=$(psql_q -c "SELECT count(*) FROM frameq.run WHERE reason = 'completed'
                          AND job IN (SELECT id FROM conc.job)")
[ "$completed" -ge 100 ] || report "only $completed completions"

broken=$(psql_q -c "SELECT count(*) FROM frameq.check()")
[ "$broken" = 0 ] || { psql_q -c "SELECT * FROM frameq.check()"; report "check() found $broken problems"; }

# and the ledger still agrees after a clean drain of every proc
psql_q -c "SELECT count(frameq._release(id, 'operator', 'waiting')) FROM frameq.proc p
            WHERE p.host IN (SELECT id FROM frameq.host WHERE name LIKE 'conc_h%')" >/dev/null
left=$(psql_q -c "SELECT count(*) FROM frameq.ledger() l
                   WHERE l.kind = 'job' AND l.id IN (SELECT id FROM conc.job)")
[ "$left" = 0 ] || report "ledger still holds $left of the test's jobs after every proc was released"
broken=$(psql_q -c "SELECT count(*) FROM frameq.check()")
[ "$broken" = 0 ] || report "check() found $broken problems after the drain"

echo "booked $(psql_q -c "SELECT count(*) FROM frameq.run WHERE job IN (SELECT id FROM conc.job)"), completed $completed, samples $samples"
exit $fail
