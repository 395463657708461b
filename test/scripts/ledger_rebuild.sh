#!/usr/bin/env bash
# The ledger lives in shared memory, which a crash loses.  After a crash
# restart the first booking must rebuild it from the proc table, so caps
# that were full before the crash are still full after it, even when many
# clients start booking at the same moment; check() is clean afterwards.
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=../cluster.sh
source test/cluster.sh
: "${FRAMEQ_TEST_TMP:=$(mktemp -d)}"
q() { psql -X -q -At -v ON_ERROR_STOP=1 "$@"; }

q <<'SQL' >/dev/null
SET client_min_messages = warning;
DROP EXTENSION IF EXISTS frameq CASCADE;
CREATE EXTENSION frameq;
DROP TABLE IF EXISTS lr_host;
SELECT frameq.create_allocation('lr');
SELECT frameq.create_show('lr');
SELECT frameq.set_subscription('lr', 'lr', 10, 100);
SELECT frameq.create_limit('lr_lic', 4);
CREATE TABLE lr_host (n int PRIMARY KEY, name text, token text, epoch bigint);
INSERT INTO lr_host SELECT g, 'lr' || g, frameq.register_host('lr' || g, 'lr', 8, 1000000000), 0
  FROM generate_series(1, 8) g;
UPDATE lr_host h SET epoch = (frameq.attach(h.name, h.token, 'boot')).epoch;
ALTER SYSTEM SET frameq.lease_ttl = '3600s';
SELECT pg_reload_conf();
SELECT frameq.submit('{"show":"lr","name":"capped","max_cores":3,
  "layers":[{"name":"r","command":"true","range":"1-100"}]}');
SELECT frameq.submit('{"show":"lr","name":"licensed",
  "layers":[{"name":"r","command":"true","range":"1-100","limits":["lr_lic"]}]}');
SQL
# fill both caps before the crash
q -c "SELECT count(*) FROM lr_host h, frameq.reserve(h.name, h.token, h.epoch) WHERE h.n = 1" >/dev/null
q -c "SELECT count(*) FROM lr_host h, frameq.reserve(h.name, h.token, h.epoch) WHERE h.n = 2" >/dev/null
before=$(q -c "SELECT count(*) FROM frameq.proc")
[ "$before" = 7 ] || { echo "not ok: expected 3 + 4 procs before the crash, got $before"; exit 1; }

cluster_crash_restart >/dev/null
q -c "SELECT count(*) FROM frameq.ledger()" >/dev/null 2>&1 || true   # may rebuild; not required

# many clients book at once right after the restart; none may get anything
cat > "$FRAMEQ_TEST_TMP/book.sql" <<'EOF2'
SELECT count(*) FROM lr_host h, frameq.reserve(h.name, h.token, h.epoch) WHERE h.n = :client_id + 1;
EOF2
pgbench -n -c 8 -t 20 -f "$FRAMEQ_TEST_TMP/book.sql" > "$FRAMEQ_TEST_TMP/pgbench.log" 2>&1 || true
fail=0
grep -q 'number of failed transactions: 0' "$FRAMEQ_TEST_TMP/pgbench.log" ||
	{ cat "$FRAMEQ_TEST_TMP/pgbench.log"; echo "not ok: bookings failed after the restart"; fail=1; }
after=$(q -c "SELECT count(*) FROM frameq.proc")
[ "$after" = 7 ] || { echo "not ok: $after procs after the restart: a full cap was booked past"; fail=1; }
ledger=$(q -c "SELECT string_agg(format('%s %s: %s cc, %s running', kind, id, used_cc, running), '; ' ORDER BY kind, id)
               FROM frameq.ledger() WHERE kind IN ('job', 'limit')")
echo "ledger after restart: $ledger"
[ "$ledger" = "job 1: 300 cc, 3 running; job 2: 400 cc, 4 running; limit 1: 400 cc, 4 running" ] ||
	{ echo "not ok: the rebuilt ledger is wrong"; fail=1; }
bad=$(q -c "SELECT count(*) FROM frameq.check()")
[ "$bad" = 0 ] || { q -c "SELECT * FROM frameq.check()"; echo "not ok: check() found $bad problems"; fail=1; }

# releases after the rebuild free exactly what they held
q -c "SELECT frameq.complete(h.name, h.token, h.epoch, p.id, 0)
        FROM frameq.proc p JOIN lr_host h ON h.name = (SELECT name FROM frameq.host WHERE id = p.host)
       WHERE p.job = 1 LIMIT 1" >/dev/null
got=$(q -c "SELECT count(*) FROM lr_host h, frameq.reserve(h.name, h.token, h.epoch) WHERE h.n = 3")
[ "$got" = 1 ] || { echo "not ok: after one release the job cap let $got frames through, not 1"; fail=1; }
bad=$(q -c "SELECT count(*) FROM frameq.check()")
[ "$bad" = 0 ] || { echo "not ok: check() found $bad problems at the end"; fail=1; }
q -c "ALTER SYSTEM RESET frameq.lease_ttl" -c "SELECT pg_reload_conf()" >/dev/null
exit $fail
