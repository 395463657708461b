#!/usr/bin/env bash
# Reports in batches (frameq 0.6.0, complete_many): "report what ended, book
# what fits, commit once".  Which transaction wrote a row is its xmin (the
# rows are not written again while the test looks at them), so:
#
#  1. four renders that end together (released by one file; report window
#     300 ms) are reported in one transaction, which also books the four
#     waiting frames of another job onto the room they freed: the four ended
#     runs and the four booked frames have one xmin; the agent logs one
#     batch of 4 reports with 4 bookings; no complete() call was made;
#     the same with a cap in the way: four renders of a layer under a limit
#     of 4 (on a host with room for 8) end together, and the transaction
#     that reports them books the layer's next four, into the limit its own
#     releases freed;
#  2. a report in flight collects the next endings: a report held up by a
#     row lock (another session's), while two more renders end, 0.3 s apart
#     (more than the default window, 5 ms): those two go together in the
#     next transaction, not in the held one's;
#  3. a booking that fails rolls back the reports of its transaction, which
#     then go again at once, alone, and are accepted (not 'duplicate': the
#     first transaction did nothing); the frame the booking wanted is booked
#     once the failure is gone, and runs once; and completes that fail (a
#     row lock held past frameq.lock_wait: 55P03) book nothing, and are
#     sent again after a backoff and accepted, each run ended once;
#  4. each element is answered as complete() answers it: an agent killed
#     after its transaction committed and before it read the answer, with
#     one render ended meanwhile on its own and one whose proc an operator
#     released, reports the three before attaching in one batch, answered
#     duplicate, accepted and stale; every frame ran once, no retry used;
#  5. with the database at 0.5.0 (no complete_many) the agent reports each
#     end with its own complete(), in transactions of their own;
#  6. a transaction that fails takes its log reports (report_log, sent
#     before its complete_many) with it, and they go again: a render of
#     `true` whose completes fail (a trigger refuses to end runs) gets its
#     log in runs.log all the same (report_log sent at least twice), and
#     completes, once, when the trigger is gone.
#
# With an agent that does not batch (FRAMEQ_AGENT_BIN: one built before
# batching, which sends one complete() per end) parts 1 and 2 fail: the runs
# end in transactions of their own, the booking in yet another.
source "$(dirname "$0")/lib.sh"

# leases of 15 s: a report held up for a second or two delays a heartbeat
start_cluster 15s
set_setting frameq.lock_wait 20s
[[ $(q "SELECT count(*) FROM pg_proc WHERE pronamespace = 'frameq'::regnamespace AND proname = 'complete_many'") == 1 ]] ||
	die "this server's frameq has no complete_many"

