#!/usr/bin/env bash
# The agent never acts on a standby, and follows a failover.
#
# A primary and a streaming standby (pg_basebackup -R), lease 10 s.
#   1. conninfo naming only the standby: the agent connects nowhere
#      (target_session_attrs=read-write) and never attaches;
#   2. the same with target_session_attrs=any in the conninfo: the agent's
#      own check refuses the standby;
#   3. conninfo "standby, then primary": it attaches on the primary and runs
#      a job;
#   4. failover: while that agent runs a second job (conninfo "primary, then
#      standby"), the primary stops and the standby is promoted; the agent
#      reconnects to the new primary with the same lease and finishes the
#      job; no frame is lost and none ran twice.
source "$(dirname "$0")/lib.sh"

start_cluster 10s
register_host a 2
register_host b 2

STANDBY_PORT=$((FRAMEQ_PORT + 1))
STANDBY_DIR="$FRAMEQ_CLUSTER_DIR/standby"	# removed with the primary's dir
mkdir -p "$STANDBY_DIR"
chown postgres: "$STANDBY_DIR"
chmod 700 "$STANDBY_DIR"
standby_ctl() {
	(cd "$STANDBY_DIR" && runuser -u postgres -- "$FRAMEQ_PGBIN/pg_ctl" -D "$STANDBY_DIR/data" -l "$STANDBY_DIR/server.log" "$@")
}
stop_standby() {
	[[ -f $STANDBY_DIR/data/postmaster.pid ]] && standby_ctl -w -m immediate stop >/dev/null 2>&1
}
trap 'stop_standby; cleanup' EXIT
(cd "$STANDBY_DIR" && runuser -u postgres -- "$FRAMEQ_PGBIN/pg_basebackup" -h "$PGHOST" -p "$PGPORT" \
	-U postgres -D "$STANDBY_DIR/data" -R -X stream -c fast --no-sync) >/dev/null 2>&1 || die "pg_basebackup failed"
printf "\nport = %s\nunix_socket_directories = '%s'\n" "$STANDBY_PORT" "$STANDBY_DIR" >>"$STANDBY_DIR/data/postgresql.conf"
standby_ctl -w start >/dev/null || die "the standby did not start"
sq() { psql -X -q -At -h "$STANDBY_DIR" -p "$STANDBY_PORT" -c "$1"; }
[[ $(sq "SELECT pg_is_in_recovery()") == t ]] || die "the standby is not in recovery"
ok "a streaming standby runs"

STANDBY_CONN="host=$STANDBY_DIR port=$STANDBY_PORT dbname=$PGDATABASE user=$(host_role a)"
BOTH_SP="host=$STANDBY_DIR,$PGHOST port=$STANDBY_PORT,$PGPORT dbname=$PGDATABASE user=$(host_role a)"
BOTH_PS="host=$PGHOST,$STANDBY_DIR port=$PGPORT,$STANDBY_PORT dbname=$PGDATABASE user=$(host_role a)"

# ---- 1, 2
for variant in default any; do
	conn=$STANDBY_CONN
	[[ $variant == any ]] && conn+=" target_session_attrs=any"
	: >"$T/a.log"
	start_agent a --conninfo "$conn"
	wait_for 10 "three connection attempts ($variant)" eval '[[ $(grep -cE " connect-(failed|refused) " "$T/a.log") -ge 3 ]]' || finish
	stop_agent a
	if agent_log_has a " attached " || [[ $(host_epoch a) != 0 ]]; then
		fail "the agent attached through a standby ($variant)"
	elif [[ $variant == any ]] && ! agent_log_has a 'connect-refused .*the server is a standby'; then
		fail "target_session_attrs=any: no refusal logged"
	else
		ok "standby only, target_session_attrs $variant: the agent never attached"
	fi
	[[ $AGENT_RC == 0 ]] || fail "agent exited $AGENT_RC"
done

# ---- 3
: >"$T/a.log"
start_agent a --conninfo "$BOTH_SP"
job=$(submit_job one 1-4 "sleep 0.2; echo \$FRAMEQ_PROC > $T/w/one.#FRAME#") || die "submit failed"
wait_for 20 "the job finished" job_finished "$job" || finish
agent_log_has a "connected server=$PGHOST " && ok "standby then primary: the agent chose the primary and ran the job" ||
	fail "connected to: $(grep ' connected ' "$T/a.log")"

# ---- 4
stop_agent a
: >"$T/a.log"
start_agent a --conninfo "$BOTH_PS"
job=$(submit_job two 1-12 "$(witness "sleep 0.5; echo done > $T/w/two.#FRAME#")") || die "submit failed"
wait_for 20 "3 frames done" eval '[[ $(frames_in_state $job succeeded) -ge 3 ]]' || finish
cluster_running && _frameq_pg_ctl -w -m fast stop >/dev/null 2>&1 || die "stopping the primary failed"
standby_ctl -w promote >/dev/null || die "promotion failed"
ok "primary stopped, standby promoted"
# from here on the standby is the farm's database
export PGHOST=$STANDBY_DIR PGPORT=$STANDBY_PORT
wait_for 60 "the job finished on the new primary" job_finished "$job" || finish
agent_log_has a "connected server=$STANDBY_DIR " && ok "the agent reconnected to the promoted standby" ||
	fail "no connection to the new primary"
agent_log_has a "lease-lost" && fail "the agent lost its lease in the failover"
[[ $(frames_in_state "$job" succeeded) == 12 ]] && ok "all 12 frames succeeded" || fail "not all frames succeeded"
n=$(ls "$T"/w/two.* 2>/dev/null | wc -l)
[[ $n == 12 ]] && ok "12 outputs" || fail "$n outputs"
no_violations
check_clean
stop_agent a
[[ $AGENT_RC == 0 ]] || fail "agent exited $AGENT_RC"
finish
