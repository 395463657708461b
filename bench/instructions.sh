#!/usr/bin/env bash
# bench/instructions.sh [LOW HIGH]: the instructions one reserve(..., 1)
# costs on item 2a's farm, counted rather than timed (a shared, loaded
# machine moves rates by tens of percent; instruction counts barely move).
# Run as root.
#
# Builds and installs this tree (FRAMEQ_BENCH_TREE for another checkout,
# FRAMEQ_PGROOT for a private server copy, as bench/run), makes item 2a's
# farm on a throwaway cluster (16 hosts of one allocation, one show with a
# burst, a folder with caps, a warm-up job and the top-priority job with a
# job cap, as bench/run's hot_item), books once from each host, stops the
# server, and then runs a single-user backend (postgres --single, no other
# process) under valgrind --tool=callgrind twice, each on its own copy of
# the data directory: one prepared
#     SELECT count(*) FROM frameq.reserve(host, token, epoch, 1)
# executed LOW times (default 20), then HIGH times (default 120), every
# execution its own transaction.  Prints (HIGH run - LOW run) / (HIGH -
# LOW) instructions per call: start-up, shutdown and the first calls'
# planning cancel out.  The same for the bare booking statement of item
# 1's shared-queue ceiling (bench/run, floor_script 1 shared) with
# FRAMEQ_INSTR_FLOOR=1; with FRAMEQ_INSTR_FRAMES=16, reserve(..., 16)
# (item 4's call: the hosts have room for it); with FRAMEQ_INSTR_LIFE=1,
# a booking and its complete() in one statement (item 3's work in one
# transaction).  FRAMEQ_INSTR_SETUP, if set, is SQL run on the farm
# before the statistics are taken: an experiment's change (an index or a
# constraint dropped, to see what it costs).  The callgrind files of the
# HIGH run are kept in bench/out/instructions-*/ (callgrind_annotate
# --inclusive=yes FILE).
set -euo pipefail
cd "$(dirname "$(realpath -- "$0")")/.."
REPO=$(pwd)
LOW=${1:-20}
HIGH=${2:-120}
((HIGH > LOW)) || { echo "bench/instructions.sh: HIGH must exceed LOW" >&2; exit 2; }
command -v valgrind >/dev/null || { echo "bench/instructions.sh: needs valgrind" >&2; exit 1; }
PG_CONFIG=/usr/lib/postgresql/15/bin/pg_config
TREE=${FRAMEQ_BENCH_TREE:-$REPO}
OUT="$REPO/bench/out/instructions-$(date -u +%Y%m%d-%H%M%S)"
mkdir -p "$OUT"
chmod 777 "$OUT"
# shellcheck source=pgroot.bash
source "$REPO/bench/pgroot.bash"
bench_pgroot
{ make -s -C "$TREE" PG_CONFIG="$PG_CONFIG" &&
	make -s -C "$TREE" PG_CONFIG="$PG_CONFIG" ${FRAMEQ_PGROOT:+DESTDIR="$FRAMEQ_PGROOT"} install; } \
	>"$OUT/build.txt" 2>&1 || { cat "$OUT/build.txt" >&2; exit 1; }

unset FRAMEQ_CLUSTER_DIR FRAMEQ_PGDATA FRAMEQ_LOG
export FRAMEQ_PORT=${FRAMEQ_BENCH_PORT:-54359}
export FRAMEQ_EXTRA_CONF="frameq.lease_ttl = 3600s"
# shellcheck source=../test/cluster.sh
source test/cluster.sh
cluster_start >/dev/null 2>"$OUT/cluster.txt" || { cat "$OUT/cluster.txt" >&2; exit 1; }
trap cluster_stop EXIT
q() { psql -X -q -At -v ON_ERROR_STOP=1 "$@"; }

q >/dev/null <<'SQL'
CREATE SCHEMA bench;
CREATE TABLE bench.h (n int PRIMARY KEY, name text NOT NULL, token text NOT NULL,
	epoch bigint NOT NULL DEFAULT 0);
SELECT frameq.create_allocation('hot');
INSERT INTO bench.h (n, name, token)
SELECT g, 'hot-' || g, frameq.register_host('hot-' || g, 'hot', 100000, 1::bigint << 49)
  FROM generate_series(1, 16) g;
UPDATE bench.h SET epoch = (SELECT a.epoch FROM frameq.attach(name, token, 'bench') a);
SELECT frameq.create_show('hot');
SELECT frameq.set_subscription('hot', 'hot', 1000, 10000000);
SELECT frameq.create_folder('hot', 'f', 10000000, 100000);
SELECT frameq.submit(jsonb_build_object('show', 'hot', 'folder', 'f', 'name', name,
	'priority', priority, 'max_cores', 10000000,
	'layers', jsonb_build_array(jsonb_build_object('name', 'render',
		'command', 'render --job #JOB# --layer #LAYER# --frame #ZFRAME#',
		'range', '1-' || frames, 'cores', 1, 'memory', '1GB'))))
  FROM (VALUES ('hot-warm', 10, 1000), ('hot-hot', 100, 20000)) v(name, priority, frames);
-- item 1's shared queue, for FRAMEQ_INSTR_FLOOR
CREATE TABLE bench.ff (id bigserial PRIMARY KEY, queue int NOT NULL, number int NOT NULL,
	state text NOT NULL, version bigint NOT NULL DEFAULT 0, attempts int NOT NULL DEFAULT 0);
