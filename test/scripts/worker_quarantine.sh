#!/usr/bin/env bash
# The quarantine after every server start (doc/design.md, Fault model), on
# a cluster of its own with frameq.quarantine = on and a lease period of
#     lease_ttl * (1 + clock_drift) + lease_margin = 2 s * 1.05 + 1 s = 3.1 s
#
# 1. Fresh start: reserve books nothing until the quarantine is over, then
#    bookings work.
# 2. Plain restart after 3.6+ s of downtime, so both hosts' last renewal is
#    older than a whole lease period when the server comes back.  During the
#    quarantine (worker_status: quarantine_until = quarantine_start + 3.1 s,
#    in the future, leases counted from quarantine_start) the silent host
#    keeps its proc, its frame and its epoch, and reserve gives the beating
#    host nothing; the beating host's lease is re-armed (its heartbeats are
#    accepted).  After the quarantine the silent host is expired (host_lost,
#    not before quarantine_start + 3.1 s, within 1.5 s after) and the
#    beating host gets bookings.
# 3. cluster_crash_restart: a new quarantine starts; the silent host's
#    last_renewal_at is pushed an hour back during it, and still nothing is
#    expired or booked before it ends; afterwards the same as in 2.
#
# Needs python3-psycopg2 (Debian).
set -euo pipefail
# shellcheck source=worker_lib.bash
source "$(dirname "$0")/worker_lib.bash"
cd "$(dirname "$0")/../.."
need_debs python3-psycopg2

# a cluster of our own, not test/run's
own_cluster 54363 $'frameq.quarantine = on\nframeq.lease_ttl = 2s\nframeq.lease_margin = 1s\nframeq.clock_drift = 0.05\nlog_min_messages = log'
cluster_start >/dev/null

status=0
$PY - <<'PY' || status=$?
import time
import psycopg2
from fqtest import (attach, bail, check_clean, cluster_lib, create_farm, fail, finish, heartbeat, ok, register,
                    reserve, secs, submit)

TTL = 2.0
PERIOD = 2.0 * 1.05 + 1.0

def lib(cmd):
    """a function of test/cluster.sh on our cluster (its variables are exported)"""
    if db.c is not None:
        db.c.close()
        db.c = None
    cluster_lib(cmd)

class DB:
    def __init__(self):
        self.c = None
    def conn(self):
        if self.c is None or self.c.closed:
            self.c = psycopg2.connect("")
            self.c.autocommit = True
        return self.c
    def q(self, sql, *args):
        try:
            with self.conn().cursor() as cur:
                cur.execute(sql, args)
                return cur.fetchall() if cur.description else None
        except (psycopg2.OperationalError, psycopg2.InterfaceError):
            self.c = None       # the server went away under us
            raise
    def q1(self, sql, *args):
        return self.q(sql, *args)[0][0]
db = DB()
q, q1 = db.q, db.q1

if abs(secs(q, "frameq.lease_period()") - PERIOD) > 1e-6:
    fail("lease_period() is %s s, wanted %s" % (secs(q, "frameq.lease_period()"), PERIOD))

create_farm(q, "q")
submit(q, "q", "quarantine", "1-50")
S = register(q, "silent", "q", 16)
B = register(q, "beating", "q", 16)

def worker_status():
    return q("SELECT started, quarantine_start, quarantine_until, leases_since,"
             "       extract(epoch FROM quarantine_until - quarantine_start)::float8,"
             "       quarantine_until > clock_timestamp()"
             "  FROM frameq.worker_status()")[0]

# ------------------------------------------------- 1. right after the start
attach(q, S)
attach(q, B)
early = reserve(q, B)
if early:
    fail("reserve booked %d frames right after the server started" % len(early))
deadline = time.monotonic() + 20        # the first worker try fails: its database did not exist yet
while True:
    st = worker_status()
    if st[0] and not st[5]:
        break
    if time.monotonic() > deadline:
        bail("the first quarantine did not end within 20 s: %s" % (st,))
    heartbeat(q, S)
    heartbeat(q, B)
    got = reserve(q, B)
    # read the clock after reserve: booked and still in quarantine is wrong
    if got and q1("SELECT NOT started OR clock_timestamp() < quarantine_until FROM frameq.worker_status()"):
        fail("reserve booked during the first quarantine")
    time.sleep(0.2)
