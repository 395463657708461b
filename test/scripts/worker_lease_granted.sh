#!/usr/bin/env bash
# A lease lasts what it was granted for.  An agent kills its renders when
# the lease_ttl its last attach or heartbeat returned has run out; lowering
# frameq.lease_ttl afterwards must not let the worker release its frames
# sooner, nor a server that starts with a lower lease_ttl (a restore, a
# promoted standby with other settings) end its quarantine sooner.
#
# On a cluster of its own (lease_margin 1 s, clock_drift 0.05), a host
# granted a 6 s lease, whose lease period is therefore 6 * 1.05 + 1 = 7.3 s:
#
# 1. lease_ttl lowered to 1 s by a reload (its period 2.05 s), and the
#    host renewed once more, granted 1 s: it keeps its proc, its frame
#    running and its epoch until 7.3 s after its renewal at 6 s (server
#    clock), and is expired within 1.5 s after that.
# 2. the server restarted with lease_ttl = 1 s while the host holds its 6 s
#    lease: the quarantine lasts 7.3 s, not 2.05 s (worker_status), reserve
#    books nothing in it, the host's lease is re-armed for 6 s from the
#    start, and the silent host keeps its proc until the quarantine ends.
#
# Without host.lease_granted both fail: the host is expired about 2 s after
# its renewal, and the quarantine ends after 2.05 s.
#
# Needs python3-psycopg2 (Debian).
set -euo pipefail
# shellcheck source=worker_lib.bash
source "$(dirname "$0")/worker_lib.bash"
cd "$(dirname "$0")/../.."
need_debs python3-psycopg2

own_cluster 54368 $'frameq.quarantine = on\nframeq.lease_ttl = 2s\nframeq.lease_margin = 1s\nframeq.clock_drift = 0.05\nlog_min_messages = log'
cluster_start >/dev/null

status=0
$PY - <<'PY' || status=$?
import time
import psycopg2
from fqtest import (attach, bail, check_clean, cluster_lib, create_farm, fail, finish, heartbeat, ok,
                    register, reserve, secs, set_and_reload, submit)

GRANTED = 6.0
LONG_PERIOD = GRANTED * 1.05 + 1.0     # 7.3 s
SHORT_PERIOD = 1.0 * 1.05 + 1.0        # 2.05 s

conn = None
def q(sql, *args):
    global conn
    for attempt in range(100):
        try:
            if conn is None or conn.closed:
                conn = psycopg2.connect("")
                conn.autocommit = True
            with conn.cursor() as cur:
                cur.execute(sql, args)
                return cur.fetchall() if cur.description else None
        except psycopg2.OperationalError:
            conn = None          # the server is (re)starting
            time.sleep(0.1)
    bail("the server did not come back")
def q1(sql, *args):
    return q(sql, *args)[0][0]

def quarantine():
    return q("SELECT started, clock_timestamp() < quarantine_until,"
             "       extract(epoch FROM quarantine_until - quarantine_start)::float8, quarantine_until"
             "  FROM frameq.worker_status()")[0]

def wait_quarantine_over(what):
    deadline = time.monotonic() + 30
    while True:
        st = quarantine()
        if st[0] and not st[1]:
            return
        if time.monotonic() > deadline:
            bail("%s: the quarantine did not end within 30 s: %s" % (what, st))
        time.sleep(0.1)

def lease_of(h):
    return q("SELECT extract(epoch FROM lease_granted)::float8, epoch, state FROM frameq.host WHERE id = %s",
             h["id"])[0]

def silent_holds(h, epoch, procs):
    row = q("SELECT h.state, h.epoch,"
            "       (SELECT count(*) FROM frameq.proc p WHERE p.id = ANY(%s)),"
            "       (SELECT count(*) FROM frameq.frame f JOIN frameq.proc p ON p.frame = f.id"
            "         WHERE p.id = ANY(%s) AND f.state = 'running')"
            "  FROM frameq.host h WHERE h.id = %s", procs, procs, h["id"])[0]
    return row == ("up", epoch, len(procs), len(procs))

def watch_silent(what, h, renewed, period, min_samples=20):
    """poll until the silent host is expired: never before renewed + period"""
    epoch, procs = h["epoch"], list(h["procs"])
    samples = 0
    while True:
        holds = silent_holds(h, epoch, procs)
        # the clock after the state: a state seen before the end was held before it
        age = q1("SELECT extract(epoch FROM clock_timestamp() - %s::timestamptz)::float8", renewed)
        if not holds:
            break
        samples += 1
        if age > period + 1.5:
            fail("%s: the silent host still holds its proc %.2f s after its renewal (period %.2f s)"
                 % (what, age, period))
            return
        time.sleep(0.05)
    rows = q("SELECT r.reason, extract(epoch FROM r.ended_at - %s::timestamptz)::float8"
             "  FROM frameq.run r WHERE r.proc = ANY(%s)", renewed, procs)
    if samples < min_samples or len(rows) != len(procs):
        fail("%s: %d samples, %d of %d runs ended" % (what, samples, len(rows), len(procs)))
        return
    for reason, after in rows:
        if reason != "host_lost":
            fail("%s: run ended as %s, wanted host_lost" % (what, reason))
        elif after < period:
            fail("%s: released %.2f s after the last renewal, before its lease period of %.2f s"
                 % (what, after, period))
        elif after > period + 1.5:
            fail("%s: released %.2f s after the last renewal, over 1.5 s past %.2f s" % (what, after, period))
        else:
            ok("%s: released %.2f s after the last renewal (the granted lease's period %.2f s; the current "
               "lease_ttl's %.2f s)" % (what, after, period, SHORT_PERIOD))

