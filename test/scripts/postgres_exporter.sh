#!/usr/bin/env bash
# contrib/postgres_exporter/frameq.yaml with Debian's
# prometheus-postgres-exporter (installed if missing): the exporter runs
# against test/run's cluster as a login role that is only a frameq_reader,
# with that file as its --extend.query-path, listening on a free loopback
# port; one scrape of /metrics must hold
#   - the scripted farm's own series with their values: 2 frames and 3
#     cores running in its show, a show with nothing waiting at 0 s, the
#     farm's hosts by state;
#   - every series of the view frameq.metrics that the file exports, with
#     the view's value read right after the scrape (the farm is quiet; the
#     ages of the oldest waiting job and of the worker's counts within 5 s;
#     the counts as the worker's _count_live and _count_history leave them);
#   - series padded by the shared "frameq" query at 0 only;
#   - no error from any of the file's queries (pg_exporter_last_scrape_error 0,
#     and the exporter's log has no error line).
set -euo pipefail

# shellcheck source=worker_lib.bash
source "$(dirname "$0")/worker_lib.bash"
need_debs prometheus-postgres-exporter

tmp=${FRAMEQ_TEST_TMP:-$(mktemp -d)}
sfx="pe$$"
exporter_pid=""
cleanup() {
	if [[ -n $exporter_pid ]]; then
		kill "$exporter_pid" 2>/dev/null || true
		wait "$exporter_pid" 2>/dev/null || true
	fi
	psql -X -q -v ON_ERROR_STOP=1 >/dev/null <<SQL || true
DROP ROLE IF EXISTS ${sfx}_exporter;
SQL
}
trap cleanup EXIT
q() { psql -X -q -At -v ON_ERROR_STOP=1 "$@"; }

# the farm: show A with two 1.5-core frames running on h1 and one waiting;
# show B with one job finished; hosts h1, h2 up and h3 in repair
q >/dev/null <<SQL
CREATE ROLE ${sfx}_exporter LOGIN IN ROLE frameq_reader;
SELECT frameq.create_allocation('${sfx}.pool');
SELECT frameq.create_show('${sfx}a'), frameq.create_show('${sfx}b');
SELECT frameq.set_subscription(s, '${sfx}.pool', 100, 100) FROM unnest(ARRAY['${sfx}a', '${sfx}b']) s;
SELECT count(frameq.register_host('${sfx}-h' || n, '${sfx}.pool', 8, 17179869184))
  FROM generate_series(1, 3) n;
SQL
# each host's token (rotated: register_host's is not kept) and attach, a statement each
for n in 1 2 3; do
	tok=$(q -c "SELECT frameq.rotate_host_token('${sfx}-h$n')")
	printf -v "tok$n" '%s' "$tok"
	printf -v "epoch$n" '%s' "$(q -c "SELECT epoch FROM frameq.attach('${sfx}-h$n', '$tok', 'boot')")"
done
q >/dev/null <<SQL
SELECT frameq.set_host_state('${sfx}-h3', 'repair');
SELECT frameq.submit('{"show": "${sfx}b", "name": "done", "priority": 50,
	"layers": [{"name": "l", "command": "c", "range": "1"}]}');
SELECT frameq.complete('${sfx}-h2', '$tok2', $epoch2, r.proc, 0)
  FROM frameq.reserve('${sfx}-h2', '$tok2', $epoch2, 1) r;
SELECT frameq.submit('{"show": "${sfx}a", "name": "busy",
	"layers": [{"name": "l", "command": "c", "range": "1-3", "cores": 1.5}]}');
SELECT count(*) FROM frameq.reserve('${sfx}-h1', '$tok1', $epoch1, 2);
SELECT frameq._count_history(), frameq._count_live();
SQL

