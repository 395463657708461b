#!/usr/bin/env bash
# pg_dump and pg_restore of a farm with live work, into a fresh cluster, by
# the procedure of doc/reference.md ("Backup and restore").
#
# The source is test/run's cluster (database frameq_test, frameq installed
# afresh): a farm with a finished job (one failed attempt, retried, and two
# successes in the run history), a live job in a capped folder under a
# limit (four procs on h1, one of them with a kill order, one on the silent
# host h4), a job at its job cap (two procs on h2), a job with only waiting
# frames, a host put down by an operator, a show granted to a role and to a
# role dropped since, and the metrics' totals (tally), counted just before
# the dump.
# Its roles are dumped with pg_dumpall --globals-only and the database with
# pg_dump -Fc, in a snapshot that the test reads too, so the rows compared
# are exactly the rows dumped.
#
# The target is a cluster of its own (port 54369, frameq.quarantine on, a
# lease period of 3 s * 1.05 + 1 s = 4.15 s), started with
# max_worker_processes = 0: the roles are loaded, the database created from
# template0, and the dump restored in one transaction with
# session_replication_role = replica.  Before the restart:
#   - every row of every frameq table but dispatch_queue and
#     dispatch_class (derived from the frames, and not dumped) equals the
#     source's (show_grant: but the dropped role's grant, which is not
#     dumped), and so do the sequences and ledger();
#   - check() reports nothing; the run secrets of the restored procs still
#     pass owns(); no worker has started and reserve books nothing.
# A restore without session_replication_role = replica fails and leaves
# nothing behind (the proc triggers would book the procs again).
# Then the target restarts with its worker, and so in the quarantine:
#   - it starts after the restore and lasts the period of the longest
#     lease the restored hosts hold (the source's lease_ttl); leases count
#     from it;
#   - every waiting layer of an active job is queued again;
#   - h1 and h2 heartbeat (h1 is told its kill order), reserve books
#     nothing, the silent host keeps its proc and epoch;
# and after it: h4 is expired (host_lost), h1 books exactly one frame of
# the limited job and the three waiting frames, h2 completes a proc and
# books one frame of its capped job, new ids follow the restored ones, and
# check() reports nothing.  The source database gets a fresh install back.
#
# Needs python3-psycopg2 (Debian).
set -euo pipefail
# shellcheck source=worker_lib.bash
source "$(dirname "$0")/worker_lib.bash"
cd "$(dirname "$0")/../.."
need_debs python3-psycopg2

# the source: test/run's cluster, as its environment names it
export SRC_HOST=$PGHOST SRC_PORT=$PGPORT SRC_DB=$PGDATABASE
work=${FRAMEQ_TEST_TMP:-/tmp}/dump_restore.$$
mkdir -p "$work"
chmod 755 "$work"
export DR_DUMP=$work/farm.dump DR_GLOBALS=$work/globals.sql

# the target: a cluster of our own, its workers off until the restore is in
own_cluster 54369 $'max_worker_processes = 0\nframeq.quarantine = on\nframeq.lease_ttl = 3s\nframeq.lease_margin = 1s\nframeq.clock_drift = 0.05\nlog_min_messages = log'
FRAMEQ_SKIP_EXTENSION=1 cluster_start >/dev/null

restore_source() {
	# whatever happened, later tests find a fresh install and no roles of ours
	psql -X -q -At -h "$SRC_HOST" -p "$SRC_PORT" -d "$SRC_DB" -v ON_ERROR_STOP=1 -c "SET client_min_messages = warning" \
		-c "DROP EXTENSION IF EXISTS frameq CASCADE" -c "CREATE EXTENSION frameq" \
		-c "DROP ROLE IF EXISTS dr_artists" -c "DROP ROLE IF EXISTS dr_gone" >/dev/null ||
		echo "not ok: could not reinstall the extension in the source database after the test"
	rm -rf -- "$work"
}
trap 'restore_source; cluster_stop' EXIT

status=0
$PY - <<'PY' || status=$?
import json, os, subprocess, time
import psycopg2
from fqtest import (attach, bail, check_clean, cluster_lib, connect, fail, finish, ok, queries, register,
                    wait_for, wait_for_worker)

