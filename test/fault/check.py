#!/usr/bin/env python3
"""Checker for the frameq fault-injection harness (test/fault/harness.py).

    python3 test/fault/check.py OUTDIR

Reads the history of one harness run from OUTDIR, writes OUTDIR/verdict.json,
prints one summary line per check, and exits 0 if nothing was violated, 1 if
anything was, 2 if an input is missing or malformed (verdict.json then holds
{"ok": false, "error": ...} so a stale verdict is never mistaken for this
run's). Python 3.11 standard library only. This docstring is the reference
for the input format; test/fault/test_check.py feeds the checker synthetic
histories and is the executable version of it.

Clocks
------
"t" is CLOCK_MONOTONIC seconds. It is shared by every process on the machine,
so it orders render and harness events truly. "wall" and every time in
final.json are wall-clock epoch seconds (the DB's now(); harness time.time()).
The two kinds are related only in C5, through the heal event, which records
both. Agent log lines carry the agent's own UTC wall time; it is compared
only with failovers[].wall (C2), so it assumes agents are not run under a
faketime offset. Render lifetimes end at the pidfd monitor's dead t, which
is a little after the real death; no tolerance is applied for that.

Inputs
------
history/renders.jsonl -- one JSON object per line, appended by the witness
renders. Every event has "ev", "t" and "proc" (the render's run token, a
63-bit int).
    start              frame, job, host, pid, groups (list of cap group names).
                       Written after the render took (or failed to take) its
                       witness lock and its slots.
    witness_violation  frame, host, holder (proc id read from the witness
                       file, or null): the exclusive flock on the frame's
                       witness file was held by another live process.
    slot_violation     host, group: no free slot file in that cap group.
    publish            frame, result ("published" | "not_owner" | "error"),
                       optional error.
    exit               code: the render is exiting on its own.
    hang               frame, mode ("hang" | "silent"): the render stops here
                       and never ends on its own ("hang" goes on writing
                       output, "silent" writes none); only frameq's kill
                       order (a timeout or a stall), its lease's end or a
                       fault ends it.
    Any other "ev" is malformed.

history/harness.jsonl -- one JSON object per line; every event has "ev", "t"
and "wall".
    phase       phase: setup | load | heal | quiescence | final
    submit      job, frames (list of frame ids: its tasks); the harness adds
                shape, after_jobs, chunked_tasks and depends (rows of
                frameq.depends by kind, read after the commit), not read
    lost_submit job: a failover lost this submission (asynchronous
                replication); its frames may be absent from final.json
    fault_on    id, kind, target (host name or null), extra keys ignored.
                Kinds: agent_stop, host_freeze, agent_kill, render_kill,
                supervisor_kill, proxy_blackhole, proxy_reset, proxy_delay,
                drop_reports, terminate_backends, worker_kill, server_crash,
                failover, ha_failover, ha_node_kill, ha_partition (the
                failovers of a pg_auto_failover formation's manager,
                harness.py --ha), promotion (under --ha, every change of
                primary the harness saw, from the old primary's end to the
                new one's start, whatever caused it); each of the last five
                counts as a failover.
    fault_off   id (of an earlier fault_on; instant faults log both at once).
                One that matches no fault_on (the harness failed to inject
                it) is counted in stats.
    dead        proc, pid, late: a pidfd monitor saw the render die at t
                (late=true: already gone when first looked at; t is only an
                upper bound on the death).
    heal        backlog (frames not yet terminal), slots (render slots of
                the farm), optional depth (the longest chain of unfinished
                tasks each waiting for the next; default 0): every fault is
                healed. Required; the last counts.
    quiet       all_terminal (bool): end of quiescence. Required; the last
                counts.
    Other "ev" values are counted in stats and otherwise ignored.

agents/<host>.log -- agent logs, one event per line:
    2026-11-29T12:00:00.123Z reported proc=1 frame=2 epoch=3 exit_status=0 \
        exit_signal=0 answer=accepted
    2026-11-29T12:00:00.123Z batch epoch=3 reports=2 procs=1,4 \
        answers=accepted,stale booked=2
    Only "reported" lines (they need proc, frame and answer; answer is
    accepted | duplicate | stale) and "batch" lines are read; values may be
    double-quoted. A batch line is one transaction of the agent's reports
    (frameq 0.6.0, complete_many): its epoch, how many reports, their procs
    and answers in the order sent (comma-separated; each answer also has its
    "reported" line), and the bookings it made (a count, or none); it needs
    epoch, reports, procs and answers. Lines that do not start with a
    timestamp (stray stderr) are ignored.

final.json -- the database read after quiescence (times are DB wall seconds):
    params     ttl, drift, margin, render_max, freeze_k, quarantine, poll
               (seconds or ratio), seed; optional delay_max (the longest
               requeue or retry delay), misbehave_runs (the most runs of
               one frame that exit with a code on purpose), hang_runs (the
               most runs of one frame that hang or go silent) and
               timeout_max (the longest timeout of a layer), 0 if absent
    frames     [{id, job, layer, number, state, retries, attempts}]: tasks;
               optional size (its frame numbers, a chunk; default 1)
    runs       [{proc, frame, job, host, epoch, started_at, ended_at,
                 exit_status, exit_signal, reason, end_state}]
               ended_at/reason/end_state null while the run is live;
               optional committed_at: when the transaction that ended the
               run committed (null if unknown; the harness reads it with
               track_commit_timestamp), which may be later than ended_at
    procs      [{id, frame, host, state}]  bookings still live at the end
    outputs    [{frame, proc, content}]    published output per frame;
               content is lines "proc=<P> chunk=<i>"
    publishes  [{frame, proc, at}]         every committed publish
    jobs       [{id, groups}], optional finished_at and committed_at (of the
               job row's last change: its finish, which meets job on job
               dependencies on it; null if not finished)
    depends    optional: the rows of frameq.depends, [{kind ("job" |
               "layer" | "frame"), job, layer, frame, on_job, on_layer,
               on_frame}] (null where the kind has none).  Without it C8
               is not applied (stats depends_recorded false) and every
               frame waits from its submit in C5.
    layers     optional: [{id, requeue_exit_codes (list of int), requeue_delay,
               max_requeues, retry_delay}], each layer's values in force
               (seconds), optionally with timeout and timeout_no_output
               (seconds or null: none).  Without it C9 is not applied (stats
               delays_recorded false) and C5 takes no run to delay its task;
               without timeout keys C10 is not applied (stats
               timeouts_recorded false).
               With it, frames need their layer and runs their exit_status
               and exit_signal.
    caps       {group: slots}              every frame takes one slot
    check      [{invariant, detail}]       rows of frameq.check()
    failovers  [{wall}]                    promotions (asynchronous replication
                                           may lose the last commits before one)
    reserves   [{host, at, booked, up, room}]  optional: every reserve() call of
               the run as the database saw it: at = its statement's start (DB
               wall), booked = rows it returned, up = the host was up with a
               current lease after the quarantine (default true), room = the
               host had the free capacity of one frame (default true).
               Without it C5's passed_over rule is not applied (stats
               reserves_recorded false).  up and room must be false
               whenever the host may have been down or full: false only
               excuses a call.  How the harness records them (test/fault/
               dblog.py): each server logs every statement of the hosts'
               login roles through auto_explain (log_analyze), so a call is
               recorded only if it completed; at = log time - duration,
               booked = the reserve() function scan's actual rows.  up is
               false unless the call ran on a server past its quarantine
               (the frameq worker's "started" line plus the period it
               names, with no crash or shutdown since), after a heartbeat
               or attach of that host on that server that committed before
               the call and began less than ttl before its end, and outside
               any operator action on the host (false_confirm_dead, until
               ttl after it).  room is false if the host's runs that may
               have been live during the call (started before its end, end
               committed after its start; committed_at unknown: ended_at +
               1 s) leave less than one frame's cores or memory, or if
               another session's reserve, heartbeat or attach of the host
               overlapped the call (it may have held the host's lock, and
               reserve() returns nothing without waiting for it).
Only the fields the checks use are validated.

The freeze exception (doc/design.md, Fault model)
-------------------------------------------------
No lease covers a whole host frozen past its lease: the DB rightly rebooks the
frame while the frozen render still exists. A render X is *covered* by a
host_freeze fault F when
    - X's host is F's target and X started before F began (fault_on t),
    - X was still alive when F began and died no later than freeze_k seconds
      after F ended (fault_off t; the heal event if F was never turned off),
    - X had no accepted effect: its DB run's reason is not "completed", no
      agent log has "answer=accepted" for X, and no final output is X's.
      (A publish by X after its run ended is a C2 violation in any case.)
From F's start to X's death X is a *zombie*. Zombies are excused, and counted
in stats, where the checks below say so; the excuse needs the conflict to
begin after F began. A render never seen dead is never covered.

Verdict
-------
verdict.json is {"ok": bool, "violations": [...], "stats": {...}}. A violation
is {"check": "C1_exclusivity", "kind": "render_overlap", "detail": text} plus
the ids it concerns: frame, proc, procs, holder, host, group, cap, peak,
invariant. The stats hold frames_by_state, runs_by_reason, renders_started,
faults_by_kind, witness_violations(_allowed), slot_violations(_allowed),
freeze_overlaps_allowed, freeze_zombies, answers, stale_answers,
duplicate_answers, acks_lost_in_failover, recovery_seconds,
recovery_bound_seconds, violations_by_check and a few more counters.

Checks (check, then kind)
-------------------------
C1_exclusivity
    witness_violation  every witness_violation, unless its holder is a
                       render of the same frame that is a zombie at that time
                       (and not yet dead: a holder read from the file just
                       after a new winner locked it names the dead previous one)
    never_seen_dead    a render with a start event but neither a dead event
                       nor an exit event. Its lifetime is [start, dead t, else
                       exit t]; an unknown end counts as "still alive"
    render_overlap     two render lifetimes of one frame overlap, unless the
                       older one is a zombie when the newer one starts
    run_overlap        two DB runs [started_at, ended_at) of one frame overlap
                       (no exception)
C2_fencing
    publish_outside_run  a committed publish not within its proc's DB run
                       [started_at, ended_at] (open if live), or by a proc
                       with no run, or for another frame than the run's
    ack_mismatch       an accepted report whose proc's run ended "completed",
                       "killed", "timeout", "stalled" or "oom" (the ends a
                       report makes) but for another frame, host or epoch; or whose
                       run did not end that way (unless a failover was
                       promoted at most LOSS_WINDOW (10) s after the log line:
                       async replication can lose the completion and keep
                       the booking)
    ack_without_run    an accepted report for a proc with no DB run, unless a
                       failover was promoted within LOSS_WINDOW after it
    Under a pg_auto_failover formation (harness.py --ha) either is also
    excused within an ha_partition fault whose fault_on says sync false:
    with asynchronous replication the primary cut off from its standby
    goes on acknowledging, unreplicated, until its keeper demotes it,
    however long after the last replicated commit that is.
    Excused reports are counted in stats acks_lost_in_failover (with the
    longest gap to the failover that excuses one, in seconds).
    Stale and duplicate answers are counted in stats.
C3_no_loss
    frame_missing      a submitted frame absent from final.frames, unless a
                       lost_submit names its job (stats frames_lost_with_submit)
    frame_not_terminal a submitted frame not succeeded, dead or eaten (nor
                       'depend' with a prerequisite not succeeded or eaten:
                       see C8)
    completed_runs     a succeeded frame without exactly one run with reason
                       "completed" and end_state "succeeded"
    output_missing / output_proc / output_content / output_duplicate
                       a succeeded frame's output must exist once, belong to
                       the completed run's proc, and have only lines
                       "proc=<that proc> chunk=<i>" (at least one). A missing
                       output is excused (stats publishes_lost_in_failover)
                       only if the completed run's render logged a successful
                       publish, no publish of that proc is in final.json, and
                       a failover began at most LOSS_WINDOW (10) s
                       after that publish and ended after it: asynchronous
                       replication lost the publish, and the completion,
                       sent after the promotion, reached the new primary
C4_caps
    slot_violation     every slot_violation, unless at that time a zombie in
                       the same group (not the complaining render) was alive
    render_cap         sweep over render lifetimes per group: more live
                       renders than caps[group]; a zombie is not counted from
                       its freeze's start. One violation per excursion.
    run_cap            the same sweep over DB run intervals (a run's groups
                       are its job's groups). No exception.
C5_liveness
    not_quiet          the quiet event has all_terminal false
    live_proc          a booking left in final.procs
    slow_recovery      from the heal event to the latest runs.ended_at (DB
                       wall, mapped through heal's wall/t pair) took longer
                       than ttl*(1+drift) + margin + quarantine + poll +
                       render_max + ceil(backlog/slots)*render_max + 10 s
    passed_over        no waiting frame is passed over (doc/design-notes-
                       dispatch.md): a reserve() of final.reserves that
                       booked nothing for a host up and with room, while a
                       frame was waiting since at least WAIT_SLACK (0.2) s
                       before the call (and until its next run started, or
                       forever if none did), and every cap group of its
                       job had fewer DB runs than its cap overlapping
                       [at, end + CLAIM_SLACK (1.0) s], end the call's end
                       (at if not recorded).  A frame whose next run
                       started within CLAIM_SLACK after the call ended is
                       excused: a concurrent call had claimed it (calls
                       that wait, a bounded lock wait of a second, say,
                       see the others book meanwhile).
                       The harness farm's frames fit every host. A frame
                       waits from its submit event (or, if later, from when
                       its last prerequisite was met, see C8; never if one
                       never was or was eaten with no run) to its first run, and
                       from the end of each run that left it waiting
                       (committed_at if later; for a run that delayed it,
                       see C9, the end of the delay plus poll plus
                       DUE_SLACK (2.0 s): the worker makes it bookable
                       within a round) to the next run; the
                       frames of a lost_submit job never wait. A call at
                       most LOSS_WINDOW before a failover began (or during
                       one) that would pass a frame over is excused (stats
                       reserves_lost_in_failover): the failover may have
                       lost the bookings that made the frame, or the host,
                       busy on the old primary.
C6_tokens
    proc_reused        two DB runs, or two render start events, with one proc
                       id; or a render whose proc's DB run is for another
                       frame or host
    render_without_run a render whose proc the DB does not know, unless it
                       started at most LOSS_WINDOW before a failover began (or
                       during one): the failover lost its booking (stats
                       renders_unknown_to_db)
    slow_recovery's bound adds depth * (render_max + poll) when the heal
    event has a depth: chained tasks run one after the other; and
    (misbehave_runs + depth) * (render_max + delay_max + poll): a task that
    misbehaves runs again after its delay, as many times as it may, and
    each link of a chain may do so once; and, with hang_runs, (hang_runs +
    depth) * (timeout_max + poll + quarantine + ROUND_SLACK): a render
    that hangs holds its task until C10's bound.
C7_check
    check_row          every row of frameq.check()
C8_dependencies (when final.json has depends)
    A task's prerequisites: the tasks its frame dependencies name (on_frame),
    every task of a layer its layer waits for (on_layer), every task of a
    job its job waits for (on_job).  A prerequisite ends at the earliest
    run that left it succeeded or eaten (end_state), at that run's
    committed_at (ended_at if unknown, which is no later); a death, or a
    run that left it waiting, is no end; a prerequisite eaten with no such
    run has an unknown end (stats prerequisite_ends_unknown) and is not
    compared.
    ran_before_prerequisites  a render (its start event) of a task started
                       before one of its prerequisites ended, by more than
                       ORDER_SLACK (0.05 s).  The render's monotonic t is
                       mapped to wall through the harness events within 30 s
                       of it (the smallest wall - t: each reads t first);
                       hosts, harness and servers share one machine's clock,
                       so the slack covers that mapping only.  The true
                       order has no slack to give: the prerequisite's end
                       commits before the task can be booked, and the
                       render starts after its booking.  Not checked: a
                       render with no DB run that started at most
                       LOSS_WINDOW before a failover began or during one
                       (stats renders_lost_in_failover_unchecked): the
                       failover may have lost the end it followed as well.
    depend_left        a task left 'depend' at the end although all its
                       prerequisites ended succeeded or eaten (a task with
                       a prerequisite in any other state is rightly held:
                       C3 excuses it, stats frames_held_by_prerequisites).
                       Excused when the quiet event has all_terminal false
                       (the run was cut short: not_quiet; stats
                       depend_left_run_cut_short).
    Stats: depends_by_kind, tasks_with_prerequisites, chunked_tasks,
    renders_checked_for_prerequisites, renders_before_prerequisites.
C9_delays (when final.json has layers)
    A run that ended "completed" with its frame back to "waiting" and a
    non-zero exit delayed its frame: by its layer's requeue_delay if it was
    a requeue (exit_signal 0, exit_status one of the layer's
    requeue_exit_codes, and fewer requeues of the frame before it than
    max_requeues: the runs of the frame are counted in start order), else
    by its retry_delay.
    booked_early       the frame's next run (in start order) started before
                       that run's ended_at plus the delay (DELAY_EPS, 1 ms,
                       for the float seconds): frameq sets the delay from a
                       clock read after ended_at and books no earlier.  No
                       exception.
    Stats: delays_recorded, requeued_runs, delayed_runs.
C10_timeouts (when final.json's layers have timeout keys)
    A task whose layer has a timeout T may run past it by at most the lease
    period (quarantine: a host that cannot be told is fenced by its lease)
    plus a worker round (poll: the round that finds it due) plus
    ROUND_SLACK (1.0 s: the rounds' own time, and the round that expires a
    lease).  Faults that overlap the span from the deadline to that bound
    move it: a server crash, failover or worker kill by its length +
    quarantine + poll + REPORT_BACKOFF (7 s, the agent's waits after its
    first three failed reports: a database that is down times nothing out,
    and its worker expires no lease in its quarantine); terminate_backends
    by poll + 1 s (the agent reconnects, a report in flight waits 1 s); a
    fault on the task's host that can hold up its report or its kill
    (agent_stop, host_freeze, agent_kill, the proxies' faults,
    drop_reports) by its length + REPORT_BACKOFF.  Other faults (a render
    or supervisor killed, another host's) move nothing.  The extension
    repeats while it takes in more faults, so under a dense schedule the
    bound is loose; the runs with no fault in the way (the quiescence
    above all) are held to the bare one.
    timeout_overrun    a DB run of such a task that ended later than its
                       started_at + T + that bound (DB wall; a fault's wall
                       times).  No other exception.
    render_overrun     the harness's own observation of the same: a render
                       of such a task that was seen dead (its dead event)
                       later than its start + T + that bound (monotonic; a
                       frozen host's fault extends it like any other).
    hung_not_ended     liveness: a render that hung or went silent (its
                       hang event) that was never seen dead, or whose DB run
                       never ended.
    Stats: timeouts_recorded, timed_runs, timed_runs_extended_by_faults,
    timeout_overrun_max_seconds (the most a run without a fault in its way
    ran past its timeout), hung_renders (by mode), hung_ended_by (the
    reasons their runs ended with).
C11_batches (the agents' batch lines)
    Every accepted completion of a batch matches exactly one run that ended
    for it, and the runs a batch ended, ended in its one transaction.
    batch_answers      a batch whose procs and answers are not one for one,
                       or not as many as its reports
    batch_proc_twice   a proc twice in one batch
    batch_ack_unmatched  an accepted element with no run that ended for it:
                       the proc's run ended by a report (completed, killed,
                       timeout, stalled, oom) on the batch's host, under
                       its epoch; unless a failover was promoted at most
                       LOSS_WINDOW after the batch line (stats
                       batch_acks_lost_in_failover)
    batch_ack_twice    a run that more than one accepted element matched
                       (the later ones should have answered duplicate);
                       unless a failover was promoted at most LOSS_WINDOW
                       after each earlier one (it lost that commit)
    batch_split        the runs of one batch's accepted elements ended in
                       more than one transaction: their committed_at differ
                       (runs without committed_at are not compared)
    Stats: batches, batch_reports, batch_largest, batches_with_booking,
    batch_answers (by answer), batch_acks_lost_in_failover.
"""

