#!/usr/bin/env bash
# Review finding: the job's dispatch lock (src/frameq.h) is a heavyweight
# lock per job, and one transaction took one per job it touched, without a
# bound.  The shared lock table holds max_locks_per_transaction x
# backends entries, shared by the whole server (with the defaults, about
# 14,000 here); past that a lock fails with "out of shared memory".  Row
# locks, which the dispatch lock replaced, take no entry.  So, with jobs
# enough (this cluster has max_locks_per_transaction = 10, about 3,000
# entries, and N = 4,000 jobs; with the defaults the same happens at about
# 14,000, less whatever other sessions hold):
#   1. a submit of N jobs in one transaction failed (_queue_layers took
#      each new job's lock);
#   2. the complete() of the last frame of a job that N jobs depend on
#      (depend_job) failed, at every try: freeing their tasks took each job's lock (the
#      gate), so the job never finished and its dependents never ran;
#   3. every reserve() of a host whose walk met the rows of N paused jobs
#      failed: its tidy tried every such job's lock in EXCLUSIVE, so the
#      host booked nothing, not even the one active job's frame.
# Each must succeed, holding a bounded number of job locks (past the bound
# the row locks, which always worked, are used; the tidy leaves the rows
# of jobs past it for later calls).
set -euo pipefail

# shellcheck source=worker_lib.bash
source "$(dirname "$0")/worker_lib.bash"
cd "$(dirname "$0")/../.."
need_debs python3-psycopg2

# (a lease of an hour: the steps over 4,000 jobs can outlast the default 30 s
# on a loaded machine, and this test never renews its host's lease)
own_cluster 54373 $'max_locks_per_transaction = 10\nframeq.quarantine = off\nframeq.lease_ttl = 3600s'
cluster_start >/dev/null

status=0
$PY - <<'PY' || status=$?
import json
from fqtest import attach, bail, check_clean, connect, fail, finish, ok, one, queries, register, reserve

N = 4000
db = connect()
q, q1 = queries(db)
q("SELECT frameq.create_allocation('lt')")
q("SELECT frameq.create_show('lt')")
q("SELECT frameq.set_subscription('lt', 'lt', 100, 100)")

def spec(name, priority):
    return json.dumps(dict(show="lt", name=name, priority=priority,
                           layers=[dict(name="l", command="x", range="1", cores=1)]))

pre = one(q, "SELECT frameq.submit(%s)", spec("pre", 100))

# 1. N jobs submitted in one transaction
try:
    got = q1("SELECT count(frameq.submit(format(%s, i)::jsonb)) FROM generate_series(1, %s) i",
             spec("d%s", 50), N)
    ok("%s jobs submitted in one transaction" % got)
except Exception as e:
    fail("a submit of %s jobs in one transaction failed: %s" % (N, str(e).strip()))
    for i in range(1, N + 1):
        q("SELECT frameq.submit(%s)", spec("d%s" % i, 50))

# 2. each made to wait for "pre" (a transaction each); the last frame of "pre"
# completes, and its N dependents are freed in that transaction
for (j,) in q("SELECT id FROM frameq.job WHERE name LIKE 'd%%' ORDER BY id"):
    q("SELECT frameq.depend_job(%s, %s)", j, pre)
if one(q, "SELECT count(*) FROM frameq.frame f JOIN frameq.job j ON j.id = f.job"
          " WHERE j.name LIKE 'd%%' AND f.state = 'depend'") != N:
    bail("setup: the %s dependent jobs' tasks are not all held" % N)
h = register(q, "lt-h", "lt", 1)
attach(q, h)
(p, f), = reserve(q, h, 1)
if one(q, "SELECT job FROM frameq.frame WHERE id = %s", f) != pre:
    bail("setup: the host did not book pre's frame")
try:
    q("SELECT frameq.complete(%s, %s, %s, %s, 0)", h["name"], h["token"], h["epoch"], p)
    ok("complete() of pre's frame freed its dependents")
except Exception as e:
    fail("complete() of pre's frame, on which %s jobs depend, failed: %s" % (N, str(e).strip()))
    # go on with the dependents freed one job at a time, and pre's frame done
    for (j,) in q("SELECT id FROM frameq.job WHERE name LIKE 'd%%' ORDER BY id"):
        q("SELECT frameq.drop_depends(%s)", j)
    q("SELECT frameq.complete(%s, %s, %s, %s, 0)", h["name"], h["token"], h["epoch"], p)
h["procs"] = []
waiting = one(q, "SELECT count(*) FROM frameq.frame f JOIN frameq.job j ON j.id = f.job"
                 " WHERE j.name LIKE 'd%%' AND f.state = 'waiting'")
if waiting != N:
    fail("%s of the %s dependent tasks are waiting after pre's frame completed" % (waiting, N))
else:
    ok("all %s dependent tasks are waiting" % N)
    check_clean(q, "check() after pre finished")

# 3. the dependents paused (their queue rows stale), one active job behind them
q("SELECT count(frameq.set_job(j.id, paused => true)) FROM frameq.job j WHERE j.name LIKE 'd%%'")
live = one(q, "SELECT frameq.submit(%s)", spec("live", 10))
rows = lambda: one(q, "SELECT count(*) FROM frameq.dispatch_queue q JOIN frameq.job j ON j.id = q.job"
                      " WHERE j.name LIKE 'd%%'")
before = rows()
try:
    got = reserve(q, h, 1)
    if [one(q, "SELECT job FROM frameq.frame WHERE id = %s", fr) for pr, fr in got] == [live]:
        ok("reserve() walked past %s paused jobs' rows and booked the active job's frame" % before)
    else:
        fail("reserve() booked %s, not the active job's frame" % got)
    if rows() >= before:
        fail("reserve()'s tidy deleted none of the %s stale rows" % before)
    else:
        ok("reserve()'s tidy deleted %s of the %s stale rows" % (before - rows(), before))
except Exception as e:
    fail("reserve() with %s paused jobs' rows ahead failed: %s" % (before, str(e).strip()))
for pr in h["procs"]:
    q("SELECT frameq.complete(%s, %s, %s, %s, 0)", h["name"], h["token"], h["epoch"], pr)
h["procs"] = []
for _ in range(200):
    if rows() == 0:
        break
    try:
        reserve(q, h, 1)
    except Exception as e:
        fail("a later reserve() failed too: %s" % str(e).strip())
        break
if rows() != 0:
    fail("%s stale rows are left after repeated reserve() calls" % rows())
check_clean(q, "check() at the end")
finish()
PY
cluster_stop >/dev/null 2>&1 || true
exit $status
