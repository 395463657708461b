#!/usr/bin/env bash
# The background worker is primary-only, and a promoted standby quarantines
# first.  Own primary (test/cluster.sh on its own port) and a streaming
# standby made with pg_basebackup -R (same postgresql.conf: frameq preloaded,
# frameq.database set, quarantine on, lease period 2 s * 1.05 + 1 s = 3.1 s;
# its own port and socket dir; started with runuser -u postgres).
#
# On the standby, once it has replayed the farm: no frameq worker in
# pg_stat_activity (sampled for 2 s), worker_status().started is false,
# and reserve (and heartbeat) fail with a read-only error (SQLSTATE 25006).
#
# Failover: the primary stops, and stays down until the silent host's last
# renewal is older than a whole lease period; the standby is promoted.  The
# worker starts on the new primary (started true, quarantine_until =
# quarantine_start + 3.1 s, still ahead, quarantine_start after the
# promotion began); during the quarantine the silent host keeps its proc and
# epoch and reserve gives nothing; the beating host's lease is re-armed and
# its heartbeats are accepted.  Then leases are enforced: the silent host is
# released (host_lost) no earlier than quarantine_start + 3.1 s and within
# 1.5 s after, and the beating host books again.  Both clusters are removed.
#
# Needs python3-psycopg2 (Debian).
set -euo pipefail
# shellcheck source=worker_lib.bash
source "$(dirname "$0")/worker_lib.bash"
cd "$(dirname "$0")/../.."
need_debs python3-psycopg2

own_cluster 54365 $'frameq.quarantine = on\nframeq.lease_ttl = 2s\nframeq.lease_margin = 1s\nframeq.clock_drift = 0.05\nlog_min_messages = log'
cluster_start >/dev/null

export STANDBY_PORT=54366
export STANDBY_DIR="$FRAMEQ_CLUSTER_DIR/standby"     # removed with the primary's dir
export STANDBY_DATA="$STANDBY_DIR/data" STANDBY_LOG="$STANDBY_DIR/server.log"
mkdir -p "$STANDBY_DIR"
chown postgres: "$STANDBY_DIR"
chmod 700 "$STANDBY_DIR"

standby_ctl() {
	(cd "$STANDBY_DIR" && runuser -u postgres -- "$FRAMEQ_PGBIN/pg_ctl" -D "$STANDBY_DATA" -l "$STANDBY_LOG" "$@")
}
export -f standby_ctl
cleanup() {
	if [[ -f "$STANDBY_DATA/postmaster.pid" ]]; then
		standby_ctl -w -m fast stop >/dev/null 2>&1 || standby_ctl -w -m immediate stop >/dev/null 2>&1 || true
	fi
	cluster_stop
}
trap cleanup EXIT

status=0
$PY - <<'PY' || status=$?
import os, threading, time
import psycopg2
import fqtest
from fqtest import (attach, bail, check_clean, cluster_lib, create_farm, fail, finish, heartbeat, ok, queries,
                    register, reserve, submit, wait_for)

PERIOD = 2.0 * 1.05 + 1.0

def connect(standby=False):
    """a new autocommit session on the primary, or on the standby"""
    if standby:
        return fqtest.connect(host=os.environ["STANDBY_DIR"], port=os.environ["STANDBY_PORT"],
                              user="postgres", dbname=os.environ["PGDATABASE"])
    return fqtest.connect()

prim = connect()
q, q1 = queries(prim)
create_farm(q, "sb")
submit(q, "sb", "failover", "1-50")
S = register(q, "silent", "sb", 4)
B = register(q, "beating", "sb", 4)

# the primary's own first quarantine (its worker's first try fails: no database yet)
attach(q, S)
attach(q, B)
deadline = time.monotonic() + 20
while not q1("SELECT started AND clock_timestamp() > quarantine_until FROM frameq.worker_status()"):
    if time.monotonic() > deadline:
        bail("the primary's first quarantine did not end within 20 s")
    heartbeat(q, S)
    heartbeat(q, B)
    time.sleep(0.2)
heartbeat(q, S)
heartbeat(q, B)
if not reserve(q, S) or not reserve(q, B):
    bail("setup: no bookings on the primary")

# ------------------------------------------------------------ the standby
# the agents renew on their own connection while the base backup is taken
# and the standby starts: on a loaded machine that takes longer than the
# 3.1 s lease period
beats_done = threading.Event()
def keep_renewing():
    bq, _ = queries(connect())
    while not beats_done.wait(0.3):
        heartbeat(bq, S)
        heartbeat(bq, B)
