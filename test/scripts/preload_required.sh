#!/usr/bin/env bash
# Without shared_preload_libraries = 'frameq', CREATE EXTENSION must fail
# with SQLSTATE 55000 and a hint that says how to fix it, and leave nothing
# behind.  Uses a cluster of its own, started without the preload.
set -euo pipefail
cd "$(dirname "$0")/../.."
unset FRAMEQ_CLUSTER_DIR FRAMEQ_PGDATA FRAMEQ_LOG
export FRAMEQ_PORT=54359 FRAMEQ_PRELOAD='' FRAMEQ_SKIP_EXTENSION=1
# shellcheck source=../cluster.sh
source test/cluster.sh
cluster_start >/dev/null

out=$(psql -X -v ON_ERROR_STOP=1 -v VERBOSITY=verbose -c 'CREATE EXTENSION frameq' 2>&1 || true)
echo "$out"
fail=0
grep -q 'ERROR:  55000: frameq must be loaded via shared_preload_libraries' <<<"$out" ||
	{ echo "not ok: wrong error or SQLSTATE"; fail=1; }
grep -q 'HINT:  Add frameq to shared_preload_libraries in postgresql.conf and restart the server.' <<<"$out" ||
	{ echo "not ok: no hint"; fail=1; }
left=$(psql -X -At -c "SELECT count(*) FROM pg_namespace WHERE nspname = 'frameq'")
[ "$left" = 0 ] || { echo "not ok: schema frameq was left behind"; fail=1; }
exit $fail
