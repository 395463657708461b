#!/usr/bin/env bash
# frameq_ready: tasks that become bookable in a transaction that releases
# no proc are announced there, one notification per layer ({job, layer,
# count}); a transaction that releases a proc announces on frameq_release
# only, also when its release frees dependent tasks.
#
#   - submit: each layer with waiting tasks (a layer that depends: none);
#   - a prerequisite's complete: frameq_release only, though it frees the
#     dependent layer in the same transaction;
#   - eat_frame of a waiting prerequisite, drop_depends: the freed layer;
#   - retry_frame of a finished task: its layer, count 1;
#   - a paused job: nothing at submit, nor when an operator frees its tasks;
#     its layers when set_job resumes it.
# Absence is checked over a quiet half second after the call's commit.
set -euo pipefail

# shellcheck source=worker_lib.bash
source "$(dirname "$0")/worker_lib.bash"
need_debs python3-psycopg2

$PY - <<'PY'
import json, os, random, time
from fqtest import (Listener, attach, bail, check_clean, connect, create_farm, fail, finish, ok,
                    one, queries, register, reserve, wait_for_worker)

db = connect()
q, q1 = queries(db)
wait_for_worker(q)
sfx = "%d_%d" % (os.getpid(), random.randrange(1 << 30))
show = "rn_" + sfx
create_farm(q, show)
h = register(q, "rn_h_" + sfx, show, 8)
attach(q, h)
L = Listener("frameq_ready", "frameq_release")

def layer_id(job, name):
    return one(q, "SELECT id FROM frameq.layer WHERE job = %s AND name = %s", job, name)

def task(job, layer, number):
    return one(q, "SELECT f.id FROM frameq.frame f JOIN frameq.layer l ON l.id = f.layer"
                  " WHERE f.job = %s AND l.name = %s AND f.number = %s", job, layer, number)

def heard(what):
    """the notifications of the next quiet half second: [(channel, payload dict)]"""
    start = len(L.got)
    L.pump_until(time.monotonic() + 0.5)
    return [(c, json.loads(p)) for _, c, p in L.got[start:]]

def ready(notes):
    return sorted((p["job"], p["layer"], p["count"]) for c, p in notes if c == "frameq_ready")

def pipe(name, **job):
    spec = dict(show=show, name=name, layers=[
        dict(name="render", command="r", range="1-2"),
        dict(name="comp", command="c", range="1-2", after=["render"])], **job)
    return one(q, "SELECT frameq.submit(%s)", json.dumps(spec))

# submit
a = pipe("a")
got = ready(heard("submit"))
if got != [(a, layer_id(a, "render"), 2)]:
    fail("submit announced %s, wanted render's 2 waiting tasks only" % got)
else:
    ok("submit announces the layer with waiting tasks (count 2), not the layer that depends")

# a prerequisite's complete: frameq_release only
booked = reserve(q, h, 2)
procs = {f: p for p, f in booked}
q("SELECT frameq.complete(%s, %s, %s, %s, 0)", h["name"], h["token"], h["epoch"], procs[task(a, "render", 1)])
q("SELECT frameq.complete(%s, %s, %s, %s, 0)", h["name"], h["token"], h["epoch"], procs[task(a, "render", 2)])
notes = heard("complete")
rel = [p for c, p in notes if c == "frameq_release"]
states = q("SELECT state FROM frameq.frame f JOIN frameq.layer l ON l.id = f.layer"
           " WHERE f.job = %s AND l.name = 'comp' ORDER BY f.number", a)
if ready(notes) or len(rel) != 2 or states != [("waiting",), ("waiting",)]:
    fail("two completes freeing comp: frameq_ready %s, %d frameq_release, comp %s"
         % (ready(notes), len(rel), states))
else:
    ok("the completes that free comp announce on frameq_release only (2), and comp is waiting")

# eat_frame of a waiting prerequisite
b = pipe("b", priority=-5)
heard("submit b")
q("SELECT frameq.eat_frame(%s)", task(b, "render", 1))
got = ready(heard("eat 1"))
if got:
    fail("eating one of two render tasks announced %s" % got)
q("SELECT frameq.eat_frame(%s)", task(b, "render", 2))
got = ready(heard("eat 2"))
if got != [(b, layer_id(b, "comp"), 2)]:
    fail("eating the last prerequisite announced %s, wanted comp's 2 tasks" % got)
else:
    ok("eat_frame of the last waiting prerequisite announces the 2 tasks it frees")

# drop_depends
c = pipe("c", priority=-5)
heard("submit c")
n = one(q, "SELECT frameq.drop_depends(%s)", c)
got = ready(heard("drop"))
if n != 2 or got != [(c, layer_id(c, "comp"), 2)]:
    fail("drop_depends freed %s and announced %s" % (n, got))
else:
    ok("drop_depends announces the tasks it frees")

# retry_frame of a finished task
q("SELECT frameq.retry_frame(%s)", task(a, "render", 1))
got = ready(heard("retry"))
if got != [(a, layer_id(a, "render"), 1)]:
    fail("retry_frame of a succeeded task announced %s" % got)
else:
    ok("retry_frame of a finished task announces it (count 1)")

# a paused job
d = pipe("d", paused=True, priority=-5)
got = ready(heard("submit paused"))
if got:
    fail("a paused job's submit announced %s" % got)
q("SELECT frameq.set_job(%s, paused => false)", d)
got = ready(heard("resume"))
if got != [(d, layer_id(d, "render"), 2)]:
    fail("resuming the paused job announced %s" % got)
else:
    ok("a paused job is announced when it is resumed, not at its submit")
# a paused job's tasks freed by an operator: announced when it resumes, not before
e = pipe("e", paused=True, priority=-6)
heard("submit paused e")
q("SELECT frameq.eat_frame(%s)", task(e, "render", 1))
q("SELECT frameq.eat_frame(%s)", task(e, "render", 2))
got = ready(heard("eat in a paused job"))
comp = q("SELECT state FROM frameq.frame f JOIN frameq.layer l ON l.id = f.layer"
         " WHERE f.job = %s AND l.name = 'comp' ORDER BY f.number", e)
if got or comp != [("waiting",), ("waiting",)]:
    fail("eating a paused job's render announced %s, comp %s" % (got, comp))
else:
    ok("tasks of a paused job freed by eat_frame are not announced (not bookable yet)")
q("SELECT frameq.set_job(%s, paused => false)", e)
got = ready(heard("resume e"))
if got != [(e, layer_id(e, "comp"), 2)]:
    fail("resuming it announced %s, wanted comp's 2 tasks" % got)
else:
    ok("resuming it announces the freed tasks")
check_clean(q)
finish()
PY
