#!/usr/bin/env bash
# Operator and function hijack against the background worker (doc/security.md).
#
# The worker runs its steps (expire lapsed leases, send kill orders) as the
# bootstrap superuser.  An unprivileged login role that may CREATE in
# schema public plants operators and functions there whose bodies run
# ALTER ROLE <itself> SUPERUSER and record that they ran, then returns the
# right answer so that nothing else notices:
#   - overloads that match the worker's expressions exactly where
#     pg_catalog has only a match through an implicit cast, so they win
#     whenever a body resolves names through public: +(int, float8)
#     (lease_period's "1 + clock_drift"), /(int, numeric) and
#     make_interval(secs numeric) (_send_kills' resend interval),
#     ||(text, int) (the host channel's name) and
#     json_build_object(text, bigint, text, text) (the kill's payload);
#   - look-alikes of what the steps call with pg_catalog's own signatures
#     (+(float8, float8), *(interval, float8), +(interval, interval),
#     <(timestamptz, timestamptz), =(int, int), current_setting(text),
#     clock_timestamp(), pg_notify(text, text)), which win only where a
#     path puts public before pg_catalog.
# Then the worker is made to do both steps, with a lease period of 2 s:
# host "lapse" is attached, booked and silent; host "kill" runs a frame
# that an operator kills.  Polled every 50 ms for at most 20 s: the kill is
# notified on frameq_host_<kill> and "lapse" is expired (down, lease_lost,
# its frame back to waiting with a host_lost run).  The attacker must not
# be superuser and no trap may have run.
#
# On the landed build, 588c689 (library and SQL), the attacker is
# superuser within a second or two.  ESCALATION_VERSION=0.1.0 installs the
# 0.1.0 SQL for such a negative-control run (the extension is reinstalled
# at its default version afterwards); it shows the attack only with
# 588c689's library loaded, since this build's worker pins its own path.
#
# Runs on test/run's shared cluster; the settings, roles and objects it
# makes are removed on exit.  Needs python3-psycopg2 (Debian).
set -euo pipefail

# shellcheck source=worker_lib.bash
source "$(dirname "$0")/worker_lib.bash"
need_debs python3-psycopg2

# our own statements never resolve through public
export PGOPTIONS="-c search_path=pg_catalog,pg_temp"
psql_q() { psql -X -q -At -v ON_ERROR_STOP=1 "$@"; }

ATTACKER=esc_attacker_$$
export ATTACKER ESCALATION_VERSION="${ESCALATION_VERSION:-}"

restore() {
	psql_q -c "ALTER SYSTEM RESET frameq.lease_ttl" -c "ALTER SYSTEM RESET frameq.lease_margin" \
		-c "ALTER SYSTEM RESET frameq.clock_drift" -c "SELECT pg_reload_conf()" >/dev/null 2>&1 || true
	psql_q -c "DROP OWNED BY $ATTACKER" -c "DROP ROLE $ATTACKER" >/dev/null 2>&1 || true
	if [[ -n $ESCALATION_VERSION ]]; then
		psql_q -c "DROP EXTENSION IF EXISTS frameq CASCADE" -c "CREATE EXTENSION frameq" >/dev/null ||
			echo "not ok: could not reinstall the extension after the test"
	fi
}
trap restore EXIT

if [[ -n $ESCALATION_VERSION ]]; then
	psql_q -c "DROP EXTENSION frameq CASCADE" -c "CREATE EXTENSION frameq VERSION '$ESCALATION_VERSION'" >/dev/null
fi

psql_q -c "CREATE ROLE $ATTACKER LOGIN" -c "GRANT CREATE ON SCHEMA public TO $ATTACKER" >/dev/null

# ---- the attacker's traps, made by the attacker's own login
PGOPTIONS= psql_q -U "$ATTACKER" <<SQL
CREATE TABLE public.esc_trap (who text, what text, at timestamptz DEFAULT pg_catalog.clock_timestamp());
GRANT INSERT, SELECT ON public.esc_trap TO PUBLIC;

-- record the call and try to become superuser: works for a superuser caller
CREATE FUNCTION public.esc_fire(what text) RETURNS void LANGUAGE plpgsql AS \$\$
BEGIN
	INSERT INTO public.esc_trap (who, what) VALUES (CURRENT_USER, what);
	BEGIN
		EXECUTE 'ALTER ROLE $ATTACKER SUPERUSER';
	EXCEPTION WHEN insufficient_privilege THEN
		NULL;
	END;
END
\$\$;

