#!/usr/bin/env bash
# A role with no frameq grants holds pg_advisory_lock(18001, <host id>)
# (and the one-key form) in an open session: that used to be frameq's host
# lock, and stalled the worker and the host.  Now the host lock is one no
# SQL function can name, so:
#  - the host's attach, reserve and heartbeat do not wait for the squatter;
#  - the worker still expires the squatted host's lapsed lease and that of
#    a host behind it (a higher id), both within the lease period plus two
#    worker rounds.
#
# Runs on test/run's shared cluster; the settings it changes are reset and
# the role dropped on exit.  Needs python3-psycopg2 (Debian).
set -euo pipefail

# shellcheck source=worker_lib.bash
source "$(dirname "$0")/worker_lib.bash"
need_debs python3-psycopg2

restore() {
	psql -X -q -At -c "ALTER SYSTEM RESET frameq.lease_ttl" -c "ALTER SYSTEM RESET frameq.lease_margin" \
		-c "ALTER SYSTEM RESET frameq.clock_drift" -c "SELECT pg_reload_conf()" \
		-c "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = 'tb_squatter'" \
		>/dev/null 2>&1 || true
	sleep 0.2
	psql -X -q -At -c "DROP ROLE IF EXISTS tb_squatter" >/dev/null 2>&1 || true
}
trap restore EXIT

$PY - <<'PY'
import os, random, time
from fqtest import (bail, check_clean, connect, create_farm, fail, finish, heartbeat, ok, queries,
                    register, attach, reserve, set_and_reload, submit, wait_for_worker)

db = connect()
q, q1 = queries(db)
wait_for_worker(q)
set_and_reload(q, "frameq.lease_ttl", "1s", bail)
set_and_reload(q, "frameq.lease_margin", "0", bail)
set_and_reload(q, "frameq.clock_drift", "0", bail)
PERIOD = 1.0

sfx = "%d_%d" % (os.getpid(), random.randrange(1 << 30))
alloc = "tbsq_" + sfx
create_farm(q, alloc)
submit(q, alloc, "sq", "1-8")
S = register(q, "tbsq_squatted_" + sfx, alloc, 4)
O = register(q, "tbsq_other_" + sfx, alloc, 4)
if not S["id"] < O["id"]:
    bail("setup: the squatted host must come first in the worker's round")

q("DROP ROLE IF EXISTS tb_squatter")
q("CREATE ROLE tb_squatter LOGIN")
sq = connect(user="tb_squatter")
sq_q, sq_q1 = queries(sq)
sq_q("SELECT pg_advisory_lock(18001, %s), pg_advisory_lock(%s::bigint)", S["id"], S["id"])
sq_q("SELECT pg_advisory_lock(18001, %s)", O["id"])
if q1("SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid"
      " WHERE a.usename = 'tb_squatter' AND l.locktype = 'advisory' AND l.granted") != 3:
    bail("setup: the squatter does not hold its three advisory locks")

def timed(label, fn):
    t = time.monotonic()
    r = fn()
    dt = time.monotonic() - t
    if dt > 0.5:
        fail("%s took %.2f s with the squatter holding the old host lock" % (label, dt))
    else:
        ok("%s did not wait for the squatter (%.3f s)" % (label, dt))
    return r

timed("attach", lambda: attach(q, S))
got = timed("reserve", lambda: reserve(q, S, 1))
if len(got) != 1:
    fail("reserve with the squatter holding the old host lock booked %d frames, wanted 1" % len(got))
timed("heartbeat", lambda: heartbeat(q, S))
attach(q, O)
reserve(q, O, 1)
heartbeat(q, O)
renewed = time.monotonic()

# both hosts fall silent: both must expire although the squatter stays
deadline = renewed + PERIOD + 3.0
while time.monotonic() < deadline:
    left = q1("SELECT count(*) FROM frameq.host WHERE id IN (%s, %s) AND lease_expires_at IS NOT NULL",
              S["id"], O["id"])
    if left == 0:
        break
    time.sleep(0.05)
rows = q("SELECT id, state, down_reason, epoch, (SELECT count(*) FROM frameq.proc p WHERE p.host = h.id)"
         "  FROM frameq.host h WHERE id IN (%s, %s) ORDER BY id", S["id"], O["id"])
want = [(S["id"], "down", "lease_lost", S["epoch"] + 1, 0), (O["id"], "down", "lease_lost", O["epoch"] + 1, 0)]
if rows != want:
    fail("%.1f s after the last renewals, with the squatter still there: %s, wanted %s"
         % (time.monotonic() - renewed, rows, want))
else:
    ok("the worker expired both hosts' leases and released their procs with the squatter still there")
if sq_q1("SELECT 1") != 1:
    fail("the squatter's session is gone: it must have been left alone")
check_clean(q)
sq.close()
finish()
PY
