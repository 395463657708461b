#!/usr/bin/env bash
# Where each render's output is (frameq 0.6.0): the agent tells the server,
# with report_log(), "<this machine's name>:<the render's log file>", and
# runs.log shows it, while the render runs and after it ended; the file
# named holds the render's output.
#
#  1. two long renders (nothing ends, no reserve has room): their logs go
#     on their own within the bound (1 s after the launch; 1.5 s allowed
#     here, for the agent's loop), and runs.log shows them while they run;
#  2. with a database at 0.5.0 the agent makes no such call (the version
#     is read again at its next attach: here the extension's recorded
#     version is set to 0.5.0 and the host declared dead, then up again, so
#     the agent re-attaches reading it), and its runs have no log;
#  3. renders of `true` on a host with one slot: each frame costs one
#     transaction: its report_log goes in the transaction of its
#     complete_many (before it), which also books the next frame; 20
#     frames, 20 transactions carrying their log reports and completes
#     (the server logs each statement with its virtual transaction id,
#     %v), no reserve of its own comes between them, and every run has its
#     log;
#  4. the same on four slots (40 frames): renders end apart, so a log goes
#     with the next batch, not always its own render's: at most 40
#     transactions carry the log reports and completes (17 in a quiet run),
#     no log report goes on its own, and at most 2 reserves of the agent's
#     own come between them (a render that ended has its report go, within
#     the report window, with the booking of its room: a reserve of its own
#     meanwhile would find the room still taken).
#
# With an agent that tells the logs in a call of its own after each
# reserve (FRAMEQ_AGENT_BIN: one built before the log reports were folded
# in), parts 1, 3 and 4 fail: no logs-reported line, 40 transactions for
# 20 frames, each report_log apart from its complete_many, and 15 reserves
# of its own among 40 frames; one that folds them in but reserves on its
# own while a report waits in its window fails part 4 (20 reserves of its
# own, 35 transactions).
source "$(dirname "$0")/lib.sh"

start_cluster 3s
# the virtual transaction id of each statement logged (part 3)
set_setting log_line_prefix '%m [%p] %v '
register_host a 2
log_calls a
start_agent a

render='echo "frame $FRAMEQ_FRAME_NUMBER says hi"; while [ ! -e "'"$T"'/go.$FRAMEQ_JOB" ]; do sleep 0.05; done'
job=$(submit_job run-log 1-2 "$render") || die "submit failed"
wait_for 20 "both renders run" eval '[[ $(frames_in_state '"$job"' running) == 2 ]]' || finish
logs_set() { [[ $(q "SELECT count(log) FROM frameq.runs WHERE job = $1") == "$2" ]]; }
wait_for 10 "both runs have a log" logs_set "$job" 2 && ok "each running render's run has a log"
# log_delay NAME PROC: seconds from agent NAME's booked line for PROC to the
# logs-reported line that carried it, and what it went with
log_delay() {
	python3 - "$T/$1.log" "$2" <<'PY'
import datetime, re, sys
booked = told = None
with open(sys.argv[1]) as f:
    for line in f:
        t = datetime.datetime.strptime(line[:23], "%Y-%m-%dT%H:%M:%S.%f")
        if " booked proc=%s " % sys.argv[2] in line:
            booked = t
        m = re.search(r" logs-reported .*procs=([0-9,]*) .*with=(\S+)", line)
        if m and sys.argv[2] in m.group(1).split(",") and booked and not told:
            told = ((t - booked).total_seconds(), m.group(2))
print("%.3f %s" % told if told else "none")
PY
}
for n in 1 2; do
	p=$(frame_proc "$job" $n)
	read -r secs with <<<"$(log_delay a "$p")"
	[[ $secs != none ]] && is_true "$secs <= 1.5" && [[ $with == alone ]] &&
		ok "frame $n: with no transaction to go with, its log went on its own ${secs}s after the booking" ||
		fail "frame $n: its log report: ${secs:-none} ${with:-}"