if not reserve(q, S) or len(B["procs"]) + len(reserve(q, B)) < 1:
    fail("no bookings after the first quarantine")
else:
    ok("nothing booked during the first quarantine; bookings work after it")
heartbeat(q, S)
heartbeat(q, B)

def watch_quarantine(phase, before_restart_ts, silent_epoch, silent_procs):
    """poll from the restart until the silent host is expired; check everything on the way"""
    st = None
    deadline = time.monotonic() + 20
    while True:                                  # the worker comes up
        try:
            st = worker_status()
            if st[0]:
                break
        except psycopg2.OperationalError:
            pass
        if time.monotonic() > deadline:
            fail("%s: worker_status().started never became true" % phase)
            return
        time.sleep(0.02)
    started, qstart, quntil, since, qlen, future = st
    if not future:
        fail("%s: the first worker_status() after the start shows no quarantine ahead: %s" % (phase, st))
    if abs(qlen - PERIOD) > 0.001 or since != qstart:
        fail("%s: quarantine %s .. %s (%.3f s), leases since %s; wanted a %.1f s quarantine and leases from its start"
             % (phase, qstart, quntil, qlen, since, PERIOD))
    if q1("SELECT %s::timestamptz > %s::timestamptz", qstart, before_restart_ts) is not True:
        fail("%s: the quarantine started at %s, before the restart (%s)" % (phase, qstart, before_restart_ts))
    if q1("SELECT %s::timestamptz < pg_postmaster_start_time()", qstart):
        fail("%s: the quarantine started before the postmaster did" % phase)
    ok("%s: worker up, quarantine %s .. +%.1f s" % (phase, qstart, qlen))

    in_q_samples = 0
    empty_reserves = 0
    beats = 0
    rearmed = False
    next_beat = 0.0
    released = None
    while True:
        # the beating host reports as soon as its lease has been re-armed
        if not rearmed:
            rearmed = q1("SELECT lease_expires_at > clock_timestamp() FROM frameq.host WHERE id = %s", B["id"])
        if rearmed and time.monotonic() >= next_beat:
            next_beat = time.monotonic() + 0.5
            try:
                if heartbeat(q, B):
                    fail("%s: heartbeat of the beating host returned kill orders" % phase)
                beats += 1
            except psycopg2.Error as e:
                fail("%s: heartbeat of the beating host refused: %s %s" % (phase, e.pgcode, e.pgerror.strip()))
        srow = q("SELECT h.state, h.epoch, (SELECT count(*) FROM frameq.proc p WHERE p.id = ANY(%s)),"
                 "       (SELECT count(*) FROM frameq.frame f JOIN frameq.proc p ON p.frame = f.id"
                 "         WHERE p.id = ANY(%s) AND f.state = 'running')"
                 "  FROM frameq.host h WHERE h.id = %s", silent_procs, silent_procs, S["id"])[0]
        holds = srow == ("up", silent_epoch, len(silent_procs), len(silent_procs))
        # the clock is read after the state: a state seen while in_q is still true was in the quarantine
        now_srv, in_q, past_end = q("SELECT clock_timestamp(), clock_timestamp() < %s::timestamptz,"
                                    "       clock_timestamp() > %s::timestamptz + interval '3 s'",
                                    quntil, quntil)[0]
        if in_q:
            in_q_samples += 1
            if not holds:
                fail("%s: during the quarantine the silent host changed: %s" % (phase, srow))
                return
            if rearmed:
                room = q1("SELECT idle_cc >= 100 FROM frameq.host WHERE id = %s", B["id"])
                got = reserve(q, B)
                if not got and room:
                    empty_reserves += 1     # it had room, and got nothing
                elif q1("SELECT clock_timestamp() < %s::timestamptz", quntil):
                    fail("%s: reserve booked %d frames during the quarantine (quarantine until %s)"
                         % (phase, len(got), quntil))
        elif not holds:
            released = now_srv
            break
        if past_end:
            break
        time.sleep(0.05)
    print("%s: %d polls in the quarantine, %d empty reserves, %d heartbeats accepted"
          % (phase, in_q_samples, empty_reserves, beats), flush=True)
    if in_q_samples < 20 or empty_reserves < 10 or beats < 3:
        fail("%s: too few samples in the quarantine to say anything" % phase)
    if released is None:
        fail("%s: the silent host was not expired within 3 s after the quarantine" % phase)
        return
    rows = q("SELECT r.reason, f.state, extract(epoch FROM r.ended_at - %s::timestamptz)::float8"
             "  FROM frameq.run r JOIN frameq.frame f ON f.id = r.frame WHERE r.proc = ANY(%s)",
             qstart, silent_procs)
    for reason, fstate, after_start in rows:
        if reason != "host_lost" or fstate != "waiting":
            fail("%s: silent host's run %s / frame %s, wanted host_lost / waiting" % (phase, reason, fstate))
        if after_start < PERIOD:
            fail("%s: silent host released %.3f s after the start, inside the quarantine" % (phase, after_start))
        elif after_start > PERIOD + 1.5:
            fail("%s: silent host released %.3f s after the start, over 1.5 s after the quarantine"
                 % (phase, after_start))
        else:
            ok("%s: silent host released %.3f s after the start (quarantine %.1f s)" % (phase, after_start, PERIOD))
    if len(rows) != len(silent_procs):
        fail("%s: %d of %d procs of the silent host have an ended run" % (phase, len(rows), len(silent_procs)))
    h = q("SELECT state, down_reason, epoch FROM frameq.host WHERE id = %s", S["id"])[0]
    if h != ("down", "lease_lost", silent_epoch + 1):
        fail("%s: silent host is %s, wanted down / lease_lost / epoch %d" % (phase, h, silent_epoch + 1))
    heartbeat(q, B)
    got = reserve(q, B, 2)
    if not got:
        fail("%s: no booking for the beating host after the quarantine" % phase)
    else:
        ok("%s: the beating host booked %d frames after the quarantine" % (phase, len(got)))
    check_clean(q, "%s: check()" % phase)

