#!/usr/bin/env bash
# bench/combined.sh [FRAMES] [ROUNDS] [SECONDS]: reserve() and complete() in one
# statement (one transaction per frame), and whether that path queues
# behind anything besides PostgreSQL's notify lock.  Run as root.
#
# A farm of 1,000 hosts (one allocation, one show with a burst, a folder
# cap and a job cap, none binding) and one job of FRAMES frames (default
# 1,000,000); every host has one booking to start with.  16 pgbench
# clients, each on its own 62 hosts, a random one per transaction.  Each
# round runs, SECONDS each (default 5), one after another:
#   update    the commit limit (a one-row UPDATE);
#   notify    the same UPDATE and one pg_notify: PostgreSQL 15 takes a
#             cluster-wide lock in PreCommit_Notify and keeps it past the
#             commit's WAL flush, so no two such commits share a flush;
#   reserve   reserve(…, 1) alone;
#   complete  complete() of the host's oldest proc alone (a host with none
#             answers stale);
#   combined  complete() and reserve(…, 1) in one statement.
# Rates count rows (runs opened, runs succeeded) over pgbench's time; each
# is also given over the update and the notify rounds of its own round.
# During the combined rounds two samplers read pg_stat_activity every
# 0.1 s: what the clients' backends wait on, and what the backend holding
# the notify lock is doing (a wait there other than the WAL flush would be
# a queue of frameq's own inside the notify lock's).
#
# Environment: FRAMEQ_PGROOT and FRAMEQ_BENCH_PORT as for bench/run.
set -euo pipefail
cd "$(dirname "$(realpath -- "$0")")/.."
REPO=$(pwd)
FRAMES=${1:-1000000}
ROUNDS=${2:-3}
T=${3:-5}
HOSTS=1000
CLIENTS=16
[[ $(id -u) -eq 0 ]] || { echo "bench/combined.sh must run as root" >&2; exit 1; }
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)

PG_CONFIG=/usr/lib/postgresql/15/bin/pg_config
LOGS="$REPO/bench/out/combined-$(date -u +%Y%m%d-%H%M%S)"
mkdir -p "$LOGS"
chmod 755 "$REPO/bench/out" "$LOGS"
# shellcheck source=pgroot.bash
source "$REPO/bench/pgroot.bash"
bench_pgroot
{ make -s PG_CONFIG="$PG_CONFIG" &&
	make -s PG_CONFIG="$PG_CONFIG" ${FRAMEQ_PGROOT:+DESTDIR="$FRAMEQ_PGROOT"} install; } >"$LOGS/build.txt" 2>&1 || {
	cat "$LOGS/build.txt" >&2
	exit 1
}
unset FRAMEQ_CLUSTER_DIR FRAMEQ_PGDATA FRAMEQ_LOG
export FRAMEQ_PORT=${FRAMEQ_BENCH_PORT:-54359}
export FRAMEQ_EXTRA_CONF="fsync = on
synchronous_commit = on
frameq.quarantine = off
frameq.lease_ttl = 3600s
max_connections = 200
shared_buffers = 512MB
max_wal_size = 8GB
checkpoint_timeout = 30min"
SAMPLERS=()
# shellcheck source=../test/cluster.sh
source test/cluster.sh
cleanup() {
	for p in "${SAMPLERS[@]}"; do kill "$p" 2>/dev/null || true; done
	cluster_stop
}
cluster_start >/dev/null 2>"$LOGS/cluster.txt" || { cat "$LOGS/cluster.txt" >&2; exit 1; }
trap cleanup EXIT
q() { psql -X -q -At -v ON_ERROR_STOP=1 "$@"; }

echo "== farm: $HOSTS hosts, one job of $FRAMES frames (log: ${LOGS#"$REPO"/})" >&2
q >/dev/null <<SQL
CREATE SCHEMA bench;
CREATE TABLE bench.row (id int PRIMARY KEY, n bigint NOT NULL);
INSERT INTO bench.row SELECT g, 0 FROM generate_series(1, 64) g;
CREATE TABLE bench.h (n int PRIMARY KEY, name text NOT NULL, token text NOT NULL,
	epoch bigint NOT NULL DEFAULT 0, id int);
SELECT frameq.create_allocation('pool');
INSERT INTO bench.h (n, name, token)
	SELECT g, 'h-' || g, frameq.register_host('h-' || g, 'pool', 100000, 1::bigint << 49)
	  FROM generate_series(1, $HOSTS) g;
UPDATE bench.h h SET (epoch, id) =
	(SELECT a.epoch, a.host_id FROM frameq.attach(h.name, h.token, 'bench') a);
SELECT frameq.create_show('show');
SELECT frameq.set_subscription('show', 'pool', 1000, 10000000);
SELECT frameq.create_folder('show', 'f', 10000000, 100000);
SELECT frameq.submit(jsonb_build_object('show', 'show', 'folder', 'f', 'name', 'big',
	'priority', 100, 'max_cores', 10000000,
	'layers', jsonb_build_array(jsonb_build_object('name', 'render',
		'command', 'render --job #JOB# --layer #LAYER# --frame #ZFRAME#',
		'range', '1-' || $FRAMES, 'cores', 1, 'memory', '1GB'))));
SQL
q -c "VACUUM ANALYZE" >/dev/null
q -c "SELECT count(*) FROM bench.h h, frameq.reserve(h.name, h.token, h.epoch, 1)" >/dev/null