import bisect
import collections
import datetime
import json
import math
import os
import re
import sys

CHECKS = ("C1_exclusivity", "C2_fencing", "C3_no_loss", "C4_caps",
          "C5_liveness", "C6_tokens", "C7_check", "C8_dependencies", "C9_delays",
          "C10_timeouts", "C11_batches")
TERMINAL = {"succeeded", "dead", "eaten"}
INF = math.inf
RECOVERY_SLACK = 10.0
WAIT_SLACK = 0.2        # a frame must have been waiting this long before a call
CLAIM_SLACK = 1.0       # bookings this soon after a call may be a concurrent claim
ORDER_SLACK = 0.05      # C8: error of mapping a render's monotonic start to wall time
DUE_SLACK = 2.0         # C5: a delayed frame is bookable this long after its poll
DELAY_EPS = 0.001       # C9: float seconds of the DB's microsecond times
ROUND_SLACK = 1.0       # C10: the worker rounds' own time, and the round that expires a lease
REPORT_BACKOFF = 7.0    # C10: the agent's waits after its first three failed reports (1 + 2 + 4 s)
# failover: the harness's own; ha_*: a pg_auto_failover formation's manager
# (harness.py --ha pg_auto_failover): perform failover, the primary's node
# killed, the primary cut from monitor and standby; and promotion: every
# change of primary the harness saw under a formation, whatever caused it,
# from the old primary's end to the new one's start
FAILOVER_KINDS = {"failover", "ha_failover", "ha_node_kill", "ha_partition", "promotion"}
DB_RESTARTS = {"worker_kill", "server_crash"} | FAILOVER_KINDS
# C10: the faults of a host that may hold up the end of its task's run
HOST_DELAYS = {"agent_stop", "host_freeze", "agent_kill", "proxy_blackhole", "proxy_reset",
               "proxy_delay", "drop_reports"}
