#!/usr/bin/env bash
# The worker never waits longer than frameq.lock_wait (here 300 ms) for a
# lock another session holds; it skips that host this round, says so in
# the server log, expires the other hosts, and expires the skipped host in
# a later round once the lock is gone.  Two holders:
#  1. an agent's open transaction that called heartbeat() (it holds the
#     host lock) while the host's lease has lapsed;
#  2. a render's open transaction that called owns(proc, secret) (a KEY
#     SHARE lock on the proc row the expiry must delete).
# Each time a host with a higher id (behind the held one in the round)
# lapses too and must expire while the lock is still held.
#
# Runs on test/run's shared cluster; the settings it changes are reset on
# exit.  Needs python3-psycopg2 (Debian).
set -euo pipefail

# shellcheck source=worker_lib.bash
source "$(dirname "$0")/worker_lib.bash"
need_debs python3-psycopg2

restore() {
	psql -X -q -At -c "ALTER SYSTEM RESET frameq.lease_ttl" -c "ALTER SYSTEM RESET frameq.lease_margin" \
		-c "ALTER SYSTEM RESET frameq.clock_drift" -c "ALTER SYSTEM RESET frameq.lock_wait" \
		-c "SELECT pg_reload_conf()" >/dev/null 2>&1 || true
}
trap restore EXIT

$PY - <<'PY'
import os, random, re, time
import psycopg2
from fqtest import (bail, check_clean, connect, create_farm, fail, finish, heartbeat, ok, queries,
                    register, attach, reserve, set_and_reload, submit, wait_for_worker)

db = connect()
q, q1 = queries(db)
wait_for_worker(q)
set_and_reload(q, "frameq.lease_ttl", "1s", bail)
set_and_reload(q, "frameq.lease_margin", "0", bail)
set_and_reload(q, "frameq.clock_drift", "0", bail)
set_and_reload(q, "frameq.lock_wait", "300ms", bail)
PERIOD = 1.0
LOG = os.environ["FRAMEQ_LOG"]

sfx = "%d_%d" % (os.getpid(), random.randrange(1 << 30))
alloc = "tbsk_" + sfx
create_farm(q, alloc)
submit(q, alloc, "sk", "1-8")

def host(tag):
    h = register(q, "tbsk_%s_%s" % (tag, sfx), alloc, 4)
    attach(q, h)
    b = q("SELECT proc, run_secret FROM frameq.reserve(%s, %s, %s, 1)", h["name"], h["token"], h["epoch"])
    if len(b) != 1:
        bail("setup: %s booked %d frames" % (h["name"], len(b)))
    h["proc"], h["secret"] = b[0]
    h["procs"] = [h["proc"]]
    return h

def expired(h):
    return q1("SELECT lease_expires_at IS NULL AND NOT EXISTS (SELECT 1 FROM frameq.proc WHERE host = %s)"
              "  FROM frameq.host WHERE id = %s", h["id"], h["id"])

def wait_expired(h, seconds):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if expired(h):
            return True
        time.sleep(0.05)
    return False

def log_has(pattern, start):
    with open(LOG, errors="replace") as f:
        f.seek(start)
        return re.search(pattern, f.read()) is not None

def phase(label, held, behind, hold, why):
    """hold(held) opens a transaction holding a lock; returns its connection."""
    start = os.path.getsize(LOG)
    heartbeat(q, behind)
    conn = hold(held)
    lapsed = time.monotonic()
    if wait_expired(behind, PERIOD + 0.3 + 2.0):
        ok("%s: the host behind the held one expired while the lock was held (%.2f s)"
           % (label, time.monotonic() - lapsed))
    else:
        fail("%s: the host behind the held one did not expire while the lock was held" % label)
    if expired(held):
        fail("%s: the held host expired although its lock was held" % label)
    if log_has(r"frameq worker: host %d skipped this round: %s" % (held["id"], why), start):
        ok("%s: the server log says the host was skipped" % label)
    else:
        fail("%s: no 'host %d skipped this round' line in the server log" % (label, held["id"]))
    conn.commit()
    released = time.monotonic()
    if wait_expired(held, PERIOD + 2.0):
        ok("%s: once the lock was released the host expired (%.2f s)" % (label, time.monotonic() - released))
    else:
        fail("%s: the held host did not expire after the lock was released" % label)
    conn.close()

A = host("a"); B = host("b")
if not A["id"] < B["id"]:
    bail("setup: ids out of order")

def agent_txn(h):
    c = psycopg2.connect("")
    with c.cursor() as cur:
        cur.execute("SELECT kill FROM frameq.heartbeat(%s, %s, %s, %s::bigint[])",
                    (h["name"], h["token"], h["epoch"], h["procs"]))
    return c      # open: the heartbeat's host lock is held until commit

phase("agent transaction", A, B, agent_txn, "its lock is held by another session")

C = host("c"); D = host("d")

def render_txn(h):
    c = psycopg2.connect("")
    with c.cursor() as cur:
        cur.execute("SELECT frameq.owns(%s, %s)", (h["proc"], h["secret"]))
        if cur.fetchone()[0] is not True:
            bail("setup: owns() with the run secret is not true")
    heartbeat(q, h)   # the lease runs from now
    return c

phase("render's owns() fence", C, D, render_txn, "a row it needs is locked by another session")

check_clean(q)
finish()
PY
