#!/usr/bin/env bash
# A forged kill notification kills nothing.
#
# Any role that can connect can NOTIFY any channel with any payload, and
# proc ids are no secret.  So a role with no frameq grant at all ("evil")
# sends the host's channel a well-formed kill order for the proc of a long
# render (sleep 30, max_retries 0, so one wrongful kill would end the frame
# dead), and then a flood of 1000 more.  The render must live on: its
# processes, its proc 'running', no retry used, no run ended.  The agent
# takes each notification as a hint only: it heartbeats, at most about 10
# times a second however many arrive, and every notification is followed
# by a heartbeat (the hints=N counts in the log add up).  Then a real
# kill_frame by the admin still stops the render within a second, through
# the kill order in the answer to the heartbeat the notification caused
# (the lease is 15 s: regular heartbeats are 5 s apart).
source "$(dirname "$0")/lib.sh"

start_cluster 15s
register_host a 2
q "CREATE ROLE evil LOGIN" >/dev/null
start_agent a

job=$(submit_job forged 1 "sleep 30" '{}' '{"max_retries": 0}') || die "submit failed"
wait_for 20 "the render runs" eval '[[ -n $(frame_proc $job 1) ]] && proc_running $(frame_proc $job 1)' || finish
p=$(frame_proc "$job" 1)
f=$(q "SELECT frame FROM frameq.frames WHERE job = $job")
pids=$(proc_pids "$p" | sort | tr '\n' ' ')
host_id=$(q "SELECT id FROM frameq.host WHERE name = '$(host_name a)'")
ok "proc $p runs (pids $pids) on host $host_id"
wait_for 10 "the agent listens" agent_log_has a "listening channel=frameq_host_$host_id" || finish

beats() { grep -c '^[^ ]* lease-renewed ' "$T/a.log"; }
hints_sum() { sed -n 's/^[^ ]* lease-renewed .* hints=\([0-9]*\)$/\1/p' "$T/a.log" | awk '{ s += $1 } END { print s + 0 }'; }
render_intact() {
	local what=$1 now_pids
	now_pids=$(proc_pids "$p" | sort | tr '\n' ' ')
	[[ -n $now_pids && $now_pids == "$pids" ]] && ok "$what: the render's processes live ($now_pids)" ||
		fail "$what: the render's processes were $pids, now '${now_pids}'"
	local st
	st=$(q "SELECT f.state || '/' || p.state || '/' || f.retries FROM frameq.frame f JOIN frameq.proc p ON p.frame = f.id WHERE f.id = $f")
	[[ $st == running/running/0 ]] && ok "$what: frame and proc running, no retry used" ||
		fail "$what: frame/proc/retries = '$st'"
	[[ $(q "SELECT count(*) FROM frameq.run WHERE frame = $f AND ended_at IS NOT NULL") == 0 ]] &&
		ok "$what: no run of the frame ended" || fail "$what: a run ended: $(q "SELECT reason, kill_reason FROM frameq.runs WHERE frame = $f")"
	if grep -q "kill-order proc=$p \|killing proc=$p " "$T/a.log"; then
		fail "$what: the agent took a kill order for proc $p: $(grep "proc=$p " "$T/a.log" | grep kill | head -n 3)"
	else
		ok "$what: no kill order for proc $p in the agent's log"
	fi
}

# ---- one forged order, as a role with no frameq grant
b0=$(beats)
h0=$(hints_sum)
r=$(sqlstate_as evil "NOTIFY frameq_host_$host_id, '{\"proc\": $p, \"reason\": \"x\"}'")
[[ $r == ok:* ]] || die "evil could not NOTIFY: $r"
wait_for 5 "a heartbeat answers the notification" eval '(( $(hints_sum) >= h0 + 1 ))'
agent_log_has a "kill-hint channel=frameq_host_$host_id" && ok "the notification was logged as a hint" ||
	fail "no kill-hint line"
b1=$(beats)
(( b1 - b0 <= 2 )) && ok "one notification: $((b1 - b0)) heartbeat(s)" || fail "one notification: $((b1 - b0)) heartbeats"
# the render would be gone within milliseconds if the payload were obeyed
# (t_kill_frame); give the old behaviour half a second to show
sleep 0.5
render_intact "after one forged order"

# ---- a flood: 1000 notifications, each its own transaction, 2 ms apart
# (so they arrive one by one over a few seconds, not in one read)
for i in $(seq 1 1000); do
	echo "SELECT pg_notify('frameq_host_$host_id', '{\"proc\": $p, \"reason\": \"flood $i\"}'), pg_sleep(0.002);"
done >"$T/flood.sql"
b0=$(beats)
h0=$(hints_sum)
t0=$(now)
psql -X -q -At -U evil -v ON_ERROR_STOP=1 -f "$T/flood.sql" >/dev/null || die "evil's flood failed"
t1=$(now)
dur=$(calc "$t1 - $t0")
# every notification gets a heartbeat after it: at most 0.1 s after the last
wait_for 5 "heartbeats answer all 1000 notifications" eval '(( $(hints_sum) >= h0 + 1000 ))' || finish
sleep 0.3
b1=$(beats)
n=$((b1 - b0))
# at most one per 100 ms, plus the one at the start, a regular one and slack
limit=$(awk -v d="$dur" 'BEGIN { printf "%d", d * 10 + 5 }')
note "flood of 1000 notifications in ${dur}s: $n heartbeats (limit $limit), hints counted $(( $(hints_sum) - h0 ))"
(( n <= limit )) && ok "the flood caused $n heartbeats in ${dur}s (at most ~10 a second)" ||
	fail "the flood caused $n heartbeats in ${dur}s (limit $limit)"
(( n >= 1 )) && ok "the flood was answered by heartbeats" || fail "no heartbeat answered the flood"
lines=$(grep -c ' kill-hint ' "$T/a.log")
(( lines <= limit + 2 )) && ok "the flood wrote $lines kill-hint lines, not 1000" || fail "$lines kill-hint lines"
render_intact "after the flood"

# ---- a real kill order still works, through the heartbeat it causes
# the worker sends the notification: it starts up to 5 s after the
# database exists (it retries until then)
wait_for 15 "the frameq worker runs" worker_up || finish
t0=$(now)
q "SELECT frameq.kill_frame($f, 'real kill')" >/dev/null
if wait_for 1 "the render gone within 1 s of kill_frame" proc_gone "$p"; then
	ok "the real kill stopped the render after $(calc "$(now) - $t0")s"
fi
agent_log_has a "kill-order proc=$p source=heartbeat" && ok "the kill order came in a heartbeat's answer" ||
	fail "no kill-order proc=$p source=heartbeat"
wait_for 5 "the frame dead" eval '[[ $(frame_state $job 1) == dead ]]' && ok "the frame is dead"
[[ $(q "SELECT reason || '/' || kill_reason FROM frameq.runs WHERE proc = $p") == "killed/real kill" ]] &&
	ok "its run was released as killed, for the real reason" ||
	fail "run: $(q "SELECT reason, kill_reason FROM frameq.runs WHERE proc = $p")"
check_clean
stop_agent a
[[ $AGENT_RC == 0 ]] || fail "agent exited $AGENT_RC"
finish
