#!/usr/bin/env bash
# A render that needs more memory than it was booked with: the agent kills
# it for memory (--enforce-memory), frameq raises the task's memory for its
# retry (frameq 0.6.0: 1.5 times its booking, or its peak if more), books
# the retry only once the host has that much free, and the retry, given the
# room, succeeds.  Real renders, a real agent, a real server; the numbers
# are read from the run records.
#
# The host has 1 GiB, in the server's books and in the agent's (--memory).
# A first job holds 400 MiB of it with a render that only sleeps; then a
# render booked with 300 MiB fills 700 MiB.  Its limit is its booking plus
# the unbooked memory (1024 - 400 - 300 = 324 MiB): 624 MiB, so it is
# killed, with a peak above 600 MiB; its task is raised to that peak (more
# than 1.5 x 300 = 450 MiB).  The host has 624 MiB free while the sleeper
# runs, less than the raised size: the retry waits for the sleeper's end,
# then runs alone with a limit of 1 GiB and fills its 700 MiB to the end.
source "$(dirname "$0")/lib.sh"

start_cluster 3s
MIB=$((1024 * 1024))
host=$(host_name a)
q "SELECT frameq.register_host('$host', 'farm', 2, $((1024 * MIB)))" >"$T/a.token"
chmod 600 "$T/a.token"
q "CREATE ROLE \"$(host_role a)\" LOGIN IN ROLE frameq_agent" >/dev/null
mkdir -p "$T/a"
need_reports
[[ $(q "SELECT count(*) FROM pg_attribute WHERE attrelid = 'frameq.frame'::regclass AND attname = 'memory'") == 1 ]] ||
	die "this server's frameq does not raise a task's memory after an OOM (0.6.0)"
start_agent a --memory 1GB

cat >"$T/fill.py" <<'PY'
import sys, time
mb = int(sys.argv[1])
chunks = []
for _ in range(0, mb, 32):
    chunks.append(b"\x01" * (32 << 20))
    time.sleep(0.05)
print("filled %d MiB" % mb, flush=True)
# hold the peak for 3 s: the agent samples the tree's memory every 0.25 s,
# and a peak held for an instant can fall between two samples on a loaded
# machine (the first run is killed at it; the retry holds it to the end)
time.sleep(3)
PY

sleeper=$(submit_job sleeper 1 "sleep 8" "{\"memory\": $((400 * MIB))}" '{"max_retries": 0}') ||
	die "submit failed"
wait_for 20 "the sleeper runs" eval '[[ $(frame_state $sleeper 1) == running ]]' || finish
job=$(submit_job filler 1 "python3 $T/fill.py 700" "{\"memory\": $((300 * MIB))}" '{"max_retries": 2}') ||
	die "submit failed"
wait_for 30 "the filler ran twice" \
	eval '[[ $(q "SELECT count(*) FROM frameq.runs WHERE job = $job AND ended_at IS NOT NULL") -ge 2 ]]' ||
	finish
wait_for 10 "the filler's job finished" job_finished "$job"

IFS='|' read -r r1_reason r1_memory r1_rss r1_end < <(q "SELECT reason, memory, max_rss, extract(epoch FROM ended_at)
	FROM frameq.runs WHERE job = $job ORDER BY started_at LIMIT 1")
IFS='|' read -r r2_reason r2_status r2_memory r2_start < <(q "SELECT reason, exit_status, memory,
	extract(epoch FROM started_at) FROM frameq.runs WHERE job = $job ORDER BY started_at OFFSET 1 LIMIT 1")
sleeper_end=$(q "SELECT extract(epoch FROM ended_at) FROM frameq.runs WHERE job = $sleeper")
note "run 1: $r1_reason, booked $r1_memory, peak $r1_rss; run 2: $r2_reason $r2_status, booked $r2_memory"

[[ $r1_reason == oom && $r1_memory == $((300 * MIB)) ]] &&
	ok "the first run, booked with 300 MiB, was killed for memory (reason oom)" ||
	fail "first run: reason $r1_reason, memory $r1_memory"
((r1_rss > 600 * MIB && r1_rss < 1024 * MIB)) && ok "its peak was over its limit of 624 MiB: $r1_rss" ||
	fail "first run's peak $r1_rss"
want=$((r1_rss > 450 * MIB ? r1_rss : 450 * MIB))
[[ $r2_memory == "$want" ]] && ok "the retry was booked with the raised size, its peak ($r2_memory bytes)" ||
	fail "the retry was booked with $r2_memory, not $want"
[[ $(q "SELECT memory FROM frameq.frames WHERE job = $job") == "$want" ]] &&
	ok "frames.memory shows the raised requirement" || fail "frames.memory $(q "SELECT memory FROM frameq.frames WHERE job = $job")"
is_true "$r2_start >= $sleeper_end" &&
	ok "the retry started only once the sleeper's 400 MiB were free ($(calc "$r2_start - $r1_end") s after the OOM)" ||
	fail "the retry started at $r2_start, before the sleeper ended at $sleeper_end"
[[ $r2_reason == completed && $r2_status == 0 ]] && ok "given the room, the retry filled its 700 MiB and succeeded" ||
	fail "the retry: $r2_reason $r2_status"
[[ $(frame_state "$job" 1) == succeeded && $(q "SELECT retries FROM frameq.frames WHERE job = $job") == 1 ]] &&
	ok "the task succeeded with one retry used" || fail "the task: $(q "SELECT state, retries FROM frameq.frames WHERE job = $job")"

stop_agent a
[[ $AGENT_RC == 0 ]] || fail "agent a exited $AGENT_RC"
check_clean
finish
