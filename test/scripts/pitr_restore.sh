#!/usr/bin/env bash
# A restore to an earlier point in time (PITR) comes up in the quarantine,
# like a promoted standby, and no frame runs twice when the hosts that ran
# work after that point report to it (doc/reliability.md, "What a restore
# loses").
#
# The primary (port 54700, its WAL archived with archive_command; lease
# 20 s, margin 1 s, drift 5 %: a lease period of 22 s; the test
# clusters' frameq.quarantine = off, as its own start is not under test)
# has a base backup taken (pg_basebackup), then four hosts do some work,
# the recovery target T (a time and an LSN) is read, and they do more:
#     reports    before T books frames 1 and 2; after T completes 1 (it
#                succeeds), books 4 and keeps rendering it, books and
#                completes 5 (it succeeds);
#     silent     before T books 3; after T completes it and books 6, which
#                it keeps rendering; it never reaches a restore;
#     restarted  after T its agent restarts (attach: its epoch moves on)
#                and books 7, which it keeps rendering;
#     spare      16 cores, idle: it books what a restore hands out.
# (The frame numbers are the order of booking; the test names them by role.)
# The hosts are agents reduced to their calls, with the agent's rules for
# their renders' lives (agent/README.md): a render may live until its
# supervisor's lease deadline (the send time of the last successful renewal
# + lease_ttl - kill grace) and a kill grace (5 s) after it, or a kill
# grace after a kill order or an FQ001/FQ002 answer (the agent then kills
# all and attaches again); the test finds a double run where a render
# started before another render of its frame surely, or possibly, ended.
#
# Three restores of the base backup recover from the archive and pause at
# T while the primary still runs: "off" (54701) to the LSN (exclusive),
# with frameq.quarantine = off; "short" (54703) and "on" (54702) to the
# time, with frameq.quarantine = on (the default), "short" with a
# frameq.lease_ttl of 2 s.  Paused, each holds the farm exactly as it was
# at T (frames, procs, host epochs), no frameq worker runs,
# worker_status().started is false and reserve fails read-only (25006).
# The hosts renew their leases on the primary a last time, and it stops.
# Each restore then goes on from the hosts' state at that moment:
#
# "off", a negative control, is promoted (pg_promote()); the spare host
# books the 9 frames waiting at T, 3 of which (4, 6 and 7) are still
# rendering on their hosts: the check finds exactly those 3 double runs,
# which it must (the check can fail, and a restore without the quarantine
# runs work twice).
#
# "short" is resumed (pg_wal_replay_resume()) with its lease_ttl of 2 s:
# its quarantine is not its own lease period (3.1 s) but that of the
# longest lease the hosts held at T (20 s: host.lease_granted), the same
# 22 s as "on"'s, and the spare host books nothing at its start.  (Before
# frameq recorded the leases it granted, the same 3 frames ran twice here.)
#
# "on" ends its recovery with pg_wal_replay_resume(): the quarantine
# starts then (after the resume, not at the server's start), for one lease
# period.  In it:
#   - the spare host books nothing (before anyone reports, and every 0.2 s);
#   - the reporting host's heartbeat (before its render of 4 was past its
#     lease deadline) is told to kill exactly that proc (unknown to the
#     restore), and releases frame 1 (lost_by_agent: it ended after T);
#   - the restarted host's heartbeat fails FQ001 (its epoch is ahead of the
#     restore's); it kills its render and attaches again, getting the same
#     epoch number it had after T; its report of the render it killed then
#     answers "stale" and changes nothing (run tokens are random);
#   - the silent host keeps its proc, its frame and its epoch.
# After it, the silent host is expired (host_lost, within 1.5 s of the
# end), the spare host books the 11 waiting frames (1, 3 to 7 and 5 more),
# none before the quarantine's end and none while another render of it may
# still live; frame 2 completes on the reporting host; check() is clean.
# Then the servers, the archive and the backup are removed.
#
# Needs python3-psycopg2 (Debian).
set -euo pipefail
# shellcheck source=worker_lib.bash
source "$(dirname "$0")/worker_lib.bash"
cd "$(dirname "$0")/../.."
need_debs python3-psycopg2