beater = threading.Thread(target=keep_renewing)
beater.start()
try:
    cluster_lib('cd "$STANDBY_DIR" && runuser -u postgres -- "$FRAMEQ_PGBIN/pg_basebackup" -h "$PGHOST" -p "$PGPORT" '
                '-U postgres -D "$STANDBY_DATA" -R -X stream -c fast --no-sync')
    with open(os.path.join(os.environ["STANDBY_DATA"], "postgresql.conf"), "a") as f:
        f.write("\n# ---- the standby of worker_standby.sh ----\nport = %s\nunix_socket_directories = '%s'\n"
                % (os.environ["STANDBY_PORT"], os.environ["STANDBY_DIR"]))
    cluster_lib('standby_ctl -w start >/dev/null')
finally:
    beats_done.set()
    beater.join()
sb = connect(standby=True)
sq, sq1 = queries(sb)
if sq1("SELECT pg_is_in_recovery()") is not True:
    bail("the standby is not in recovery")
heartbeat(q, S)
heartbeat(q, B)
lsn = q1("SELECT pg_current_wal_lsn()")
wait_for(lambda: sq1("SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", lsn),
         30, 0.05, "the standby did not replay up to %s within 30 s" % lsn)
if sq1("SELECT count(*) FROM frameq.proc") != 2:
    fail("the standby does not see the two procs")

def beat_and_replay():
    """renew both leases on the primary and wait until the standby has replayed that"""
    heartbeat(q, S)
    heartbeat(q, B)
    lsn = q1("SELECT pg_current_wal_lsn()")
    wait_for(lambda: sq1("SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", lsn),
             10, 0.01, "the standby did not replay up to %s within 10 s" % lsn)

# no worker on the standby, and it books nothing (the agents keep renewing
# on the primary meanwhile)
t_end = time.monotonic() + 2.0
samples = 0
while time.monotonic() < t_end:
    w = sq("SELECT pid, state FROM pg_stat_activity WHERE backend_type = 'frameq worker'")
    if w:
        fail("a frameq worker runs on the standby: %s" % w)
        break
    samples += 1
    if samples % 5 == 0:
        beat_and_replay()
    time.sleep(0.1)
st = sq("SELECT started, quarantine_until FROM frameq.worker_status()")[0]
if st != (False, None):
    fail("worker_status() on the standby: %s, wanted not started" % (st,))
else:
    ok("no frameq worker on the standby (%d samples over 2 s), worker_status().started false" % samples)
beat_and_replay()     # so that the lease the standby sees is current
try:
    got = sq("SELECT * FROM frameq.reserve(%s, %s, %s, 1)", B["name"], B["token"], B["epoch"])
    fail("reserve on the standby returned %d rows instead of failing read-only" % len(got))
except psycopg2.Error as e:
    if e.pgcode != "25006":
        fail("reserve on the standby: %s %s, wanted 25006 (read-only)" % (e.pgcode, e.pgerror.strip()))
    else:
        ok("reserve on the standby fails: %s" % e.pgerror.strip().splitlines()[0])

beat_and_replay()
try:
    sq("SELECT * FROM frameq.heartbeat(%s, %s, %s, %s::bigint[])", B["name"], B["token"], B["epoch"], B["procs"])
    fail("heartbeat on the standby was accepted")
except psycopg2.Error as e:
    if e.pgcode != "25006":
        fail("heartbeat on the standby: %s %s, wanted 25006 (read-only)" % (e.pgcode, e.pgerror.strip()))
    else:
        ok("heartbeat on the standby fails read-only too")

# ------------------------------------------------------------ failover
heartbeat(q, S)
heartbeat(q, B)
silent_epoch, silent_procs = S["epoch"], list(S["procs"])
renewed = q1("SELECT last_renewal_at FROM frameq.host WHERE id = %s", S["id"])
prim.close()
sb.close()
cluster_lib('_frameq_pg_ctl -w -m fast stop >/dev/null')
# The scenario, not a race: the old primary stays down until the silent
# host's last renewal is more than a whole lease period old, so only the
# quarantine can keep its lease.
time.sleep(PERIOD + 0.5)
sb = connect(standby=True)
sq, sq1 = queries(sb)
before_promote = sq1("SELECT clock_timestamp()")
sb.close()
cluster_lib('standby_ctl -w promote >/dev/null')
t_promoted = time.monotonic()
db = connect(standby=True)
q, q1 = queries(db)
if q1("SELECT pg_is_in_recovery()"):
    fail("still in recovery after pg_ctl promote -w")
old = q1("SELECT extract(epoch FROM clock_timestamp() - %s::timestamptz)::float8", renewed)
print("promoted; the silent host's last renewal is %.2f s old" % old, flush=True)

