#!/usr/bin/env bash
# A submitter (a role outside frameq_admin) holds a row lock that a release
# needs and sits in its open transaction; the host's heartbeat still renews
# the lease within frameq.lock_wait (doc/security.md, "No stalls").
#
# Job J has one frame, running on host H as proc P; an admin has ordered P
# killed.  The submitter calls set_job(J) and leaves its transaction open,
# holding J's row.  H's heartbeat no longer lists P: confirming the kill
# releases P and, P holding J's last live frame, would finish J, which
# needs J's row.  With frameq.lock_wait = 300 ms the heartbeat must come
# back within 2 s with the lease renewed and the kill confirmed (the frame
# dead); whether J is finished is left to the background worker
# (frameq.job_finish_check), and check() is clean meanwhile.  Once the
# submitter commits, the worker finishes J within seconds.  Also: the
# submitter's open kill_frame on another running proc P2 (its row locked)
# does not stop H's heartbeat, and complete() of P2 gives up with 55P03
# after lock_wait instead of waiting; after the commit it is accepted.  On
# 0.1.0 the heartbeat waits for as long as the submitter likes.
set -euo pipefail

# shellcheck source=worker_lib.bash
source "$(dirname "$0")/worker_lib.bash"
need_debs python3-psycopg2

restore() {
	psql -X -q -At -c "ALTER SYSTEM RESET frameq.lock_wait" -c "SELECT pg_reload_conf()" >/dev/null 2>&1 || true
}
trap restore EXIT

$PY - <<'PY'
import os, random, time
import psycopg2
from fqtest import (bail, check_clean, connect, create_farm, fail, finish, heartbeat, host_with_frame, ok,
                    one, queries, set_and_reload, submit)

db = connect()
q, q1 = queries(db)
set_and_reload(q, "frameq.lock_wait", "300ms", bail)

sfx = "%d_%d" % (os.getpid(), random.randrange(1 << 30))
show = "sl_" + sfx
create_farm(q, show)
role = "sl_artist_" + sfx
q('CREATE ROLE "%s" LOGIN IN ROLE frameq_submit' % role)
q("SELECT frameq.grant_show(%s, %s)", show, role)
job = submit(q, show, "one", "1")
H = host_with_frame(q, "sl_h_" + sfx, show, 4)
job2 = submit(q, show, "two", "1")
q("SELECT * FROM frameq.reserve(%s, %s, %s, 1)", H["name"], H["token"], H["epoch"])
p2 = q1("SELECT id FROM frameq.proc WHERE job = %s", job2)
q("SELECT frameq.kill_frame(%s, 'operator says no')", H["frame"])

sub = psycopg2.connect("", user=role)
sub.autocommit = False
cur = sub.cursor()
cur.execute("SELECT frameq.set_job(%s, priority => 5)", (job,))
cur.execute("SELECT frameq.kill_frame(f.id, 'mine') FROM (SELECT %s::bigint AS id) f",
            (q1("SELECT frame FROM frameq.proc WHERE id = %s", p2),))

before = q1("SELECT last_renewal_at FROM frameq.host WHERE id = %s", H["id"])
t0 = time.monotonic()
kill = one(q, "SELECT kill FROM frameq.heartbeat(%s, %s, %s, ARRAY[%s]::bigint[])",
           H["name"], H["token"], H["epoch"], p2)
took = time.monotonic() - t0
if took > 2.0:
    fail("the heartbeat took %.2f s with a submitter holding its job's row" % took)
else:
    ok("the heartbeat came back in %.2f s though a submitter holds the job's row" % took)
after = q1("SELECT last_renewal_at FROM frameq.host WHERE id = %s", H["id"])
if after > before:
    ok("the lease was renewed")
else:
    fail("the lease was not renewed")
if kill == [] and q1("SELECT count(*) FROM frameq.proc WHERE id = %s", H["proc"]) == 0 and \
   q1("SELECT state FROM frameq.frame WHERE id = %s", H["frame"]) == "dead":
    ok("the kill was confirmed all the same: the proc is released and its frame dead")
else:
    fail("kill list %s; the proc or its frame did not move" % kill)
if q1("SELECT state FROM frameq.job WHERE id = %s", job) == "active" and \
   q1("SELECT count(*) FROM frameq.job_finish_check WHERE job = %s", job) == 1:
    ok("whether the job is finished is left to the worker, which cannot have the row yet")
else:
    fail("job %s, finish check rows %s" % (q1("SELECT state FROM frameq.job WHERE id = %s", job),
                                           q1("SELECT count(*) FROM frameq.job_finish_check WHERE job = %s", job)))
check_clean(q, "check() while the finish waits for the worker")

t0 = time.monotonic()
try:
    q("SELECT frameq.complete(%s, %s, %s, %s, 0)", H["name"], H["token"], H["epoch"], p2)
    fail("complete() of a proc whose row a submitter holds did not wait and did not fail")
except psycopg2.Error as e:
    took = time.monotonic() - t0
    if e.pgcode == "55P03" and took < 2.0:
        ok("complete() gave up with 55P03 after %.2f s instead of waiting for the submitter" % took)
    else:
        fail("complete() failed with %s after %.2f s" % (e.pgcode, took))

sub.commit()
sub.close()
deadline = time.monotonic() + 5
while time.monotonic() < deadline and q1("SELECT state FROM frameq.job WHERE id = %s", job) != "finished":
    time.sleep(0.05)
if q1("SELECT state FROM frameq.job WHERE id = %s", job) == "finished" and \
   q1("SELECT count(*) FROM frameq.job_finish_check") == 0:
    ok("once the submitter committed, the worker finished the job")
else:
    fail("the worker did not finish the job within 5 s of the submitter's commit")
if q1("SELECT frameq.complete(%s, %s, %s, %s, 0)", H["name"], H["token"], H["epoch"], p2) == "accepted" and \
   q1("SELECT end_state FROM frameq.run WHERE proc = %s", p2) == "dead":
    ok("and the report the submitter held up is accepted now, ending the frame as its kill order wanted")
else:
    fail("complete() of the other proc after the commit was not accepted as a kill")
check_clean(q)
q("SELECT frameq.revoke_show(%s, %s)", show, role)
q('DROP ROLE "%s"' % role)
finish()
PY
