#!/usr/bin/env bash
# Helpers for the agent's tests (sourced by each agent/test/t_*.sh).
#
# Each test has its own throwaway cluster (test/cluster.sh, on FRAMEQ_PORT,
# which run.sh sets per test), its own scratch dir $T, and real agents
# (agent/frameq-agent) running real commands.  Tests report "ok: ..." /
# "not ok: ..." lines and exit non-zero if anything failed.  Every wait is a
# poll with a deadline (wait_for), never a bare sleep.
#
# Cleanup (EXIT trap) kills only what the test started: its agents by pid,
# and the supervisors and renders those agents left (found by their
# FRAMEQ_HOST, which is unique to the test), then stops the cluster.

set -u
AGENT_TEST_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
AGENT_DIR=$(dirname "$AGENT_TEST_DIR")
REPO=$(dirname "$AGENT_DIR")
# FRAMEQ_AGENT_BIN: another build (e.g. an older agent, to see a test fail)
AGENT_BIN=${FRAMEQ_AGENT_BIN:-$AGENT_DIR/frameq-agent}
TEST_NAME=$(basename "$0" .sh)
: "${FRAMEQ_PORT:=55410}"
export FRAMEQ_PORT

# our own cluster, never one inherited from test/run
unset FRAMEQ_CLUSTER_DIR FRAMEQ_PGDATA FRAMEQ_LOG
# the agent reads FRAMEQ_<OPTION>: none may leak in from the caller
for v in $(compgen -e | grep -E '^FRAMEQ_(CONNINFO|HOST|TOKEN_FILE|CORES|MEMORY|GPUS|TAGS|STATE_DIR|LOG_DIR|WORK_DIR|KILL_GRACE|MAX_FRAMES|KILL_ON_TERM|FINISH_ON_TERM|ENFORCE_MEMORY|NO_ENFORCE_MEMORY|RESERVE_INTERVAL|REPORT_WINDOW|FAULT_DROP_REPORTS|CONFIG)$'); do
	unset "$v"
done
# shellcheck source=../../test/cluster.sh
source "$REPO/test/cluster.sh"

T=$(mktemp -d "/tmp/frameq-agent-$TEST_NAME-XXXXXX")
chmod 755 "$T"
FAILED=0
declare -A AGENT_PID=()
declare -A AGENT_NAMES=()	# every agent ever started (for the cleanup)
# host names carry the test's scratch dir name, so renders are found by it
HOST_PREFIX="$(basename "$T")"

ok() { echo "ok: $*"; }
fail() { echo "not ok: $*"; FAILED=1; }
die() { echo "not ok: $*"; exit 1; }
note() { echo "# $*"; }

q() { psql -X -q -At -v ON_ERROR_STOP=1 -c "$1"; }

# sqlstate_as ROLE SQL: run SQL as ROLE; prints the SQLSTATE it failed
# with, or "ok:" and its output
sqlstate_as() {
	local out
	if out=$(psql -X -q -At -U "$1" -v ON_ERROR_STOP=1 -v VERBOSITY=verbose -c "$2" 2>&1); then
		echo "ok:$out"
	else
		sed -n 's/^\(psql:[^E]*\)\{0,1\}ERROR:  \([0-9A-Z]\{5\}\):.*/\2/p' <<<"$out" | head -n1
	fi
}

now() { date +%s.%N; }
# float arithmetic and comparisons
calc() { awk "BEGIN { printf \"%.6f\\n\", $* }"; }
is_true() { [[ $(awk "BEGIN { print (($*) ? 1 : 0) }") == 1 ]]; }

# wait_for SECONDS DESCRIPTION COMMAND...: poll until COMMAND succeeds
wait_for() {
	local timeout=$1 desc=$2
	shift 2
	local end
	end=$(calc "$(now) + $timeout")
	while ! "$@"; do
		if is_true "$(now) > $end"; then
			fail "$desc (not within ${timeout}s)"
			return 1
		fi
		sleep 0.05
	done
	return 0
}

host_name() { echo "$HOST_PREFIX-$1"; }

