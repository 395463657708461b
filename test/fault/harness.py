#!/usr/bin/python3
"""Fault-injection harness for frameq: a small farm on one machine, faults
on a seeded random schedule, a history, and a strict checker (check.py).

Topology (loopback; servers run as postgres via runuser):
  - server a (primary) and server b (streaming standby, pg_basebackup -R),
    both with frameq preloaded;
  - N simulated hosts, each one frameq-agent with its supervisors and
    witness renders (render.py); each host reaches the servers only through
    its own pair of fault proxies (proxy.py), so a partition is real TCP;
  - the harness itself (submitter, nemesis, render monitor) talks to the
    servers directly.

Phases: setup, load (jobs submitted to keep a backlog, faults injected one
or two at a time), heal (every fault undone), quiescence (until nothing
waits, runs or is booked, and nothing is 'depend' unless a dead task may
hold it), final (read the database into final.json; once the servers
are stopped, add every reserve() call from their logs: dblog.py), check.

Jobs: 40 % one layer of single frames, 15 % one layer in chunks of 2 to 4,
20 % two layers, the second after the first (layer on layer), 25 % two
layers frame by frame (after_frames) with a chunk of up to 3 on either
side, sometimes a third after the second; a quarter of them also wait for
one or two of the last six jobs (after_jobs).  final.json records
frameq.depends, each task's size and each job's finish (check.py, C8).
Every job has requeue exit code 75, a requeue_delay of 1 or 2 s, a
max_requeues of 1 to 3 and a retry_delay of 0 or 1 s (a layer sometimes
its own); a render of 15 % of the frames exits 75 on its first 1 to 3
runs, and of 5 % exits 1 on its first (render.py, FQH_MISBEHAVE), so that
some tasks are requeued, some past max_requeues, some retried after a
delay.  final.json records each layer's delays in force (check.py, C9).
About a third of the jobs have a `timeout` (TIMEOUT s; a layer sometimes its
own, TIMEOUT + 1) and a `timeout_no_output` (NO_OUTPUT s); in them a
render of --hang-percent (8) % of the frames hangs on its first run, writing a
line every 0.5 s, and of as many goes silent, alive but writing nothing
(render.py, FQH_HANG): frameq must end each (a kill order, reason
`timeout` or `stalled`, unless a fault ends it first).  final.json
records each layer's timeouts in force (check.py, C10).

Usage: harness.py --out DIR [--seed N] [--duration S] [--hosts N]
                  [--every-kind] [--port BASE] [--keep] [--hang-percent P]
Exit status: the checker's (0 no violation, 1 violations, 2 bad input),
or 3 if the harness itself failed.
"""

import argparse
import json
import math
import os
import random
import re
import select
import shutil
import signal
import subprocess
import sys
import threading
import time
import traceback

import psycopg2

sys.dont_write_bytecode = True     # leave no __pycache__ in the tree
import dblog  # noqa: E402
import formation  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
AGENT = os.path.join(REPO, "agent", "frameq-agent")
PGBIN = os.environ.get("FRAMEQ_PGBIN", "/usr/lib/postgresql/15/bin")
PY = "/usr/bin/python3"

TTL = 3.0           # frameq.lease_ttl
DRIFT = 0.05        # frameq.clock_drift (default)
MARGIN = 1.0        # frameq.lease_margin
LEASE_PERIOD = TTL * (1 + DRIFT) + MARGIN
POLL = 1.0          # the worker's longest sleep
RENDER_MAX = 2.8    # render.py's longest render, before publishing
DELAY_MAX = 2.0     # the longest requeue or retry delay of a job
MISBEHAVE_RUNS = 3  # the most runs of a frame that exit with a code on purpose
TIMEOUT = 5         # the timeout of the jobs that have one (a layer's own: + 1)
NO_OUTPUT = 3       # their timeout_no_output
HANG_PERCENT = 8    # of their frames hang on their first run, and as many go silent
HANG_RUNS = 1       # the most runs of a frame that hang or go silent
FREEZE_K = 5.0      # a frozen run must be dead this long after thawing
HOST_CORES = 2
HOST_MEMORY = 4294967296

HOST_KINDS = ["agent_stop", "host_freeze", "agent_kill", "render_kill", "supervisor_kill",
              "proxy_blackhole", "proxy_reset", "proxy_delay", "drop_reports"]
DB_KINDS = ["terminate_backends", "worker_kill", "server_crash", "failover"]
KINDS = HOST_KINDS + DB_KINDS
# --ha pg_auto_failover: the formation's manager does the failovers
# (formation.py): `pg_autoctl perform failover`, the death of the primary's
# node (its pg_autoctl and postgres), and a cut between the primary and
# both the monitor and the standby; server_crash kills postgres alone (its
# pg_autoctl restarts it)
HA_KINDS = ["ha_failover", "ha_node_kill", "ha_partition"]
HA_DB_KINDS = ["terminate_backends", "worker_kill", "server_crash"] + HA_KINDS
# not a fault frameq survives but an operator's lie, injected only on request
# (--inject false_confirm_dead): it shows that the harness and the checker
# catch a frame running twice when one really does; and an operator's
# maintenance kept from the checker (--inject hidden_farm_down): every host
# down for a while, so their empty reserve() calls look like waiting frames
# passed over; and an operator's move of a hung render's deadline an hour
# on, also kept from the checker (--inject hidden_timeout_push): the render
# runs far past the timeout its layer has in final.json
UNSAFE_KINDS = ["false_confirm_dead", "hidden_farm_down", "hidden_timeout_push"]
# kinds without a target host (taken one at a time, like the DB's faults)
UNTARGETED = DB_KINDS + HA_KINDS + ["hidden_farm_down", "hidden_timeout_push"]
WEIGHTS = {"agent_stop": 10, "host_freeze": 4, "agent_kill": 6, "render_kill": 10,
           "supervisor_kill": 6, "proxy_blackhole": 8, "proxy_reset": 8, "proxy_delay": 6,
           "drop_reports": 6, "terminate_backends": 6, "worker_kill": 3, "server_crash": 3,
           "failover": 2, "ha_failover": 3, "ha_node_kill": 3, "ha_partition": 3,
           "false_confirm_dead": 5, "hidden_farm_down": 5,
           "hidden_timeout_push": 5}


# --ha: the database's faults.  A manager's failover holds the database
# for 10 to 40 s, the others for seconds; the short ones weigh more, so
# that a long run has at least 20 of each kind (an hour: about 28 of each
# failover and 40 of each short kind)
HA_WEIGHTS = dict(WEIGHTS, terminate_backends=6, worker_kill=6, server_crash=6,
                  ha_failover=4, ha_node_kill=4, ha_partition=4)


class History:
    def __init__(self, path):
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self.lock = threading.Lock()

    def log(self, ev, t=None, **kw):
        rec = {"ev": ev, "t": time.monotonic() if t is None else t, "wall": time.time()}
        rec.update(kw)
        with self.lock:
            os.write(self.fd, (json.dumps(rec) + "\n").encode())


def say(*args):
    print("[%s] %s" % (time.strftime("%H:%M:%S"), " ".join(str(a) for a in args)), flush=True)


