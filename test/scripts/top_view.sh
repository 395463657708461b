#!/usr/bin/env bash
# tools/frameq-top against a scripted farm, as a frameq_reader login role.
#
# The farm (a fresh extension, so that the screen holds only it): three
# hosts (r1 8 cores 16 GiB, r2 4 cores 8 GiB, both attached; r3 set to
# repair) and four jobs, played through the agent's own calls:
#   shot000_plate   alpha, 2 tasks, both succeeded: finished
#   shot010_render  alpha, 10 tasks: 4 succeeded, 1 failed (exit 1, no
#                   retries: dead), 1 killed by kill_frame ("wrong camera",
#                   with an escape sequence and a newline, shown as '?':
#                   dead, run reason killed), 3 running on r2, 1 waiting
#   shot020_comp    beta, 4 tasks of 2 cores, max_dead_frames 1: 1 failed
#                   (exit 2: dead, and the job paused itself), 1 running on
#                   r1, 2 waiting
#   shot030_fx      alpha, 2 tasks: 1 killed for memory (oom, retried), both
#                   waiting
# The --once screen must show each job with its counts and a progress bar
# whose cells are each state's share of the tasks, the paused job's reason,
# every host with its state, cores and memory in use and procs, running and
# cores per show, and the four failures with their reasons.  A narrow and a
# short screen degrade (no bar; sections cut with "... N more"), and the
# interactive mode, under a pty, draws its header and exits 0 on q and on
# Ctrl-C, and shows a session ended under it and connects again.  A view `actions` (where there is one) is shown; the views of
# frameq 0.1.0, which lack some columns, are read too.
set -euo pipefail
# shellcheck source=worker_lib.bash
source "$(dirname "$0")/worker_lib.bash"
cd "$(dirname "$0")/../.."
need_debs python3-psycopg2
: "${FRAMEQ_TEST_TMP:=$(mktemp -d)}"
q() { psql -X -q -At -v ON_ERROR_STOP=1 "$@"; }
# a view frameq.actions made below stands in for one the extension lacks;
# it is never left behind, nor is an old version of the extension
drop_stand_in="DO \$\$ BEGIN
	IF to_regclass('frameq.actions') IS NOT NULL AND NOT EXISTS (
		SELECT 1 FROM pg_depend WHERE classid = 'pg_class'::regclass
		   AND objid = to_regclass('frameq.actions') AND deptype = 'e') THEN
		DROP VIEW frameq.actions;
	END IF;
END \$\$"
old_installed=0
cleanup() {
	q -c "$drop_stand_in" >/dev/null 2>&1 || true
	if (( old_installed )); then
		q -c "DROP EXTENSION IF EXISTS frameq CASCADE" -c "CREATE EXTENSION frameq" >/dev/null 2>&1 ||
			echo "not ok: could not put the current extension back"
	fi
}
trap cleanup EXIT

q -c "$drop_stand_in" >/dev/null
q <<'SQL' >/dev/null
SET client_min_messages = warning;
DROP EXTENSION IF EXISTS frameq CASCADE;
CREATE EXTENSION frameq;
DROP TABLE IF EXISTS top_host;
DO $$ BEGIN
	IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'top_watch') THEN
		CREATE ROLE top_watch LOGIN;
	END IF;
END $$;
GRANT frameq_reader TO top_watch;
SELECT frameq.create_allocation('gen');
SELECT frameq.create_show('alpha');
SELECT frameq.create_show('beta');
SELECT frameq.set_subscription('alpha', 'gen', 8, 12);
SELECT frameq.set_subscription('beta', 'gen', 4, 8);
CREATE TABLE top_host (name text PRIMARY KEY, token text, epoch bigint);
INSERT INTO top_host VALUES
	('r1', frameq.register_host('r1', 'gen', 8, 17179869184), 0),
	('r2', frameq.register_host('r2', 'gen', 4, 8589934592), 0),
	('r3', frameq.register_host('r3', 'gen', 4, 8589934592), 0);
