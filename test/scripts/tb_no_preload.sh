#!/usr/bin/env bash
# After a restart without shared_preload_libraries = 'frameq' (the
# extension installed, its shared memory absent), every entry point fails
# with SQLSTATE 55000 and says why; none reads the missing shared memory
# (before 0.2.0, check() and _ledger_pending() crashed the backend, and
# with it the whole cluster).  The preload is restored at the end.
#
# Restarts test/run's shared cluster twice.
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=../cluster.sh
source "$FRAMEQ_CLUSTER_LIB"
q() { psql -X -q -At -v ON_ERROR_STOP=1 "$@"; }

# the last line of postgresql.conf wins; restore() takes it out again
MARK='# tb_no_preload.sh'
restore() {
	sed -i "/$MARK\$/d" "$FRAMEQ_PGDATA/postgresql.conf"
	cluster_restart >/dev/null || true
}
trap restore EXIT

# a farm with one booked proc, so that complete() and friends have
# something real to name
q <<'SQL' >/dev/null
SET client_min_messages = warning;
DROP TABLE IF EXISTS np_host;
SELECT frameq.create_allocation('np');
SELECT frameq.create_show('np');
SELECT frameq.set_subscription('np', 'np', 10, 10);
CREATE TABLE np_host AS SELECT 'np1'::text AS name, frameq.register_host('np1', 'np', 4, 1000000000) AS token;
ALTER TABLE np_host ADD COLUMN epoch bigint, ADD COLUMN proc bigint, ADD COLUMN frame bigint;
UPDATE np_host h SET epoch = (frameq.attach(h.name, h.token, 'boot')).epoch;
SELECT frameq.submit('{"show":"np","name":"np","layers":[{"name":"r","command":"true","range":"1-4"}]}');
UPDATE np_host h SET proc = b.proc, frame = b.frame FROM frameq.reserve('np1', (SELECT token FROM np_host), (SELECT epoch FROM np_host), 1) b;
SQL
# (other tests' hosts may still hold procs in the shared database)
if [ "$(q -c "SELECT count(*) FROM frameq.proc p JOIN frameq.host h ON h.id = p.host WHERE h.name = 'np1'")" != 1 ]; then
	echo "not ok: the fixture did not book"
	q -c "SELECT name, state, down_reason, epoch, lease_expires_at > clock_timestamp() AS lease_current,
	             lease_granted, idle_cc FROM frameq.host" \
	  -c "SELECT * FROM frameq.worker_status()" \
	  -c "SELECT state, count(*) FROM frameq.frame GROUP BY 1" \
	  -c "SELECT name, setting FROM pg_settings WHERE name LIKE 'frameq.%'" \
	  -c "SELECT * FROM frameq.dispatch_queue" -c "SELECT * FROM frameq.ledger()" 2>&1
	exit 1
fi

echo "shared_preload_libraries = ''   $MARK" >>"$FRAMEQ_PGDATA/postgresql.conf"
cluster_restart >/dev/null
[ "$(q -c "SHOW shared_preload_libraries")" = "" ] || { echo "not ok: the preload is still set"; exit 1; }

fail=0
calls=(
	"SELECT * FROM frameq.check()"
	"SELECT * FROM frameq._ledger_pending()"
	"SELECT * FROM frameq.ledger()"
	"SELECT * FROM frameq.usage"
	"SELECT frameq._ledger_ensure()"
	"SELECT frameq._ledger_reset()"
	"SELECT * FROM frameq._dispatch_hints()"
	"SELECT frameq._frame_waiting(1, 1)"
	"SELECT frameq._in_quarantine()"
	"SELECT * FROM frameq.worker_status()"
	"SELECT frameq._lock_host(1, 0)"
	"SELECT * FROM np_host h, frameq.reserve(h.name, h.token, h.epoch)"
	"SELECT frameq.complete(h.name, h.token, h.epoch, h.proc, 0) FROM np_host h"
	"SELECT frameq.attach(h.name, h.token, 'boot2') FROM np_host h"
	"SELECT frameq.heartbeat(h.name, h.token, h.epoch, ARRAY[h.proc]) FROM np_host h"
	"SELECT frameq.kill_frame(h.frame, 'x') FROM np_host h"
	"SELECT frameq.confirm_host_dead('np1')"
	"SELECT frameq._release(h.proc, 'operator', 'waiting', false) FROM np_host h"
	"SELECT frameq._finish_job_if_done(1)"
	"DELETE FROM frameq.proc"
)
for sql in "${calls[@]}"; do
	out=$(psql -X -v ON_ERROR_STOP=1 -v VERBOSITY=verbose -c "$sql" 2>&1 || true)
	if grep -q 'ERROR:  55000: frameq must be loaded via shared_preload_libraries' <<<"$out"; then
		echo "ok - 55000: $sql"
	else
		echo "not ok - $sql:"
		sed 's/^/    /' <<<"$out" | head -5
		fail=1
	fi
done
# the server must still be the one we started: no backend crashed
if ! psql -X -At -c "SELECT 1" >/dev/null 2>&1; then
	echo "not ok - the server is down"
	fail=1
fi
if grep -Eq 'terminated by signal|server process .* was terminated|PANIC' "$FRAMEQ_LOG"; then
	echo "not ok - the server log shows a crash"
	fail=1
fi

trap - EXIT
restore
[ "$(q -c "SHOW shared_preload_libraries")" = "frameq" ] || { echo "not ok: the preload was not restored"; fail=1; }
q -c "SELECT count(*) FROM frameq.proc" >/dev/null || fail=1
q <<'SQL' >/dev/null || fail=1
SET client_min_messages = warning;
DROP TABLE np_host;
DROP EXTENSION frameq CASCADE;
CREATE EXTENSION frameq;
SQL
exit $fail