# the WAL archive, the base backup and the two restores
PITR_DIR=$(mktemp -d /tmp/frameq-pitr-XXXXXX)
export PITR_DIR
mkdir "$PITR_DIR/archive"
chown -R postgres: "$PITR_DIR"
chmod 700 "$PITR_DIR"

conf=$(printf "archive_mode = on\narchive_command = 'test ! -f %s/archive/%%f && cp %%p %s/archive/%%f'\n%s" \
	"$PITR_DIR" "$PITR_DIR" \
	$'frameq.lease_ttl = 20s\nframeq.lease_margin = 1s\nframeq.clock_drift = 0.05\nlog_min_messages = log')
own_cluster 54700 "$conf"

restore_ctl() {
	local d=$PITR_DIR/$1
	shift
	(cd "$d" && runuser -u postgres -- "$FRAMEQ_PGBIN/pg_ctl" -D "$d/data" -l "$d/server.log" "$@")
}

# make_restore NAME PORT SETTING TARGET QUARANTINE [CONF]: the base backup,
# recovering from the archive up to TARGET (SETTING: recovery_target_time or
# recovery_target_lsn, the latter exclusive), where it pauses; started
make_restore() {
	local d=$PITR_DIR/$1
	mkdir "$d"
	cp -a "$PITR_DIR/base" "$d/data"
	cat >>"$d/data/postgresql.auto.conf" <<CONF
# ---- restore "$1" of pitr_restore.sh ----
port = $2
unix_socket_directories = '$d'
archive_mode = off
restore_command = 'cp $PITR_DIR/archive/%f %p'
$3 = '$4'
recovery_target_inclusive = $([[ $3 == recovery_target_lsn ]] && echo off || echo on)
recovery_target_action = 'pause'
frameq.quarantine = $5
${6:-}
CONF
	touch "$d/data/recovery.signal"
	chown -R postgres: "$d"
	restore_ctl "$1" -w start >/dev/null
}
export -f restore_ctl make_restore

cleanup() {
	local r
	for r in off short on; do
		if [[ -f $PITR_DIR/$r/data/postmaster.pid ]]; then
			restore_ctl "$r" -w -m immediate stop >/dev/null 2>&1 || true
		fi
	done
	cluster_stop
	if [[ $PITR_DIR == /tmp/frameq-pitr-* ]]; then
		rm -rf -- "$PITR_DIR"
	fi
}
cluster_start >/dev/null || { rm -rf -- "$PITR_DIR"; exit 1; }
trap cleanup EXIT             # after cluster_start, which sets a trap of its own

status=0
$PY - <<'PY' || status=$?
import copy, os, shlex, time
import psycopg2
import fqtest
from fqtest import bail, check_clean, cluster_lib, create_farm, fail, finish, ok, queries, register, submit, wait_for

TTL = 20.0
PERIOD = TTL * 1.05 + 1.0
GRACE = 5.0             # the agent's default --kill-grace (at most a third of the ttl)
PITR = os.environ["PITR_DIR"]


class Render:
    """A render of a booking, its life bounded by the agent's rules (monotonic
    seconds): it starts when reserve returns; once it is being ended, it is
    dead no earlier than ends_from (its SIGTERM) and no later than dead_by."""
    def __init__(self, proc, frame, start):
        self.proc, self.frame, self.start = proc, frame, start
        self.ends_from = self.dead_by = None

    def end(self, first, last):
        if self.ends_from is None:
            self.ends_from, self.dead_by = first, last


