"""A pg_auto_failover formation on loopback for the fault harness
(test/fault/harness.py --ha pg_auto_failover; doc/operations.md).

    monitor   127.0.0.1:BASE        pg_autoctl create monitor (the system's
                                    PostgreSQL 15, which has pgautofailover)
    node a    127.0.0.1:BASE+1      pg_autoctl create postgres (FRAMEQ_PGBIN's
    node b    127.0.0.1:BASE+2      PostgreSQL, which has frameq), frameq
                                    preloaded, frameq.database = 'fq'

Every process runs as postgres, each node under its own `pg_autoctl run`.
The nodes' links to each other and to the monitor go through the fault
proxies (proxy.py), so that the harness can cut a node off:

  - a node registers as 127.0.1.N:its port (its postgres listens on
    127.0.0.1 only); a proxy listens there and forwards to 127.0.0.1, so
    the monitor's health checks and the other node's replication reach
    the node through its "link" proxy;
  - a node's keeper reaches the monitor through its own "monitor link"
    proxy, 127.0.0.1:BASE+3 (a) or BASE+4 (b).

Blackholing a node's link and cutting its monitor link (proxy.py's modes)
cuts it from the monitor and the standby; the agents' own proxies go
straight to 127.0.0.1, so the agents still reach it.

The manager's timeouts are tuned down (MONITOR_SETTINGS, KEEPER_SETTINGS;
doc/operations.md): the monitor takes a primary it cannot reach, and whose
keeper has not reported for 15 s, for unhealthy, and promotes its standby;
a primary that reaches neither monitor nor standby demotes itself before
that: 3 s (network_partition_timeout) after its standby's walsender has
gone (wal_sender_timeout, 5 s).  Two things about pg_auto_failover 2.0
that these numbers allow for (doc/operations.md):
  - the monitor waits primary_demote_timeout (10 s) for the old primary to
    demote counted from that node's last change of state, so a primary
    that has been one for longer is not waited for at all: it is
    node_considered_unhealthy_timeout that must exceed the time a cut-off
    primary takes to demote itself;
  - a keeper counts the partition only once it has seen, with the monitor
    already lost, its standby still connected; a walsender that is gone by
    its first failed call to the monitor (a wal_sender_timeout shorter
    than that call's connect timeout and a round) leaves it a primary for
    good, so wal_sender_timeout must outlast the keeper's first failed
    call (2 s connect timeout, a 1 s round).
"""

import os
import shutil
import signal
import subprocess
import time

import psycopg2

MONITOR_PGCTL = "/usr/lib/postgresql/15/bin/pg_ctl"
PG_AUTOCTL = "/usr/bin/pg_autoctl"
FORMATION = "default"
DBNAME = "fq"

# the monitor's, in milliseconds (pgautofailover.*): defaults 5000, 5000,
# 2, 2000, 20000, 30000, 10000
MONITOR_SETTINGS = {
    "pgautofailover.health_check_period": 1000,
    "pgautofailover.health_check_timeout": 1000,
    "pgautofailover.health_check_max_retries": 1,
    "pgautofailover.health_check_retry_delay": 500,
    "pgautofailover.node_considered_unhealthy_timeout": 15000,
    "pgautofailover.primary_demote_timeout": 10000,
    "pgautofailover.startup_grace_period": 5000,
}
# each keeper's, in seconds (pg_autoctl config set): default 20; it must
# stay below primary_demote_timeout and node_considered_unhealthy_timeout
# (with the walsender's timeout and a keeper round or two to spare), so
# that a primary cut off has demoted itself before its standby is promoted
KEEPER_SETTINGS = {"timeout.network_partition_timeout": 3}

# appended to every node's postgresql.conf, after pg_auto_failover's own
# include (later settings win); a standby gets the primary's by
# pg_basebackup, so what differs between nodes (the log's directory) is in
# ../node.conf, outside the data directory
NODE_CONF = """
# ---- fault harness (test/fault/formation.py)
shared_preload_libraries = 'pg_stat_statements,frameq,auto_explain'
frameq.database = '%(dbname)s'
frameq.lease_ttl = '%(ttl)ds'
frameq.lease_margin = '%(margin)ds'
frameq.kill_resend_interval = '1s'
shared_buffers = '64MB'
max_connections = 80
fsync = off
track_commit_timestamp = on
wal_keep_size = '256MB'
# a blackholed standby's walsender stays in pg_stat_replication this long:
# long enough for a cut-off primary's keeper to see it there once the
# monitor is lost (or it never counts the partition), short enough for it
# to demote itself before the monitor's unhealthy timeout
wal_sender_timeout = '5s'
wal_receiver_timeout = '5s'
# pg_basebackup (a new standby) waits for a checkpoint: make it prompt
checkpoint_completion_target = 0
log_min_messages = warning
log_line_prefix = '%(prefix)s'
log_rotation_age = 0
log_rotation_size = 0
log_filename = 'server.log'
include_if_exists '../node.conf'
"""
MONITOR_CONF = """
# ---- fault harness (test/fault/formation.py)
shared_buffers = '32MB'
max_connections = 60
%s
"""


