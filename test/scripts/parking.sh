#!/usr/bin/env bash
# Jobs at their caps leave the dispatch queue and come back (issue 12;
# src/ledger.c, "Parking"; doc/design-notes-dispatch.md).
#
# With real commits (a pgTAP file is one transaction, and a charge not yet
# committed forbids parking):
#   - 200 jobs at their job cap ahead of a waiting job: the next reserve()
#     books the waiting job, takes the 200 jobs' rows out of the queue and
#     dispatch_parked lists them; a later call reads only a few index
#     tuples, not 200;
#   - a release of a parked job queues its layer again in the same
#     transaction, and the next call books its next frame;
#   - a job cap raised with set_job, and a folder cap raised with
#     set_folder_limits, queue the parked layers again;
#   - a folder at its cap parks its jobs through the folder; a release in
#     the folder brings every one of them back;
#   - a ledger rebuild (frameq._ledger_reset(), and a server restart, where
#     shared memory starts empty) forgets the marks: the next reserve(), or
#     the worker's next round, queues every waiting layer again;
#   - check() is clean after every step.
set -euo pipefail

# shellcheck source=worker_lib.bash
source "$(dirname "$0")/worker_lib.bash"
need_debs python3-psycopg2

restore() {
	psql -X -q -At -c "ALTER SYSTEM RESET frameq.lease_ttl" -c "SELECT pg_reload_conf()" >/dev/null 2>&1 || true
}
trap restore EXIT

$PY - <<'PY'
import json, os, random
from fqtest import (attach, bail, check_clean, cluster_lib, connect, create_farm, fail, finish,
                    ok, one, queries, register, reserve, set_and_reload, submit, wait_for,
                    wait_for_worker)

db = connect()
q, q1 = queries(db)
set_and_reload(q, "frameq.lease_ttl", "1h", bail)
wait_for_worker(q)

sfx = "%d_%d" % (os.getpid(), random.randrange(1 << 30))
show = "pk_" + sfx
create_farm(q, show)
q("SELECT frameq.set_subscription(%s, %s, 100000, 100000)", show, show)

def rows_of(jobs):
    return one(q, "SELECT count(*) FROM frameq.dispatch_queue WHERE job = ANY (%s::bigint[])", jobs)

def parked(kind):
    return set(r[0] for r in q("SELECT id FROM frameq.dispatch_parked WHERE kind = %s", kind))

def index_tuples_of_one_reserve(h):
    """(frames booked, dispatch_queue_order index tuples read) by one reserve(h, 1)"""
    # a new session: pending statistics of earlier transactions would count too
    c = connect()
    qq, _ = queries(c)
    qq("BEGIN")
    got = reserve(qq, h, 1)
    n = one(qq, "SELECT pg_stat_get_xact_tuples_returned('frameq.dispatch_queue_order'::regclass)")
    qq("COMMIT")
    c.close()
    return got, n

big = register(q, "pk_big_" + sfx, show, 1000)
small = register(q, "pk_small_" + sfx, show, 100)
attach(q, big); attach(q, small)

# ---------------------------------------------------------------- job caps
capped = [submit(q, show, "c%d" % i, "1-3", priority=10, max_cores=1) for i in range(200)]
low = submit(q, show, "low", "1-20", priority=1)
got = reserve(q, big, 1000)
if len(got) != 200 + 20:
    bail("setup: the big host booked %d frames, wanted 200 (one per capped job) + 20" % len(got))
# 20 low frames went to the big host too: submit more low work
low2 = submit(q, show, "low2", "1-50", priority=1)
if rows_of(capped) != 200:
    fail("before any call finds them at their caps, the 200 capped jobs have %d rows, wanted 200" % rows_of(capped))
b = reserve(q, small, 1)
jobs = [one(q, "SELECT job FROM frameq.frame WHERE id = %s", f) for p, f in b]
if jobs != [low2]:
    fail("with 200 jobs at their caps ahead, reserve() booked %s, wanted a frame of job %s" % (jobs, low2))
if rows_of(capped) != 0:
    fail("after that call the capped jobs still have %d dispatch queue rows, wanted 0" % rows_of(capped))
if parked("job") != set(capped):
    fail("dispatch_parked lists %d jobs, wanted the 200 capped ones" % len(parked("job")))
else:
    ok("200 jobs at their job caps are parked by the first call that meets them")
# the first scan after the deletes still meets their index entries, and marks them dead
got1, tuples1 = index_tuples_of_one_reserve(small)
got, tuples = index_tuples_of_one_reserve(small)
if len(got1) != 1 or len(got) != 1 or tuples > 20:
    fail("the next calls booked %d and %d frames reading %d and %d index tuples (wanted 1 frame each, at most 20 tuples the second time)" % (len(got1), len(got), tuples1, tuples))
else:
    ok("the next calls read %d, then %d index tuples with 200 parked jobs ahead" % (tuples1, tuples))
check_clean(q, "check() with 200 parked jobs")

