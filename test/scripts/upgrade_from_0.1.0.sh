#!/usr/bin/env bash
# ALTER EXTENSION frameq UPDATE from 0.1.0 with live work in the farm.
#
# frameq serves one database (frameq.database) and its worker runs only
# there, so the test uses test/run's frameq_test itself: it drops the
# extension, installs VERSION '0.1.0' and fills it with a farm in mid-flight
# (show, allocation, subscription, folder with caps, a limit, three hosts
# attached with leases, a finished job with its run history, a job with
# running procs and frames still waiting, a kill order on a running frame,
# a host set down).  With the new library loaded and the schema still at
# 0.1.0, reserve() must refuse (55000, "run ALTER EXTENSION frameq
# UPDATE"), so the procs are booked by direct INSERT, which the 0.1.0
# triggers turn into bookings as reserve() would.  It records every row of every table
# (the 0.1.0 columns, less proc.kill_sent_at, which the worker's resends
# move), ledger() and check(), runs ALTER EXTENSION frameq UPDATE, and
# proves:
#   - extversion is the control file's default_version (every step from
#     0.1.0 on runs, in order) and check() reports nothing;
#   - every row recorded is unchanged (procs, frame states, run records,
#     host epochs and leases, caps) and ledger() is the same;
#   - the kill order is still one, and a heartbeat lists it;
#   - reserve books a waiting frame (with a run_secret of 32 hex digits
#     when the booking has that column), complete accepts it, and the
#     release is announced on frameq_release;
#   - the catalog of schema frameq after the upgrade (functions with their
#     arguments, result, language, SECURITY DEFINER, settings, privileges
#     and body; tables, views, types and their columns, defaults,
#     constraints, indexes, triggers, policies; the extension's members)
#     is exactly that of a fresh CREATE EXTENSION frameq.
# The extension is left freshly installed at its default version, as the
# other tests expect it.  Needs python3-psycopg2 (Debian).
set -euo pipefail

# shellcheck source=worker_lib.bash
source "$(dirname "$0")/worker_lib.bash"
need_debs python3-psycopg2

done_file="${FRAMEQ_TEST_TMP:-/tmp}/upgrade_done.$$"
rm -f "$done_file"
restore() {
	# whatever happened, later tests find a fresh install
	if [[ ! -e $done_file ]]; then
		psql -X -q -At -v ON_ERROR_STOP=1 -c "DROP EXTENSION IF EXISTS frameq CASCADE" \
			-c "CREATE EXTENSION frameq" >/dev/null ||
			echo "not ok: could not reinstall the extension after the test"
	fi
	rm -f "$done_file"
}
trap restore EXIT

FRAMEQ_REPO="$(cd "$(dirname "$0")/../.." && pwd)" UPG_DONE_FILE=$done_file $PY - <<'PY'
import json, os, re, time
import psycopg2

# the version a fresh install and an update reach: frameq.control's default_version
CONTROL = os.path.join(os.environ["FRAMEQ_REPO"], "frameq.control")
LATEST = re.search(r"default_version\s*=\s*'([^']+)'", open(CONTROL).read()).group(1)
from fqtest import (Listener, attach, bail, check_clean, connect, fail, finish, ok, queries, register,
                    wait_for_worker)

db = connect()
q, q1 = queries(db)
wait_for_worker(q)

q("DROP EXTENSION frameq CASCADE")
q("CREATE EXTENSION frameq VERSION '0.1.0'")
if q1("SELECT extversion FROM pg_extension WHERE extname = 'frameq'") != "0.1.0":
    bail("could not install frameq 0.1.0")

# ------------------------------------------------------------ the farm
q("SELECT frameq.create_allocation('upg.pool')")
q("SELECT frameq.create_show('upg')")
q("SELECT frameq.set_subscription('upg', 'upg.pool', 100, 100)")
q("SELECT frameq.create_folder('upg', 'fold', 50, 4)")
q("SELECT frameq.create_limit('upg.lic', 10)")
H1 = register(q, "upg-h1", "upg.pool", 8)
H2 = register(q, "upg-h2", "upg.pool", 4)
H3 = register(q, "upg-h3", "upg.pool", 4)
for h in (H1, H2, H3):
    attach(q, h)

