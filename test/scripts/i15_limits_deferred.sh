#!/usr/bin/env bash
# A job's limits on failure while another session holds the job's row
# (src/limits.c): a submitter's set_job() left open in its transaction.
#
# - Host B fails a task of job "flaky" (host_failure_limit 1): its
#   complete() answers 'accepted' within frameq.lock_wait, not 55P03, and
#   does not wait for the holder; the count and the block are written, and
#   marking the job is left to the worker (job_limit_check), which check()
#   accepts meanwhile.  While the holder stays, the worker's rounds leave
#   the job listed (its log says so); once it commits, the worker marks
#   the job and B gets none of its tasks.
# - Host B's task of job "doomed" (max_dead_frames 1, no retries) dies the
#   same way: the pause is left to the worker, which pauses the job once
#   the holder commits, with paused_reason saying why.
set -euo pipefail

# shellcheck source=worker_lib.bash
source "$(dirname "$0")/worker_lib.bash"
need_debs python3-psycopg2

restore() {
	psql -X -q -At -c "ALTER SYSTEM RESET frameq.lock_wait" -c "SELECT pg_reload_conf()" \
		>/dev/null 2>&1 || true
}
trap restore EXIT

$PY - <<'PY'
import os, random, time
import psycopg2
from fqtest import (attach, bail, check_clean, connect, create_farm, fail, finish, ok, queries,
                    register, reserve, set_and_reload, submit, wait_for, wait_for_worker)

db = connect()
q, q1 = queries(db)
set_and_reload(q, "frameq.lock_wait", "300ms", bail)
wait_for_worker(q)

sfx = "%d_%d" % (os.getpid(), random.randrange(1 << 30))
show = "ld_" + sfx
create_farm(q, show)
flaky = submit(q, show, "flaky", "1-10", priority=20, max_retries=5, host_failure_limit=1)
doomed = submit(q, show, "doomed", "1-10", priority=10, max_retries=0, max_dead_frames=1,
                host_failure_limit=0)
B = register(q, "ld_b_" + sfx, show, 4)
attach(q, B)


def held_complete(job, proc, label):
    """B reports proc failed while a submitter's open set_job() holds job's
    row; returns once the holder has committed."""
    holder = psycopg2.connect("")
    holder.autocommit = False
    hc = holder.cursor()
    hc.execute("SELECT frameq.set_job(%s, priority => %s)",
               (job, q1("SELECT priority FROM frameq.job WHERE id = %s", job)))
    t0 = time.monotonic()
    try:
        r = q1("SELECT frameq.complete(%s, %s, %s, %s, 1)", B["name"], B["token"], B["epoch"], proc)
        took = time.monotonic() - t0
        if r == "accepted" and took < 5:
            ok("%s: B's complete() is accepted in %.2f s while the job row is held" % (label, took))
        else:
            fail("%s: B's complete() answered %s after %.2f s" % (label, r, took))
    except psycopg2.Error as e:
        fail("%s: B's complete() failed with %s after %.2f s" % (label, e.pgcode, time.monotonic() - t0))
    listed = q("SELECT died FROM frameq.job_limit_check WHERE job = %s", job)
    if listed:
        ok("%s: the job is left to the worker (died: %s)" % (label, listed[0][0]))
    else:
        fail("%s: the job is not in job_limit_check" % label)
    check_clean(q, "%s: check() while the worker has yet to settle the job" % label)
    # a worker round that tried the job and left it listed: it says so in the log
    line = "job %s is still locked by another session; its limits are settled next round" % job
    wait_for(lambda: line in open(os.environ["FRAMEQ_LOG"], errors="replace").read(), 15, 0.1,
             "%s: no worker round tried the job within 15 s" % label)
    if q1("SELECT count(*) FROM frameq.job_limit_check WHERE job = %s", job) == 1:
        ok("%s: the worker tried the job and left it listed while the row is held" % label)
    else:
        fail("%s: the job left job_limit_check while its row was held" % label)
    holder.commit()
    holder.close()
    wait_for(lambda: q1("SELECT count(*) FROM frameq.job_limit_check WHERE job = %s", job) == 0,
             15, 0.1, "%s: the worker did not settle the job within 15 s of the holder's commit" % label)
    ok("%s: the worker settles the job once the holder has committed" % label)


(p1, f1), = reserve(q, B, 1)
if q1("SELECT job FROM frameq.proc WHERE id = %s", p1) != flaky:
    bail("setup: B did not book the flaky job")
held_complete(flaky, p1, "host block")
if q1("SELECT count(*) FROM frameq.job_host_blocks WHERE job = %s", flaky) == 1:
    ok("host block: B is blocked for the flaky job")
else:
    fail("host block: job_host_blocks does not list B")
if q1("SELECT host_blocks FROM frameq.job WHERE id = %s", flaky):
    ok("host block: the worker marked the job")
else:
    fail("host block: the job is not marked")
got = reserve(q, B, 1)
jobs = [q1("SELECT job FROM frameq.proc WHERE id = %s", p) for p, f in got]
if jobs == [doomed]:
    ok("host block: B now books the next job, not the flaky one")
else:
    bail("host block: B booked jobs %s (flaky %s, doomed %s)" % (jobs, flaky, doomed))
check_clean(q, "host block: check() after the worker settled")

(p2, f2), = got
held_complete(doomed, p2, "dead pause")
r = q("SELECT state, paused_reason FROM frameq.job_progress WHERE job = %s", doomed)
if r == [("paused", "max_dead_frames: 1 of its tasks are dead, the limit is 1")]:
    ok("dead pause: the worker paused the job, and job_progress says why")
else:
    fail("dead pause: the job is %s" % r)
check_clean(q, "dead pause: check() after the worker settled")

q("SELECT frameq.kill_job(%s, 'done')", flaky)
q("SELECT frameq.kill_job(%s, 'done')", doomed)
finish()
PY