# a release of a parked job queues it again, in the releasing transaction
j0 = capped[0]
p0, f0 = q("SELECT p.id, p.frame FROM frameq.proc p WHERE p.job = %s", j0)[0]
q("BEGIN")
r = one(q, "SELECT frameq.complete(%s, %s, %s, %s, 0)", big["name"], big["token"], big["epoch"], p0)
inside = rows_of([j0])
q("COMMIT")
if r != "accepted" or inside != 1:
    fail("complete() of a parked job's proc: %s, with %d rows of the job in its transaction (wanted accepted, 1)" % (r, inside))
if j0 in parked("job"):
    fail("job %s is still parked after its release committed" % j0)
b = reserve(q, small, 1)
if [one(q, "SELECT job FROM frameq.frame WHERE id = %s", f) for p, f in b] != [j0]:
    fail("after the release, reserve() booked %s, wanted the released job's next frame" % b)
else:
    ok("a release of a parked job brings it back, and the next call books it")
check_clean(q, "check() after a parked job's release")

# a job cap raised
j1 = capped[1]
q("SELECT frameq.set_job(%s, max_cores => 3)", j1)
b = reserve(q, small, 2)
if sorted(one(q, "SELECT job FROM frameq.frame WHERE id = %s", f) for p, f in b) != [j1, j1]:
    fail("after set_job raised its cap, reserve() booked %s, wanted 2 frames of job %s" % (b, j1))
else:
    ok("set_job raising a parked job's cap brings it back")
check_clean(q, "check() after a cap raise")

# ------------------------------------------------------------- folder caps
folder = one(q, "SELECT frameq.create_folder(%s, %s, 2)", show, "pkf")
infolder = [submit(q, show, "f%d" % i, "1-2", priority=20, folder="pkf") for i in range(50)]
got = reserve(q, big, 2)
if len(got) != 2:
    bail("setup: the big host booked %d frames of the folder, wanted 2" % len(got))
b = reserve(q, small, 1)
if any(one(q, "SELECT job FROM frameq.frame WHERE id = %s", f) in infolder for p, f in b) or len(b) != 1:
    fail("with the folder at its cap, reserve() booked %s" % b)
if rows_of(infolder) != 0 or folder not in parked("folder"):
    fail("folder at its cap: %d rows of its jobs, parked folders %s" % (rows_of(infolder), parked("folder")))
else:
    ok("a folder at its cap parks its 50 jobs")
pf = one(q, "SELECT id FROM frameq.proc WHERE job = ANY (%s::bigint[]) ORDER BY id LIMIT 1", infolder)
q("SELECT frameq.complete(%s, %s, %s, %s, 0)", big["name"], big["token"], big["epoch"], pf)
back = rows_of(infolder)
b = reserve(q, small, 1)
if back < 49 or [one(q, "SELECT job FROM frameq.frame WHERE id = %s", f) in infolder for p, f in b] != [True]:
    fail("after a release in the folder: %d of its jobs queued, and reserve() booked %s" % (back, b))
else:
    ok("a release in a parked folder brings its jobs back (%d rows) and the next call books one" % back)
check_clean(q, "check() after a folder release")
reserve(q, small, 1)                       # parks the folder again
q("SELECT frameq.set_folder_limits(%s, 10, NULL)", folder)
b = reserve(q, small, 8)
if len(b) != 8 or not all(one(q, "SELECT job FROM frameq.frame WHERE id = %s", f) in infolder for p, f in b):
    fail("after set_folder_limits raised the cap, reserve() booked %s, wanted 8 frames of the folder" % b)
else:
    ok("set_folder_limits raising a parked folder's cap brings its jobs back")
check_clean(q, "check() after a folder cap raise")

# ----------------------------------------------------------------- rebuilds
reserve(q, small, 1)                       # parks whatever is at its cap again
before = len(parked("job")) + len(parked("folder"))
q("SELECT frameq._ledger_reset()")
if one(q, "SELECT count(*) FROM frameq.dispatch_parked") != 0:
    fail("a rebuilt ledger still lists parked entries")
reserve(q, small, 1)
if rows_of(capped[2:]) != 198:
    fail("after a ledger reset and one reserve(), %d of the 198 parked jobs have rows" % rows_of(capped[2:]))
if one(q, "SELECT frameq._requeue_pending()"):
    fail("the requeue a rebuild needs is still pending after a reserve() committed")
check_clean(q, "check() after a ledger reset and one reserve()")
ok("after a ledger reset (%d entries were parked) the next reserve() queued them again" % before)

reserve(q, small, 1)                       # parks them again
cluster_lib("cluster_restart >/dev/null")
db = connect()
q, q1 = queries(db)
wait_for_worker(q)
wait_for(lambda: not one(q, "SELECT frameq._requeue_pending()") and
         rows_of(capped[2:]) >= 198, 20, 0.1,
         "20 s after a restart the worker has not queued the parked jobs again")
ok("after a server restart the worker queues the parked jobs again")
check_clean(q, "check() after a restart")
finish()
PY
