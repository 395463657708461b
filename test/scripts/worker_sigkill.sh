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

if ! dpkg -s python3-psycopg2 >/dev/null 2>&1; then
	apt-get update -qq && apt-get install -y -qq --no-install-recommends python3-psycopg2 >/dev/null
fi
PY=/usr/bin/python3

$PY - <<'PY'
import json, os, random, select, signal, sys, time
import psycopg2

failures = []
def fail(msg):
    failures.append(msg)
    print("not ok:", msg, flush=True)
def ok(msg):
    print("ok:", msg, flush=True)

def connect():
    c = psycopg2.connect("")
    c.autocommit = True
    return c

db = connect()
def q(sql, *args):
    with db.cursor() as cur:
        cur.execute(sql, args)
        return cur.fetchall() if cur.description else None
def q1(sql, *args):
    return q(sql, *args)[0][0]

def worker_pid():
    r = q("SELECT pid FROM pg_stat_activity WHERE backend_type = 'frameq worker'")
    return r[0][0] if len(r) == 1 else None

deadline = time.monotonic() + 20     # a fresh cluster's worker starts 5 s late
while not (worker_pid() and q1("SELECT started FROM frameq.worker_status()")):
    if time.monotonic() > deadline:
        print("not ok: no frameq worker in pg_stat_activity after 20 s")
        sys.exit(1)
    time.sleep(0.1)

class Listener:
    def __init__(self, channel):
        self.conn = connect()
        with self.conn.cursor() as cur:
            cur.execute('LISTEN "%s"' % channel)
        self.got = []
    def pump(self, timeout):
        if select.select([self.conn], [], [], max(timeout, 0)) != ([], [], []):
            self.conn.poll()
            while self.conn.notifies:
                n = self.conn.notifies.pop(0)
                self.got.append((time.monotonic(), json.loads(n.payload)))
    def wait_proc(self, proc, timeout):
        deadline = time.monotonic() + timeout
        while True:
            for t, p in self.got:
                if p["proc"] == proc:
                    return t, p
            if time.monotonic() >= deadline:
                return None
            self.pump(min(0.05, deadline - time.monotonic()))

sfx = "%d_%d" % (os.getpid(), random.randrange(1 << 30))
alloc = "wk4_" + sfx
host = "wk4_h_" + sfx
q("SELECT frameq.create_allocation(%s)", alloc)
q("SELECT frameq.create_show(%s)", alloc)
q("SELECT frameq.set_subscription(%s, %s, 100, 100)", alloc, alloc)
folder = q1("SELECT frameq.create_folder(%s, 'f', 50, NULL)", alloc)
job = q1("SELECT frameq.submit(%s)", json.dumps({
    "show": alloc, "folder": "f", "name": "sigkill", "max_cores": 40,
    "layers": [{"name": "r", "command": "sleep 1000", "range": "1-10", "cores": 1}]}))
token = q1("SELECT frameq.register_host(%s, %s, 8, 16000000000)", host, alloc)
epoch = q1("SELECT epoch FROM frameq.attach(%s, %s, 'boot-1')", host, token)
hid = q1("SELECT id FROM frameq.host WHERE name = %s", host)
booked = q("SELECT proc, frame FROM frameq.reserve(%s, %s, %s, 6) ORDER BY frame", host, token, epoch)
if len(booked) != 6:
    print("not ok: setup booked %d frames, wanted 6" % len(booked))
    sys.exit(1)
procs = [p for p, f in booked]
frames = [f for p, f in booked]
chan = "frameq_host_%d" % hid
resend = float(q1("SELECT extract(epoch FROM current_setting('frameq.kill_resend_interval')::interval)"))

lis = Listener(chan)
q("SELECT frameq.kill_frame(%s, 'before the crash')", frames[0])
if lis.wait_proc(procs[0], 1.0) is None:
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
        new_pid = worker_pid()
        if new_pid and new_pid != old_pid:
            break
        db.close()
    except psycopg2.OperationalError:
        pass
    time.sleep(0.05)
back = time.monotonic() - t_kill
if not new_pid or new_pid == old_pid:
    print("not ok: no new frameq worker within 60 s of the SIGKILL")
    sys.exit(1)
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
problems = q("SELECT invariant, detail FROM frameq.check()")
if problems:
    fail("check() after the crash: %s" % problems)

# the kill order from before the crash is announced again (it is not confirmed)
got = lis.wait_proc(procs[0], resend + 2.0)
if got is None:
    fail("the kill order of proc %d was not announced again within %.1f s after the restart" % (procs[0], resend + 2.0))
else:
    ok("the kill order from before the crash announced again %.2f s after the worker was back"
       % (got[0] - t_kill - back))
    if got[1] != {"proc": procs[0], "reason": "before the crash"}:
        fail("payload %s" % got[1])
# a new kill order is announced at once
t0 = time.monotonic()
q("SELECT frameq.kill_frame(%s, 'after the crash')", frames[1])
got = lis.wait_proc(procs[1], 3.0)
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
problems = q("SELECT invariant, detail FROM frameq.check()")
if problems:
    fail("check() at the end: %s" % problems)
q("SELECT frameq.confirm_host_dead(%s)", host)
sys.exit(1 if failures else 0)
PY
