#!/usr/bin/env bash
# One login role per host: host A's login cannot end host B's sessions or
# act for it.
#
# Hosts a and b each run an agent as their own role (fqh_<host>, a member
# of frameq_agent and nothing else) and one render each.  Logged in as a's
# role:
#   - pg_terminate_backend / pg_cancel_backend of b's agent session: 42501
#     (it would need membership of b's role), and b's session lives on;
#   - ALTER ROLE of b's role (its password, NOLOGIN): 42501;
#   - attach / heartbeat / reserve / complete as b with a's token: 28P01;
#   - complete of b's proc with a's own name, token and epoch: 'stale', and
#     b's proc, frame and render are untouched;
#   - that complete, left in an open transaction, holds no lock on b's proc:
#     a kill_frame of b's frame, and b's report of the kill, go through at
#     once (on 588c689 complete locked the proc row before looking whose it
#     was).
source "$(dirname "$0")/lib.sh"

start_cluster 15s
register_host a 1
register_host b 1
start_agent a
start_agent b
ra=$(host_role a)
rb=$(host_role b)
ha=$(host_name a)
hb=$(host_name b)
toka=$(cat "$T/a.token")

job=$(submit_job roles 1-2 "sleep 60") || die "submit failed"
host_proc() { q "SELECT proc FROM frameq.frames WHERE job = $job AND host = '$(host_name "$1")'"; }
wait_for 20 "each host runs one render" eval '[[ -n $(host_proc a) && -n $(host_proc b) ]] && proc_running $(host_proc a) && proc_running $(host_proc b)' || finish
pa=$(host_proc a)
pb=$(host_proc b)
fb=$(q "SELECT frame FROM frameq.frames WHERE proc = $pb")
pids_b=$(proc_pids "$pb" | sort | tr '\n' ' ')
epa=$(host_epoch a)
epb=$(host_epoch b)
ok "a runs proc $pa (epoch $epa), b runs proc $pb (epoch $epb)"
wait_for 10 "b's agent listens" agent_log_has b "listening channel=" || finish
# b's agent session, as the admin sees it
spid=$(q "SELECT pid FROM pg_stat_activity WHERE usename = '$rb' AND application_name = 'frameq-agent $hb'")
[[ $spid =~ ^[0-9]+$ ]] || die "b's agent session not found: '$spid'"

expect() {
	local want=$1 what=$2 got=$3
	[[ $got == "$want" ]] && ok "$what: $want" || fail "$what: expected $want, got '$got'"
}

# ---- sessions and roles
expect 42501 "a's role terminates b's agent session" "$(sqlstate_as "$ra" "SELECT pg_terminate_backend($spid)")"
expect 42501 "a's role cancels b's agent session" "$(sqlstate_as "$ra" "SELECT pg_cancel_backend($spid)")"
expect 42501 "a's role sets b's role's password" "$(sqlstate_as "$ra" "ALTER ROLE \"$rb\" PASSWORD 'x'")"
expect 42501 "a's role makes b's role NOLOGIN" "$(sqlstate_as "$ra" "ALTER ROLE \"$rb\" NOLOGIN")"
expect 42501 "a's role grants itself b's role" "$(sqlstate_as "$ra" "GRANT \"$rb\" TO \"$ra\"")"
[[ $(q "SELECT count(*) FROM pg_stat_activity WHERE pid = $spid") == 1 ]] && ok "b's agent session lives on" ||
	fail "b's agent session is gone"
[[ $(q "SELECT rolcanlogin FROM pg_roles WHERE rolname = '$rb'") == t ]] && ok "b's role can still log in" ||
	fail "b's role was changed"

# ---- acting for b with a's token
expect 28P01 "attach as b with a's token" \
	"$(sqlstate_as "$ra" "SELECT * FROM frameq.attach('$hb', '$toka', 'boot')")"
expect 28P01 "heartbeat as b with a's token" \
	"$(sqlstate_as "$ra" "SELECT * FROM frameq.heartbeat('$hb', '$toka', $epb, '{}')")"
