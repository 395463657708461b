#!/usr/bin/env bash
# A render that goes silent is stopped as stalled (the layer's
# `timeout_no_output`, frameq 0.5.0): the agent reports each render's idle
# time in its heartbeats, the first heartbeat whose report shows it past
# the limit makes a kill order (in that heartbeat's own answer), and the
# run ends `stalled`, using up a retry.  A render that keeps writing for
# longer than the limit is not stalled (the negative control).
#
# Lease 3 s: heartbeats every second.  Layer timeout_no_output 3 s, job
# max_retries 0.  Frame 1 writes three lines, then stays alive without
# writing anything (a `sleep`).  Frame 2 writes a line every 0.5 s for
# 7 s (more than twice the limit) and exits 0.
#
# Frame 1's run must end, counted from its last output (its log file's
# modification time):
#   no earlier than the limit (3 s),
#   no later than the limit + 1 s (idle is reported in whole seconds and
#   must be above the limit) + a heartbeat interval (1 s) + 1.5 s for the
#   kill (SIGTERM ends a `sleep`) and the complete on a loaded machine.
# Its render is gone once the run ended; frame 1 is dead with one retry
# used; frame 2 succeeded in one run that lasted longer than the limit.
source "$(dirname "$0")/lib.sh"

start_cluster 3s
register_host a 2
need_reports
start_agent a

LIMIT=3
BOUND=$(awk "BEGIN { print $LIMIT + 1 + 1 + 1.5 }")
cat >"$T/silent.sh" <<'SH'
#!/bin/sh
if [ "$FRAMEQ_FRAME_NUMBER" = 2 ]; then
	i=0
	while [ $i -lt 14 ]; do echo "busy $i"; sleep 0.5; i=$((i + 1)); done
	exit 0
fi
for i in 1 2 3; do echo "line $i"; sleep 0.2; done
exec sleep 300
SH
chmod 755 "$T/silent.sh"

job=$(submit_job silent 1-2 "exec $T/silent.sh" "{\"timeout_no_output\": $LIMIT}" '{"max_retries": 0}') ||
	die "submit failed"
wait_for 20 "both renders run" eval '[[ -n $(frame_proc $job 1) && -n $(frame_proc $job 2) ]]' || finish
p1=$(frame_proc "$job" 1)
p2=$(frame_proc "$job" 2)

# frame 1 is silent but alive, and the server has its last line
wait_for 10 "frame 1's last line reported" \
	eval '[[ $(q "SELECT last_line FROM frameq.frames WHERE job = $job AND frame_number = 1") == "line 3" ]]' &&
	ok "frame 1 reported its last line before going silent"
wait_for 10 "frame 1 silent for 2 s" eval '[[ -n $(q "SELECT 1 FROM frameq.frames WHERE job = $job AND frame_number = 1 AND last_output_at < now() - interval '"'2 s'"'") ]]'
proc_running "$p1" && ok "frame 1's render is alive while silent" || fail "frame 1's render is gone early"

run_ended() { [[ -n $(q "SELECT reason FROM frameq.runs WHERE proc = $1") ]]; }
wait_for 20 "frame 1's run ended" run_ended "$p1" || finish
proc_gone "$p1" && ok "frame 1's render is gone once its run ended" ||
	fail "frame 1 left: $(proc_pids "$p1" | tr '\n' ' ')"
IFS='|' read -r reason why ended <<<"$(q "SELECT reason, kill_reason, extract(epoch FROM ended_at) FROM frameq.runs WHERE proc = $p1")"
[[ $reason == stalled ]] && ok "frame 1's run ended with reason stalled" || fail "frame 1's run: reason '$reason'"
n=$(sed -n 's/^stalled: no output for \([0-9]*\) s, limit '"$LIMIT"' s$/\1/p' <<<"$why")
[[ -n $n && $n -gt $LIMIT ]] && ok "kill_reason '$why'" || fail "kill_reason '$why'"
log1=$(ls "$T"/a/log/*."$p1".log)
last=$(stat -c %.9Y "$log1")
secs=$(calc "$ended - $last")
is_true "$secs >= $LIMIT && $secs <= $BOUND" &&
	ok "frame 1's run ended ${secs}s after its last output (within [$LIMIT, $BOUND])" ||
	fail "frame 1's run ended ${secs}s after its last output, not within [$LIMIT, $BOUND]"
agent_log_has a "kill-order proc=$p1 source=heartbeat" && ok "the order came in a heartbeat's answer" ||
	fail "no kill-order line for proc $p1"

wait_for 20 "the job finished" job_finished "$job"
[[ $(q "SELECT state || ' ' || retries FROM frameq.frames WHERE job = $job AND frame_number = 1") == 'dead 1' ]] &&
	ok "frame 1 is dead, its one retry used (max_retries 0)" ||
	fail "frame 1: $(q "SELECT state, retries FROM frameq.frames WHERE job = $job AND frame_number = 1")"

# the negative control: writing all along, for more than twice the limit
IFS='|' read -r reason st why secs <<<"$(q "SELECT reason, exit_status, coalesce(kill_reason, ''),
	round(extract(epoch FROM ended_at - started_at)::numeric, 2) FROM frameq.runs WHERE proc = $p2")"
[[ $reason == completed && $st == 0 && -z $why ]] && ok "frame 2, writing every 0.5 s, was not stalled (completed, exit 0)" ||
	fail "frame 2's run: reason '$reason' exit '$st' kill_reason '$why'"
is_true "$secs > 2 * $LIMIT" && ok "frame 2 ran ${secs}s, more than twice the limit" || fail "frame 2 ran only ${secs}s"
[[ $(q "SELECT state || ' ' || retries || ' ' || attempts FROM frameq.frames WHERE job = $job AND frame_number = 2") == 'succeeded 0 1' ]] &&
	ok "frame 2 succeeded in one run" ||
	fail "frame 2: $(q "SELECT state, retries, attempts FROM frameq.frames WHERE job = $job AND frame_number = 2")"
no_renders a && ok "no render of the host is left" || fail "renders left: $(render_pids a | tr '\n' ' ')"
check_clean
finish