# a render that waits for a file, then ends
waits() { echo "while [ ! -e $T/$1 ]; do sleep 0.01; done"; }
xmins() { q "SELECT string_agg(DISTINCT xmin::text, ',') FROM $1"; }
ntx() { q "SELECT count(DISTINCT xmin::text) FROM $1"; }
batches() { grep -c ' batch ' "$T/$1.log"; }
state_has() { [[ -e $T/$1/state/$2 ]]; }
# sessions of host NAME's agent whose complete_many waits for a lock
report_waits() {
	[[ $(q "SELECT count(*) FROM pg_stat_activity WHERE usename = '$(host_role "$1")'
		AND wait_event_type = 'Lock' AND query LIKE '%complete_many%'") == 1 ]]
}
# restart_agent NAME [ARGS...]: start agent NAME again; since_start NAME:
# its log since then
declare -A LOG_MARK=()
restart_agent() { LOG_MARK[$1]=$(wc -l <"$T/$1.log"); start_agent "$@"; }
since_start() { tail -n +$((LOG_MARK[$1] + 1)) "$T/$1.log"; }
# hold_proc_lock PROC: another session holds the proc's row (FOR UPDATE)
# until $T/unlock exists
hold_proc_lock() {
	rm -f "$T/unlock" "$T/locked"
	{ echo "BEGIN; SELECT 1 FROM frameq.proc WHERE id = $1 FOR UPDATE; \\o $T/locked"
	  echo "SELECT 1;"
	  while [ ! -e "$T/unlock" ]; do sleep 0.05; done
	  echo "COMMIT;"; } | psql -X -q -v ON_ERROR_STOP=1 >/dev/null &
	HOLDER=$!
	wait_for 10 "the row lock is held" test -s "$T/locked"
}

# ---- 1. ending together: one transaction, with the booking of the room freed
register_host a 4
log_calls a
FRAMEQ_REPORT_WINDOW=300 start_agent a
wait_for 10 "a attached" agent_log_has a " attached " || finish
ja=$(submit_job together 1-4 "$(waits go.a)") || die "submit failed"
wait_for 20 "the four renders run" eval '[[ $(frames_in_state '"$ja"' running) == 4 ]]' || finish
jb=$(submit_job next 1-4 "$(waits go.b)") || die "submit failed"
wait_for 10 "the next job waits" eval '[[ $(frames_in_state '"$jb"' waiting) == 4 ]]' || finish
touch "$T/go.a"
wait_for 20 "the next job's four renders run" eval '[[ $(frames_in_state '"$jb"' running) == 4 ]]' || finish
ended=$(xmins "frameq.run WHERE job = $ja")
booked=$(xmins "frameq.frame WHERE job = $jb")
[[ $ended != *,* && $(q "SELECT count(*) FROM frameq.run WHERE job = $ja AND reason = 'completed'") == 4 ]] &&
	ok "the four runs that ended together ended in one transaction ($ended)" ||
	fail "the four runs ended in transactions $ended"
[[ $booked == "$ended" ]] && ok "the same transaction booked the four waiting frames" ||
	fail "the waiting frames were booked in $booked, the runs ended in $ended"
grep -q ' batch .*reports=4 .*answers=accepted,accepted,accepted,accepted booked=4$' "$T/a.log" &&
	ok "the agent logged one batch: 4 reports accepted, 4 bookings" ||
	fail "batches: $(grep ' batch ' "$T/a.log")"
[[ $(sent complete | wc -l) == 0 && $(sent complete_many | wc -l) -ge 1 ]] &&
	ok "no complete() call: complete_many only" || fail "complete() calls: $(sent complete | wc -l)"
touch "$T/go.b"
wait_for 20 "the next job finishes" job_finished "$jb" || finish
stop_agent a
[[ $AGENT_RC == 0 ]] || fail "agent a exited $AGENT_RC on SIGTERM"

# ... and with a cap in the way: the limit its own releases freed
register_host c 8
q "SELECT frameq.create_limit('lic', 4)" >/dev/null
FRAMEQ_REPORT_WINDOW=300 start_agent c
wait_for 10 "c attached" agent_log_has c " attached " || finish
render="while [ ! -e $T/go.k.\$FRAMEQ_FRAME_NUMBER ]; do sleep 0.01; done"
jk=$(submit_job capped 1-8 "$render" '{"limits": ["lic"]}') || die "submit failed"
wait_for 20 "four renders run, four wait (the limit)" eval '[[ $(frames_in_state '"$jk"' running) == 4 && $(frames_in_state '"$jk"' waiting) == 4 ]]' || finish
first=$(q "SELECT string_agg(frame_number::text, ' ') FROM frameq.frames WHERE job = $jk AND state = 'running'")
for n in $first; do touch "$T/go.k.$n"; done
wait_for 20 "the next four run" eval '[[ $(frames_in_state '"$jk"' succeeded) == 4 && $(frames_in_state '"$jk"' running) == 4 ]]' || finish
ended=$(xmins "frameq.run WHERE job = $jk AND ended_at IS NOT NULL")
booked=$(xmins "frameq.frame WHERE job = $jk AND state = 'running'")
[[ $ended != *,* && $booked == "$ended" ]] &&
	ok "under a full limit: the transaction that reported four ends booked the next four into the limit they freed" ||
	fail "the runs ended in $ended, the next four were booked in $booked"
touch "$T"/go.k.{1..8}
wait_for 20 "the capped job finishes" job_finished "$jk" || finish
stop_agent c
[[ $AGENT_RC == 0 ]] || fail "agent c exited $AGENT_RC on SIGTERM"

# ---- 2. a report in flight collects the next endings (default window)
register_host b 4
start_agent b
wait_for 10 "b attached" agent_log_has b " attached " || finish
render="while [ ! -e $T/go.c.\$FRAMEQ_FRAME_NUMBER ]; do sleep 0.01; done"
jc=$(submit_job flight 1-4 "$render") || die "submit failed"
wait_for 20 "the four renders run" eval '[[ $(frames_in_state '"$jc"' running) == 4 ]]' || finish
p1=$(frame_proc "$jc" 1)
p2=$(frame_proc "$jc" 2)
p3=$(frame_proc "$jc" 3)
hold_proc_lock "$p1" || finish
touch "$T/go.c.1"
wait_for 10 "the report of frame 1 waits for the lock" report_waits b || finish
touch "$T/go.c.2"
wait_for 10 "frame 2 ended" state_has b "result.$p2" || finish
sleep 0.3	# more than the report window apart: they would not go together by it
touch "$T/go.c.3"
wait_for 10 "frame 3 ended" state_has b "result.$p3" || finish
[[ $(batches b) == 0 ]] && ok "no batch was answered while the first was held" || fail "batches: $(grep ' batch ' "$T/b.log")"
touch "$T/unlock"
wait "$HOLDER"
wait_for 10 "three reports answered" eval '[[ $(grep -c " reported " "$T/b.log") == 3 ]]' || finish
x1=$(xmins "frameq.run WHERE proc = $p1")
x23=$(xmins "frameq.run WHERE proc IN ($p2, $p3)")
[[ $x23 != *,* && $x23 != "$x1" ]] &&
	ok "the two ends seen while a report was in flight went together in the next transaction" ||
	fail "frame 1 ended in $x1, frames 2 and 3 in $x23"
grep -q " batch .*reports=2 procs=\\($p2,$p3\\|$p3,$p2\\) " "$T/b.log" && ok "the agent logged them as one batch of 2" ||
	fail "batches: $(grep ' batch ' "$T/b.log")"
touch "$T/go.c.4"
wait_for 20 "the job finishes" job_finished "$jc" || finish

# ---- 3. a booking that fails takes its transaction's reports with it; they go again alone
jd=$(submit_job fail-booking 1-4 "$(waits go.d)") || die "submit failed"
wait_for 20 "the four renders run" eval '[[ $(frames_in_state '"$jd"' running) == 4 ]]' || finish
je=$(submit_job booked-later 1 "echo done") || die "submit failed"
q "CREATE FUNCTION public.no_booking() RETURNS trigger LANGUAGE plpgsql AS \$\$
   BEGIN RAISE EXCEPTION 'no booking now (test)'; END \$\$" >/dev/null
q "CREATE TRIGGER no_booking BEFORE INSERT ON frameq.proc FOR EACH ROW EXECUTE FUNCTION public.no_booking()" >/dev/null
pd=$(frame_proc "$jd" 1)
lines=$(wc -l <"$T/b.log")
touch "$T/go.d"
wait_for 20 "the reports accepted" eval '[[ $(tail -n +$((lines + 1)) "$T/b.log" | grep -c " reported .*answer=accepted") == 4 ]]' || finish
after=$(tail -n +$((lines + 1)) "$T/b.log")
grep -q ' batch-failed .*part=reserve .*next="the reports again, without a booking"' <<<"$after" &&
	ok "the booking failed and rolled its transaction back" || fail "no batch-failed part=reserve: $after"
grep -q ' batch .*answers=accepted.* booked=none$' <<<"$after" &&
	ok "the reports went again alone and were accepted (the failed transaction had done nothing)" ||
	fail "batches: $(grep ' batch ' <<<"$after")"
grep -q 'answer=duplicate' <<<"$after" && fail "a report answered duplicate: $(grep duplicate <<<"$after")"
[[ $(q "SELECT count(*) FROM frameq.run WHERE job = $jd AND reason = 'completed'") == 4 &&
	$(frames_in_state "$jd" succeeded) == 4 ]] && ok "each of the four runs ended once, succeeded" ||
	fail "runs: $(q "SELECT string_agg(proc || ':' || coalesce(reason, 'live'), ' ') FROM frameq.run WHERE job = $jd")"
[[ $(frames_in_state "$je" waiting) == 1 ]] && ok "the frame the booking wanted still waits" ||
	fail "frame state: $(frame_state "$je" 1)"
q "DROP TRIGGER no_booking ON frameq.proc" >/dev/null
wait_for 20 "the waiting frame is booked and runs" job_finished "$je" || finish
[[ $(q "SELECT count(*) FROM frameq.run WHERE job = $je") == 1 && $(q "SELECT sum(retries) FROM frameq.frame WHERE job IN ($jd, $je)") == 0 ]] &&
	ok "it ran once, and no retry was used" || fail "runs of job $je: $(q "SELECT count(*) FROM frameq.run WHERE job = $je")"
[[ $(q "SELECT count(*) FROM frameq.run WHERE proc = $pd") == 1 ]] || fail "proc $pd has several runs"

# the completes fail: nothing of the transaction happened, not even its booking
set_setting frameq.lock_wait 300ms
# one render that fills the host: the frame after it can only come with its end
jh=$(submit_job fail-complete 1 "$(waits go.h)" '{"cores": 4}') || die "submit failed"
wait_for 20 "the render runs" eval '[[ $(frames_in_state '"$jh"' running) == 1 ]]' || finish
ji=$(submit_job waits-for-room 1 "echo done") || die "submit failed"
ph=$(frame_proc "$jh" 1)
hold_proc_lock "$ph" || finish
lines=$(wc -l <"$T/b.log")
touch "$T/go.h"
wait_for 20 "a batch failed on the lock" eval 'tail -n +$((lines + 1)) "$T/b.log" | grep -q " batch-failed .*part=complete sqlstate=55P03"' || finish
[[ $(frames_in_state "$jh" running) == 1 && $(frames_in_state "$ji" waiting) == 1 ]] &&
	ok "completes refused (55P03): no run ended, nothing booked" ||
	fail "after the failed batch: job $jh running $(frames_in_state "$jh" running), job $ji waiting $(frames_in_state "$ji" waiting)"
touch "$T/unlock"
wait "$HOLDER"
wait_for 20 "the job finishes" job_finished "$jh" || finish
wait_for 20 "the waiting frame runs" job_finished "$ji" || finish
after=$(tail -n +$((lines + 1)) "$T/b.log")
[[ $(grep -c ' reported .*answer=accepted' <<<"$after") == 2 ]] && ! grep -q 'answer=duplicate' <<<"$after" &&
	ok "sent again after a backoff, the reports were accepted, none duplicate" ||
	fail "answers: $(grep ' reported ' <<<"$after" | sed 's/.* answer=//' | sort | uniq -c | tr '\n' ' ')"
[[ $(q "SELECT count(*) || '/' || count(DISTINCT proc) FROM frameq.run WHERE job IN ($jh, $ji)") == 2/2 &&
	$(q "SELECT sum(retries) FROM frameq.frame WHERE job IN ($jh, $ji)") == 0 ]] &&
	ok "each frame ran once, no retry used" || fail "runs: $(q "SELECT count(*) FROM frameq.run WHERE job IN ($jh, $ji)")"
set_setting frameq.lock_wait 20s

# ---- 4. duplicate, accepted and stale in one batch
render_f="while [ ! -e $T/go.f.\$FRAMEQ_FRAME_NUMBER ]; do sleep 0.01; done"
jf=$(submit_job answers 1-3 "$render_f") || die "submit failed"
wait_for 20 "the three renders run" eval '[[ $(frames_in_state '"$jf"' running) == 3 ]]' || finish
f1=$(frame_proc "$jf" 1)
f2=$(frame_proc "$jf" 2)
f3=$(frame_proc "$jf" 3)
# frame 1's report commits, and its answer is lost with the agent
hold_proc_lock "$f1" || finish
touch "$T/go.f.1"
wait_for 10 "the report of frame 1 waits for the lock" report_waits b || finish
kill -STOP "${AGENT_PID[b]}"
touch "$T/unlock"
wait "$HOLDER"
wait_for 10 "frame 1's report committed" eval '[[ $(frame_state '"$jf"' 1) == succeeded ]]' || finish
kill -KILL "${AGENT_PID[b]}"
wait "${AGENT_PID[b]}" 2>/dev/null
# with no agent: frame 2 ends on its own, frame 3's proc is released by an operator
touch "$T/go.f.2"
wait_for 10 "frame 2 ended" state_has b "result.$f2" || finish
q "DELETE FROM frameq.proc WHERE id = $f3" >/dev/null
touch "$T/go.f.3"
wait_for 10 "frame 3 ended" state_has b "result.$f3" || finish
restart_agent b
wait_for 20 "b attached again" eval '[[ $(since_start b | grep -c " attached ") == 1 ]]' || finish
after=$(since_start b)
batch=$(grep ' batch ' <<<"$after" | head -n1)
want=""
for p in $(sed 's/.* procs=\([0-9,]*\) .*/\1/' <<<"$batch" | tr , ' '); do
	case $p in
		"$f1") want+=",duplicate" ;;
		"$f2") want+=",accepted" ;;
		"$f3") want+=",stale" ;;
		*) want+=",?" ;;
	esac