PERIOD = 3.0 * 1.05 + 1.0

src = connect(host=os.environ["SRC_HOST"], port=os.environ["SRC_PORT"], dbname=os.environ["SRC_DB"])
sq, sq1 = queries(src)
wait_for_worker(sq)

def run(*cmd, env=None, check=True):
    r = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, **(env or {})))
    if check and r.returncode != 0:
        bail("%s failed (%d): %s" % (" ".join(cmd), r.returncode, r.stderr.strip()))
    return r

def spec(name, frames, **extra):
    layer = dict(name="l", command="render #IFRAME#", range=frames, cores=1)
    layer.update(extra.pop("layer", {}))
    return json.dumps(dict(show="dr", name=name, layers=[layer], **extra))

def reserve(q, h, n):
    got = q("SELECT proc, frame, job FROM frameq.reserve(%s, %s, %s, %s) ORDER BY frame",
            h["name"], h["token"], h["epoch"], n)
    h["procs"] += [p for p, f, j in got]
    return got

def complete(q, h, proc, status):
    r = q("SELECT frameq.complete(%s, %s, %s, %s, %s)", h["name"], h["token"], h["epoch"], proc, status)[0][0]
    h["procs"].remove(proc)
    return r

def heartbeat(q, h):
    return q("SELECT kill FROM frameq.heartbeat(%s, %s, %s, %s::bigint[])",
             h["name"], h["token"], h["epoch"], h["procs"])[0][0]

# ------------------------------------------------------------ the farm
# on a fresh install: nothing that earlier tests left goes into the dump
sq("DROP EXTENSION frameq CASCADE")
sq("CREATE EXTENSION frameq")
sq("DO $$BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'dr_artists') THEN"
   "  CREATE ROLE dr_artists NOLOGIN; END IF; END$$")
sq("DROP ROLE IF EXISTS dr_gone")
sq("CREATE ROLE dr_gone NOLOGIN")
sq("SELECT frameq.create_allocation('dr.pool')")
sq("SELECT frameq.create_show('dr')")
sq("SELECT frameq.set_subscription('dr', 'dr.pool', 100, 100)")
sq("SELECT frameq.create_folder('dr', 'fold', 6, NULL)")
sq("SELECT frameq.create_limit('dr.lic', 5)")
sq("SELECT frameq.grant_show('dr', 'dr_artists')")
sq("SELECT frameq.grant_show('dr', 'dr_gone')")
sq("DROP ROLE dr_gone")
H1 = register(sq, "dr-h1", "dr.pool", 8)
H2 = register(sq, "dr-h2", "dr.pool", 4)
H3 = register(sq, "dr-h3", "dr.pool", 4)
H4 = register(sq, "dr-h4", "dr.pool", 4)
for h in (H1, H2, H3, H4):
    attach(sq, h)

# a finished job: frame 1 fails once and is retried, frame 2 succeeds
jf = sq1("SELECT frameq.submit(%s)", spec("finished", "1-2", max_retries=1))
b = reserve(sq, H2, 2)
if len(b) != 2 or complete(sq, H2, b[0][0], 1) != "accepted" or complete(sq, H2, b[1][0], 0) != "accepted":
    bail("setup: the finished job's first two runs: %s" % b)
b = reserve(sq, H2, 2)
if len(b) != 1 or complete(sq, H2, b[0][0], 0) != "accepted":
    bail("setup: the finished job's retry: %s" % b)

# live work: job A in the folder (cap 6 cores) under the limit (5 running),
# job B at its job cap (2 cores), job C waiting
ja = sq1("SELECT frameq.submit(%s)", spec("A", "1-10", folder="fold", layer=dict(limits=["dr.lic"])))
jb = sq1("SELECT frameq.submit(%s)", spec("B", "1-4", max_cores=2))
a1 = reserve(sq, H1, 4)
a4 = reserve(sq, H4, 1)
b2 = reserve(sq, H2, 4)
jc = sq1("SELECT frameq.submit(%s)", spec("C", "1-3"))
if [j for p, f, j in a1 + a4] != [ja] * 5 or [j for p, f, j in b2] != [jb] * 2:
    bail("setup: h1 booked %s, h4 %s, h2 %s" % (a1, a4, b2))
