"""Helpers shared by the Python parts of test/scripts/worker_*.sh.

Not a test (test/run runs only the executable *.sh files of test/scripts).
The worker scripts source worker_lib.bash, which puts this directory on
PYTHONPATH, and run their Python with Debian's /usr/bin/python3 (where
python3-psycopg2 lives), so they can `import fqtest`.

Reporting: one "ok: ..." or "not ok: ..." line per check.  fail() records a
failure and goes on, bail() ends the test at once, finish() exits 0 only if
nothing failed.

Queries: queries(conn) gives the usual pair q(sql, *args) -> all rows and
q1(sql, *args) -> the first column of the first row.  The helpers below that
talk to the server take such a q as their first argument, so they work on
whatever connection the script uses at the moment.
"""
import json
import select
import subprocess
import sys
import time

import psycopg2

failures = []


def fail(msg):
    """Report a failed check ("not ok: msg") and carry on; finish() exits 1."""
    failures.append(msg)
    print("not ok:", msg, flush=True)


def ok(msg):
    """Report a passed check ("ok: msg")."""
    print("ok:", msg, flush=True)


def bail(msg):
    """Report a failure after which the test cannot go on, and exit 1 now."""
    print("not ok:", msg, flush=True)
    sys.exit(1)


def finish():
    """Exit 1 if any check failed, else 0."""
    sys.exit(1 if failures else 0)


def connect(**params):
    """A new autocommit session.  Where to: libpq's PG* environment (as
    test/run or test/cluster.sh set it), overridden by params (host, port,
    user, dbname, ...)."""
    c = psycopg2.connect("", **params)
    c.autocommit = True
    return c


def queries(conn):
    """(q, q1) on conn: q(sql, *args) returns all rows (None for a statement
    that returns none), q1(sql, *args) the first column of the first row."""
    def q(sql, *args):
        with conn.cursor() as cur:
            cur.execute(sql, args)
            return cur.fetchall() if cur.description else None

    def q1(sql, *args):
        return one(q, sql, *args)
    return q, q1


def one(q, sql, *args):
    """The first column of the first row of q(sql, *args)."""
    return q(sql, *args)[0][0]


def secs(q, interval_sql, *args):
    """An interval expression (SQL text) in seconds, as a float."""
    return float(one(q, "SELECT extract(epoch FROM %s)::float8" % interval_sql, *args))


def cluster_lib(cmd):
    """Run cmd with the functions of test/cluster.sh (the cluster the exported
    FRAMEQ_CLUSTER_LIB and FRAMEQ_* variables name); bail if it fails."""
    r = subprocess.run(["bash", "-c", 'source "$FRAMEQ_CLUSTER_LIB" && ' + cmd])
    if r.returncode != 0:
        bail("%s failed" % cmd)


def set_and_reload(q, name, value, report=fail):
    """ALTER SYSTEM SET name = 'value', reload, and wait up to 5 s (polled
    every 50 ms) until a new session sees the value; if none does, report
    (fail, or bail to end the test) "<name> = <value> was not picked up after
    a reload".

    The postmaster signals its children before it forks a new backend, so
    once a new session sees the value, the worker has its SIGHUP too (it
    re-reads the file at the top of its next round, at once: the signal sets
    its latch)."""
    q("ALTER SYSTEM SET %s = '%s'" % (name, value))
    q("SELECT pg_reload_conf()")
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        c = connect()
        try:
            with c.cursor() as cur:
                cur.execute("SELECT current_setting(%s) = %s", (name, value))
                if cur.fetchone()[0]:
                    return
        finally:
            c.close()
        time.sleep(0.05)
    report("%s = %s was not picked up after a reload" % (name, value))


def wait_for(cond, seconds, every, msg):
    """Poll cond() every `every` s until it is true; bail(msg) once it is
    still false more than `seconds` s after the start."""
    deadline = time.monotonic() + seconds
    while not cond():
        if time.monotonic() > deadline:
            bail(msg)
        time.sleep(every)


def wait_for_worker(q):
    """Wait (up to 20 s) until the frameq worker is in pg_stat_activity and
    worker_status() says it started.  On a fresh cluster the worker's first
    try fails (its database is created after the server starts) and the
    postmaster retries after 5 s."""
    wait_for(lambda: one(q, "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE backend_type = 'frameq worker') "
                            "AND (SELECT started FROM frameq.worker_status())"),
             20, 0.1, "no frameq worker in pg_stat_activity after 20 s")