CREATE INDEX ff_waiting ON bench.ff (queue, number) WHERE state = 'waiting';
CREATE INDEX ff_live ON bench.ff (queue, state) WHERE state IN ('waiting', 'running');
CREATE TABLE bench.fp (id bigint PRIMARY KEY, frame bigint NOT NULL UNIQUE, host int NOT NULL,
	cores_cc int NOT NULL);
CREATE INDEX fp_host ON bench.fp (host);
CREATE TABLE bench.fr (proc bigint PRIMARY KEY, frame bigint NOT NULL, host int NOT NULL,
	started_at timestamptz NOT NULL, ended_at timestamptz, exit_status int);
CREATE INDEX fr_frame ON bench.fr (frame);
CREATE TABLE bench.fh (id int PRIMARY KEY, idle_cc bigint NOT NULL);
INSERT INTO bench.fh SELECT g, 1000000000000 FROM generate_series(1, 64) g;
INSERT INTO bench.ff (queue, number, state) SELECT 49, g, 'waiting' FROM generate_series(1, 20000) g;
SQL
# one booking per host (the sessions' first calls), then the statistics
for n in $(seq 1 16); do
	q -c "SELECT count(*) FROM bench.h, frameq.reserve(name, token, epoch, 1) WHERE n = $n" >/dev/null
done
if [[ -n ${FRAMEQ_INSTR_SETUP:-} ]]; then
	q -c "$FRAMEQ_INSTR_SETUP" >/dev/null
fi
q -c "VACUUM ANALYZE" >/dev/null
read -r NAME TOKEN EPOCH < <(q -F ' ' -c "SELECT name, token, epoch FROM bench.h WHERE n = 1")
cluster_psql -d postgres -c CHECKPOINT
_frameq_pg_ctl -w -m fast stop >/dev/null

if [[ ${FRAMEQ_INSTR_FLOOR:-0} == 1 ]]; then
	WHAT="the bare shared-queue booking"
	PREPARE="PREPARE b AS WITH c AS (SELECT id FROM bench.ff WHERE queue = 49 AND state = 'waiting' ORDER BY number LIMIT 1 FOR UPDATE SKIP LOCKED), f AS (UPDATE bench.ff SET state = 'running', version = version + 1, attempts = attempts + 1 FROM c WHERE ff.id = c.id RETURNING ff.id), p AS (INSERT INTO bench.fp SELECT (random() * 9e18)::bigint, f.id, 1, 100 FROM f RETURNING id, frame), r AS (INSERT INTO bench.fr SELECT p.id, p.frame, 1, clock_timestamp() FROM p RETURNING proc), h AS (UPDATE bench.fh SET idle_cc = idle_cc - 100 * (SELECT count(*) FROM p) WHERE id = 1 RETURNING id) SELECT (SELECT count(*) FROM r), (SELECT count(*) FROM h)"
	EXEC="EXECUTE b"
elif [[ ${FRAMEQ_INSTR_LIFE:-0} == 1 ]]; then
	WHAT="reserve(..., 1) and complete() in one statement"
	PREPARE="PREPARE b AS SELECT count(*) FROM (SELECT frameq.complete('$NAME', '$TOKEN', $EPOCH, r.proc, 0) FROM frameq.reserve('$NAME', '$TOKEN', $EPOCH, 1) r) c"
	EXEC="EXECUTE b"
else
	FRAMES=${FRAMEQ_INSTR_FRAMES:-1}
	WHAT="reserve(..., $FRAMES)"
	PREPARE="PREPARE b AS SELECT count(*) FROM frameq.reserve('$NAME', '$TOKEN', $EPOCH, $FRAMES)"
	EXEC="EXECUTE b"
fi

# run N: the prepared statement executed N times in a single-user backend
# on a fresh copy of the data; prints the instructions callgrind counted
run() {
	local n=$1 data="$FRAMEQ_CLUSTER_DIR/data-$1"
	cp -a "$FRAMEQ_PGDATA" "$data"
	{ echo "$PREPARE"; for _ in $(seq 1 "$n"); do echo "$EXEC"; done; } >"$OUT/input-$n.sql"
	chmod 644 "$OUT/input-$n.sql"
	(cd "$FRAMEQ_CLUSTER_DIR" && runuser -u postgres -- valgrind --tool=callgrind \
		--callgrind-out-file="$OUT/callgrind.$n" \
		"$FRAMEQ_PGBIN/postgres" --single -D "$data" -c shared_preload_libraries=frameq \
		-c frameq.quarantine=off -c fsync=off frameq_test <"$OUT/input-$n.sql") \
		>"$OUT/output-$n.txt" 2>&1
	if grep -q 'ERROR' "$OUT/output-$n.txt"; then
		grep -m3 'ERROR' "$OUT/output-$n.txt" >&2
		exit 1
	fi
	rm -rf -- "$data"
	sed -n 's/^summary: //p' "$OUT/callgrind.$n"
}
low=$(run "$LOW")
high=$(run "$HIGH")
booked=$(grep -c '^[[:space:]]*1: count = "[1-9]' "$OUT/output-$HIGH.txt" || true)
echo "$WHAT on item 2a's farm ($TREE at $(git -C "$TREE" rev-parse --short HEAD)):"
echo "  $LOW calls: $low instructions; $HIGH calls: $high; $booked of $HIGH booked (count > 0)"
echo "  per call: $(((high - low) / (HIGH - LOW)))"
echo "  callgrind files: ${OUT#"$REPO"/}/"