class Agent:
    """A host agent reduced to its calls and its renders' lives."""
    def __init__(self, h):
        self.name, self.token, self.id = h["name"], h["token"], h["id"]
        self.epoch = None
        self.renewed = None         # send time of the last successful renewal
        self.renders = {}

    def settle(self, now):
        """The supervisors end their renders once the lease deadline has passed."""
        if self.renewed is not None and now >= self.renewed + TTL - GRACE:
            deadline = self.renewed + TTL - GRACE
            for r in self.renders.values():
                r.end(deadline, deadline + GRACE)

    def may_live(self, now):
        """What a heartbeat lists: every render whose process may still live."""
        self.settle(now)
        return sorted(p for p, r in self.renders.items() if r.dead_by is None or now < r.dead_by)

    def kill(self, procs):
        now = time.monotonic()
        for p in procs:
            if p in self.renders:
                self.renders[p].end(now, now + GRACE)

    def attach(self, q):
        t = time.monotonic()
        self.settle(t)
        self.epoch, kill = q("SELECT epoch, kill FROM frameq.attach(%s, %s, 'boot-1')", self.name, self.token)[0]
        self.renewed = t
        self.kill(kill)
        return kill

    def lose_lease(self, q):
        """FQ001/FQ002: kill everything, attach again"""
        self.kill(self.may_live(time.monotonic()))
        self.attach(q)

    def heartbeat(self, q):
        """the kill list, or the SQLSTATE of a lost lease (the agent has attached again)"""
        t = time.monotonic()
        try:
            kill = q("SELECT kill FROM frameq.heartbeat(%s, %s, %s, %s::bigint[])",
                     self.name, self.token, self.epoch, self.may_live(t))[0][0]
        except psycopg2.Error as e:
            if e.pgcode not in ("FQ001", "FQ002"):
                raise
            self.lose_lease(q)
            return e.pgcode
        self.renewed = t
        self.kill(kill)
        return kill

    def reserve(self, q, n=1):
        self.settle(time.monotonic())
        try:
            got = q("SELECT proc, frame FROM frameq.reserve(%s, %s, %s, %s) ORDER BY frame",
                    self.name, self.token, self.epoch, n)
        except psycopg2.Error as e:
            if e.pgcode not in ("FQ001", "FQ002"):
                raise
            self.lose_lease(q)
            return []
        start = time.monotonic()
        for p, f in got:
            self.renders[p] = Render(p, f, start)
        return got

    def book_one(self, q):
        got = self.reserve(q, 1)
        if len(got) != 1:
            bail("setup: %s booked %s" % (self.name, got))
        return got[0]

    def complete(self, q, proc, status=0):
        """the render ended on its own; its report"""
        now = time.monotonic()
        self.renders[proc].end(now, now)
        return q("SELECT frameq.complete(%s, %s, %s, %s, %s)", self.name, self.token, self.epoch, proc, status)[0][0]


def double_runs(agents):
    """Frames with two renders that overlap: (certainly, possibly) overlapping."""
    now = time.monotonic()
    rs = []
    for a in agents:
        a.may_live(now)
        rs += a.renders.values()
    certain, possible = set(), set()
    for r1 in rs:
        for r2 in rs:
            if r1 is r2 or r1.frame != r2.frame or r2.start < r1.start:
                continue
            if r1.ends_from is None or r2.start < r1.ends_from:
                certain.add(r1.frame)
            if r1.dead_by is None or r2.start < r1.dead_by:
                possible.add(r1.frame)
    return certain, possible


def farm(q):
    """the frames' states, the procs and the hosts' epochs"""
    return (q("SELECT id, state FROM frameq.frame ORDER BY id"),
            q("SELECT id, frame, host, epoch, state FROM frameq.proc ORDER BY id"),
            q("SELECT name, epoch, state FROM frameq.host ORDER BY name"))


def connect_restore(name, port):
    return fqtest.connect(host=os.path.join(PITR, name), port=port, user="postgres",
                          dbname=os.environ["PGDATABASE"])


