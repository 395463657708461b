#!/usr/bin/env bash
# Booking rate against the server's commit limit, measured side by side in
# one run on one throwaway cluster (these machines are shared and noisy, so
# only the ratio means anything).
#
#   baseline: a minimal transaction, one single-row UPDATE of the client's
#             own row (no contention): what the server can commit
#   booking:  one frameq.reserve(..., max_frames => 1) per transaction,
#             every booking on the same top-priority job, which has a job
#             cap, sits in a capped folder and a show with a burst, all set
#             high enough never to bind: each booking checks and moves all
#             three (the hot-spot worst case of a counter-row design)
#
# Usage: bench/booking.sh [seconds per run] [clients]
# Prints one table; durable commits (fsync on, synchronous_commit on).
set -euo pipefail
cd "$(dirname "$0")/.."

SECONDS_PER_RUN=${1:-10}
CLIENTS=${2:-16}
ROUNDS=${FRAMEQ_BENCH_ROUNDS:-2}
export FRAMEQ_PORT=${FRAMEQ_PORT:-54339}
export FRAMEQ_EXTRA_CONF=$'fsync = on\nsynchronous_commit = on\nmax_connections = 200\nshared_buffers = 256MB'
# shellcheck source=../test/cluster.sh
source test/cluster.sh
cluster_start >/dev/null

work=$(mktemp -d)
trap 'rm -rf "$work"; cluster_stop' EXIT

frames=$(( CLIENTS * 20000 ))
psql -X -q -v ON_ERROR_STOP=1 <<SQL
CREATE TABLE bench_row (id int PRIMARY KEY, n bigint NOT NULL);
INSERT INTO bench_row SELECT g, 0 FROM generate_series(1, $CLIENTS) g;

SELECT frameq.create_allocation('bench');
SELECT frameq.create_show('bench');
SELECT frameq.set_subscription('bench', 'bench', 1000, 10000000);
SELECT frameq.create_folder('bench', 'f', 10000000, 100000);
CREATE TABLE bench_host (n int PRIMARY KEY, name text, token text, epoch bigint);
INSERT INTO bench_host
SELECT g, 'bh' || g, frameq.register_host('bh' || g, 'bench', 100000, 1::bigint << 49), 0
  FROM generate_series(1, $CLIENTS) g;
UPDATE bench_host h SET epoch = (frameq.attach(h.name, h.token, 'boot')).epoch;
SELECT frameq.submit(jsonb_build_object('show', 'bench', 'folder', 'f', 'name', 'hot',
	'priority', 100, 'max_cores', 10000000,
	'layers', jsonb_build_array(jsonb_build_object('name', 'r', 'command', 'true',
		'range', '1-$frames'))));
ALTER SYSTEM SET frameq.lease_ttl = '3600s';
SELECT pg_reload_conf();
VACUUM ANALYZE;
SQL
psql -X -q -c "UPDATE bench_host h SET epoch = (frameq.attach(h.name, h.token, 'boot')).epoch" >/dev/null

cat > "$work/update.sql" <<'EOF2'
UPDATE bench_row SET n = n + 1 WHERE id = :client_id + 1;
EOF2
# prepared once per connection so the measured work is the call itself
cat > "$work/reserve.sql" <<'EOF2'
SELECT count(*) FROM frameq.reserve(:host, :token, :epoch, 1);
EOF2

run() {	# file -> tps
	pgbench -n -M prepared -c "$CLIENTS" -j 2 -T "$SECONDS_PER_RUN" "$@" 2>&1 |
		awk '/^tps/ { print $3 }'
}

# each client books for its own host: pass host/token/epoch through -D per client is
# not possible, so the script looks them up from the client id
cat > "$work/reserve.sql" <<'EOF2'
SELECT count(*) FROM bench_host h, frameq.reserve(h.name, h.token, h.epoch, 1) WHERE h.n = :client_id + 1;
EOF2

echo "| round | clients | commit limit (tps) | booking (bookings/s) | ratio |"
echo "|---|---|---|---|---|"
for r in $(seq 1 "$ROUNDS"); do
	base=$(run -f "$work/update.sql")
	book=$(run -f "$work/reserve.sql")
	ratio=$(awk -v a="$book" -v b="$base" 'BEGIN { printf "%.2f", a / b }')
	echo "| $r | $CLIENTS | $base | $book | $ratio |"
done
booked=$(psql -X -At -c "SELECT count(*) FROM frameq.proc")
bad=$(psql -X -At -c "SELECT count(*) FROM frameq.check()")
echo
echo "bookings made: $booked; check() rows: $bad"
echo "command: bench/booking.sh $SECONDS_PER_RUN $CLIENTS (FRAMEQ_BENCH_ROUNDS=$ROUNDS)"
