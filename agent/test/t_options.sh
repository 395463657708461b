#!/usr/bin/env bash
# Options: --help lists every option; the token file must be readable only by
# its owner; flags beat the environment, which beats the config file; a bad
# option or config line is refused; SIGHUP reloads the config file.
source "$(dirname "$0")/lib.sh"

# ---- --help, --version, bad options (no cluster needed)
help=$("$AGENT_BIN" --help 2>&1)
rc=$?
[[ $rc == 0 ]] || fail "--help exited $rc"
missing=""
for o in conninfo host token-file cores memory gpus tags state-dir log-dir kill-grace \
	max-frames kill-on-term finish-on-term work-dir config reserve-interval report-window fault-drop-reports \
	enforce-memory no-enforce-memory help version; do
	grep -q -- "--$o\b" <<<"$help" || missing+=" --$o"
	if [[ $o != help && $o != version ]]; then
		env=FRAMEQ_$(tr 'a-z-' 'A-Z_' <<<"$o")
		grep -q "env $env\b" <<<"$help" || missing+=" $env"
	fi
done
[[ -z $missing ]] && ok "--help lists every option and its environment variable" || fail "--help lacks:$missing"
[[ $("$AGENT_BIN" --version) == "frameq-agent "* ]] && ok "--version" || fail "--version: $("$AGENT_BIN" --version)"
out=$("$AGENT_BIN" --bogus 2>&1)
rc=$?
[[ $rc == 2 && $out == *"unknown option"* ]] && ok "an unknown option is refused" || fail "--bogus: exit $rc: $out"
out=$("$AGENT_BIN" --host x 2>&1)
rc=$?
[[ $rc == 2 && $out == *"--token-file is required"* ]] && ok "--token-file is required" || fail "no token file: exit $rc: $out"
out=$("$AGENT_BIN" --cores lots --token-file /dev/null 2>&1)
rc=$?
[[ $rc == 2 && $out == *"invalid value for cores"* ]] && ok "a bad value is refused" || fail "--cores lots: exit $rc: $out"
for v in 101 abc -1; do
	out=$("$AGENT_BIN" --fault-drop-reports "$v" --token-file /dev/null 2>&1)
	rc=$?
	[[ $rc == 2 && $out == *"invalid value for fault-drop-reports"* ]] &&
		ok "--fault-drop-reports $v is refused" || fail "--fault-drop-reports $v: exit $rc: $out"
done
for v in 1001 abc -1; do
	out=$("$AGENT_BIN" --report-window "$v" --token-file /dev/null 2>&1)
	rc=$?
	[[ $rc == 2 && $out == *"invalid value for report-window"* ]] &&
		ok "--report-window $v is refused" || fail "--report-window $v: exit $rc: $out"
done
out=$(FRAMEQ_FAULT_DROP_REPORTS=100.5 "$AGENT_BIN" --token-file /dev/null 2>&1)
rc=$?
[[ $rc == 2 && $out == *"invalid value for fault-drop-reports (FRAMEQ_FAULT_DROP_REPORTS)"* ]] &&
	ok "FRAMEQ_FAULT_DROP_REPORTS=100.5 is refused" || fail "FRAMEQ_FAULT_DROP_REPORTS=100.5: exit $rc: $out"
printf 'max-frames = 2\nno-such-option = 1\n' >"$T/bad.conf"
out=$("$AGENT_BIN" --config "$T/bad.conf" --token-file /dev/null 2>&1)
rc=$?
[[ $rc == 2 && $out == *"bad.conf:2: unknown option"* ]] && ok "an unknown config file key is refused, with its line" ||
	fail "bad config: exit $rc: $out"

start_cluster 3s
register_host a 4

# ---- the token file
agent_once() {
	# runs the agent in the foreground (at most 5 s); output in $T/once.log
	timeout 5 "$AGENT_BIN" --conninfo "$(CONNINFO_DEFAULT a)" --host "$(host_name a)" --state-dir "$T/a/state" \
		--log-dir "$T/a/log" "$@" >"$T/once.log" 2>&1 </dev/null
}
for mode in 644 640 604 660; do
	cp "$T/a.token" "$T/t$mode"
	chmod "$mode" "$T/t$mode"
	agent_once --token-file "$T/t$mode"
	rc=$?
	if [[ $rc == 2 ]] && grep -q "must be readable only by its owner" "$T/once.log"; then
		ok "a token file with mode $mode is refused"
	else
		fail "token file mode $mode: exit $rc: $(cat "$T/once.log")"
	fi