deadline = time.monotonic() + 15
while not q("SELECT 1 FROM pg_stat_activity WHERE backend_type = 'frameq worker'"):
    if time.monotonic() > deadline:
        bail("no frameq worker on the promoted standby within 15 s")
    time.sleep(0.02)
print("worker up %.3f s after the promotion" % (time.monotonic() - t_promoted), flush=True)
while True:
    st = q("SELECT started, quarantine_start, quarantine_until, leases_since,"
           "       extract(epoch FROM quarantine_until - quarantine_start)::float8,"
           "       quarantine_until > clock_timestamp(), quarantine_start > %s::timestamptz"
           "  FROM frameq.worker_status()", before_promote)[0]
    if st[0] or time.monotonic() > deadline:
        break
    time.sleep(0.02)
started, qstart, quntil, since, qlen, ahead, after_promote = st
if not (started and ahead and after_promote and abs(qlen - PERIOD) < 0.001 and since == qstart):
    fail("worker_status() on the new primary: %s; wanted started, a %.1f s quarantine from after the "
         "promotion, still ahead" % (st, PERIOD))
else:
    ok("quarantine on the new primary: %s .. +%.1f s" % (qstart, qlen))

rearmed = False
beats = empties = in_q_polls = 0
next_beat = 0.0
released = False
while True:
    srow = q("SELECT h.state, h.epoch, (SELECT count(*) FROM frameq.proc p WHERE p.id = ANY(%s))"
             "  FROM frameq.host h WHERE h.id = %s", silent_procs, S["id"])[0]
    holds = srow == ("up", silent_epoch, len(silent_procs))
    in_q, past = q("SELECT clock_timestamp() < %s::timestamptz,"
                   "       clock_timestamp() > %s::timestamptz + interval '3 s'", quntil, quntil)[0]
    if not rearmed:
        rearmed = q1("SELECT lease_expires_at > clock_timestamp() FROM frameq.host WHERE id = %s", B["id"])
    if rearmed and time.monotonic() >= next_beat:
        next_beat = time.monotonic() + 0.5
        try:
            heartbeat(q, B)
            beats += 1
        except psycopg2.Error as e:
            fail("heartbeat of the beating host on the new primary refused: %s" % e.pgerror.strip())
    if in_q:
        in_q_polls += 1
        if not holds:
            fail("the silent host changed during the quarantine: %s" % (srow,))
            break
        if rearmed:
            room = q1("SELECT idle_cc >= 100 FROM frameq.host WHERE id = %s", B["id"])
            got = reserve(q, B)
            if not got and room:
                empties += 1        # it had room, and got nothing
            elif q1("SELECT clock_timestamp() < %s::timestamptz", quntil):
                fail("reserve booked %d frames during the quarantine" % len(got))
    elif not holds:
        released = True
        break
    if past:
        break
    time.sleep(0.05)
print("%d polls in the quarantine, %d empty reserves, %d heartbeats accepted" % (in_q_polls, empties, beats),
      flush=True)
if in_q_polls < 20 or empties < 10 or beats < 3:
    fail("too few samples in the quarantine to say anything")
if not released:
    fail("the silent host was not expired within 3 s after the quarantine")
rows = q("SELECT r.reason, f.state, extract(epoch FROM r.ended_at - %s::timestamptz)::float8"
         "  FROM frameq.run r JOIN frameq.frame f ON f.id = r.frame WHERE r.proc = ANY(%s)", qstart, silent_procs)
for reason, fstate, after in rows:
    if (reason, fstate) != ("host_lost", "waiting") or not (PERIOD <= after <= PERIOD + 1.5):
        fail("silent host's run %s, frame %s, released %.3f s after the quarantine started; wanted host_lost, "
             "waiting, %.1f-%.1f s" % (reason, fstate, after, PERIOD, PERIOD + 1.5))
    else:
        ok("leases enforced: the silent host released %.3f s after the quarantine started" % after)
if len(rows) != len(silent_procs):
    fail("%d of %d procs of the silent host have an ended run" % (len(rows), len(silent_procs)))
h = q("SELECT state, down_reason, epoch FROM frameq.host WHERE id = %s", S["id"])[0]
if h != ("down", "lease_lost", silent_epoch + 1):
    fail("silent host is %s, wanted down / lease_lost / epoch %d" % (h, silent_epoch + 1))
heartbeat(q, B)
if not reserve(q, B, 2):
    fail("no booking on the new primary after the quarantine")
else:
    ok("the beating host books on the new primary after the quarantine")
check_clean(q, "check() on the new primary")
finish()
PY
if [[ $status -ne 0 ]]; then
	echo "--- standby log ---"
	grep -E 'frameq|FATAL|PANIC|ERROR' "$STANDBY_LOG" | tail -n 20 || true
fi
exit $status
