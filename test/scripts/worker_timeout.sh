#!/usr/bin/env bash
# The background worker times tasks out (issue 15).
#
# A job of three frames with a timeout of 2 s, and one without a timeout,
# run on one host; a client LISTENs on the host's channel.  Without any
# call from the test, the worker must:
#   - turn each timed task into a kill order (cause timeout) no earlier
#     than its deadline and within a round of it (kill_at - timeout_at in
#     [0, 1.5 s]: a round is 1 s apart, the rest is slack for a loaded
#     machine), and announce it on frameq_host_<id> with its reason;
#   - leave the task without a timeout running;
#   - release nothing: 1.5 s later every kill order is still booked, its
#     frame running, and no frameq_release was sent.
# Then the host proves the deaths (a heartbeat not listing two of them, a
# complete() of the third): each run ends 'timeout', its frame back to
# waiting with one retry used.  Runs on test/run's shared cluster.
set -euo pipefail

# shellcheck source=worker_lib.bash
source "$(dirname "$0")/worker_lib.bash"
need_debs python3-psycopg2

$PY - <<'PY'
import json, os, random, time
from fqtest import (Listener, attach, bail, check_clean, connect, create_farm, fail, finish, ok, queries,
                    register, reserve, submit, wait_for, wait_for_worker)

db = connect()
q, q1 = queries(db)
wait_for_worker(q)

sfx = "%d_%d" % (os.getpid(), random.randrange(1 << 30))
alloc = "wto_" + sfx
create_farm(q, alloc)
h = register(q, "wto_h_" + sfx, alloc, 8)
attach(q, h)
lis = Listener("frameq_host_%d" % h["id"], "frameq_release")
timed = submit(q, alloc, "timed", "1-3", timeout=2)
untimed = submit(q, alloc, "untimed", "1")
booked = reserve(q, h, 4)
if len(booked) != 4:
    bail("setup booked %d frames, wanted 4" % len(booked))
tprocs = [p for p, in q("SELECT id FROM frameq.proc WHERE job = %s ORDER BY id", timed)]
uproc = q1("SELECT id FROM frameq.proc WHERE job = %s", untimed)

# the worker's round orders them killed; nothing else does
wait_for(lambda: q1("SELECT count(*) FROM frameq.proc WHERE job = %s AND state = 'killing'", timed) == 3,
         6, 0.05, "the timed tasks were not ordered killed within 4 s of their deadline")
late = q("SELECT id, extract(epoch FROM kill_at - timeout_at)::float8, kill_cause, kill_reason "
         "FROM frameq.proc WHERE job = %s ORDER BY id", timed)
for p, d, cause, reason in late:
    if 0 <= d <= 1.5 and cause == "timeout" and reason.startswith("timeout: "):
        ok("proc %d ordered killed %.3f s after its deadline, cause timeout (%s)" % (p, d, reason))
    else:
        fail("proc %d: kill order %.3f s after its deadline, cause %s, reason %r" % (p, d, cause, reason))
lis.pump_until(time.monotonic() + 1)
sent = {json.loads(pl)["proc"]: json.loads(pl)["reason"] for t, ch, pl in lis.got
        if ch.startswith("frameq_host_")}
for p in tprocs:
    if sent.get(p, "").startswith("timeout: "):
        ok("the kill order of proc %d was announced on its host's channel" % p)
    else:
        fail("no announcement of proc %d's timeout on frameq_host_%d" % (p, h["id"]))

# no release without a proof of death
lis.pump_until(time.monotonic() + 0.5)
left = q("SELECT p.state, f.state FROM frameq.proc p JOIN frameq.frame f ON f.id = p.frame "
         "WHERE p.job = %s", timed)
if len(left) == 3 and all(s == ("killing", "running") for s in left):
    ok("1.5 s later the kill orders still hold their frames, running")
else:
    fail("the timed-out tasks are %s" % left)
# (releases of other tests' hosts, left in the shared database, are not ours)
ours = [g for g in lis.got if g[1] == "frameq_release" and json.loads(g[2])["host"] == h["id"]]
if ours:
    fail("a release was announced without a proof of death: %s" % ours)
else:
    ok("no release was announced")
if q1("SELECT state FROM frameq.proc WHERE id = %s", uproc) == "running":
    ok("the task without a timeout runs on")
else:
    fail("the task without a timeout is no longer running")

# the proofs: a heartbeat for two, a completion for the third
q("SELECT frameq.heartbeat(%s, %s, %s, %s::bigint[])", h["name"], h["token"], h["epoch"],
  [tprocs[2], uproc])
if q1("SELECT frameq.complete(%s, %s, %s, %s, 0)", h["name"], h["token"], h["epoch"], tprocs[2]) != "accepted":
    fail("the completion of a timed-out task was not accepted")
runs = q("SELECT r.reason, r.end_state, f.state, f.retries FROM frameq.run r "
         "JOIN frameq.frame f ON f.id = r.frame WHERE r.job = %s ORDER BY r.proc", timed)
if runs == [("timeout", "waiting", "waiting", 1)] * 3:
    ok("each run ended 'timeout', its frame back to waiting with a retry used")
else:
    fail("the runs ended %s" % runs)
check_clean(q)

# leave nothing running
q("SELECT frameq.kill_job(%s, 'done')", timed)
q("SELECT frameq.kill_job(%s, 'done')", untimed)
q("SELECT frameq.heartbeat(%s, %s, %s, '{}'::bigint[])", h["name"], h["token"], h["epoch"])
finish()
PY
