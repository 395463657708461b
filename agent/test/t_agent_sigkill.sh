#!/usr/bin/env bash
# An agent killed with SIGKILL leaves no render alive after its lease
# deadline, and its frames are re-run once.
#
# Lease 3 s (the server gives up 3 * 1.05 + 2 = 5.15 s after the last
# renewal), kill grace 1 s.  Agent a runs two long frames; it is SIGKILLed.
# Its renders outlive it at first (the supervisors keep the last deadline),
# and are all gone within lease_ttl (3 s) of the kill, before the server
# releases the frames (host_lost).  Agent b then runs each frame once more
# (quickly: a re-run finds its marker), so each frame has exactly two runs,
# uses no retry, and the witness saw no overlap.  Agent a, restarted on the
# same state directory, finds the fenced runs, reports none of them, and
# attaches again.
source "$(dirname "$0")/lib.sh"

start_cluster 3s
register_host a 2
register_host b 2
start_agent a

body="if [ -e $T/w/first.#FRAME# ]; then echo rerun > $T/w/out.#FRAME#; else touch $T/w/first.#FRAME#; sleep 60; fi"
job=$(submit_job sigkill 1-2 "$(witness "$body")") || die "submit failed"
wait_for 20 "both frames running on a" eval '[[ $(render_count a) -ge 2 && -e $T/w/first.1 && -e $T/w/first.2 ]]' || finish
p1=$(frame_proc "$job" 1)
p2=$(frame_proc "$job" 2)
wait_for 5 "a heartbeat listed both procs" eval 'agent_log_has a "lease-renewed .*running={.*$p1" && agent_log_has a "lease-renewed .*running={.*$p2"' || finish

kill -KILL "${AGENT_PID[a]}"
t_kill=$(now)
wait "${AGENT_PID[a]}" 2>/dev/null
unset "AGENT_PID[a]"
if proc_running "$p1" && proc_running "$p2"; then
	ok "the renders outlive the agent"
else
	fail "a render died with the agent"
fi

wait_for 4 "renders gone within lease_ttl + 1 s of the kill" eval 'proc_gone $p1 && proc_gone $p2' || finish
t_dead=$(now)
el=$(calc "$t_dead - $t_kill")
is_true "$el <= 3.3" && ok "renders gone ${el}s after the agent died (lease_ttl 3 s)" ||
	fail "renders lived ${el}s after the agent died (lease_ttl 3 s)"
[[ $(q "SELECT count(*) FROM frameq.runs WHERE proc IN ($p1, $p2) AND ended_at IS NULL") == 2 ]] &&
	ok "the server still holds both frames when the renders are dead" ||
	fail "the server released a frame before the renders were dead"

start_agent b
wait_for 30 "the job finished" job_finished "$job" || finish
[[ $(q "SELECT string_agg(reason, ',' ORDER BY started_at) FROM frameq.runs WHERE job = $job AND frame = (SELECT frame FROM frameq.frames WHERE job = $job AND frame_number = 1)") == host_lost,completed ]] &&
	ok "frame 1: one host_lost run, then one completed" ||
	fail "frame 1 runs: $(q "SELECT string_agg(host || ':' || reason, ',' ORDER BY started_at) FROM frameq.runs WHERE job = $job AND frame = (SELECT frame FROM frameq.frames WHERE job = $job AND frame_number = 1)")"
[[ $(q "SELECT string_agg(attempts || '/' || retries, ',' ORDER BY frame_number) FROM frameq.frames WHERE job = $job") == 2/0,2/0 ]] &&
	ok "each frame ran twice (re-run once) and used no retry" ||
	fail "attempts/retries: $(q "SELECT string_agg(attempts || '/' || retries, ',' ORDER BY frame_number) FROM frameq.frames WHERE job = $job")"
released=$(q "SELECT extract(epoch FROM min(ended_at)) FROM frameq.runs WHERE proc IN ($p1, $p2)")
is_true "$t_dead < $released" && ok "released $(calc "$released - $t_dead")s after the renders were dead" ||
	fail "released at $released, renders dead at $t_dead"
[[ $(cat "$T"/w/out.1 "$T"/w/out.2 2>/dev/null | grep -c rerun) == 2 ]] && ok "both re-runs wrote their output" || fail "outputs missing"
no_violations

# agent a again, on the same state directory
start_agent a
wait_for 15 "agent a attached again" eval '[[ $(grep -c " attached " "$T/a.log") -ge 2 ]]' || finish
for p in $p1 $p2; do
	agent_log_has a "killed proc=$p .*by=fence" && ok "restarted agent found fenced run $p" ||
		fail "restarted agent did not find fenced run $p"
	agent_log_has a "reported proc=$p" && fail "restarted agent reported fenced run $p"
done
state_clean "$T/a/state" && ok "the state directory is clean" ||
	fail "state directory: $(ls "$T/a/state")"
check_clean
finish
