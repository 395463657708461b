#!/usr/bin/env bash
# Size classes in the dispatch queue (sql/src/dispatch.sql, "Size
# classes"; doc/design-notes-dispatch.md): a host does not meet the layers
# that need more than twice the memory or cores it has free.
#
#   - 2,000 jobs of 64 GB layers ahead of a 1 GB job, on a 16 GB host: one
#     reserve() books the 1 GB frame and reads no more than a few blocks of
#     the queue's index (the 2,000 rows fill about 40 leaf pages, which the
#     0.3.0 walk read, one index tuple per layer);
#   - the same with 2,000 jobs of 64-core layers, on a 16-core host;
#   - a big host books across every class in policy order (priority, then
#     job): the streams of all classes are merged;
#   - dispatch_class lists each stream with rows; when a stream's last row
#     leaves the queue, the worker forgets the stream, and a new row brings
#     it back; duplicate entries are removed by the same round;
#   - check() reports a queue row whose stream is not listed, and is clean
#     after every other step.
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
from fqtest import (attach, bail, check_clean, connect, create_farm, fail, finish, ok, one,
                    queries, reserve, set_and_reload, wait_for, wait_for_worker)

db = connect()
q, q1 = queries(db)
set_and_reload(q, "frameq.lease_ttl", "1h", bail)
wait_for_worker(q)

GB = 1 << 30
sfx = "%d_%d" % (os.getpid(), random.randrange(1 << 30))
show = "sc_" + sfx
create_farm(q, show)
q("SELECT frameq.set_subscription(%s, %s, 100000, 100000)", show, show)
show_id = one(q, "SELECT id FROM frameq.show WHERE name = %s", show)

def host(name, cores, memory):
    token = one(q, "SELECT frameq.register_host(%s, %s, %s, %s)", name + "_" + sfx, show, cores, memory)
    h = dict(name=name + "_" + sfx, token=token, procs=[])
    attach(q, h)
    return h

def job(name, priority, cores=1, memory=GB, frames="1-2"):
    spec = dict(show=show, name=name, priority=priority,
                layers=[dict(name="r", command="true", range=frames, cores=cores, memory=memory)])
    return one(q, "SELECT frameq.submit(%s)", json.dumps(spec))

def bulk(n, priority, cores, memory):
    """n one-frame jobs of one layer, submitted in one statement"""
    q("""SELECT frameq.submit(jsonb_build_object('show', %s, 'name', 'bulk' || i, 'priority', %s,
              'layers', jsonb_build_array(jsonb_build_object('name', 'r', 'command', 'true',
              'range', '1', 'cores', %s, 'memory', %s::bigint))))
           FROM generate_series(1, %s) i""", show, priority, cores, memory, n)

def one_reserve(h):
    """(jobs booked, index blocks read, index tuples returned) by one reserve(h, 1)"""
    c = connect()
    qq, _ = queries(c)
    qq("BEGIN")
    got = reserve(qq, h, 1)
    blocks, tuples = qq("SELECT pg_stat_get_xact_blocks_fetched('frameq.dispatch_queue_order'::regclass),"
                        "       pg_stat_get_xact_tuples_returned('frameq.dispatch_queue_order'::regclass)")[0]
    jobs = [one(qq, "SELECT job FROM frameq.frame WHERE id = %s", f) for p, f in got]
    qq("COMMIT")
    c.close()
    return jobs, blocks, tuples

def kill_bulk():
    q("SELECT frameq.kill_job(id, 'test') FROM frameq.job WHERE show = %s AND name LIKE 'bulk%%' AND state = 'active'",
      show_id)

# ---------------------------------------------------------------- memory
small = host("small", 16, 16 * GB)
bulk(2000, 10, 1, 64 * GB)
target = job("mem-target", 1, frames="1")
leaf = one(q, "SELECT pg_relation_size('frameq.dispatch_queue_order') / 8192")
jobs, blocks, tuples = one_reserve(small)
if jobs != [target]:
    fail("with 2,000 jobs of 64 GB layers ahead, a 16 GB host booked jobs %s, wanted [%s]" % (jobs, target))
elif blocks > 12:
    fail("the call read %d blocks of the queue index (%d pages in all), wanted at most 12" % (blocks, leaf))
