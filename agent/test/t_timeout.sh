#!/usr/bin/env bash
# A render that hangs is timed out (the layer's `timeout`, frameq 0.5.0):
# the background worker turns the overdue task into a kill order, the
# agent kills the render's whole process tree, the run ends `timeout` and
# uses up a retry; when the retries are used up the frame is `dead`.
#
# Layer `timeout` 2 s, job max_retries 1.  Frame 1 hangs: a shell that
# ignores SIGTERM (so do its children, which inherit that) with a child
# `sleep` and a grandchild (a shell that execs `sleep`), each writing its
# pid down.  Frame 2 ends at once, well within its timeout, and succeeds.
#
# The lease is 15 s, so regular heartbeats are 5 s apart: the kill can only
# be as quick as asserted through the worker's notification, which makes
# the agent heartbeat at once and find the order in its answer.  Each of
# frame 1's runs must end, counted from its booking (runs.started_at):
#   no earlier than the timeout + the kill grace (its tree ignores
#   SIGTERM, so only the SIGKILL a grace later ends it: exit_signal 9),
#   no later than the timeout + one worker round (1 s, plus the
#   round's own time: the kill order itself must come within 1.5 s of
#   the deadline, proc.kill_at - proc.timeout_at) + the kill grace
#   (1 s: the tree ignores SIGTERM, so SIGKILL ends it) + 1.5 s for the
#   notification, heartbeat and complete round trips on a loaded machine.
# When a run has ended, no process of that render is left (found by its
# FRAMEQ_PROC in /proc/*/environ), and none of the pids it wrote down is
# alive as its process.
source "$(dirname "$0")/lib.sh"

start_cluster 15s
register_host a 2
need_reports
start_agent a

TIMEOUT=2
GRACE=1
LOW=$(awk "BEGIN { print $TIMEOUT + $GRACE - 0.05 }")
BOUND=$(awk "BEGIN { print $TIMEOUT + 1 + $GRACE + 1.5 }")
cat >"$T/hang.sh" <<'SH'
#!/bin/sh
if [ "$FRAMEQ_FRAME_NUMBER" = 2 ]; then echo quick; exit 0; fi
trap '' TERM
sleep 300 &
echo $! >>"pids.$FRAMEQ_PROC"
sh -c 'echo $$ >>"pids.$FRAMEQ_PROC"; exec sleep 300' &
echo $$ >>"pids.$FRAMEQ_PROC"
echo "hanging"
wait
SH
chmod 755 "$T/hang.sh"

# the worker starts 5 s after the cluster (its database did not exist yet)
wait_for 15 "the frameq worker is up" worker_up || finish
job=$(submit_job hang 1-2 "exec $T/hang.sh" "{\"timeout\": $TIMEOUT}" '{"max_retries": 1}') || die "submit failed"

# run_n N: frame 1's Nth run (proc|reason|seconds from booking to end|kill_reason)
run_n() {
	q "SELECT r.proc || '|' || coalesce(r.reason, '') || '|' ||
	          coalesce(round(extract(epoch FROM r.ended_at - r.started_at)::numeric, 2)::text, '') || '|' ||
	          coalesce(r.kill_reason, '') || '|' || coalesce(r.exit_signal::text, '')
	     FROM frameq.runs r JOIN frameq.frames f ON f.frame = r.frame
	    WHERE f.job = $job AND f.frame_number = 1 ORDER BY r.started_at OFFSET $(($1 - 1)) LIMIT 1"
}
run_ended() { [[ -n $(run_n "$1" | cut -d'|' -f2) ]]; }
# pid_of_proc PID PROC: PID is alive and is one of PROC's processes
pid_of_proc() { grep -qszx "FRAMEQ_PROC=$2" "/proc/$1/environ"; }

