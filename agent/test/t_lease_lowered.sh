#!/usr/bin/env bash
# frameq.lease_ttl lowered by a reload while an agent renders, then the
# agent falls silent: no frame runs twice.
#
# Lease 12 s.  Agent a runs a long frame (holding a per-frame flock for its
# whole life, the witness); lease_ttl is lowered to 2 s and a's next
# heartbeat is granted 2 s.  Its supervisors keep the later deadline the
# 12 s grant gave them (a supervisor never moves a deadline earlier), so
# the render lives until then.  a is SIGSTOPped and agent b started: the
# server must not release the frame before a's render is dead, so b re-runs
# it only after that, and the witness never finds the lock taken.  (Before
# the server recorded what each lease was granted for, it released the
# frame 2 * 1.05 + 2 s after the renewal at 2 s, and b's render ran beside
# a's for several seconds.)
source "$(dirname "$0")/lib.sh"

start_cluster 12s
register_host a 2
register_host b 2
start_agent a

body="if [ -e $T/w/first.#FRAME# ]; then echo rerun > $T/w/out.#FRAME#; else touch $T/w/first.#FRAME#; sleep 120; fi"
job=$(submit_job lowered 1 "$(witness "$body")") || die "submit failed"
wait_for 20 "the frame running on a" eval '[[ -e $T/w/first.1 ]]' || finish
p1=$(frame_proc "$job" 1)
wait_for 10 "a renewed its 12 s lease with the render listed" \
	agent_log_has a "lease-renewed .*lease_ttl=12.000s.*running={.*$p1" || finish

set_setting frameq.lease_ttl 2s
wait_for 15 "a renewed under lease_ttl 2 s" agent_log_has a "lease-renewed .*lease_ttl=2.000s" || finish
kill -STOP "${AGENT_PID[a]}"
t_stop=$(now)
start_agent b

# the render dies by its supervisor, at the 12 s grant's deadline at the latest
wait_for 20 "a's render ended by its supervisor" proc_gone "$p1" || finish
t_dead=$(now)
# b runs the frame again (or finds a's render still holding it: the witness)
wait_for 30 "b ran the frame again" eval '[[ -s $T/w/out.1 || -s $T/w/violations ]]' || finish
no_violations
t_rerun=$(now)
note "a stopped; its render ended $(calc "$t_dead - $t_stop") s later; b re-ran the frame $(calc "$t_rerun - $t_stop") s after the stop"
is_true "$(calc "$t_dead - $t_stop") > 2.5" && ok "the render outlived the 2 s grant (it held the 12 s one)" ||
	fail "the render ended $(calc "$t_dead - $t_stop") s after the stop: the test shows nothing"
[[ $(q "SELECT count(*) FROM frameq.runs WHERE proc = $p1 AND reason = 'host_lost'") == 1 ]] &&
	ok "a's run ended host_lost" || fail "a's run: $(q "SELECT reason FROM frameq.runs WHERE proc = $p1")"
kill -CONT "${AGENT_PID[a]}"
finish