class Server:
    """One PostgreSQL 15 cluster, run as postgres."""

    def __init__(self, root, name, port):
        self.name = name
        self.port = port
        self.dir = os.path.join(root, "pg", name)
        self.data = os.path.join(self.dir, "data")
        self.log = os.path.join(self.dir, "server.log")
        os.makedirs(self.dir, exist_ok=True)
        shutil.chown(self.dir, "postgres", "postgres")

    def run(self, *args, check=True, timeout=120):
        r = subprocess.run(["runuser", "-u", "postgres", "--"] + list(args), cwd=self.dir,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout)
        if check and r.returncode != 0:
            raise RuntimeError("%s: %s failed: %s" % (self.name, args[0], r.stdout.decode()[-2000:]))
        return r

    def ctl(self, *args, check=True):
        return self.run(PGBIN + "/pg_ctl", "-D", self.data, "-l", self.log, *args, check=check)

    def own_conf(self):
        return ("port = %d\nunix_socket_directories = '%s'\n" % (self.port, self.dir))

    def initdb(self):
        self.run(PGBIN + "/initdb", "-D", self.data, "--auth=trust", "-U", "postgres",
                 "--encoding=UTF8", "--locale=C", "--no-sync")
        with open(os.path.join(self.data, "postgresql.conf"), "a") as f:
            f.write("""
listen_addresses = '127.0.0.1'
shared_preload_libraries = 'frameq,auto_explain'
frameq.database = 'fq'
frameq.lease_ttl = '%ds'
frameq.lease_margin = '%ds'
frameq.kill_resend_interval = '1s'
wal_level = replica
max_wal_senders = 4
wal_keep_size = '256MB'
hot_standby = on
fsync = off
max_connections = 80
log_min_messages = warning
log_line_prefix = '%s'
track_commit_timestamp = on
""" % (TTL, MARGIN, dblog.LOG_LINE_PREFIX) + self.own_conf())

    def basebackup(self, primary):
        """Make this server a fresh standby of primary (wipes its data)."""
        shutil.rmtree(self.data, ignore_errors=True)
        self.run(PGBIN + "/pg_basebackup", "-h", "127.0.0.1", "-p", str(primary.port), "-U", "postgres",
                 "-D", self.data, "-R", "-X", "stream", "-c", "fast")
        with open(os.path.join(self.data, "postgresql.conf"), "a") as f:
            f.write("\n" + self.own_conf())

    def start(self):
        self.ctl("-w", "-t", "120", "start")

    def stop(self, mode):
        self.ctl("-w", "-m", mode, "stop", check=False)

    def promote(self):
        self.ctl("-w", "-t", "120", "promote")

    def running(self):
        return self.ctl("status", check=False).returncode == 0


