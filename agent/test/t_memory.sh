#!/usr/bin/env bash
# A render's memory, measured over its whole process tree, and the kill of
# a tree that uses more than its booking plus the host's unbooked memory
# (--enforce-memory, the default), as the server receives them: complete()'s
# max_rss and oom arguments (or the render's element of complete_many()'s,
# frameq 0.6.0), read from the server's log of the agent's calls
# (log_statement = all for the host's role), and the run's reason (oom).
#
# The renders are real memory hogs: hog.py fills MB megabytes (in 32 MB
# steps, every page written) in CHILDREN forked processes, or itself, and
# holds them.  The agent offers 1 GB (--memory), so a render booked with
# 256 MB may use 1 GB while it runs alone.
#
#  1. A render booked with 256 MB whose forked child fills 1.5 GB: killed
#     once its tree passes 1 GB, before the child has filled it; the log
#     says why (the proof); complete() gets oom = true and a max_rss over
#     1 GB; with the real server, the run ends `oom`.
#  2. On this machine the agent cannot make cgroups (its cgroup is not
#     delegated), so it measures through /proc: a render whose 3 forked
#     children fill 160 MB each reports a max_rss of at least 480 MB (the
#     tree's sum; the largest process alone is about 170 MB), and oom false.
#  3. A render killed from outside with SIGKILL is not an OOM, even with a
#     forged kernel log record naming it (written to /dev/kmsg from user
#     space): oom false, and no oom line in the agent's log.  (The server
#     logs a boolean parameter as t or f.)
#  4. With --no-enforce-memory the 1.5 GB render of case 1 runs to its end:
#     exit 0, max_rss over 1.5 GB, oom false.
source "$(dirname "$0")/lib.sh"

start_cluster 3s
register_host a 2
register_host b 2
need_reports
log_calls a
log_calls b
start_agent a --memory 1GB

cat >"$T/hog.py" <<'PY'
import os, sys, time
mb, children, hold = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])

def fill():
    chunks = []
    for _ in range(0, mb, 32):
        chunks.append(b"\x01" * (32 << 20))
        time.sleep(0.02)
    print("filled %d MB in %d" % (mb, os.getpid()), flush=True)
    time.sleep(hold)

if children == 0:
    fill()
    sys.exit(0)
pids = []
for _ in range(children):
    pid = os.fork()
    if pid == 0:
        fill()
        os._exit(0)
    pids.append(pid)
