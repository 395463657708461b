#!/usr/bin/env bash
# Real agents against a restore to an earlier point in time (PITR): a host
# silent through the restore keeps rendering frames the restore has waiting,
# and only the quarantine keeps another host from running them too.
#
# Twice, each time on a fresh primary (lease 15 s, kill grace 1 s, its WAL
# archived) with a base backup taken before any work:
#   - agent a starts and books frames 1 and 2 of a job of 4 (witnessed
#     renders that run until the test lets them end); then the target T is
#     read; then agent b starts (its attach comes after T) and books frames 3
#     and 4; the WAL is archived;
#   - b is stopped (SIGSTOP: its supervisors and renders go on, until their
#     lease deadline) and the primary stops;
#   - the base backup is restored at the primary's address, recovers from
#     the archive to T and pauses there: frames 1 and 2 run on a, 3 and 4
#     wait; recovery ends (pg_wal_replay_resume()) and agent c, idle, starts.
# 1. frameq.quarantine on (the default): c books nothing until the
#    quarantine (a lease period from the resume) is over; by then b's
#    supervisors have ended its renders; c then runs 3 and 4 and no frame
#    runs twice (witness).  a carries on through the restore with 1 and 2.
#    b, continued, gets FQ001 (its epoch is ahead of the restore's), kills
#    everything and attaches again.  The job ends with 4 frames succeeded,
#    each after one run, and check() is clean.
# 2. frameq.quarantine off in the restore: c books 3 and 4 at once, while
#    b's renders of them still run, and the witness finds it.  The test
#    must see that double run (it proves the witness can see one here).
source "$(dirname "$0")/lib.sh"

TTL=15
PERIOD=$(awk "BEGIN { printf \"%.2f\", $TTL * 1.05 + 2 }")	# lease_margin 2 s (the default)

