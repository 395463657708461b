#!/usr/bin/env bash
# Review finding: after a server start, a submitter stalls every host's
# bookings and releases, of every show, for as long as it keeps a
# transaction open.
#
# After a start the caps ledger is invalid until some backend rebuilds it;
# the rebuild takes ShareRowExclusiveLock on frameq.proc and waits for
# every transaction that holds RowExclusiveLock on it.  Only INSERT and
# DELETE of procs rebuild first (the statement trigger); an UPDATE does not.
# So a frameq_submit member that, right after the start, calls
# kill_frame() on a running frame of its own show (an UPDATE of the proc)
# and leaves its transaction open holds RowExclusiveLock on frameq.proc
# with the ledger still invalid.  Then:
#   - host B (another show) calls reserve(): the ledger rebuild waits for
#     the submitter without any bound (reserve() sets no lock_timeout;
#     doc/security.md: "Bookings never wait"), while holding B's host lock;
#   - host B's complete() of its own proc (another show) fails 55P03: its
#     DELETE must rebuild the ledger first.
# doc/security.md: a submitter "cannot delay anything of a show it was not
# granted"; "No role without frameq_admin can stall frameq".
set -euo pipefail

# shellcheck source=worker_lib.bash
source "$(dirname "$0")/worker_lib.bash"
cd "$(dirname "$0")/../.."
need_debs python3-psycopg2

own_cluster 54406 $'frameq.quarantine = off\nframeq.lease_ttl = 30s\nframeq.lock_wait = 500ms'
cluster_start >/dev/null

status=0
$PY - <<'PY' || status=$?
import time
import psycopg2
from fqtest import (attach, bail, cluster_lib, create_farm, fail, finish, ok, register, reserve, submit)

def conn(**kw):
    c = psycopg2.connect("", **kw)
    c.autocommit = True
    return c

def queries(c):
    def q(sql, *args):
        with c.cursor() as cur:
            cur.execute(sql, args)
            return cur.fetchall() if cur.description else None
    return q

db = conn()
q = queries(db)
create_farm(q, "s1")                      # the submitter's show
q("SELECT frameq.create_show('s2')")      # someone else's show, same allocation
q("SELECT frameq.set_subscription('s2', 's1', 100, 100)")
q("CREATE ROLE rv_artist LOGIN IN ROLE frameq_submit")
q("SELECT frameq.grant_show('s1', 'rv_artist')")
j1 = submit(q, "s1", "mine", "1")
A = register(q, "rv-a", "s1", 1); attach(q, A)
(pa, fa), = reserve(q, A, 1)
j2 = submit(q, "s2", "theirs", "1-3")
B = register(q, "rv-b", "s1", 1); attach(q, B)
(pb, fb), = reserve(q, B, 1)
db.close()

cluster_lib("cluster_restart")            # maintenance, a crash: any start

# the submitter, first in after the start
sub = psycopg2.connect("", user="rv_artist")
sub.autocommit = False
sc = sub.cursor()
sc.execute("SELECT frameq.kill_frame(%s, 'mine to kill')", (fa,))

db = conn()
q = queries(db)

# (frameq.quarantine is off here only to be quick: with it on, the window
# is the whole quarantine, and the open transaction outlasts it)
# host B, of the other show, books
agent = conn()
qa = queries(agent)
qa("SET statement_timeout = '5s'")
t0 = time.monotonic()
try:
    n = len(qa("SELECT * FROM frameq.reserve(%s, %s, %s, 1)", B["name"], B["token"], B["epoch"]))
    took = time.monotonic() - t0
    if took < 2.0:
        ok("host B's reserve() came back in %.2f s (%d booked)" % (took, n))
    else:
        fail("host B's reserve() took %.2f s" % took)
except psycopg2.Error as e:
    fail("host B's reserve() was still waiting after %.2f s (%s): it waits for the submitter's open "
         "transaction without bound" % (time.monotonic() - t0, e.pgcode))

t0 = time.monotonic()
try:
    r = qa("SELECT frameq.complete(%s, %s, %s, %s, 0)", B["name"], B["token"], B["epoch"], pb)[0][0]
    ok("host B's complete() of its own proc (show s2) answered %s" % r)
except psycopg2.Error as e:
    fail("host B's complete() of its own proc of show s2 failed with %s after %.2f s, because a "
         "submitter of show s1 has an open transaction" % (e.pgcode, time.monotonic() - t0))

sub.rollback()
sub.close()
try:
    r = qa("SELECT frameq.complete(%s, %s, %s, %s, 0)", B["name"], B["token"], B["epoch"], pb)[0][0]
    ok("control: once the submitter's transaction ended, B's complete() answered %s" % r)
except psycopg2.Error as e:
    fail("control: B's complete() still fails (%s)" % e.pgcode)
finish()
PY
cluster_stop >/dev/null 2>&1 || true
exit $status
