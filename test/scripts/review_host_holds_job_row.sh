#!/usr/bin/env bash
# Review finding: a host's agent can stall another host's releases.
#
# Job J has two frames and no waiting ones: F1 runs on host A, F2 on host B,
# and an operator has ordered F2 killed.
# A's agent (its own login role, its own token) calls complete() for its
# proc in a transaction it leaves open.  complete() releases A's proc and,
# J having no waiting frames, takes J's row lock FOR NO KEY UPDATE to see
# whether J is finished (maybe_finish_job), and keeps it to the end of A's
# transaction.  From then on, until A's agent commits:
#   - B's complete() of its own proc fails with 55P03 after lock_wait, every
#     time (B cannot report its ended frame);
#   - if B goes silent, the worker cannot expire B's lease: releasing B's
#     killed proc ends F2, so it must see whether J is finished, which needs
#     J's row: B is skipped every round and F2 stays booked to a dead host.
# (A frame that goes back to waiting does not look at the job row: a lost
# host's running, not killed, procs are still released.)
# doc/security.md promises a host's agent can hold only its own host's lock
# and its own procs' rows, cannot touch another host's procs, and cannot
# stall the worker's rounds for other hosts.
set -euo pipefail

# shellcheck source=worker_lib.bash
source "$(dirname "$0")/worker_lib.bash"
need_debs python3-psycopg2

restore() {
	psql -X -q -At -c "ALTER SYSTEM RESET frameq.lock_wait" -c "ALTER SYSTEM RESET frameq.lease_ttl" \
		-c "SELECT pg_reload_conf()" >/dev/null 2>&1 || true
}
trap restore EXIT

$PY - <<'PY'
import os, random, time
import psycopg2
from fqtest import (attach, bail, connect, create_farm, fail, finish, ok, one, queries, register,
                    reserve, set_and_reload, submit, wait_for, wait_for_worker)

db = connect()
q, q1 = queries(db)
set_and_reload(q, "frameq.lock_wait", "300ms", bail)
wait_for_worker(q)

sfx = "%d_%d" % (os.getpid(), random.randrange(1 << 30))
show = "rj_" + sfx
create_farm(q, show)
job = submit(q, show, "two", "1-2")
A = register(q, "rj_a_" + sfx, show, 1)
B = register(q, "rj_b_" + sfx, show, 1)
attach(q, A); attach(q, B)
(pa, fa), = reserve(q, A, 1)
(pb, fb), = reserve(q, B, 1)

# an operator has ordered B's frame killed (B's agent has not confirmed yet)
q("SELECT frameq.kill_frame(%s, 'operator')", fb)

role_a = "fqh_rj_a_" + sfx
q('CREATE ROLE "%s" LOGIN IN ROLE frameq_agent' % role_a)

# host A's agent, in its own login, with its own token; its transaction stays open
a = psycopg2.connect("", user=role_a)
a.autocommit = False
ca = a.cursor()
ca.execute("SELECT frameq.complete(%s, %s, %s, %s, 0)", (A["name"], A["token"], A["epoch"], pa))
if ca.fetchone()[0] != "accepted":
    bail("setup: A's complete was not accepted")

# B reports its own finished frame
t0 = time.monotonic()
try:
    r = one(q, "SELECT frameq.complete(%s, %s, %s, %s, 0)", B["name"], B["token"], B["epoch"], pb)
    ok("host B's complete() answered %s in %.2f s while host A's transaction is open"
       % (r, time.monotonic() - t0))
except psycopg2.Error as e:
    fail("host B's complete() of its own proc failed with %s after %.2f s: host A's open "
         "transaction holds job %s's row (%s)" % (e.pgcode, time.monotonic() - t0, job,
                                                   e.pgerror.strip().splitlines()[0]))

# B goes silent: the worker must expire its lease and release its proc
B_live = q1("SELECT count(*) FROM frameq.proc WHERE id = %s", pb)
if B_live:
    # a short lease period, and leases counted from long enough ago
    set_and_reload(q, "frameq.lease_ttl", "2s", bail)
    wait_for(lambda: q1("SELECT leases_since + frameq.lease_period() < clock_timestamp()"
                        "  FROM frameq.worker_status()"), 60, 0.2, "the worker's leases_since stays recent")
    q("UPDATE frameq.host SET last_renewal_at = clock_timestamp() - interval '1 hour' WHERE id = %s",
      B["id"])
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and q1("SELECT count(*) FROM frameq.proc WHERE id = %s", pb):
        time.sleep(0.2)
    if q1("SELECT count(*) FROM frameq.proc WHERE id = %s", pb):
        fail("the worker did not release lost host B's proc in 15 s: host A's agent holds a row "
             "B's release needs")
    else:
        ok("the worker released lost host B's proc")

a.rollback()
a.close()
if B_live:
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and q1("SELECT count(*) FROM frameq.proc WHERE id = %s", pb):
        time.sleep(0.2)
    if q1("SELECT count(*) FROM frameq.proc WHERE id = %s", pb):
        bail("control: even after A's transaction ended the worker did not release B's proc")
    ok("control: once A's transaction ended, the worker released B's proc")
q('DROP ROLE "%s"' % role_a)
finish()
PY