S="$LOGS/scripts"
mkdir -p "$S"
echo 'UPDATE bench.row SET n = n + 1 WHERE id = :client_id + 1;' >"$S/update.sql"
cat >"$S/notify.sql" <<'EOF'
WITH u AS (UPDATE bench.row SET n = n + 1 WHERE id = :client_id + 1 RETURNING n)
SELECT pg_notify('bench_notify', n::text) FROM u;
EOF
pick=$(printf '%s\n' "\\set k random(0, $((HOSTS / CLIENTS - 1)))" \
	'\set n :client_id + 1 + 16 * :k' \
	'SELECT name AS host, token, epoch, id AS hid FROM bench.h WHERE n = :n \gset')
proc='coalesce((SELECT min(id) FROM frameq.proc WHERE host = :hid), 0)'
printf '%s\nSELECT count(*) FROM frameq.reserve(:host, :token, :epoch, 1);\n' "$pick" >"$S/reserve.sql"
printf '%s\nSELECT frameq.complete(:host, :token, :epoch, %s, 0);\n' "$pick" "$proc" >"$S/complete.sql"
printf '%s\nSELECT frameq.complete(:host, :token, :epoch, %s, 0),\n       (SELECT count(*) FROM frameq.reserve(:host, :token, :epoch, 1));\n' \
	"$pick" "$proc" >"$S/combined.sql"

runs() { q -c "SELECT count(*) FROM frameq.run"; }
done_() { q -c "SELECT count(*) FROM frameq.run WHERE end_state = 'succeeded'"; }
# pgb NAME: TPS of one round of script NAME
pgb() {
	pgbench -n -M prepared -c "$CLIENTS" -j 2 -f "$S/$1.sql" -T "$T" >"$LOGS/$1-r$r.txt" 2>&1 ||
		{ tail -n 20 "$LOGS/$1-r$r.txt" >&2; exit 1; }
	grep -q 'number of failed transactions: 0 ' "$LOGS/$1-r$r.txt" && ! grep -q aborted "$LOGS/$1-r$r.txt" ||
		{ echo "failed transactions in $1" >&2; exit 1; }
	awk '/^tps = / { print $3 }' "$LOGS/$1-r$r.txt"
}
# rows NAME COUNTER: the counter's growth per second over one round of NAME
rows() {
	local before after tps txns
	before=$($2)
	tps=$(pgb "$1")
	after=$($2)
	txns=$(awk '/number of transactions actually processed/ { split($NF, a, "/"); print a[1] }' "$LOGS/$1-r$r.txt")
	awk -v d=$((after - before)) -v n="$txns" -v t="$tps" 'BEGIN { printf "%.0f", d * t / n }'
}
sample() {
	(
		sleep 0.5
		while :; do
			q -c "SELECT coalesce(wait_event_type || ':' || wait_event, 'running')
			        FROM pg_stat_activity WHERE application_name = 'pgbench' AND state = 'active'"
			sleep 0.1
		done
	) >>"$LOGS/waits.raw" 2>/dev/null &
	SAMPLERS+=($!)
	(
		sleep 0.5
		while :; do
			q -c "SELECT coalesce(a.wait_event_type || ':' || a.wait_event, 'running')
			        FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
			       WHERE l.locktype = 'object' AND l.database = 0 AND l.granted"
			sleep 0.1
		done
	) >>"$LOGS/holder.raw" 2>/dev/null &
	SAMPLERS+=($!)
}
unsample() {
	for p in "${SAMPLERS[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
	SAMPLERS=()
}

declare -A SUM
for r in $(seq 1 "$ROUNDS"); do
	echo "== round $r of $ROUNDS" >&2
	u=$(pgb update)
	n=$(pgb notify)
	b=$(rows reserve runs)
	c=$(rows complete done_)
	sample
	x=$(rows combined done_)
	unsample
	echo "round $r: update $u notify $n reserve $b complete $c combined $x" >>"$LOGS/rates.txt"
	for k in u n b c x; do SUM[$k]=$(awk -v a="${SUM[$k]:-0}" -v b="${!k}" 'BEGIN { print a + b }'); done
done
mean() { awk -v s="${SUM[$1]}" -v r="$ROUNDS" 'BEGIN { printf "%.0f", s / r }'; }
share() { sort "$1" | uniq -c | sort -rn | awk '{ n[NR] = $1; w[NR] = $2; t += $1 }
	END { for (i = 1; i <= NR && i <= 4; i++) printf "%s%s %.0f%%", (i > 1 ? ", " : ""), w[i], 100 * n[i] / t }'; }
U=$(mean u)
N=$(mean n)
line() { awk -v name="$1" -v x="$2" -v u="$U" -v n="$N" 'BEGIN { printf "| %s | %s | %.3f | %.2f |\n", name, x, x / u, x / n }'; }
{
	echo "| path (16 clients, $HOSTS hosts, a $FRAMES-frame job) | per second | of the commit limit | of the notify ceiling |"
	echo "|---|---|---|---|"
	line "commit limit (one-row UPDATE, tx)" "$U"
	line "notify ceiling (the UPDATE and one pg_notify, tx)" "$N"
	line "reserve(…, 1) alone (bookings)" "$(mean b)"
	line "complete() alone (frames finished)" "$(mean c)"
	line "complete() and reserve(…, 1) in one statement (frames finished)" "$(mean x)"
	echo
	echo "Combined rounds, the clients' backends: $(share "$LOGS/waits.raw")."
	echo "The backend holding the notify lock: $(share "$LOGS/holder.raw") ($(wc -l <"$LOGS/holder.raw") samples with a holder)."
	echo
	echo "Command: \`bench/combined.sh $FRAMES $ROUNDS $T\` ($(date -u +%F), $(nproc) cores, load average before: $LOAD_BEFORE)."
} | tee "$LOGS/table.md"