# pids of every process that runs a render for host NAME (by its
# environment: renders have FRAMEQ_HOST and FRAMEQ_PROC; the supervisor,
# forked from the agent, has neither).  One grep over /proc, so a poll loop
# sees a death within milliseconds.
render_pids() {
	local host files
	host=$(host_name "$1")
	files=$(grep -lszx "FRAMEQ_HOST=$host" /proc/[0-9]*/environ)
	[[ -n $files ]] || return 0
	# shellcheck disable=SC2086
	grep -lsz '^FRAMEQ_PROC=' $files | sed 's|^/proc/\([0-9]*\)/environ$|\1|'
}

# pids of the processes of one render (by its FRAMEQ_PROC)
proc_pids() {
	grep -lszx "FRAMEQ_PROC=$1" /proc/[0-9]*/environ | sed 's|^/proc/\([0-9]*\)/environ$|\1|'
}
proc_gone() { [[ -z $(proc_pids "$1") ]]; }
proc_running() { [[ -n $(proc_pids "$1") ]]; }
frame_proc() { q "SELECT proc FROM frameq.frames WHERE job = $1 AND frame_number = $2"; }
frame_state() { q "SELECT state FROM frameq.frames WHERE job = $1 AND frame_number = $2"; }
render_count() { render_pids "$1" | wc -l; }
no_renders() { [[ $(render_count "$1") -eq 0 ]]; }

# pids of supervisors of an agent's state dir (alive, start time checked)
supervisor_pids() {
	local dir=$1 f pid start cur
	for f in "$dir"/run.*; do
		[[ -e $f ]] || continue
		pid=$(sed -n 's/^supervisor_pid=//p' "$f")
		start=$(sed -n 's/^supervisor_start=//p' "$f")
		[[ -n $pid && -r /proc/$pid/stat ]] || continue
		cur=$(sed 's/.*) //' "/proc/$pid/stat" 2>/dev/null | awk '{print $20}')
		[[ $cur == "$start" ]] && echo "$pid"
	done
}

cleanup() {
	local rc=$?
	local name pid
	for name in "${!AGENT_PID[@]}"; do
		pid=${AGENT_PID[$name]}
		kill -CONT "$pid" 2>/dev/null
		kill -KILL "$pid" 2>/dev/null
		wait "$pid" 2>/dev/null
	done
	for name in "${!AGENT_NAMES[@]}"; do
		for pid in $(supervisor_pids "$T/$name/state"); do
			kill -KILL "$pid" 2>/dev/null
		done
		for pid in $(render_pids "$name"); do
			kill -KILL "$pid" 2>/dev/null
		done
	done
	if [[ $FAILED -ne 0 || $rc -ne 0 ]]; then
		for name in "${!AGENT_NAMES[@]}"; do
			echo "----- agent $name log (last 60 lines) -----"
			tail -n 60 "$T/$name.log" 2>/dev/null
		done
	fi
	cluster_stop
	if [[ ${FRAMEQ_KEEP_TEST:-0} == 1 ]]; then
		echo "# kept $T"
	else
		rm -rf -- "$T"
	fi
}

# start_cluster [LEASE_TTL]: a fresh cluster with frameq, a farm, a short lease
start_cluster() {
	local ttl=${1:-3s}
	cluster_start >/dev/null 2>&1 || { cluster_log_tail 30; die "cluster did not start"; }
	trap cleanup EXIT
	trap 'exit 130' INT
	trap 'exit 143' TERM
	set_setting frameq.lease_ttl "$ttl"
	# agents log in as their host's own role (register_host), which has
	# frameq_agent and nothing else
	q "SELECT frameq.create_allocation('farm')" >/dev/null
	q "SELECT frameq.create_show('show')" >/dev/null
	q "SELECT frameq.set_subscription('show', 'farm', 1000, 1000)" >/dev/null
	mkdir -p "$T/work" "$T/w"
}

# set_setting NAME VALUE: ALTER SYSTEM + reload, until a new session sees it
set_setting() {
	q "ALTER SYSTEM SET $1 = '$2'" >/dev/null
	q "SELECT pg_reload_conf()" >/dev/null
	wait_for 10 "$1 = $2 after a reload" setting_is "$1" "$2"
}
setting_is() { [[ $(q "SELECT current_setting('$1')") == "$2" ]]; }

