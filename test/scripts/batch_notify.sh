#!/usr/bin/env bash
# A batch of reports and the booking of the room they freed, in one
# transaction (the agent's path): every release is announced on
# frameq_release, one notification per released proc, and only when the
# transaction commits; a stale element of the batch announces nothing; a
# batch rolled back announces nothing and leaves the procs running.
set -euo pipefail

# shellcheck source=worker_lib.bash
source "$(dirname "$0")/worker_lib.bash"
need_debs python3-psycopg2

$PY - <<'PY'
import json, os, random, time
from fqtest import (Listener, attach, check_clean, connect, create_farm, fail, finish, ok,
                    one, queries, register, reserve, submit, wait_for_worker)

db = connect()
q, q1 = queries(db)
wait_for_worker(q)
sfx = "%d_%d" % (os.getpid(), random.randrange(1 << 30))
show = "bn_" + sfx
create_farm(q, show)
h = register(q, "bn_h_" + sfx, show, 4)
attach(q, h)
job = submit(q, show, "bn_" + sfx, "1-12")
first = [p for p, f in reserve(q, h, 4)]
if len(first) != 4:
    fail("setup: booked %d, want 4" % len(first))
L = Listener("frameq_release")

def released(wait):
    """proc ids announced over the next `wait` seconds, with their states"""
    start = len(L.got)
    L.pump_until(time.monotonic() + wait)
    return sorted((json.loads(p)["proc"], json.loads(p)["state"]) for _, c, p in L.got[start:])

agent = connect()
agent.autocommit = False
cur = agent.cursor()

def batch(procs):
    cur.execute("SELECT frameq.complete_many(%s, %s, %s, %s::bigint[], %s::int[])",
                (h["name"], h["token"], h["epoch"], procs, [0] * len(procs)))
    answers = cur.fetchone()[0]
    cur.execute("SELECT proc FROM frameq.reserve(%s, %s, %s, 4)", (h["name"], h["token"], h["epoch"]))
    return answers, [r[0] for r in cur.fetchall()]

# rolled back: nothing announced, the procs go on
answers, booked = batch(first)
agent.rollback()
got = released(0.5)
running = one(q, "SELECT count(*) FROM frameq.proc WHERE id = ANY (%s::bigint[])", first)
if answers == ["accepted"] * 4 and len(booked) == 4 and got == [] and running == 4:
    ok("a batch rolled back: 4 accepted and 4 booked inside it, nothing announced, the 4 procs still run")
else:
    fail("rolled back: answers %s, booked %d, heard %s, %d still running" % (answers, len(booked), got, running))

# committed: one notification per release, at the commit, none before
answers, booked = batch(first + [123456789])
before = released(0.5)
agent.commit()
after = released(1.0)
want = sorted((p, "succeeded") for p in first)
if answers == ["accepted"] * 4 + ["stale"] and before == [] and after == want:
    ok("a batch of 4 and a stale element: nothing heard before the commit, then exactly the 4 releases")
else:
    fail("committed: answers %s, heard %s before the commit and %s after (want %s)"
         % (answers, before, after, want))
if len(booked) == 4 and one(q, "SELECT count(*) FROM frameq.proc WHERE id = ANY (%s::bigint[])", booked) == 4:
    ok("and the same transaction booked 4 new procs into the room they freed")
else:
    fail("booked %s in the batch's transaction" % booked)
done = one(q, "SELECT count(*) FROM frameq.frame WHERE job = %s AND state = 'succeeded'", job)
if done != 4:
    fail("%d frames succeeded, want 4" % done)
agent.commit()

# a batch over two jobs that ends the last tasks of one: that job finished
# in the batch's transaction, every release announced once, at the commit
last = submit(q, show, "bn_last_" + sfx, "1-2", priority=90)
answers, swapped = batch(booked[:2])
agent.commit()
ours = one(q, "SELECT array_agg(id ORDER BY id) FROM frameq.proc WHERE job = %s", last)
if answers != ["accepted"] * 2 or len(ours or []) != 2 or not set(ours) <= set(swapped):
    fail("setup: answers %s, booked %s, the last job's procs %s" % (answers, swapped, ours))
released(0.5)
procs = ours + booked[2:3]
answers, _ = batch(procs)
before = released(0.3)
state = one(q, "SELECT state FROM frameq.job WHERE id = %s", last)
agent.commit()
after = released(1.0)
want = sorted((p, "succeeded") for p in procs)
ended = q("SELECT state, finished_at IS NOT NULL FROM frameq.job WHERE id IN (%s, %s) ORDER BY id = %s DESC",
          last, job, last)
if answers == ["accepted"] * 3 and before == [] and after == want and state == "active" and \
        ended == [("finished", True), ("active", False)]:
    ok("a batch ending a job's last 2 tasks and 1 of another job's: that job alone finished, at the commit,"
       " and the 3 releases heard once each")
else:
    fail("two jobs: answers %s, heard %s before and %s after the commit (want %s), the job %s before"
         " the commit, after it %s" % (answers, before, after, want, state, ended))
check_clean(q)
finish()
PY