class Proxy:
    def __init__(self, specs):
        self.p = subprocess.Popen([PY, os.path.join(HERE, "proxy.py")] + specs,
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.lock = threading.Lock()
        if self.p.stdout.readline().strip() != "ready":
            raise RuntimeError("proxy did not start")

    def set(self, host, mode, ms=0):
        with self.lock:
            self.p.stdin.write("%s %s %d\n" % (host, mode, ms))
            self.p.stdin.flush()
            answer = self.p.stdout.readline().strip()
        if answer != "ok":
            raise RuntimeError("proxy: " + answer)

    def close(self):
        try:
            self.p.stdin.close()
            self.p.wait(10)
        except Exception:
            self.p.kill()


def descendants(pid):
    """Every live descendant of pid, from /proc."""
    children = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % d) as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(d))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def parent_of(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def signal_pid(pid, sig):
    try:
        os.kill(pid, sig)
        return True
    except ProcessLookupError:
        return False


class Agent:
    def __init__(self, h, name, out, conninfo, token):
        self.h = h
        self.name = name
        self.conninfo = conninfo
        self.state_dir = os.path.join(out, "agents", name + ".state")
        self.log_dir = os.path.join(out, "agents", name + ".renders")
        self.log_path = os.path.join(out, "agents", name + ".log")
        self.conf = os.path.join(out, "agents", name + ".conf")
        self.token_file = os.path.join(out, "agents", name + ".token")
        for d in (self.state_dir, self.log_dir):
            os.makedirs(d, exist_ok=True)
        with open(self.token_file, "w") as f:
            f.write(token + "\n")
        os.chmod(self.token_file, 0o600)
        self.set_drop(0)
        self.out = out
        self.p = None

    def set_drop(self, pct):
        with open(self.conf, "w") as f:
            f.write("fault-drop-reports = %d\n" % pct)

    def start(self):
        env = dict(os.environ, FQH_DIR=self.out, FQH_CONNINFO=self.conninfo)
        log = open(self.log_path, "ab")
        self.p = subprocess.Popen(
            [AGENT, "--config", self.conf, "--conninfo", self.conninfo, "--host", self.name,
             "--token-file", self.token_file, "--cores", str(HOST_CORES), "--memory", "4GB",
             "--state-dir", self.state_dir, "--log-dir", self.log_dir, "--work-dir", self.out,
             "--kill-grace", "1", "--reserve-interval", "0.3"],
            stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        log.close()

    def alive(self):
        return self.p is not None and self.p.poll() is None

    def kill(self):
        if self.alive():
            self.p.send_signal(signal.SIGKILL)
            self.p.wait()

    def stop(self, timeout=20):
        if not self.alive():
            return
        signal_pid(self.p.pid, signal.SIGCONT)
        self.p.send_signal(signal.SIGTERM)
        try:
            self.p.wait(timeout)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()


class Monitor(threading.Thread):
    """Follows renders.jsonl and records the death of every render (pidfd)."""

    def __init__(self, path, history):
        super().__init__(daemon=True)
        self.path = path
        self.history = history
        self.live = {}          # proc -> (pid, host)
        self.hung = {}          # proc -> mode, of every render that hung (render.py)
        self.lock = threading.Lock()
        self.stopping = False
        self.started_count = 0

    def run(self):
        poller = select.poll()
        fds = {}
        buf = b""
        fd = os.open(self.path, os.O_RDONLY | os.O_CREAT, 0o644)
        while not (self.stopping and not fds):
            chunk = os.read(fd, 1 << 20)
            if chunk:
                buf += chunk
                *lines, buf = buf.split(b"\n")
                for line in lines:
                    try:
                        rec = json.loads(line)
                    except ValueError:
                        continue
                    if rec.get("ev") == "hang":
                        with self.lock:
                            self.hung[rec["proc"]] = rec["mode"]
                    if rec.get("ev") != "start":
                        continue
                    self.started_count += 1
                    proc, pid = rec["proc"], rec["pid"]
                    try:
                        pfd = os.pidfd_open(pid)
                    except ProcessLookupError:
                        self.history.log("dead", proc=proc, pid=pid, late=True)
                        continue
                    fds[pfd] = (proc, pid)
                    poller.register(pfd, select.POLLIN)
                    with self.lock:
                        self.live[proc] = (pid, rec["host"])
            for pfd, _ in poller.poll(10):
                proc, pid = fds.pop(pfd)
                self.history.log("dead", proc=proc, pid=pid, late=False)
                poller.unregister(pfd)
                os.close(pfd)
                with self.lock:
                    self.live.pop(proc, None)

    def hung_live(self, mode):
        """The live renders that hung in this mode."""
        with self.lock:
            return [proc for proc, m in self.hung.items() if m == mode and proc in self.live]

    def renders_of(self, host=None):
        with self.lock:
            return [(proc, pid) for proc, (pid, h) in self.live.items() if host is None or h == host]


class Watcher(threading.Thread):
    """--ha: asks each node four times a second, straight (no proxy),
    whether it takes writes.  Every change of the node that does is a
    failover, whoever caused it: recorded in failovers with wall (and t)
    the moment the old primary was first seen not taking writes (the end
    of what it could acknowledge) and promoted_wall the moment the new one
    was first seen taking them; and in the history as a fault of kind
    promotion from the one to the other (check.py counts it as a failover,
    the harness's fault that caused it or not), followed by a look for the
    submissions it lost.  Two nodes taking writes at once is a split
    brain: a harness error."""

    def __init__(self, h):
        super().__init__(daemon=True)
        self.h = h
        self.conns = {}
        self.writer = h.primary.name
        self.first_not = None
        self.stopping = False
        self.split = False
        self.changed = threading.Condition()

    def writable(self, node):
        try:
            c = self.conns.get(node.name)
            if c is None or c.closed:
                c = psycopg2.connect(host="127.0.0.1", port=node.port, dbname="fq", user="postgres",
                                     connect_timeout=1, application_name="fqh-harness-watch")
                c.autocommit = True
                self.conns[node.name] = c
            with c.cursor() as cur:
                # a standby being promoted refuses writes to read-write
                # sessions until the monitor confirms it
                cur.execute("SELECT NOT pg_is_in_recovery() AND "
                            "current_setting('default_transaction_read_only') = 'off'")
                return cur.fetchone()[0]
        except psycopg2.Error:
            c = self.conns.pop(node.name, None)
            if c is not None:
                c.close()
            return False

    def run(self):
        nodes = {n.name: n for n in self.h.formation.nodes}
        while not self.stopping:
            t, wall = time.monotonic(), time.time()
            writers = [name for name, n in nodes.items() if self.writable(n)]
            if len(writers) > 1 and not self.split:
                self.h.history.log("two_writers", nodes=writers)
                self.h.errors.append("split brain: %s take writes at once" % writers)
            self.split = len(writers) > 1
            if self.writer in writers:
                self.first_not = None
            elif self.first_not is None:
                self.first_not = (t, wall)
            for name in writers:
                if name == self.writer:
                    continue
                end_t, end_wall = self.first_not or (t, wall)
                rec = {"t": end_t, "wall": end_wall, "promoted_t": t, "promoted_wall": wall,
                       "old": self.writer, "new": name}
                self.h.failovers.append(rec)
                self.h.history.log("promotion", **rec)
                fid = 1000000 + len(self.h.failovers)
                self.h.history.log("fault_on", t=end_t, wall=end_wall, id=fid, kind="promotion",
                                   target=None, old=self.writer, new=name)
                self.h.history.log("fault_off", t=t, wall=wall, id=fid)
                threading.Thread(target=self.lost_submits, args=(nodes[name],), daemon=True).start()
                say("  promotion: %s -> %s" % (self.writer, name))
                with self.changed:
                    self.writer, self.first_not = name, None
                    self.h.primary = nodes[name]
                    self.h.standby = next(n for k, n in nodes.items() if k != name)
                    self.changed.notify_all()
                break
            time.sleep(0.25)
        for c in self.conns.values():
            c.close()

    def lost_submits(self, new):
        try:
            with self.h.submit_lock:
                self.h.lost_submits(new)
        except Exception:
            self.h.errors.append("after a promotion: " + traceback.format_exc())

    def wait_for_new(self, old, timeout=120):
        """Until a node other than old takes writes."""
        deadline = time.monotonic() + timeout
        with self.changed:
            while self.writer == old:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise RuntimeError("no failover from %s within %ds" % (old, timeout))
                self.changed.wait(left)


class Harness:
    def __init__(self, args):
        self.args = args
        self.out = os.path.abspath(args.out)
        self.rng = random.Random(args.seed)
        for d in ("history", "witness", "tmp", "caps", "agents", "pg", "misbehaved"):
            os.makedirs(os.path.join(self.out, d), exist_ok=True)
        os.chmod(self.out, 0o755)
        self.history = History(os.path.join(self.out, "history", "harness.jsonl"))
        base = args.port
        self.formation = None
        if args.ha:
            self.formation = formation.Formation(self.out, base, PGBIN, TTL, MARGIN,
                                                 dblog.LOG_LINE_PREFIX, descendants)
            self.servers = list(self.formation.nodes)
        else:
            self.servers = [Server(self.out, "a", base), Server(self.out, "b", base + 1)]
        self.primary, self.standby = self.servers
        self.conninfo = ("host=127.0.0.1,127.0.0.1 port=%d,%d dbname=fq user=postgres "
                         "target_session_attrs=read-write connect_timeout=3"
                         % (self.servers[0].port, self.servers[1].port))
        self.watcher = None
        self.host_names = ["h%d" % (i + 1) for i in range(args.hosts)]
        self.proxy_ports = {h: (base + 10 + 2 * i, base + 11 + 2 * i) for i, h in enumerate(self.host_names)}
        self.agents = {}
        self.proxy = None
        self.monitor = None
        self.jobs = {}          # job id -> groups
        self.job_names = {}     # job name -> id
        self.submit_lock = threading.Lock()
        self.caps = {}
        self.failovers = []
        self.faults = {}        # kind -> count
        self.db_busy = threading.Lock()
        self.busy_hosts = set()
        self.busy_lock = threading.Lock()
        self.active = []
        self.fault_id = 0
        self.stop_load = threading.Event()
        self.errors = []
        self.operator = []      # (host, begin, end): host state set by an operator
        known = HOST_KINDS + HA_DB_KINDS if args.ha else KINDS
        self.kinds = args.inject.split(",") if args.inject else known
        for k in self.kinds:
            if k not in known + UNSAFE_KINDS:
                raise SystemExit("unknown fault kind: " + k)

    # ---- database helpers -------------------------------------------------

    def sql(self, query, params=None, fetch=True, timeout=60):
        """Run one statement on the primary, retrying through outages.  A
        server that ends the session mid-statement (a crash restart) can
        also leave psycopg2 an InterfaceError ("connection already closed")
        rather than an OperationalError: an outage too."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                conn = psycopg2.connect(self.conninfo, application_name="fqh-harness")
                try:
                    with conn, conn.cursor() as cur:
                        cur.execute(query, params)
                        return cur.fetchall() if fetch else None
                finally:
                    conn.close()
            except (psycopg2.OperationalError, psycopg2.InterfaceError):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.3)

    # ---- set-up -----------------------------------------------------------

    def setup(self):
        self.history.log("phase", phase="setup")
        say("setup: primary and standby on ports", self.primary.port, self.standby.port)
        specs = []
        for h in self.host_names:
            pa, pb = self.proxy_ports[h]
            specs += ["%s:%d:%d" % (h, pa, self.servers[0].port), "%s:%d:%d" % (h, pb, self.servers[1].port)]
        if self.formation:
            # the nodes reach each other and the monitor through proxies
            self.proxy = Proxy(specs + self.formation.proxy_specs())
            self.setup_formation()
        else:
            self.primary.initdb()
            self.primary.start()
            self.primary.run(PGBIN + "/psql", "-X", "-q", "-h", "127.0.0.1", "-p", str(self.primary.port),
                             "-d", "postgres", "-c", "CREATE DATABASE fq")
        self.sql("""
            CREATE EXTENSION frameq;
            CREATE SCHEMA fqh;
            CREATE TABLE fqh.output (frame bigint PRIMARY KEY, proc bigint NOT NULL, content text NOT NULL);
            CREATE TABLE fqh.publish_log (id bigserial PRIMARY KEY, frame bigint NOT NULL,
                                          proc bigint NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp());
            SELECT frameq.create_allocation('farm');
            SELECT frameq.create_show('alpha');
            SELECT frameq.create_show('beta');
            SELECT frameq.set_subscription('alpha', 'farm', 4, 6);
            SELECT frameq.set_subscription('beta', 'farm', 3, 5);
            SELECT frameq.create_folder('alpha', 'shots', 4);
            SELECT frameq.create_limit('lic', 3);
        """, fetch=False)
        self.caps = {"show-alpha": 6, "show-beta": 5, "folder-shots": 4, "limit-lic": 3}
        # one login role per host (a member of frameq_agent), as the agent
        # and its renders log in: no host's session can end another's; the
        # renders publish into fqh.* through fqh_publisher
        self.sql("""
            CREATE ROLE fqh_publisher NOLOGIN;
            GRANT USAGE ON SCHEMA fqh TO fqh_publisher;
            GRANT SELECT, INSERT, UPDATE ON fqh.output TO fqh_publisher;
            GRANT INSERT ON fqh.publish_log TO fqh_publisher;
            GRANT USAGE ON SEQUENCE fqh.publish_log_id_seq TO fqh_publisher;
        """, fetch=False)
        tokens = {}
        for h in self.host_names:
            tokens[h] = self.sql("SELECT frameq.register_host(%s, 'farm', %s, %s)",
                                 (h, HOST_CORES, HOST_MEMORY))[0][0]
            self.sql('CREATE ROLE "fqh_%s" LOGIN IN ROLE frameq_agent, fqh_publisher' % h, fetch=False)
            # every statement of the host's sessions is logged with its
            # plan: the reserve() calls for final.json (dblog.py)
            for name, value in dblog.ROLE_SETTINGS.items():
                self.sql('ALTER ROLE "fqh_%s" SET %s = %s' % (h, name, value), fetch=False)
        if self.formation:
            self.formation.wait_states(checkpoint=self.checkpoint)
            self.watcher = Watcher(self)
            self.watcher.start()
        else:
            self.standby.basebackup(self.primary)
            self.standby.start()
            self.proxy = Proxy(specs)
        self.monitor = Monitor(os.path.join(self.out, "history", "renders.jsonl"), self.history)
        self.monitor.start()
        for h in self.host_names:
            pa, pb = self.proxy_ports[h]
            if self.formation:
                conninfo = self.agent_uri(h, pa, pb)
            else:
                conninfo = ("host=127.0.0.1,127.0.0.1 port=%d,%d dbname=fq user=fqh_%s "
                            "target_session_attrs=read-write connect_timeout=2" % (pa, pb, h))
            self.agents[h] = Agent(h, h, self.out, conninfo, tokens[h])
            self.agents[h].start()

    def setup_formation(self):
        """The formation (formation.py), its database fq (made by
        pg_autoctl create postgres --dbname fq), and the URI the manager
        gives applications."""
        self.formation.create(self.checkpoint)
        self.uri = self.formation.uri()
        self.history.log("formation", uri=self.uri, monitor=formation.MONITOR_SETTINGS,
                         keeper=formation.KEEPER_SETTINGS)
        say("formation up:", self.uri)

    def checkpoint(self):
        try:
            self.sql("CHECKPOINT", fetch=False, timeout=2)
        except psycopg2.Error:
            pass

    def agent_uri(self, h, pa, pb):
        """The formation's URI (pg_autoctl show uri), each node's address
        replaced by the host's proxy to that node, as host h's login."""
        m = re.match(r"^postgres(?:ql)?://([^/]*)/([^?]*)\??(.*)$", self.uri)
        if not m:
            raise RuntimeError("unexpected formation URI: " + self.uri)
        to_proxy = {"%s:%d" % (n.hostname, n.port): p for n, p in zip(self.formation.nodes, (pa, pb))}
        hosts = ",".join("127.0.0.1:%d" % to_proxy[hp] for hp in m.group(1).split(","))
        params = [kv for kv in m.group(3).split("&") if kv and not kv.startswith("sslmode=")]
        if "target_session_attrs=read-write" not in params:
            raise RuntimeError("the formation's URI does not ask for read-write: " + self.uri)
        return "postgres://%s/%s?%s" % (hosts, m.group(2),
                                        "&".join(params + ["sslmode=disable", "user=fqh_" + h,
                                                           "connect_timeout=2"]))

    # ---- load -------------------------------------------------------------

    def submit_one(self, n):
        self.job_seq = getattr(self, "job_seq", 0) + 1
        name = "j%d" % self.job_seq
        show = self.rng.choice(["alpha", "alpha", "beta"])
        folder = "shots" if show == "alpha" and self.rng.random() < 0.5 else None
        max_cores = self.rng.choice([2, 3, 4])
        limited = self.rng.random() < 0.4
        groups = {"job-" + name: max_cores, "show-" + show: self.caps["show-" + show]}
        if folder:
            groups["folder-" + folder] = self.caps["folder-" + folder]
        if limited:
            groups["limit-lic"] = self.caps["limit-lic"]
        self.caps["job-" + name] = max_cores
        for g, slots in groups.items():
            os.makedirs(os.path.join(self.out, "caps", g), exist_ok=True)
        # jobs with timeouts, whose renders may hang or go silent
        timed = self.rng.random() < 0.35

        def layer(lname, frames, chunk=1, **deps):
            spec = {"name": lname, "range": "1-%d" % frames, "cores": 1,
                    "command": "exec %s %s" % (PY, os.path.join(HERE, "render.py")),
                    "env": {"FQH_GROUPS": ",".join("%s:%d" % gs for gs in groups.items()),
                            "FQH_SEED": str(self.args.seed),
                            "FQH_MISBEHAVE": "75:%d:15,1:1:5" % self.rng.randint(1, MISBEHAVE_RUNS)}}
            if timed:
                pct = self.args.hang_percent
                spec["env"]["FQH_HANG"] = "hang:%d:%d,silent:%d:%d" % (HANG_RUNS, pct, HANG_RUNS, pct)
                if self.rng.random() < 0.2:
                    spec["timeout"] = "%ds" % (TIMEOUT + 1)
            if chunk > 1:
                spec["chunk"] = chunk
            if limited:
                spec["limits"] = ["lic"]
            # a layer's own requeue fields, sometimes; else its job's
            if self.rng.random() < 0.2:
                spec["max_requeues"] = self.rng.choice([0, 1])
            if self.rng.random() < 0.2:
                spec["requeue_delay"] = self.rng.choice([0, "1s"])
            spec.update(deps)
            return spec

        # the shape of the job: one layer of single frames (as before), one
        # chunked layer, or two or three layers that wait for each other,
        # layer on layer (after) or frame by frame (after_frames), with
        # chunks on either side; renders stay 0.4 s to 2.8 s per task
        shape = self.rng.choices(["plain", "chunked", "layers", "frames"], [40, 15, 20, 25])[0]
        chunk = lambda: self.rng.choice([1, 2, 3])  # noqa: E731
        if shape == "plain":
            layers = [layer("render", n)]
        elif shape == "chunked":
            layers = [layer("render", n, self.rng.choice([2, 3, 4]))]
        elif shape == "layers":
            m = max(3, n // 2)
            layers = [layer("sim", m, chunk()), layer("render", m, chunk(), after=["sim"])]
        else:
            m = max(3, n // 2)
            c1, c2 = self.rng.choice([(1, 1), (2, 1), (1, 2), (3, 2), (2, 3)])
            layers = [layer("sim", m, c1), layer("render", m, c2, after_frames=["sim"])]
            if self.rng.random() < 0.3:
                layers.append(layer("comp", m, chunk(), after=["render"]))
        # host_failure_limit 0: these renders fail on purpose, and whenever
        # their database is away (exit 4), on every host alike; a host
        # blocked for a job would then book none of its frames, which the
        # liveness check (C5) does not model.  Blocks have tests of their
        # own (57_job_limits.sql, i15_host_failures.spec).
        spec = {"show": show, "name": name, "priority": self.rng.randint(0, 3),
                "max_cores": max_cores, "max_retries": 30, "layers": layers,
                "host_failure_limit": 0,
                "requeue_exit_codes": [75], "requeue_delay": self.rng.choice([1, 2, "2s"]),
                "max_requeues": self.rng.randint(1, 3), "retry_delay": self.rng.choice([0, 1, "1s"])}
        if timed:
            spec.update(timeout=TIMEOUT, timeout_no_output=NO_OUTPUT)
        if folder:
            spec["folder"] = folder
        # some jobs wait for one or two recent jobs of the run (never a job
        # a failover lost: those leave job_names under the submit lock)
        recent = sorted(self.job_names.values())[-6:]
        if recent and self.rng.random() < 0.25:
            spec["after_jobs"] = self.rng.sample(recent, min(len(recent), self.rng.choice([1, 1, 2])))
        # one attempt; if its outcome is unknown (the connection died around
        # the commit), find out before anything else: never submit twice
        try:
            self.sql("SELECT frameq.submit(%s::jsonb)", (json.dumps(spec),), timeout=0)
        except psycopg2.Error as e:
            say("submit %s: %s" % (name, str(e).strip()[:120]))
        rows = self.sql("""SELECT j.id, array_agg(f.id ORDER BY f.id),
                                  count(*) FILTER (WHERE f.numbers IS NOT NULL)
                           FROM frameq.job j
                           JOIN frameq.frame f ON f.job = j.id WHERE j.name = %s GROUP BY j.id""", (name,))
        if not rows:
            return
        job, frames, chunked = rows[0]
        # its dependencies as committed (final.json has the final database's)
        deps = self.sql("SELECT kind, count(*) FROM frameq.depends WHERE job = %s GROUP BY kind", (job,))
        self.jobs[job] = list(groups)
        self.job_names[name] = job
        self.history.log("submit", job=job, name=name, frames=frames, shape=shape,
                         after_jobs=spec.get("after_jobs", []), chunked_tasks=chunked,
                         depends=dict(deps), timed=timed)

    def submitter(self):
        target = 3 * HOST_CORES * len(self.host_names)
        while not self.stop_load.is_set():
            try:
                live = self.sql("SELECT count(*) FROM frameq.frame WHERE state IN ('waiting', 'depend', 'running')",
                                timeout=5)[0][0]
                if live < target:
                    with self.submit_lock:
                        self.submit_one(self.rng.randint(6, 14))
            except Exception as e:  # an outage: try again later
                say("submit: %s" % str(e).strip()[:120])
            self.stop_load.wait(1.0)

    # ---- faults -----------------------------------------------------------

    def pick_fault(self, queue):
        """The next fault kind and target, or None if nothing is free.  A
        target is marked busy here, under the same lock as the free hosts
        were read (a false_confirm_dead fault can take a free host too)."""
        with self.busy_lock:
            return self.pick_fault_locked(queue)

    def pick_fault_locked(self, queue):
        free_hosts = [h for h in self.host_names if h not in self.busy_hosts]
        db_free = not self.db_busy.locked()
        candidates = queue if queue else None
        kind = None
        if candidates:
            for k in candidates:
                if (k not in UNTARGETED and free_hosts) or (k in UNTARGETED and db_free):
                    kind = k
                    break
            if kind is None:
                return None
            queue.remove(kind)
        else:
            weights = HA_WEIGHTS if self.formation else WEIGHTS
            kind = self.rng.choices(self.kinds, [weights[k] for k in self.kinds])[0]
            if (kind not in UNTARGETED and not free_hosts) or (kind in UNTARGETED and not db_free):
                return None
        target = self.rng.choice(free_hosts) if kind not in UNTARGETED else None
        if target is not None:
            self.busy_hosts.add(target)
        return kind, target

    def nemesis(self):
        queue = list(self.kinds) if self.args.every_kind else []
        self.rng.shuffle(queue)
        while not self.stop_load.is_set():
            self.stop_load.wait(self.rng.uniform(0.2, self.args.gap))
            if self.stop_load.is_set():
                break
            self.active = [t for t in self.active if t.is_alive()]
            if len(self.active) >= self.args.max_active:
                continue
            pick = self.pick_fault(queue)
            if pick is None:
                continue
            kind, target = pick
            if kind in UNTARGETED:
                self.db_busy.acquire()
            duration = self.duration(kind)
            self.fault_id += 1
            t = threading.Thread(target=self.run_fault, args=(self.fault_id, kind, target, duration,
                                                              self.rng.random()), daemon=True)
            self.active.append(t)
            t.start()
        for t in self.active:
            t.join()
        if queue:
            self.errors.append("the run ended before every kind of fault was injected: %s" % queue)

    def duration(self, kind):
        r = self.rng.uniform
        return {"agent_stop": r(0.5, LEASE_PERIOD + 3),
                "host_freeze": r(LEASE_PERIOD + 1.5, LEASE_PERIOD + 4),
                "agent_kill": r(0, 5),
                "proxy_blackhole": r(1, 8),
                "proxy_reset": r(0.5, 4),
                "proxy_delay": r(2, 8),
                "drop_reports": r(5, 15),
                "server_crash": r(0, 4),
                "ha_node_kill": r(0, 4),
                "ha_partition": r(0, 4),
                "hidden_timeout_push": r(12, 14),
                "hidden_farm_down": r(4, 6)}.get(kind, 0.0)

    def run_fault(self, fid, kind, target, duration, x):
        self.faults[kind] = self.faults.get(kind, 0) + 1
        try:
            if self.formation and kind in HA_DB_KINDS:
                # the database's faults begin on a settled formation
                self.formation.wait_states(checkpoint=self.checkpoint)
            getattr(self, "fault_" + kind)(fid, target, duration, x)
        except Exception:
            self.errors.append("fault %s on %s: %s" % (kind, target, traceback.format_exc()))
            self.history.log("fault_off", id=fid, error=True)
        finally:
            if kind in UNTARGETED:
                self.db_busy.release()
            else:
                with self.busy_lock:
                    self.busy_hosts.discard(target)

    def on(self, fid, kind, target, **kw):
        say("fault %d: %s %s %s" % (fid, kind, target or "", " ".join("%s=%s" % i for i in kw.items())))
        self.history.log("fault_on", id=fid, kind=kind, target=target, **kw)

    def off(self, fid):
        self.history.log("fault_off", id=fid)

    def fault_agent_stop(self, fid, h, d, x):
        a = self.agents[h]
        self.on(fid, "agent_stop", h, seconds=round(d, 2))
        if a.alive():
            signal_pid(a.p.pid, signal.SIGSTOP)
            time.sleep(d)
            signal_pid(a.p.pid, signal.SIGCONT)
        self.off(fid)

    def host_pids(self, h):
        a = self.agents[h]
        pids = set()
        if a.alive():
            pids.add(a.p.pid)
            pids.update(descendants(a.p.pid))
        for _, pid in self.monitor.renders_of(h):
            pids.add(pid)
            ppid = parent_of(pid)
            if ppid and ppid > 1 and (not a.alive() or ppid != a.p.pid):
                pids.add(ppid)
        return pids

    def fault_host_freeze(self, fid, h, d, x):
        a = self.agents[h]
        stopped = set()
        if a.alive():
            signal_pid(a.p.pid, signal.SIGSTOP)
            stopped.add(a.p.pid)
        for _ in range(5):      # until no new process appears
            new = self.host_pids(h) - stopped
            if not new:
                break
            for pid in new:
                if signal_pid(pid, signal.SIGSTOP):
                    stopped.add(pid)
        # logged once everything is stopped: no render of this host starts
        # after this instant until the thaw
        self.on(fid, "host_freeze", h, seconds=round(d, 2), stopped=len(stopped))
        time.sleep(d)
        for pid in stopped:
            signal_pid(pid, signal.SIGCONT)
        self.off(fid)

    def fault_agent_kill(self, fid, h, d, x):
        a = self.agents[h]
        self.on(fid, "agent_kill", h, down_seconds=round(d, 2))
        a.kill()
        time.sleep(d)
        a.start()
        self.off(fid)

    def some_render(self, h):
        """A live render of host h, else of any host (waiting a little for one)."""
        deadline = time.monotonic() + 5
        while True:
            renders = self.monitor.renders_of(h) or self.monitor.renders_of()
            if renders or time.monotonic() > deadline:
                return renders
            time.sleep(0.1)

    def fault_render_kill(self, fid, h, d, x):
        renders = self.some_render(h)
        proc, pid = renders[int(x * len(renders))] if renders else (None, None)
        self.on(fid, "render_kill", h, proc=proc)
        if pid:
            signal_pid(pid, signal.SIGKILL)
        self.off(fid)

    def fault_supervisor_kill(self, fid, h, d, x):
        renders = self.some_render(h)
        proc, pid = renders[int(x * len(renders))] if renders else (None, None)
        sup = parent_of(pid) if pid else None
        self.on(fid, "supervisor_kill", h, proc=proc, supervisor=sup)
        if sup and sup > 1:
            signal_pid(sup, signal.SIGKILL)
        self.off(fid)

    def fault_proxy(self, fid, h, d, mode, ms=0):
        self.on(fid, "proxy_" + mode, h, seconds=round(d, 2), **({"ms": ms} if ms else {}))
        self.proxy.set(h, mode, ms)
        time.sleep(d)
        self.proxy.set(h, "pass")
        self.off(fid)

    def fault_proxy_blackhole(self, fid, h, d, x):
        self.fault_proxy(fid, h, d, "blackhole")

    def fault_proxy_reset(self, fid, h, d, x):
        self.fault_proxy(fid, h, d, "reset")

    def fault_proxy_delay(self, fid, h, d, x):
        self.fault_proxy(fid, h, d, "delay", int(50 + x * 950))

    def fault_drop_reports(self, fid, h, d, x):
        a = self.agents[h]
        self.on(fid, "drop_reports", h, seconds=round(d, 2), percent=50)
        a.set_drop(50)
        if a.alive():
            signal_pid(a.p.pid, signal.SIGHUP)
        time.sleep(d)
        a.set_drop(0)
        if a.alive():
            signal_pid(a.p.pid, signal.SIGHUP)
        self.off(fid)

    def host_with_render(self, h, wait):
        """A host that runs a render, waiting up to wait seconds for one; h
        if none turns up.  Of h (if it runs one) and the hosts with no fault
        on them that run one, the host whose render's job comes first in
        reserve()'s order (priority, then job id): the frame the lie sends
        back to waiting is then the first a free host books, while its
        render still runs.  A host other than h is marked busy (the caller
        frees it).  A host can be idle for long: what it may book can be
        held by hung renders elsewhere."""
        deadline = time.monotonic() + wait
        while True:
            with self.busy_lock:
                hosts = [o for o in self.host_names
                         if (o == h or o not in self.busy_hosts) and self.monitor.renders_of(o)]
            if hosts:
                rows = self.sql("""SELECT x.name FROM frameq.proc p
                                     JOIN frameq.host x ON x.id = p.host
                                     JOIN frameq.job j ON j.id = p.job
                                    WHERE p.state = 'running' AND x.name = ANY (%s)
                                    ORDER BY j.priority DESC, j.id, x.name = %s DESC LIMIT 1""",
                                (hosts, h))
                best = rows[0][0] if rows else hosts[0]
                with self.busy_lock:
                    if best == h:
                        return h
                    if best not in self.busy_hosts:
                        self.busy_hosts.add(best)
                        return best
            if time.monotonic() >= deadline:
                return h
            time.sleep(0.1)

    def fault_false_confirm_dead(self, fid, target, d, x):
        """Pause a host's agent and tell frameq the host is dead while its
        renders still run: their frames are booked again elsewhere.  The
        lie shows only on a host with a render to run twice (host_with_render
        picks it), and only if a released frame is booked elsewhere before
        the render ends (its supervisor ends it when the lease it was given
        runs out): the lie holds until then, at least 2.5 s, at most 8 s."""
        h = self.host_with_render(target, 20)
        a = self.agents[h]
        begin = None
        try:
            frames = [f for (f,) in self.sql(
                "SELECT p.frame FROM frameq.proc p JOIN frameq.host x ON x.id = p.host"
                " WHERE x.name = %s AND p.state = 'running'", (h,))]
            self.on(fid, "false_confirm_dead", h, renders=len(self.monitor.renders_of(h)), frames=frames)
            if a.alive():
                signal_pid(a.p.pid, signal.SIGSTOP)
            begin = time.time()
            self.sql("SELECT frameq.confirm_host_dead(%s)", (h,), fetch=False)
            time.sleep(2.5)
            hold = time.monotonic() + 5.5
            while (time.monotonic() < hold and self.monitor.renders_of(h) and
                   not self.sql("SELECT count(*) FROM frameq.run r JOIN frameq.host x ON x.id = r.host"
                                " WHERE r.frame = ANY (%s) AND x.name <> %s"
                                "   AND r.started_at >= to_timestamp(%s)", (frames, h, begin))[0][0]):
                time.sleep(0.1)
        finally:
            # whatever failed: the host up again and its agent going on
            # before the host is free for other faults
            try:
                if begin is not None:
                    self.sql("SELECT frameq.set_host_state(%s, 'up')", (h,), fetch=False)
                    self.operator.append((h, begin, time.time()))
            finally:
                if a.alive():
                    signal_pid(a.p.pid, signal.SIGCONT)
                if h != target:
                    with self.busy_lock:
                        self.busy_hosts.discard(h)
        self.off(fid)

    def fault_hidden_farm_down(self, fid, h, d, x):
        """Set every host down (their renders are ordered killed), then up
        again, and leave it out of the operator actions final.json's
        reserves are told about: the agents go on calling reserve(), which
        books nothing for a host that is down, while the frames wait with
        every cap free."""
        self.on(fid, "hidden_farm_down", None, seconds=round(d, 2))
        for h in self.host_names:
            self.sql("SELECT frameq.set_host_state(%s, 'down')", (h,), fetch=False)
        time.sleep(d)
        for h in self.host_names:
            self.sql("SELECT frameq.set_host_state(%s, 'up')", (h,), fetch=False)
        self.off(fid)

    def fault_hidden_timeout_push(self, fid, h, d, x):
        """Wait for a render that hangs (writing output: only its timeout
        stops it), move its task's deadline an hour on, and hold the farm
        free of other faults for d seconds (longer than the timeout bound
        from the booking), so that nothing else ends it before it has run
        past its timeout by more than the checker allows (it runs until
        its SIGALRM, FQH_ALARM s after its start)."""
        deadline = time.monotonic() + 30
        hung = self.monitor.hung_live("hang")
        while not hung and time.monotonic() < deadline:
            time.sleep(0.1)
            hung = self.monitor.hung_live("hang")
        proc = hung[0] if hung else None
        self.on(fid, "hidden_timeout_push", None, proc=proc, seconds=round(d, 2))
        if proc is not None:
            self.sql("""UPDATE frameq.proc SET timeout_at = timeout_at + interval '1 hour'
                        WHERE id = %s AND state = 'running'""", (proc,), fetch=False)
        time.sleep(d)
        self.off(fid)

    def direct(self, server, query):
        conn = psycopg2.connect(host="127.0.0.1", port=server.port, dbname="fq", user="postgres",
                                connect_timeout=5, application_name="fqh-nemesis")
        try:
            conn.autocommit = True
            with conn.cursor() as cur:
                cur.execute(query)
                return cur.fetchall()
        finally:
            conn.close()

    def on_primary(self, query):
        """direct() on the primary; under a formation, the primary as the
        watcher knows it, retried while the manager moves it (a failover
        the monitor decided on after a crash may still be under way)."""
        if not self.formation:
            return self.direct(self.primary, query)
        deadline = time.monotonic() + 120
        while True:
            try:
                return self.direct(self.primary, query)
            except psycopg2.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.3)

    def fault_terminate_backends(self, fid, h, d, x):
        self.on(fid, "terminate_backends", None)
        n = self.on_primary("""
            SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
            WHERE datname = 'fq' AND backend_type = 'client backend' AND pid <> pg_backend_pid()
              AND application_name NOT LIKE 'fqh-harness%'""")[0][0]
        say("  terminated %d sessions" % n)
        self.off(fid)

    def fault_worker_kill(self, fid, h, d, x):
        rows = self.on_primary("SELECT pid FROM pg_stat_activity WHERE backend_type = 'frameq worker'")
        self.on(fid, "worker_kill", None, pid=rows[0][0] if rows else None)
        if rows:
            signal_pid(rows[0][0], signal.SIGKILL)
        if self.formation:
            self.sql("SELECT 1", timeout=120)   # whichever node the manager left primary
        else:
            self.wait_accepting(self.primary)
        self.off(fid)

    def wait_accepting(self, server, timeout=60):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                self.direct(server, "SELECT 1")
                return
            except psycopg2.OperationalError:
                time.sleep(0.2)
        raise RuntimeError("server %s does not accept connections" % server.name)

    def fault_server_crash(self, fid, h, d, x):
        if self.formation:
            # postgres alone: its pg_autoctl starts it again
            with self.submit_lock:
                self.on(fid, "server_crash", None, server=self.primary.name)
                self.primary.stop_postgres_immediate()
                self.sql("SELECT 1", timeout=120)
                self.lost_submits(self.primary)
            # the monitor may fail over for it (the keeper reports postgres
            # down, a round or two later): the fault lasts until the
            # formation has settled and stayed so for 5 s
            self.formation.wait_states(checkpoint=self.checkpoint)
            time.sleep(5)
            self.formation.wait_states(checkpoint=self.checkpoint)
            self.off(fid)
            return
        self.on(fid, "server_crash", None, server=self.primary.name, down_seconds=round(d, 2))
        self.primary.stop("immediate")
        time.sleep(d)
        self.primary.start()
        self.off(fid)

    def lost_submits(self, new):
        """Submissions the old primary acknowledged but never streamed
        (called under the submit lock, once new takes writes)."""
        known = {r[0] for r in self.direct(new, "SELECT name FROM frameq.job")}
        for name, job in list(self.job_names.items()):
            if name not in known:
                self.history.log("lost_submit", job=job, name=name)
                del self.job_names[name]

    # ---- the manager's failovers (--ha pg_auto_failover) ------------------

    def ha_prepare(self, x):
        """Before a failover: the formation healthy (a primary and a
        secondary), replication synchronous (x < 0.5: the formation's
        default) or asynchronous, in force on the primary."""
        f = self.formation
        f.wait_states(checkpoint=self.checkpoint)
        sync = x < 0.5
        f.set_sync(sync)
        deadline = time.monotonic() + 60
        while True:
            names = self.direct(self.primary, "SHOW synchronous_standby_names")[0][0]
            # and the standby streaming: a keeper counts a partition only
            # if it saw its standby once the monitor was lost (formation.py)
            streaming = self.direct(self.primary, "SELECT count(*) FROM pg_stat_replication "
                                                  "WHERE state = 'streaming'")[0][0]
            if bool(names) == sync and streaming and f.healthy(f.states()):
                return sync, names
            if time.monotonic() > deadline:
                raise RuntimeError("replication not %s after 60 s (%r)" % ("sync" if sync else "async", names))
            time.sleep(0.3)

    def ha_fault(self, fid, kind, d, x, act, after):
        """act(old) takes the primary away; once another node takes writes
        (the watcher), the submissions lost are known, after(old) undoes
        the fault, and the fault lasts until the old primary has rejoined
        as the secondary by itself."""
        sync, names = self.ha_prepare(x)
        old = self.primary
        with self.submit_lock:
            self.on(fid, kind, None, old=old.name, sync=sync, standby_names=names, seconds=round(d, 2))
            t0 = time.monotonic()
            act(old)
            self.watcher.wait_for_new(old.name)
            failover_s = time.monotonic() - t0
            self.wait_accepting(self.primary)
            self.lost_submits(self.primary)
        after(old)
        t1 = time.monotonic()
        self.formation.wait_states(checkpoint=self.checkpoint)
        say("  %s: new primary %s after %.1fs, %s back as secondary %.1fs later"
            % (kind, self.primary.name, failover_s, old.name, time.monotonic() - t1))
        self.history.log("fault_off", id=fid, failover_seconds=round(failover_s, 2),
                         rejoin_seconds=round(time.monotonic() - t1, 2))

    def fault_ha_failover(self, fid, h, d, x):
        self.ha_fault(fid, "ha_failover", 0, x, lambda old: self.formation.perform_failover(),
                      lambda old: None)

    def fault_ha_node_kill(self, fid, h, d, x):
        def after(old):
            time.sleep(d)
            old.start()
        self.ha_fault(fid, "ha_node_kill", d, x, lambda old: old.kill(), after)

    def fault_ha_partition(self, fid, h, d, x):
        """The primary cut from the monitor and the standby (not from the
        agents): its link (the monitor's health checks, the standby's
        replication) blackholed, its keeper's link to the monitor cut (its
        calls in flight fail, as tcp_user_timeout would make them: see
        proxy.py; new ones hang)."""
        def cut(old, link, mon):
            self.proxy.set("link-" + old.name, link)
            self.proxy.set("mon-" + old.name, mon)

        def after(old):
            time.sleep(d)
            cut(old, "pass", "pass")
        self.ha_fault(fid, "ha_partition", d, x, lambda old: cut(old, "blackhole", "cut"), after)

    def fault_failover(self, fid, h, d, x):
        old, new = self.primary, self.standby
        self.on(fid, "failover", None, old=old.name, new=new.name)
        # no submission until the lost ones are known (ids may be reused)
        with self.submit_lock:
            old.stop("immediate")       # and it never serves as a primary again
            new.promote()
            self.primary, self.standby = new, old
            self.failovers.append({"wall": time.time(), "t": time.monotonic()})
            self.wait_accepting(new)
            self.lost_submits(new)
        old.basebackup(new)         # rebuild the old primary as the standby
        old.start()
        self.off(fid)

    # ---- phases -----------------------------------------------------------

    def load(self):
        self.history.log("phase", phase="load")
        say("load: %ds with faults (seed %d)" % (self.args.duration, self.args.seed))
        threads = [threading.Thread(target=self.submitter, daemon=True),
                   threading.Thread(target=self.nemesis, daemon=True)]
        for t in threads:
            t.start()
        deadline = time.monotonic() + self.args.duration
        while time.monotonic() < deadline and not self.errors:
            time.sleep(0.5)
        self.stop_load.set()
        for t in threads:
            t.join()

    def heal(self):
        self.history.log("phase", phase="heal")
        for h in self.host_names:
            self.proxy.set(h, "pass")
            a = self.agents[h]
            a.set_drop(0)
            if not a.alive():
                a.start()
            else:
                signal_pid(a.p.pid, signal.SIGCONT)
        for s in (self.primary, self.standby):
            if not s.running():
                s.start()
        if self.formation:
            for n in self.formation.nodes:
                self.proxy.set("link-" + n.name, "pass")
                self.proxy.set("mon-" + n.name, "pass")
            self.formation.wait_states(checkpoint=self.checkpoint)
        backlog = self.sql("SELECT count(*) FROM frameq.frame WHERE state IN ('waiting', 'depend', 'running')")[0][0]
        depth = self.dependency_depth()
        slots = HOST_CORES * len(self.host_names)
        self.heal_t = time.monotonic()
        self.history.log("heal", t=self.heal_t, backlog=backlog, slots=slots, depth=depth)
        say("healed: %d frames not finished, chains of up to %d" % (backlog, depth))
        return backlog, slots, depth

    def dependency_depth(self):
        """The longest chain of unfinished tasks, each waiting for the
        next (1 if none waits for another; 0 if nothing is unfinished):
        the tasks that must run one after the other, whatever the slots."""
        state, members = {}, {}
        for fid, job, layer, st in self.sql("SELECT id, job, layer, state FROM frameq.frame"):
            state[fid] = st
            members.setdefault(("job", job), []).append(fid)
            members.setdefault(("layer", layer), []).append(fid)
        pre = {}
        for kind, job, layer, frame, on_job, on_layer, on_frame in self.sql(
                "SELECT kind, job, layer, frame, on_job, on_layer, on_frame FROM frameq.depends"):
            if kind == "frame":
                pre.setdefault(("task", frame), set()).add(on_frame)
            elif kind == "layer":
                pre.setdefault(("layer", layer), set()).update(members.get(("layer", on_layer), ()))
            else:
                pre.setdefault(("job", job), set()).update(members.get(("job", on_job), ()))
        layer_of = {fid: key for key, fids in members.items() if key[0] == "layer" for fid in fids}
        job_of = {fid: key for key, fids in members.items() if key[0] == "job" for fid in fids}
        memo = {}

        def depth(fid):
            if fid not in memo:
                memo[fid] = 0       # no cycles: frameq refuses them
                ps = (pre.get(("task", fid), set()) | pre.get(layer_of[fid], set())
                      | pre.get(job_of[fid], set()))
                memo[fid] = 1 + max((depth(p) for p in ps
                                     if state.get(p) not in ("succeeded", "eaten")), default=0)
            return memo[fid]
        return max((depth(f) for f, st in state.items()
                    if st in ("waiting", "depend", "running")), default=0)

    def quiesce(self, backlog, slots, depth):
        self.history.log("phase", phase="quiescence")
        bound = (LEASE_PERIOD * 2 + POLL + RENDER_MAX + math.ceil(backlog / slots) * (RENDER_MAX + 1)
                 + depth * (RENDER_MAX + 1 + POLL) + (HANG_RUNS + depth) * (TIMEOUT + 1 + POLL + LEASE_PERIOD)
                 + 60)
        deadline = time.monotonic() + bound
        done = False
        while time.monotonic() < deadline:
            # done when nothing waits, runs or is booked, no job's finish is
            # left to the worker, and no task is 'depend' unless a dead task
            # exists (one that a dead prerequisite holds stays so: the
            # checker tells which)
            left, procs, depend, dead, checks = self.sql("""SELECT
                    (SELECT count(*) FROM frameq.frame WHERE state IN ('waiting', 'running')),
                    (SELECT count(*) FROM frameq.proc),
                    (SELECT count(*) FROM frameq.frame WHERE state = 'depend'),
                    (SELECT count(*) FROM frameq.frame WHERE state = 'dead'),
                    (SELECT count(*) FROM frameq.job_finish_check)""")[0]
            if left == 0 and procs == 0 and checks == 0 and (depend == 0 or dead > 0):
                done = True
                break
            time.sleep(0.5)
        self.history.log("quiet", all_terminal=done)
        say("quiet after %.1fs: all terminal %s" % (time.monotonic() - self.heal_t, done))

    def final(self):
        self.history.log("phase", phase="final")
        self.final_wall = time.time()

        def rows(query):
            conn = psycopg2.connect(self.conninfo)
            try:
                with conn.cursor() as cur:
                    cur.execute(query)
                    names = [c.name for c in cur.description]
                    return [dict(zip(names, r)) for r in cur.fetchall()]
            finally:
                conn.close()

        finish = {r["id"]: {"finished_at": r["finished_at"], "committed_at": r["committed_at"]}
                  for r in rows("""SELECT id, extract(epoch FROM finished_at)::float8 AS finished_at,
                                          CASE WHEN state = 'finished' THEN
                                              extract(epoch FROM pg_xact_commit_timestamp(xmin))::float8
                                          END AS committed_at
                                   FROM frameq.job""")}
        final = {
            "params": {"seed": self.args.seed, "ttl": TTL, "drift": DRIFT, "margin": MARGIN,
                       "render_max": RENDER_MAX + 1.0, "freeze_k": FREEZE_K,
                       "quarantine": LEASE_PERIOD, "poll": POLL, "hosts": len(self.host_names),
                       "duration": self.args.duration, "delay_max": DELAY_MAX,
                       "misbehave_runs": MISBEHAVE_RUNS, "hang_runs": HANG_RUNS,
                       "timeout_max": TIMEOUT + 1, "kill_grace": 1.0},
            # size: the task's frame numbers (chunk)
            "frames": rows("""SELECT id, job, layer, number, coalesce(cardinality(numbers), 1) AS size,
                                     state, retries, attempts FROM frameq.frame"""),
            # every dependency: job on job, layer on layer, task on task
            "depends": rows("""SELECT kind, job, layer, frame, on_job, on_layer, on_frame, satisfied
                               FROM frameq.depends"""),
            # committed_at: the commit of the run's last change, its end
            # (track_commit_timestamp); cores and memory for dblog.py
            "runs": rows("""SELECT r.proc, r.frame, r.job, h.name AS host, r.epoch,
                                   extract(epoch FROM r.started_at)::float8 AS started_at,
                                   extract(epoch FROM r.ended_at)::float8 AS ended_at,
                                   r.exit_status, r.exit_signal, r.reason, r.end_state,
                                   CASE WHEN r.ended_at IS NOT NULL THEN
                                       extract(epoch FROM pg_xact_commit_timestamp(r.xmin))::float8
                                   END AS committed_at,
                                   r.cores_cc, r.memory
                            FROM frameq.run r JOIN frameq.host h ON h.id = r.host"""),
            "procs": rows("SELECT p.id, p.frame, h.name AS host, p.state FROM frameq.proc p JOIN frameq.host h ON h.id = p.host"),
            # each layer's requeue and retry delays in force (every job
            # gives all four, so a layer's own or its job's), and its
            # timeouts (a layer's own, its job's, or none: null)
            "layers": rows("""SELECT l.id, coalesce(l.requeue_exit_codes, j.requeue_exit_codes) AS requeue_exit_codes,
                                     coalesce(l.requeue_delay, j.requeue_delay) AS requeue_delay,
                                     coalesce(l.max_requeues, j.max_requeues) AS max_requeues,
                                     coalesce(l.retry_delay, j.retry_delay) AS retry_delay,
                                     coalesce(l.timeout, j.timeout) AS timeout,
                                     coalesce(l.timeout_no_output, j.timeout_no_output) AS timeout_no_output
                              FROM frameq.layer l JOIN frameq.job j ON j.id = l.job"""),
            "outputs": rows("SELECT frame, proc, content FROM fqh.output"),
            "publishes": rows("SELECT frame, proc, extract(epoch FROM at)::float8 AS at FROM fqh.publish_log"),
            # finished_at and committed_at (of the job row's last change,
            # its finish): when its dependents were freed
            "jobs": [dict(finish.get(j, {"finished_at": None, "committed_at": None}), id=j, groups=g)
                     for j, g in self.jobs.items()],
            "caps": self.caps,
            "check": rows("SELECT invariant, detail FROM frameq.check()"),
            "failovers": self.failovers,
            "formation": ({"uri": self.uri, "monitor": formation.MONITOR_SETTINGS,
                           "keeper": formation.KEEPER_SETTINGS} if self.formation else None),
            "faults": self.faults,
        }
        self.write_final(final)
        return final

    def write_final(self, final):
        with open(os.path.join(self.out, "final.json"), "w") as f:
            json.dump(final, f)

    def record_reserves(self, final):
        """final.json's reserves, from the servers' logs once they are
        stopped (dblog.py): every reserve() call until the final read."""
        calls = dblog.reserve_calls({s.name: s.log for s in self.servers}, final["runs"],
                                    ttl=TTL, host_cc=HOST_CORES * 100, host_memory=HOST_MEMORY,
                                    operator=self.operator, until=self.final_wall)
        if not any(c["booked"] for c in calls):
            raise RuntimeError("no reserve() call that booked anything is in the servers' logs")
        final["reserves"] = calls
        self.write_final(final)
        say("reserve calls: %d, %d booked nothing, %d of those with the host up and room"
            % (len(calls), sum(not c["booked"] for c in calls),
               sum(not c["booked"] and c["up"] and c["room"] for c in calls)))

    def teardown(self, fast=False):
        for a in self.agents.values():
            try:
                if fast:
                    # interrupted: no orderly stop, but nothing left behind
                    pids = descendants(a.p.pid) if a.alive() else []
                    a.kill()
                    for pid in pids:
                        signal_pid(pid, signal.SIGKILL)
                else:
                    a.stop()
            except Exception:
                pass
        if self.monitor:
            # every render must be seen dead before the history is closed
            deadline = time.monotonic() + 20
            while self.monitor.renders_of() and time.monotonic() < deadline:
                time.sleep(0.2)
            for _, pid in self.monitor.renders_of():
                signal_pid(pid, signal.SIGKILL)
            self.monitor.stopping = True
            self.monitor.join(10)
        if self.watcher:
            self.watcher.stopping = True
            self.watcher.join(10)
        if self.formation:
            self.formation.stop(fast)
        else:
            for s in self.servers:
                s.stop("immediate" if fast else "fast")
        if self.proxy:
            self.proxy.close()

    def main(self):
        interrupted = False
        final = None
        try:
            self.setup()
            self.load()
            backlog, slots, depth = self.heal()
            self.quiesce(backlog, slots, depth)
            final = self.final()
        except Exception:
            self.errors.append(traceback.format_exc())
            final = None
        except Interrupted as e:
            self.errors.append("interrupted by %s" % e)
            interrupted = True
        finally:
            self.teardown(fast=interrupted)
        if final is not None:
            try:
                self.record_reserves(final)
            except Exception:
                self.errors.append(traceback.format_exc())
        say("faults injected:", sum(self.faults.values()), json.dumps(self.faults, sort_keys=True))
        if self.errors:
            for e in self.errors:
                say("harness error:", e)
            return 3
        say("frames: %d, renders started: %d" % (len(final["frames"]), self.monitor.started_count))
        r = subprocess.run([PY, os.path.join(HERE, "check.py"), self.out])
        return r.returncode


class Interrupted(BaseException):
    """SIGTERM or SIGINT: stop at once, leaving no process behind."""


def interrupt(signum, frame):
    raise Interrupted(signal.Signals(signum).name)


def main():
    signal.signal(signal.SIGTERM, interrupt)
    signal.signal(signal.SIGINT, interrupt)
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--duration", type=float, default=120)
    ap.add_argument("--hosts", type=int, default=4)
    ap.add_argument("--port", type=int, default=21000,
                    help="first of the ports used; keep below the ephemeral range (32768)")
    ap.add_argument("--gap", type=float, default=2.5, help="longest pause between faults (s)")
    ap.add_argument("--max-active", type=int, default=2)
    ap.add_argument("--every-kind", action="store_true", help="inject every kind of fault at least once")
    ap.add_argument("--inject", help="comma-separated fault kinds to draw from (default: all that frameq survives)")
    ap.add_argument("--ha", choices=["pg_auto_failover"],
                    help="run the servers as a pg_auto_failover formation; its manager does the failovers")
    ap.add_argument("--hang-percent", type=int, default=HANG_PERCENT,
                    help="of the frames of jobs with timeouts that hang, and as many that go silent")
    args = ap.parse_args()
    if os.getuid() != 0:
        sys.exit("harness.py must run as root (servers run as postgres via runuser)")
    sys.exit(Harness(args).main())


if __name__ == "__main__":
    main()
