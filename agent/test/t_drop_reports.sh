#!/usr/bin/env bash
# Lost reports (--fault-drop-reports, the fault-injection knob).
#
# One agent with --fault-drop-reports 60 runs a job of 30 short frames
# (witnessed).  60% of its complete() attempts are dropped at random: half
# are never sent (report-dropped when=before; retried after a backoff), half
# are sent and committed but their answer is thrown away and the connection
# closed (report-dropped when=after; sent again after the reconnect, which
# answers 'duplicate').  Afterwards: every frame succeeded with exactly one
# run, reason 'completed' (no drop caused a re-run or a release); no retry
# was used; both kinds of drop happened; every proc whose answer was dropped
# was reported again as 'duplicate', none 'stale', each proc exactly once;
# check() is clean; SIGTERM exits 0 with an empty state directory.
# Last, the knob from a config file and SIGHUP: at 100% no report gets
# through; reloaded to 0, the pending report goes out.
source "$(dirname "$0")/lib.sh"

start_cluster 3s
# the server books against the registered capacity and a proc whose report
# is held back still counts: room enough that the job does not crawl
register_host a 8
start_agent a --fault-drop-reports 60
wait_for 10 "the agent attached" agent_log_has a " attached " || finish
agent_log_has a " warning .*fault_drop_reports=60 " && ok "the agent warns that reports are dropped" ||
	fail "no fault-injection warning: $(grep ' warning ' "$T/a.log")"

job=$(submit_job drops 1-30 "$(witness "sleep 0.2; echo done > $T/w/out.#FRAME#")") || die "submit failed"
wait_for 200 "the job finished" job_finished "$job" || finish
ok "job $job finished"

[[ $(frames_in_state "$job" succeeded) == 30 ]] && ok "30 frames succeeded" ||
	fail "frames not succeeded: $(q "SELECT string_agg(frame_number || ':' || state, ' ') FROM frameq.frames WHERE job = $job AND state <> 'succeeded'")"
runs=$(q "SELECT count(*) || '/' || count(DISTINCT frame) || '/' || count(*) FILTER (WHERE reason = 'completed' AND exit_status = 0) FROM frameq.runs WHERE job = $job")
[[ $runs == 30/30/30 ]] && ok "every frame has exactly one run, completed with exit status 0" ||
	fail "runs (all/frames/completed): $runs: $(q "SELECT string_agg(frame || ':' || reason, ' ') FROM frameq.runs WHERE job = $job AND reason <> 'completed'")"
[[ $(q "SELECT sum(retries) FROM frameq.frames WHERE job = $job") == 0 ]] && ok "no retry was used" ||
	fail "retries: $(q "SELECT string_agg(frame_number || ':' || retries, ' ') FROM frameq.frames WHERE job = $job AND retries > 0")"
no_violations
# the job is done once every report is committed, even one whose answer was
# lost: the agent still has to hear its answer (a dropped one is retried
# after up to 15 s)
wait_for 150 "every report answered" state_clean "$T/a/state" || finish

# what the log says
before=$(grep -c ' report-dropped .*when=before' "$T/a.log")
after=$(grep -c ' report-dropped .*when=after' "$T/a.log")
note "drops: $before before sending, $after after the commit"
[[ $before -ge 1 ]] && ok "reports were dropped before sending ($before)" || fail "no report-dropped when=before"
[[ $after -ge 1 ]] && ok "answers were dropped after the commit ($after)" || fail "no report-dropped when=after"
grep -q ' reported .*answer=duplicate' "$T/a.log" && ok "a report sent again answered duplicate" ||
	fail "no answer=duplicate"
grep -q ' reported .*answer=stale' "$T/a.log" && fail "a report answered stale: $(grep ' reported .*answer=stale' "$T/a.log")"
# a dropped answer was committed as accepted: that proc's next report is a duplicate
dropped_procs=$(grep ' report-dropped .*when=after discarded=accepted' "$T/a.log" | sed 's/.* proc=\([0-9]*\) .*/\1/' | sort -u)
dup_procs=$(grep ' reported .*answer=duplicate' "$T/a.log" | sed 's/.* proc=\([0-9]*\) .*/\1/' | sort -u)
[[ -n $dropped_procs && $dropped_procs == "$dup_procs" ]] &&
	ok "exactly the procs whose accepted answer was dropped were reported again as duplicate" ||
	fail "answer dropped for: $(echo $dropped_procs); duplicate for: $(echo $dup_procs)"
reported=$(grep -c ' reported ' "$T/a.log")
reported_procs=$(grep ' reported ' "$T/a.log" | sed 's/.* proc=\([0-9]*\) .*/\1/' | sort -u | wc -l)
[[ $reported == 30 && $reported_procs == 30 ]] && ok "each of the 30 procs was reported (answered) exactly once" ||
	fail "reported lines: $reported, procs: $reported_procs"
# each dropped answer closed the connection (once for a batch of reports),
# and the agent came back
connects=$(grep -c ' connected ' "$T/a.log")
closed=$(grep -c ' disconnected reason="fault injection: report answer dropped"' "$T/a.log")
[[ $closed -ge 1 && $closed -le $after && $connects -ge $((closed + 1)) ]] &&
	ok "the agent reconnected after each dropped answer ($connects connections, $closed closed by a drop)" ||
	fail "$connects connections, $closed closed by a drop, for $after dropped answers"
check_clean

stop_agent a
[[ $AGENT_RC == 0 ]] && ok "the agent exits 0 on SIGTERM" || fail "the agent exited $AGENT_RC on SIGTERM"
state_clean "$T/a/state" || fail "left in the state dir: $(ls "$T/a/state")"

# ---- from the config file, and SIGHUP: 100% holds every report back, 0 lets it go
: >"$T/a.log"
printf 'fault-drop-reports = 100\n' >"$T/a.conf"
start_agent a --config "$T/a.conf"
wait_for 10 "the agent attached" agent_log_has a " attached " || finish
job2=$(submit_job held 1 "$(witness "echo done > $T/w/held")") || die "submit failed"
wait_for 10 "the render finished" agent_log_has a " finished " || finish
proc2=$(grep ' finished ' "$T/a.log" | sed 's/.* proc=\([0-9]*\) .*/\1/')
# at 100% every attempt is dropped: wait until one got through to the server
wait_for 60 "an answer dropped after the commit" agent_log_has a " report-dropped proc=$proc2 .*when=after" || finish
[[ $(frame_state "$job2" 1) == succeeded ]] && ok "a report whose answer was dropped was committed" ||
	fail "frame state $(frame_state "$job2" 1)"
grep -q " reported proc=$proc2 " "$T/a.log" && fail "a report got an answer at fault-drop-reports = 100"
printf 'fault-drop-reports = 0\n' >"$T/a.conf"
kill -HUP "${AGENT_PID[a]}"
wait_for 10 "the reload" agent_log_has a " reloaded " || finish
# the next try may wait out a backoff (at most 15 s)
wait_for 30 "the held report answered after SIGHUP" agent_log_has a " reported proc=$proc2 .*answer=duplicate" &&
	ok "SIGHUP set fault-drop-reports to 0: the held report went out and answered duplicate"
stop_agent a
[[ $AGENT_RC == 0 ]] || fail "the agent exited $AGENT_RC on SIGTERM"
[[ $(q "SELECT count(*) FROM frameq.runs WHERE job = $job2") == 1 ]] || fail "the held frame ran more than once"
[[ $(q "SELECT sum(retries) FROM frameq.frames WHERE job IN ($job, $job2)") == 0 ]] || fail "a retry was used"
no_violations
check_clean
finish