-- overloads that beat pg_catalog's through-a-cast matches
CREATE FUNCTION public.esc_int_f8_pl(a int, b float8) RETURNS float8 LANGUAGE plpgsql AS
	\$\$ BEGIN PERFORM public.esc_fire('+(int,float8)'); RETURN a::float8 OPERATOR(pg_catalog.+) b; END \$\$;
CREATE FUNCTION public.esc_int_num_div(a int, b numeric) RETURNS numeric LANGUAGE plpgsql AS
	\$\$ BEGIN PERFORM public.esc_fire('/(int,numeric)'); RETURN a::numeric OPERATOR(pg_catalog./) b; END \$\$;
CREATE FUNCTION public.esc_text_int_cat(a text, b int) RETURNS text LANGUAGE plpgsql AS
	\$\$ BEGIN PERFORM public.esc_fire('||(text,int)'); RETURN a OPERATOR(pg_catalog.||) b::text; END \$\$;
CREATE FUNCTION public.make_interval(secs numeric) RETURNS interval LANGUAGE plpgsql AS
	\$\$ BEGIN PERFORM public.esc_fire('make_interval(numeric)');
	   RETURN pg_catalog.make_interval(secs => secs::float8); END \$\$;
CREATE FUNCTION public.json_build_object(a text, b bigint, c text, d text) RETURNS json LANGUAGE plpgsql AS
	\$\$ BEGIN PERFORM public.esc_fire('json_build_object(text,bigint,text,text)');
	   RETURN pg_catalog.json_build_object(a, b, c, d); END \$\$;

-- look-alikes with pg_catalog's own signatures
CREATE FUNCTION public.esc_f8_pl(a float8, b float8) RETURNS float8 LANGUAGE plpgsql AS
	\$\$ BEGIN PERFORM public.esc_fire('+(float8,float8)'); RETURN a OPERATOR(pg_catalog.+) b; END \$\$;
CREATE FUNCTION public.esc_iv_mul(a interval, b float8) RETURNS interval LANGUAGE plpgsql AS
	\$\$ BEGIN PERFORM public.esc_fire('*(interval,float8)'); RETURN a OPERATOR(pg_catalog.*) b; END \$\$;
CREATE FUNCTION public.esc_iv_pl(a interval, b interval) RETURNS interval LANGUAGE plpgsql AS
	\$\$ BEGIN PERFORM public.esc_fire('+(interval,interval)'); RETURN a OPERATOR(pg_catalog.+) b; END \$\$;
CREATE FUNCTION public.esc_ts_lt(a timestamptz, b timestamptz) RETURNS bool LANGUAGE plpgsql AS
	\$\$ BEGIN PERFORM public.esc_fire('<(timestamptz,timestamptz)'); RETURN a OPERATOR(pg_catalog.<) b; END \$\$;
CREATE FUNCTION public.esc_int_eq(a int, b int) RETURNS bool LANGUAGE plpgsql AS
	\$\$ BEGIN PERFORM public.esc_fire('=(int,int)'); RETURN a OPERATOR(pg_catalog.=) b; END \$\$;
CREATE FUNCTION public.current_setting(name text) RETURNS text LANGUAGE plpgsql AS
	\$\$ BEGIN PERFORM public.esc_fire('current_setting(text)'); RETURN pg_catalog.current_setting(name); END \$\$;
CREATE FUNCTION public.clock_timestamp() RETURNS timestamptz LANGUAGE plpgsql AS
	\$\$ BEGIN PERFORM public.esc_fire('clock_timestamp()'); RETURN pg_catalog.clock_timestamp(); END \$\$;
CREATE FUNCTION public.pg_notify(channel text, payload text) RETURNS void LANGUAGE plpgsql AS
	\$\$ BEGIN PERFORM public.esc_fire('pg_notify(text,text)'); PERFORM pg_catalog.pg_notify(channel, payload); END \$\$;

-- operators last: creating one resets every cached plan, so the worker
-- parses its statements again with the traps in place
CREATE OPERATOR public.+ (LEFTARG = int, RIGHTARG = float8, FUNCTION = public.esc_int_f8_pl);
CREATE OPERATOR public./ (LEFTARG = int, RIGHTARG = numeric, FUNCTION = public.esc_int_num_div);
CREATE OPERATOR public.|| (LEFTARG = text, RIGHTARG = int, FUNCTION = public.esc_text_int_cat);
CREATE OPERATOR public.+ (LEFTARG = float8, RIGHTARG = float8, FUNCTION = public.esc_f8_pl);
CREATE OPERATOR public.* (LEFTARG = interval, RIGHTARG = float8, FUNCTION = public.esc_iv_mul);
CREATE OPERATOR public.+ (LEFTARG = interval, RIGHTARG = interval, FUNCTION = public.esc_iv_pl);
CREATE OPERATOR public.< (LEFTARG = timestamptz, RIGHTARG = timestamptz, FUNCTION = public.esc_ts_lt);
CREATE OPERATOR public.= (LEFTARG = int, RIGHTARG = int, FUNCTION = public.esc_int_eq);
SQL