killed = a1[0][0]
sq("SELECT frameq.kill_frame(%s, 'dump test')", a1[0][1])
sq("SELECT frameq.set_host_state('dr-h3', 'down')")
setup = sq("SELECT (SELECT state FROM frameq.job WHERE id = %s), (SELECT count(*) FROM frameq.run WHERE job = %s),"
           "       (SELECT state FROM frameq.proc WHERE id = %s), (SELECT state FROM frameq.host WHERE name = 'dr-h3'),"
           "       (SELECT count(*) FROM frameq.frame WHERE state = 'waiting' AND job IN (%s, %s, %s))",
           jf, jf, killed, ja, jb, jc)[0]
if setup != ("finished", 3, "killing", "down", 5 + 2 + 3):
    bail("setup: finished job, its runs, the kill order, h3, waiting frames = %s" % (setup,))
check_clean(sq, "check() on the source")
# the worker's counts for the metrics (tally), which it writes every 10 s:
# now, so that the dump holds them whenever a round falls (0.6.0 did not
# dump them, which the test saw only when a round fell in its setup)
sq("SELECT frameq._count_history(), frameq._count_live()")
secret = sq1("SELECT frameq._run_secret(%s)", a1[1][0])

# ------------------------------------------------------------ the dump
TABLES = [r[0] for r in sq("SELECT relname FROM pg_class WHERE relnamespace = 'frameq'::regnamespace"
                           " AND relkind = 'r' AND relname NOT IN ('dispatch_queue', 'dispatch_class')"
                           " ORDER BY 1")]

def snapshot(q):
    """every row of every table (show_grant: of roles that exist), the sequences, the ledger"""
    s = {}
    for t in TABLES:
        where = " WHERE EXISTS (SELECT FROM pg_roles r WHERE r.oid = t.role)" if t == "show_grant" else ""
        s[t] = [r[0] for r in q("SELECT to_jsonb(t)::text FROM frameq.%s t%s ORDER BY 1" % (t, where))]
    s["sequences"] = q("SELECT sequencename, last_value FROM pg_sequences WHERE schemaname = 'frameq' ORDER BY 1")
    s["ledger()"] = q("SELECT * FROM frameq.ledger() ORDER BY 1, 2, 3")
    return s

run("pg_dumpall", "--globals-only", "-h", os.environ["SRC_HOST"], "-p", os.environ["SRC_PORT"],
    "-f", os.environ["DR_GLOBALS"])
snap = psycopg2.connect(host=os.environ["SRC_HOST"], port=os.environ["SRC_PORT"], dbname=os.environ["SRC_DB"])
snap.set_session(isolation_level="REPEATABLE READ")
xq, xq1 = queries(snap)
snapshot_id = xq1("SELECT pg_export_snapshot()")
before = snapshot(xq)
grants = xq1("SELECT count(*) FROM frameq.show_grant")
run("pg_dump", "-Fc", "--snapshot", snapshot_id, "-h", os.environ["SRC_HOST"], "-p", os.environ["SRC_PORT"],
    "-f", os.environ["DR_DUMP"], os.environ["SRC_DB"])
snap.rollback()
if (grants != 2 or len(before["show_grant"]) != 1 or len(before["proc"]) != 7 or len(before["run"]) != 10
        or not before["tally"]):
    bail("setup: %d grants (%d of live roles), %d procs, %d runs, %d tally rows"
         % (grants, len(before["show_grant"]), len(before["proc"]), len(before["run"]), len(before["tally"])))
ok("dumped: %s" % ", ".join("%s %d" % (t, len(before[t])) for t in TABLES))

# ------------------------------------------------------------ the restore
run("psql", "-X", "-q", "-d", "postgres", "-f", os.environ["DR_GLOBALS"], check=False)   # postgres exists already
run("psql", "-X", "-q", "-d", "postgres", "-v", "ON_ERROR_STOP=1",
    "-c", "DROP DATABASE frameq_test", "-c", "CREATE DATABASE frameq_test TEMPLATE template0")

# without session_replication_role = replica the proc triggers book the procs again: refused, nothing left
r = run("pg_restore", "--single-transaction", "--exit-on-error", "-d", "frameq_test", os.environ["DR_DUMP"],
        check=False)