# ------------------------------------------------- 2. plain restart, long downtime
heartbeat(q, S)
heartbeat(q, B)
renewed = q1("SELECT max(last_renewal_at) FROM frameq.host")
silent_epoch, silent_procs = S["epoch"], list(S["procs"])
before = q1("SELECT clock_timestamp()")
lib('_frameq_pg_ctl -w -m fast stop >/dev/null')
# The scenario, not a race: the server stays down until both hosts' last
# renewal is more than a whole lease period old.
time.sleep(PERIOD + 0.5)
lib('cluster_start_existing')
old = q1("SELECT extract(epoch FROM clock_timestamp() - %s::timestamptz)::float8", renewed)
print("restart: last renewals are %.2f s old when the server is back" % old, flush=True)
if old <= PERIOD:
    fail("the downtime was too short to mean anything")
watch_quarantine("restart", before, silent_epoch, silent_procs)

# ------------------------------------------------- 3. crash restart
attach(q, S)                 # back up (it was down only for its lost lease)
if not reserve(q, S):
    fail("the silent host got nothing after attaching again")
heartbeat(q, S)
heartbeat(q, B)
silent_epoch, silent_procs = S["epoch"], list(S["procs"])
before = q1("SELECT clock_timestamp()")
lib('cluster_crash_restart')
# its last renewal an hour ago: only the quarantine keeps its lease now
n = q1("WITH u AS (UPDATE frameq.host SET last_renewal_at = clock_timestamp() - interval '1 hour'"
       "            WHERE id = %s RETURNING 1) SELECT count(*) FROM u", S["id"])
st = worker_status()
if n != 1 or (st[0] and not st[5]):
    fail("could not age the silent host's renewal inside the quarantine (%s, %s)" % (n, st))
watch_quarantine("crash restart", before, silent_epoch, silent_procs)

finish()
PY
if [[ $status -ne 0 ]]; then
	echo "--- frameq lines of the server log ---"
	grep -E 'frameq|FATAL|PANIC' "$FRAMEQ_LOG" | tail -n 30
fi
exit $status