# ------------------------------------------------------------ the primary
prim = fqtest.connect()
q, q1 = queries(prim)
create_farm(q, "pitr")
submit(q, "pitr", "restore", "1-12")
hosts = {n: register(q, n, "pitr", c) for n, c in (("reports", 4), ("silent", 4), ("restarted", 4), ("spare", 16))}
cluster_lib('cd "$PITR_DIR" && runuser -u postgres -- "$FRAMEQ_PGBIN/pg_basebackup" -h "$PGHOST" -p "$PGPORT" '
            '-U postgres -D "$PITR_DIR/base" -X stream -c fast --no-sync')
ok("base backup taken")
A, S, E, B = (Agent(hosts[n]) for n in ("reports", "silent", "restarted", "spare"))
agents = (A, S, E, B)
for a in agents:
    a.attach(q)

# before T
pa1, done_after = A.book_one(q)
pa2, spans = A.book_one(q)
ps3, silent_done = S.book_one(q)
for a in agents:
    a.heartbeat(q)          # so that every booking has been seen
at_T = farm(q)
T, T_lsn = q("SELECT clock_timestamp()::text, pg_current_wal_insert_lsn()::text")[0]
restarted_epoch_at_T = E.epoch

# after T
if A.complete(q, pa1) != "accepted" or S.complete(q, ps3) != "accepted":
    bail("setup: completes after T")
pa4, unknown_a = A.book_one(q)
pa5, rerun = A.book_one(q)
if A.complete(q, pa5) != "accepted":
    bail("setup: complete of the rerun frame")
ps6, unknown_s = S.book_one(q)
E.kill(E.may_live(time.monotonic()))            # the agent restarts: its leftovers killed, attach
E.attach(q)
pe7, unknown_e = E.book_one(q)
if E.epoch != restarted_epoch_at_T + 1:
    bail("setup: the restarted host's epoch is %s, wanted %s" % (E.epoch, restarted_epoch_at_T + 1))
waiting_at_T = {f for f, s in at_T[0] if s == "waiting"}
untouched = waiting_at_T - {unknown_a, rerun, unknown_s, unknown_e}
if len(waiting_at_T) != 9 or len(untouched) != 5:
    bail("setup: %d frames waiting at T, %d untouched" % (len(waiting_at_T), len(untouched)))
seg = q1("SELECT pg_walfile_name(pg_switch_wal())")
wait_for(lambda: q1("SELECT coalesce(last_archived_wal >= %s, false) FROM pg_stat_archiver", seg),
         30, 0.05, "WAL segment %s was not archived within 30 s" % seg)
ok("the WAL after T is archived, up to %s" % seg)

# ------------------------------------------------------------ the restores, paused at T
cluster_lib('make_restore off 54701 recovery_target_lsn %s off & a=$!; '
            'make_restore short 54703 recovery_target_time %s on "frameq.lease_ttl = 2s" & b=$!; '
            'make_restore on 54702 recovery_target_time %s on & c=$!; wait $a && wait $b && wait $c'
            % (shlex.quote(T_lsn), shlex.quote(T), shlex.quote(T)))
off = connect_restore("off", 54701)
oq, oq1 = queries(off)
short = connect_restore("short", 54703)
sq, sq1 = queries(short)
on = connect_restore("on", 54702)
nq, nq1 = queries(on)
for name, rq, rq1 in (("off", oq, oq1), ("short", sq, sq1), ("on", nq, nq1)):
    wait_for(lambda: rq1("SELECT pg_get_wal_replay_pause_state()") == "paused", 30, 0.02,
             "restore %s: recovery did not pause at T within 30 s" % name)
    if farm(rq) != at_T:
        fail("restore %s: the farm, paused at T, is not as it was at T" % name)
    w = rq1("SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'frameq worker'")
    st = rq("SELECT started, quarantine_until FROM frameq.worker_status()")[0]
    if w != 0 or st != (False, None):
        fail("restore %s, paused in recovery: %d frameq workers, worker_status() %s" % (name, w, st))
    try:
        rq("SELECT * FROM frameq.reserve(%s, %s, %s, 16)", B.name, B.token, B.epoch)
        fail("restore %s: reserve during recovery did not fail" % name)
    except psycopg2.Error as e:
        if e.pgcode != "25006":
            fail("restore %s: reserve during recovery: %s %s, wanted 25006" % (name, e.pgcode, e.pgerror.strip()))
    ok("restore %s: paused at T (%d frames, %d procs, %d hosts as they were), no worker, reserve refused "
       "read-only" % ((name,) + tuple(map(len, at_T))))

