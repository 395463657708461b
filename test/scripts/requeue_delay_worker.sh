#!/usr/bin/env bash
# Requeue and retry delays against the real background worker (no time is
# faked): a task is never booked before its delay ends, and the worker
# makes it bookable within a round of that time.
#
#   - a render exits with a requeue code (requeue_delay 2 s) and another
#     fails (retry_delay 1 s); a host asks for work every 20 ms: neither
#     task is booked before its delay has ended (run started_at >= the
#     previous run's ended_at + delay), both are booked at most 1.5 s after
#     it (a round is at most 1 s), and frameq_ready announces each layer
#     when its delay ends;
#   - 300 tasks requeued together (delay 1 s) are all bookable within 1.5 s
#     of their time: one round takes them all;
#   - check() is clean throughout.
set -euo pipefail

# shellcheck source=worker_lib.bash
source "$(dirname "$0")/worker_lib.bash"
need_debs python3-psycopg2

$PY - <<'PY'
import json, os, random, time
from fqtest import (Listener, attach, bail, check_clean, connect, create_farm, fail, finish, ok,
                    one, queries, register, reserve, wait_for, wait_for_worker)

db = connect()
q, q1 = queries(db)
wait_for_worker(q)
sfx = "%d_%d" % (os.getpid(), random.randrange(1 << 30))
show = "rd_" + sfx
create_farm(q, show)
h = register(q, "rd_h_" + sfx, show, 8)
attach(q, h)
L = Listener("frameq_ready")

def submit(name, frames, **fields):
    spec = dict(show=show, name=name, max_retries=3, **fields)
    spec["layers"] = [dict(name="r", command="r", range=frames)]
    return one(q, "SELECT frameq.submit(%s)", json.dumps(spec))

def complete(host, proc, status):
    return one(q, "SELECT frameq.complete(%s, %s, %s, %s, %s)", host["name"], host["token"],
               host["epoch"], proc, status)

# ---- one requeue, one retry
rq = submit("rq", "1", requeue_exit_codes=[75], requeue_delay=2)
rt = submit("rt", "1", retry_delay="1s")
booked = reserve(q, h, 10)
if len(booked) != 2:
    bail("setup: booked %d tasks, not 2" % len(booked))
by_job = {one(q, "SELECT job FROM frameq.proc WHERE id = %s", p): (p, f) for p, f in booked}
complete(h, by_job[rq][0], 75)
complete(h, by_job[rt][0], 1)
h["procs"] = []
delays = {by_job[rq][1]: 2, by_job[rt][1]: 1}
layers = {one(q, "SELECT layer FROM frameq.frame WHERE id = %s", f): f for f in delays}
states = q("SELECT id, state, retries, requeues, not_before IS NOT NULL FROM frameq.frame"
           " WHERE id = ANY (%s) ORDER BY id", list(delays))
want = sorted([(by_job[rq][1], "waiting", 0, 1, True), (by_job[rt][1], "waiting", 1, 0, True)])
if states != want:
    fail("after the exits: %s, wanted %s" % (states, want))
else:
    ok("the requeued task (no retry used) and the failed one are waiting, delayed")
check_clean(q, "check() with two delayed tasks")

again = {}
deadline = time.monotonic() + 10
while len(again) < 2 and time.monotonic() < deadline:
    for p, f in reserve(q, h, 10):
        again[f] = p
    L.pump(0.02)
if len(again) != 2:
    bail("after 10 s only %d of the 2 delayed tasks were booked again" % len(again))
for f, delay in sorted(delays.items()):
    early, late = q("SELECT extract(epoch FROM b.started_at - (a.ended_at + make_interval(secs => %s)))::float8,"
                    "       extract(epoch FROM b.started_at - a.ended_at)::float8"
                    "  FROM frameq.run a, frameq.run b"
                    " WHERE a.frame = %s AND b.frame = a.frame AND b.proc = %s AND a.proc <> b.proc",
                    delay, f, again[f])[0]
    if early < 0:
        fail("task %s was booked %.3f s after its run ended, before its %d s delay ended" % (f, late, delay))
    elif early > 1.5:
        fail("task %s was booked %.3f s after its %d s delay ended (more than a round and a half)" % (f, early, delay))
    else:
        ok("task %s (delay %d s) booked %.3f s after its run ended: not before its delay, %.3f s after it"
           % (f, delay, late, early))
heard = {json.loads(p)["layer"] for _, c, p in L.got}
if set(layers) <= heard:
    ok("frameq_ready announced both layers when their delays ended")
else:
    fail("frameq_ready announced layers %s, wanted %s" % (sorted(heard), sorted(layers)))
check_clean(q, "check() after both were booked again")
for f, p in again.items():
    complete(h, p, 0)

# ---- many at once: one round
q("SELECT frameq.set_subscription(%s, %s, 1000, 1000)", show, show)
big = register(q, "rd_big_" + sfx, show, 400)
attach(q, big)
many = submit("many", "1-300", requeue_exit_codes=[75], requeue_delay=1)
got = reserve(q, big, 1000)
if len(got) != 300:
    bail("setup: booked %d of the 300 tasks" % len(got))
q("SELECT frameq.complete(%s, %s, %s, p.id, 75) FROM frameq.proc p WHERE p.job = %s",
  big["name"], big["token"], big["epoch"], many)
last_due = q1("SELECT max(not_before) FROM frameq.frame WHERE job = %s", many)
if q1("SELECT count(*) FROM frameq.frame WHERE job = %s AND state = 'waiting' AND not_before IS NOT NULL", many) != 300:
    bail("setup: the 300 tasks are not all delayed")
wait_for(lambda: q1("SELECT count(*) FROM frameq.frame WHERE job = %s AND not_before IS NOT NULL", many) == 0,
         10, 0.02, "300 delayed tasks still not all bookable 10 s after their requeue")
lag = q1("SELECT extract(epoch FROM clock_timestamp() - %s)::float8", last_due)
if lag > 1.5:
    fail("the last of 300 delays ended %.3f s after its time (more than a round and a half)" % lag)
else:
    ok("300 delays ended together, the last %.3f s after its time" % lag)
if len(reserve(q, big, 1000)) != 300:
    fail("the 300 tasks were not all booked again")
else:
    ok("all 300 booked again")
check_clean(q, "check() at the end")
finish()
PY