def spec(name, frames, **extra):
    layer = dict(name="l", command="render #IFRAME#", range=frames, cores=1, memory="1GB")
    layer.update(extra.pop("layer", {}))
    return json.dumps(dict(show="upg", name=name, layers=[layer], **extra))

def reserve(h, n):
    """Book up to n waiting frames (in frame order) onto h at 0.1.0.

    Between a restart on this build's library and ALTER EXTENSION UPDATE the
    library refuses to book (55000, "run ALTER EXTENSION frameq UPDATE"):
    the 0.1.0 schema takes the host lock the old way, which the library's
    booking would not wait for.  So the live work is booked the way a
    superuser may: a direct INSERT of the procs, which the 0.1.0 triggers
    turn into bookings exactly as reserve() would (frame running, host
    capacity, caps ledger, run record)."""
    got = q("""INSERT INTO frameq.proc (id, frame, host, epoch, job, layer, show, folder, allocation,
                                          limits, cores_cc, memory, gpus, gpu_memory)
               SELECT 1 + floor(random() * 9e18)::bigint, f.id, h.id, h.epoch, f.job, f.layer, j.show,
                      j.folder, h.allocation,
                      coalesce((SELECT array_agg(ll.limit_id ORDER BY ll.limit_id)
                                  FROM frameq.layer_limit ll WHERE ll.layer = l.id), '{}'),
                      l.min_cc, l.memory, l.gpus, l.gpu_memory
                 FROM (SELECT * FROM frameq.frame WHERE state = 'waiting' ORDER BY id LIMIT %s) f
                 JOIN frameq.layer l ON l.id = f.layer
                 JOIN frameq.job j ON j.id = f.job,
                      frameq.host h
                WHERE h.name = %s
               RETURNING id, frame""", n, h["name"])
    got.sort(key=lambda r: r[1])
    h["procs"] += [p for p, f in got]
    return got

# the library refuses to book or report against the old schema, and says why
try:
    q("SELECT * FROM frameq.reserve(%s, %s, %s, 1)", H1["name"], H1["token"], H1["epoch"])
    fail("reserve at 0.1.0 with the %s library booked instead of asking for the update" % LATEST)
except psycopg2.Error as e:
    if e.pgcode == "55000" and "ALTER EXTENSION frameq UPDATE" in (e.pgerror or ""):
        ok("reserve at 0.1.0 is refused with 55000 and a hint to run ALTER EXTENSION frameq UPDATE")
    else:
        fail("reserve at 0.1.0 failed with %s %s" % (e.pgcode, e.pgerror))

# a job that ran and finished: one run record, ended completed
jf = q1("SELECT frameq.submit(%s)", spec("finished", "1"))
b = reserve(H2, 1)
if len(b) != 1:
    bail("setup: reserve for the finished job booked %s" % b)
# its completion, as complete() would release it (complete() too waits for the update)
q("SELECT frameq._release(%s, 'completed', 'succeeded')", b[0][0])
H2["procs"].remove(b[0][0])

# a live job in the folder, under the limit: 4 frames on h1, 2 on h2, 2 waiting
ja = q1("SELECT frameq.submit(%s)", spec("live", "1-8", folder="fold", layer=dict(limits=["upg.lic"])))
if len(reserve(H1, 4)) != 4 or len(reserve(H2, 2)) != 2:
    bail("setup: reserve did not book 4 frames on h1 and 2 on h2")
killed = H1["procs"][0]
kframe = q1("SELECT frame FROM frameq.proc WHERE id = %s", killed)
q("SELECT frameq.kill_frame(%s, 'upgrade test')", kframe)
q("SELECT frameq.set_host_state('upg-h3', 'down')")

setup = q("SELECT (SELECT state FROM frameq.job WHERE id = %s), (SELECT state FROM frameq.proc WHERE id = %s),"
          "       (SELECT string_agg(state || ':' || n, ',' ORDER BY state)"
          "          FROM (SELECT state, count(*) n FROM frameq.frame WHERE job = %s GROUP BY state) s),"
          "       (SELECT state FROM frameq.host WHERE name = 'upg-h3'),"
          "       (SELECT count(*) FROM frameq.run)", jf, killed, ja)[0]