tq, tq1 = queries(connect())
if r.returncode == 0:
    fail("a restore without session_replication_role = replica succeeded")
elif tq1("SELECT count(*) FROM pg_extension WHERE extname = 'frameq'") != 0:
    fail("the failed restore left the extension behind")
else:
    ok("a restore with the proc triggers on fails and leaves nothing: %s"
       % [l for l in r.stderr.splitlines() if "ERROR" in l][:1])

t0 = tq1("SELECT clock_timestamp()")
run("pg_restore", "--single-transaction", "--exit-on-error", "-d", "frameq_test", os.environ["DR_DUMP"],
    env=dict(PGOPTIONS="-c session_replication_role=replica"))
tq, tq1 = queries(connect())
after = snapshot(tq)
for k in before:
    if before[k] != after[k]:
        gone = [r for r in before[k] if r not in after[k]]
        new = [r for r in after[k] if r not in before[k]]
        fail("%s differs after the restore: source only %s; restored only %s" % (k, gone[:3], new[:3]))
    else:
        ok("%s: all %d rows restored as they were" % (k, len(before[k])))
if tq1("SELECT count(*) FROM frameq.show_grant") != 1 or tq1("SELECT role::text FROM frameq.show_grant") != "dr_artists":
    fail("restored grants: %s" % tq("SELECT show, role::text FROM frameq.show_grant"))
problems = tq("SELECT invariant, detail FROM frameq.check()")
if problems:
    fail("check() after the restore: %s" % problems)
else:
    ok("check() reports nothing after the restore")
if tq1("SELECT frameq.owns(%s, %s)", a1[1][0], secret) is not True:
    fail("the run secret of a restored running proc does not pass owns()")
else:
    ok("the run secret of a restored running proc passes owns()")
st = tq("SELECT started FROM frameq.worker_status()")[0]
got = reserve(tq, H1, 4)
if st != (False,) or got:
    fail("before the restart: worker_status().started %s, reserve booked %s" % (st, got))
else:
    ok("no worker has started and reserve books nothing before the restart")

# ------------------------------------------------------------ the restart: the quarantine
with open(os.path.join(os.environ["FRAMEQ_PGDATA"], "postgresql.conf"), "a") as f:
    f.write("max_worker_processes = 8\n")
cluster_lib("cluster_restart")
tq, tq1 = queries(connect())
wait_for(lambda: tq1("SELECT started FROM frameq.worker_status()"), 20, 0.05, "no frameq worker after the restart")
# the restored hosts hold the leases the source granted (its lease_ttl, 30 s
# by default, not the target's 3 s): the quarantine covers the longest,
# which the worker reads in its first round
QPERIOD = max(PERIOD, tq1("SELECT max(extract(epoch FROM lease_granted))::float8 FROM frameq.host"
                          " WHERE lease_expires_at IS NOT NULL") * 1.05 + 1.0)
wait_for(lambda: tq1("SELECT quarantine_until - quarantine_start >= make_interval(secs => %s)"
                     "  FROM frameq.worker_status()", QPERIOD - 0.001), 10, 0.05,
         "the quarantine was not stretched to the restored leases' %.2f s" % QPERIOD)
qstart, quntil, since, qlen = tq("SELECT quarantine_start, quarantine_until, leases_since,"
                                 "       extract(epoch FROM quarantine_until - quarantine_start)::float8"
                                 "  FROM frameq.worker_status()")[0]
if abs(qlen - QPERIOD) > 0.001 or since != qstart or not tq1("SELECT %s::timestamptz > %s::timestamptz", qstart, t0):
    fail("quarantine %s .. %s (%.3f s), leases since %s, restore began %s" % (qstart, quntil, qlen, since, t0))
else:
    ok("the restored farm starts in a %.2f s quarantine (the leases it holds), leases counted from its start"
       % qlen)

def in_quarantine():
    return tq1("SELECT clock_timestamp() < %s::timestamptz", quntil)

kill1 = heartbeat(tq, H1)
kill2 = heartbeat(tq, H2)
got = reserve(tq, H1, 4)
still_in = in_quarantine()
if kill1 != [killed] or kill2:
    fail("heartbeats in the quarantine: h1 told %s, h2 told %s; wanted [%d] and nothing" % (kill1, kill2, killed))
