#!/usr/bin/env bash
# kill_frame stops a render within a second.
#
# The lease is 15 s, so heartbeats come every 5 s: a kill within a second
# can only have come through the host's kill channel (LISTEN): the
# notification, a hint, makes the agent heartbeat at once, and the kill
# order in that heartbeat's answer stops the render.  Frame 1 is a
# plain `sleep`; it must be gone within 1 s of kill_frame's commit, and the
# frame must end dead with a run released as killed.  Frame 2 ignores
# SIGTERM (so do its children): it must be gone within the kill grace (1 s)
# plus 1 s, by SIGKILL to its process group.  Frame 3 keeps running through
# all this (a kill hits only its own render), and completes.  Then frame 4's
# supervisor is SIGKILLed: the agent kills the orphaned render itself (its
# process group), and the frame is released and re-run without a retry.
source "$(dirname "$0")/lib.sh"

start_cluster 15s
register_host a 4
start_agent a

cmd='case #FRAME# in
1) sleep 60 ;;
2) trap "" TERM; while :; do sleep 0.1; done ;;
3) while [ ! -e release.3 ]; do sleep 0.05; done; echo done > out.3 ;;
4) if [ -e first.4 ]; then echo rerun > out.4; else touch first.4; sleep 60; fi ;;
esac'
job=$(submit_job kills 1-4 "$cmd") || die "submit failed"

wait_for 20 "three renders running" eval '[[ -n $(frame_proc $job 1) && -n $(frame_proc $job 2) && -n $(frame_proc $job 3) ]] && proc_running $(frame_proc $job 1) && proc_running $(frame_proc $job 2) && proc_running $(frame_proc $job 3)' || finish
p1=$(frame_proc "$job" 1)
p2=$(frame_proc "$job" 2)
p3=$(frame_proc "$job" 3)
ok "three renders running"
# wait for the first heartbeat after the bookings, so the next is ~10 s away
wait_for 15 "a heartbeat listed the three procs" agent_log_has a "lease-renewed .*running={.*$p1" || finish

f1=$(q "SELECT frame FROM frameq.frames WHERE job = $job AND frame_number = 1")
t0=$(now)
q "SELECT frameq.kill_frame($f1, 'test kill')" >/dev/null
if wait_for 1 "frame 1's render gone within 1 s of kill_frame" proc_gone "$p1"; then
	ok "frame 1's render gone after $(calc "$(now) - $t0")s"
fi
wait_for 5 "frame 1 dead" eval '[[ $(frame_state $job 1) == dead ]]' && ok "frame 1 is dead"
[[ $(q "SELECT reason FROM frameq.runs WHERE proc = $p1") == killed ]] && ok "its run was released as killed" ||
	fail "run of frame 1: $(q "SELECT reason, kill_reason FROM frameq.runs WHERE proc = $p1")"
# the notification was only a hint: the order came in the heartbeat it caused
agent_log_has a "kill-hint channel=frameq_host_" && ok "the notification was taken as a hint" ||
	fail "no kill-hint in the agent's log"
agent_log_has a "kill-order proc=$p1 source=heartbeat" && ok "the kill order came in a heartbeat's answer" ||
	fail "no kill order from a heartbeat in the agent's log"

f2=$(q "SELECT frame FROM frameq.frames WHERE job = $job AND frame_number = 2")
t0=$(now)
q "SELECT frameq.kill_frame($f2, 'stubborn')" >/dev/null
if wait_for 2 "frame 2 (ignores SIGTERM) gone within the grace + 1 s" proc_gone "$p2"; then
	el=$(calc "$(now) - $t0")
	is_true "$el >= 0.9" && ok "frame 2 died by SIGKILL after the grace (${el}s)" ||
		fail "frame 2 died after ${el}s, before the kill grace: was it SIGKILLed at once?"
fi
wait_for 5 "frame 2 dead" eval '[[ $(frame_state $job 2) == dead ]]' && ok "frame 2 is dead"
[[ $(q "SELECT exit_signal FROM frameq.runs WHERE proc = $p2") == 9 ]] && ok "frame 2's run ended by signal 9" ||
	fail "frame 2's run: $(q "SELECT exit_status, exit_signal FROM frameq.runs WHERE proc = $p2")"

proc_running "$p3" && ok "frame 3 still runs" || fail "frame 3 was hit too"
touch "$T/work/release.3"
wait_for 10 "frame 3 succeeded" eval '[[ $(frame_state $job 3) == succeeded ]]' && ok "frame 3 succeeded"
wait_for 10 "frame 4 running" eval '[[ -e $T/work/first.4 && -n $(frame_proc $job 4) ]] && proc_running $(frame_proc $job 4)' || finish
p4=$(frame_proc "$job" 4)
sup=$(sed -n 's/^supervisor_pid=//p' "$T/a/state/run.$p4")
[[ -n $sup ]] || die "no supervisor pid for frame 4"
kill -KILL "$sup"
t0=$(now)
wait_for 3 "frame 4's orphaned render killed" proc_gone "$p4" && ok "the agent killed frame 4's orphaned render $(calc "$(now) - $t0")s after its supervisor died"
wait_for 10 "frame 4 re-ran" eval '[[ $(frame_state $job 4) == succeeded ]]' || finish
[[ $(q "SELECT attempts || '/' || retries FROM frameq.frames WHERE job = $job AND frame_number = 4") == 2/0 &&
	$(q "SELECT reason FROM frameq.runs WHERE proc = $p4") == lost_by_agent ]] &&
	ok "frame 4 was released (lost_by_agent) and re-ran without a retry" ||
	fail "frame 4: $(q "SELECT attempts || '/' || retries FROM frameq.frames WHERE job = $job AND frame_number = 4") run $(q "SELECT reason FROM frameq.runs WHERE proc = $p4")"
check_clean
stop_agent a
[[ $AGENT_RC == 0 ]] || fail "agent exited $AGENT_RC"
finish