def as_postgres(env):
    return dict(user="postgres", group="postgres", extra_groups=[], env=env)


def descendants_of(pid, descendants):
    return [pid] + descendants(pid)


class Node:
    """One PostgreSQL run by its own pg_autoctl (a data node or the
    monitor).  Interface of harness.Server where the harness needs it:
    name, port, log, running(), start(), stop(mode)."""

    def __init__(self, formation, name, port, hostname, pgctl):
        self.f = formation
        self.name = name
        self.port = port
        self.hostname = hostname
        self.pgctl = pgctl
        self.dir = os.path.join(formation.root, name)
        self.data = os.path.join(self.dir, "data")
        self.log = os.path.join(self.dir, "server.log")
        self.autoctl_log = os.path.join(self.dir, "pg_autoctl.log")
        self.p = None
        os.makedirs(self.dir, exist_ok=True)
        shutil.chown(self.dir, "postgres", "postgres")
        with open(os.path.join(self.dir, "node.conf"), "w") as f:
            f.write("log_directory = '%s'\n" % self.dir)

    def autoctl(self, *args, timeout=180, check=True):
        r = subprocess.run([PG_AUTOCTL] + list(args), cwd=self.dir, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=timeout, **as_postgres(self.f.env))
        with open(self.autoctl_log, "ab") as f:
            f.write(("== pg_autoctl %s: exit %d\n" % (" ".join(args), r.returncode)).encode())
            f.write(r.stdout)
        if check and r.returncode != 0:
            raise RuntimeError("%s: pg_autoctl %s failed: %s"
                               % (self.name, args[0], r.stdout.decode()[-2000:]))
        return r

    def start(self):
        """pg_autoctl run: it starts postgres and follows the monitor."""
        log = open(self.autoctl_log, "ab")
        self.p = subprocess.Popen([PG_AUTOCTL, "run", "--pgdata", self.data], cwd=self.dir,
                                  stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                  start_new_session=True, **as_postgres(self.f.env))
        log.close()

    def running(self):
        return self.p is not None and self.p.poll() is None

    def kill(self):
        """The node's death: its pg_autoctl and every process under it
        (postgres included), stopped first so that none outlives another."""
        if not self.running():
            return
        pids = descendants_of(self.p.pid, self.f.descendants)
        for pid in pids:
            try:
                os.kill(pid, signal.SIGSTOP)
            except ProcessLookupError:
                pass
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.p.wait()

    def stop(self, mode="fast"):
        """pg_autoctl stop (its postgres too); killed if it does not go."""
        if not self.running():
            return
        if mode != "immediate":
            self.autoctl("stop", "--pgdata", self.data, check=False, timeout=60)
            try:
                self.p.wait(60)
                return
            except subprocess.TimeoutExpired:
                pass
        self.kill()

    def stop_postgres_immediate(self):
        """A crash of postgres alone (its pg_autoctl restarts it).  Not
        waited for: the keeper may have started a new postmaster before
        pg_ctl sees the old one gone, and pg_ctl would wait for that one."""
        subprocess.run([self.pgctl, "-D", self.data, "-m", "immediate", "-W", "stop"],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60,
                       **as_postgres(self.f.env))


