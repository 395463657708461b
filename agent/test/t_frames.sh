#!/usr/bin/env bash
# Frames run and their outputs exist.
#
# Two agents (2 cores each) run a job of 16 frames whose commands really
# run: each writes an output file with its environment (FRAMEQ_PROC, _FRAME,
# _JOB, _LAYER, _FRAME_NUMBER, _CORES and the layer's env; and whether
# frameq.owns() takes its FRAMEQ_RUN_SECRET, as its host's role, and
# refuses a wrong one), its working
# directory and a line on stdout (which must land in the run's log file).
# Frames 3 and 7 fail once (exit 3) and are retried.  Afterwards: every
# frame succeeded, every output names the proc that ran it, the run records
# carry exit status and max RSS, no agent setting leaked into a render's
# environment, both agents ran frames, check() is clean, and SIGTERM makes
# each agent exit 0.  Last, a host whose work dir is missing cannot start
# a render: the booking is released (lost_by_agent) without using a retry.
source "$(dirname "$0")/lib.sh"

start_cluster 3s
register_host a 2
register_host b 2
# an agent setting in the environment must not reach the renders
export FRAMEQ_TAGS=secret-tag
start_agent a
start_agent b
unset FRAMEQ_TAGS

# what a render does before it publishes: prove it is the proc's render
cat >"$T/owns.sh" <<'SH'
#!/bin/sh
psql -X -q -At -U "fqh_$FRAMEQ_HOST" -v p="$FRAMEQ_PROC" -v s="${FRAMEQ_RUN_SECRET:-}" 2>&1 <<'SQL'
SELECT frameq.owns(:p, :'s')::text || '/' || frameq.owns(:p, 'wrong')::text;
SQL
SH
chmod 755 "$T/owns.sh"
cmd='f=#FRAME#; if [ $f -eq 3 -o $f -eq 7 ] && [ ! -e failed.$f ]; then touch failed.$f; echo failing; exit 3; fi
echo "frame #ZFRAME# of #JOB#/#LAYER# says hello"
sleep 0.3
owns=$('"$T/owns.sh"')
printf "%s\n" "proc=$FRAMEQ_PROC" "frame=$FRAMEQ_FRAME" "job=$FRAMEQ_JOB" "layer=$FRAMEQ_LAYER" "number=$FRAMEQ_FRAME_NUMBER" "cores=$FRAMEQ_CORES" "color=$COLOR" "pwd=$(pwd)" "tags=${FRAMEQ_TAGS:-}" "secret=${#FRAMEQ_RUN_SECRET}" "owns=$owns" > out.#ZFRAME#.tmp
mv out.#ZFRAME#.tmp out.#ZFRAME#'
job=$(submit_job shot010 1-16 "$cmd" '{"env": {"COLOR": "blue"}}') || die "submit failed"

wait_for 60 "the job finished" job_finished "$job" || finish
ok "job $job finished"

[[ $(frames_in_state "$job" succeeded) == 16 ]] && ok "16 frames succeeded" ||
	fail "frames not succeeded: $(q "SELECT string_agg(frame_number || ':' || state, ' ') FROM frameq.frames WHERE job = $job AND state <> 'succeeded'")"
[[ $(q "SELECT sum(retries) FROM frameq.frames WHERE job = $job") == 2 ]] && ok "the two failing frames were retried once each" ||
	fail "retries: $(q "SELECT string_agg(frame_number || ':' || retries, ' ') FROM frameq.frames WHERE job = $job AND retries > 0")"
[[ $(q "SELECT count(*) FROM frameq.runs WHERE job = $job AND exit_status = 3 AND reason = 'completed'") == 2 ]] &&
	ok "the failed runs are recorded with exit status 3" || fail "failed runs: $(q "SELECT count(*) FROM frameq.runs WHERE job = $job AND exit_status = 3")"