else:
    ok("2,000 jobs of 64 GB ahead: the 16 GB host books the 1 GB frame reading %d index blocks of %d, %d tuples"
       % (blocks, leaf, tuples))
check_clean(q, "check() with 2,000 64 GB layers queued")
kill_bulk()

# ---------------------------------------------------------------- cores
bulk(2000, 10, 64, GB)
target = job("cores-target", 1, frames="1")
jobs, blocks, tuples = one_reserve(small)
if jobs != [target]:
    fail("with 2,000 jobs of 64-core layers ahead, a 16-core host booked jobs %s, wanted [%s]" % (jobs, target))
elif blocks > 12:
    fail("the call read %d blocks of the queue index, wanted at most 12" % blocks)
else:
    ok("2,000 jobs of 64 cores ahead: the 16-core host books the one-core frame reading %d index blocks, %d tuples"
       % (blocks, tuples))
kill_bulk()
q("SELECT frameq.kill_job(id, 'test') FROM frameq.job WHERE show = %s AND state = 'active'", show_id)

# ------------------------------------------------------ one policy order
# sizes in different classes, priorities interleaved; ids in submit order
order = [("a", 5, 1, GB), ("b", 9, 1, 64 * GB), ("c", 7, 4, 2 * GB), ("d", 9, 32, GB),
         ("e", 7, 1, 200 * GB), ("f", 2, 2, 3 * GB), ("g", 9, 1, GB)]
ids = {n: job("order-" + n, p, cores=c, memory=m, frames="1") for n, p, c, m in order}
want = [n for n, p, c, m in sorted(order, key=lambda o: (-o[1], ids[o[0]]))]
big = host("big", 256, 1024 * GB)
booked = []
for _ in order:
    jobs, _, _ = one_reserve(big)
    booked += [n for n in ids if ids[n] in jobs]
if booked != want:
    fail("a host with room for every class booked %s, wanted policy order %s" % (booked, want))
else:
    ok("a host with room for every class books across 5 classes in policy order: %s" % "".join(booked))
check_clean(q, "check() after booking across the classes")

# ----------------------------------------------- dispatch_class comes and goes
def streams():
    return q("SELECT mem_class, core_class, count(*) FROM frameq.dispatch_class WHERE show = %s"
             " GROUP BY 1, 2 ORDER BY 1, 2", show_id)

kill_bulk()
q("SELECT frameq.kill_job(id, 'test') FROM frameq.job WHERE show = %s AND state = 'active'", show_id)
# the queue's stale rows go at the next walk that meets them; then the worker forgets their streams
reserve(q, big, 1)
wait_for(lambda: streams() == [], 10, 0.2,
         "the worker to forget the streams left empty once every job of the show was killed")
ok("the worker forgets streams with no rows")
j = job("back", 3, memory=64 * GB)
if streams() != [(6, 0, 1)]:
    fail("a new 64 GB layer's stream is listed as %s, wanted memory class 6, cores class 0, once" % streams())
else:
    ok("a new row lists its stream again (64 GB: memory class 6)")
q("INSERT INTO frameq.dispatch_class SELECT show, tag, gpu, mem_class, core_class"
  "  FROM frameq.dispatch_class WHERE show = %s", show_id)
wait_for(lambda: streams() == [(6, 0, 1)], 10, 0.2, "the worker to remove a duplicate stream entry")
ok("the worker removes a duplicate stream entry")

# ---------------------------------------------------------------- check()
q("DELETE FROM frameq.dispatch_class WHERE show = %s", show_id)
bad = q("SELECT invariant, detail FROM frameq.check()")
if not any(i == "no waiting frame is passed over" and "dispatch_class does not list" in d for i, d in bad):
    fail("check() with a queue row whose stream is not listed reported %s" % bad)
else:
    ok("check() reports a queue row whose stream dispatch_class does not list")
q("INSERT INTO frameq.dispatch_class SELECT DISTINCT show, tag, gpu, mem_class, core_class"
  "  FROM frameq.dispatch_queue WHERE show = %s", show_id)
got = reserve(q, big, 1)
if len(got) != 1:
    fail("the big host booked %d frames of the 64 GB job, wanted 1" % len(got))
check_clean(q)
finish()
PY
