#!/usr/bin/env bash
# The background worker expires a silent host's lease exactly
#     lease_ttl * (1 + clock_drift) + lease_margin  = 2 s * 1.05 + 1 s = 3.1 s
# after its last successful renewal, and not a moment before.
#
# Host "silent" is attached, booked and renews once, then says nothing (one
# late heartbeat, after lease_ttl but before the lease period, is refused
# with FQ002 and must not count as a renewal).  Polled every 50 ms: until
# 3.1 s after its last renewal (server clock) its proc is live, its frame
# running, the host up on the same epoch.  Then, within 1.5 s (the worker
# wakes at least every second): frame waiting with no retry used, run
# reason host_lost ended no earlier than last renewal + 3.1 s, one
# frameq_release, host down (lease_lost) with its epoch moved on, and its
# old epoch fenced (FQ001).  Host "beating" heartbeats every 0.5 s for
# 2.5 lease periods and is never expired.
#
# Runs on test/run's shared cluster; the settings it changes are reset on
# exit.  Needs python3-psycopg2 (Debian).
set -euo pipefail

# shellcheck source=worker_lib.bash
source "$(dirname "$0")/worker_lib.bash"
need_debs python3-psycopg2

restore() {
	psql -X -q -At -c "ALTER SYSTEM RESET frameq.lease_ttl" -c "ALTER SYSTEM RESET frameq.lease_margin" \
		-c "ALTER SYSTEM RESET frameq.clock_drift" -c "SELECT pg_reload_conf()" >/dev/null 2>&1 || true
}
trap restore EXIT

$PY - <<'PY'
import json, os, random, time
import psycopg2
from fqtest import (Listener, bail, check_clean, connect, create_farm, fail, finish, heartbeat, host_with_frame,
                    ok, queries, secs, set_and_reload, submit, wait_for_worker)

db = connect()
q, q1 = queries(db)

wait_for_worker(q)

set_and_reload(q, "frameq.lease_ttl", "2s", bail)
set_and_reload(q, "frameq.lease_margin", "1s", bail)
set_and_reload(q, "frameq.clock_drift", "0.05", bail)
TTL = 2.0
PERIOD = 2.0 * 1.05 + 1.0
got = secs(q, "frameq.lease_period()")
if abs(got - PERIOD) > 1e-6:
    fail("lease_period() is %s s, wanted %s" % (got, PERIOD))

sfx = "%d_%d" % (os.getpid(), random.randrange(1 << 30))
alloc = "wk2_" + sfx
create_farm(q, alloc)
job = submit(q, alloc, "lease", "1-4")
S = host_with_frame(q, "wk2_silent_" + sfx, alloc, 4)
B = host_with_frame(q, "wk2_beating_" + sfx, alloc, 4)

lis = Listener("frameq_release")

# the silent host's last successful renewal
if heartbeat(q, S):
    fail("the silent host's heartbeat returned kill orders")
renewal = q1("SELECT last_renewal_at FROM frameq.host WHERE id = %s", S["id"])
beats_ok = 0
beat_errors = []
late_refused = None
last_alive = None        # server seconds since renewal at the last poll that saw the host hold
released_seen = None
t_start = time.monotonic()
next_beat = 0.0
while True:
    now = time.monotonic()
    if now >= next_beat:
        next_beat = now + 0.5
        try:
            k = heartbeat(q, B)
            if k:
                beat_errors.append("kill list %s" % k)
            beats_ok += 1
        except psycopg2.Error as e:
            beat_errors.append("%s %s" % (e.pgcode, e.pgerror.strip()))
    row = q("SELECT extract(epoch FROM clock_timestamp() - h.last_renewal_at)::float8, h.state, h.epoch,"
            "       EXISTS (SELECT 1 FROM frameq.proc p WHERE p.id = %s), f.state"
            "  FROM frameq.host h, frameq.frame f WHERE h.id = %s AND f.id = %s",
            S["proc"], S["id"], S["frame"])[0]
    elapsed, hstate, hepoch, has_proc, fstate = row
    holds = has_proc and fstate == "running" and hstate == "up" and hepoch == S["epoch"]
    if holds:
        last_alive = elapsed
    elif released_seen is None:
        released_seen = elapsed
        if elapsed < PERIOD:
            fail("the silent host lost its work %.3f s after its last renewal (< %.1f s): %s"
                 % (elapsed, PERIOD, row))
    elif holds is False and has_proc:
        fail("half-released state seen: %s" % (row,))
    # one late heartbeat, after lease_ttl: refused, and no renewal
    if late_refused is None and holds and elapsed > TTL + 0.2:
        try:
            heartbeat(q, S)
            late_refused = "accepted"
        except psycopg2.Error as e:
            late_refused = e.pgcode
    if released_seen is not None and time.monotonic() - t_start > 2.5 * PERIOD:
        break
    if elapsed > PERIOD + 3.0 and released_seen is None:
        break
    time.sleep(0.05)