UPDATE top_host h SET epoch = (frameq.attach(h.name, h.token, 'boot')).epoch WHERE name <> 'r3';
SELECT frameq.set_host_state('r3', 'repair');
-- a long lease: the worker must not expire anything while the test looks
ALTER SYSTEM SET frameq.lease_ttl = '3600s';
SELECT pg_reload_conf();

CREATE FUNCTION pg_temp.book(host text, n int) RETURNS SETOF bigint LANGUAGE sql AS $f$
	SELECT r.proc FROM top_host h, frameq.reserve(h.name, h.token, h.epoch, n) r
	 WHERE h.name = host ORDER BY r.frame $f$;
CREATE FUNCTION pg_temp.done(host text, frame_number int, job bigint, status int,
							 sig int DEFAULT 0, oom bool DEFAULT false) RETURNS text
LANGUAGE sql AS $f$
	SELECT frameq.complete(h.name, h.token, h.epoch, f.proc, status, sig, 1288490188, oom)
	  FROM top_host h, frameq.frames f
	 WHERE h.name = host AND f.job = done.job AND f.frame_number = done.frame_number $f$;

SELECT frameq.submit('{"show": "alpha", "name": "shot000_plate", "max_retries": 0,
  "layers": [{"name": "r", "command": "true", "range": "1-2", "memory": "1GB"}]}');
SELECT count(*) FROM pg_temp.book('r1', 2);
SELECT pg_temp.done('r1', n, 1, 0) FROM generate_series(1, 2) n;

SELECT frameq.submit('{"show": "alpha", "name": "shot010_render", "max_retries": 0,
  "layers": [{"name": "r", "command": "true", "range": "1-10", "memory": "1GB"}]}');
SELECT count(*) FROM pg_temp.book('r1', 6);
SELECT pg_temp.done('r1', n, 2, 0) FROM generate_series(1, 4) n;
SELECT pg_temp.done('r1', 5, 2, 1);
-- a reason is free text: an escape sequence and a newline must not reach the screen
SELECT frameq.kill_frame(frame, E'wrong camera\x1b[2J\nreally') FROM frameq.frames WHERE job = 2 AND frame_number = 6;
SELECT pg_temp.done('r1', 6, 2, 0, 15);
SELECT frameq.set_job(2, paused => true);

SELECT frameq.submit('{"show": "beta", "name": "shot020_comp", "max_retries": 0,
  "max_dead_frames": 1,
  "layers": [{"name": "c", "command": "true", "range": "1-4", "cores": 2, "memory": "2GB"}]}');
SELECT count(*) FROM pg_temp.book('r1', 2);
SELECT pg_temp.done('r1', 2, 3, 2);

SELECT frameq.submit('{"show": "alpha", "name": "shot030_fx", "max_retries": 2,
  "layers": [{"name": "f", "command": "true", "range": "1-2", "memory": "1GB"}]}');
SELECT count(*) FROM pg_temp.book('r2', 1);
SELECT pg_temp.done('r2', 1, 4, 0, 9, true);
SELECT frameq.set_job(4, paused => true);
SELECT frameq.set_job(2, paused => false);
SELECT count(*) FROM pg_temp.book('r2', 3);
SELECT frameq.set_job(4, paused => false);
SQL

# the farm is as described (read as the superuser), or the test is wrong
farm=$(q -F ' ' -c "SELECT string_agg(concat_ws(' ', job, name, state, total, succeeded, running,
                                              waiting + depend, dead), '; ' ORDER BY job)
                      FROM frameq.job_progress")
want="1 shot000_plate finished 2 2 0 0 0; 2 shot010_render active 10 4 3 1 2; 3 shot020_comp paused 4 0 1 2 1; 4 shot030_fx active 2 0 0 2 0"
[[ $farm == "$want" ]] || { echo "not ok: the scripted farm is not as planned: $farm"; exit 1; }
runs=$(q -F ' ' -c "SELECT string_agg(concat_ws(' ', r.job, f.frame_number, r.host, r.reason, r.exit_status),
                                      '; ' ORDER BY r.job, f.frame_number)
                      FROM frameq.runs r JOIN frameq.frames f ON f.frame = r.frame
                     WHERE r.reason <> 'completed' OR r.exit_status <> 0")