if setup != ("finished", "killing", "running:6,waiting:2", "down", 7):
    bail("setup: finished job, kill order, frames, h3, runs = %s" % (setup,))
check_clean(q, "check() on 0.1.0 before the update")

# ------------------------------------------------------------ snapshot
TABLES = [r[0] for r in q("SELECT c.relname FROM pg_class c WHERE c.relnamespace = 'frameq'::regnamespace"
                          " AND c.relkind = 'r' ORDER BY 1")]
COLS = {t: [r[0] for r in q("SELECT attname FROM pg_attribute WHERE attrelid = ('frameq.' || %s)::regclass"
                            " AND attnum > 0 AND NOT attisdropped AND attname <> 'kill_sent_at'"
                            " ORDER BY attnum", t)]
        for t in TABLES}

def rows(t):
    """every row of table t, as jsonb restricted to the 0.1.0 columns, sorted"""
    return [r[0] for r in q("SELECT (SELECT jsonb_object_agg(k, to_jsonb(t) -> k) FROM unnest(%s::text[]) k)::text"
                            "  FROM frameq." + t + " t ORDER BY 1", COLS[t])]

SEQS = [r[0] for r in q("SELECT sequencename::text FROM pg_sequences WHERE schemaname = 'frameq'")]

def snapshot():
    """the rows of the 0.1.0 tables and sequences (later steps add their own)"""
    s = {t: rows(t) for t in TABLES}
    s["ledger()"] = [str(r) for r in q("SELECT * FROM frameq.ledger() ORDER BY 1, 2, 3")]
    s["sequences"] = [str(r) for r in q("SELECT sequencename, last_value FROM pg_sequences"
                                        " WHERE schemaname = 'frameq' AND sequencename = ANY (%s)"
                                        " ORDER BY 1", SEQS)]
    return s

before = snapshot()
if len(before["proc"]) != 6 or not before["ledger()"]:
    bail("setup: %d procs, ledger %s" % (len(before["proc"]), before["ledger()"]))

# ------------------------------------------------------------ the update
q("ALTER EXTENSION frameq UPDATE")
v = q1("SELECT extversion FROM pg_extension WHERE extname = 'frameq'")
if v != LATEST:
    bail("extversion after ALTER EXTENSION frameq UPDATE is %s, wanted %s" % (v, LATEST))
ok("ALTER EXTENSION frameq UPDATE went from 0.1.0 to %s" % LATEST)
problems = q("SELECT invariant, detail FROM frameq.check()")
if problems:
    fail("check() after the update: %s" % problems)
else:
    ok("check() reports nothing after the update")

after = snapshot()
for k in before:
    if before[k] != after[k]:
        gone = [r for r in before[k] if r not in after[k]]
        new = [r for r in after[k] if r not in before[k]]
        fail("%s changed in the update: before only %s; after only %s" % (k, gone[:5], new[:5]))
    else:
        ok("%s: all %d rows unchanged" % (k, len(before[k])))

# the leases held across the update: recorded as granted for what they run
# (0.6.0; lease_expires_at - last_renewal_at, the ttl of the last renewal)
leases = q("SELECT count(*), count(*) FILTER (WHERE lease_granted = lease_expires_at - last_renewal_at"
           "                                  AND lease_granted > interval '0')"
           "  FROM frameq.host WHERE lease_expires_at IS NOT NULL")[0]
if leases[0] == 0 or leases[0] != leases[1]:
    fail("leases held across the update: %d, %d of them with lease_granted their ttl" % leases)
else:
    ok("the %d leases held across the update are recorded as granted for their ttl" % leases[0])

# the kill order is still one, and the host is told so
st = q("SELECT state, want_state, kill_reason FROM frameq.proc WHERE id = %s", killed)
if st != [("killing", "dead", "upgrade test")]:
    fail("the kill order after the update: %s" % st)
