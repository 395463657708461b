#!/usr/bin/env bash
# SIGKILL the frameq background worker (pid from pg_stat_activity).  The
# postmaster treats that as a crash: it ends every server process and
# reinitialises shared memory (the same postmaster pid, "terminated by
# signal 9" and "reinitializing" in the log), and the worker comes back in
# a fresh shared memory (worker_status().quarantine_start after the kill).
#
# Nothing is lost: every proc (with its kill order), frame, run record and
# host lease epoch of the farm is as before, the ledger rebuilt from the
# procs reports the same usage, and check() is clean.  Kill orders still
# get delivered: the one created (and announced) just before the kill is
# announced again after the restart, a new one is announced within 1 s of
# its commit, both are confirmed by a heartbeat, and then released as
# killed (frame dead).
#
# Runs on test/run's shared cluster (crash recovery of it, like
# ledger_rebuild.sh).  Needs python3-psycopg2 (Debian).
set -euo pipefail

# shellcheck source=worker_lib.bash
source "$(dirname "$0")/worker_lib.bash"
need_debs python3-psycopg2

$PY - <<'PY'
import json, os, random, signal, time
import psycopg2
from fqtest import (Listener, attach, bail, check_clean, connect, create_farm, fail, finish, ok, queries,
                    register, reserve, secs, submit, wait_for)

db = connect()
q, q1 = queries(db)

def worker_pid():
    r = q("SELECT pid FROM pg_stat_activity WHERE backend_type = 'frameq worker'")
    return r[0][0] if len(r) == 1 else None

# a fresh cluster's worker starts 5 s late
wait_for(lambda: worker_pid() and q1("SELECT started FROM frameq.worker_status()"),
         20, 0.1, "no frameq worker in pg_stat_activity after 20 s")

def wait_proc(lis, proc, timeout):
    """the first new notification (t, channel, payload) on lis of a kill order for proc"""
    return lis.wait(lambda ch, pl: json.loads(pl)["proc"] == proc, timeout)

sfx = "%d_%d" % (os.getpid(), random.randrange(1 << 30))
alloc = "wk4_" + sfx
host = "wk4_h_" + sfx
create_farm(q, alloc)
folder = q1("SELECT frameq.create_folder(%s, 'f', 50, NULL)", alloc)
job = submit(q, alloc, "sigkill", "1-10", folder="f", max_cores=40)
H = register(q, host, alloc, 8)
attach(q, H)
token, epoch, hid = H["token"], H["epoch"], H["id"]
booked = reserve(q, H, 6)
if len(booked) != 6:
    bail("setup booked %d frames, wanted 6" % len(booked))
procs = [p for p, f in booked]
frames = [f for p, f in booked]
chan = "frameq_host_%d" % hid
resend = secs(q, "current_setting('frameq.kill_resend_interval')::interval")

lis = Listener(chan)
q("SELECT frameq.kill_frame(%s, 'before the crash')", frames[0])
if wait_proc(lis, procs[0], 1.0) is None:
    fail("the kill order before the crash was not announced within 1 s")

SNAPSHOT = {
    "procs": ("SELECT id, frame, host, epoch, state, kill_reason, want_state, cores_cc, booked_at"
              "  FROM frameq.proc WHERE host = %(h)s ORDER BY id"),
    "frames": "SELECT id, state, retries, attempts, version FROM frameq.frame WHERE job = %(j)s ORDER BY id",
    "runs": ("SELECT proc, frame, started_at, ended_at, reason FROM frameq.run WHERE host = %(h)s ORDER BY proc"),
    "host": "SELECT state, epoch, boot_id, last_renewal_at, idle_cc, idle_memory FROM frameq.host WHERE id = %(h)s",
    "usage": ("SELECT kind, id, used_cores, used_gpus, running FROM frameq.usage"
              " WHERE (kind = 'job' AND id = %(j)s) OR (kind = 'folder' AND id = %(f)s)"
              "    OR (kind = 'host' AND id = %(h)s)"
              "    OR (kind = 'subscription' AND name = %(a)s || '@' || %(a)s) ORDER BY kind"),
    "job": "SELECT state FROM frameq.job WHERE id = %(j)s",
}
def snapshot():
    out = {}
    with db.cursor() as cur:
        for k, sql in SNAPSHOT.items():
            cur.execute(sql, dict(h=hid, j=job, f=folder, a=alloc))
            out[k] = cur.fetchall()
    return out