done
machine=$(hostname)
dir=$(realpath "$T/a/log")
for n in 1 2; do
	p=$(frame_proc "$job" $n)
	want="$machine:$dir/job$job.layer$(q "SELECT layer FROM frameq.frame WHERE id = (SELECT frame FROM frameq.frames WHERE job = $job AND frame_number = $n)").frame$n.$p.log"
	got=$(q "SELECT log FROM frameq.runs WHERE proc = $p")
	[[ $got == "$want" ]] && ok "frame $n: runs.log is $got" || fail "frame $n: runs.log is '$got', not '$want'"
	file=${got#"$machine:"}
	wait_for 10 "frame $n's output in its log" grep -qs "frame $n says hi" "$file" &&
		ok "frame $n: the file it names holds the render's output"
done
[[ $(sent report_log | wc -l) -ge 1 ]] && ok "the agent called report_log" || fail "no report_log call was logged"
touch "$T/go.$job"
wait_for 20 "the job finishes" job_finished "$job" || finish
logs_set "$job" 2 && ok "the logs stay once the runs have ended" || fail "the logs went: $(q "SELECT log FROM frameq.runs WHERE job = $job")"

# ---- a database at 0.5.0: no report_log call, no log
calls=$(sent report_log | wc -l)
installed=$(q "SELECT extversion FROM pg_extension WHERE extname = 'frameq'")
q "UPDATE pg_extension SET extversion = '0.5.0' WHERE extname = 'frameq'" >/dev/null
epoch=$(host_epoch a)
q "SELECT frameq.confirm_host_dead('$(host_name a)')" >/dev/null
wait_for 20 "a attaches again, at 0.5.0" eval '[[ $(host_epoch a) -gt $((epoch + 1)) ]]' || finish
q "SELECT frameq.set_host_state('$(host_name a)', 'up')" >/dev/null
job2=$(submit_job run-log-old 1 "$render") || die "submit failed"
wait_for 20 "the render runs" eval '[[ $(frames_in_state '"$job2"' running) == 1 ]]' || finish
touch "$T/go.$job2"
wait_for 20 "the job finishes" job_finished "$job2" || finish
q "UPDATE pg_extension SET extversion = '$installed' WHERE extname = 'frameq'" >/dev/null
[[ $(q "SELECT count(log) FROM frameq.runs WHERE job = $job2") == 0 ]] && ok "at 0.5.0 the run has no log" ||
	fail "at 0.5.0 the run has a log"
[[ $(sent report_log | wc -l) == "$calls" ]] && ok "at 0.5.0 the agent made no report_log call" ||
	fail "at 0.5.0 the agent called report_log $(( $(sent report_log | wc -l) - calls )) times"
agent_alive a && ok "the agent is still up" || fail "the agent exited"
agent_log_has a ' log-report-failed ' && fail "a report failed: $(grep -m1 ' log-report-failed ' "$T/a.log")"
stop_agent a
[[ $AGENT_RC == 0 ]] || fail "agent a exited $AGENT_RC on SIGTERM"

# ---- 3. renders of `true` on one slot: one transaction per frame
register_host b 1
log_calls b
start_agent b
wait_for 10 "b attached" agent_log_has b " attached " || finish
jt=$(submit_job no-op 1-20 true) || die "submit failed"
wait_for 60 "the no-op job finishes" job_finished "$jt" || finish
[[ $(q "SELECT count(*) || '/' || count(log) FROM frameq.runs WHERE job = $jt") == 20/20 ]] &&
	ok "each of the 20 runs has its log" ||
	fail "runs/logs: $(q "SELECT count(*) || '/' || count(log) FROM frameq.runs WHERE job = $jt")"
# shellcheck disable=SC2046
got=$(python3 "$AGENT_TEST_DIR/tx_calls.py" "$FRAMEQ_LOG" $(q "SELECT proc FROM frameq.runs WHERE job = $jt"))
[[ $got == "transactions=20 together=20 apart=0 no_log=0 own_reserves=0" ]] &&
	ok "20 frames, 20 transactions: each report_log went with its complete_many, no reserve of its own" ||
	fail "one transaction per frame: $got"
agent_log_has b ' log-report-failed ' && fail "a log report failed: $(grep -m1 ' log-report-failed ' "$T/b.log")"
stop_agent b
[[ $AGENT_RC == 0 ]] || fail "agent b exited $AGENT_RC on SIGTERM"

# ---- 4. the same on four slots: renders end apart, a log goes with the next batch
register_host c 4
log_calls c
start_agent c
wait_for 10 "c attached" agent_log_has c " attached " || finish
jt=$(submit_job no-op-4 1-40 true) || die "submit failed"
wait_for 60 "the no-op job finishes" job_finished "$jt" || finish
[[ $(q "SELECT count(*) || '/' || count(log) FROM frameq.runs WHERE job = $jt") == 40/40 ]] &&
	ok "each of the 40 runs has its log" ||
	fail "runs/logs: $(q "SELECT count(*) || '/' || count(log) FROM frameq.runs WHERE job = $jt")"
# shellcheck disable=SC2046
got=$(python3 "$AGENT_TEST_DIR/tx_calls.py" "$FRAMEQ_LOG" $(q "SELECT proc FROM frameq.runs WHERE job = $jt"))
read -r ntx _ _ nolog own <<<"$(tr -c '0-9\n' ' ' <<<"$got")"
[[ $ntx -le 40 && $nolog == 0 && $own -le 2 ]] &&
	ok "40 frames on four slots: $ntx transactions carried their log reports and completes (at most one per frame), $own reserves of its own meanwhile" ||
	fail "at most one transaction per frame, and no reserve of its own while reports are due: $got"
agent_log_has c ' logs-reported .*with=alone' && fail "a log report went on its own: $(grep -m1 ' logs-reported .*with=alone' "$T/c.log")"
stop_agent c
[[ $AGENT_RC == 0 ]] || fail "agent c exited $AGENT_RC on SIGTERM"
check_clean
finish
