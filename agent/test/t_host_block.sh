#!/usr/bin/env bash
# A host that fails a job's frames is blocked for the job (the job's
# host_failure_limit, frameq 0.5.0): reserve gives it none of the job's
# tasks any more, other hosts finish the job, and unblock_host() lets it
# book them again.
#
# Two agents: a (1 core, so one frame at a time) and b (2 cores).  The
# render fails (exit 1) on a host named in the file its layer's env names
# (BROKEN, broken.<job name> in the work dir), and succeeds elsewhere.
#  1. Job 1 (4 frames, host_failure_limit 1, max_retries 3), broken on a,
#     with a alone: after a's first failed run, job_host_blocks has
#     (job 1, a, 1 failure); a goes on calling reserve (3 more calls
#     seen in the server's log) and books nothing: its one run stays the
#     only one, every frame waits.
#  2. b starts and runs all 4 frames to success; a still has its one run.
#  3. Job 2 (2 frames, host_failure_limit 1), broken on a, with a alone
#     again (b stopped): blocked after one failure, nothing more booked.
#     The breakage is mended, unblock_host(job 2, a): the block is gone
#     (job 1's stays) and a runs job 2 to its end.
source "$(dirname "$0")/lib.sh"

start_cluster 3s
register_host a 1
register_host b 2
need_reports
log_calls a
A=$(host_name a)
B=$(host_name b)

cat >"$T/block.sh" <<'SH'
#!/bin/sh
if grep -qx "$FRAMEQ_HOST" "$BROKEN" 2>/dev/null; then echo "broken on $FRAMEQ_HOST"; exit 1; fi
sleep 0.3
echo "fine on $FRAMEQ_HOST"
SH
chmod 755 "$T/block.sh"

blocks() { q "SELECT string_agg(job || ':' || host || ':' || failures, ' ' ORDER BY job, host) FROM frameq.job_host_blocks"; }
runs_on() { q "SELECT count(*) FROM frameq.runs WHERE job = $1 AND host = '$2'"; }
reserves() { sent reserve | wc -l; }
# wait until a has called reserve 3 more times (each with room: a runs nothing)
three_more_reserves() {
	local n0
	n0=$(reserves)
	wait_for 20 "a called reserve 3 more times" eval '[[ $(reserves) -ge $((n0 + 3)) ]]'
}

# ---- 1: a fails job 1's first frame and is blocked for it
start_agent a
echo "$A" >"$T/work/broken.block1"
job1=$(submit_job block1 1-4 "exec $T/block.sh" '{"env": {"BROKEN": "broken.block1"}}' \
	'{"host_failure_limit": 1, "max_retries": 3}') || die "submit 1 failed"
wait_for 20 "a is blocked for job 1" eval '[[ -n $(blocks) ]]' || finish
[[ $(blocks) == "$job1:$A:1" ]] && ok "after a's first failure job_host_blocks has (job 1, a, 1 failure)" ||
	fail "job_host_blocks: $(blocks)"
r=$(q "SELECT reason || ' ' || exit_status FROM frameq.runs WHERE job = $job1")
[[ $r == "completed 1" ]] && ok "a's one run of job 1 failed (completed, exit 1)" || fail "job 1's runs: $r"
three_more_reserves
[[ $(runs_on "$job1" "$A") == 1 ]] && ok "a booked none of job 1's tasks after the block, in 3 reserve calls" ||
	fail "a's runs of job 1: $(runs_on "$job1" "$A")"
[[ $(frames_in_state "$job1" waiting) == 4 ]] && ok "job 1's 4 frames wait" ||
	fail "job 1: $(q "SELECT string_agg(state, ' ') FROM frameq.frames WHERE job = $job1")"

# ---- 2: b finishes job 1
start_agent b
wait_for 30 "job 1 finished" job_finished "$job1" || finish
[[ $(frames_in_state "$job1" succeeded) == 4 ]] && ok "b ran job 1's 4 frames to success" ||
	fail "job 1: $(q "SELECT string_agg(state, ' ') FROM frameq.frames WHERE job = $job1")"
[[ $(q "SELECT count(*) FROM frameq.runs WHERE job = $job1 AND host = '$B' AND reason = 'completed' AND exit_status = 0") == 4 &&
	$(runs_on "$job1" "$A") == 1 ]] && ok "job 1's runs: 4 successes on b, a's one failure" ||
	fail "job 1's runs: $(q "SELECT string_agg(host || ':' || reason || ':' || exit_status, ' ') FROM frameq.runs WHERE job = $job1")"

# ---- 3: job 2, blocked on a, then unblocked
stop_agent b
[[ $AGENT_RC == 0 ]] || fail "b exited with $AGENT_RC"
echo "$A" >"$T/work/broken.block2"
job2=$(submit_job block2 1-2 "exec $T/block.sh" '{"env": {"BROKEN": "broken.block2"}}' \
	'{"host_failure_limit": 1, "max_retries": 3}') || die "submit 2 failed"
wait_for 20 "a is blocked for job 2" eval '[[ $(blocks) == *"$job2:$A:1"* ]]' || finish
three_more_reserves
[[ $(runs_on "$job2" "$A") == 1 && $(frames_in_state "$job2" waiting) == 2 ]] &&
	ok "job 2: a blocked after its one failure, booked nothing more; both frames wait" ||
	fail "job 2: a's runs $(runs_on "$job2" "$A"), frames $(q "SELECT string_agg(state, ' ') FROM frameq.frames WHERE job = $job2")"
rm -f "$T/work/broken.block2"
q "SELECT frameq.unblock_host($job2, '$A')" >/dev/null
[[ $(blocks) == "$job1:$A:1" ]] && ok "unblock_host(job 2, a) lifted that block only" || fail "job_host_blocks: $(blocks)"
wait_for 30 "job 2 finished" job_finished "$job2" || finish
[[ $(q "SELECT count(*) FROM frameq.runs WHERE job = $job2 AND host = '$A' AND reason = 'completed' AND exit_status = 0") == 2 &&
	$(frames_in_state "$job2" succeeded) == 2 ]] && ok "a booked job 2 again and ran both its frames to success" ||
	fail "job 2's runs: $(q "SELECT string_agg(host || ':' || reason || ':' || exit_status, ' ') FROM frameq.runs WHERE job = $job2")"
check_clean
finish
