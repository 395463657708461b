#!/usr/bin/env bash
# A restarted agent kills what its predecessor left before it attaches, and
# reports what ended while no agent was running.
#
# Lease 6 s, so the predecessor's renders would live for another 5 s.
#   1. Agent a runs two long frames and is SIGKILLed; a new agent a starts
#      at once on the same state directory.  The host's epoch must never
#      move on (attach) while one of those renders is alive; the renders are
#      killed, attach turns their procs into kill orders, the first
#      heartbeat confirms them, and the frames re-run (no retry used).
#   2. A second agent on the same state directory is refused.
#   3. Agent a runs a frame and is SIGKILLed; the render ends (as told) while
#      no agent runs (its supervisor writes the result); the new agent reports
#      it, before attaching, and the frame succeeds with that one run.
source "$(dirname "$0")/lib.sh"

start_cluster 6s
register_host a 2
start_agent a

# ---- 1
body="if [ -e $T/w/first.#FRAME# ]; then echo rerun > $T/w/out.#FRAME#; else touch $T/w/first.#FRAME#; sleep 60; fi"
job=$(submit_job restart 1-2 "$(witness "$body")") || die "submit failed"
wait_for 20 "both frames running" eval '[[ -e $T/w/first.1 && -e $T/w/first.2 ]]' || finish
p1=$(frame_proc "$job" 1)
p2=$(frame_proc "$job" 2)
wait_for 5 "a heartbeat listed both procs" eval 'agent_log_has a "lease-renewed .*running={.*$p1" && agent_log_has a "lease-renewed .*running={.*$p2"' || finish
e0=$(host_epoch a)

kill -KILL "${AGENT_PID[a]}"
wait "${AGENT_PID[a]}" 2>/dev/null
start_agent a
# epoch first, then the renders: an epoch that moved on while a render is
# still alive afterwards means attach came before the kill
violation=0
end=$(calc "$(now) + 15")
while is_true "$(now) < $end"; do
	e=$(host_epoch a)
	if [[ $e -gt $e0 ]] && { proc_running "$p1" || proc_running "$p2"; }; then
		violation=1
		break
	fi
	[[ $e -gt $e0 ]] && break
	sleep 0.02
done
[[ $violation == 0 ]] && ok "no leftover render was alive when the new agent attached" ||
	fail "the new agent attached while a leftover render was alive"
[[ $(host_epoch a) -gt $e0 ]] || fail "the new agent did not attach within 15 s"
l_kill=$(grep -n "killed proc=$p1 .*leftover=yes" "$T/a.log" | cut -d: -f1)
l_att=$(grep -n " attached " "$T/a.log" | tail -n1 | cut -d: -f1)
[[ -n $l_kill && -n $l_att && $l_kill -lt $l_att ]] && ok "its log: leftover killed, then attached" ||
	fail "log order: leftover kill at line ${l_kill:-none}, attach at ${l_att:-none}"

wait_for 30 "the frames re-ran" job_finished "$job" || finish
[[ $(q "SELECT string_agg(reason || '/' || coalesce(kill_reason, '-'), ',') FROM frameq.runs WHERE proc IN ($p1, $p2)") == "killed/agent re-attached,killed/agent re-attached" ]] &&
	ok "the leftovers' procs were released as killed (agent re-attached)" ||
	fail "leftover runs: $(q "SELECT string_agg(reason || '/' || coalesce(kill_reason, '-'), ',') FROM frameq.runs WHERE proc IN ($p1, $p2)")"
[[ $(q "SELECT string_agg(attempts || '/' || retries, ',' ORDER BY frame_number) FROM frameq.frames WHERE job = $job") == 2/0,2/0 ]] &&
	ok "each frame re-ran once, no retry used" ||
	fail "attempts/retries: $(q "SELECT string_agg(attempts || '/' || retries, ',' ORDER BY frame_number) FROM frameq.frames WHERE job = $job")"
no_violations

# ---- 2
"$AGENT_BIN" --conninfo "$(CONNINFO_DEFAULT a)" --host "$(host_name a)" --token-file "$T/a.token" \
	--state-dir "$T/a/state" --log-dir "$T/a/log" >"$T/second.log" 2>&1 </dev/null
rc=$?
[[ $rc == 2 ]] && grep -q "another agent is using" "$T/second.log" &&
	ok "a second agent on the same state directory is refused" ||
	fail "second agent: exit $rc, $(cat "$T/second.log")"

# ---- 3
job2=$(submit_job short 1 "while [ ! -e $T/w/go ]; do sleep 0.05; done; echo done > $T/w/short.out") || die "submit failed"
wait_for 20 "the short frame running" eval '[[ -n $(frame_proc $job2 1) ]]' || finish
p3=$(frame_proc "$job2" 1)
wait_for 5 "a heartbeat listed it" agent_log_has a "lease-renewed .*running={.*$p3" || finish
kill -KILL "${AGENT_PID[a]}"
wait "${AGENT_PID[a]}" 2>/dev/null
touch "$T/w/go"
wait_for 5 "the render ended and its result was written" test -e "$T/a/state/result.$p3" || finish
ok "the supervisor wrote the result while no agent ran"
start_agent a
wait_for 15 "the new agent reported it" agent_log_has a "reported proc=$p3 .*answer=accepted" || finish
l_rep=$(grep -n "reported proc=$p3 " "$T/a.log" | cut -d: -f1)
l_att=$(grep -n " attached " "$T/a.log" | tail -n1 | cut -d: -f1)
[[ $l_rep -lt $l_att ]] && ok "reported before attaching" || fail "reported at line $l_rep, attached at line $l_att"
wait_for 5 "the job finished" job_finished "$job2" || finish
[[ $(q "SELECT attempts || '/' || state FROM frameq.frames WHERE job = $job2") == 1/succeeded ]] &&
	ok "the frame succeeded with its one run" ||
	fail "frame: $(q "SELECT attempts || '/' || state FROM frameq.frames WHERE job = $job2")"
state_clean "$T/a/state" && ok "the state directory is clean" ||
	fail "state directory: $(ls "$T/a/state")"
check_clean
finish