done
[[ $batch == *" reports=3 "* && $batch == *" answers=${want#,} booked=none" ]] &&
	ok "one batch before attaching, answered per element: ${want#,}" || fail "batch: $batch (want ${want#,})"
[[ $(awk '/ batch /{print NR; exit}' <<<"$after") -lt $(awk '/ attached /{print NR; exit}' <<<"$after") ]] &&
	ok "it was sent before the attach" || fail "batch after the attach"
reasons=$(q "SELECT string_agg(reason, ' ' ORDER BY CASE proc WHEN $f1 THEN 1 WHEN $f2 THEN 2 ELSE 3 END) FROM frameq.run WHERE proc IN ($f1, $f2, $f3)")
[[ $reasons == "completed completed operator" ]] &&
	ok "frames 1 and 2 completed once, frame 3 released by the operator" ||
	fail "runs: $(q "SELECT string_agg(proc || ':' || coalesce(reason, 'live'), ' ') FROM frameq.run WHERE job = $jf")"
wait_for 20 "the job finishes" job_finished "$jf" || finish
[[ $(q "SELECT count(*) FROM frameq.run WHERE job = $jf") == 4 && $(q "SELECT sum(retries) FROM frameq.frame WHERE job = $jf") == 0 ]] &&
	ok "only frame 3 ran again; no retry used" || fail "runs: $(q "SELECT count(*) FROM frameq.run WHERE job = $jf")"
