#!/usr/bin/env bash
# A forward jump of the server's wall clock does not release a silent host
# early (doc/release.md, "Clock jumps on the server"; src/worker.c).
#
# On a cluster of its own whose postmaster runs under Debian's libfaketime:
# the wall clock (gettimeofday, clock_gettime(CLOCK_REALTIME), ...) is real
# time plus an offset read from a file on every call (FAKETIME_TIMESTAMP_FILE,
# FAKETIME_NO_CACHE=1), the monotonic clock is left alone
# (FAKETIME_DONT_FAKE_MONOTONIC=1).  The offset starts at +1 day, so that
# "SELECT clock_timestamp()" proves the server is faked at all.  Lease period
#     lease_ttl * (1 + clock_drift) + lease_margin = 4 s * 1.05 + 1 s = 5.2 s,
# frameq.quarantine = off.
#
# 1. Control, no jump: host "ctl" is attached, booked, heartbeats for a
#    while and falls silent.  Its proc is held until 5.2 s after its last
#    renewal and released (host_lost) within 1.5 s after that.
# 2. Jump: host "jmp" is attached, booked, heartbeats for a while and falls
#    silent; right after its last heartbeat the offset file is rewritten,
#    moving every backend's wall clock one hour forward at once (checked).
#    Then: the worker logs exactly one "the wall clock jumped by ~3600 s";
#    worker_status().leases_since moves to the new time (>= the server clock
#    before the jump + 3600 s, within 1.5 s after it); the host's lease is
#    re-armed on the new clock; its proc, frame, state and epoch are held at
#    every 50 ms poll until leases_since + 5.2 s, and it is released
#    (host_lost, frame waiting, host down / lease_lost, epoch + 1) within
#    1.5 s after that, i.e. a whole lease period counted from the jump.
#    Host "tmo" runs a task with a timeout of 60 s, booked just before the
#    jump: the worker moves its deadline by the jump (timeout_at -
#    booked_at becomes 3,660 s) and never times it out (it stays running
#    at every poll, and its run ends host_lost with the lease, not
#    timeout); on the new clock its deadline was an hour past, so a round
#    that timed tasks out before moving the deadlines would have killed it.
#
# Why this can fail: on the new clock the silent host's last renewal is an
# hour old (asserted right after the jump), so _expire_leases releases it in
# the worker's first round after the jump unless the worker has moved
# leases_since to the jump first.  Without the jump detection in
# frameq_worker_main (or with a faked monotonic clock, which moves with the
# wall clock and hides the jump) the host is released well under a second
# after the jump, and part 2 fails with "released ... before ...".  If
# libfaketime did not reach the postmaster, the +1 day check fails first.
#
# Needs libfaketime and python3-psycopg2 (Debian; installed here if missing).
set -euo pipefail
# shellcheck source=worker_lib.bash
source "$(dirname "$0")/worker_lib.bash"
cd "$(dirname "$0")/../.."
need_debs libfaketime python3-psycopg2
FT_LIB=$(dpkg -L libfaketime | grep -m1 '/libfaketime\.so\.1$')
if [[ ! -r "$FT_LIB" ]]; then
	echo "not ok: libfaketime.so.1 not found (dpkg -L libfaketime)"
	exit 1
fi

# the server's wall clock, relative to real time: from the start, and after the jump
export FT_BASE=86400 FT_JUMP=3600

# a cluster of our own, not test/run's
own_cluster 54367 $'frameq.quarantine = off\nframeq.lease_ttl = 4s\nframeq.lease_margin = 1s\nframeq.clock_drift = 0.05\nlog_min_messages = log'