# ------------------------------------------------------------ the primary stops
for a in agents:
    a.heartbeat(q)          # the hosts' last renewals on the primary
prim.close()
cluster_lib('_frameq_pg_ctl -w -m fast stop >/dev/null')
t_stop = time.monotonic()
worlds = {w: copy.deepcopy(agents) for w in ("off", "short", "on")}

# ------------------------------------------------------------ off and short: negative controls
def books_at_once(name, rq, rq1, world, how, expiring=()):
    """On restore name, once recovery has ended (how: "promote" or "resume")
    and its quarantine, if any, is over, the spare host books what it can:
    the frames waiting at T, of which the 3 booked after T and rendering
    still run twice at once; and, if the restore has expired the leases of
    the hosts that ran them by then, the frames in expiring too.  Returns
    the frames run twice, or None if they are not the ones expected."""
    B = world[3]
    rq1("SELECT pg_promote()" if how == "promote" else "SELECT pg_wal_replay_resume() IS NULL")
    wait_for(lambda: not rq1("SELECT pg_is_in_recovery()"), 30, 0.02,
             "restore %s: still in recovery 30 s after the %s" % (name, how))
    wait_for(lambda: rq1("SELECT started AND clock_timestamp() >= quarantine_until OR"
                         "       NOT current_setting('frameq.quarantine')::bool FROM frameq.worker_status()"),
             30, 0.02, "restore %s: its quarantine did not end within 30 s" % name)
    B.heartbeat(rq)
    got = B.reserve(rq, 16)
    certain, possible = double_runs(world)
    print("restore %s: the spare host booked %d frames %.1f s after the primary stopped" %
          (name, len(got), time.monotonic() - t_stop), flush=True)
    twice = {unknown_a, unknown_s, unknown_e}
    if not waiting_at_T <= {f for p, f in got} <= waiting_at_T | set(expiring):
        fail("restore %s: the spare host booked %s, wanted the frames waiting at T %s"
             % (name, sorted(f for p, f in got), sorted(waiting_at_T)))
    if not twice <= certain <= twice | {spans} or possible != certain:
        fail("restore %s: double runs found: certainly %s, possibly %s; wanted frames %s"
             % (name, sorted(certain), sorted(possible), sorted(twice)))
        return None
    return sorted(certain)

twice = books_at_once("off", oq, oq1, worlds["off"], "promote")
if twice:
    ok("restore off (no quarantine), promoted: frames %s run twice at once, as the check must find" % twice)
off.close()
cluster_lib('restore_ctl off -w -m immediate stop >/dev/null')
# short: restored with a lease_ttl of 2 s while the hosts hold the 20 s
# leases recorded at T (host.lease_granted): its quarantine covers them, as
# long as on's (which shows that length is enough), not its own 3.1 s
sq1("SELECT pg_wal_replay_resume() IS NULL")
wait_for(lambda: not sq1("SELECT pg_is_in_recovery()"), 30, 0.02,
         "restore short: still in recovery 30 s after the resume")
fqtest.wait_for_worker(sq)
wait_for(lambda: sq1("SELECT quarantine_until - quarantine_start > interval '3.1 s'"
                     "  FROM frameq.worker_status()"), 10, 0.02,
         "restore short: its quarantine was not stretched past its own lease period within 10 s")