class Formation:
    def __init__(self, out, base, pgbin, ttl, margin, log_line_prefix, descendants):
        self.root = os.path.join(out, "pg")
        self.base = base
        self.descendants = descendants
        self.ttl, self.margin, self.prefix = ttl, margin, log_line_prefix
        xdg = os.path.join(self.root, "xdg")
        self.env = {"PATH": "/usr/bin:/bin", "HOME": self.root, "LANG": "C.UTF-8",
                    "XDG_CONFIG_HOME": os.path.join(xdg, "config"),
                    "XDG_DATA_HOME": os.path.join(xdg, "data"),
                    "XDG_RUNTIME_DIR": os.path.join(xdg, "run")}
        os.makedirs(self.root, exist_ok=True)
        shutil.chown(self.root, "postgres", "postgres")
        for d in ("config", "data", "run"):
            os.makedirs(os.path.join(xdg, d), exist_ok=True)
            shutil.chown(os.path.join(xdg, d), "postgres", "postgres")
        shutil.chown(xdg, "postgres", "postgres")
        self.monitor = Node(self, "monitor", base, "127.0.0.1", MONITOR_PGCTL)
        pgctl = os.path.join(pgbin, "pg_ctl")
        self.nodes = [Node(self, "a", base + 1, "127.0.1.1", pgctl),
                      Node(self, "b", base + 2, "127.0.1.2", pgctl)]
        self.monitor_link = {"a": base + 3, "b": base + 4}

    def proxy_specs(self):
        """Each node's link (where the others reach it) and monitor link."""
        specs = []
        for n in self.nodes:
            specs.append("link-%s:%s:%d:%d" % (n.name, n.hostname, n.port, n.port))
            specs.append("mon-%s:%d:%d" % (n.name, self.monitor_link[n.name], self.monitor.port))
        return specs

    def monitor_sql(self, query, params=None):
        conn = psycopg2.connect(host="127.0.0.1", port=self.monitor.port, dbname="pg_auto_failover",
                                user="autoctl_node", connect_timeout=5, application_name="fqh-harness-monitor")
        try:
            conn.autocommit = True
            with conn.cursor() as cur:
                cur.execute(query, params)
                return cur.fetchall() if cur.description else None
        finally:
            conn.close()

    def create(self, checkpoint):
        """The monitor, node a (the first primary), then node b (its
        standby).  checkpoint() is called while b's base backup waits."""
        m = self.monitor
        m.autoctl("create", "monitor", "--pgdata", m.data, "--pgport", str(m.port),
                  "--hostname", "127.0.0.1", "--auth", "trust", "--no-ssl", "--pgctl", m.pgctl)
        with open(os.path.join(m.data, "postgresql.conf"), "a") as f:
            f.write(MONITOR_CONF % "".join("%s = %d\n" % kv for kv in MONITOR_SETTINGS.items()))
        m.start()
        self.wait_monitor()
        for i, n in enumerate(self.nodes):
            n.autoctl("create", "postgres", "--pgdata", n.data, "--pgport", str(n.port),
                      "--listen", "127.0.0.1", "--hostname", n.hostname, "--name", n.name,
                      "--dbname", DBNAME, "--auth", "trust", "--no-ssl", "--pgctl", n.pgctl,
                      "--monitor", "postgres://autoctl_node@127.0.0.1:%d/pg_auto_failover?sslmode=disable"
                      % self.monitor_link[n.name])
            for k, v in KEEPER_SETTINGS.items():
                n.autoctl("config", "set", "--pgdata", n.data, k, str(v))
            if i == 0:
                with open(os.path.join(n.data, "postgresql.conf"), "a") as f:
                    f.write(NODE_CONF % {"dbname": DBNAME, "ttl": self.ttl, "margin": self.margin,
                                         "prefix": self.prefix})
            n.start()
            self.wait_states({n.name: ("single",)} if i == 0 else None, checkpoint=checkpoint)

    def wait_monitor(self, timeout=60):
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.monitor_sql("SELECT 1")
                return
            except psycopg2.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.3)

    def states(self):
        """{node name: (reported state, goal state)}."""
        rows = self.monitor_sql("SELECT nodename, reportedstate::text, goalstate::text FROM pgautofailover.node")
        return {r[0]: (r[1], r[2]) for r in rows}

    def healthy(self, states):
        """A primary and a secondary, each where the monitor wants it."""
        got = sorted(r for r, g in states.values() if r == g)
        return got == ["primary", "secondary"]

    def wait_states(self, want=None, timeout=240, checkpoint=None):
        """Until the formation is healthy (or each node of want is in one
        of its states, reported and assigned); checkpoint() is called
        every few seconds meanwhile (a base backup waits for one)."""
        deadline = time.monotonic() + timeout
        last_cp = time.monotonic()
        while True:
            try:
                st = self.states()
                if want is None and self.healthy(st):
                    return st
                if want is not None and all(n in st and st[n][0] == st[n][1] and st[n][0] in s
                                            for n, s in want.items()):
                    return st
            except psycopg2.OperationalError:
                st = None
            if time.monotonic() > deadline:
                raise RuntimeError("formation not %s after %ds: %s" % (want or "healthy", timeout, st))
            if checkpoint and time.monotonic() - last_cp > 3:
                last_cp = time.monotonic()
                checkpoint()
            time.sleep(0.3)

    def uri(self):
        """pg_autoctl show uri --formation default: the multi-host URI the
        manager documents for applications."""
        r = self.monitor.autoctl("show", "uri", "--formation", FORMATION, "--pgdata", self.monitor.data)
        return r.stdout.decode().strip().splitlines()[-1]

    def set_sync(self, sync):
        """Synchronous (every node in the write quorum: the formation's
        default) or asynchronous replication (no node in it).  Only a node
        whose setting changes is set (the primary then applies it, which
        is a change of its state)."""
        rows = self.monitor_sql("SELECT nodename, replicationquorum FROM pgautofailover.node")
        for name, quorum in rows:
            if quorum != sync:
                self.monitor_sql("SELECT pgautofailover.set_node_replication_quorum(%s, %s, %s)",
                                 (FORMATION, name, sync))

    def standby_names(self):
        return self.monitor_sql("SELECT pgautofailover.synchronous_standby_names(%s, 0)", (FORMATION,))[0][0]

    def perform_failover(self):
        self.monitor.autoctl("perform", "failover", "--formation", FORMATION, "--pgdata",
                             self.monitor.data, timeout=120)

    def stop(self, fast=False):
        for n in self.nodes + [self.monitor]:
            try:
                n.stop("immediate" if fast else "fast")
            except Exception:
                n.kill()
