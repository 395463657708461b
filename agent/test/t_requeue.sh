#!/usr/bin/env bash
# Requeue exit codes (frameq 0.5.0): a render that exits with one of its
# layer's requeue_exit_codes is run again without using up a retry, but not
# before requeue_delay; past max_requeues such an exit is an ordinary
# failure (a retry, delayed by retry_delay).
#
# Job: requeue_exit_codes [75], requeue_delay 4 s, max_requeues 2,
# max_retries 1, retry_delay 1 s.  Each render counts its runs in a file of
# its frame's, and exits 75 on the first N, then 0:
#   frame 1, N = 2: requeued twice, then succeeds: requeues 2, retries 0;
#   frame 2, N = 3: requeued twice; the third 75 is a failure (retries 1),
#     then succeeds;
#   frame 3, N = always: requeued twice, then fails twice: dead, requeues 2,
#     retries 2.
# The gap between a run's end and the next run's start (runs.ended_at,
# runs.started_at) after a requeue is at least requeue_delay (4 s) and at
# most 4 s + a worker round (1.5 s, with its own steps: it makes the task
# bookable) + 1 s for the agent's reserve; after a failure at least
# retry_delay (1 s) and less than requeue_delay.  While a task waits out
# its delay, the frames view shows it waiting with not_before = the end of
# its run + the delay.
source "$(dirname "$0")/lib.sh"

start_cluster 3s
register_host a 3
need_reports
start_agent a
# the worker ends the delays; it starts 5 s after the cluster
wait_for 15 "the frameq worker is up" worker_up || finish

RQ=4
RT=1
cat >"$T/flaky.sh" <<'SH'
#!/bin/sh
f=count.$FRAMEQ_FRAME_NUMBER
n=$(( $(cat "$f" 2>/dev/null || echo 0) + 1 ))
echo $n >"$f"
echo "frame $FRAMEQ_FRAME_NUMBER run $n"
case $FRAMEQ_FRAME_NUMBER in
1) [ $n -le 2 ] && exit 75 ;;
2) [ $n -le 3 ] && exit 75 ;;
3) exit 75 ;;
esac
exit 0
SH
chmod 755 "$T/flaky.sh"

job=$(submit_job flaky 1-3 "exec $T/flaky.sh" '{}' \
	"{\"requeue_exit_codes\": [75], \"requeue_delay\": $RQ, \"max_requeues\": 2, \"max_retries\": 1, \"retry_delay\": \"${RT}s\"}") ||
	die "submit failed"

# while frame 1 waits out its first requeue delay: waiting, not_before set
wait_for 20 "frame 1's first run ended" eval '[[ $(q "SELECT count(*) FROM frameq.runs r JOIN frameq.frames f ON f.frame = r.frame
	WHERE f.job = $job AND f.frame_number = 1 AND r.ended_at IS NOT NULL") -ge 1 ]]' || finish
row=$(q "SELECT f.state || '|' || f.requeues || '|' || f.retries || '|' ||
	round(extract(epoch FROM f.not_before - r.ended_at)::numeric, 1)
	FROM frameq.frames f JOIN frameq.runs r ON r.frame = f.frame
	WHERE f.job = $job AND f.frame_number = 1 ORDER BY r.started_at LIMIT 1")
[[ $row == "waiting|1|0|$RQ.0" ]] &&
	ok "after frame 1's first exit 75: waiting, requeues 1, retries 0, not_before = its end + ${RQ}s" ||
	fail "frame 1 after its first run: state|requeues|retries|not_before - ended_at = $row"

wait_for 60 "the job finished" job_finished "$job" || finish

# runs: frame|n|reason|exit_status|gap since the previous run's end
runs=$(q "SELECT f.frame_number || '|' || row_number() OVER w || '|' || r.reason || '|' || r.exit_status || '|' ||
	coalesce(round(extract(epoch FROM r.started_at - lag(r.ended_at) OVER w)::numeric, 2)::text, '-')
	FROM frameq.runs r JOIN frameq.frames f ON f.frame = r.frame WHERE f.job = $job
	WINDOW w AS (PARTITION BY f.frame_number ORDER BY r.started_at) ORDER BY f.frame_number, r.started_at")
note "runs (frame|n|reason|exit|gap): $(tr '\n' ' ' <<<"$runs")"
pattern() { cut -d'|' -f1-4 <<<"$runs" | awk -F'|' -v f="$1" '$1 == f { printf "%s:%s ", $3, $4 }'; }
[[ $(pattern 1) == "completed:75 completed:75 completed:0 " ]] && ok "frame 1 ran 3 times: 75, 75, 0" || fail "frame 1's runs: $(pattern 1)"
[[ $(pattern 2) == "completed:75 completed:75 completed:75 completed:0 " ]] && ok "frame 2 ran 4 times: 75, 75, 75, 0" ||
	fail "frame 2's runs: $(pattern 2)"
[[ $(pattern 3) == "completed:75 completed:75 completed:75 completed:75 " ]] && ok "frame 3 ran 4 times: 75 each time" ||
	fail "frame 3's runs: $(pattern 3)"

frame_row() { q "SELECT state || ' requeues=' || requeues || ' retries=' || retries FROM frameq.frames WHERE job = $job AND frame_number = $1"; }
[[ $(frame_row 1) == "succeeded requeues=2 retries=0" ]] && ok "frame 1: succeeded, requeues 2, no retry used" || fail "frame 1: $(frame_row 1)"
[[ $(frame_row 2) == "succeeded requeues=2 retries=1" ]] && ok "frame 2: its third 75, past max_requeues, used a retry; then succeeded" ||
	fail "frame 2: $(frame_row 2)"
[[ $(frame_row 3) == "dead requeues=2 retries=2" ]] && ok "frame 3: dead after 2 requeues and 2 failures (max_retries 1)" ||
	fail "frame 3: $(frame_row 3)"

# the gaps: runs n >= 2 of each frame; runs 2 and 3 follow requeues, any
# later one a failure
RQ_MAX=$(awk "BEGIN { print $RQ + 1.5 + 1 }")
bad=0 nq=0 nr=0
while IFS='|' read -r f n reason st gap; do
	[[ $gap == - ]] && continue
	if [[ $n -le 3 ]]; then
		nq=$((nq + 1))
		is_true "$gap >= $RQ && $gap <= $RQ_MAX" || { fail "frame $f run $n started ${gap}s after a requeue, not within [$RQ, $RQ_MAX]"; bad=1; }
	else
		nr=$((nr + 1))
		is_true "$gap >= $RT && $gap < $RQ" || { fail "frame $f run $n started ${gap}s after a failure, not within [$RT, $RQ)"; bad=1; }
	fi
done <<<"$runs"
[[ $bad == 0 && $nq == 6 && $nr == 2 ]] &&
	ok "none booked before its delay: 6 runs after a requeue within [$RQ, $RQ_MAX] s, 2 after a failure within [$RT, $RQ) s" ||
	{ [[ $bad == 0 ]] && fail "gaps counted: $nq after requeues, $nr after failures"; }
check_clean
finish