wait_quarantine_over("fresh start")
create_farm(q, "g")
submit(q, "g", "granted", "1-100")
L = register(q, "long", "g", 4)
B = register(q, "beating", "g", 4)

# ------------------------------------------------- 1. lease_ttl lowered by a reload
set_and_reload(q, "frameq.lease_ttl", "6s", bail)
attach(q, L)
attach(q, B)
if len(reserve(q, L, 2)) != 2:
    bail("setup: the long host did not book 2 frames")
heartbeat(q, L)
renewed = q1("SELECT last_renewal_at FROM frameq.host WHERE id = %s", L["id"])
if lease_of(L)[0] != GRANTED:
    fail("the heartbeat recorded a lease of %s s, wanted %s" % (lease_of(L)[0], GRANTED))
set_and_reload(q, "frameq.lease_ttl", "1s", bail)
# the host renews once at the lower ttl, and falls silent: its agent's
# renders still live to the 6 s grant's deadline (a supervisor never moves
# a deadline earlier, and this answer could have been lost on its way)
granted_now = q1("SELECT extract(epoch FROM lease_ttl)::float8 FROM frameq.heartbeat(%s, %s, %s, %s::bigint[])",
                 L["name"], L["token"], L["epoch"], L["procs"])
if granted_now != 1.0:
    fail("after the reload the heartbeat was granted %s s, wanted 1" % granted_now)
else:
    ok("after lowering lease_ttl to 1 s, the next heartbeat is granted 1 s")
kept = lease_of(L)[0]
if not GRANTED - 0.5 < kept <= GRANTED:
    fail("the renewal at 1 s recorded a lease of %s s: it must cover what is left of the 6 s grant" % kept)
watch_silent("lease_ttl lowered", L, renewed, LONG_PERIOD)
check_clean(q, "after the lowered lease_ttl")

# ------------------------------------------------- 2. restart with a lower lease_ttl
set_and_reload(q, "frameq.lease_ttl", "6s", bail)
attach(q, L)                                   # back from lease_lost
attach(q, B)                                   # silent since its 1 s lease: lost too
if len(reserve(q, L, 2)) != 2:
    bail("setup: the long host did not book 2 frames again")
heartbeat(q, L)
renewed = q1("SELECT last_renewal_at FROM frameq.host WHERE id = %s", L["id"])
q("ALTER SYSTEM SET frameq.lease_ttl = '1s'")  # read at the next start
if conn is not None:
    conn.close()
cluster_lib('_frameq_pg_ctl -w -m fast stop >/dev/null')
cluster_lib('cluster_start_existing')
if abs(secs(q, "frameq.lease_period()") - SHORT_PERIOD) > 1e-6:
    fail("after the restart lease_period() is %s, wanted %s" % (secs(q, "frameq.lease_period()"), SHORT_PERIOD))
deadline = time.monotonic() + 20
while not quarantine()[0]:
    if time.monotonic() > deadline:
        bail("the worker did not start within 20 s")
    time.sleep(0.05)
# the quarantine holds until the worker has read the longest lease, so
# reserve is tried right away and throughout
booked_in_quarantine = 0
tries = 0
length = None
while True:
    st = quarantine()
    length = st[2]
    if not st[1]:
        break
    try:
        got = q("SELECT count(*) FROM frameq.reserve(%s, %s, %s, 1)", B["name"], B["token"], B["epoch"])[0][0]
    except psycopg2.Error as e:
        got = 0                                # refused (its lease is being re-armed): nothing booked
    tries += 1
    if got and q1("SELECT clock_timestamp() < %s::timestamptz", st[3]):
        booked_in_quarantine += got
    time.sleep(0.1)
if abs(length - LONG_PERIOD) > 0.001:
    fail("restarted with lease_ttl 1 s while a host holds a 6 s lease: the quarantine lasted %.3f s, wanted %.2f s"
         % (length, LONG_PERIOD))
elif booked_in_quarantine or tries < 20:
    fail("restart: %d frames booked in the quarantine (%d tries)" % (booked_in_quarantine, tries))
else:
    ok("restarted with lease_ttl 1 s: the quarantine covers the 6 s lease held (%.2f s); %d reserves in it booked "
       "nothing" % (length, tries))
# re-armed at the start by the ttl it was granted, not the current 1 s (which
# would lapse before its agent's next renewal)
rearmed = q1("SELECT extract(epoch FROM h.lease_expires_at - w.quarantine_start)::float8"
             "  FROM frameq.host h, frameq.worker_status() w WHERE h.id = %s", L["id"])
if not GRANTED - 0.1 <= rearmed <= GRANTED + 1.0:
    fail("restart: the long host's lease was re-armed to %.2f s after the start, wanted %.0f s" % (rearmed, GRANTED))
else:
    ok("restart: the long host's lease re-armed to its granted %.0f s (%.2f s after the start)" % (GRANTED, rearmed))
# the silent host: its lease counted from the start, by the lease it was granted
start = q1("SELECT quarantine_start FROM frameq.worker_status()")
watch_silent("restart", L, start, LONG_PERIOD, 1)
q("ALTER SYSTEM RESET frameq.lease_ttl")
q("SELECT pg_reload_conf()")
check_clean(q, "after the restart")
finish()
PY
if [[ $status -ne 0 ]]; then
	echo "--- frameq lines of the server log ---"
	grep -E 'frameq|FATAL|PANIC' "$FRAMEQ_LOG" | tail -n 30
fi
cluster_stop >/dev/null 2>&1 || true
exit $status
