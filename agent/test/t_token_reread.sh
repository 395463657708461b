#!/usr/bin/env bash
# A refused host token (28P01) makes the agent read its token file again,
# once; with the same token still in it, the agent gives up on it.
#
#  1. The new token is written to a's token file, then rotated in the
#     database.  The next heartbeat is refused (28P01), the agent reads the
#     file, retries at once with the new token and keeps its lease: its
#     render runs on under the same epoch and completes with the new token.
#     Exactly one call was refused.
#  2. The token is rotated again, the file left as it is: the agent's next
#     call is refused, the file holds the same token, and the agent gives up
#     with a clear log line (token-refused): it stays up, makes no further
#     call, and resumes by itself once the file holds the right token.
#  3. An agent started with a wrong token in its file gives up after one
#     refused attach.
source "$(dirname "$0")/lib.sh"

start_cluster 6s
register_host a 1
host=$(host_name a)

# rotate HOST: a new token in the database; prints it
rotate() {
	if [[ $(q "SELECT to_regprocedure('frameq.rotate_host_token(text)') IS NOT NULL") == t ]]; then
		q "SELECT frameq.rotate_host_token('$1')"
	else
		local t
		t="tok-$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')"
		q "UPDATE frameq.host SET token_hash = sha256(convert_to('$t', 'UTF8')) WHERE name = '$1'" >/dev/null
		echo "$t"
	fi
}
# set_token NAME TOKEN: replace the token file (atomically, mode 600)
set_token() {
	(umask 077 && echo "$2" >"$T/$1.token.new") && mv "$T/$1.token.new" "$T/$1.token"
}
refused() { grep -c 'sqlstate=28P01' "$T/$1.log"; }

start_agent a
cmd='while [ ! -e release.#FRAME# ]; do sleep 0.05; done; echo "$FRAMEQ_PROC" > out.#FRAME#'
job=$(submit_job tokens 1-2 "$cmd") || die "submit failed"
wait_for 20 "frame 1 runs" eval '[[ -n $(frame_proc $job 1) ]] && proc_running $(frame_proc $job 1)' || finish
p1=$(frame_proc "$job" 1)
ep=$(host_epoch a)
# the render's main process (its shell; its sleeps come and go)
rpid=$(sed -n "s/^[^ ]* started proc=$p1 .* pid=\([0-9]*\) .*/\1/p" "$T/a.log")
[[ -n $rpid ]] || die "no started line for proc $p1"
wait_for 10 "a heartbeat listed frame 1" agent_log_has a "lease-renewed .*running={$p1}" || finish

# ---- 1: rotated, and the file holds the new token
if [[ $(q "SELECT to_regprocedure('frameq.rotate_host_token(text)') IS NOT NULL") == t ]]; then
	# rotate_host_token makes the token: the file can only follow it
	new=$(rotate "$host")
	set_token a "$new"
else
	new="tok-$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')"
	set_token a "$new"
	q "UPDATE frameq.host SET token_hash = sha256(convert_to('$new', 'UTF8')) WHERE name = '$host'" >/dev/null
fi
beats=$(grep -c ' lease-renewed ' "$T/a.log")
wait_for 10 "the agent re-read the token file" agent_log_has a "token-reread call=.* result=changed" || finish
wait_for 5 "a heartbeat with the new token" eval '(( $(grep -c " lease-renewed " "$T/a.log") > beats ))' || finish
ok "re-read: $(grep -m1 ' token-reread ' "$T/a.log" | cut -d' ' -f2-)"
[[ $(refused a) == 1 ]] && ok "exactly one call was refused (28P01)" || fail "$(refused a) calls refused: $(grep 28P01 "$T/a.log")"
agent_log_has a " token-refused " && fail "the agent gave up: $(grep ' token-refused ' "$T/a.log")"
[[ $(host_epoch a) == "$ep" ]] && ok "the lease was kept (epoch $ep)" || fail "epoch $ep -> $(host_epoch a)"
proc_pids "$p1" | grep -qx "$rpid" && ok "frame 1's render (pid $rpid) runs on" || fail "frame 1's render $rpid is gone"
touch "$T/work/release.1"
wait_for 10 "frame 1 succeeded (reported with the new token)" eval '[[ $(frame_state $job 1) == succeeded ]]' &&
	ok "frame 1 succeeded, reported with the new token"
wait_for 10 "frame 2 booked with the new token" eval '[[ -n $(frame_proc $job 2) ]] && proc_running $(frame_proc $job 2)' &&
	ok "frame 2 was booked and runs"

# ---- 2: rotated again, the file not updated: the agent gives up
n0=$(refused a)
newer=$(rotate "$host")
wait_for 10 "the agent gives up on its token" agent_log_has a " token-refused .*result=unchanged" || finish
ok "gave up: $(grep -m1 ' token-refused ' "$T/a.log" | cut -d' ' -f2-)"
[[ $(refused a) == $((n0 + 1)) ]] && ok "one more refused call before giving up" || fail "$(( $(refused a) - n0 )) more refused calls"
agent_log_has a "token-reread .*result=unchanged" && fail "a re-read that changed nothing was logged as a re-read"
# two heartbeat intervals (2 s each): no call goes out with the refused token
n1=$(refused a)
sleep 4.5
[[ $(refused a) == "$n1" ]] && ok "no call with the refused token after giving up" || fail "$(( $(refused a) - n1 )) calls after giving up"
agent_alive a && ok "the agent stays up" || fail "the agent exited"
# the right token in the file: it resumes by itself (the file is looked at every 10 s)
set_token a "$newer"
touch "$T/work/release.2"
wait_for 20 "the agent resumes with the file's new token" agent_log_has a "token-reread file=.* result=changed" || finish
wait_for 20 "frame 2 ends" eval '[[ $(frame_state $job 2) == succeeded || $(frame_state $job 2) == waiting ]]'
# a lease lost meanwhile re-runs frame 2 (no retry used): either way it succeeds
wait_for 30 "the job finishes after the agent resumed" job_finished "$job" && ok "the job finished after the agent resumed"
[[ $(q "SELECT max(retries) FROM frameq.frames WHERE job = $job") == 0 ]] && ok "no retry used" || fail "a retry was used"

# ---- 3: a wrong token from the start
register_host b 1
set_token b "not-the-token"
start_agent b
wait_for 10 "b gives up on its token" agent_log_has b " token-refused call=attach .*result=unchanged" || finish
ok "b: $(grep -m1 ' token-refused ' "$T/b.log" | cut -d' ' -f2-)"
sleep 2
[[ $(grep -c ' attach-failed ' "$T/b.log") == 1 ]] && ok "b tried to attach once" || fail "b: $(grep -c ' attach-failed ' "$T/b.log") attach attempts"
agent_alive b && ok "b stays up" || fail "b exited"

check_clean
for h in a b; do
	stop_agent "$h"
	[[ $AGENT_RC == 0 ]] || fail "agent $h exited $AGENT_RC"
done
finish
