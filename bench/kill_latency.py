#!/usr/bin/python3
"""Item 7 of bench/run: kill-order latency end to end, and zombie detection.

    /usr/bin/python3 bench/kill_latency.py KILLS DOWNS

Connects through the PG* environment (a superuser) to the benchmark
database.  It sets up a farm of its own: an allocation, a show, one host
with its own login role (a member of frameq_agent) and a job whose frames
run RENDER (below), and starts a real agent (agent/frameq-agent,
built if missing) for that host with --max-frames 1: one render at a time.

A kill goes the whole way an operator's kill goes: the operator's
kill_frame() commits; the worker, woken at that commit, announces the order
on frameq_host_<id>; the agent takes the notification as a hint and
heartbeats; the heartbeat's answer lists the proc; the agent tells the
render's supervisor, which sends SIGTERM to the render's process group; the
render's handler reads CLOCK_MONOTONIC (one clock for the machine, also the
one time.monotonic() reads here) and writes it to a file.  The latency runs
from sending COMMIT to that reading, so it includes the commit's own WAL
flush: an upper bound; the time from COMMIT's acknowledgement is the lower
bound.

For each of KILLS frames: wait until the agent's render is ready (its
SIGTERM handler is installed), then BEGIN; kill_frame(); COMMIT.  Kills are
at least MIN_GAP apart, so no notification comes within the agent's 100 ms
hint coalescing (no notification flood; closer ones would wait for the end
of the gap).  The agent confirms each kill with complete(); a run that does
not end 'killed' counts in confirm_not_accepted.  DOWNS more rounds do the
same with set_host_state(host, 'down'), then 'up' again once the proc is
released.

Zombie detection: after the agent has stopped, a frame is booked and
completed by this process under a fresh attach, and a heartbeat that still
lists its proc must return it in its kill list.

The lease is whatever the server's frameq.lease_ttl says (bench/run: 3600 s,
so no regular heartbeat comes during the run: every kill arrives through a
notification's heartbeat).  Prints one line of JSON.
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import psycopg2

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
AGENT = os.path.join(REPO, "agent", "frameq-agent")

# The render: installs a SIGTERM handler, then creates DIR/ready.<proc> and
# sleeps.  On SIGTERM the handler reads CLOCK_MONOTONIC first thing, writes
# it (atomically) to DIR/term.<proc> and exits 143.
RENDER = r'''
import os
import signal
import sys
import time

DIR = sys.argv[1]
PROC = os.environ["FRAMEQ_PROC"]


def on_term(signum, frame):
    t = time.monotonic()
    tmp = os.path.join(DIR, "term.%s.tmp" % PROC)
    with open(tmp, "w") as f:
        f.write(repr(t))
    os.rename(tmp, os.path.join(DIR, "term." + PROC))
    os._exit(143)


signal.signal(signal.SIGTERM, on_term)
open(os.path.join(DIR, "ready." + PROC), "w").close()
while True:
    signal.pause()
'''
MIN_GAP = 0.2           # seconds between two kill commits (> the 100 ms hint gap)
WARMUP = 5


def connect():
    conn = psycopg2.connect("")
    conn.autocommit = True
    return conn


def percentile(sorted_values, p):
    """nearest rank"""
    if not sorted_values:
        return None
    k = max(0, min(len(sorted_values) - 1, -(-len(sorted_values) * p // 100) - 1))
    return sorted_values[int(k)]


def wait_until(what, cond, timeout=30, step=0.002):
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > deadline:
            raise SystemExit("kill_latency: %s: not within %d s" % (what, timeout))
        time.sleep(step)


class Farm:
    """The host, its role, its job and its agent."""

    def __init__(self, admin, frames):
        self.admin = admin
        self.dir = tempfile.mkdtemp(prefix="frameq-klat-")
        os.chmod(self.dir, 0o755)
        render = os.path.join(self.dir, "render.py")
        with open(render, "w") as f:
            f.write(RENDER)
        tag = "klat%d" % os.getpid()
        self.host = tag + "-1"
        self.role = "fqh_" + self.host
        c = admin.cursor()
        c.execute("SELECT frameq.create_allocation(%s)", (tag,))
        c.execute("SELECT frameq.create_show(%s)", (tag,))
        c.execute("SELECT frameq.set_subscription(%s, %s, 100, 100)", (tag, tag))
        c.execute("SELECT frameq.register_host(%s, %s, 4, 4294967296)", (self.host, tag))
        self.token = c.fetchone()[0]
        c.execute('CREATE ROLE "%s" LOGIN IN ROLE frameq_agent' % self.role)
        c.execute("SELECT id FROM frameq.host WHERE name = %s", (self.host,))
        self.host_id = c.fetchone()[0]
        c.execute("SELECT frameq.submit(%s)", (json.dumps({
            "show": tag, "name": tag, "priority": 1000000, "max_retries": 0,
            "layers": [{"name": "r", "range": "1-%d" % frames, "cores": 1,
                        "command": "exec /usr/bin/python3 %s %s" % (render, self.dir)}]}),))
        self.job = c.fetchone()[0]
        self.token_file = os.path.join(self.dir, "token")
        with open(os.open(self.token_file, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
            f.write(self.token + "\n")
        self.log_path = os.path.join(self.dir, "agent.log")
        self.agent = None

    def start_agent(self):
        if not os.access(AGENT, os.X_OK):
            subprocess.run(["make", "-s", "-C", os.path.join(REPO, "agent")], check=True,
                           stdout=subprocess.DEVNULL)
        conninfo = "user=%s" % self.role     # the rest from the PG* environment
        env = {k: v for k, v in os.environ.items() if not k.startswith("FRAMEQ_")}
        for d in ("state", "log"):
            os.makedirs(os.path.join(self.dir, d), exist_ok=True)
        log = open(self.log_path, "ab")
        self.agent = subprocess.Popen(
            [AGENT, "--conninfo", conninfo, "--host", self.host, "--token-file", self.token_file,
             "--cores", "4", "--memory", "4GB", "--gpus", "0", "--max-frames", "1",
             "--state-dir", os.path.join(self.dir, "state"), "--log-dir", os.path.join(self.dir, "log"),
             "--work-dir", self.dir, "--kill-grace", "1", "--reserve-interval", "0.05",
             "--kill-on-term"],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
        log.close()

    def stop_agent(self):
        if self.agent and self.agent.poll() is None:
            self.agent.send_signal(signal.SIGTERM)
            try:
                self.agent.wait(30)
            except subprocess.TimeoutExpired:
                self.agent.kill()
                self.agent.wait()

    def agent_alive(self):
        return self.agent is not None and self.agent.poll() is None

    def cleanup(self, keep):
        self.stop_agent()
        if not keep:
            shutil.rmtree(self.dir, ignore_errors=True)


def main():
    kills = int(sys.argv[1])
    downs = int(sys.argv[2])

    admin = connect()
    operator = connect()
    operator.autocommit = False
    a = admin.cursor()
    o = operator.cursor()

    farm = Farm(admin, kills + downs + WARMUP + 50)
    ok = False
    try:
        # the worker sends the notifications: it must be up
        wait_until("the frameq worker to run", lambda: (
            a.execute("SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'frameq worker'")
            or a.fetchone()[0] == 1), timeout=30, step=0.1)
        farm.start_agent()

        def ready_proc():
            """the proc whose render is up, with its SIGTERM handler installed"""
            if not farm.agent_alive():
                raise SystemExit("kill_latency: the agent exited; see %s" % farm.log_path)
            for name in os.listdir(farm.dir):
                if name.startswith("ready."):
                    proc = int(name.split(".")[1])
                    if not os.path.exists(os.path.join(farm.dir, "term.%d" % proc)):
                        return proc
            return None

        def term_time(proc):
            try:
                with open(os.path.join(farm.dir, "term.%d" % proc)) as f:
                    return float(f.read())
            except (FileNotFoundError, ValueError):
                return None

        def released(proc):
            a.execute("SELECT reason FROM frameq.run WHERE proc = %s AND ended_at IS NOT NULL", (proc,))
            row = a.fetchone()
            return row and row[0]

        last_commit = [0.0]

        def measure(n, kill, restore=None):
            after_send = []
            after_ack = []
            bad = 0
            for _ in range(n):
                proc = wait_until("a render to be ready", ready_proc)
                a.execute("SELECT frame FROM frameq.proc WHERE id = %s", (proc,))
                frame = a.fetchone()[0]
                gap = last_commit[0] + MIN_GAP - time.monotonic()
                if gap > 0:
                    time.sleep(gap)
                kill(frame)
                sent = time.monotonic()
                operator.commit()
                committed = time.monotonic()
                last_commit[0] = committed
                termed = wait_until("SIGTERM to reach the render of proc %d" % proc,
                                    lambda: term_time(proc))
                after_send.append((termed - sent) * 1000.0)
                after_ack.append((termed - committed) * 1000.0)
                # the agent confirms: its render died of the kill
                if wait_until("proc %d to be released" % proc, lambda: released(proc)) != "killed":
                    bad += 1
                if restore:
                    restore()
                    operator.commit()
            after_send.sort()
            after_ack.sort()
            return {
                "n": n,
                "p50_ms": percentile(after_send, 50),
                "p99_ms": percentile(after_send, 99),
                "max_ms": after_send[-1] if after_send else None,
                "p50_from_ack_ms": percentile(after_ack, 50),
                "p99_from_ack_ms": percentile(after_ack, 99),
                "min_from_ack_ms": after_ack[0] if after_ack else None,
                "confirm_not_accepted": bad,
            }

        def kill_frame(frame):
            o.execute("SELECT frameq.kill_frame(%s, 'bench kill')", (frame,))

        measure(WARMUP, kill_frame)
        result = {"path": "kill_frame COMMIT -> worker NOTIFY -> agent heartbeat -> "
                          "supervisor SIGTERM -> render's handler",
                  "min_gap_s": MIN_GAP}
        result["kill_frame"] = measure(kills, kill_frame)
        result["host_down"] = measure(
            downs, lambda frame: o.execute("SELECT frameq.set_host_state(%s, 'down')", (farm.host,)),
            restore=lambda: o.execute("SELECT frameq.set_host_state(%s, 'up')", (farm.host,)))
        a.execute("SELECT count(*) FROM frameq.run WHERE host = %s", (farm.host_id,))
        result["runs"] = a.fetchone()[0]
        with open(farm.log_path) as f:
            text = f.read()
        result["agent_kill_orders_from_heartbeats"] = text.count(" source=heartbeat")
        farm.stop_agent()

        # zombie: a released proc still reported by the host
        a.execute("SELECT epoch FROM frameq.attach(%s, %s, 'bench-zombie')", (farm.host, farm.token))
        epoch = a.fetchone()[0]
        a.execute("SELECT proc FROM frameq.reserve(%s, %s, %s, 1)", (farm.host, farm.token, epoch))
        proc = a.fetchone()[0]
        a.execute("SELECT frameq.complete(%s, %s, %s, %s, 0, 0)", (farm.host, farm.token, epoch, proc))
        accepted = a.fetchone()[0]
        a.execute("SELECT kill FROM frameq.heartbeat(%s, %s, %s, %s)",
                  (farm.host, farm.token, epoch, [proc]))
        kill_list = a.fetchone()[0] or []
        result["zombie"] = {"completed": accepted, "proc": proc, "in_kill_list": proc in kill_list}
        # leave nothing booked or running behind
        a.execute("SELECT frameq.kill_job(%s, 'bench done')", (farm.job,))
        a.execute("SELECT * FROM frameq.heartbeat(%s, %s, %s, '{}')", (farm.host, farm.token, epoch))
        print(json.dumps(result))
        ok = True
    finally:
        farm.cleanup(keep=not ok)
        if not ok:
            sys.stderr.write("kill_latency: kept %s (agent log: %s)\n" % (farm.dir, farm.log_path))


if __name__ == "__main__":
    main()