kill = q1("SELECT kill FROM frameq.heartbeat(%s, %s, %s, %s::bigint[])",
          H1["name"], H1["token"], H1["epoch"], H1["procs"])
if kill != [killed]:
    fail("h1's heartbeat after the update listed kill orders %s, wanted [%d]" % (kill, killed))
else:
    ok("the kill order survived the update and the heartbeat lists it")
kill2 = q1("SELECT kill FROM frameq.heartbeat(%s, %s, %s, %s::bigint[])",
           H2["name"], H2["token"], H2["epoch"], H2["procs"])
if kill2:
    fail("h2's heartbeat after the update listed kill orders %s" % kill2)

# a booking and a release on the updated schema
lis = Listener("frameq_release")
with db.cursor() as cur:
    cur.execute("SELECT * FROM frameq.reserve(%s, %s, %s, 1)", (H1["name"], H1["token"], H1["epoch"]))
    names = [d[0] for d in cur.description]
    got = [dict(zip(names, r)) for r in cur.fetchall()]
if len(got) != 1 or q1("SELECT number FROM frameq.frame WHERE id = %s", got[0]["frame"]) != 7:
    bail("reserve after the update booked %s, wanted frame 7 of the live job" % got)
bk = got[0]
ok("reserve after the update booked frame 7 (proc %d)" % bk["proc"])
if "run_secret" in bk:
    if not re.fullmatch(r"[0-9a-f]{32}", bk["run_secret"] or ""):
        fail("the booking's run_secret is %r, wanted 32 hex digits" % bk["run_secret"])
    elif bk["run_secret"] != q1("SELECT frameq._run_secret(%s)", bk["proc"]):
        fail("the booking's run_secret is not frameq._run_secret(proc)")
    else:
        ok("the booking carries its run secret")
res = q1("SELECT frameq.complete(%s, %s, %s, %s, 0)", H1["name"], H1["token"], H1["epoch"], bk["proc"])
fst = q1("SELECT state FROM frameq.frame WHERE id = %s", bk["frame"])
note = lis.wait(lambda ch, pl: json.loads(pl).get("proc") == bk["proc"], 5)
if fst != "succeeded" or note is None:
    fail("complete after the update returned %s; frame %s, release notification %s" % (res, fst, note))
else:
    ok("complete after the update: %s, frame succeeded, frameq_release says %s" % (res, note[2]))
check_clean(q, "check() after booking and releasing on %s" % LATEST)