check_run() {	# N: frame 1's Nth run timed out in time, and left nothing behind
	local n=$1 row proc reason secs why sig pid alive=0
	wait_for 30 "run $n of frame 1 is under way" eval '[[ -n $(run_n '"$n"') ]]' || return 1
	proc=$(run_n "$n" | cut -d'|' -f1)
	wait_for 10 "run $n: its render's tree of 3 processes is up" \
		eval '[[ $(sort -u "$T/work/pids.'"$proc"'" 2>/dev/null | wc -l) == 3 ]]' || return 1
	[[ $(proc_pids "$proc" | wc -l) -ge 3 ]] && ok "run $n (proc $proc): the hung tree runs ($(proc_pids "$proc" | wc -l) processes)" ||
		fail "run $n: processes of proc $proc: $(proc_pids "$proc" | tr '\n' ' ')"
	# the worker's kill order: how long after the deadline it was made
	wait_for 10 "run $n: the worker ordered the render killed" \
		eval '[[ $(q "SELECT state FROM frameq.proc WHERE id = '"$proc"'") == killing ]]' || return 1
	lag=$(q "SELECT round(extract(epoch FROM kill_at - timeout_at)::numeric, 2) FROM frameq.proc WHERE id = $proc")
	is_true "$lag >= 0 && $lag <= 1.5" &&
		ok "run $n: the worker ordered it killed ${lag}s after its deadline (a round: 1 s + the round's own steps)" ||
		fail "run $n: kill order ${lag}s after the deadline"
	wait_for 20 "run $n ended" run_ended "$n" || return 1
	# the render is gone when its end is recorded: the supervisor reports
	# only after the whole process group is dead
	if proc_gone "$proc"; then
		ok "run $n: no process of the render is left once its run ended"
	else
		fail "run $n: left alive: $(proc_pids "$proc" | tr '\n' ' ')"
	fi
	for pid in $(sort -u "$T/work/pids.$proc"); do
		pid_of_proc "$pid" "$proc" && alive=$((alive + 1))
	done
	[[ $alive == 0 ]] && ok "run $n: the 3 pids it wrote down (shell, child, grandchild) are dead" ||
		fail "run $n: $alive of its pids alive"
	row=$(run_n "$n")
	IFS='|' read -r proc reason secs why sig <<<"$row"
	[[ $reason == timeout ]] && ok "run $n ended with reason timeout" || fail "run $n: reason '$reason' ($row)"
	[[ $why == "timeout: still running "*" s after its booking" ]] && ok "run $n: kill_reason '$why'" ||
		fail "run $n: kill_reason '$why'"
	[[ $sig == 9 ]] && ok "run $n: ended by SIGKILL (its tree ignores SIGTERM)" || fail "run $n: exit_signal '$sig'"
	is_true "$secs >= $LOW && $secs <= $BOUND" &&
		ok "run $n lasted ${secs}s from booking to end (within [$LOW, $BOUND])" ||
		fail "run $n lasted ${secs}s, not within [$LOW, $BOUND]"
}

check_run 1
# after the first timeout, the frame has used one of its retries
r=$(q "SELECT retries FROM frameq.frames WHERE job = $job AND frame_number = 1")
[[ $r -ge 1 ]] && ok "the timeout used up a retry (retries $r)" || fail "retries after the first timeout: $r"
check_run 2

wait_for 20 "the job finished" job_finished "$job"
[[ $(q "SELECT state || ' ' || retries FROM frameq.frames WHERE job = $job AND frame_number = 1") == 'dead 2' ]] &&
	ok "frame 1 is dead after its 2 timed-out runs (retries 2, max_retries 1)" ||
	fail "frame 1: $(q "SELECT state, retries FROM frameq.frames WHERE job = $job AND frame_number = 1")"
[[ $(q "SELECT count(*) FROM frameq.runs r JOIN frameq.frames f ON f.frame = r.frame
        WHERE f.job = $job AND f.frame_number = 1") == 2 ]] && ok "frame 1 ran exactly twice" ||
	fail "frame 1's runs: $(q "SELECT string_agg(reason, ' ') FROM frameq.runs r JOIN frameq.frames f ON f.frame = r.frame WHERE f.job = $job AND f.frame_number = 1")"
[[ $(q "SELECT f.state || ' ' || f.retries || ' ' || string_agg(r.reason || ':' || r.exit_status, ' ')
        FROM frameq.frames f JOIN frameq.runs r ON r.frame = f.frame
        WHERE f.job = $job AND f.frame_number = 2 GROUP BY f.state, f.retries") == 'succeeded 0 completed:0' ]] &&
	ok "frame 2, quicker than its timeout, succeeded in one run" ||
	fail "frame 2: $(q "SELECT state, retries FROM frameq.frames WHERE job = $job AND frame_number = 2")"
agent_log_has a "kill-order proc=.* source=heartbeat" && ok "the agent took the kill orders from heartbeat answers" ||
	fail "no kill-order line in the agent's log"
no_renders a && ok "no render of the host is left" || fail "renders left: $(render_pids a | tr '\n' ' ')"
check_clean
finish
