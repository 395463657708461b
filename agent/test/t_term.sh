#!/usr/bin/env bash
# SIGTERM: stop booking, then let the running frames finish (default) or
# kill them (--kill-on-term, or a second SIGTERM), report, exit 0.
#
#   1. finish: two frames run (they wait for a go file), two more wait.
#      After SIGTERM the agent books nothing more and keeps running until
#      the go; then it reports both, exits 0, and the two others are still
#      waiting.
#   2. --kill-on-term: the renders are killed at once, the agent exits 0,
#      and its last heartbeats release the frames (no retry used): nothing
#      is left on the host.
#   3. finish, then a second SIGTERM: the renders are killed, exit 0.
source "$(dirname "$0")/lib.sh"

start_cluster 3s
register_host a 2
running() { q "SELECT count(*) FROM frameq.frames WHERE job = $1 AND state = 'running'"; }
host_procs() { q "SELECT running FROM frameq.hosts WHERE name = '$(host_name a)'"; }

# ---- 1
start_agent a
job=$(submit_job finish 1-4 "while [ ! -e $T/w/go ]; do sleep 0.05; done; echo done > $T/w/out.#FRAME#") || die "submit failed"
wait_for 10 "two frames running" eval '[[ $(render_count a) -ge 2 ]]' || finish
kill -TERM "${AGENT_PID[a]}"
wait_for 5 "the agent says it is stopping" agent_log_has a " stopping .*mode=finish" || finish
# a few reserve rounds (0.2 s) and a heartbeat (1 s): still running, nothing new
end=$(calc "$(now) + 1.5")
while is_true "$(now) < $end"; do
	agent_alive a || break
	sleep 0.1
done
agent_alive a && ok "the agent waits for its running frames" || fail "the agent exited with frames running"
[[ $(render_count a) -ge 2 ]] || fail "renders were killed in finish mode"
[[ $(q "SELECT count(*) FROM frameq.runs WHERE job = $job") == 2 ]] && ok "nothing booked after SIGTERM" ||
	fail "$(q "SELECT count(*) FROM frameq.runs WHERE job = $job") runs after SIGTERM"
touch "$T/w/go"
wait_agent_exit a 10
[[ $AGENT_RC == 0 ]] && ok "exit 0 once the frames finished" || fail "exit $AGENT_RC"
unset "AGENT_PID[a]"
[[ $(frames_in_state "$job" succeeded) == 2 && $(frames_in_state "$job" waiting) == 2 ]] &&
	ok "the two running frames succeeded, two still wait" ||
	fail "frames: $(q "SELECT string_agg(frame_number || ':' || state, ' ') FROM frameq.frames WHERE job = $job")"
q "SELECT frameq.kill_job($job, 'done with it')" >/dev/null
rm -f "$T/w/go"

# ---- 2
start_agent a --kill-on-term
job=$(submit_job kill 1-2 "sleep 60") || die "submit failed"
wait_for 10 "two frames running" eval '[[ $(render_count a) -ge 2 ]]' || finish
p1=$(frame_proc "$job" 1)
p2=$(frame_proc "$job" 2)
kill -TERM "${AGENT_PID[a]}"
t0=$(now)
wait_for 3 "renders killed" eval 'proc_gone $p1 && proc_gone $p2' && ok "renders killed $(calc "$(now) - $t0")s after SIGTERM"
wait_agent_exit a 10
[[ $AGENT_RC == 0 ]] && ok "exit 0 after killing" || fail "exit $AGENT_RC"
unset "AGENT_PID[a]"
[[ $(host_procs) == 0 && $(frames_in_state "$job" waiting) == 2 ]] &&
	ok "the agent's last heartbeats released both frames" ||
	fail "after --kill-on-term: host procs $(host_procs), frames $(q "SELECT string_agg(frame_number || ':' || state, ' ') FROM frameq.frames WHERE job = $job")"
[[ $(q "SELECT string_agg(reason, ',') FROM frameq.runs WHERE proc IN ($p1, $p2)") == lost_by_agent,lost_by_agent &&
	$(q "SELECT sum(retries) FROM frameq.frames WHERE job = $job") == 0 ]] &&
	ok "released as lost_by_agent, no retry used" ||
	fail "runs: $(q "SELECT string_agg(reason, ',') FROM frameq.runs WHERE proc IN ($p1, $p2)")"
agent_log_has a "reported proc=$p1" && fail "a killed frame was reported as finished"

# ---- 3
start_agent a
wait_for 10 "two frames running" eval '[[ $(render_count a) -ge 2 ]]' || finish
kill -TERM "${AGENT_PID[a]}"
wait_for 5 "the agent says it is stopping" eval '[[ $(grep -c " stopping .*mode=finish" "$T/a.log") -ge 2 ]]' || finish
[[ $(render_count a) -ge 2 ]] || fail "renders were killed by the first SIGTERM"
kill -TERM "${AGENT_PID[a]}"
wait_for 3 "renders killed by the second SIGTERM" no_renders a && ok "a second SIGTERM kills the renders"
wait_agent_exit a 10
[[ $AGENT_RC == 0 ]] && ok "exit 0" || fail "exit $AGENT_RC"
unset "AGENT_PID[a]"
[[ $(host_procs) == 0 ]] && ok "nothing left on the host" || fail "host procs: $(host_procs)"
check_clean
finish