sys.exit(1 if any(os.waitpid(p, 0)[1] for p in pids) else 0)
PY
MB=$((1024 * 1024))
hog_job() {	# NAME MEMORY(JSON) ARGS...: a one-frame job (no retry) running hog.py ARGS
	local name=$1 mem=$2
	shift 2
	submit_job "$name" 1 "python3 $T/hog.py $*" "{\"memory\": $mem}" '{"max_retries": 0}'
}
run_log() { cat "$T"/*/log/*."$1".log 2>/dev/null; }
# the proc of the job's latest run (its frame's proc is gone once it ended)
run_proc() { q "SELECT proc FROM frameq.runs WHERE job = $1 ORDER BY started_at DESC LIMIT 1"; }
# sent_complete PROC INDEX: parameter INDEX (0-based) of PROC's complete()
sent_complete() { completed "$1" | tail -n 1 | json_get "$2"; }
reported() { agent_log_has "$1" " reported proc=$2 "; }

wait_for 10 "a says how it measures memory" agent_log_has a ' memory method=' &&
	agent_log_has a ' memory method=proc tree=children .*enforce=yes' &&
	ok "the agent measures through /proc here (no delegated cgroup) and enforces" ||
	note "memory: $(grep ' memory ' "$T/a.log")"

# ---- 1: past the booking plus the unbooked memory
job=$(hog_job over '"256MB"' 1536 1 30) || die "submit failed"
wait_for 20 "the job's frame is booked" eval '[[ -n $(frame_proc $job 1) ]]' || finish
p=$(frame_proc "$job" 1)
wait_for 30 "the render is reported" reported a "$p" || finish
line=$(grep " oom proc=$p " "$T/a.log")
if [[ $line =~ by=agent\ proof=\"the\ tree\ used\ ([0-9]+)\ bytes,\ more\ than\ its\ booking\ \(268435456\)\ plus\ the\ host\'s\ unbooked\ memory\ \(805306368\)\" ]] &&
	((BASH_REMATCH[1] > 1024 * MB)); then
	ok "killed when its tree passed 1 GB: $(cut -d' ' -f2- <<<"$line")"
else
	fail "no oom line with the proof: '$line'"
fi
run_log "$p" | grep -q filled && fail "the child filled its 1.5 GB: $(run_log "$p")" ||
	ok "the child was killed before it filled 1.5 GB"
[[ $(sent_complete "$p" 7) == '"t"' ]] && ok "complete() got oom = true" || fail "complete: $(completed "$p")"
rss=$(sent_complete "$p" 6 | tr -d '"')
((rss > 1024 * MB)) && ok "complete() got the tree's peak, $rss bytes" || fail "max_rss $rss"
[[ $(sent_complete "$p" 5) == '"9"' ]] && ok "the render died of SIGKILL" || fail "exit signal $(sent_complete "$p" 5)"
agent_log_has a " killed proc=$p .* by=memory why=memory .*oom=yes" ||
	fail "no killed line: $(grep " proc=$p " "$T/a.log")"
[[ $(q "SELECT reason FROM frameq.runs WHERE proc = $p") == oom ]] && ok "the run ended oom" ||
	fail "run: $(q "SELECT reason FROM frameq.runs WHERE proc = $p")"
q "SELECT frameq.kill_job($job, 'test over')" >/dev/null 2>&1

# ---- 2: a forked tree, measured through /proc
job=$(hog_job tree 0 160 3 2) || die "submit failed"
wait_for 20 "the tree job finished" job_finished "$job" || finish
p=$(run_proc "$job")
wait_for 10 "the tree render is reported" reported a "$p"
rss=$(sent_complete "$p" 6 | tr -d '"')
((rss >= 480 * MB)) && ok "3 children of 160 MB: max_rss $rss bytes, their sum" ||
	fail "max_rss $rss < 480 MB: $(completed "$p")"
[[ $(sent_complete "$p" 4) == '"0"' && $(sent_complete "$p" 7) == '"f"' ]] &&
	ok "it succeeded, and is no OOM" || fail "complete: $(completed "$p")"
[[ $(run_log "$p" | grep -c filled) == 3 ]] || fail "the children: $(run_log "$p")"

# ---- 3: SIGKILL from outside, with a forged kernel log record
job=$(hog_job sigkill 0 64 0 60) || die "submit failed"
wait_for 20 "the hog is booked" eval '[[ -n $(frame_proc $job 1) ]]' || finish
p=$(frame_proc "$job" 1)
wait_for 20 "the hog filled its memory" eval 'run_log $p | grep -q filled' || finish
pid=$(run_log "$p" | sed -n 's/^filled 64 MB in //p')
if [[ -w /dev/kmsg ]]; then
	printf '<3>Out of memory: Killed process %d (python3) total-vm:0kB (forged by frameq agent test %s)\n' \
		"$pid" "$TEST_NAME" >/dev/kmsg && note "forged a kernel log record naming pid $pid"
fi
kill -KILL "$pid"
wait_for 20 "the killed render is reported" reported a "$p" || finish
[[ $(sent_complete "$p" 7) == '"f"' && $(sent_complete "$p" 4) == '"137"' ]] &&
	ok "a render killed with SIGKILL from outside is reported with oom = false" ||
	fail "complete: $(completed "$p")"
agent_log_has a " oom proc=$p " && fail "the agent took it for an OOM: $(grep " oom proc=$p " "$T/a.log")" ||
	ok "no oom line for it"
agent_log_has a " finished proc=$p .*exit_status=137 .*oom=no" || fail "finished: $(grep " proc=$p " "$T/a.log")"

stop_agent a
[[ $AGENT_RC == 0 ]] || fail "agent a exited $AGENT_RC"

# ---- 4: --no-enforce-memory
start_agent b --memory 1GB --no-enforce-memory
wait_for 10 "b says it does not enforce" agent_log_has b ' memory .*enforce=no'
job=$(hog_job unenforced '"256MB"' 1536 1 0.5) || die "submit failed"
wait_for 30 "the unenforced job finished" job_finished "$job" || finish
p=$(run_proc "$job")
wait_for 10 "the unenforced render is reported" reported b "$p"
rss=$(sent_complete "$p" 6 | tr -d '"')
[[ $(sent_complete "$p" 4) == '"0"' && $(sent_complete "$p" 7) == '"f"' ]] && ((rss > 1536 * MB)) &&
	ok "with --no-enforce-memory the 1.5 GB render runs to its end (max_rss $rss, oom false)" ||
	fail "complete: $(completed "$p")"
agent_log_has b ' oom proc=' && fail "b killed for memory: $(grep ' oom ' "$T/b.log")"
stop_agent b
[[ $AGENT_RC == 0 ]] || fail "agent b exited $AGENT_RC"
check_clean
finish