# the traps are live: an expression of the kind lease_period() holds,
# resolved through public, fires one (so a quiet run below means the
# worker never resolved through public, not that the traps are duds)
probe=$(PGOPTIONS="-c search_path=public" psql_q -U "$ATTACKER" \
	-c "SELECT 1 + 0.05::float8, 10 / 1000.0, 'ch_'::text || 7" \
	-c "SELECT string_agg(what, ',' ORDER BY what) FROM public.esc_trap" \
	-c "DELETE FROM public.esc_trap" | tail -n1)
if [[ $probe != "+(int,float8),/(int,numeric),||(text,int)" ]]; then
	echo "not ok: the traps did not fire when resolved through public: '$probe'"
	exit 1
fi
echo "ok: the traps fire for a caller that resolves through public"

$PY - <<'PY'
import json, os, random, time
from fqtest import (Listener, attach, bail, check_clean, connect, create_farm, fail, finish, ok, queries,
                    register, reserve, set_and_reload, submit, wait_for_worker)

ATTACKER = os.environ["ATTACKER"]
db = connect()
q, q1 = queries(db)
wait_for_worker(q)
print("frameq %s" % q1("SELECT extversion FROM pg_extension WHERE extname = 'frameq'"), flush=True)

set_and_reload(q, "frameq.lease_ttl", "2s", bail)
set_and_reload(q, "frameq.lease_margin", "0", bail)
set_and_reload(q, "frameq.clock_drift", "0", bail)

sfx = "%d_%d" % (os.getpid(), random.randrange(1 << 30))
alloc = "esc_" + sfx
create_farm(q, alloc)
submit(q, alloc, "esc", "1-2")
K = register(q, "esc_kill_" + sfx, alloc, 1)
L = register(q, "esc_lapse_" + sfx, alloc, 1)
lis = Listener("frameq_host_%d" % K["id"])
attach(q, K)
attach(q, L)
if len(reserve(q, K, 1)) != 1 or len(reserve(q, L, 1)) != 1:
    bail("setup: each host should have booked one frame")
kproc, kframe = K["procs"][0], q1("SELECT frame FROM frameq.proc WHERE id = %s", K["procs"][0])
lproc, lframe = L["procs"][0], q1("SELECT frame FROM frameq.proc WHERE id = %s", L["procs"][0])
q("SELECT frameq.kill_frame(%s, 'escalation test')", kframe)

deadline = time.monotonic() + 20
sent = expired = None
while time.monotonic() < deadline and (sent is None or expired is None):
    if sent is None and lis.wait(lambda ch, pl: json.loads(pl).get("proc") == kproc, 0.05):
        sent = time.monotonic()
    if expired is None and q1("SELECT state = 'down' AND down_reason = 'lease_lost' FROM frameq.host"
                              " WHERE id = %s", L["id"]):
        expired = time.monotonic()
    time.sleep(0.05)
if sent is None:
    fail("the worker did not send the kill order within 20 s")
else:
    ok("the worker sent the kill order")
if expired is None:
    fail("the worker did not expire the silent host's lease within 20 s")
else:
    r = q("SELECT r.reason, f.state FROM frameq.run r JOIN frameq.frame f ON f.id = r.frame"
          " WHERE r.proc = %s", lproc)
    if r != [("host_lost", "waiting")]:
        fail("the expired host's run and frame: %s, wanted host_lost and waiting" % r)
    else:
        ok("the worker expired the silent host's lease")

# one more whole round after both, so any trap in either step has had its turn
time.sleep(1.2)

fired = q("SELECT who, what, count(*) FROM public.esc_trap GROUP BY 1, 2 ORDER BY 1, 2")
su = q1("SELECT rolsuper FROM pg_roles WHERE rolname = %s", ATTACKER)
if su:
    fail("%s became SUPERUSER" % ATTACKER)
else:
    ok("%s is not superuser" % ATTACKER)
if fired:
    fail("traps ran: %s" % fired)
else:
    ok("no trap ran")
check_clean(q)
finish()
PY