if got:
    fail("reserve booked %s in the quarantine" % got)
h4 = tq("SELECT state, epoch, (SELECT count(*) FROM frameq.proc WHERE host = h.id) FROM frameq.host h WHERE id = %s",
        H4["id"])[0]
if h4 != ("up", H4["epoch"], 1):
    fail("the silent host in the quarantine: %s" % (h4,))
if not still_in:
    fail("the checks in the quarantine took longer than the quarantine")
else:
    ok("in the quarantine: heartbeats accepted (h1 told its kill order), nothing booked, the silent host holds")

def beat():
    """h1 and h2 keep their leases (their agents are alive); h4 is silent"""
    heartbeat(tq, H1)
    heartbeat(tq, H2)
    return True

# every waiting layer is queued again, by the worker's requeue after its ledger rebuild
wait_for(lambda: beat() and not tq1("SELECT frameq._requeue_pending()"), 10, 0.05,
         "the requeue after the rebuild never ran")
unqueued = tq1("SELECT count(DISTINCT f.layer) FROM frameq.frame f JOIN frameq.job j ON j.id = f.job"
               " WHERE f.state = 'waiting' AND j.state = 'active'"
               "   AND NOT EXISTS (SELECT FROM frameq.dispatch_queue q WHERE q.layer = f.layer)")
queued = tq1("SELECT count(DISTINCT layer) FROM frameq.dispatch_queue")
unlisted = tq1("SELECT count(*) FROM frameq.dispatch_queue q WHERE NOT EXISTS"
               " (SELECT FROM frameq.dispatch_class c WHERE (c.show, c.tag, c.gpu, c.mem_class, c.core_class)"
               "                                          = (q.show, q.tag, q.gpu, q.mem_class, q.core_class))")
if unqueued or queued != 3 or unlisted:
    fail("dispatch queue after the restart: %d layers queued, %d waiting layers not, %d rows in unlisted streams"
         % (queued, unqueued, unlisted))
else:
    ok("the dispatch queue holds the three waiting layers again, in listed streams")

# after the quarantine: the silent host goes, the others book
deadline = time.monotonic() + QPERIOD + 5
while tq1("SELECT state FROM frameq.host WHERE id = %s", H4["id"]) == "up":
    if time.monotonic() > deadline:
        bail("the silent host was not expired after the quarantine")
    beat()
    time.sleep(0.3)
if in_quarantine():
    fail("the silent host was expired in the quarantine")
lost = tq("SELECT r.reason, f.state FROM frameq.run r JOIN frameq.frame f ON f.id = r.frame WHERE r.proc = %s",
          a4[0][0])
if lost != [("host_lost", "waiting")]:
    fail("the silent host's run and frame after its expiry: %s" % lost)
beat()
got = reserve(tq, H1, 16)
jobs = sorted(j for p, f, j in got)
if jobs != sorted([ja, jc, jc, jc]):
    fail("after the quarantine h1 booked frames of jobs %s; wanted one of A (%d, its limit) and C's three (%d)"
         % (jobs, ja, jc))
else:
    ok("after the quarantine h1 books one frame of the limited job and the three waiting ones")
if complete(tq, H2, b2[0][0], 0) != "accepted":
    fail("complete of a restored proc was not accepted")
got = reserve(tq, H2, 16)
if [j for p, f, j in got] != [jb]:
    fail("h2 booked %s after a completion, wanted one frame of its capped job %d" % (got, jb))
else:
    ok("a restored proc completes, and its capped job books one frame in its place")
newjob = tq1("SELECT frameq.submit(%s)", spec("D", "1"))
if newjob != jc + 1:
    fail("a new job got id %s after the restore, wanted %d" % (newjob, jc + 1))
check_clean(tq, "check() after booking on the restored farm")
finish()
PY
if [[ $status -ne 0 ]]; then
	echo "--- frameq lines of the target's server log ---"
	grep -E 'frameq|FATAL|PANIC|ERROR' "$FRAMEQ_LOG" | tail -n 30
fi
exit $status