stop_agent b
[[ $AGENT_RC == 0 ]] || fail "agent b exited $AGENT_RC on SIGTERM"

# ---- 5. a database at 0.5.0: one complete() per end
installed=$(q "SELECT extversion FROM pg_extension WHERE extname = 'frameq'")
q "UPDATE pg_extension SET extversion = '0.5.0' WHERE extname = 'frameq'" >/dev/null
restart_agent a
wait_for 20 "a attached at 0.5.0" eval '[[ $(since_start a | grep -c " attached ") == 1 ]]' || finish
since_start a | grep -q ' connected .*frameq=0.5.0' || fail "a did not see 0.5.0: $(since_start a | grep ' connected ')"
calls=$(sent complete | wc -l)
many=$(sent complete_many | wc -l)
jg=$(submit_job old 1-4 "$(waits go.g)") || die "submit failed"
wait_for 20 "the four renders run" eval '[[ $(frames_in_state '"$jg"' running) == 4 ]]' || finish
touch "$T/go.g"
wait_for 20 "the job finishes" job_finished "$jg" || finish
q "UPDATE pg_extension SET extversion = '$installed' WHERE extname = 'frameq'" >/dev/null
[[ $(( $(sent complete | wc -l) - calls )) == 4 && $(sent complete_many | wc -l) == "$many" ]] &&
	ok "at 0.5.0: four complete() calls, no complete_many" ||
	fail "at 0.5.0: $(( $(sent complete | wc -l) - calls )) complete(), $(( $(sent complete_many | wc -l) - many )) complete_many()"