qlen = sq1("SELECT extract(epoch FROM quarantine_until - quarantine_start)::float8 FROM frameq.worker_status()")
got = worlds["short"][3].reserve(sq, 16)
if abs(qlen - PERIOD) > 0.001 or got:
    fail("restore short: a quarantine of %.3f s (wanted %.2f s, the recorded leases'), %d frames booked in it"
         % (qlen, PERIOD, len(got)))
else:
    ok("restore short (a lease_ttl of 2 s, shorter than the agents' 20 s): its quarantine takes the longest "
       "lease recorded, %.2f s, and books nothing in it" % qlen)
short.close()
cluster_lib('restore_ctl short -w -m immediate stop >/dev/null')

A, S, E, B = worlds["on"]
q, q1 = nq, nq1
# ------------------------------------------------------------ on: the end of recovery
resumed = q1("SELECT clock_timestamp()")
q("SELECT pg_wal_replay_resume()")
wait_for(lambda: not q1("SELECT pg_is_in_recovery()"), 30, 0.02, "restore on: still in recovery 30 s after the resume")
fqtest.wait_for_worker(q)
qstart, quntil, qlen, after_resume = q(
    "SELECT quarantine_start, quarantine_until, extract(epoch FROM quarantine_until - quarantine_start)::float8,"
    "       quarantine_start > %s::timestamptz FROM frameq.worker_status()", resumed)[0]
if not after_resume or abs(qlen - PERIOD) > 0.001:
    fail("restore on: quarantine %s .. %s (%.3f s); wanted %.2f s from after the resume (%s)"
         % (qstart, quntil, qlen, PERIOD, resumed))
else:
    ok("restore on: the quarantine starts at the end of recovery, for %.2f s" % qlen)

# nothing is booked before anyone reports
if B.reserve(q, 16):
    fail("restore on: the spare host booked at the start of the quarantine")
# the reporting host: told to kill what the restore does not know; frame 1 released
if time.monotonic() >= A.renewed + TTL - GRACE:
    bail("restore on: the reporting host's render of frame %d passed its lease deadline before the "
         "restore was up: too slow to show anything" % unknown_a)
kill = A.heartbeat(q)
if kill != [pa4]:
    fail("restore on: the reporting host was told to kill %s, wanted [%d]" % (kill, pa4))
row = q("SELECT f.state, r.reason FROM frameq.frame f JOIN frameq.run r ON r.frame = f.id"
        " WHERE r.proc = %s", pa1)
if row != [("waiting", "lost_by_agent")]:
    fail("restore on: frame %d (ended after T) is %s, wanted waiting / lost_by_agent" % (done_after, row))
else:
    ok("restore on: the reporting host is told to kill its render of frame %d; frame %d, done after T, "
       "waits again" % (unknown_a, done_after))
# the restarted host: FQ001, kills, attaches again with the same epoch number
lost = E.heartbeat(q)
if lost != "FQ001" or E.epoch != restarted_epoch_at_T + 1:
    fail("restore on: the restarted host's heartbeat: %s, epoch %s; wanted FQ001, epoch %d again"
         % (lost, E.epoch, restarted_epoch_at_T + 1))
answer = q1("SELECT frameq.complete(%s, %s, %s, %s, 0)", E.name, E.token, E.epoch, pe7)
row = q("SELECT state, (SELECT count(*) FROM frameq.proc WHERE frame = f.id) FROM frameq.frame f WHERE id = %s",
        unknown_e)
if answer != "stale" or row != [("waiting", 0)]:
    fail("restore on: the report of the killed render under the reissued epoch: %s, frame %s" % (answer, row))
else:
    ok("restore on: the restarted host lost its lease (FQ001), attached again as epoch %d; its report "
       "of the render it killed answers stale under that epoch" % E.epoch)