class Listener:
    """One session LISTENing on some channels; remembers (time, channel,
    payload) of every notification it has read, in .got."""

    def __init__(self, *channels):
        self.conn = connect()
        with self.conn.cursor() as cur:
            for ch in channels:
                cur.execute('LISTEN "%s"' % ch)
        self.got = []

    def pump(self, timeout):
        """Wait up to timeout s for notifications and read those there are
        (all stamped with the time they were read)."""
        if select.select([self.conn], [], [], max(timeout, 0)) != ([], [], []):
            self.conn.poll()
            now = time.monotonic()
            while self.conn.notifies:
                n = self.conn.notifies.pop(0)
                self.got.append((now, n.channel, n.payload))

    def pump_until(self, deadline):
        """Read notifications until time.monotonic() reaches deadline."""
        while time.monotonic() < deadline:
            self.pump(deadline - time.monotonic())

    def wait(self, pred, timeout):
        """The first new notification (t, channel, payload) with
        pred(channel, payload), or None after timeout s."""
        deadline = time.monotonic() + timeout
        seen = len(self.got)
        while True:
            for item in self.got[seen:]:
                if pred(item[1], item[2]):
                    return item
            seen = len(self.got)
            if time.monotonic() >= deadline:
                return None
            self.pump(min(0.05, deadline - time.monotonic()))


def create_farm(q, name):
    """Allocation and show `name`, the show subscribed to the allocation
    (size 100, burst 100)."""
    q("SELECT frameq.create_allocation(%s)", name)
    q("SELECT frameq.create_show(%s)", name)
    q("SELECT frameq.set_subscription(%s, %s, 100, 100)", name, name)


def submit(q, show, name, frames, **job):
    """Submit job `name` to show: one layer "r" of `sleep 1000` frames
    (range `frames`, one core each), plus the job fields in job (folder,
    max_cores, ...).  Returns the job id."""
    spec = dict(show=show, name=name, **job)
    spec["layers"] = [{"name": "r", "command": "sleep 1000", "range": frames, "cores": 1}]
    return one(q, "SELECT frameq.submit(%s)", json.dumps(spec))


def register(q, name, alloc, cores):
    """Register host `name` in alloc (cores, 16 GB).  Returns the host as a
    dict: name, token, id, and procs (what it runs: nothing yet)."""
    token = one(q, "SELECT frameq.register_host(%s, %s, %s, 16000000000)", name, alloc, cores)
    hid = one(q, "SELECT id FROM frameq.host WHERE name = %s", name)
    return dict(name=name, token=token, id=hid, procs=[])


def attach(q, h):
    """Attach host h (boot id boot-1): sets h["epoch"]; it runs nothing yet."""
    h["epoch"] = one(q, "SELECT epoch FROM frameq.attach(%s, %s, 'boot-1')", h["name"], h["token"])
    h["procs"] = []


def reserve(q, h, n=1):
    """Book up to n frames for host h.  Returns [(proc, frame), ...] by frame
    and adds the procs to h["procs"]."""
    got = q("SELECT proc, frame FROM frameq.reserve(%s, %s, %s, %s) ORDER BY frame",
            h["name"], h["token"], h["epoch"], n)
    h["procs"] += [p for p, f in got]
    return got


def heartbeat(q, h):
    """Host h's heartbeat, listing h["procs"]; returns its kill list."""
    return one(q, "SELECT kill FROM frameq.heartbeat(%s, %s, %s, %s::bigint[])",
               h["name"], h["token"], h["epoch"], h["procs"])


def host_with_frame(q, name, alloc, cores):
    """A host registered, attached and booked with exactly one frame (bail
    if it gets another number): the register() dict plus epoch, proc and
    frame."""
    h = register(q, name, alloc, cores)
    attach(q, h)
    b = reserve(q, h, 1)
    if len(b) != 1:
        bail("setup: reserve for %s booked %d frames" % (name, len(b)))
    h["proc"], h["frame"] = b[0]
    return h


def check_clean(q, label="check()"):
    """fail("<label>: <problems>") if frameq.check() reports any."""
    problems = q("SELECT invariant, detail FROM frameq.check()")
    if problems:
        fail("%s: %s" % (label, problems))