since_start a | grep -q ' batch ' && fail "a batch at 0.5.0: $(since_start a | grep ' batch ')"
[[ $(ntx "frameq.run WHERE job = $jg") == 4 ]] &&
	ok "at 0.5.0 each end was a transaction of its own" || fail "transactions: $(xmins "frameq.run WHERE job = $jg")"

agent_alive a || fail "agent a exited"
stop_agent a
[[ $AGENT_RC == 0 ]] || fail "agent a exited $AGENT_RC on SIGTERM"

# ---- 6. a failed transaction takes its log reports with it: they go again
register_host d 1
log_calls d
start_agent d
wait_for 10 "d attached" agent_log_has d " attached " || finish
q "CREATE FUNCTION public.no_end() RETURNS trigger LANGUAGE plpgsql AS \$\$
   BEGIN RAISE EXCEPTION 'no end now (test)'; END \$\$" >/dev/null
q "CREATE TRIGGER no_end BEFORE UPDATE ON frameq.run FOR EACH ROW
   WHEN (NEW.ended_at IS NOT NULL) EXECUTE FUNCTION public.no_end()" >/dev/null
jl=$(submit_job log-retry 1 true) || die "submit failed"
wait_for 20 "a batch failed on its completes" agent_log_has d ' batch-failed .*part=complete sqlstate=P0001' || finish
pl=$(frame_proc "$jl" 1)
first_fail=$(grep -n -m1 ' batch-failed ' "$T/d.log" | cut -d: -f1)
first_told=$(grep -n -m1 " logs-reported .*procs=$pl " "$T/d.log" | cut -d: -f1)
[[ -z $first_told || $first_told -gt $first_fail ]] &&
	ok "the log report went in the failed transaction, and was not taken as told" ||
	fail "the log was told (line $first_told) before the batch failed (line $first_fail)"
wait_for 10 "the log report went again" eval '[[ $(q "SELECT count(log) FROM frameq.runs WHERE proc = $pl") == 1 ]]' &&
	ok "it went again and runs.log shows it, while the completes still fail"
[[ $(sent report_log | grep -c "$pl") -ge 2 ]] && ok "report_log was sent for it again ($(sent report_log | grep -c "$pl") calls)" ||
	fail "report_log calls for proc $pl: $(sent report_log | grep -c "$pl")"
q "DROP TRIGGER no_end ON frameq.run" >/dev/null
wait_for 30 "the job finishes" job_finished "$jl" || finish
[[ $(q "SELECT count(*) || ' ' || count(log) || ' ' || string_agg(reason, ',') FROM frameq.runs WHERE job = $jl") == "1 1 completed" ]] &&
	ok "the run completed once, with its log" ||
	fail "runs: $(q "SELECT count(*) || ' ' || count(log) || ' ' || string_agg(reason, ',') FROM frameq.runs WHERE job = $jl")"
stop_agent d
[[ $AGENT_RC == 0 ]] || fail "agent d exited $AGENT_RC on SIGTERM"

check_clean
finish
