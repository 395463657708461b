#!/usr/bin/env bash
# Where each render's output is (frameq 0.6.0): as it starts renders, the
# agent tells the server, with report_log(), "<this machine's name>:<the
# render's log file>", and runs.log shows it, while the render runs and
# after it ended; the file named holds the render's output.  With a database at 0.5.0 the agent
# makes no such call (the version is read again at its next attach: here
# the extension's recorded version is set to 0.5.0 and the host declared
# dead, then up again, so the agent re-attaches reading it), and its runs
# have no log.
source "$(dirname "$0")/lib.sh"

start_cluster 3s
register_host a 2
log_calls a
start_agent a

render='echo "frame $FRAMEQ_FRAME_NUMBER says hi"; while [ ! -e "'"$T"'/go.$FRAMEQ_JOB" ]; do sleep 0.05; done'
job=$(submit_job run-log 1-2 "$render") || die "submit failed"
wait_for 20 "both renders run" eval '[[ $(frames_in_state '"$job"' running) == 2 ]]' || finish
logs_set() { [[ $(q "SELECT count(log) FROM frameq.runs WHERE job = $1") == "$2" ]]; }
wait_for 10 "both runs have a log" logs_set "$job" 2 && ok "each running render's run has a log"
machine=$(hostname)
dir=$(realpath "$T/a/log")
for n in 1 2; do
	p=$(frame_proc "$job" $n)
	want="$machine:$dir/job$job.layer$(q "SELECT layer FROM frameq.frame WHERE id = (SELECT frame FROM frameq.frames WHERE job = $job AND frame_number = $n)").frame$n.$p.log"
	got=$(q "SELECT log FROM frameq.runs WHERE proc = $p")
	[[ $got == "$want" ]] && ok "frame $n: runs.log is $got" || fail "frame $n: runs.log is '$got', not '$want'"
	file=${got#"$machine:"}
	wait_for 10 "frame $n's output in its log" grep -qs "frame $n says hi" "$file" &&
		ok "frame $n: the file it names holds the render's output"
done
[[ $(sent report_log | wc -l) -ge 1 ]] && ok "the agent called report_log" || fail "no report_log call was logged"
touch "$T/go.$job"
wait_for 20 "the job finishes" job_finished "$job" || finish
logs_set "$job" 2 && ok "the logs stay once the runs have ended" || fail "the logs went: $(q "SELECT log FROM frameq.runs WHERE job = $job")"

# ---- a database at 0.5.0: no report_log call, no log
calls=$(sent report_log | wc -l)
q "UPDATE pg_extension SET extversion = '0.5.0' WHERE extname = 'frameq'" >/dev/null
epoch=$(host_epoch a)
q "SELECT frameq.confirm_host_dead('$(host_name a)')" >/dev/null
wait_for 20 "a attaches again, at 0.5.0" eval '[[ $(host_epoch a) -gt $((epoch + 1)) ]]' || finish
q "SELECT frameq.set_host_state('$(host_name a)', 'up')" >/dev/null
job2=$(submit_job run-log-old 1 "$render") || die "submit failed"
wait_for 20 "the render runs" eval '[[ $(frames_in_state '"$job2"' running) == 1 ]]' || finish
touch "$T/go.$job2"
wait_for 20 "the job finishes" job_finished "$job2" || finish
q "UPDATE pg_extension SET extversion = '0.6.0' WHERE extname = 'frameq'" >/dev/null
[[ $(q "SELECT count(log) FROM frameq.runs WHERE job = $job2") == 0 ]] && ok "at 0.5.0 the run has no log" ||
	fail "at 0.5.0 the run has a log"
[[ $(sent report_log | wc -l) == "$calls" ]] && ok "at 0.5.0 the agent made no report_log call" ||
	fail "at 0.5.0 the agent called report_log $(( $(sent report_log | wc -l) - calls )) times"
agent_alive a && ok "the agent is still up" || fail "the agent exited"
agent_log_has a ' log-report-failed ' && fail "a report failed: $(grep -m1 ' log-report-failed ' "$T/a.log")"
check_clean
finish