expect 28P01 "reserve as b with a's token" \
	"$(sqlstate_as "$ra" "SELECT * FROM frameq.reserve('$hb', '$toka', $epb)")"
expect 28P01 "complete b's proc as b with a's token" \
	"$(sqlstate_as "$ra" "SELECT frameq.complete('$hb', '$toka', $epb, $pb, 0)")"
expect "ok:stale" "complete b's proc as a (a's token and epoch)" \
	"$(sqlstate_as "$ra" "SELECT frameq.complete('$ha', '$toka', $epa, $pb, 0)")"
expect "ok:stale" "complete b's proc as a with b's epoch" \
	"$(sqlstate_as "$ra" "SELECT frameq.complete('$ha', '$toka', $epb, $pb, 0)")"

b_intact() {
	local st now_pids
	st=$(q "SELECT f.state || '/' || p.state || '/' || p.epoch || '/' || f.retries FROM frameq.frame f JOIN frameq.proc p ON p.frame = f.id WHERE p.id = $pb")
	expect "running/running/$epb/0" "$1: b's frame/proc/epoch/retries" "$st"
	[[ $(q "SELECT count(*) FROM frameq.run WHERE proc = $pb AND ended_at IS NOT NULL") == 0 ]] &&
		ok "$1: b's run has not ended" || fail "$1: b's run ended"
	now_pids=$(proc_pids "$pb" | sort | tr '\n' ' ')
	[[ $now_pids == "$pids_b" ]] && ok "$1: b's render runs" || fail "$1: b's render was $pids_b, now '$now_pids'"
}
b_intact "after a's calls"
[[ $(q "SELECT state FROM frameq.proc WHERE id = $pa") == running ]] && proc_running "$pa" &&
	ok "a's own proc runs on" || fail "a's proc: $(q "SELECT state FROM frameq.proc WHERE id = $pa")"

# ---- a's complete of b's proc, in a transaction left open, locks nothing
# (the worker, which sends the kill notification, starts up to 5 s after
# the database exists)
wait_for 15 "the frameq worker runs" worker_up || finish
psql -X -q -At -U "$ra" -c "BEGIN; SELECT frameq.complete('$ha', '$toka', $epa, $pb, 0); SELECT pg_sleep(8); COMMIT;" \
	>"$T/holder.out" 2>&1 &
holder=$!
holding() { [[ $(q "SELECT count(*) FROM pg_stat_activity WHERE usename = '$ra' AND wait_event = 'PgSleep'") == 1 ]]; }
wait_for 5 "a's transaction sleeps after its complete" holding || finish
t0=$(now)
r=$(psql -X -q -At -v ON_ERROR_STOP=1 -v VERBOSITY=verbose -c "SET statement_timeout = '3s'" \
	-c "SELECT frameq.kill_frame($fb, 'admin kill')" 2>&1)
el=$(calc "$(now) - $t0")
[[ $r != *ERROR* ]] && is_true "$el < 1.5" && ok "kill_frame of b's frame went through in ${el}s while a's transaction is open" ||
	fail "kill_frame of b's frame while a's complete is open: ${el}s: $r"
wait_for 2 "b's render killed while a's transaction is open" proc_gone "$pb" && ok "b's render was killed"
wait_for 3 "b's report of the kill accepted while a's transaction is open" \
	eval '[[ $(q "SELECT reason FROM frameq.runs WHERE proc = $pb") == killed ]]' && ok "b's kill report was accepted"
holding && ok "(a's transaction was still open)" || note "a's transaction ended before the checks"
wait "$holder"
grep -qx stale "$T/holder.out" && ok "a's held complete answered stale" || fail "a's held complete: $(cat "$T/holder.out")"

q "SELECT frameq.kill_job($job, 'done')" >/dev/null
wait_for 5 "no proc left" eval '[[ $(q "SELECT count(*) FROM frameq.proc") == 0 ]]'
check_clean
for h in a b; do
	stop_agent "$h"
	[[ $AGENT_RC == 0 ]] || fail "agent $h exited $AGENT_RC"
done
finish
