#!/usr/bin/env bash
# Log flooding (doc/security.md): an error message quotes at most 64
# characters of what it was given, so one call with a 10 MB argument cannot
# write a 10 MB line into the server log.
#
# A 10 MB host name goes to attach, heartbeat, reserve and complete (as a
# host's login role, a member of frameq_agent: "not registered", 42704), and
# a 10 MB name to register_host, create_show and create_allocation (as a
# member of frameq_admin: longer than a name may be, 54000).  The names are made on
# the server (repeat()), so the statement text itself stays short and only
# what frameq says can carry them into the log.  Each call must fail with
# its SQLSTATE and a message (with its detail and hint) under 1 kB, and
# the server log must grow by less than 10 kB over all seven.
#
# On 0.1.0 the "not registered" and "not a valid name" messages quote the
# whole name.  Needs python3-psycopg2 (Debian).
set -euo pipefail

# shellcheck source=worker_lib.bash
source "$(dirname "$0")/worker_lib.bash"
need_debs python3-psycopg2

AGENT=fq_flood_agent_$$ ADMIN=fq_flood_admin_$$
export AGENT ADMIN
psql_q() { psql -X -q -At -v ON_ERROR_STOP=1 "$@"; }
restore() {
	psql_q -c "DROP ROLE IF EXISTS $AGENT" -c "DROP ROLE IF EXISTS $ADMIN" >/dev/null 2>&1 || true
}
trap restore EXIT
psql_q -c "CREATE ROLE $AGENT LOGIN IN ROLE frameq_agent" -c "CREATE ROLE $ADMIN LOGIN IN ROLE frameq_admin" >/dev/null

$PY - <<'PY'
import os
import psycopg2
from fqtest import bail, connect, fail, finish, ok

log = os.environ["FRAMEQ_LOG"]
agent = connect(user=os.environ["AGENT"])
admin = connect(user=os.environ["ADMIN"])
BIG = "repeat('n', 10 * 1024 * 1024)"
calls = [
    (agent, "attach", "SELECT frameq.attach(%s, 'token', 'boot-1')" % BIG, "42704"),
    (agent, "heartbeat", "SELECT frameq.heartbeat(%s, 'token', 1, '{}')" % BIG, "42704"),
    (agent, "reserve", "SELECT * FROM frameq.reserve(%s, 'token', 1, 1)" % BIG, "42704"),
    (agent, "complete", "SELECT frameq.complete(%s, 'token', 1, 1, 0)" % BIG, "42704"),
    (admin, "register_host", "SELECT frameq.register_host(%s, 'flood.pool', 1, 1000000)" % BIG, "54000"),
    (admin, "create_show", "SELECT frameq.create_show(%s)" % BIG, "54000"),
    (admin, "create_allocation", "SELECT frameq.create_allocation(%s)" % BIG, "54000"),
]

size0 = os.path.getsize(log)
for conn, name, sql, want in calls:
    try:
        with conn.cursor() as cur:
            # in a transaction that is rolled back, with an allocation that
            # exists, so that the name is all register_host can refuse
            if name == "register_host":
                cur.execute("BEGIN; SELECT frameq.create_allocation('flood.pool')")
            cur.execute(sql)
        fail("%s with a 10 MB name succeeded" % name)
        continue
    except psycopg2.Error as e:
        if name == "register_host":
            conn.cursor().execute("ROLLBACK")
        code, text = e.pgcode, e.pgerror or ""
        diag = e.diag
        said = sum(len(x or "") for x in (diag.message_primary, diag.message_detail, diag.message_hint))
    if code != want:
        fail("%s with a 10 MB name: SQLSTATE %s (%s), wanted %s" % (name, code, text[:200], want))
    elif said >= 1024:
        fail("%s with a 10 MB name: its message, detail and hint are %d characters" % (name, said))
    else:
        ok("%s with a 10 MB name: %s, %d characters: %s" % (name, code, said, diag.message_primary))
grown = os.path.getsize(log) - size0
if grown >= 10 * 1024:
    fail("the server log grew by %d bytes over the seven calls (limit 10 kB)" % grown)
else:
    ok("the server log grew by %d bytes over the seven calls" % grown)
finish()
PY