before = snapshot()
if [r[4] for r in before["usage"]] != [6, 6, 6, 6]:
    fail("usage before the crash is not 6 running everywhere: %s" % before["usage"])

old_pid = worker_pid()
pgdata = os.environ["FRAMEQ_PGDATA"]
pm_pid = int(open(os.path.join(pgdata, "postmaster.pid")).readline())
log = os.environ["FRAMEQ_LOG"]
log_off = os.path.getsize(log)
killed_at = q1("SELECT clock_timestamp()")

db.close()
lis.conn.close()
t_kill = time.monotonic()
os.kill(old_pid, signal.SIGKILL)

# wait for the postmaster to restart everything and the worker to be back
new_pid = None
deadline = time.monotonic() + 60
while time.monotonic() < deadline:
    try:
        db = connect()
        q, q1 = queries(db)
        new_pid = worker_pid()
        if new_pid and new_pid != old_pid:
            break
        db.close()
    except psycopg2.OperationalError:
        pass
    time.sleep(0.05)
back = time.monotonic() - t_kill
if not new_pid or new_pid == old_pid:
    bail("no new frameq worker within 60 s of the SIGKILL")
print("worker %d killed; worker %d back after %.2f s" % (old_pid, new_pid, back), flush=True)
lis = Listener(chan)

if int(open(os.path.join(pgdata, "postmaster.pid")).readline()) != pm_pid:
    fail("the postmaster changed: not a crash recovery")
with open(log) as fh:
    fh.seek(log_off)
    text = fh.read()
if ("(PID %d) was terminated by signal 9" % old_pid) not in text or "reinitializing" not in text:
    fail("the server log does not show the worker's crash and the reinitialisation")
else:
    ok("the postmaster treated the SIGKILL as a crash and reinitialised")
st = q("SELECT started, quarantine_start > %s::timestamptz FROM frameq.worker_status()", killed_at)[0]
if st != (True, True):
    fail("worker_status() after the crash: started %s, quarantine_start after the kill %s" % st)

after = snapshot()
for k in SNAPSHOT:
    if after[k] != before[k]:
        fail("%s changed across the worker's crash:\n  before %s\n  after  %s" % (k, before[k], after[k]))
if after == before:
    ok("procs, kill order, frames, runs, host and usage unchanged across the crash")
check_clean(q, "check() after the crash")

# the kill order from before the crash is announced again (it is not confirmed)
got = wait_proc(lis, procs[0], resend + 2.0)
if got is None:
    fail("the kill order of proc %d was not announced again within %.1f s after the restart" % (procs[0], resend + 2.0))
else:
    ok("the kill order from before the crash announced again %.2f s after the worker was back"
       % (got[0] - t_kill - back))
    if json.loads(got[2]) != {"proc": procs[0], "reason": "before the crash"}:
        fail("payload %s" % json.loads(got[2]))
# a new kill order is announced at once
t0 = time.monotonic()
q("SELECT frameq.kill_frame(%s, 'after the crash')", frames[1])
got = wait_proc(lis, procs[1], 3.0)
if got is None or got[0] - t0 > 1.0:
    fail("the kill order after the crash was not announced within 1 s (%s)"
         % ("never" if got is None else "%.3f s" % (got[0] - t0)))
else:
    ok("a new kill order announced %.3f s after its commit" % (got[0] - t0))

# the host confirms both; they are released as killed
kill = q1("SELECT kill FROM frameq.heartbeat(%s, %s, %s, %s::bigint[])", host, token, epoch, procs[2:])
if kill:
    fail("the confirming heartbeat returned kill orders %s" % kill)
rows = q("SELECT f.state, r.reason FROM frameq.frame f JOIN frameq.run r ON r.frame = f.id"
         " WHERE r.proc = ANY(%s) ORDER BY r.proc", procs[:2])
if rows != [("dead", "killed")] * 2:
    fail("the two killed frames/runs are %s, wanted dead/killed" % rows)
running = q1("SELECT count(*) FROM frameq.proc WHERE id = ANY(%s) AND state = 'running'", procs[2:])
if running != 4:
    fail("%d of the 4 untouched procs still run, wanted 4" % running)
check_clean(q, "check() at the end")
q("SELECT frameq.confirm_host_dead(%s)", host)
finish()
PY