want="2 5 r1 completed 1; 2 6 r1 killed 0; 3 2 r1 completed 2; 4 1 r2 oom 0"
[[ $runs == "$want" ]] || { echo "not ok: the failed runs are not as planned: $runs"; exit 1; }
echo "ok: the scripted farm: 4 jobs, 3 hosts, 4 failed runs"

top() { tools/frameq-top "user=top_watch" "$@"; }
top --once --width 120 > "$FRAMEQ_TEST_TMP/screen" 2> "$FRAMEQ_TEST_TMP/err" ||
	{ cat "$FRAMEQ_TEST_TMP/err"; echo "not ok: frameq-top --once failed as frameq_reader"; exit 1; }
# the checks first, so that a failure's lines come first in the output
# (which a CI log may cut); the screen after them, if one failed
if ! $PY - "$FRAMEQ_TEST_TMP" <<'PY'
import re, sys
from fqtest import fail, finish, ok

tmp = sys.argv[1]
screen = open(tmp + "/screen").read()
lines = screen.splitlines()

def line_of(pattern):
    got = [l for l in lines if re.search(pattern, l)]
    if len(got) != 1:
        fail("%d lines match %r (want 1)" % (len(got), pattern))
        return ""
    return got[0]

if re.search(r"[\x00-\x08\x0b-\x1f\x7f]", screen):
    fail("--once wrote control characters")
else:
    ok("--once is plain text")
if max(len(l) for l in lines) > 120:
    fail("a line is wider than --width 120")
title = lines[0]
if re.match(r"frameq-top  \d{4}-\d\d-\d\d \d\d:\d\d:\d\d  "
            r"jobs: 2 active, 1 paused  hosts: 2 up of 3  procs: 4  top_watch@local/\S+$", title):
    ok("title: who, when, jobs, hosts and procs")
else:
    fail("title: %r" % title)
for sec, n in (("JOBS", 4), ("HOSTS", 3), ("SHOWS", 2), ("KILLS AND FAILURES, LAST 60 MIN", 4)):
    if "%s (%d)" % (sec, n) not in lines:
        fail("no section line %r" % ("%s (%d)" % (sec, n)))

