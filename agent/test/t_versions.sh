#!/usr/bin/env bash
# The agent speaks frameq 0.2.0 to the current version ($CUR, frameq.control's
# default_version) and checks the extension's version
# on every connect; outside that range, or with no frameq in the database,
# it says so plainly, makes no call, and exits with status 3.
#
#  1. At the current version the agent attaches (its connected line
#     names the version) and runs a render.
#  2. A newer extension, seen on a reconnect while a render runs (the
#     catalog's extversion is set to the next minor version, $NEXT, as none
#     exists yet, and
#     the agent's session is terminated): the agent says the extension is
#     newer than it speaks and to install an agent built for it, kills its
#     render and exits 3.
#  3. No frameq in the database (DROP EXTENSION): a new agent exits 3 at
#     once, naming the database and CREATE EXTENSION, without attaching.
#  4. frameq 0.1.0 (CREATE EXTENSION frameq VERSION '0.1.0'): the agent exits
#     3 and says to run ALTER EXTENSION frameq UPDATE.
#  5. frameq 0.2.0: the agent attaches (reserve is refused by this server's
#     library until the update) and heartbeats without a report (0.5.0's);
#     after ALTER EXTENSION frameq UPDATE it books and runs a frame without
#     a restart.
#  6. The version is read again before every attach, not only on connect:
#     with extversion set to 0.1.0 and the host confirmed dead, the agent's
#     next heartbeat loses the lease, and on the same connection it refuses
#     to attach again and exits 3.
source "$(dirname "$0")/lib.sh"

start_cluster 6s
version() { q "SELECT extversion FROM pg_extension WHERE extname = 'frameq'"; }
CUR=$(sed -n "s/^default_version = '\(.*\)'$/\1/p" "$(dirname "$0")/../../frameq.control")
[[ $CUR =~ ^0\.([0-9]+)\.0$ ]] || die "cannot read default_version from frameq.control"
NEXT="0.$((BASH_REMATCH[1] + 1)).0"
SPOKEN="0.2.0 to $CUR"

# run_refused NAME: start an agent for host NAME (its role and token file
# made here if need be) and wait for it to exit; its status in $AGENT_RC
run_refused() {
	local name=$1
	if [[ ! -e $T/$name.token ]]; then
		(umask 077 && echo "tok-$name" >"$T/$name.token")
		q "CREATE ROLE \"$(host_role "$name")\" LOGIN" >/dev/null
		mkdir -p "$T/$name"
	fi
	"$AGENT_BIN" --conninfo "$(CONNINFO_DEFAULT "$name")" --host "$(host_name "$name")" \
		--token-file "$T/$name.token" --cores 1 --state-dir "$T/$name/state" \
		--log-dir "$T/$name/log" --work-dir "$T/work" >>"$T/$name.log" 2>&1 </dev/null &
	AGENT_PID[$name]=$!
	AGENT_NAMES[$name]=1
	wait_agent_exit "$name" 20
}
# refused_as NAME WHAT PATTERN...: NAME exited 3, never attached, and its
# version-refused line matches every PATTERN
refused_as() {
	local name=$1 what=$2 line p bad=0
	shift 2
	line=$(grep -m1 ' version-refused ' "$T/$name.log")
	for p in "$@"; do
		grep -qF -- "$p" <<<"$line" || { fail "$what: '$p' not in: $line"; bad=1; }
	done
	[[ $AGENT_RC == 3 ]] || { fail "$what: the agent exited $AGENT_RC, wanted 3"; bad=1; }
	agent_log_has "$name" ' attached ' && { fail "$what: the agent attached"; bad=1; }
	[[ $bad == 0 ]] && ok "$what: exit 3, $(cut -d' ' -f2- <<<"$line")"
}

# ---- 1: the current version
[[ $(version) == "$CUR" ]] || die "the cluster's frameq is $(version), not $CUR"
register_host a 1
start_agent a
cmd='while [ ! -e release.#FRAME# ]; do sleep 0.05; done'
job=$(submit_job versions 1 "$cmd") || die "submit failed"
wait_for 20 "a's render runs" eval '[[ -n $(frame_proc $job 1) ]] && proc_running $(frame_proc $job 1)' || finish
agent_log_has a " connected .* frameq=$CUR" && agent_log_has a ' attached ' &&
	ok "at $CUR the agent attaches and runs a render" || fail "a did not log connected frameq=$CUR and attached"