silent = q("SELECT epoch FROM frameq.host WHERE id = %s", S.id)[0][0]
empties = in_q = 0
next_beat = 0.0
booked = {}
while True:
    now_srv, in_quarantine, past = q("SELECT clock_timestamp(), clock_timestamp() < %s::timestamptz,"
                                     "       clock_timestamp() > %s::timestamptz + interval '3 s'",
                                     quntil, quntil)[0]
    if time.monotonic() >= next_beat:
        next_beat = time.monotonic() + 1.0
        for a in (A, E, B):
            if not isinstance(a.heartbeat(q), list):
                fail("restore on: %s lost its lease in the quarantine" % a.name)
    if in_quarantine:
        in_q += 1
        srow = q("SELECT h.state, h.epoch, (SELECT count(*) FROM frameq.proc p WHERE p.host = h.id)"
                 "  FROM frameq.host h WHERE h.id = %s", S.id)[0]
        if srow != ("up", silent, 1):
            fail("restore on: the silent host changed in the quarantine: %s" % (srow,))
            break
    got = B.reserve(q, 16)
    if got and q1("SELECT clock_timestamp() < %s::timestamptz", quntil):
        fail("restore on: the spare host booked %d frames in the quarantine" % len(got))
        break
    if not got and in_quarantine:
        empties += 1
    booked.update({f: p for p, f in got})
    if past or len(booked) == 11:
        break
    time.sleep(0.2)
print("restore on: %d polls in the quarantine, %d empty reserves" % (in_q, empties), flush=True)
if in_q < 30 or empties < 30:
    fail("restore on: too few samples in the quarantine to say anything")
else:
    ok("restore on: nothing booked in the quarantine (%d empty reserves)" % empties)

want = {done_after, silent_done, unknown_a, rerun, unknown_s, unknown_e} | untouched
if set(booked) != want:
    fail("restore on: the spare host booked %s, wanted %s" % (sorted(booked), sorted(want)))
early = q1("SELECT count(*) FROM frameq.run WHERE proc = ANY(%s) AND started_at < %s::timestamptz",
           list(booked.values()), quntil)
if early:
    fail("restore on: %d bookings before the quarantine's end" % early)
rows = q("SELECT r.reason, extract(epoch FROM r.ended_at - %s::timestamptz)::float8 FROM frameq.run r"
         " WHERE r.proc = %s", qstart, ps3)
if len(rows) != 1 or rows[0][0] != "host_lost" or not PERIOD <= rows[0][1] <= PERIOD + 1.5:
    fail("restore on: the silent host's proc of before T ended %s (s after the quarantine's start); "
         "wanted host_lost, %.2f-%.2f s" % (rows, PERIOD, PERIOD + 1.5))
h = q("SELECT state, down_reason, epoch FROM frameq.host WHERE id = %s", S.id)[0]
if h != ("down", "lease_lost", silent + 1):
    fail("restore on: the silent host is %s, wanted down / lease_lost / epoch %d" % (h, silent + 1))
certain, possible = double_runs(worlds["on"])
if possible:
    fail("restore on: frames %s may have run twice at once (certainly: %s)" % (sorted(possible), sorted(certain)))
elif set(booked) == want:
    ok("restore on: the spare host booked the %d frames after the quarantine, none while another render "
       "of it may live; the silent host expired (host_lost)" % len(booked))
if A.complete(q, pa2) != "accepted":
    fail("restore on: the reporting host's report of frame %d (booked before T) was not accepted" % spans)
states = dict(q("SELECT state, count(*)::int FROM frameq.frame GROUP BY state"))
if states != {"succeeded": 1, "running": 11}:
    fail("restore on: frames by state %s, wanted 1 succeeded and 11 running" % states)
check_clean(q, "restore on: check()")
finish()
PY
if [[ $status -ne 0 ]]; then
	for r in off short on; do
		if [[ -f $PITR_DIR/$r/server.log ]]; then
			echo "--- restore $r: server log ---"
			grep -E 'frameq|recovery|FATAL|PANIC|ERROR' "$PITR_DIR/$r/server.log" | tail -n 20 || true
		fi
	done
fi
exit $status