# phase QUARANTINE SUFFIX: the scenario above; host names end in SUFFIX
phase() {
	local quarantine=$1 s=$2
	local arch=$T/archive$s base=$T/base$s
	mkdir -p "$arch" "$base" "$T/w"
	chown postgres: "$arch" "$base"
	rm -f "$T"/w/*
	# postgresql.conf lines, their quotes meant literally
	# shellcheck disable=SC2089
	printf -v FRAMEQ_EXTRA_CONF "archive_mode = on\narchive_command = 'test ! -f %s/%%f && cp %%p %s/%%f'\nlog_min_messages = log" \
		"$arch" "$arch"
	# shellcheck disable=SC2090
	export FRAMEQ_EXTRA_CONF
	start_cluster "${TTL}s"
	register_host "a$s" 2
	register_host "b$s" 2
	register_host "c$s" 2
	(cd "$base" && runuser -u postgres -- "$FRAMEQ_PGBIN/pg_basebackup" -h "$PGHOST" -p "$PGPORT" \
		-U postgres -D "$base" -X stream -c fast --no-sync) >/dev/null 2>&1 || die "pg_basebackup failed"
	local job
	job=$(submit_job "pitr$s" 1-4 "$(witness "while [ ! -e $T/w/go ]; do sleep 0.1; done")") || die "submit failed"

	# a books 1 and 2 before T, b books 3 and 4 after it
	start_agent "a$s"
	wait_for 20 "a renders frames 1 and 2" eval '[[ $(render_count a'"$s"') -ge 2 && $(frames_in_state '"$job"' running) == 2 ]]' || finish
	local target
	target=$(q "SELECT clock_timestamp()")
	start_agent "b$s"
	wait_for 20 "b renders frames 3 and 4" eval '[[ $(render_count b'"$s"') -ge 2 && $(frames_in_state '"$job"' running) == 4 ]]' || finish
	local seg
	seg=$(q "SELECT pg_walfile_name(pg_switch_wal())")
	wait_for 30 "the WAL after T archived" eval '[[ $(q "SELECT coalesce(last_archived_wal >= '"'$seg'"', false) FROM pg_stat_archiver") == t ]]' || finish
	local b_procs
	b_procs=$(q "SELECT string_agg(proc::text, ',' ORDER BY frame_number) FROM frameq.frames WHERE job = $job AND frame_number IN (3, 4)")

	# b falls silent, the primary stops
	kill -STOP "${AGENT_PID[b$s]}"
	_frameq_pg_ctl -w -m fast stop >/dev/null 2>&1 || die "stopping the primary failed"
	note "phase $s: primary stopped; b's renders: $(render_pids "b$s" | tr '\n' ' ')"

	# the restore, at the primary's address, paused at T
	local d=$FRAMEQ_CLUSTER_DIR/restore
	cp -a "$base" "$d"
	cat >>"$d/postgresql.auto.conf" <<CONF
archive_mode = off
restore_command = 'cp $arch/%f %p'
recovery_target_time = '$target'
recovery_target_action = 'pause'
frameq.quarantine = $quarantine
CONF
	touch "$d/recovery.signal"
	chown -R postgres: "$d"
	chmod 700 "$d"
	# shellcheck disable=SC2034  # test/cluster.sh's: its helpers now act on the restore
	FRAMEQ_PGDATA=$d
	_frameq_pg_ctl -w start >/dev/null 2>&1 || { cluster_log_tail 30; die "the restore did not start"; }
	wait_for 30 "the restore paused at T" eval '[[ $(q "SELECT pg_get_wal_replay_pause_state()") == paused ]]' || finish
	[[ $(frames_in_state "$job" running) == 2 && $(frames_in_state "$job" waiting) == 2 &&
		$(q "SELECT count(*) FROM frameq.frames WHERE job = $job AND state = 'waiting' AND frame_number IN (3, 4)") == 2 ]] &&
		ok "phase $s: the restore, paused at T: frames 1 and 2 running, 3 and 4 waiting" ||
		fail "phase $s: at T: $(q "SELECT string_agg(frame_number || ':' || state, ' ' ORDER BY frame_number) FROM frameq.frames WHERE job = $job")"
	local resumed
	resumed=$(q "SELECT clock_timestamp()")
	q "SELECT pg_wal_replay_resume()" >/dev/null
	wait_for 30 "recovery ended" eval '[[ $(q "SELECT pg_is_in_recovery()") == f ]]' || finish
	local alive=0 p
	for p in ${b_procs//,/ }; do
		proc_running "$p" && alive=$((alive + 1))
	done
	[[ $alive == 2 ]] && ok "phase $s: recovery ended while b's renders of frames 3 and 4 still run" ||
		die "phase $s: only $alive of b's renders of frames 3 and 4 ran when recovery ended: too slow to show anything"
	start_agent "c$s"

	if [[ $quarantine == off ]]; then
		wait_for 10 "c runs a frame b is still rendering" eval '[[ -s $T/w/violations ]]' || finish
		ok "phase $s, no quarantine: the witness saw a frame run twice at once: $(tr '\n' ' ' <"$T/w/violations")(frame, proc of the second run)"
		return
	fi

	# the quarantine, from the end of recovery
	wait_for 20 "the worker up" eval '[[ $(q "SELECT started FROM frameq.worker_status()") == t ]]' || finish
	local qs
	qs=$(q "SELECT quarantine_start > '$resumed', round(extract(epoch FROM quarantine_until - quarantine_start)::numeric, 2) FROM frameq.worker_status()")
	[[ $qs == "t|$PERIOD" ]] && ok "phase $s: the quarantine starts after the resume and lasts $PERIOD s" ||
		fail "phase $s: quarantine: $qs (after the resume | seconds), wanted t|$PERIOD"
	wait_for 60 "c books frames 3 and 4" eval '[[ $(q "SELECT count(*) FROM frameq.frames WHERE job = '"$job"' AND host = '"'$(host_name "c$s")'"'") == 2 ]]' || finish
	local early
	early=$(q "SELECT count(*) FROM frameq.runs r, frameq.worker_status() w WHERE r.job = $job AND r.started_at < w.quarantine_until AND r.proc NOT IN ($(q "SELECT string_agg(proc::text, ',') FROM frameq.frames WHERE job = $job AND frame_number IN (1, 2)"))")
	[[ $early == 0 ]] && ok "phase $s: c booked frames 3 and 4 only after the quarantine" ||
		fail "phase $s: $early bookings before the quarantine's end"
	alive=0
	for p in ${b_procs//,/ }; do
		proc_gone "$p" || alive=$((alive + 1))
	done
	[[ $alive == 0 ]] && ok "phase $s: b's renders of frames 3 and 4 were ended by their supervisors (lease deadline)" ||
		fail "phase $s: $alive of b's renders still live after the quarantine"
	kill -CONT "${AGENT_PID[b$s]}"
	wait_for 20 "b, continued, loses its lease and attaches again" eval 'agent_log_has b'"$s"' " lease-lost " && [[ $(grep -c " attached " "$T/b'"$s"'.log") -ge 2 ]]' || finish
	grep -q "FQ001" "$T/b$s.log" && ok "phase $s: b, continued, got FQ001 and attached again (epoch $(host_epoch "b$s"))" ||
		fail "phase $s: b's log shows no FQ001"
	touch "$T/w/go"
	wait_for 30 "the job finished" job_finished "$job" || finish
	[[ $(q "SELECT count(*) FROM frameq.frames WHERE job = $job AND state = 'succeeded' AND attempts = 1") == 4 ]] &&
		ok "phase $s: 4 frames succeeded, each after one run in the restore (1 and 2 on a across the restore, 3 and 4 on c)" ||
		fail "phase $s: $(q "SELECT string_agg(frame_number || ':' || state || '/' || attempts, ' ' ORDER BY frame_number) FROM frameq.frames WHERE job = $job")"
	no_violations
	check_clean
}

# kill what a phase left, stop its server
end_phase() {
	local name pid
	for name in "${!AGENT_PID[@]}"; do
		pid=${AGENT_PID[$name]}
		kill -CONT "$pid" 2>/dev/null
		kill -KILL "$pid" 2>/dev/null
		wait "$pid" 2>/dev/null
		for pid in $(supervisor_pids "$T/$name/state") $(render_pids "$name"); do
			kill -KILL "$pid" 2>/dev/null
		done
		wait_for 10 "the renders of $name gone" no_renders "$name"
		unset "AGENT_PID[$name]"
	done
	cluster_stop
}

phase on 1
end_phase
phase off 2
end_phase
finish
