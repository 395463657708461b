#!/usr/bin/env bash
# ALTER EXTENSION frameq UPDATE from 0.4.0 with dependencies in flight.
#
# From 0.5.0 an unchunked layer's frame-by-frame dependencies are found by
# number (no edge rows); 0.4.0 wrote an edge per task in frame_depend.
# Installs 0.1.0, updates to 0.4.0, submits a pipeline there (render 1-4;
# den 1-4 after_frames render; comp 1-4 in chunks of 2 after_frames den),
# eats render 1 at 0.4.0 (den 1 waiting), then updates, and proves that
# the edges written by 0.4.0 keep working:
#   - check() is clean, and depends lists the 8 edges, 2 of them met;
#   - a host books render 2-4 and den 1, completes them: den 2-4 are freed
#     by the 0.4.0 edges, each once; den 1-2 done frees comp 1-2;
#   - a pipeline submitted after the update writes edge rows only for its
#     chunked layer, lists all its edges in depends the same way, and both
#     run to the end (check() would report a task freed early or late);
#   - check() is clean at the end.
# The extension is left freshly installed, as the other tests expect it.
set -euo pipefail

# shellcheck source=worker_lib.bash
source "$(dirname "$0")/worker_lib.bash"
need_debs python3-psycopg2

restore() {
	psql -X -q -At -v ON_ERROR_STOP=1 -c "DROP EXTENSION IF EXISTS frameq CASCADE" \
		-c "CREATE EXTENSION frameq" >/dev/null ||
		echo "not ok: could not reinstall the extension after the test"
}
trap restore EXIT

$PY - <<'PY'
import json, os, re
from fqtest import (attach, bail, check_clean, connect, fail, finish, ok, one, queries, register,
                    reserve, wait_for_worker)

db = connect()
q, q1 = queries(db)
wait_for_worker(q)
q("DROP EXTENSION frameq CASCADE")
q("CREATE EXTENSION frameq VERSION '0.1.0'")
q("ALTER EXTENSION frameq UPDATE TO '0.4.0'")
if q1("SELECT extversion FROM pg_extension WHERE extname = 'frameq'") != "0.4.0":
    bail("could not install frameq 0.4.0")

q("SELECT frameq.create_allocation('ud')")
q("SELECT frameq.create_show('ud')")
q("SELECT frameq.set_subscription('ud', 'ud', 100, 100)")

def pipeline(name):
    return one(q, "SELECT frameq.submit(%s)", json.dumps(dict(show="ud", name=name, layers=[
        dict(name="render", command="r #FRAME#", range="1-4"),
        dict(name="den", command="d #FRAME#", range="1-4", after_frames=["render"]),
        dict(name="comp", command="c #FRAMESPEC#", range="1-4", chunk=2, after_frames=["den"])])))

def states(job, layer):
    return ",".join(r[0] for r in q("SELECT f.state FROM frameq.frame f JOIN frameq.layer l ON l.id = f.layer"
                                    " WHERE f.job = %s AND l.name = %s ORDER BY f.number", job, layer))

def task(job, layer, number):
    return one(q, "SELECT f.id FROM frameq.frame f JOIN frameq.layer l ON l.id = f.layer"
                  " WHERE f.job = %s AND l.name = %s AND f.number = %s", job, layer, number)

old = pipeline("old")
if one(q, "SELECT count(*) FROM frameq.frame_depend e JOIN frameq.frame f ON f.id = e.frame WHERE f.job = %s", old) != 8:
    bail("setup: 0.4.0 did not write 8 edges for the old pipeline")
q("SELECT frameq.eat_frame(%s)", task(old, "render", 1))
if (states(old, "render"), states(old, "den")) != ("eaten,waiting,waiting,waiting", "waiting,depend,depend,depend"):
    bail("setup at 0.4.0: render %s, den %s" % (states(old, "render"), states(old, "den")))

q("ALTER EXTENSION frameq UPDATE")
v = q1("SELECT extversion FROM pg_extension WHERE extname = 'frameq'")
latest = re.search(r"default_version\s*=\s*'([^']+)'",
                   open(os.path.join(os.environ["FRAMEQ_REPO"], "frameq.control")).read()).group(1)