bad=0
jobname=shot010
for n in $(seq 1 16); do
	z=$(printf %04d "$n")
	f="$T/work/out.$z"
	if [[ ! -s $f ]]; then
		fail "no output for frame $n"
		bad=1
		continue
	fi
	frame=$(q "SELECT frame FROM frameq.frames WHERE job = $job AND frame_number = $n")
	layer=$(q "SELECT layer FROM frameq.frames WHERE job = $job AND frame_number = $n")
	proc=$(sed -n 's/^proc=//p' "$f")
	# the run that succeeded is the one whose proc wrote the output
	if [[ $(q "SELECT count(*) FROM frameq.runs WHERE proc = $proc AND frame = $frame AND exit_status = 0 AND reason = 'completed'") != 1 ]]; then
		fail "frame $n: output written by proc $proc, which is not its completed run"
		bad=1
	fi
	expect="frame=$frame job=$job layer=$layer number=$n cores=1.00 color=blue pwd=$T/work tags= secret=32 owns=true/false"
	got=$(grep -v '^proc=' "$f" | tr '\n' ' ' | sed 's/ $//')
	if [[ $got != "$expect" ]]; then
		fail "frame $n environment: got '$got', wanted '$expect'"
		bad=1
	fi
	# stdout went to the run's own log file
	logf=$(ls "$T"/a/log/*."$proc".log "$T"/b/log/*."$proc".log 2>/dev/null | head -n1)
	if [[ -z $logf ]] || ! grep -q "frame $z of $jobname/l says hello" "$logf"; then
		fail "frame $n: no log file with its stdout for proc $proc"
		bad=1
	fi
done
[[ $bad == 0 ]] && ok "every output has the right environment (a 32-digit run secret that owns() takes), working directory and log file"

[[ $(q "SELECT count(*) FROM frameq.runs WHERE job = $job AND reason = 'completed' AND (max_rss IS NULL OR max_rss <= 0)") == 0 ]] &&
	ok "every completed run reports its max RSS" || fail "runs without max_rss"
[[ $(q "SELECT count(DISTINCT host) FROM frameq.runs WHERE job = $job") == 2 ]] && ok "both hosts ran frames" ||
	fail "hosts that ran frames: $(q "SELECT string_agg(DISTINCT host, ' ') FROM frameq.runs WHERE job = $job")"
for a in a b; do
	grep -q '^.* booked ' "$T/$a.log" || fail "agent $a logged no booking"
	grep -q '^.* started ' "$T/$a.log" || fail "agent $a logged no start"
	grep -q '^.* finished ' "$T/$a.log" || fail "agent $a logged no finish"
	grep -q '^.* lease-renewed ' "$T/$a.log" || fail "agent $a logged no renewal"
	grep -q '^.* reported .*answer=accepted' "$T/$a.log" || fail "agent $a logged no accepted report"
done
grep -Eq '^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:]{8}\.[0-9]{3}Z attached ' "$T/a.log" && ok "log lines carry ISO times" ||
	fail "log format: $(head -n 3 "$T/a.log")"
check_clean

for a in a b; do
	stop_agent "$a"
	[[ $AGENT_RC == 0 ]] && ok "agent $a exits 0 on SIGTERM" || fail "agent $a exited $AGENT_RC on SIGTERM"
done

# a host that cannot start renders (its work dir is missing) uses up no retry
register_host c 1
start_agent c --work-dir "$T/no-such-dir"
job2=$(submit_job broken 1 "echo never") || die "submit failed"
wait_for 10 "the agent could not start the render" agent_log_has c " not-run " || finish
wait_for 10 "the booking released" eval '[[ $(q "SELECT reason FROM frameq.runs WHERE job = $job2") == lost_by_agent ]]' || finish
[[ $(q "SELECT retries || '/' || state FROM frameq.frames WHERE job = $job2") == 0/waiting ]] &&
	ok "a render that could not start is released without using a retry" ||
	fail "frame: $(q "SELECT retries || '/' || state FROM frameq.frames WHERE job = $job2")"
stop_agent c
[[ $AGENT_RC == 0 ]] || fail "agent c exited $AGENT_RC"
check_clean
finish
