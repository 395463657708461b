#!/usr/bin/env bash
# What the agent reports about each render's output, as the server receives
# it: heartbeat's report argument (frameq 0.5.0), read from the server's log
# of the agent's calls (log_statement = all for the host's role), and the
# frames view's last_line and progress.
#
# A render (job A, progress_pattern "(\d+)% done") goes through stages the
# test releases one by one:
#  1. a line with a NUL byte and invalid UTF-8, then silence: last_line is
#     the line without them, progress null, and idle grows past 2 s;
#  2. "render 10% done", a blank line, then "bar 30% done\rbar 42% done\r":
#     last_line "bar 42% done" (a "\r" ends a line), progress 42;
#  3. a line of 300 two-byte characters: last_line keeps the first 200,
#     progress stays 42;
#  4. a line every 0.2 s for 4 s: idle stays 0 or 1 while it writes (in
#     the reports made before its last line).
# Job B's pattern does not compile as a POSIX extended expression (a
# lookahead, which the server's own syntax takes): its two renders report no progress,
# and the agent says so once.  Job C has no pattern: no progress.
source "$(dirname "$0")/lib.sh"

start_cluster 3s
register_host a 4
need_reports
log_calls a
start_agent a

cat >"$T/render.sh" <<'SH'
#!/bin/sh
n=$FRAMEQ_FRAME_NUMBER
await() { while [ ! -e "$1" ]; do sleep 0.05; done; }
printf 'frame %s: nul\000byte bad\377utf8\303 ok \303\251t\303\251\n' "$n"
await go1.$n
printf 'render 10%% done\n\n'
printf 'bar 30%% done\rbar 42%% done\r'
await go2.$n
python3 -c 'import sys; sys.stdout.buffer.write(("\u00e9" * 300 + "\n").encode())'
await go3.$n
i=0
while [ $i -lt 20 ]; do echo "tick $i"; sleep 0.2; i=$((i + 1)); done
await go4.$n
SH
chmod 755 "$T/render.sh"
waiter='printf "50%% done\n"; while [ ! -e "goB" ]; do sleep 0.05; done'

layerA=$(progress_layer '(\d+)% done') && layerB=$(progress_layer '(?=[0-9])([0-9]+)% done') || die "progress_layer failed"
jobA=$(submit_job report-a 1 "$T/render.sh" "$layerA") || die "submit A failed"
jobB=$(submit_job report-b 1-2 "$waiter" "$layerB") || die "submit B failed"
jobC=$(submit_job report-c 1 "$waiter") || die "submit C failed"
wait_for 20 "every render runs" eval '[[ $(q "SELECT count(*) FROM frameq.frames WHERE state = '"'running'"'") == 4 ]]' || finish
pA=$(frame_proc "$jobA" 1)

# last_entry PROC: the latest report entry for PROC; entry_is PROC KEY JSON
last_entry() { report_entries "$1" | tail -n 1; }
entry_is() { [[ $(last_entry "$1" | json_get "$2" 2>/dev/null) == "$3" ]]; }

# ---- 1: NUL, invalid UTF-8, silence
line1='"frame 1: nulbyte badutf8 ok été"'
wait_for 15 "stage 1 reported" entry_is "$pA" last_line "$line1" &&
	ok "stage 1: last_line $line1 (NUL byte and invalid UTF-8 dropped)"
entry_is "$pA" progress null && ok "stage 1: no progress yet" || fail "stage 1: progress $(last_entry "$pA")"
wait_for 10 "idle grows while the render is silent" eval 'report_entries $pA | tail -n 1 | json_get idle | awk "\$1 >= 2 { f = 1 } END { exit !f }"' &&
	ok "stage 1: a silent render's idle grows ($(last_entry "$pA" | json_get idle) s)"

# ---- 2: progress, "\r" ends a line, a blank line changes nothing
touch "$T/work/go1.1"
wait_for 10 "stage 2 reported" entry_is "$pA" last_line '"bar 42% done"' || note "last entry: $(last_entry "$pA")"
entry_is "$pA" progress 42 && ok "stage 2: last_line \"bar 42% done\", progress 42" ||
	fail "stage 2: $(last_entry "$pA")"
[[ $(q "SELECT last_line || '|' || progress FROM frameq.frames WHERE job = $jobA") == 'bar 42% done|42' ]] &&
	ok "stage 2: the frames view shows them" || fail "frames view: $(q "SELECT last_line, progress FROM frameq.frames WHERE job = $jobA")"

# ---- 3: a long line
touch "$T/work/go2.1"
long=$(python3 -c 'import json; print(json.dumps("\u00e9" * 200, ensure_ascii=False))')
wait_for 10 "stage 3 reported" entry_is "$pA" last_line "$long" &&
	ok "stage 3: a 300-character line is cut to its first 200 characters"
entry_is "$pA" progress 42 && ok "stage 3: progress stays 42" || fail "stage 3: $(last_entry "$pA")"

# ---- 4: never idle while it writes
touch "$T/work/go3.1"
# the entries made while it wrote: before its last tick (after it, idle grows)
wait_for 20 "stage 4 done" eval 'last_entry $pA | grep -q "\"tick 19\""'
idles=$(report_entries "$pA" | grep '"last_line": "tick \([0-9]\|1[0-8]\)"' |
	python3 -c 'import json, sys; print(" ".join(str(json.loads(l)["idle"]) for l in sys.stdin))')
n=$(wc -w <<<"$idles")
max=$(tr ' ' '\n' <<<"$idles" | sort -n | tail -n 1)
[[ $n -ge 2 && $max -le 1 ]] && ok "stage 4: idle ${idles// /,} in $n reports while the render writes" ||
	fail "stage 4: idle $idles"

# ---- B: a pattern that does not compile; C: none
bad=0
for p in $(frame_proc "$jobB" 1) $(frame_proc "$jobB" 2) $(frame_proc "$jobC" 1); do
	e=$(last_entry "$p")
	[[ $(json_get last_line <<<"$e") == '"50% done"' && $(json_get progress <<<"$e") == null ]] ||
		{ fail "proc $p: $e"; bad=1; }
done
[[ $bad == 0 ]] && ok "no progress without a pattern, or with one that does not compile"
n=$(grep -c 'pattern="(?=\[0-9\])(\[0-9\]+)% done" message="the layer.s progress_pattern does not compile' "$T/a.log")
[[ $n == 1 ]] && ok "the pattern that does not compile is logged once for its two renders" ||
	fail "logged $n times: $(grep 'does not compile' "$T/a.log")"
agent_log_has a 'lease-renewed .*running={[0-9,]*} .* reports=4 ' && ok "the agent logs how many renders each heartbeat reported on" ||
	fail "no lease-renewed line with reports=4"

touch "$T/work/go4.1" "$T/work/goB"
for j in "$jobA" "$jobB" "$jobC"; do
	wait_for 20 "job $j finished" job_finished "$j"
done
[[ $(q "SELECT count(*) FROM frameq.frames WHERE state = 'succeeded'") == 4 ]] && ok "every render succeeded" ||
	fail "frames: $(q "SELECT string_agg(state, ' ') FROM frameq.frames")"
check_clean
finish