if v != latest:
    bail("ALTER EXTENSION frameq UPDATE went from 0.4.0 to %s, not %s" % (v, latest))
ok("ALTER EXTENSION frameq UPDATE went from 0.4.0 to %s" % v)
check_clean(q, "check() after the update")
got = q("SELECT count(*), count(*) FILTER (WHERE satisfied) FROM frameq.depends WHERE job = %s AND kind = 'frame'", old)[0]
if got != (8, 1):
    fail("depends lists %s frame edges of the old pipeline (met: %s), wanted 8 (1)" % got)
else:
    ok("depends lists the 8 edges 0.4.0 wrote, 1 met")

h = register(q, "ud-h", "ud", 16)
attach(q, h)

def run(job, layer, numbers):
    """book every waiting task of the farm, complete those of (layer, numbers); returns what was booked"""
    booked = reserve(q, h, 16)
    want = {task(job, layer, n) for n in numbers}
    for p, f in booked:
        if f in want:
            q("SELECT frameq.complete(%s, %s, %s, %s, 0)", h["name"], h["token"], h["epoch"], p)
            h["procs"].remove(p)
    return [f for p, f in booked]

run(old, "render", [2, 3, 4])
if states(old, "den") != "running,waiting,waiting,waiting":
    fail("after render 2-4 completed, den is %s, wanted den 1 running and 2-4 waiting" % states(old, "den"))
else:
    ok("render 2-4 completed after the update free den 2-4 through 0.4.0's edges")
q("SELECT frameq.complete(%s, %s, %s, %s, 0)", h["name"], h["token"], h["epoch"],
  one(q, "SELECT id FROM frameq.proc WHERE frame = %s", task(old, "den", 1)))
h["procs"] = [p for (p,) in q("SELECT id FROM frameq.proc WHERE host = %s", h["id"])]
run(old, "den", [2])
if states(old, "comp") != "waiting,depend":
    fail("after den 1-2, comp is %s, wanted its first chunk waiting" % states(old, "comp"))
else:
    ok("den 1 and 2 done free comp's chunk 1-2, not 3-4")
check_clean(q, "check() while the old pipeline runs")

new = pipeline("new")
edges = one(q, "SELECT count(*) FROM frameq.frame_depend e JOIN frameq.frame f ON f.id = e.frame WHERE f.job = %s", new)
listed = one(q, "SELECT count(*) FROM frameq.depends WHERE job = %s AND kind = 'frame'", new)
if (edges, listed) != (4, 8):
    fail("a pipeline submitted at %s wrote %s edge rows and lists %s edges, wanted 4 (comp's) and 8" % (v, edges, listed))
else:
    ok("a pipeline submitted after the update writes edge rows only for its chunked layer, and lists all 8 edges")
# run everything to the end: book what is bookable, complete all that runs
for _ in range(20):
    reserve(q, h, 16)
    running = [p for (p,) in q("SELECT id FROM frameq.proc WHERE host = %s", h["id"])]
    if not running:
        break
    for p in running:
        q("SELECT frameq.complete(%s, %s, %s, %s, 0)", h["name"], h["token"], h["epoch"], p)
    h["procs"] = []
for j, name in ((old, "old"), (new, "new")):
    s = (states(j, "render"), states(j, "den"), states(j, "comp"))
    if s != (("eaten" if j == old else "succeeded") + ",succeeded,succeeded,succeeded",
             "succeeded,succeeded,succeeded,succeeded", "succeeded,succeeded"):
        fail("the %s pipeline ended as %s" % (name, s))
    else:
        ok("the %s pipeline ran to the end in order" % name)
if one(q, "SELECT count(*) FROM frameq.depends WHERE job IN (%s, %s) AND NOT satisfied", old, new) != 0:
    fail("depends has unmet edges left: %s" % q("SELECT * FROM frameq.depends WHERE NOT satisfied"))
check_clean(q, "check() at the end")
finish()
PY