print("silent host: last seen holding %.3f s after its last renewal; released seen at %s s"
      % (last_alive or -1, "%.3f" % released_seen if released_seen is not None else "never"), flush=True)
if late_refused != "FQ002":
    fail("a heartbeat after lease_ttl was %s, wanted refused with FQ002" % late_refused)
if released_seen is None:
    fail("the silent host was not expired within %.1f s of its last renewal" % (PERIOD + 3.0))
if last_alive is None or last_alive < PERIOD - 0.15:
    fail("the poll did not see the silent host hold until the lease period (last seen %s s)" % last_alive)

r = q("SELECT extract(epoch FROM r.ended_at - %s::timestamptz)::float8, r.reason, r.end_state,"
      "       f.state, f.retries, f.attempts, h.state, h.down_reason, h.epoch, h.lease_expires_at"
      "  FROM frameq.run r JOIN frameq.frame f ON f.id = r.frame JOIN frameq.host h ON h.id = r.host"
      " WHERE r.proc = %s", renewal, S["proc"])
if r:
    ended, reason, end_state, fstate, retries, attempts, hstate, down_reason, hepoch, lexp = r[0]
    print("silent host released %.3f s after its last renewal (lease period %.1f s)" % (ended, PERIOD), flush=True)
    if ended < PERIOD:
        fail("released %.3f s after the last renewal, before the lease period %.1f s" % (ended, PERIOD))
    elif ended > PERIOD + 1.5:
        fail("released %.3f s after the last renewal, more than 1.5 s after the lease period" % ended)
    else:
        ok("released %.3f s after the last renewal (window %.1f-%.1f s)" % (ended, PERIOD, PERIOD + 1.5))
    if (reason, fstate, retries, attempts) != ("host_lost", "waiting", 0, 1):
        fail("run reason %s, frame %s, retries %s, attempts %s; wanted host_lost, waiting, 0, 1"
             % (reason, fstate, retries, attempts))
    if (hstate, down_reason, hepoch, lexp) != ("down", "lease_lost", S["epoch"] + 1, None):
        fail("host %s/%s epoch %s lease %s; wanted down/lease_lost epoch %d no lease"
             % (hstate, down_reason, hepoch, lexp, S["epoch"] + 1))
else:
    fail("no ended run for the silent host's proc")

# the old epoch is fenced
try:
    heartbeat(q, S)
    fail("a heartbeat on the expired epoch was accepted")
except psycopg2.Error as e:
    if e.pgcode != "FQ001":
        fail("heartbeat on the expired epoch: %s, wanted FQ001" % e.pgcode)

# exactly one release announced for it
deadline = time.monotonic() + 0.5
while time.monotonic() < deadline:
    lis.pump(0.1)
notes = [json.loads(pl) for t, ch, pl in lis.got]
mine = [(n["proc"], n["state"], n["reason"]) for n in notes if n["proc"] in (S["proc"], B["proc"])]
if mine != [(S["proc"], "waiting", "host_lost")]:
    fail("frameq_release for the two procs: %s, wanted one (waiting, host_lost) for the silent host's" % mine)

# the beating host was never expired
b = q("SELECT h.state, h.epoch, h.lease_expires_at > clock_timestamp(),"
      "       EXISTS (SELECT 1 FROM frameq.proc p WHERE p.id = %s AND p.state = 'running')"
      "  FROM frameq.host h WHERE h.id = %s", B["proc"], B["id"])[0]
if beat_errors:
    fail("heartbeats of the beating host failed: %s" % beat_errors[:3])
if b != ("up", B["epoch"], True, True) or beats_ok < 2.5 * PERIOD / 0.5 - 1:
    fail("beating host after %d heartbeats: %s, wanted up on epoch %d, lease current, proc running"
         % (beats_ok, b, B["epoch"]))
else:
    ok("beating host kept its lease through %d heartbeats over %.1f s" % (beats_ok, time.monotonic() - t_start))

check_clean(q)
q("SELECT frameq.confirm_host_dead(%s)", B["name"])
finish()
PY