# ---- 2: newer, found on a reconnect while a render runs
p1=$(frame_proc "$job" 1)
q "UPDATE pg_extension SET extversion = '$NEXT' WHERE extname = 'frameq'" >/dev/null
q "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = '$(host_role a)'" >/dev/null
wait_agent_exit a 20
q "UPDATE pg_extension SET extversion = '$CUR' WHERE extname = 'frameq'" >/dev/null
line=$(grep -m1 ' version-refused ' "$T/a.log")
for p in "frameq=$NEXT" "is $NEXT, newer than this agent speaks ($SPOKEN)" \
	"install a frameq-agent built for $NEXT" 'exit_status=3'; do
	grep -qF -- "$p" <<<"$line" || fail "newer: '$p' not in: $line"
done
[[ $AGENT_RC == 3 ]] && ok "newer: exit 3, $(cut -d' ' -f2- <<<"$line")" || fail "newer: the agent exited $AGENT_RC"
proc_gone "$p1" && ok "newer: the render was killed before the agent exited" || fail "newer: render $p1 still runs"
agent_log_has a "lease-lost .*reason=\"the frameq extension's version" ||
	fail "newer: no lease-lost line for the version"

# ---- 3: no frameq in the database
q "DROP EXTENSION frameq CASCADE" >/dev/null
run_refused b
refused_as b "missing" 'frameq=none' "not installed in database $PGDATABASE" 'CREATE EXTENSION frameq'

# ---- 4: frameq 0.1.0
q "CREATE EXTENSION frameq VERSION '0.1.0'" >/dev/null
[[ $(version) == 0.1.0 ]] || die "could not install frameq 0.1.0"
run_refused c
refused_as c "0.1.0" 'frameq=0.1.0' "is 0.1.0, older than this agent speaks ($SPOKEN)" \
	'run ALTER EXTENSION frameq UPDATE in that database'

# ---- 5: frameq 0.2.0 is spoken; the update under a running agent
q "ALTER EXTENSION frameq UPDATE TO '0.2.0'" >/dev/null
[[ $(version) == 0.2.0 ]] || die "could not update frameq to 0.2.0"
q "SELECT frameq.create_allocation('farm')" >/dev/null
q "SELECT frameq.create_show('show')" >/dev/null
q "SELECT frameq.set_subscription('show', 'farm', 1000, 1000)" >/dev/null
register_host d 1
start_agent d
wait_for 20 "d attaches at 0.2.0" grep -qs ' attached ' "$T/d.log" &&
	agent_log_has d ' connected .* frameq=0.2.0' && ok "at 0.2.0 the agent attaches"
agent_log_has d ' version-refused ' && fail "0.2.0 was refused: $(grep ' version-refused ' "$T/d.log")"
wait_for 10 "d renews its lease at 0.2.0" agent_log_has d ' lease-renewed ' &&
	agent_log_has d ' lease-renewed .* reports=not-sent ' && ok "at 0.2.0 heartbeats carry no report" ||
	fail "at 0.2.0: $(grep -m1 ' lease-renewed ' "$T/d.log")"
job=$(submit_job after-update 1 "true") || die "submit failed"
q "ALTER EXTENSION frameq UPDATE" >/dev/null
[[ $(version) == "$CUR" ]] || fail "the update went to $(version)"
wait_for 30 "d runs the job after the update" job_finished "$job" &&
	ok "after ALTER EXTENSION frameq UPDATE the same agent books and runs a frame"
agent_alive d && ok "d is still up" || fail "d exited"
check_clean

# ---- 6: read again before an attach on the same connection
q "UPDATE pg_extension SET extversion = '0.1.0' WHERE extname = 'frameq'" >/dev/null
q "SELECT frameq.confirm_host_dead('$(host_name d)')" >/dev/null
wait_agent_exit d 20
q "UPDATE pg_extension SET extversion = '$CUR' WHERE extname = 'frameq'" >/dev/null
agent_log_has d ' lease-lost .*FQ001' || fail "re-attach: d did not lose its lease on FQ001"
[[ $(grep -c ' connected ' "$T/d.log") == 1 ]] || fail "re-attach: d connected $(grep -c ' connected ' "$T/d.log") times"
line=$(grep -m1 ' version-refused ' "$T/d.log")
grep -qF 'is 0.1.0, older than this agent speaks' <<<"$line" && [[ $AGENT_RC == 3 ]] &&
	ok "re-attach: the version is read again before attaching on the same connection; exit 3" ||
	fail "re-attach: exit $AGENT_RC, $line"
finish