ENDED = {"succeeded", "eaten"}   # a prerequisite ended so frees its dependents
# the reasons a run ends with when a report of its end is accepted
REPORTED_ENDS = ("completed", "killed", "timeout", "stalled", "oom")


class InputError(Exception):
    """An input file is missing or malformed: exit status 2."""


# --------------------------------------------------------------------------
# Loading and validation

NUM = "number"
INT = "int"
STR = "str"
BOOL = "bool"
LIST = "list"
OPT = "|null"


def _is(value, kind):
    if kind.endswith(OPT):
        if value is None:
            return True
        kind = kind[:-len(OPT)]
    if kind == NUM:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind == INT:
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == STR:
        return isinstance(value, str)
    if kind == BOOL:
        return isinstance(value, bool)
    if kind == LIST:
        return isinstance(value, list)
    raise AssertionError(kind)


def need(obj, schema, where):
    """Check that dict obj has every key of schema with the right type."""
    if not isinstance(obj, dict):
        raise InputError(f"{where}: expected an object, got {obj!r:.80}")
    for key, kind in schema.items():
        if key not in obj:
            raise InputError(f"{where}: missing {key!r}")
        if not _is(obj[key], kind):
            raise InputError(f"{where}: {key!r} should be {kind}, got {obj[key]!r:.80}")
    return obj


def read_jsonl(path):
    if not os.path.isfile(path):
        raise InputError(f"missing {path}")
    out = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                out.append((f"{path}:{n}", json.loads(line)))
            except json.JSONDecodeError as e:
                raise InputError(f"{path}:{n}: not JSON ({e})") from None
    return out


RENDER_EVENTS = {
    "start": {"frame": INT, "job": INT, "host": STR, "pid": INT, "groups": LIST},
    "witness_violation": {"frame": INT, "host": STR, "holder": INT + OPT},
    "slot_violation": {"host": STR, "group": STR},
    "publish": {"frame": INT, "result": STR},
    "exit": {"code": INT},
    "hang": {"frame": INT, "mode": STR},
}

HARNESS_EVENTS = {
    "phase": {"phase": STR},
    "submit": {"job": INT, "frames": LIST},
    "lost_submit": {"job": INT},
    "fault_on": {"id": INT, "kind": STR, "target": STR + OPT},
    "fault_off": {"id": INT},
    "dead": {"proc": INT, "pid": INT, "late": BOOL},
    "heal": {"backlog": INT, "slots": INT},
    "quiet": {"all_terminal": BOOL},
}

FINAL_SCHEMA = {
    "params": {"ttl": NUM, "drift": NUM, "margin": NUM, "render_max": NUM,
               "freeze_k": NUM, "quarantine": NUM, "poll": NUM},
    "frames": {"id": INT, "job": INT, "state": STR},
    "runs": {"proc": INT, "frame": INT, "job": INT, "host": STR, "epoch": INT,
             "started_at": NUM, "ended_at": NUM + OPT, "reason": STR + OPT,
             "end_state": STR + OPT},
    "procs": {"id": INT, "frame": INT, "host": STR},
    "outputs": {"frame": INT, "proc": INT + OPT, "content": STR},
    "publishes": {"frame": INT, "proc": INT, "at": NUM},
    "jobs": {"id": INT, "groups": LIST},
    "check": {},
    "failovers": {"wall": NUM},
}


def load_renders(path):
    events = []
    for where, ev in read_jsonl(path):
        need(ev, {"ev": STR, "t": NUM, "proc": INT}, where)
        schema = RENDER_EVENTS.get(ev["ev"])
        if schema is None:
            raise InputError(f"{where}: unknown render event {ev['ev']!r}")
        need(ev, schema, where)
        if ev["ev"] == "start" and not all(isinstance(g, str) for g in ev["groups"]):
            raise InputError(f"{where}: groups must be strings")
        events.append(ev)
    return events


def load_harness(path):
    events, ignored = [], collections.Counter()
    for where, ev in read_jsonl(path):
        need(ev, {"ev": STR, "t": NUM, "wall": NUM}, where)
        schema = HARNESS_EVENTS.get(ev["ev"])
        if schema is None:
            ignored[ev["ev"]] += 1
            continue
        need(ev, schema, where)
        if ev["ev"] == "submit" and not all(_is(f, INT) for f in ev["frames"]):
            raise InputError(f"{where}: frame ids must be integers")
        ev["_where"] = where
        events.append(ev)
    return events, ignored


LOG_LINE = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?)Z\s+(\S+)(.*)$")
LOG_KV = re.compile(r'(\w+)=("(?:[^"\\]|\\.)*"|\S*)')


def parse_log_time(text):
    fmt = "%Y-%m-%dT%H:%M:%S.%f" if "." in text else "%Y-%m-%dT%H:%M:%S"
    return datetime.datetime.strptime(text, fmt).replace(
        tzinfo=datetime.timezone.utc).timestamp()


def load_agent_logs(directory):
    """The "reported" and the "batch" lines of every agents/<host>.log, as
    two lists of dicts."""
    if not os.path.isdir(directory):
        raise InputError(f"missing {directory}/")
    reports, batches = [], []
    for name in sorted(os.listdir(directory)):
        if not name.endswith(".log"):
            continue
        host = name[:-len(".log")]
        path = os.path.join(directory, name)
        with open(path, encoding="utf-8", errors="replace") as f:
            for n, line in enumerate(f, 1):
                m = LOG_LINE.match(line.rstrip("\n"))
                if not m or m.group(2) not in ("reported", "batch"):
                    continue
                kv = {}
                for k, v in LOG_KV.findall(m.group(3)):
                    kv[k] = v[1:-1] if v.startswith('"') else v
                where = f"{path}:{n}"
                if m.group(2) == "batch":
                    batches.append(parse_batch(kv, host, parse_log_time(m.group(1)), where,
                                               line))
                    continue
                try:
                    rep = {"proc": int(kv["proc"]), "frame": int(kv["frame"]),
                           "answer": kv["answer"],
                           "epoch": int(kv["epoch"]) if "epoch" in kv else None}
                except (KeyError, ValueError):
                    raise InputError(f"{where}: reported line needs integer proc and "
                                     f"frame and an answer: {line.strip()!r:.120}") from None
                rep.update(host=host, wall=parse_log_time(m.group(1)), where=where)
                reports.append(rep)
    return reports, batches


def parse_batch(kv, host, wall, where, line):
    """One batch line: epoch, reports, procs and answers (lists, in order)."""
    try:
        procs = [int(p) for p in kv["procs"].split(",")] if kv["procs"] else []
        answers = kv["answers"].split(",") if kv["answers"] else []
        batch = {"epoch": int(kv["epoch"]), "reports": int(kv["reports"]),
                 "procs": procs, "answers": answers}
    except (KeyError, ValueError):
        raise InputError(f"{where}: batch line needs integer epoch and reports, procs "
                         f"and answers: {line.strip()!r:.120}") from None
    if any(a not in ("accepted", "duplicate", "stale") for a in answers):
        raise InputError(f"{where}: batch answers must be accepted, duplicate or stale: "
                         f"{kv['answers']!r:.80}")
    booked = kv.get("booked", "none")
    batch.update(booked=None if booked == "none" else booked, host=host, wall=wall,
                 where=where)
    return batch