# register_host NAME CORES: writes $T/NAME.token (mode 600), and makes the
# host's own login role (host_role NAME), a member of frameq_agent: one
# role per host, so no host's session can end another's (doc/security.md)
register_host() {
	local name=$1 cores=${2:-2} host
	host=$(host_name "$name")
	q "SELECT frameq.register_host('$host', 'farm', $cores, 17179869184)" >"$T/$name.token"
	chmod 600 "$T/$name.token"
	q "CREATE ROLE \"$(host_role "$name")\" LOGIN IN ROLE frameq_agent" >/dev/null
	mkdir -p "$T/$name"
}
host_role() { echo "fqh_$(host_name "$1")"; }
host_epoch() { q "SELECT epoch FROM frameq.hosts WHERE name = '$(host_name "$1")'"; }

# CONNINFO_DEFAULT NAME: how host NAME's agent connects (as its own role)
CONNINFO_DEFAULT() { echo "host=$PGHOST port=$PGPORT dbname=$PGDATABASE user=$(host_role "$1")"; }

# start_agent NAME [ARGS...]: runs in the background, log in $T/NAME.log
start_agent() {
	local name=$1
	shift
	local cores
	cores=$(q "SELECT cores FROM frameq.hosts WHERE name = '$(host_name "$name")'")
	"$AGENT_BIN" \
		--conninfo "$(CONNINFO_DEFAULT "$name")" \
		--host "$(host_name "$name")" \
		--token-file "$T/$name.token" \
		--cores "$cores" \
		--state-dir "$T/$name/state" \
		--log-dir "$T/$name/log" \
		--work-dir "$T/work" \
		--kill-grace 1 \
		--reserve-interval 0.2 \
		"$@" >>"$T/$name.log" 2>&1 </dev/null &
	AGENT_PID[$name]=$!
	AGENT_NAMES[$name]=1
}
agent_alive() { kill -0 "${AGENT_PID[$1]}" 2>/dev/null; }
agent_log_has() { grep -q -- "$2" "$T/$1.log"; }

# stop_agent NAME [TIMEOUT]: SIGTERM, wait for the exit; the exit status is
# in $AGENT_RC (124 if it did not exit in time; then it is killed)
export AGENT_RC=
stop_agent() {
	local pid=${AGENT_PID[$1]} timeout=${2:-30}
	kill -TERM "$pid"
	wait_agent_exit "$1" "$timeout"
}
# wait_agent_exit NAME TIMEOUT: as stop_agent, without the signal
wait_agent_exit() {
	local pid=${AGENT_PID[$1]}
	if ! wait_for "$2" "agent $1 exits" not_alive "$pid"; then
		kill -KILL "$pid" 2>/dev/null
		wait "$pid" 2>/dev/null
		AGENT_RC=124
		return
	fi
	wait "$pid"
	AGENT_RC=$?
}
not_alive() { ! kill -0 "$1" 2>/dev/null || [[ $(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) == Z ]]; }

# submit_job NAME RANGE COMMAND [LAYER_JSON] [JOB_JSON]: one layer of 1-core
# frames; the JSON objects are merged into the layer's and the job's spec
submit_job() {
	local layer=${4:-} job=${5:-}
	[[ -n $layer ]] || layer='{}'
	[[ -n $job ]] || job='{}'
	psql -X -q -At -v ON_ERROR_STOP=1 -v name="$1" -v range="$2" -v cmd="$3" \
		-v layer="$layer" -v job="$job" <<'SQL'
SELECT frameq.submit(jsonb_build_object('show', 'show', 'name', :'name',
	'layers', jsonb_build_array(jsonb_build_object('name', 'l', 'range', :'range',
		'cores', 1, 'command', :'cmd') || :'layer'::jsonb)) || :'job'::jsonb);
SQL
}
# the frameq worker (which sends kill notifications) is connected
worker_up() { [[ $(q "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'frameq worker'") == 1 ]]; }
job_state() { q "SELECT state FROM frameq.job_progress WHERE job = $1"; }
job_finished() { [[ $(job_state "$1") == finished ]]; }
frames_in_state() { q "SELECT count(*) FROM frameq.frames WHERE job = $1 AND state = '$2'"; }