# the exporter, on a free loopback port
port=$($PY -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
DATA_SOURCE_NAME="host=$PGHOST port=$PGPORT dbname=$PGDATABASE user=${sfx}_exporter sslmode=disable" \
	prometheus-postgres-exporter --web.listen-address="127.0.0.1:$port" \
	--extend.query-path="$FRAMEQ_REPO/contrib/postgres_exporter/frameq.yaml" \
	--disable-settings-metrics >"$tmp/exporter.log" 2>&1 &
exporter_pid=$!

$PY - "$port" "$sfx" "$tmp" <<'PY'
import json, re, subprocess, sys, time, urllib.request
port, sfx, tmp = sys.argv[1:]
fails = []
def ok(cond, what):
    print(("ok - " if cond else "not ok - ") + what)
    if not cond:
        fails.append(what)

# the exporter answers once it listens: poll its port (no fixed sleep)
deadline = time.monotonic() + 30
while True:
    try:
        body = urllib.request.urlopen("http://127.0.0.1:%s/metrics" % port, timeout=5).read().decode()
        break
    except OSError:
        if time.monotonic() > deadline:
            print("not ok - the exporter never answered; its log:")
            print(open(tmp + "/exporter.log").read())
            sys.exit(1)
        time.sleep(0.1)
open(tmp + "/metrics.txt", "w").write(body)
view = json.loads(subprocess.check_output(["psql", "-X", "-At", "-c",
    "SELECT json_agg(json_build_array(name, labels, value)) FROM frameq.metrics"]).decode())

line = re.compile(r'^(frameq_[a-z_]+)(?:\{(.*)\})? (\S+)$')
got = {}
for l in body.splitlines():
    m = line.match(l)
    if m:
        labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(2) or ""))
        labels.pop("server", None)
        got[(m.group(1), tuple(sorted(labels.items())))] = float(m.group(3))
ok(len(got) > 0, "the scrape has frameq series (%d)" % len(got))

def series(name, **labels):
    return got.get((name, tuple(sorted(labels.items()))))
ok(series("frameq_running_frames", show=sfx + "a") == 2, "frameq_running_frames{show=A} = 2")
ok(series("frameq_running_cores", show=sfx + "a") == 3, "frameq_running_cores{show=A} = 3")
ok(series("frameq_running_frames", show=sfx + "b") == 0, "frameq_running_frames{show=B} = 0")
ok(series("frameq_oldest_waiting_seconds", show=sfx + "b") == 0, "show B has nothing waiting: 0 s")
ok((series("frameq_oldest_waiting_seconds", show=sfx + "a") or -1) >= 0, "show A's oldest waiting is there")
ok((series("frameq_runs_ended_total", reason="completed") or 0) >= 1, "B's run is counted completed")
ok(series("frameq_hosts", state="repair") is not None and series("frameq_hosts", state="repair") >= 1,
   "a host in repair is counted")

# every view series the file exports, at the view's value
seen = set()
for name, labels, value in view:
    key = (name, tuple(sorted(labels.items())))
    if key not in got:
        fails.append("missing from the scrape: %s %s" % (name, labels))
        print("not ok - missing from the scrape: %s %s" % (name, labels))
        continue
    seen.add(key)
    tol = 5 if name in ("frameq_oldest_waiting_seconds", "frameq_counted_age_seconds",
                        "frameq_frames_age_seconds") else 0
    if abs(got[key] - value) > tol:
        fails.append("%s %s: scraped %s, view %s" % (name, labels, got[key], value))
        print("not ok - %s %s: scraped %s, the view %s" % (name, labels, got[key], value))
ok(len(seen) == len(view), "every one of the view's %d series was scraped with its value" % len(view))
extra = {k: v for k, v in got.items() if k not in seen}
ok(all(v == 0 for v in extra.values()) and all(k[0] in ("frameq_frames", "frameq_jobs", "frameq_hosts", "frameq_cores") for k in extra),
   "the only other series (%d) are the shared query's padding, at 0" % len(extra))
err = re.search(r'^pg_exporter_last_scrape_error (\S+)$', body, re.M)
ok(err is not None and float(err.group(1)) == 0, "pg_exporter_last_scrape_error is 0")
log = open(tmp + "/exporter.log").read()
ok(not re.search(r'level=error', log), "the exporter logged no error")
if fails:
    print(log[-3000:])
sys.exit(1 if fails else 0)
PY