def load_final(path):
    if not os.path.isfile(path):
        raise InputError(f"missing {path}")
    try:
        with open(path, encoding="utf-8") as f:
            final = json.load(f)
    except json.JSONDecodeError as e:
        raise InputError(f"{path}: not JSON ({e})") from None
    if not isinstance(final, dict):
        raise InputError(f"{path}: expected an object")
    for key, schema in FINAL_SCHEMA.items():
        if key not in final:
            raise InputError(f"{path}: missing {key!r}")
        if key == "params":
            need(final[key], schema, f"{path}: params")
            continue
        if not isinstance(final[key], list):
            raise InputError(f"{path}: {key!r} should be a list")
        for i, row in enumerate(final[key]):
            need(row, schema, f"{path}: {key}[{i}]")
    for i, run in enumerate(final["runs"]):
        if not _is(run.get("committed_at"), NUM + OPT):
            raise InputError(f"{path}: runs[{i}]: 'committed_at' should be {NUM + OPT}")
    for job in final["jobs"]:
        if not all(isinstance(g, str) for g in job["groups"]):
            raise InputError(f"{path}: job {job['id']}: groups must be strings")
    caps = final.get("caps")
    if not isinstance(caps, dict) or not all(_is(v, INT) for v in caps.values()):
        raise InputError(f"{path}: caps should be an object of group -> integer")
    depends = final.get("depends")
    if depends is not None:
        if not isinstance(depends, list):
            raise InputError(f"{path}: 'depends' should be a list")
        for i, row in enumerate(depends):
            need(row, {"kind": STR, "job": INT, "layer": INT + OPT, "frame": INT + OPT,
                       "on_job": INT, "on_layer": INT + OPT, "on_frame": INT + OPT},
                 f"{path}: depends[{i}]")
            key = {"job": "on_job", "layer": "on_layer", "frame": "on_frame"}.get(row["kind"])
            if key is None or row[key] is None or (row["kind"] != "job" and row["layer"] is None) \
                    or (row["kind"] == "frame" and row["frame"] is None):
                raise InputError(f"{path}: depends[{i}]: a {row['kind']!r} dependency without "
                                 "its ids")
        for i, fr in enumerate(final["frames"]):
            need(fr, {"layer": INT}, f"{path}: frames[{i}]")
    for i, job in enumerate(final["jobs"]):
        for key in ("finished_at", "committed_at"):
            if not _is(job.get(key), NUM + OPT):
                raise InputError(f"{path}: jobs[{i}]: {key!r} should be {NUM + OPT}")
    layers = final.get("layers")
    if layers is not None:
        if not isinstance(layers, list):
            raise InputError(f"{path}: 'layers' should be a list")
        for i, row in enumerate(layers):
            need(row, {"id": INT, "requeue_exit_codes": LIST, "requeue_delay": NUM,
                       "max_requeues": INT, "retry_delay": NUM}, f"{path}: layers[{i}]")
            if not all(_is(c, INT) for c in row["requeue_exit_codes"]):
                raise InputError(f"{path}: layers[{i}]: requeue_exit_codes must be integers")
            for key in ("timeout", "timeout_no_output"):
                if not _is(row.get(key), NUM + OPT):
                    raise InputError(f"{path}: layers[{i}]: {key!r} should be {NUM + OPT}")
        for i, fr in enumerate(final["frames"]):
            need(fr, {"layer": INT}, f"{path}: frames[{i}]")
        for i, run in enumerate(final["runs"]):
            need(run, {"exit_status": INT + OPT, "exit_signal": INT + OPT}, f"{path}: runs[{i}]")
    for key in ("delay_max", "misbehave_runs", "hang_runs", "timeout_max"):
        if not _is(final["params"].get(key, 0), NUM):
            raise InputError(f"{path}: params: {key!r} should be {NUM}")
    reserves = final.get("reserves")
    if reserves is not None:
        if not isinstance(reserves, list):
            raise InputError(f"{path}: 'reserves' should be a list")
        for i, row in enumerate(reserves):
            need(row, {"host": STR, "at": NUM, "booked": INT}, f"{path}: reserves[{i}]")
            if "end" in row and not _is(row["end"], NUM):
                raise InputError(f"{path}: reserves[{i}]: 'end' should be {NUM}")
            for key in ("up", "room"):
                if key in row and not _is(row[key], BOOL):
                    raise InputError(f"{path}: reserves[{i}]: {key!r} should be bool")
    return final


# --------------------------------------------------------------------------
# The model the checks work on

class Render:
    """One witness render process, from its start event to its death."""

    def __init__(self, ev):
        self.proc = ev["proc"]
        self.frame = ev["frame"]
        self.job = ev["job"]
        self.host = ev["host"]
        self.groups = ev["groups"]
        self.start = ev["t"]
        self.end = None          # dead t, else exit t, else None (never seen dead)
        self.cover = None        # the host_freeze fault that excuses it, if any

    @property
    def end_or_inf(self):
        return INF if self.end is None else self.end


class Freeze:
    def __init__(self, on):
        self.id = on["id"]
        self.target = on["target"]
        self.on = on["t"]
        self.off = None


# how long before a failover a commit may have been lost by it: the standby
# streams over loopback, so its lag is milliseconds, except after a crash of
# the primary, when it reconnects within wal_retrieve_retry_interval (5 s);
# the harness logs the failover before stopping the old primary
LOSS_WINDOW = 10.0


def fmt_t(x):
    return "never" if x == INF or x is None else f"{x:.3f}"