# no run or result file left in a state directory
state_clean() { ! compgen -G "$1/run.*" >/dev/null && ! compgen -G "$1/result.*" >/dev/null; }

# the database agrees with itself
check_clean() {
	local problems
	problems=$(q "SELECT invariant || ': ' || detail FROM frameq.check()")
	if [[ -n $problems ]]; then
		fail "check() reports: $problems"
	else
		ok "check() is clean"
	fi
}

# a witness command: holds $T/w/lock.N for its whole life (flock -n), logs a
# violation if another run holds it, logs each start; then runs BODY
witness() {
	local body=$1
	echo "flock -n -E 99 $T/w/lock.#FRAME# sh -c 'echo \$FRAMEQ_PROC >> $T/w/starts.#FRAME#; $body' || { rc=\$?; [ \$rc -eq 99 ] && echo \"#FRAME# \$FRAMEQ_PROC\" >> $T/w/violations; exit \$rc; }"
}
no_violations() {
	if [[ -s $T/w/violations ]]; then
		fail "a frame ran twice at once: $(tr '\n' ' ' <"$T/w/violations")"
	else
		ok "no frame ran twice at once (witness)"
	fi
}

# ---- what the server receives
#
# log_calls NAME: the server logs every statement of host NAME's agent with
# its parameters (log_statement = all for its role; before it connects)
log_calls() { q "ALTER ROLE \"$(host_role "$1")\" SET log_statement = 'all'" >/dev/null; }
# sent FUNCTION: the parameters of each call of frameq.FUNCTION the server
# logged (log_calls), oldest first, one JSON array per line
sent() { python3 "$AGENT_TEST_DIR/sent.py" "$FRAMEQ_LOG" "$1"; }
# json_get KEY...: a field of the JSON value on stdin (an index for arrays),
# printed as JSON
json_get() {
	python3 -c 'import json, sys
v = json.loads(sys.stdin.read())
for k in sys.argv[1:]:
    v = v[int(k)] if isinstance(v, list) else v[k]
print(json.dumps(v, ensure_ascii=False))' "$@"
}
# report_entries PROC: PROC's entry in each heartbeat report the server got,
# oldest first, one JSON object per line
report_entries() {
	sent heartbeat | python3 -c 'import json, sys
for line in sys.stdin:
    params = json.loads(line)
    if len(params) < 5 or params[4] is None:
        continue
    for e in json.loads(params[4]):
        if e.get("proc") == int(sys.argv[1]):
            print(json.dumps(e, ensure_ascii=False))' "$1"
}
# completed PROC: the parameters of the complete() calls for PROC, and of
# PROC's element of each complete_many() call (frameq 0.6.0), in the same
# form: [host, token, epoch, proc, exit_status, exit_signal, max_rss, oom]
completed() { { sent complete; sent complete_many | python3 -c 'import json, sys
for line in sys.stdin:
    p = json.loads(line)
    cols = [[None if v == "NULL" else v for v in a.strip("{}").split(",")] for a in p[3:]]
    for i in range(len(cols[0])):
        print(json.dumps(p[:3] + [c[i] for c in cols]))'; } | python3 -c 'import json, sys
for line in sys.stdin:
    p = json.loads(line)
    if p[3] == sys.argv[1]:
        print(line, end="")' "$1"; }

# need_reports: the server must take heartbeat's report, complete's oom
# flag and give the booking's progress_pattern (frameq 0.5.0 on)
need_reports() {
	[[ $(q "SELECT count(*) FROM pg_proc WHERE pronamespace = 'frameq'::regnamespace AND
		((proname = 'heartbeat' AND pronargs = 5) OR (proname = 'complete' AND pronargs = 8))") == 2 ]] ||
		die "this server's frameq has no heartbeat report or complete oom flag"
}
# progress_layer PATTERN: the layer JSON that gives a layer that pattern
progress_layer() {
	psql -X -q -At -v ON_ERROR_STOP=1 -v p="$1" <<<"SELECT jsonb_build_object('progress_pattern', :'p')"
}

finish() {
	if [[ $FAILED -ne 0 ]]; then
		echo "# $TEST_NAME: FAILED"
		exit 1
	fi
	echo "# $TEST_NAME: passed"
	exit 0
}