# ------------------------------------------------------------ catalog
CATALOG = """
WITH ns AS (SELECT 'frameq'::regnamespace::oid AS oid),
ext AS (SELECT oid FROM pg_extension WHERE extname = 'frameq')
SELECT 'function ' || p.proname || '(' || pg_get_function_arguments(p.oid) || ') returns '
       || pg_get_function_result(p.oid) || ' language ' || l.lanname || ' secdef ' || p.prosecdef
       || ' volatile ' || p.provolatile::text || ' strict ' || p.proisstrict || ' parallel ' || p.proparallel::text
       || ' owner ' || p.proowner::regrole || ' config ' || coalesce(p.proconfig::text, '-')
       || ' acl ' || coalesce(p.proacl::text, '-') || ' body ' || md5(p.prosrc)
       || ' bin ' || coalesce(p.probin, '-')
  FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang WHERE p.pronamespace = (SELECT oid FROM ns)
UNION ALL
SELECT 'relation ' || c.relname || ' kind ' || c.relkind::text || ' owner ' || c.relowner::regrole
       || ' acl ' || coalesce(c.relacl::text, '-') || ' persistence ' || c.relpersistence::text
       || ' rls ' || c.relrowsecurity || ' options ' || coalesce(c.reloptions::text, '-')
  FROM pg_class c WHERE c.relnamespace = (SELECT oid FROM ns)
UNION ALL
SELECT 'column ' || c.relname || '.' || a.attname || ' #' || a.attnum || ' '
       || format_type(a.atttypid, a.atttypmod) || ' notnull ' || a.attnotnull
       || ' default ' || coalesce(pg_get_expr(d.adbin, d.adrelid), '-')
       || ' acl ' || coalesce(a.attacl::text, '-') || ' collation ' || a.attcollation
  FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
  LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
 WHERE c.relnamespace = (SELECT oid FROM ns) AND a.attnum > 0 AND NOT a.attisdropped
UNION ALL
SELECT 'constraint ' || coalesce(c.relname, t.typname) || ' ' || k.conname || ' '
       || pg_get_constraintdef(k.oid) || ' deferrable ' || k.condeferrable
  FROM pg_constraint k LEFT JOIN pg_class c ON c.oid = k.conrelid LEFT JOIN pg_type t ON t.oid = k.contypid
 WHERE k.connamespace = (SELECT oid FROM ns)
UNION ALL
SELECT 'index ' || pg_get_indexdef(i.indexrelid)
  FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid WHERE c.relnamespace = (SELECT oid FROM ns)
UNION ALL
SELECT 'trigger ' || pg_get_triggerdef(g.oid) || ' enabled ' || g.tgenabled::text
  FROM pg_trigger g JOIN pg_class c ON c.oid = g.tgrelid
 WHERE c.relnamespace = (SELECT oid FROM ns) AND NOT g.tgisinternal
UNION ALL
SELECT 'view ' || c.relname || ' ' || md5(pg_get_viewdef(c.oid))
  FROM pg_class c WHERE c.relnamespace = (SELECT oid FROM ns) AND c.relkind IN ('v', 'm')
UNION ALL
SELECT 'type ' || t.typname || ' type ' || t.typtype::text || ' owner ' || t.typowner::regrole
       || ' acl ' || coalesce(t.typacl::text, '-')
  FROM pg_type t WHERE t.typnamespace = (SELECT oid FROM ns)
UNION ALL
SELECT 'policy ' || c.relname || ' ' || po.polname || ' ' || po.polcmd::text || ' '
       || coalesce(pg_get_expr(po.polqual, po.polrelid), '-') || ' '
       || coalesce(pg_get_expr(po.polwithcheck, po.polrelid), '-')
  FROM pg_policy po JOIN pg_class c ON c.oid = po.polrelid WHERE c.relnamespace = (SELECT oid FROM ns)
UNION ALL
SELECT 'schema ' || n.nspname || ' owner ' || n.nspowner::regrole || ' acl ' || coalesce(n.nspacl::text, '-')
  FROM pg_namespace n WHERE n.oid = (SELECT oid FROM ns)
UNION ALL
SELECT 'member ' || pg_describe_object(classid, objid, objsubid)
  FROM pg_depend WHERE refclassid = 'pg_extension'::regclass AND refobjid = (SELECT oid FROM ext)
   AND deptype = 'e'
UNION ALL
SELECT 'config ' || coalesce((SELECT array_agg(x::regclass::text ORDER BY x::regclass::text)
                                FROM unnest(e.extconfig) x)::text, '-')
  FROM pg_extension e WHERE e.oid = (SELECT oid FROM ext)
ORDER BY 1
"""
upgraded = [r[0] for r in q(CATALOG)]

q("DROP EXTENSION frameq CASCADE")
q("CREATE EXTENSION frameq")
if q1("SELECT extversion FROM pg_extension WHERE extname = 'frameq'") != LATEST:
    fail("a fresh CREATE EXTENSION frameq did not install %s" % LATEST)
fresh = [r[0] for r in q(CATALOG)]
only_up = [x for x in upgraded if x not in fresh]
only_fresh = [x for x in fresh if x not in upgraded]
if only_up or only_fresh:
    fail("the catalog after the update differs from a fresh install:\n  only after the update:\n    %s\n"
         "  only in a fresh install:\n    %s" % ("\n    ".join(only_up), "\n    ".join(only_fresh)))
else:
    ok("the catalog after the update equals a fresh install's (%d entries)" % len(fresh))
if q("SELECT * FROM frameq.ledger()"):
    fail("the fresh install's ledger is not empty: %s" % q("SELECT * FROM frameq.ledger()"))
check_clean(q, "check() on the fresh install")
open(os.environ["UPG_DONE_FILE"], "w").close()
finish()
PY