class Checker:
    def __init__(self, outdir):
        hist = os.path.join(outdir, "history")
        self.render_events = load_renders(os.path.join(hist, "renders.jsonl"))
        self.harness, self.ignored_harness = load_harness(os.path.join(hist, "harness.jsonl"))
        self.reports, self.batches = load_agent_logs(os.path.join(outdir, "agents"))
        self.final = load_final(os.path.join(outdir, "final.json"))
        self.params = self.final["params"]
        self.violations = []
        self.stats = {}
        self._index()

    # -- indexes --------------------------------------------------------------

    def _index(self):
        f = self.final
        self.runs_by_proc = collections.defaultdict(list)
        self.runs_by_frame = collections.defaultdict(list)
        for run in f["runs"]:
            self.runs_by_proc[run["proc"]].append(run)
            self.runs_by_frame[run["frame"]].append(run)
        self.jobs = {j["id"]: j["groups"] for j in f["jobs"]}
        for run in f["runs"]:
            if run["job"] not in self.jobs:
                raise InputError(f"final.json: run {run['proc']} is of job {run['job']}, "
                                 "which is not in jobs")
        self.outputs_by_frame = collections.defaultdict(list)
        for out in f["outputs"]:
            self.outputs_by_frame[out["frame"]].append(out)
        self.output_procs = {out["proc"] for out in f["outputs"]}
        self.accepted = collections.defaultdict(list)
        for rep in self.reports:
            if rep["answer"] == "accepted":
                self.accepted[rep["proc"]].append(rep)

        heals = [e for e in self.harness if e["ev"] == "heal"]
        quiets = [e for e in self.harness if e["ev"] == "quiet"]
        if not heals:
            raise InputError("harness.jsonl has no heal event")
        if not quiets:
            raise InputError("harness.jsonl has no quiet event")
        self.heal, self.quiet = heals[-1], quiets[-1]

        self.submitted = []          # (frame, job)
        self.lost_jobs = set()
        self.unmatched_fault_off = 0
        self.faults = collections.Counter()
        self.freezes_by_host = collections.defaultdict(list)
        open_faults = {}
        dead = {}
        self.late_dead = 0
        for e in self.harness:
            if e["ev"] == "submit":
                self.submitted.extend((fid, e["job"]) for fid in e["frames"])
            elif e["ev"] == "lost_submit":
                self.lost_jobs.add(e["job"])
            elif e["ev"] == "fault_on":
                if e["id"] in open_faults:
                    raise InputError(f"{e['_where']}: fault {e['id']} turned on twice")
                self.faults[e["kind"]] += 1
                open_faults[e["id"]] = e
                if e["kind"] == "host_freeze":
                    if e["target"] is None:
                        raise InputError(f"{e['_where']}: host_freeze without a target")
                    e["_freeze"] = Freeze(e)
                    self.freezes_by_host[e["target"]].append(e["_freeze"])
            elif e["ev"] == "fault_off":
                on = open_faults.pop(e["id"], None)
                if on is None:
                    self.unmatched_fault_off += 1
                elif "_freeze" in on:
                    on["_freeze"].off = e["t"]
            elif e["ev"] == "dead":
                if e["late"]:
                    self.late_dead += 1
                # the earliest report is the best bound on the death
                dead[e["proc"]] = min(e["t"], dead.get(e["proc"], INF))
        self.faults_never_off = sorted(open_faults)
        self.job_of_frame = {fr["id"]: fr["job"] for fr in self.final["frames"]}
        self.job_of_frame.update(self.submitted)
        # failovers as monotonic [on, off]: the old primary stops after "on"
        # and the same in wall seconds, for the DB's times
        self.failover_windows = []
        self.failover_walls = []
        for e in self.harness:
            if e["ev"] == "fault_on" and e["kind"] in FAILOVER_KINDS:
                off = next((x for x in self.harness if x["ev"] == "fault_off"
                            and x["id"] == e["id"] and x["t"] >= e["t"]), self.heal)
                self.failover_windows.append((e["t"], off["t"]))
                self.failover_walls.append((e["wall"], off["wall"]))
        for fz in (fz for lst in self.freezes_by_host.values() for fz in lst):
            if fz.off is None:
                fz.off = self.heal["t"]

        self._index_depends()
        self._index_delays()
        # monotonic -> wall: every harness event reads both clocks, t first
        self.clock_pairs = sorted((e["t"], e["wall"] - e["t"]) for e in self.harness)

        exits = {}
        self.renders, self.render_dups = {}, []
        for ev in self.render_events:
            if ev["ev"] == "exit":
                exits.setdefault(ev["proc"], ev["t"])
            elif ev["ev"] == "start":
                if ev["proc"] in self.renders:
                    self.render_dups.append(ev)
                else:
                    self.renders[ev["proc"]] = Render(ev)
        for r in self.renders.values():
            r.end = dead.get(r.proc, exits.get(r.proc))
            r.cover = self._freeze_cover(r)
        self.dead_without_start = len(set(dead) - set(self.renders))

    def _index_delays(self):
        """From final.json's layers: how long each run that left its frame
        waiting delayed it (proc -> seconds; see C9), counting each frame's
        requeues in run start order."""
        layers = self.final.get("layers")
        self.delay_after = {}
        self.requeued_runs = 0
        if layers is None:
            return
        rules = {row["id"]: row for row in layers}
        layer_of = {fr["id"]: fr["layer"] for fr in self.final["frames"]}
        for fid, runs in self.runs_by_frame.items():
            rule = rules.get(layer_of.get(fid))
            if rule is None:
                continue
            requeues = 0
            for run in sorted(runs, key=lambda run: run["started_at"]):
                if (run["ended_at"] is None or run["reason"] != "completed"
                        or run["end_state"] != "waiting"
                        or (run["exit_status"] or 0, run["exit_signal"] or 0) == (0, 0)):
                    continue
                if (run["exit_signal"] or 0) == 0 and run["exit_status"] in rule["requeue_exit_codes"] \
                        and requeues < rule["max_requeues"]:
                    requeues += 1
                    self.requeued_runs += 1
                    delay = rule["requeue_delay"]
                else:
                    delay = rule["retry_delay"]
                if delay > 0:
                    self.delay_after[run["proc"]] = delay

    def _index_depends(self):
        """From final.json's depends: each task's prerequisite tasks (task
        -> {prerequisite task: kind}: frame by frame, every task of a
        layer, every task of a job) and prerequisite jobs; when each task
        ended succeeded or eaten."""
        f = self.final
        self.depends = f.get("depends")
        self.frames = {fr["id"]: fr for fr in f["frames"]}
        self.prereqs = collections.defaultdict(dict)
        self.pre_jobs = collections.defaultdict(set)
        self.job_rows = {j["id"]: j for j in f["jobs"]}
        if self.depends is None:
            return
        by_layer, by_job = collections.defaultdict(list), collections.defaultdict(list)
        for fr in f["frames"]:
            by_layer[fr["layer"]].append(fr["id"])
            by_job[fr["job"]].append(fr["id"])
        layer_pre, job_pre = collections.defaultdict(set), collections.defaultdict(set)
        for d in self.depends:
            if d["kind"] == "frame":
                self.prereqs[d["frame"]][d["on_frame"]] = "frame"
            elif d["kind"] == "layer":
                layer_pre[d["layer"]].add(d["on_layer"])
            else:
                job_pre[d["job"]].add(d["on_job"])
        for fr in f["frames"]:
            pre = self.prereqs[fr["id"]]
            for on_layer in layer_pre.get(fr["layer"], ()):
                pre.update((p, "layer") for p in by_layer.get(on_layer, ()) if p not in pre)
            for on_job in job_pre.get(fr["job"], ()):
                self.pre_jobs[fr["id"]].add(on_job)
                pre.update((p, "job") for p in by_job.get(on_job, ()) if p not in pre)
            if not pre:
                del self.prereqs[fr["id"]]
        # a task's end: the earliest run that left it succeeded or eaten, at
        # its commit (ended_at if unknown, which is no later); None if it
        # was eaten with no run (when is not recorded); INF if never
        self.task_end = {}
        for fid, fr in self.frames.items():
            ends = [run["ended_at"] if run.get("committed_at") is None
                    else max(run["ended_at"], run["committed_at"])
                    for run in self.runs_by_frame.get(fid, ())
                    if run["ended_at"] is not None and run["end_state"] in ENDED]
            self.task_end[fid] = (min(ends) if ends else
                                  None if fr["state"] in ENDED else INF)

    def ready_at(self, fid):
        """When task fid's last prerequisite was met (DB wall): -INF if it
        has none, INF if never or unknown.  A job on job dependency is met
        when the job finishes (committed_at of final.json's job, if
        recorded; else its last task's end)."""
        ends = [self.task_end[p] for p in self.prereqs.get(fid, ())]
        if any(e is None for e in ends):
            return INF
        for job in self.pre_jobs.get(fid, ()):
            row = self.job_rows.get(job, {})
            if "committed_at" in row or "finished_at" in row:
                done = row.get("committed_at") or row.get("finished_at")
                ends.append(INF if done is None else done)
        return max(ends, default=-INF)

    def to_wall(self, t):
        """Monotonic t as wall seconds, through the harness events near it:
        the smallest wall - t of those within 30 s (each reads t first, so
        a delay only adds), else the nearest event's."""
        pairs = self.clock_pairs
        if not pairs:
            raise InputError("harness.jsonl has no events")
        i = bisect.bisect_left(pairs, (t - 30.0, -INF))
        j = bisect.bisect_right(pairs, (t + 30.0, INF))
        near = pairs[i:j] or [min(pairs, key=lambda p: abs(p[0] - t))]
        return t + min(off for _, off in near)

    def had_effect(self, proc):
        """Did proc get anything accepted (report, completed run, final output)?"""
        return (any(run["reason"] == "completed" for run in self.runs_by_proc.get(proc, ()))
                or proc in self.accepted or proc in self.output_procs)

    def _freeze_cover(self, r):
        """The earliest host_freeze fault that covers render r, or None."""
        if r.end is None or self.had_effect(r.proc):
            return None
        k = self.params["freeze_k"]
        best = None
        for fz in self.freezes_by_host.get(r.host, ()):
            if r.start < fz.on < r.end <= fz.off + k and (best is None or fz.on < best.on):
                best = fz
        return best

    def zombie_at(self, r, t):
        """Is render r an excused zombie at monotonic time t?"""
        return r.cover is not None and t >= r.cover.on

    def violate(self, check, kind, detail, **ids):
        assert check in CHECKS
        self.violations.append({"check": check, "kind": kind, "detail": detail, **ids})

    # -- checks ---------------------------------------------------------------

    def c1_exclusivity(self):
        c = "C1_exclusivity"
        wv_total = wv_allowed = 0
        for ev in self.render_events:
            if ev["ev"] != "witness_violation":
                continue
            wv_total += 1
            holder = self.renders.get(ev["holder"]) if ev["holder"] is not None else None
            if (holder is not None and holder.frame == ev["frame"]
                    and self.zombie_at(holder, ev["t"]) and ev["t"] <= holder.end):
                wv_allowed += 1
                continue
            self.violate(c, "witness_violation",
                         f"frame {ev['frame']}: render {ev['proc']} on {ev['host']} found the "
                         f"witness held by {ev['holder']} at t={ev['t']:.3f}",
                         frame=ev["frame"], proc=ev["proc"], holder=ev["holder"])

        for r in self.renders.values():
            if r.end is None:
                self.violate(c, "never_seen_dead",
                             f"frame {r.frame}: render {r.proc} on {r.host} started at "
                             f"t={r.start:.3f} and was never seen dead",
                             frame=r.frame, proc=r.proc)

        overlaps_allowed = 0
        by_frame = collections.defaultdict(list)
        for r in self.renders.values():
            by_frame[r.frame].append(r)
        for frame, rs in by_frame.items():
            rs.sort(key=lambda r: r.start)
            for i, old in enumerate(rs):
                for new in rs[i + 1:]:
                    if new.start >= old.end_or_inf:
                        continue
                    if self.zombie_at(old, new.start):
                        overlaps_allowed += 1
                        continue
                    self.violate(c, "render_overlap",
                                 f"frame {frame}: render {new.proc} on {new.host} started at "
                                 f"t={new.start:.3f} while render {old.proc} on {old.host} "
                                 f"(t={old.start:.3f}..{fmt_t(old.end)}) was alive",
                                 frame=frame, procs=[old.proc, new.proc])

        for frame, runs in self.runs_by_frame.items():
            runs = sorted(runs, key=lambda run: run["started_at"])
            for i, old in enumerate(runs):
                old_end = INF if old["ended_at"] is None else old["ended_at"]
                for new in runs[i + 1:]:
                    if new["started_at"] < old_end:
                        self.violate(c, "run_overlap",
                                     f"frame {frame}: run {new['proc']} on {new['host']} began "
                                     f"at {new['started_at']:.3f} before run {old['proc']} on "
                                     f"{old['host']} ended ({fmt_t(old['ended_at'])})",
                                     frame=frame, procs=[old["proc"], new["proc"]])

        self.stats.update(witness_violations=wv_total, witness_violations_allowed=wv_allowed,
                          freeze_overlaps_allowed=overlaps_allowed,
                          freeze_zombies=sum(r.cover is not None for r in self.renders.values()))

    def c2_fencing(self):
        c = "C2_fencing"
        for pub in self.final["publishes"]:
            runs = self.runs_by_proc.get(pub["proc"], [])
            if not any(run["frame"] == pub["frame"] and run["started_at"] <= pub["at"]
                       <= (INF if run["ended_at"] is None else run["ended_at"]) for run in runs):
                where = ", ".join(f"frame {run['frame']} {run['started_at']:.3f}.."
                                  f"{fmt_t(run['ended_at'])}" for run in runs) or "none"
                self.violate(c, "publish_outside_run",
                             f"frame {pub['frame']}: publish by proc {pub['proc']} at "
                             f"{pub['at']:.3f} is outside its run (runs: {where})",
                             frame=pub["frame"], proc=pub["proc"])

        failover_walls = sorted(fo["wall"] for fo in self.final["failovers"])
        # asynchronous cuts (--ha): [on, off] walls of ha_partition faults
        # with sync false
        async_cuts = []
        for e in self.harness:
            if e["ev"] == "fault_on" and e["kind"] == "ha_partition" and e.get("sync") is False:
                off = next((x for x in self.harness if x["ev"] == "fault_off"
                            and x["id"] == e["id"] and x["t"] >= e["t"]), self.heal)
                async_cuts.append((e["wall"], off["wall"]))
        lost, lost_gap = 0, 0.0
        answers = collections.Counter(rep["answer"] for rep in self.reports)
        for rep in self.reports:
            if rep["answer"] != "accepted":
                continue
            runs = self.runs_by_proc.get(rep["proc"], [])
            ended = [run for run in runs if run["reason"] in REPORTED_ENDS]
            if ended:
                # the DB recorded the report: it must be the report's own run
                if not any((run["frame"], run["host"]) == (rep["frame"], rep["host"])
                           and rep["epoch"] in (None, run["epoch"]) for run in ended):
                    run = ended[0]
                    self._ack_violation(rep, "ack_mismatch",
                                        f"its run is frame {run['frame']} on {run['host']} "
                                        f"epoch {run['epoch']}")
                continue
            # the DB does not reflect the report: only a failover that came
            # soon after it may have lost it
            later = [w for w in failover_walls if rep["wall"] < w <= rep["wall"] + LOSS_WINDOW]
            if later:
                lost += 1
                lost_gap = max(lost_gap, later[0] - rep["wall"])
            elif any(on <= rep["wall"] <= off for on, off in async_cuts):
                lost += 1
            elif runs:
                self._ack_violation(rep, "ack_mismatch",
                                    f"its run ended {runs[0]['reason'] or 'not at all'}")
            else:
                self._ack_violation(rep, "ack_without_run", "the DB has no run of it")
        self.stats.update(answers=dict(sorted(answers.items())),
                          stale_answers=answers["stale"], duplicate_answers=answers["duplicate"],
                          acks_lost_in_failover=lost,
                          acks_lost_in_failover_max_gap_seconds=round(lost_gap, 3))

    def _ack_violation(self, rep, kind, why):
        self.violate("C2_fencing", kind,
                     f"{rep['where']}: {rep['host']} got answer=accepted for proc {rep['proc']} "
                     f"frame {rep['frame']} epoch {rep['epoch']}, but {why}",
                     frame=rep["frame"], proc=rep["proc"], host=rep["host"])

    def c3_no_loss(self):
        c = "C3_no_loss"
        frames = {fr["id"]: fr for fr in self.final["frames"]}
        lost = lost_publishes = held = 0
        for fid, job in sorted(set(self.submitted)):
            fr = frames.get(fid)
            if fr is None and job in self.lost_jobs:
                lost += 1
            elif fr is None:
                self.violate(c, "frame_missing",
                             f"frame {fid} of job {job} was submitted but is not in the DB",
                             frame=fid)
            elif fr["state"] == "depend" and self.held(fid):
                held += 1
            elif fr["state"] not in TERMINAL:
                self.violate(c, "frame_not_terminal",
                             f"frame {fid} ended the run {fr['state']}", frame=fid)

        for fid, fr in sorted(frames.items()):
            if fr["state"] != "succeeded":
                continue
            done = [run for run in self.runs_by_frame.get(fid, ())
                    if run["reason"] == "completed" and run["end_state"] == "succeeded"]
            if len(done) != 1:
                self.violate(c, "completed_runs",
                             f"succeeded frame {fid} has {len(done)} completed runs that "
                             f"succeeded ({[run['proc'] for run in done]})",
                             frame=fid, procs=[run["proc"] for run in done])
                continue
            proc = done[0]["proc"]
            outs = self.outputs_by_frame.get(fid, [])
            if not outs and self.publish_lost_in_failover(proc):
                lost_publishes += 1
                continue
            if not outs:
                self.violate(c, "output_missing", f"succeeded frame {fid} has no output",
                             frame=fid, proc=proc)
                continue
            if len(outs) > 1:
                self.violate(c, "output_duplicate",
                             f"frame {fid} has {len(outs)} output rows", frame=fid)
            out = outs[-1]
            if out["proc"] != proc and self.publish_lost_in_failover(proc):
                # an earlier render's output stays where this one's was lost
                lost_publishes += 1
                continue
            if out["proc"] != proc:
                self.violate(c, "output_proc",
                             f"frame {fid}: output is proc {out['proc']}'s, the completed "
                             f"run is {proc}'s", frame=fid, proc=proc, output_proc=out["proc"])
                continue
            lines = [ln for ln in out["content"].splitlines() if ln.strip()]
            foreign = [ln for ln in lines
                       if not re.fullmatch(rf"proc={proc} chunk=\d+", ln.strip())]
            if foreign or not lines:
                self.violate(c, "output_content",
                             f"frame {fid}: output of proc {proc} has "
                             + (f"{len(foreign)} foreign lines, first {foreign[0]!r:.80}"
                                if foreign else "no chunks"),
                             frame=fid, proc=proc)
        self.stats["frames_lost_with_submit"] = lost
        self.stats["frames_held_by_prerequisites"] = held
        self.stats["publishes_lost_in_failover"] = lost_publishes

    def held(self, fid):
        """Is task fid rightly left 'depend': a prerequisite of it did not
        end succeeded or eaten (a dead one holds it)?"""
        return any(self.frames[p]["state"] not in ENDED for p in self.prereqs.get(fid, ()))

    def publish_lost_in_failover(self, proc):
        """Did proc's render publish (its commit returned) shortly before a
        failover that lost the commit?  Asynchronous replication may lose the
        old primary's last commits; a completion sent after the promotion
        then lands on a server that never saw the publish.  The render must
        have logged a successful publish, no committed publish of proc may be
        in the final DB, and a failover must have begun no more than
        LOSS_WINDOW seconds after that publish and ended after it."""
        published = [ev["t"] for ev in self.render_events
                     if ev["ev"] == "publish" and ev["proc"] == proc and ev["result"] == "published"]
        if not published or any(p["proc"] == proc for p in self.final["publishes"]):
            return False
        t = max(published)
        return any(on - LOSS_WINDOW <= t <= off for on, off in self.failover_windows)

    def c4_caps(self):
        c = "C4_caps"
        caps = self.final["caps"]
        uncapped = set()
        sv_total = sv_allowed = 0
        for ev in self.render_events:
            if ev["ev"] != "slot_violation":
                continue
            sv_total += 1
            if any(ev["group"] in r.groups and r.proc != ev["proc"]
                   and self.zombie_at(r, ev["t"]) and ev["t"] < r.end
                   for r in self.renders.values()):
                sv_allowed += 1
                continue
            self.violate(c, "slot_violation",
                         f"render {ev['proc']} on {ev['host']} found no free slot in "
                         f"{ev['group']} at t={ev['t']:.3f}",
                         group=ev["group"], proc=ev["proc"])

        def sweep(kind, what, intervals):
            # intervals: group -> [(begin, end, id)], end exclusive
            for group, ivs in sorted(intervals.items()):
                if group not in caps:
                    uncapped.add(group)
                    continue
                cap = caps[group]
                points = sorted([(b, 1, i) for b, e, i in ivs] + [(e, 0, i) for b, e, i in ivs
                                                                   if e != INF])
                live, over, peak = set(), None, None
                for t, is_start, ident in points:
                    (live.add if is_start else live.discard)(ident)
                    if len(live) > cap:
                        if over is None:
                            over = t
                        if peak is None or len(live) > len(peak):
                            peak = sorted(live)
                    elif over is not None:
                        self._cap_violation(c, kind, what, group, cap, over, t, peak)
                        over, peak = None, None
                if over is not None:
                    self._cap_violation(c, kind, what, group, cap, over, INF, peak)

        by_group = collections.defaultdict(list)
        for r in self.renders.values():
            end = r.cover.on if r.cover is not None else r.end_or_inf
            for g in r.groups:
                by_group[g].append((r.start, end, r.proc))
        sweep("render_cap", "live renders (monotonic t)", by_group)

        by_group = collections.defaultdict(list)
        for run in self.final["runs"]:
            end = INF if run["ended_at"] is None else run["ended_at"]
            for g in self.jobs[run["job"]]:
                by_group[g].append((run["started_at"], end, run["proc"]))
        sweep("run_cap", "DB runs (wall)", by_group)

        self.stats.update(slot_violations=sv_total, slot_violations_allowed=sv_allowed,
                          uncapped_groups=sorted(uncapped))

    def _cap_violation(self, c, kind, what, group, cap, begin, end, peak):
        self.violate(c, kind,
                     f"{group}: {len(peak)} {what} > cap {cap} from {begin:.3f} to {fmt_t(end)}",
                     group=group, cap=cap, peak=len(peak), procs=peak)

    def c5_liveness(self):
        c = "C5_liveness"
        p = self.params
        if not self.quiet["all_terminal"]:
            self.violate(c, "not_quiet", "the harness saw non-terminal frames at the end "
                         "of quiescence")
        for proc in self.final["procs"]:
            self.violate(c, "live_proc",
                         f"proc {proc['id']} of frame {proc['frame']} on {proc['host']} is "
                         f"still booked ({proc.get('state')})",
                         frame=proc["frame"], proc=proc["id"])
        backlog, slots = self.heal["backlog"], self.heal["slots"]
        if backlog > 0 and slots <= 0:
            raise InputError(f"heal event: backlog {backlog} with {slots} slots")
        waves = math.ceil(backlog / slots) if backlog > 0 else 0
        # tasks that wait for each other run one after the other, whatever
        # the slots: a render and a worker poll (a job's finish) per link
        depth = self.heal.get("depth", 0)
        bound = (p["ttl"] * (1 + p["drift"]) + p["margin"] + p["quarantine"] + p["poll"]
                 + p["render_max"] + waves * p["render_max"]
                 + depth * (p["render_max"] + p["poll"]) + RECOVERY_SLACK
                 + (p.get("misbehave_runs", 0) + depth)
                 * (p["render_max"] + p.get("delay_max", 0) + p["poll"])
                 + ((p.get("hang_runs", 0) + depth) * (p.get("timeout_max", 0) + p["poll"]
                                                       + p["quarantine"] + ROUND_SLACK)
                    if p.get("hang_runs", 0) else 0))
        ends = [run["ended_at"] for run in self.final["runs"] if run["ended_at"] is not None]
        # DB wall -> monotonic through the heal event's (wall, t) pair
        last_end_t = self.heal["t"] + (max(ends) - self.heal["wall"]) if ends else self.heal["t"]
        recovery = max(0.0, last_end_t - self.heal["t"])
        if recovery > bound:
            self.violate(c, "slow_recovery",
                         f"the last run ended {recovery:.1f} s after heal, bound {bound:.1f} s "
                         f"(backlog {backlog}, {slots} slots)",
                         seconds=round(recovery, 3), bound=round(bound, 3))
        self.stats.update(recovery_seconds=round(recovery, 3),
                          recovery_bound_seconds=round(bound, 3),
                          backlog_at_heal=backlog, slots=slots, depth_at_heal=depth)
        self._passed_over()

    def _waiting_intervals(self):
        """frame -> [(from, to)] in DB wall seconds: from its submit event
        until its first run started, and from the end of each run that left
        it waiting (its commit, if later) until the next run started; INF
        if none did.  An interval may be empty: the harness logs a submit
        after its commit, and a frame may be booked before that."""
        submits = collections.defaultdict(list)
        for e in self.harness:
            # a lost submission's frames never existed on the final primary
            # (which may have given their ids to other frames since)
            if e["ev"] == "submit" and e["job"] not in self.lost_jobs:
                for fid in e["frames"]:
                    submits[fid].append(e["wall"])
        intervals = {}
        for fid in set(submits) | set(self.runs_by_frame):
            runs = sorted(self.runs_by_frame.get(fid, ()), key=lambda run: run["started_at"])
            starts = [run["started_at"] for run in runs[1:]] + [INF]
            # a task with prerequisites waits from when the last was met
            ready = self.ready_at(fid)
            spans = [(max(w, ready), runs[0]["started_at"] if runs else INF)
                     for w in submits.get(fid, ()) if ready != INF]
            for run, next_start in zip(runs, starts):
                if run["ended_at"] is not None and run["end_state"] == "waiting":
                    # waiting for other sessions once the release has committed
                    committed = run.get("committed_at")
                    begin = run["ended_at"] if committed is None else max(run["ended_at"], committed)
                    # a delayed frame once the worker has had a round after its time
                    delay = self.delay_after.get(run["proc"], 0)
                    if delay > 0:
                        begin = max(begin, run["ended_at"] + delay + self.params["poll"] + DUE_SLACK)
                    spans.append((begin, next_start))
            intervals[fid] = spans
        return intervals

    def _passed_over(self):
        c = "C5_liveness"
        reserves = self.final.get("reserves")
        self.stats["reserves_recorded"] = reserves is not None
        if reserves is None:
            return
        caps = self.final["caps"]
        runs = [(run["started_at"], INF if run["ended_at"] is None else run["ended_at"],
                 self.jobs[run["job"]]) for run in self.final["runs"]]
        waiting = self._waiting_intervals()
        empty = passed = lost = 0
        for call in sorted(reserves, key=lambda r: r["at"]):
            if call["booked"] > 0 or not call.get("up", True) or not call.get("room", True):
                continue
            empty += 1
            # a call can last (a bounded lock wait: a second), and what
            # other calls book meanwhile can take its frame or fill a cap
            at, until = call["at"], max(call["at"], call.get("end", call["at"])) + CLAIM_SLACK
            load = collections.Counter(g for begin, end, groups in runs
                                       if begin < until and end > at for g in groups)
            full = {g for g, n in load.items() if g in caps and n >= caps[g]}
            for fid, spans in sorted(waiting.items()):
                job = self.job_of_frame.get(fid)
                if job is None or full.intersection(self.jobs.get(job, ())):
                    continue
                if any(b <= at - WAIT_SLACK and e > until for b, e in spans):
                    if any(on - LOSS_WINDOW <= at <= off for on, off in self.failover_walls):
                        lost += 1
                        break
                    passed += 1
                    self.violate(c, "passed_over",
                                 f"reserve() of {call['host']} at {call['at']:.3f} booked "
                                 f"nothing while frame {fid} had been waiting since before "
                                 f"it, within every cap",
                                 frame=fid, host=call["host"])
                    break
        self.stats.update(reserves=len(reserves), reserves_empty=empty,
                          reserves_passed_over=passed, reserves_lost_in_failover=lost)

    def c6_tokens(self):
        c = "C6_tokens"
        for proc, runs in self.runs_by_proc.items():
            if len(runs) > 1:
                self.violate(c, "proc_reused",
                             f"proc {proc} has {len(runs)} runs (frames "
                             f"{[run['frame'] for run in runs]})", proc=proc)
        for ev in self.render_dups:
            self.violate(c, "proc_reused",
                         f"two renders started with proc {ev['proc']} (frame {ev['frame']} on "
                         f"{ev['host']} at t={ev['t']:.3f})", frame=ev["frame"], proc=ev["proc"])
        unknown = 0
        for r in self.renders.values():
            runs = self.runs_by_proc.get(r.proc)
            if not runs:
                unknown += 1
                # a booking a failover lost: the render started from it
                # shortly before that failover began
                if not any(on - LOSS_WINDOW <= r.start <= off for on, off in self.failover_windows):
                    self.violate(c, "render_without_run",
                                 f"render {r.proc} of frame {r.frame} on {r.host} has no DB "
                                 "run, and no failover soon after its start could have lost it",
                                 frame=r.frame, proc=r.proc)
            elif (runs[0]["frame"], runs[0]["host"]) != (r.frame, r.host):
                self.violate(c, "proc_reused",
                             f"render {r.proc} ran frame {r.frame} on {r.host}, its DB run is "
                             f"frame {runs[0]['frame']} on {runs[0]['host']}",
                             frame=r.frame, proc=r.proc)
        self.stats["renders_unknown_to_db"] = unknown

    def c8_dependencies(self):
        c = "C8_dependencies"
        self.stats["depends_recorded"] = self.depends is not None
        if self.depends is None:
            return
        early = checked = unknown = lost = 0
        for r in sorted(self.renders.values(), key=lambda r: r.start):
            runs = self.runs_by_proc.get(r.proc)
            if not runs and any(on - LOSS_WINDOW <= r.start <= off
                                for on, off in self.failover_windows):
                lost += 1       # its booking was lost (C6), and what it followed may be
                continue
            fid = runs[0]["frame"] if runs else r.frame
            pre = self.prereqs.get(fid)
            if not pre:
                continue
            checked += 1
            start = self.to_wall(r.start)
            unknown += sum(self.task_end[p] is None for p in pre)
            late = sorted((self.task_end[p], p) for p in pre
                          if self.task_end[p] is not None and start < self.task_end[p] - ORDER_SLACK)
            if late:
                early += 1
                end, p = late[-1]
                self.violate(c, "ran_before_prerequisites",
                             f"task {fid}: render {r.proc} on {r.host} started at {start:.3f} "
                             f"(wall), before its prerequisite task {p} ({pre[p]} dependency) "
                             f"ended {self.frames[p]['state']} at {fmt_t(end)}"
                             + (f" ({len(late) - 1} more prerequisites ended after it)"
                                if len(late) > 1 else ""),
                             frame=fid, proc=r.proc, prerequisite=p)
        cut = 0
        for fid, fr in sorted(self.frames.items()):
            if fr["state"] != "depend" or self.held(fid):
                continue
            if not self.quiet["all_terminal"]:
                cut += 1        # the run was cut short (not_quiet says so)
                continue
            self.violate(c, "depend_left",
                         f"task {fid} ended the run 'depend', but its "
                         f"{len(self.prereqs.get(fid, ()))} prerequisite tasks all ended "
                         "succeeded or eaten", frame=fid)
        kinds = collections.Counter(d["kind"] for d in self.depends)
        self.stats.update(
            depends_by_kind=dict(sorted(kinds.items())),
            tasks_with_prerequisites=len(self.prereqs),
            chunked_tasks=sum(fr.get("size", 1) > 1 for fr in self.frames.values()),
            renders_checked_for_prerequisites=checked,
            renders_before_prerequisites=early,
            renders_lost_in_failover_unchecked=lost,
            prerequisite_ends_unknown=unknown,
            depend_left_run_cut_short=cut)

    def c9_delays(self):
        c = "C9_delays"
        self.stats.update(delays_recorded=self.final.get("layers") is not None,
                          requeued_runs=self.requeued_runs, delayed_runs=len(self.delay_after))
        for fid, runs in sorted(self.runs_by_frame.items()):
            runs = sorted(runs, key=lambda run: run["started_at"])
            for run, after in zip(runs, runs[1:]):
                delay = self.delay_after.get(run["proc"], 0)
                if delay > 0 and after["started_at"] < run["ended_at"] + delay - DELAY_EPS:
                    self.violate(c, "booked_early",
                                 f"frame {fid} was booked again (proc {after['proc']}) "
                                 f"{after['started_at'] - run['ended_at']:.3f} s after run "
                                 f"{run['proc']} ended with {run['exit_status']}/"
                                 f"{run['exit_signal']}, before its {delay} s delay ended",
                                 frame=fid, proc=after["proc"])

    def _fault_windows(self):
        """Every fault as (kind, target, on t, off t, on wall, off wall);
        one never turned off lasts until the heal."""
        ons, offs = {}, {}
        for e in self.harness:
            if e["ev"] == "fault_on":
                ons[e["id"]] = e
            elif e["ev"] == "fault_off" and e["id"] not in offs:
                offs[e["id"]] = e
        return [(on["kind"], on["target"], on["t"], offs.get(i, self.heal)["t"],
                 on["wall"], offs.get(i, self.heal)["wall"]) for i, on in ons.items()]

    def _timeout_bound(self, deadline, host, windows, wall):
        """The latest a task with this deadline may end (C10), and how many
        faults moved it; wall: the times are DB wall seconds, else
        monotonic."""
        p = self.params
        bound = deadline + p["quarantine"] + p["poll"] + ROUND_SLACK
        used = set()
        grew = True
        while grew:
            grew = False
            for i, (kind, target, on_t, off_t, on_w, off_w) in enumerate(windows):
                on, off = (on_w, off_w) if wall else (on_t, off_t)
                if i in used or off < deadline or on > bound:
                    continue
                if kind in DB_RESTARTS:
                    # a server (or its worker) down, then in quarantine;
                    # the agent's reports failed meanwhile
                    extra = (off - on) + p["quarantine"] + p["poll"] + REPORT_BACKOFF
                elif kind == "terminate_backends":
                    # the agent reconnects; a report in flight waits 1 s
                    extra = p["poll"] + 1.0
                elif kind in HOST_DELAYS and target == host:
                    extra = (off - on) + REPORT_BACKOFF
                else:
                    continue
                used.add(i)
                bound += extra
                grew = True
        return bound, len(used)

    def c10_timeouts(self):
        c = "C10_timeouts"
        layers = self.final.get("layers") or []
        recorded = any("timeout" in row for row in layers)
        hung = {}
        for ev in self.render_events:
            if ev["ev"] == "hang":
                hung.setdefault(ev["proc"], ev["mode"])
        self.stats.update(timeouts_recorded=recorded, timed_runs=0,
                          timed_runs_extended_by_faults=0, timeout_overrun_max_seconds=0.0,
                          hung_renders=dict(sorted(collections.Counter(hung.values()).items())),
                          hung_ended_by={})
        if not recorded:
            return
        timeout = {row["id"]: row.get("timeout") for row in layers}
        layer_of = {fr["id"]: fr["layer"] for fr in self.final["frames"]}
        windows = self._fault_windows()
        timed = extended = 0
        worst = 0.0
        for run in sorted(self.final["runs"], key=lambda run: run["started_at"]):
            t = timeout.get(layer_of.get(run["frame"]))
            if t is None or run["ended_at"] is None:
                continue
            timed += 1
            deadline = run["started_at"] + t
            bound, faults = self._timeout_bound(deadline, run["host"], windows, wall=True)
            if faults:
                extended += 1
            else:
                worst = max(worst, run["ended_at"] - deadline)
            if run["ended_at"] > bound:
                self.violate(c, "timeout_overrun",
                             f"frame {run['frame']}: run {run['proc']} on {run['host']} ended "
                             f"{run['ended_at'] - run['started_at']:.3f} s after its booking "
                             f"({run['reason']}), past its timeout {t} s by "
                             f"{run['ended_at'] - deadline:.3f} s; bound "
                             f"{bound - deadline:.3f} s ({faults} faults in the way)",
                             frame=run["frame"], proc=run["proc"])
        for r in sorted(self.renders.values(), key=lambda r: r.start):
            t = timeout.get(layer_of.get(r.frame))
            if t is None or r.end is None:
                continue
            bound, faults = self._timeout_bound(r.start + t, r.host, windows, wall=False)
            if r.end > bound:
                self.violate(c, "render_overrun",
                             f"frame {r.frame}: render {r.proc} on {r.host} lived "
                             f"{r.end - r.start:.3f} s, past its timeout {t} s by "
                             f"{r.end - r.start - t:.3f} s; bound {bound - r.start - t:.3f} s "
                             f"({faults} faults in the way)",
                             frame=r.frame, proc=r.proc)
        ended_by = collections.Counter()
        for proc, mode in sorted(hung.items()):
            r = self.renders.get(proc)
            runs = self.runs_by_proc.get(proc, [])
            if r is None or r.end is None:
                self.violate(c, "hung_not_ended",
                             f"render {proc} ({mode}) was never seen dead",
                             frame=r.frame if r else None, proc=proc)
                continue
            for run in runs:
                if run["ended_at"] is None:
                    self.violate(c, "hung_not_ended",
                                 f"frame {run['frame']}: the run of render {proc} ({mode}) "
                                 "never ended", frame=run["frame"], proc=proc)
                else:
                    ended_by[run["reason"]] += 1
        self.stats.update(timed_runs=timed, timed_runs_extended_by_faults=extended,
                          timeout_overrun_max_seconds=round(worst, 3),
                          hung_ended_by=dict(sorted(ended_by.items())))

    def c11_batches(self):
        c = "C11_batches"
        failover_walls = sorted(fo["wall"] for fo in self.final["failovers"])

        def lost_in_failover(batch):
            return any(batch["wall"] < w <= batch["wall"] + LOSS_WINDOW for w in failover_walls)

        matched = collections.defaultdict(list)     # proc -> the batches that matched its run
        lost = 0
        answers = collections.Counter()
        for b in self.batches:
            procs, where = b["procs"], f"{b['where']}: {b['host']}"
            answers.update(b["answers"])
            if len(procs) != len(b["answers"]) or len(procs) != b["reports"]:
                self.violate(c, "batch_answers",
                             f"{where}: a batch of {b['reports']} reports has {len(procs)} "
                             f"procs and {len(b['answers'])} answers", host=b["host"])
                continue
            for proc, n in sorted(collections.Counter(procs).items()):
                if n > 1:
                    self.violate(c, "batch_proc_twice", f"{where}: proc {proc} is {n} times "
                                 "in one batch", proc=proc, host=b["host"])
            commits = {}
            for proc, answer in zip(procs, b["answers"]):
                if answer != "accepted":
                    continue
                runs = [run for run in self.runs_by_proc.get(proc, ())
                        if run["reason"] in REPORTED_ENDS and run["host"] == b["host"]
                        and run["epoch"] == b["epoch"]]
                if len(runs) != 1:
                    if not runs and lost_in_failover(b):
                        lost += 1
                        continue
                    seen = ", ".join(f"{run['reason'] or 'live'} on {run['host']} epoch "
                                     f"{run['epoch']}" for run in self.runs_by_proc.get(proc, ()))
                    self.violate(c, "batch_ack_unmatched",
                                 f"{where}: proc {proc} accepted in a batch of epoch "
                                 f"{b['epoch']}, but {len(runs)} runs ended for it "
                                 f"(its runs: {seen or 'none'})", proc=proc, host=b["host"],
                                 frame=next((run["frame"] for run in
                                             self.runs_by_proc.get(proc, ())), None))
                    continue
                matched[proc].append(b)
                if runs[0].get("committed_at") is not None:
                    commits[proc] = runs[0]["committed_at"]
            if len(set(commits.values())) > 1:
                self.violate(c, "batch_split",
                             f"{where}: the runs of one batch ended in "
                             f"{len(set(commits.values()))} transactions (committed at "
                             + ", ".join(f"{p}: {t:.6f}" for p, t in sorted(commits.items()))
                             + ")", procs=sorted(commits), host=b["host"])
        for proc, bs in sorted(matched.items()):
            if len(bs) > 1 and not all(lost_in_failover(b) for b in bs[:-1]):
                run = next(run for run in self.runs_by_proc[proc] if run["reason"] in REPORTED_ENDS)
                self.violate(c, "batch_ack_twice",
                             f"proc {proc}: its run was accepted {len(bs)} times, in "
                             + ", ".join(b["where"] for b in bs), proc=proc, frame=run["frame"])
        self.stats.update(
            batches=len(self.batches),
            batch_reports=sum(len(b["procs"]) for b in self.batches),
            batch_largest=max((len(b["procs"]) for b in self.batches), default=0),
            batches_with_booking=sum(b["booked"] is not None for b in self.batches),
            batch_answers=dict(sorted(answers.items())),
            batch_acks_lost_in_failover=lost)

    def c7_check(self):
        for row in self.final["check"]:
            self.violate("C7_check", "check_row",
                         f"frameq.check(): {row.get('invariant')}: {row.get('detail')}",
                         invariant=row.get("invariant"))

    # -- verdict --------------------------------------------------------------

    def run(self):
        self.c1_exclusivity()
        self.c2_fencing()
        self.c3_no_loss()
        self.c4_caps()
        self.c5_liveness()
        self.c6_tokens()
        self.c7_check()
        self.c8_dependencies()
        self.c9_delays()
        self.c10_timeouts()
        self.c11_batches()
        f = self.final
        publish_results = collections.Counter(
            ev["result"] for ev in self.render_events if ev["ev"] == "publish")
        self.stats.update(
            submitted_frames=len({fid for fid, _ in self.submitted}),
            frames_by_state=dict(sorted(collections.Counter(fr["state"] for fr in f["frames"]).items())),
            runs_by_reason=dict(sorted(collections.Counter(
                run["reason"] or "live" for run in f["runs"]).items())),
            renders_started=len(self.renders),
            renders_never_seen_dead=sum(r.end is None for r in self.renders.values()),
            dead_events_late=self.late_dead,
            dead_without_start=self.dead_without_start,
            render_publishes=dict(sorted(publish_results.items())),
            faults_by_kind=dict(sorted(self.faults.items())),
            faults_never_off=self.faults_never_off,
            fault_off_unmatched=self.unmatched_fault_off,
            failovers=len(f["failovers"]),
            harness_events_ignored=dict(sorted(self.ignored_harness.items())),
            violations_by_check={c: sum(v["check"] == c for v in self.violations) for c in CHECKS},
        )
        return {"ok": not self.violations, "violations": self.violations,
                "stats": dict(sorted(self.stats.items()))}