# jobs: id, name, state, succeeded/total, running, waiting, dead, the bar
W = 40
jobs = {
    1: ("shot000_plate", "finished", 2, 2, 0, 0, 0, 0),
    2: ("shot010_render", "active", 10, 4, 0, 3, 1, 2),
    3: ("shot020_comp", "paused", 4, 0, 0, 1, 2, 1),
    4: ("shot030_fx", "active", 2, 0, 0, 0, 2, 0),
}
for job, (name, state, total, succ, eaten, run, wait, dead) in jobs.items():
    l = line_of(r"^\s+%d %s " % (job, name))
    m = re.match(r"^\s+(\d+) (\S+)\s+(\S+)\s+(\d+)/(\d+)\s+(\d+)\s+(\d+)\s+(\d+) \[([^\]]*)\]\s+(\d+)%$", l)
    if not m:
        fail("job %d: line not as expected: %r" % (job, l))
        continue
    got = (m.group(2), m.group(3)) + tuple(int(m.group(i)) for i in (4, 5, 6, 7, 8))
    want = (name, state, succ, total, run, wait, dead)
    if got != want:
        fail("job %d: %s, want %s" % (job, got, want))
    b = m.group(9)
    # each state's cells: its share of the tasks, rounded on the running total
    cum, edges = 0, []
    for n in (succ, eaten, run, dead):
        cum += n
        edges.append((2 * cum * W // total + 1) // 2)
    want_bar = ("#" * edges[0] + "-" * (edges[1] - edges[0]) + ">" * (edges[2] - edges[1])
                + "x" * (edges[3] - edges[2])).ljust(W, ".")
    if b != want_bar:
        fail("job %d: bar %r, want %r" % (job, b, want_bar))
    if int(m.group(10)) != 100 * succ // total:
        fail("job %d: %s%%, want %d%%" % (job, m.group(10), 100 * succ // total))
    ok("job %d %s: %s %d/%d, %d running, %d waiting, %d dead, bar %s" % ((job,) + want + (b,)))
# the bar of shot010_render, by hand: 16 succeeded, 12 running, 8 dead, 4 waiting
if "[" + "#" * 16 + ">" * 12 + "x" * 8 + "." * 4 + "]" not in screen:
    fail("shot010_render's bar is not 16 #, 12 >, 8 x, 4 .")
l = lines.index(line_of(r"^\s+3 shot020_comp "))
if lines[l + 1].strip() != "paused: max_dead_frames: 1 of its tasks are dead, the limit is 1":
    fail("the paused job's reason: %r" % lines[l + 1])
else:
    ok("the paused job's reason is under it")

# hosts: state, cores used/total, memory used/total, procs
for pat in (r"^r1\s+gen\s+up\s+2/8\s+2\.0/16\.0G\s+1$",
            r"^r2\s+gen\s+up\s+3/4\s+3\.0/8\.0G\s+3$",
            r"^r3\s+gen\s+repair/operator\s+0/4\s+0\.0/8\.0G\s+0$"):
    if line_of(pat):
        ok("host line " + pat)
# shows: running, cores used/burst, waiting (job_progress has the job's
# show from frameq 0.6.0; alpha: shot010_render's 1 and shot030_fx's 2,
# not the finished job's; beta: shot020_comp's 2, paused jobs count)
for pat in (r"^alpha@gen\s+3\s+3/12\s+3$", r"^beta@gen\s+1\s+2/8\s+2$"):
    if line_of(pat):
        ok("show line " + pat)
# failures: newest first, each with its reason, job, frame and host
fl = lines[lines.index("KILLS AND FAILURES, LAST 60 MIN (4)") + 2:][:4]
want = [(r"oom", "shot030_fx", "1", "r2", r"-> waiting$"),
        (r"exit 2", "shot020_comp", "2", "r1", r"-> dead$"),
        (r"killed", "shot010_render", "6", "r1", r"-> dead  wrong camera\?\[2J\?really$"),
        (r"exit 1", "shot010_render", "5", "r1", r"-> dead$")]
for got, (reason, job, frame, host, tail) in zip(fl, want):
    if not re.match(r"^\d\d:\d\d:\d\d %s\s+%s\s+%s\s+%s\s+%s" % (reason, job, frame, host, tail), got):
        fail("failure line %r, want %s %s frame %s on %s %s" % (got, reason, job, frame, host, tail))
    else:
        ok("failure: %s %s frame %s on %s" % (reason, job, frame, host))
finish()
PY
then
	echo "--- the screen (120 columns) ---"
	cat "$FRAMEQ_TEST_TMP/screen"
	echo "---"
	exit 1
fi

# a narrow screen: every line fits, the bar is left out, the counts stay
top --once --width 60 > "$FRAMEQ_TEST_TMP/narrow"
if awk 'length > 60 { bad = 1 } END { exit !bad }' "$FRAMEQ_TEST_TMP/narrow"; then
	echo "not ok: --width 60 wrote a longer line"; exit 1
fi
grep -q '\[' "$FRAMEQ_TEST_TMP/narrow" && { echo "not ok: a bar in 60 columns"; exit 1; }
grep -Eq '^ +2 shot010_render +active +4/10 +3 +1 +2$' "$FRAMEQ_TEST_TMP/narrow" ||
	{ cat "$FRAMEQ_TEST_TMP/narrow"; echo "not ok: shot010_render's counts in 60 columns"; exit 1; }
echo "ok: 60 columns: no bar, the counts kept"
# 80 columns: a shorter bar (17 cells: 7 succeeded, 5 running, 3 dead, 2
# waiting, each rounded on the running total) beside a name cut to 12
top --once --width 80 > "$FRAMEQ_TEST_TMP/eighty"
if awk 'length > 80 { bad = 1 } END { exit !bad }' "$FRAMEQ_TEST_TMP/eighty"; then
	echo "not ok: --width 80 wrote a longer line"; exit 1
fi
grep -Eq '^ +2 shot010_ren~ active +4/10 +3 +1 +2 \[#{7}>{5}x{3}\.{2}\] +40%$' "$FRAMEQ_TEST_TMP/eighty" ||
	{ cat "$FRAMEQ_TEST_TMP/eighty"; echo "not ok: shot010_render's bar in 80 columns"; exit 1; }
echo "ok: 80 columns: a bar of 17 cells"
# a short screen: at most 16 lines, the sections cut with "... N more"
top --once --width 120 --height 16 > "$FRAMEQ_TEST_TMP/short"
n=$(wc -l < "$FRAMEQ_TEST_TMP/short")
(( n <= 16 )) || { echo "not ok: --height 16 wrote $n lines"; exit 1; }
grep -q '\.\.\. [0-9]* more' "$FRAMEQ_TEST_TMP/short" ||
	{ cat "$FRAMEQ_TEST_TMP/short"; echo "not ok: nothing says what was cut in 16 lines"; exit 1; }
for want in '^HOSTS \(3\)' '^r1 .* 1$' '^KILLS AND FAILURES.*\(4\)' '^ +2 shot010_render'; do
	grep -Eq "$want" "$FRAMEQ_TEST_TMP/short" ||
		{ cat "$FRAMEQ_TEST_TMP/short"; echo "not ok: 16 lines: no line matches $want"; exit 1; }
done
echo "ok: 16 lines: $n written, sections cut with '... N more'"

# a database it cannot read: exit 2 and a message, nothing on stdout
if tools/frameq-top "user=top_watch dbname=no_such_db" --once > "$FRAMEQ_TEST_TMP/bad" 2>&1; then
	echo "not ok: --once against a missing database exited 0"; exit 1
else
	rc=$?
fi
[[ $rc == 2 ]] && grep -q 'no_such_db' "$FRAMEQ_TEST_TMP/bad" ||
	{ cat "$FRAMEQ_TEST_TMP/bad"; echo "not ok: a missing database: exit $rc"; exit 1; }
echo "ok: a database it cannot read: exit 2 with the server's message"

# interactive, under a pty.  Each step waits for what it needs (a drawn
# header in the typescript, a session in pg_stat_activity) rather than for
# a fixed time, so a slow start cannot send a key to a program that has not
# yet taken the terminal; each wait gives up after 15 s and fails the test.
# until_true SECONDS COMMAND...: run COMMAND every 0.1 s until it succeeds
until_true() {
	local deadline=$((SECONDS + $1))
	shift
	until "$@"; do
		(( SECONDS < deadline )) || return 1
		sleep 0.1
	done
}
drawn() { grep -aq 'procs: 4  top_watch@local' "$1" 2>/dev/null; }
# the end of a typescript, printable characters only, for a failure
show_tty() { echo "--- the end of $1 ---"; tr -cd '[:print:]\n' < "$1" | tail -c 1500; echo; }
top_sessions() {
	q -c "SELECT string_agg(pid::text, ',' ORDER BY pid) FROM pg_stat_activity
	       WHERE application_name = 'frameq-top' AND usename = 'top_watch'"
}

# script(1) runs its command with $SHELL -c, /bin/sh where SHELL is unset (as
# in CI): `exec` leaves no shell between the pty and frameq-top, for dash
# waiting on a child dies of the Ctrl-C itself (status 130), whatever
# frameq-top does with it.
# it draws the farm, and q (then Ctrl-C) ends it with status 0 (what
# script(1) forwards after the key is only an end of input, which the
# program ignores: without the key, timeout ends it, 124)
for key in q $'\003'; do
	name=$([[ $key == q ]] && echo q || echo Ctrl-C)
	tty="$FRAMEQ_TEST_TMP/tty.$name"
	rc=0
	{ until_true 15 drawn "$tty" || echo "header never drawn" > "$tty.late"; printf '%s' "$key"; sleep 3; } |
		TERM=xterm COLUMNS=120 LINES=40 timeout 30 \
		script -qfec "exec tools/frameq-top user=top_watch" "$tty" >/dev/null || rc=$?
	[[ ! -e $tty.late ]] || { echo "not ok: interactive, $name: no header drawn in 15 s"; show_tty "$tty"; exit 1; }
	(( rc == 0 )) || { echo "not ok: interactive, $name: exit status $rc"; show_tty "$tty"; exit 1; }
	grep -aq 'shot010_render' "$tty" ||
		{ echo "not ok: interactive, $name: no jobs drawn"; show_tty "$tty"; exit 1; }
	echo "ok: interactive: drew the header and the jobs, $name ended it with status 0"
done

# interactive, its session ended under it: it says so, connects again at
# the next refresh (a session of another pid), and q still ends it
rc=0
tty="$FRAMEQ_TEST_TMP/tty.lost"
{
	until_true 15 drawn "$tty"
	first=$(top_sessions)
	q -c "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = 'frameq-top'" \
		> "$FRAMEQ_TEST_TMP/lost.killed"
	again() { local now; now=$(top_sessions); [[ -n $now && $now != "$first" ]]; }
	until_true 15 again
	top_sessions | tr ',' '\n' | grep -c . > "$FRAMEQ_TEST_TMP/lost.again"
	until_true 15 grep -aq 'cannot read the farm (retrying every' "$tty"
	printf q
	sleep 3
} | TERM=xterm COLUMNS=120 LINES=40 timeout 60 \
	script -qfec "exec tools/frameq-top user=top_watch" "$tty" >/dev/null || rc=$?
[[ $rc == 0 && $(cat "$FRAMEQ_TEST_TMP/lost.killed") == 1 && $(cat "$FRAMEQ_TEST_TMP/lost.again") == 1 ]] ||
	{ echo "not ok: a lost session: exit $rc, $(cat "$FRAMEQ_TEST_TMP/lost.killed") ended, $(cat "$FRAMEQ_TEST_TMP/lost.again") after"; show_tty "$tty"; exit 1; }
grep -aq 'cannot read the farm (retrying every' "$tty" ||
	{ echo "not ok: a lost session was not shown"; exit 1; }
echo "ok: interactive: a lost session is shown, and it connects again"

# the operator actions, where a view `actions` exists: one made here if
# this frameq has none (a later one's columns are its own)
made=$(q <<'SQL'
SELECT to_regclass('frameq.actions') IS NULL AS made \gset
\if :made
CREATE VIEW frameq.actions AS
	SELECT now() - interval '1 minute' AS at, 'wrangler_anna'::text AS who,
		   'kill_frame'::text AS action, NULL::bigint AS layer, 6::bigint AS frame,
		   '{"reason": "wrong camera", "n": 1}'::jsonb AS detail;
GRANT SELECT ON frameq.actions TO frameq_reader;
\endif
SELECT :'made';
SQL
)
top --once --width 120 > "$FRAMEQ_TEST_TMP/actions"
if [[ $made == t ]]; then
	grep -q '^ACTIONS (1)$' "$FRAMEQ_TEST_TMP/actions" &&
		grep -q '^AT        WHO            ACTION      FRAME  DETAIL$' "$FRAMEQ_TEST_TMP/actions" &&
		grep -Eq '^[0-9:]{8}  wrangler_anna  kill_frame  6      \{"n": 1, "reason": "wrong camera"\}$' \
			"$FRAMEQ_TEST_TMP/actions" ||
		{ cat "$FRAMEQ_TEST_TMP/actions"; echo "not ok: the actions view was not shown"; exit 1; }
	q -c "REVOKE SELECT ON frameq.actions FROM frameq_reader"
	top --once --width 120 > "$FRAMEQ_TEST_TMP/actions2"
	! grep -q '^ACTIONS' "$FRAMEQ_TEST_TMP/actions2" && grep -q '^JOBS (4)' "$FRAMEQ_TEST_TMP/actions2" ||
		{ cat "$FRAMEQ_TEST_TMP/actions2"; echo "not ok: an unreadable actions view broke the screen"; exit 1; }
	q -c "DROP VIEW frameq.actions"
	echo "ok: a view actions is shown, aligned, JSON as JSON, an empty column left out; one the role may not read is left out"
else
	grep -q '^ACTIONS (' "$FRAMEQ_TEST_TMP/actions" ||
		{ cat "$FRAMEQ_TEST_TMP/actions"; echo "not ok: frameq.actions exists but is not shown"; exit 1; }
	echo "ok: this frameq's view actions is shown"
fi

# waiting tasks per show, where job_progress has a column `show` (0.6.0
# on); before, this frameq's view wrapped in one that adds it (the
# extension is re-created below, which drops the wrapper)
q <<'SQL' >/dev/null
DO $$ BEGIN
	IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = 'frameq.job_progress'::regclass
					  AND attname = 'show') THEN
		ALTER VIEW frameq.job_progress RENAME TO job_progress_without_show;
		CREATE VIEW frameq.job_progress AS
			SELECT p.*, s.name AS show FROM frameq.job_progress_without_show p
			  JOIN frameq.job j ON j.id = p.job JOIN frameq.show s ON s.id = j.show;
		GRANT SELECT ON frameq.job_progress TO frameq_reader;
	END IF;
END $$;
SQL
top --once --width 120 > "$FRAMEQ_TEST_TMP/shows"
# alpha: shot010_render's 1 and shot030_fx's 2 (not the finished job's);
# beta: shot020_comp's 2 (paused jobs count)
grep -Eq '^SHOW@ALLOCATION +RUNNING +CORES USED/BURST +WAITING$' "$FRAMEQ_TEST_TMP/shows" &&
	grep -Eq '^alpha@gen +3 +3/12 +3$' "$FRAMEQ_TEST_TMP/shows" &&
	grep -Eq '^beta@gen +1 +2/8 +2$' "$FRAMEQ_TEST_TMP/shows" ||
	{ cat "$FRAMEQ_TEST_TMP/shows"; echo "not ok: waiting tasks per show"; exit 1; }
echo "ok: with a show column in job_progress, waiting tasks per show: alpha 3, beta 2"

# an old frameq (0.1.0: no frame_spec, paused_reason or retired_at in the
# views) is shown too; the current version is put back whatever happens
old_installed=1
q <<'SQL' >/dev/null
SET client_min_messages = warning;
DROP EXTENSION frameq CASCADE;
CREATE EXTENSION frameq VERSION '0.1.0';
GRANT frameq_reader TO top_watch;
SELECT frameq.create_allocation('old');
SELECT frameq.create_show('oldshow');
SELECT frameq.set_subscription('oldshow', 'old', 4, 4);
SELECT frameq.register_host('old1', 'old', 4, 8589934592);
SELECT frameq.submit('{"show": "oldshow", "name": "old_job",
  "layers": [{"name": "r", "command": "true", "range": "1-3"}]}');
SQL
top --once --width 120 > "$FRAMEQ_TEST_TMP/old" 2>&1 ||
	{ cat "$FRAMEQ_TEST_TMP/old"; echo "not ok: frameq-top failed on frameq 0.1.0"; exit 1; }
grep -Eq '^ +1 old_job +active +0/3 +0 +3 +0 \[\.+\] +0%$' "$FRAMEQ_TEST_TMP/old" &&
	grep -Eq '^old1 +old +up +0/4 +0\.0/8\.0G +0$' "$FRAMEQ_TEST_TMP/old" ||
	{ cat "$FRAMEQ_TEST_TMP/old"; echo "not ok: frameq 0.1.0's farm not shown"; exit 1; }
echo "ok: frameq 0.1.0's views: its job and host shown"
q -c "DROP TABLE top_host" -c "DROP EXTENSION frameq CASCADE" -c "CREATE EXTENSION frameq" \
	-c "ALTER SYSTEM RESET frameq.lease_ttl" \
	-c "SELECT pg_reload_conf()" >/dev/null
old_installed=0
echo "ok: frameq-top"
