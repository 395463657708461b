#!/usr/bin/env bash
# frameq.retention against the real background worker: set on a reload, the
# worker starts pruning at once, a batch of at most 10 jobs a round, and
# removes every job that ended longer ago than the retention, and only
# those:
#   - 12 jobs finished two days ago (more than one batch) go, with their
#     layers, frames and runs; frameq_jobs_pruned_total grows by 12 and the
#     runs they had still count in frameq_runs_ended_total once the worker
#     counts again;
#   - a job finished now, and a job killed two days ago whose render is
#     still a kill order (a live proc), stay;
#   - with the retention reset to 0 nothing more goes; check() is clean.
set -euo pipefail

# shellcheck source=worker_lib.bash
source "$(dirname "$0")/worker_lib.bash"
need_debs python3-psycopg2

$PY - <<'PY'
import json, os, random, time
from fqtest import (attach, bail, check_clean, connect, create_farm, fail, finish, ok, one,
                    queries, register, reserve, set_and_reload, submit, wait_for, wait_for_worker)

db = connect()
q, q1 = queries(db)
wait_for_worker(q)
sfx = "%d_%d" % (os.getpid(), random.randrange(1 << 30))
show = "wr_" + sfx
create_farm(q, show)
h = register(q, "wr_h_" + sfx, show, 64)
attach(q, h)

def metric(name, **labels):
    return q1("SELECT coalesce(sum(value), 0) FROM frameq.metrics WHERE name = %s AND labels @> %s::jsonb",
              name, json.dumps(labels))

def run_all():
    for p, f in reserve(q, h, 100):
        q("SELECT frameq.complete(%s, %s, %s, %s, 0)", h["name"], h["token"], h["epoch"], p)
    h["procs"] = []

old = [submit(q, show, "old%d" % i, "1") for i in range(12)]
run_all()
young = submit(q, show, "young", "1")
run_all()
busy = submit(q, show, "busy", "1", priority=10)
if len(reserve(q, h, 1)) != 1:
    bail("setup: busy's frame was not booked")
q("SELECT frameq.kill_job(%s, 'stop')", busy)
q("UPDATE frameq.job SET finished_at = clock_timestamp() - interval '2 days' WHERE id = ANY (%s)",
  old + [busy])
states = q1("SELECT string_agg(state, ',' ORDER BY id) FROM frameq.job WHERE id = ANY (%s)", old + [young, busy])
if states != ",".join(["finished"] * 13 + ["killed"]):
    bail("setup: job states are %s" % states)
q("SELECT frameq._count_history()")
pruned0 = metric("frameq_jobs_pruned_total")
completed0 = metric("frameq_runs_ended_total", reason="completed")

set_and_reload(q, "frameq.retention", "1d", report=bail)
wait_for(lambda: q1("SELECT count(*) FROM frameq.job WHERE id = ANY (%s)", old) == 0, 10, 0.05,
         "the worker did not prune the 12 old jobs within 10 s")
ok("the worker pruned the 12 jobs that ended two days ago")
left = q1("SELECT count(*) FROM frameq.frame WHERE job = ANY (%s)", old) + \
       q1("SELECT count(*) FROM frameq.layer WHERE job = ANY (%s)", old) + \
       q1("SELECT count(*) FROM frameq.run WHERE job = ANY (%s)", old)
(ok if left == 0 else fail)("their layers, frames and runs are gone (%d rows left)" % left)
kept = q1("SELECT string_agg(name, ',' ORDER BY name) FROM frameq.job WHERE id = ANY (%s)", [young, busy])
(ok if kept == "busy,young" else fail)("the young job and the killed one with a live proc stay (%s)" % kept)
d = metric("frameq_jobs_pruned_total") - pruned0
(ok if d == 12 else fail)("frameq_jobs_pruned_total grew by 12 (%d)" % d)
q("SELECT frameq._count_history()")
c = metric("frameq_runs_ended_total", reason="completed")
(ok if c == completed0 else fail)("frameq_runs_ended_total{reason=completed} kept the pruned runs (%d, was %d)"
                                  % (c, completed0))

set_and_reload(q, "frameq.retention", "0", report=bail)
q("UPDATE frameq.job SET finished_at = clock_timestamp() - interval '2 days' WHERE id = %s", young)
# an absence: checked over 3.5 s, three rounds of the worker or more
before = q1("SELECT count(*) FROM frameq.job WHERE id = %s", young)
time.sleep(3.5)
after = q1("SELECT count(*) FROM frameq.job WHERE id = %s", young)
(ok if before == after == 1 else fail)("with frameq.retention = 0 the worker prunes nothing")
q("ALTER SYSTEM RESET frameq.retention")
q("SELECT pg_reload_conf()")
check_clean(q)
finish()
PY