def check_outdir(outdir):
    """Check one harness OUTDIR; return the verdict dict (raises InputError)."""
    return Checker(outdir).run()


def summary(verdict):
    s = verdict["stats"]
    extra = {
        "C1_exclusivity": f"renders {s['renders_started']}, witness violations "
                          f"{s['witness_violations']} ({s['witness_violations_allowed']} allowed), "
                          f"freeze overlaps allowed {s['freeze_overlaps_allowed']}",
        "C2_fencing": f"stale answers {s['stale_answers']}, duplicate {s['duplicate_answers']}, "
                      f"acks lost in failover {s['acks_lost_in_failover']}",
        "C3_no_loss": f"submitted {s['submitted_frames']}, frames {s['frames_by_state']}",
        "C4_caps": f"slot violations {s['slot_violations']} "
                   f"({s['slot_violations_allowed']} allowed)",
        "C5_liveness": f"recovery {s['recovery_seconds']:.1f} s of "
                       f"{s['recovery_bound_seconds']:.1f} s, "
                       + (f"reserve calls {s['reserves']} ({s['reserves_empty']} empty with "
                          f"the host up and room, {s['reserves_lost_in_failover']} excused "
                          "by a failover)" if s["reserves_recorded"]
                          else "reserve calls not recorded"),
        "C6_tokens": f"runs {sum(s['runs_by_reason'].values())}, "
                     f"renders unknown to the DB {s['renders_unknown_to_db']}",
        "C7_check": "",
        "C8_dependencies": (f"tasks with prerequisites {s['tasks_with_prerequisites']}, "
                            f"chunked tasks {s['chunked_tasks']}, renders checked "
                            f"{s['renders_checked_for_prerequisites']}"
                            if s["depends_recorded"] else "dependencies not recorded"),
        "C9_delays": (f"requeued runs {s['requeued_runs']}, runs that delayed their frame "
                      f"{s['delayed_runs']}" if s["delays_recorded"] else "delays not recorded"),
        "C11_batches": (f"batches {s['batches']} ({s['batch_reports']} reports, at most "
                        f"{s['batch_largest']} in one, {s['batches_with_booking']} with a "
                        f"booking), answers {s['batch_answers']}"),
        "C10_timeouts": (f"timed runs {s['timed_runs']} ({s['timed_runs_extended_by_faults']} "
                         f"with faults in the way), most past a timeout "
                         f"{s['timeout_overrun_max_seconds']:.2f} s, hung renders "
                         f"{s['hung_renders']} ended by {s['hung_ended_by']}"
                         if s["timeouts_recorded"] else "timeouts not recorded"),
    }
    lines = []
    for c in CHECKS:
        n = s["violations_by_check"][c]
        lines.append(f"{c:15} {'FAIL' if n else 'ok  '} {n:3} violations  {extra[c]}".rstrip())
    shown = verdict["violations"][:20]
    for v in shown:
        lines.append(f"  {v['check']} {v['kind']}: {v['detail']}")
    if len(verdict["violations"]) > len(shown):
        lines.append(f"  ... {len(verdict['violations']) - len(shown)} more in verdict.json")
    lines.append(f"faults {s['faults_by_kind']}")
    return "\n".join(lines)


def main(argv):
    if len(argv) != 2:
        print(f"usage: {argv[0]} OUTDIR", file=sys.stderr)
        return 2
    outdir = argv[1]
    out = os.path.join(outdir, "verdict.json")
    try:
        verdict = check_outdir(outdir)
    except (InputError, OSError, UnicodeDecodeError) as e:
        print(f"check: bad input: {e}", file=sys.stderr)
        if os.path.isdir(outdir):
            with open(out, "w", encoding="utf-8") as f:
                json.dump({"ok": False, "error": str(e), "violations": [], "stats": {}}, f,
                          indent=1)
        return 2
    with open(out, "w", encoding="utf-8") as f:
        json.dump(verdict, f, indent=1)
        f.write("\n")
    print(summary(verdict))
    n = len(verdict["violations"])
    print(f"verdict: {'OK' if verdict['ok'] else 'FAIL'}, {n} violation{'s' * (n != 1)} "
          f"({out})")
    return 0 if verdict["ok"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