# test/cluster.sh runs every pg_ctl as `runuser -u postgres -- pg_ctl ...`.
# runuser keeps the caller's environment (it only sets HOME, USER, ...), but
# rather than rely on that, or preload libfaketime into runuser, initdb and
# psql too, this shell's copy of the function passes the faketime variables
# with env(1) to pg_ctl alone, and so to the postmaster it starts and every
# process that forks from it.  FAKETIME itself would take precedence over the
# file, hence env -u.  The offset file lives in the cluster dir, which
# cluster_stop removes.
# shellcheck disable=SC2317  # called by test/cluster.sh's functions
_frameq_pg_ctl() {
	local rc="$FRAMEQ_CLUSTER_DIR/faketime.rc"
	if [[ ! -e "$rc" ]]; then
		echo "+$FT_BASE" >"$rc"
		chmod 644 "$rc"
	fi
	_frameq_as_pg env -u FAKETIME LD_PRELOAD="$FT_LIB" \
		FAKETIME_TIMESTAMP_FILE="$rc" FAKETIME_NO_CACHE=1 FAKETIME_DONT_FAKE_MONOTONIC=1 \
		"$FRAMEQ_PGBIN/pg_ctl" -D "$FRAMEQ_PGDATA" -l "$FRAMEQ_LOG" "$@"
}