done
cp "$T/a.token" "$T/tother"
chmod 600 "$T/tother"
chown nobody "$T/tother"
agent_once --token-file "$T/tother"
rc=$?
[[ $rc == 2 ]] && grep -q "belongs to uid" "$T/once.log" && ok "a token file of another user is refused" ||
	fail "token of another user: exit $rc: $(cat "$T/once.log")"
[[ $(host_epoch a) == 0 ]] && ok "a refused agent never attached" || fail "the host attached: epoch $(host_epoch a)"

# ---- the shipped example config is valid
timeout 3 "$AGENT_BIN" --config "$AGENT_DIR/../doc/frameq-agent.conf.example" --conninfo "$(CONNINFO_DEFAULT a)" \
	--host "$(host_name a)" --token-file "$T/a.token" --state-dir "$T/a/state" --log-dir "$T/a/log" \
	>"$T/once.log" 2>&1 </dev/null
grep -q " attached " "$T/once.log" && ok "the example config file is accepted" ||
	fail "example config: $(cat "$T/once.log")"

# ---- precedence: flag > environment > file
printf '# test\nmax-frames = 1\nmemory = 8GB\nkill_on_term = yes\ntags = "from,file"\nno-enforce-memory = yes\n' >"$T/a.conf"
start_agent a --config "$T/a.conf"
wait_for 10 "agent started" agent_log_has a " attached " || finish
grep -q " resources .*offered_memory=8589934592 .*max_frames=1 tags=from,file" "$T/a.log" &&
	grep -q " start .*on_term=kill" "$T/a.log" && grep -q " memory .*enforce=no" "$T/a.log" &&
	ok "the config file is read" || fail "config file: $(grep -E ' (start|resources|memory) ' "$T/a.log")"
stop_agent a
: >"$T/a.log"
FRAMEQ_MAX_FRAMES=2 FRAMEQ_TAGS=from,env FRAMEQ_ENFORCE_MEMORY=yes start_agent a --config "$T/a.conf"
wait_for 10 "agent started" agent_log_has a " attached " || finish
grep -q " resources .*max_frames=2 tags=from,env" "$T/a.log" && grep -q " memory .*enforce=yes" "$T/a.log" &&
	ok "the environment beats the config file" ||
	fail "env vs file: $(grep -E ' (resources|memory) ' "$T/a.log")"
stop_agent a
: >"$T/a.log"
FRAMEQ_MAX_FRAMES=2 FRAMEQ_ENFORCE_MEMORY=yes start_agent a --config "$T/a.conf" --max-frames 3 --no-enforce-memory
wait_for 10 "agent started" agent_log_has a " attached " || finish
grep -q " resources .*max_frames=3" "$T/a.log" && grep -q " memory .*enforce=no" "$T/a.log" &&
	ok "the command line beats the environment" ||
	fail "flag vs env: $(grep -E ' (resources|memory) ' "$T/a.log")"
stop_agent a

# ---- SIGHUP: max-frames 1 -> 3 on a running agent (host has 4 cores)
: >"$T/a.log"
start_agent a --config "$T/a.conf"
job=$(submit_job hup 1-4 "while [ ! -e $T/w/go ]; do sleep 0.05; done") || die "submit failed"
wait_for 10 "one render running" eval '[[ $(render_count a) -ge 1 ]]' || finish
# it stays one: give the agent several reserve rounds (0.2 s) to show it
end=$(calc "$(now) + 1.5")
max=0
while is_true "$(now) < $end"; do
	n=$(q "SELECT count(*) FROM frameq.frames WHERE job = $job AND state = 'running'")
	[[ $n -gt $max ]] && max=$n
	sleep 0.1
done
[[ $max == 1 ]] && ok "max-frames 1 from the config file: one frame at a time" || fail "$max frames at once with max-frames 1"
sed -i 's/^max-frames = 1$/max-frames = 3/' "$T/a.conf"
kill -HUP "${AGENT_PID[a]}"
wait_for 10 "three frames running after SIGHUP" eval '[[ $(q "SELECT count(*) FROM frameq.frames WHERE job = $job AND state = '"'running'"'") == 3 ]]' &&
	ok "SIGHUP reloaded max-frames = 3"
agent_log_has a " reloaded " || fail "no reload logged"
touch "$T/w/go"
wait_for 20 "the job finished" job_finished "$job" || finish
stop_agent a
[[ $AGENT_RC == 0 ]] || fail "agent exited $AGENT_RC"
check_clean
finish
