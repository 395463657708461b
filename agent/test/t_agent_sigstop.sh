#!/usr/bin/env bash
# An agent paused with SIGSTOP while its renders run: the supervisors kill
# the renders before the lease margin ends, and no frame runs twice.
#
# Lease 3 s, kill grace 1 s: a supervisor sends SIGTERM at (last renewal
# sent) + 2 s and SIGKILL at + 3 s, while the server releases the frames
# only after 3 * 1.05 + 2 = 5.15 s.  Agent a runs two long frames (each
# holding a per-frame flock for its whole life, the witness) and is
# SIGSTOPped; agent b is started and waits for work.  The renders must be
# gone within lease_ttl of the stop and before the server's release; b
# re-runs both frames, and no render ever found its frame's lock taken.
# Then a gets SIGCONT: it learns that its lease is gone, attaches again
# without reporting the fenced runs (no retry used), and works again.
source "$(dirname "$0")/lib.sh"

start_cluster 3s
register_host a 2
register_host b 2
start_agent a

body="if [ -e $T/w/first.#FRAME# ]; then echo rerun > $T/w/out.#FRAME#; else touch $T/w/first.#FRAME#; sleep 60; fi"
job=$(submit_job sigstop 1-2 "$(witness "$body")") || die "submit failed"
wait_for 20 "both frames running on a" eval '[[ -e $T/w/first.1 && -e $T/w/first.2 ]]' || finish
p1=$(frame_proc "$job" 1)
p2=$(frame_proc "$job" 2)
wait_for 5 "a heartbeat listed both procs" eval 'agent_log_has a "lease-renewed .*running={.*$p1" && agent_log_has a "lease-renewed .*running={.*$p2"' || finish

kill -STOP "${AGENT_PID[a]}"
t_stop=$(now)
start_agent b

wait_for 4 "renders gone within lease_ttl + 1 s of the stop" eval 'proc_gone $p1 && proc_gone $p2' || finish
t_dead=$(now)
el=$(calc "$t_dead - $t_stop")
is_true "$el <= 3.3" && ok "the supervisors killed the renders ${el}s after the agent stopped (lease_ttl 3 s)" ||
	fail "renders lived ${el}s after the agent stopped"
[[ $(q "SELECT count(*) FROM frameq.runs WHERE proc IN ($p1, $p2) AND ended_at IS NULL") == 2 ]] &&
	ok "the server still holds both frames when the renders are dead" ||
	fail "the server released a frame before the renders were dead"
grep -q "fenced proc=$p1 " "$T/a.log" && grep -q "fenced proc=$p2 " "$T/a.log" &&
	ok "both supervisors logged the fence" || fail "no fence logged"

wait_for 30 "b re-ran both frames" job_finished "$job" || finish
released=$(q "SELECT extract(epoch FROM min(ended_at)) FROM frameq.runs WHERE proc IN ($p1, $p2)")
is_true "$t_dead < $released" && ok "released $(calc "$released - $t_dead")s after the renders were dead" ||
	fail "released at $released, renders dead at $t_dead"
[[ $(q "SELECT string_agg(reason, ',') FROM frameq.runs WHERE proc IN ($p1, $p2)") == host_lost,host_lost ]] &&
	ok "a's runs ended host_lost" || fail "a's runs: $(q "SELECT string_agg(reason, ',') FROM frameq.runs WHERE proc IN ($p1, $p2)")"
[[ $(q "SELECT string_agg(attempts || '/' || retries, ',' ORDER BY frame_number) FROM frameq.frames WHERE job = $job") == 2/0,2/0 ]] &&
	ok "each frame re-ran once, no retry used" ||
	fail "attempts/retries: $(q "SELECT string_agg(attempts || '/' || retries, ',' ORDER BY frame_number) FROM frameq.frames WHERE job = $job")"
no_violations

kill -CONT "${AGENT_PID[a]}"
wait_for 10 "a noticed its lease was lost" agent_log_has a "lease-lost" || finish
wait_for 10 "a attached again" eval '[[ $(grep -c " attached " "$T/a.log") -ge 2 ]]' || finish
ok "a lost its lease and attached again"
for p in $p1 $p2; do
	agent_log_has a "reported proc=$p" && fail "a reported its fenced run $p"
done
job2=$(submit_job after 1-6 "sleep 0.3; echo ok > $T/w/after.#FRAME#") || die "submit failed"
wait_for 30 "the second job finished" job_finished "$job2" || finish
[[ $(q "SELECT count(*) FROM frameq.runs WHERE job = $job2 AND host = '$(host_name a)'") -gt 0 ]] &&
	ok "a runs frames again" || fail "a ran none of the second job"
no_violations
check_clean
finish