# libfaketime keeps a semaphore and a shared memory segment per process tree
# in /dev/shm (faketime_shm_<pid>, sem.faketime_sem_<pid>) and not every
# process that makes one removes it.  Remove those that appeared while this
# test ran and whose process is gone.
shm_before=$(ls /dev/shm 2>/dev/null || true)
shm_cleanup() {
	local f pid
	for f in /dev/shm/faketime_shm_* /dev/shm/sem.faketime_sem_*; do
		[[ -e "$f" ]] || continue
		grep -qxF "$(basename "$f")" <<<"$shm_before" && continue
		pid=${f##*_}
		[[ "$pid" =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null && continue
		rm -f -- "$f"
	done
}

if ! cluster_start >/dev/null; then
	echo "not ok: could not start a cluster under libfaketime"
	shm_cleanup
	exit 1
fi
# cluster_start set its own EXIT trap; add ours
trap 'cluster_stop; shm_cleanup' EXIT
export FT_RC="$FRAMEQ_CLUSTER_DIR/faketime.rc"

status=0
$PY - <<'PY' || status=$?
import os, re, time
import psycopg2
from fqtest import (bail, check_clean, connect, create_farm, fail, failures, finish, heartbeat, host_with_frame, ok,
                    queries, secs, submit, wait_for_worker)

BASE = int(os.environ["FT_BASE"])
JUMP = int(os.environ["FT_JUMP"])
RC = os.environ["FT_RC"]
LOG = os.environ["FRAMEQ_LOG"]
TTL = 4.0
PERIOD = 4.0 * 1.05 + 1.0
JUMP_RE = re.compile(r"frameq worker: the wall clock jumped by (-?[0-9.]+) s")

def set_offset(secs):
    # rename, not rewrite in place: a backend must never read a half-written file
    tmp = RC + ".new"
    with open(tmp, "w") as f:
        f.write("+%d\n" % secs)
    os.chmod(tmp, 0o644)
    os.replace(tmp, RC)

db = connect()
q, q1 = queries(db)

def jump_lines():
    with open(LOG, errors="replace") as f:
        return [float(m.group(1)) for m in JUMP_RE.finditer(f.read())]

t_begin = time.monotonic()

# ------------------------------------------------------------ 0. the server's clock is faked
before = time.time()
srv = float(q1("SELECT extract(epoch FROM clock_timestamp())::float8"))
after = time.time()
offset = srv - (before + after) / 2
print("server clock runs %.3f s ahead of real time (wanted %d)" % (offset, BASE), flush=True)
if abs(offset - BASE) > 2:
    bail("libfaketime does not reach the server: its clock is %.3f s off, wanted %d" % (offset, BASE))
ok("libfaketime reaches the server: clock_timestamp() is %d s ahead" % BASE)

wait_for_worker(q)

# The frameq worker must run on the faked clock too, and that is not a given:
# libfaketime reads the real clock inside its select()/epoll_wait() wrappers
# (a thread-local "don't fake" flag), and PG 15's postmaster does its work in
# signal handlers that run while it sits in select().  So the postmaster's
# own clock is real in those handlers (its log lines alternate between the
# two dates), and a child it forks from a handler keeps the flag set for
# good: its clock is real forever.  The first worker after start-up is forked
# that way (from the reaper, when the startup process ends); restarts from
# the postmaster's main loop are faked.  backend_start is the worker's own
# clock at its start, so a worker on the real clock is a day "old": then end
# it and let the postmaster start another.
for attempt in range(6):
    w = q("SELECT pid, extract(epoch FROM clock_timestamp() - backend_start)::float8"
          "  FROM pg_stat_activity WHERE backend_type = 'frameq worker'")
    if w and -5 < w[0][1] < 600:
        break
    if attempt == 5:
        bail("no frameq worker on the faked clock after 5 restarts: %s" % w)
    if w:
        print("note: frameq worker %d runs on the real clock (started %.0f s \"ago\"); ending it"
              % (w[0][0], w[0][1]), flush=True)
        q("SELECT pg_terminate_backend(%s)", w[0][0])
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        n = q("SELECT pid FROM pg_stat_activity WHERE backend_type = 'frameq worker'")
        if n and (not w or n[0][0] != w[0][0]):
            break
        time.sleep(0.1)
ok("the frameq worker runs on the faked clock (started %.1f s ago)" % w[0][1])

if abs(secs(q, "frameq.lease_period()") - PERIOD) > 1e-6:
    fail("lease_period() is not %.1f s" % PERIOD)

create_farm(q, "cj")
submit(q, "cj", "clock_jump", "1-10")

def beat_a_while(h, n=4, every=0.4):
    """heartbeat n times; return the server time of the last renewal"""
    for i in range(n):
        if i:
            time.sleep(every)
        try:
            if heartbeat(q, h):
                fail("%s: heartbeat returned kill orders" % h["name"])
        except psycopg2.Error as e:
            fail("%s: heartbeat refused: %s %s" % (h["name"], e.pgcode, e.pgerror.strip()))
    return q1("SELECT last_renewal_at FROM frameq.host WHERE id = %s", h["id"])

def holds(h):
    row = q("SELECT h.state, h.epoch, EXISTS (SELECT 1 FROM frameq.proc p WHERE p.id = %s), f.state"
            "  FROM frameq.host h, frameq.frame f WHERE h.id = %s AND f.id = %s",
            h["proc"], h["id"], h["frame"])[0]
    return row == ("up", h["epoch"], True, "running"), row

def check_released(label, h, since, since_what):
    """the host's run ended as host_lost a lease period after `since`, not before, within 1.5 s after"""
    r = q("SELECT extract(epoch FROM r.ended_at - %s::timestamptz)::float8, r.reason, f.state,"
          "       h.state, h.down_reason, h.epoch, h.lease_expires_at"
          "  FROM frameq.run r JOIN frameq.frame f ON f.id = r.frame JOIN frameq.host h ON h.id = r.host"
          " WHERE r.proc = %s", since, h["proc"])
    if not r:
        fail("%s: no ended run for the host's proc" % label)
        return None
    ended, reason, fstate, hstate, down_reason, hepoch, lexp = r[0]
    if ended < PERIOD:
        fail("%s: released %.3f s after %s, before the lease period (%.1f s)" % (label, ended, since_what, PERIOD))
    elif ended > PERIOD + 1.5:
        fail("%s: released %.3f s after %s, more than 1.5 s after the lease period" % (label, ended, since_what))
    else:
        ok("%s: released %.3f s after %s (window %.1f-%.1f s)" % (label, ended, since_what, PERIOD, PERIOD + 1.5))
    if (reason, fstate) != ("host_lost", "waiting"):
        fail("%s: run reason %s, frame %s; wanted host_lost, waiting" % (label, reason, fstate))
    if (hstate, down_reason, hepoch, lexp) != ("down", "lease_lost", h["epoch"] + 1, None):
        fail("%s: host %s/%s epoch %s lease %s; wanted down/lease_lost epoch %d no lease"
             % (label, hstate, down_reason, hepoch, lexp, h["epoch"] + 1))
    return ended

# ------------------------------------------------------------ 1. control: no jump
t0 = time.monotonic()
C = host_with_frame(q, "ctl", "cj", 4)
renewal = beat_a_while(C)
last_hold = released = None
while True:
    held, row = holds(C)
    # the clock is read after the state: a state seen at "elapsed" held at least until then
    elapsed = float(q1("SELECT extract(epoch FROM clock_timestamp() - %s::timestamptz)::float8", renewal))
    if held:
        last_hold = elapsed
    else:
        released = elapsed
        break
    if elapsed > PERIOD + 3:
        break
    time.sleep(0.05)
print("control: silent host last seen holding %.3f s after its last renewal, seen released at %s s"
      % (last_hold or -1, "%.3f" % released if released is not None else "never"), flush=True)
if released is None:
    fail("control: the silent host was not released within %.1f s of its last renewal" % (PERIOD + 3))
elif last_hold is None or last_hold < PERIOD - 0.15:
    fail("control: the poll did not see the host hold until the lease period (last seen %s s)" % last_hold)
check_released("control", C, renewal, "its last renewal")
if jump_lines():
    fail("the worker saw a clock jump before there was one: %s" % jump_lines())
print("control took %.1f s" % (time.monotonic() - t0), flush=True)

# ------------------------------------------------------------ 2. a forward jump of one hour
t0 = time.monotonic()
J = host_with_frame(q, "jmp", "cj", 4)
submit(q, "cj", "timed", "1", timeout=60, priority=10)
T = host_with_frame(q, "tmo", "cj", 4)
if q1("SELECT extract(epoch FROM timeout_at - booked_at)::float8 FROM frameq.proc WHERE id = %s",
      T["proc"]) != 60:
    bail("the timed task's deadline is not 60 s after its booking")
renewal = beat_a_while(J)
# it falls silent, and the wall clock jumps at once
clk0 = q1("SELECT clock_timestamp()")
set_offset(BASE + JUMP)
t_jump = time.monotonic()
clk1 = q1("SELECT clock_timestamp()")
moved = float(q1("SELECT extract(epoch FROM %s::timestamptz - %s::timestamptz)::float8", clk1, clk0))
if not JUMP <= moved < JUMP + 1:
    bail("rewriting the offset file moved the server clock by %.3f s, wanted %d" % (moved, JUMP))
ok("the server's wall clock jumped by %.3f s" % moved)
# on the new clock the last renewal is long past a lease period: only the jump detection keeps the host
if not q1("SELECT last_renewal_at + frameq.lease_period() < clock_timestamp() FROM frameq.host WHERE id = %s",
          J["id"]):
    fail("after the jump the host's last renewal is not older than a lease period: the test proves nothing")

since = None             # leases_since once the worker has seen the jump
detected_after = None    # monotonic seconds from the file write to seeing it
polls_before = polls_in = 0
rearmed = None
last_hold = released = None
t_offsets = set()        # timeout_at - booked_at of the timed task, as polled
while True:
    t_row = q("SELECT state, extract(epoch FROM timeout_at - booked_at)::float8 FROM frameq.proc"
              " WHERE id = %s", T["proc"])
    if t_row:
        if t_row[0][0] != "running":
            fail("the timed task became a kill order after the jump (%s)" % (t_row,))
        t_offsets.add(round(t_row[0][1]))
    held, row = holds(J)
    st_since, now_after, lexp = q(
        "SELECT w.leases_since, clock_timestamp(), h.lease_expires_at"
        "  FROM frameq.worker_status() w, frameq.host h WHERE h.id = %s", J["id"])[0]
    if since is None and q1("SELECT %s::timestamptz >= %s::timestamptz + interval '30 minutes'", st_since, clk0):
        since = st_since
        detected_after = time.monotonic() - t_jump
    elif since is not None and st_since != since:
        fail("leases_since moved again, from %s to %s" % (since, st_since))
        since = st_since
    if since is None:
        polls_before += 1
        if not held:
            fail("released before the worker noticed the jump (%.3f s after it): %s"
                 % (time.monotonic() - t_jump, row))
            break
        if time.monotonic() - t_jump > 3:
            fail("worker_status().leases_since did not move within 3 s of the jump (it is %s)" % st_since)
            break
    else:
        elapsed = float(q1("SELECT extract(epoch FROM %s::timestamptz - %s::timestamptz)::float8",
                           now_after, since))
        if held:
            polls_in += 1
            last_hold = elapsed
            if rearmed is None:
                rearmed = q1("SELECT %s::timestamptz > %s::timestamptz", lexp, since)
        else:
            released = elapsed
            if elapsed < PERIOD:
                fail("released %.3f s after the jump was noticed, before the lease period (%.1f s): %s"
                     % (elapsed, PERIOD, row))
            break
        if elapsed > PERIOD + 3:
            break
    time.sleep(0.05)

if since is not None:
    d0 = float(q1("SELECT extract(epoch FROM %s::timestamptz - %s::timestamptz)::float8", since, clk0))
    d1 = float(q1("SELECT extract(epoch FROM %s::timestamptz - %s::timestamptz)::float8", since, clk1))
    print("jump: leases_since moved to the server clock before the jump + %.3f s (%.3f s after the "
          "first read of the new clock), seen %.3f s after the offset file was rewritten; "
          "%d polls before, %d polls holding after"
          % (d0, d1, detected_after, polls_before, polls_in), flush=True)
    if d0 < JUMP or d1 > 1.5:
        fail("leases_since is %s: wanted at least the old clock + %d s and at most 1.5 s after the new clock"
             % (since, JUMP))
    else:
        ok("worker_status().leases_since moved to the new time (+%.3f s after the jump)" % d1)
    if rearmed is not True:
        fail("the host's lease was not re-armed on the new clock after the jump (lease_expires_at %s)" % lexp)
    else:
        ok("the silent host's lease was re-armed on the new clock")
    print("jump: silent host last seen holding %s s after leases_since, seen released at %s s"
          % ("%.3f" % last_hold if last_hold is not None else "never",
             "%.3f" % released if released is not None else "never"), flush=True)
    if released is None and not failures:
        fail("the silent host was not released within %.1f s of the jump" % (PERIOD + 3))
    elif last_hold is None or last_hold < PERIOD - 0.15:
        fail("the poll did not see the host hold until a lease period after the jump (last seen %s s)" % last_hold)
    else:
        ok("the silent host held its proc for the whole lease period counted from the jump")
    check_released("jump", J, since, "leases_since (the jump)")
    after_renewal = float(q1("SELECT extract(epoch FROM r.ended_at - %s::timestamptz)::float8"
                             "  FROM frameq.run r WHERE r.proc = %s", renewal, J["proc"]) or 0)
    print("jump: on the server's clock it was released %.1f s after its last renewal" % after_renewal, flush=True)

if t_offsets - {60, 60 + JUMP} or 60 + JUMP not in t_offsets:
    fail("the timed task's deadline was %s s after its booking; wanted 60, then %d" % (sorted(t_offsets), 60 + JUMP))
else:
    ok("the worker moved the timed task's deadline by the jump (%s s after its booking)" % sorted(t_offsets))
t_run = q("SELECT reason FROM frameq.run WHERE proc = %s", T["proc"])
if t_run != [("host_lost",)]:
    fail("the timed task's run ended %s; wanted host_lost (never timed out)" % t_run)
else:
    ok("the timed task was never timed out: its run ended host_lost with its lease")

lines = jump_lines()
if len(lines) != 1 or abs(lines[0] - JUMP) > 1:
    fail("the worker logged the jumps %s, wanted one of %d s" % (lines, JUMP))
else:
    ok("the worker logged \"the wall clock jumped by %.1f s\"" % lines[0])
print("jump took %.1f s" % (time.monotonic() - t0), flush=True)

check_clean(q)
print("total %.1f s" % (time.monotonic() - t_begin), flush=True)
finish()
PY

# test/run watches its own cluster's log for crashes, not ours
if grep -E 'terminated by signal (4|6|7|8|11)|terminated by exception|PANIC:|TRAP:|libfaketime' "$FRAMEQ_LOG"; then
	echo "not ok: the server log shows a crash or a libfaketime error"
	status=1
fi
if [[ $status -ne 0 ]]; then
	echo "--- frameq lines of the server log ---"
	grep -E 'frameq|FATAL|PANIC|faketime' "$FRAMEQ_LOG" | tail -n 30
fi
exit $status
