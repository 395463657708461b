#!/usr/bin/env bash
# A server restart in the middle of a job loses no frame and no completion.
#
# Lease 10 s (the restarts take about a second, well inside it).  Two agents
# run a job of 40 frames of 0.4 s each (witnessed).  A quarter of the way in
# the server is restarted (pg_ctl restart -m fast: every session is
# terminated); half-way it crashes (-m immediate) and stays down until
# renders have ended on both hosts while the agents could not connect; then
# it starts again (crash recovery).  Meanwhile the agents must not spin.  The agents reconnect and carry on; the
# reports of the renders that ended during the outage are sent then.  Afterwards every frame succeeded with exactly one run (none
# lost, none re-run because a report went missing), every run is recorded
# as completed, no frame ran twice, both agents saw the connection drop, and
# check() is clean.
#
# Then a report cut off in flight: a frame ends while another session holds
# its proc row locked, so the agent's complete() (or, from frameq 0.6.0,
# complete_many()) waits; the agent's session
# is terminated while it waits (the answer is lost); the agent reconnects,
# sends the report again, and the frame succeeds with its one run.
source "$(dirname "$0")/lib.sh"

start_cluster 10s
register_host a 2
register_host b 2
start_agent a
start_agent b

job=$(submit_job restart 1-40 "$(witness "sleep 0.4; echo done > $T/w/out.#FRAME#")") || die "submit failed"
succeeded() { [[ $(frames_in_state "$job" succeeded) -ge $1 ]]; }

wait_for 30 "10 frames done" succeeded 10 || finish
cluster_restart >/dev/null 2>&1 || die "restart failed"
ok "server restarted (fast) with $(frames_in_state "$job" succeeded) frames done"
wait_for 30 "20 frames done" succeeded 20 || finish
done_before=$(frames_in_state "$job" succeeded)
la=$(wc -l <"$T/a.log")
lb=$(wc -l <"$T/b.log")
_frameq_pg_ctl -m immediate stop >/dev/null 2>&1 || die "crash failed"
ok "server crashed with $done_before frames done"
# renders end while the server is down: their reports must wait
ended_offline() {
	tail -n +"$((la + 1))" "$T/a.log" | grep -q " connect-failed " &&
		tail -n +"$((la + 1))" "$T/a.log" | grep -q " finished " &&
		tail -n +"$((lb + 1))" "$T/b.log" | grep -q " connect-failed " &&
		tail -n +"$((lb + 1))" "$T/b.log" | grep -q " finished "
}
wait_for 20 "renders ended on both hosts during the outage" ended_offline || finish
# with reports waiting and no server, the agents wait (with backoff), not spin:
# their CPU time over 2 s of outage (a measurement window, not a race)
cpu() { awk '{ print $14 + $15 }' "/proc/${AGENT_PID[$1]}/stat"; }
ca=$(cpu a)
cb=$(cpu b)
sleep 2
da=$(($(cpu a) - ca))
db=$(($(cpu b) - cb))
[[ $da -lt 30 && $db -lt 30 ]] && ok "idle during the outage (CPU ticks in 2 s: $da, $db)" ||
	fail "agents busy during the outage: $da and $db CPU ticks in 2 s"
offline=$( (tail -n +"$((la + 1))" "$T/a.log"; tail -n +"$((lb + 1))" "$T/b.log") |
	sed -n 's/.* finished proc=\([0-9]*\) .*/\1/p')
cluster_start_existing >/dev/null 2>&1 || die "start after the crash failed"
ok "server started again (crash recovery); $(echo $offline | wc -w) reports were waiting"

wait_for 60 "the job finished" job_finished "$job" || finish
[[ $(frames_in_state "$job" succeeded) == 40 ]] && ok "all 40 frames succeeded" ||
	fail "frames: $(q "SELECT string_agg(frame_number || ':' || state, ' ') FROM frameq.frames WHERE job = $job AND state <> 'succeeded'")"
[[ $(q "SELECT count(*) FROM frameq.frames WHERE job = $job AND attempts = 1 AND retries = 0") == 40 ]] &&
	ok "every frame ran exactly once" ||
	fail "frames run more than once: $(q "SELECT string_agg(frame_number || ':' || attempts, ' ') FROM frameq.frames WHERE job = $job AND attempts <> 1")"
[[ $(q "SELECT count(*) FROM frameq.runs WHERE job = $job AND reason = 'completed' AND exit_status = 0") == 40 ]] &&
	ok "40 completed runs recorded" ||
	fail "runs: $(q "SELECT string_agg(reason || ':' || count, ' ') FROM (SELECT reason, count(*) FROM frameq.runs WHERE job = $job GROUP BY reason) s")"
for p in $offline; do
	[[ $(q "SELECT reason FROM frameq.runs WHERE proc = $p") == completed ]] ||
		fail "the report of $p (ended during the outage) was lost"
done
ok "every report held back by the outage arrived"
n=$(ls "$T"/w/out.* 2>/dev/null | wc -l)
[[ $n == 40 ]] && ok "40 outputs" || fail "$n outputs"
for a in a b; do
	[[ $(grep -c " connected " "$T/$a.log") -ge 3 ]] && ok "agent $a reconnected after both restarts" ||
		fail "agent $a connected $(grep -c " connected " "$T/$a.log") times"
	grep -q "lease-lost" "$T/$a.log" && fail "agent $a lost its lease"
done
no_violations

# ---- a report cut off in flight
stop_agent b
job2=$(submit_job inflight 1 "while [ ! -e $T/w/go ]; do sleep 0.05; done") || die "submit failed"
wait_for 10 "the frame running" eval '[[ -n $(frame_proc $job2 1) ]]' || finish
p=$(frame_proc "$job2" 1)
psql -X -q -At -c "BEGIN" -c "SELECT 1 FROM frameq.proc WHERE id = $p FOR UPDATE" \
	-c "SELECT pg_sleep(60)" >/dev/null 2>&1 &
locker=$!
wait_for 5 "the proc row locked" eval '[[ $(q "SELECT count(*) FROM pg_stat_activity WHERE query LIKE '"'%pg_sleep(60)%'"' AND pid <> pg_backend_pid()") == 1 ]]' || finish
touch "$T/w/go"
waiting_complete() {
	[[ $(q "SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%frameq.complete%' AND wait_event_type = 'Lock'") == 1 ]]
}
wait_for 5 "the agent's report waits for the lock" waiting_complete || finish
q "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query LIKE '%frameq.complete%' AND wait_event_type = 'Lock'" >/dev/null
q "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query LIKE '%pg_sleep(60)%' AND pid <> pg_backend_pid()" >/dev/null
wait "$locker" 2>/dev/null
wait_for 10 "the frame succeeded" eval '[[ $(frame_state $job2 1) == succeeded ]]' || finish
[[ $(q "SELECT attempts FROM frameq.frames WHERE job = $job2") == 1 && $(q "SELECT reason FROM frameq.runs WHERE proc = $p") == completed ]] &&
	ok "a report cut off in flight was sent again: the frame succeeded with its one run" ||
	fail "in-flight report: $(q "SELECT attempts, state FROM frameq.frames WHERE job = $job2")"
[[ $(grep -c "reported proc=$p " "$T/a.log") == 1 ]] || fail "reported $(grep -c "reported proc=$p " "$T/a.log") times"
check_clean
stop_agent a
[[ $AGENT_RC == 0 ]] || fail "agent a exited $AGENT_RC"
finish
