#!/usr/bin/env python3
"""Self-test of test/fault/check.py: synthetic harness histories in, verdicts out.

    python3 test/fault/test_check.py

Each case builds an OUTDIR in a temporary directory, runs the checker on it
and asserts it finds exactly the expected violations, as a multiset of
(check, kind, group-or-frame). A clean history must pass; every other case
breaks one thing. Prints one line per case and then "N passed, N failed";
exits 1 if anything failed.

The synthetic farm: hosts h1..h3; job 1 (frames 1-3) in groups job-1,
folder-1, show-alpha; job 2 (frames 4-6) also in limit-l1. Monotonic time
starts at 1000; wall time is monotonic time + WALL on every clock, so the
DB, the harness and the agents agree.
"""

import collections
import datetime
import json
import os
import subprocess
import sys
import tempfile
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.dont_write_bytecode = True     # leave no __pycache__ in the tree
import check  # noqa: E402

WALL = 1_780_000_000.0 - 1000.0
JOBS = {1: ["job-1", "folder-1", "show-alpha"],
        2: ["job-2", "folder-1", "show-alpha", "limit-l1"]}
CAPS = {"job-1": 2, "job-2": 2, "folder-1": 3, "show-alpha": 4, "limit-l1": 2}
HOSTS = ("h1", "h2", "h3")


def wall(t):
    return t + WALL


class Farm:
    """A synthetic OUTDIR under construction."""

    def __init__(self):
        self.renders, self.harness = [], []
        self.logs = collections.defaultdict(list)
        self.frames = {}
        self.runs, self.procs, self.publishes, self.check, self.failovers = [], [], [], [], []
        self.outputs = {}
        self.reserves = None       # final.json's optional reserve() calls
        self.depends = None        # final.json's optional dependencies
        self.layers = None         # final.json's optional delays in force, per layer
        self.caps = dict(CAPS)
        self.job_finish = None     # job -> DB wall of its finish, if recorded
        self.params = {"seed": 7, "ttl": 3.0, "drift": 0.05, "margin": 1.0, "render_max": 3.0,
                       "freeze_k": 5.0, "quarantine": 4.15, "poll": 1.0}
        self.next_fault = 1

    # -- events ---------------------------------------------------------------

    def h(self, t, ev, **kw):
        self.harness.append({"ev": ev, "t": t, "wall": wall(t), **kw})

    def r(self, t, ev, proc, **kw):
        self.renders.append({"ev": ev, "t": t, "proc": proc, **kw})

    def log(self, host, w, text):
        stamp = datetime.datetime.fromtimestamp(w, datetime.timezone.utc)
        self.logs[host].append(stamp.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z " + text)

    def report(self, host, w, proc, frame, answer, epoch=1, status=0, signal=0, extra=""):
        self.log(host, w, f"reported proc={proc} frame={frame} epoch={epoch} "
                          f"exit_status={status} exit_signal={signal} answer={answer}{extra}")

    def batch(self, host, w, procs, answers, epoch=1, booked=0, reports=None):
        """An agent's batch line: one transaction of its reports."""
        self.log(host, w, f"batch epoch={epoch} reports={len(procs) if reports is None else reports} "
                          f"procs={','.join(map(str, procs))} answers={','.join(answers)} "
                          f"booked={booked}")

    def committed(self, proc, t):
        """The transaction that ended proc's run committed at monotonic t."""
        for run in self.runs:
            if run["proc"] == proc:
                run["committed_at"] = wall(t)

    def fault(self, t_on, t_off, kind, target=None):
        n, self.next_fault = self.next_fault, self.next_fault + 1
        self.h(t_on, "fault_on", id=n, kind=kind, target=target)
        self.h(t_off, "fault_off", id=n)
        return n

    def drop_fault(self, n):
        self.harness = [e for e in self.harness
                        if not (e["ev"] in ("fault_on", "fault_off") and e["id"] == n)]

    def submit(self, t, job, frames):
        self.h(t, "submit", job=job, frames=frames)
        for fid in frames:
            self.frames[fid] = {"id": fid, "job": job, "layer": job * 10, "number": fid,
                                "state": "succeeded", "retries": 0, "attempts": 0}

    def attempt(self, frame, proc, host, start, end, *, reason="completed",
                end_state="succeeded", death="exit", db=None, in_db=True, publish=True,
                output=True, accepted=None, signal=0, epoch=1, status=None):
        """One attempt of a frame: the render lives [start, end] (monotonic);
        its DB run is db=(begin, end) in monotonic seconds, by default
        [start - 0.2, end + 0.03]; death is "exit" (exit + dead events),
        "killed" (dead only) or None (never seen dead); its exit status is
        status, or 128 + signal for a signal, else 0."""
        if status is None:
            status = 128 + signal if signal else 0
        job = self.frames[frame]["job"]
        self.frames[frame]["attempts"] += 1
        pid = 1000 + proc % 30000
        self.r(start, "start", proc, frame=frame, job=job, host=host, pid=pid,
               groups=JOBS[job])
        if publish:
            self.r(end - 0.2, "publish", proc, frame=frame, result="published")
        if death == "exit":
            self.r(end - 0.01, "exit", proc, code=status)
        if death is not None:
            self.h(end, "dead", proc=proc, pid=pid, late=False)
        db_begin, db_end = db or (start - 0.2, end + 0.03)
        if accepted is None:
            accepted = reason in ("completed", "killed")
        if accepted:
            self.report(host, wall(db_end) + 0.01, proc, frame, "accepted", epoch=epoch,
                        status=status, signal=signal)
        if not in_db:
            return
        self.runs.append({"proc": proc, "frame": frame, "job": job, "host": host,
                          "epoch": epoch, "started_at": wall(db_begin),
                          "ended_at": None if db_end is None else wall(db_end),
                          "exit_status": status, "exit_signal": signal,
                          "reason": reason, "end_state": end_state})
        if publish:
            self.publishes.append({"frame": frame, "proc": proc, "at": wall(db_end - 0.13)})
        if output:
            self.outputs[frame] = {"frame": frame, "proc": proc,
                                   "content": f"proc={proc} chunk=0\nproc={proc} chunk=1\n"}

    def drop(self, proc):
        """Remove every trace of one proc."""
        self.renders = [e for e in self.renders if e["proc"] != proc]
        self.harness = [e for e in self.harness if e.get("proc") != proc]
        self.runs = [run for run in self.runs if run["proc"] != proc]
        self.publishes = [p for p in self.publishes if p["proc"] != proc]
        self.outputs = {k: v for k, v in self.outputs.items() if v["proc"] != proc}
        for host in self.logs:
            self.logs[host] = [ln for ln in self.logs[host] if f" proc={proc} " not in ln]

    def event(self, where, ev, **match):
        """The one event of renders or harness with ev and the given fields."""
        found = [e for e in getattr(self, where)
                 if e["ev"] == ev and all(e.get(k) == v for k, v in match.items())]
        assert len(found) == 1, (where, ev, match, found)
        return found[0]

    # -- output ---------------------------------------------------------------

    def write(self, outdir):
        os.makedirs(os.path.join(outdir, "history"), exist_ok=True)
        os.makedirs(os.path.join(outdir, "agents"), exist_ok=True)
        for name, events in (("renders", self.renders), ("harness", self.harness)):
            with open(os.path.join(outdir, "history", name + ".jsonl"), "w") as f:
                for e in sorted(events, key=lambda e: e["t"]):
                    f.write(json.dumps(e) + "\n")
        for host in HOSTS:
            with open(os.path.join(outdir, "agents", host + ".log"), "w") as f:
                f.writelines(ln + "\n" for ln in sorted(self.logs.get(host, [])))
        final = {"params": self.params, "frames": list(self.frames.values()),
                 "runs": self.runs, "procs": self.procs,
                 "outputs": list(self.outputs.values()), "publishes": self.publishes,
                 "jobs": [{"id": j, "groups": g,
                           **({"finished_at": self.job_finish.get(j),
                               "committed_at": self.job_finish.get(j)} if self.job_finish else {})}
                          for j, g in JOBS.items()],
                 "caps": self.caps, "check": self.check, "failovers": self.failovers}
        if self.reserves is not None:
            final["reserves"] = self.reserves
        if self.depends is not None:
            final["depends"] = self.depends
        if self.layers is not None:
            final["layers"] = self.layers
        with open(os.path.join(outdir, "final.json"), "w") as f:
            json.dump(final, f, indent=1)


def clean():
    """A run with a render kill and retry, an agent pause, a failover that
    loses a booking and its accepted report, a stale and a duplicate answer.
    Caps are reached but never exceeded."""
    f = Farm()
    f.h(1000, "phase", phase="setup")
    f.submit(1001, 1, [1, 2, 3])
    f.submit(1001, 2, [4, 5, 6])
    f.h(1002, "phase", phase="load")
    f.attempt(1, 101, "h1", 1003, 1006)
    f.attempt(2, 102, "h2", 1003, 1006)
    f.attempt(4, 104, "h3", 1003, 1006)
    # frame 3: its render is killed, the failure reported, the frame retried
    f.fault(1008, 1008, "render_kill", "h1")
    f.attempt(3, 103, "h1", 1007, 1008, death="killed", end_state="waiting", signal=9,
              publish=False, output=False)
    f.attempt(3, 113, "h2", 1009, 1012)
    # frame 5 rides out an agent pause; the agent reports it twice
    f.fault(1008, 1009, "agent_stop", "h3")
    f.attempt(5, 105, "h3", 1007, 1010)
    f.report("h3", wall(1010.5), 105, 5, "duplicate")
    # frame 6: the failover loses its booking and its accepted report; it runs again
    f.attempt(6, 96, "h2", 1010, 1010.8, in_db=False)
    f.fault(1011, 1011, "failover")
    f.failovers.append({"wall": wall(1011)})
    # a quoted value that contains "answer=accepted" must not be read as one
    f.report("h1", wall(1013), 99, 6, "stale",
             extra=' note="not this host\'s live proc any more: answer=accepted ignored"')
    f.log("h1", wall(1013.5), "lease-renewed procs=0 kill=0 deadline=2.9s")
    f.logs["h2"].append("libpq noise on stderr")
    f.h(1039, "phase", phase="heal")
    f.h(1040, "heal", backlog=1, slots=6)
    f.h(1040, "phase", phase="quiescence")
    f.attempt(6, 116, "h1", 1041, 1044)
    f.h(1060, "quiet", all_terminal=True)
    f.h(1060, "phase", phase="final")
    return f


def with_freeze(f, die_at=1028.0, new_start=1024.7, effect=False):
    """Host h3 frozen 1020-1027 while render 108 of frame 8 runs there: its
    lease expires, frame 8 is rebooked on h1 (render 118), which finds the
    witness held by 108 and limit-l1 full; 108 dies at die_at. Frame 9
    (render 109) keeps limit-l1 and job-2 busy meanwhile."""
    f.submit(1018, 2, [8, 9])
    f.attempt(9, 109, "h2", 1020, 1028)
    f.attempt(8, 108, "h3", 1019, die_at, death="killed", reason="host_lost",
              end_state="waiting", db=(1018.8, 1024.2), publish=False, output=False,
              accepted=effect)
    f.fault(1020, 1027, "host_freeze", "h3")
    f.attempt(8, 118, "h1", new_start, 1028.5, db=(1024.5, 1028.53))
    f.r(new_start, "witness_violation", 118, frame=8, host="h1", holder=108)
    f.r(new_start, "slot_violation", 118, host="h1", group="limit-l1")
    f.report("h3", wall(die_at + 0.1), 108, 8, "stale")
    return f


# --------------------------------------------------------------------------
# Cases: each returns (farm, expected violations, expected stats subset)

V = collections.namedtuple("V", "check kind ident")


def C1(kind, ident=None):
    return V("C1_exclusivity", kind, ident)


def C2(kind, ident=None):
    return V("C2_fencing", kind, ident)


def C3(kind, ident=None):
    return V("C3_no_loss", kind, ident)


def C4(kind, ident=None):
    return V("C4_caps", kind, ident)


def C5(kind, ident=None):
    return V("C5_liveness", kind, ident)


def C6(kind, ident=None):
    return V("C6_tokens", kind, ident)


def C8(kind, ident=None):
    return V("C8_dependencies", kind, ident)


def C9(kind, ident=None):
    return V("C9_delays", kind, ident)


def C11(kind, ident=None):
    return V("C11_batches", kind, ident)


CASES = []


def case(fn):
    CASES.append(fn)
    return fn


@case
def clean_history_passes():
    return clean(), [], {
        "renders_started": 8, "frames_by_state": {"succeeded": 6},
        "runs_by_reason": {"completed": 7},
        "faults_by_kind": {"agent_stop": 1, "failover": 1, "render_kill": 1},
        "acks_lost_in_failover": 1, "stale_answers": 1, "duplicate_answers": 1,
        "renders_unknown_to_db": 1, "freeze_overlaps_allowed": 0, "witness_violations": 0,
        "slot_violations": 0, "recovery_seconds": 4.03, "recovery_bound_seconds": 25.3}


def reserve(f, host, t, booked=0, **kw):
    """A reserve() call of host at monotonic t, as the database saw it."""
    if f.reserves is None:
        f.reserves = []
    f.reserves.append({"host": host, "at": wall(t), "booked": booked, **kw})


@case
def reserve_passed_over():
    # frame 6 waits in the database from its submit (1001) to run 116
    # (1040.8); at 1014 nothing runs, so no cap is full: an empty reserve()
    # of h3 then passed it over
    f = clean()
    reserve(f, "h3", 1014)
    return f, [C5("passed_over", 6)], {"reserves_recorded": True, "reserves_empty": 1,
                                       "reserves_passed_over": 1}


@case
def reserve_empty_excused():
    # empty reserve() calls that pass nothing over: the host is down or full;
    # at 1002.5 job-1 and folder-1 are at their caps for frames 3, 5 and 6
    # (frames 1, 2 and 4 are claimed by concurrent calls right after); at
    # 1040.5 frame 6 is claimed by a concurrent call 0.3 s later; at 1008.1
    # frame 3 was released only 0.07 s before (and h2 had no room); calls
    # that booked something are not looked at
    f = clean()
    reserve(f, "h3", 1014, up=False)
    reserve(f, "h3", 1014, room=False)
    reserve(f, "h3", 1002.5)
    reserve(f, "h2", 1040.5)
    reserve(f, "h2", 1008.1, room=False)
    reserve(f, "h1", 1014, booked=1)
    return f, [], {"reserves_recorded": True, "reserves_empty": 2, "reserves_passed_over": 0}


@case
def reserve_excused_by_failover():
    # at 1010.5 the old primary had booked frame 6 (proc 96, lost by the
    # failover at 1011): in the final database it waits from 1001 to 1040.8
    # and job-2 is under its cap, but the call is excused, as is one during
    # the failover; one 10.5 s before it is not
    f = clean()
    reserve(f, "h3", 1010.5)
    reserve(f, "h1", 1011)
    reserve(f, "h1", 1000.5 + 0.01)
    return f, [], {"reserves_recorded": True, "reserves_empty": 3,
                   "reserves_lost_in_failover": 2, "reserves_passed_over": 0}


@case
def reserve_lost_submit_frames_never_wait():
    # job 3's submission is lost; its frame 7 was never in the final
    # database, so nothing passes it over at 1050 (C3 excuses its absence)
    f = clean()
    f.h(1041, "submit", job=3, frames=[7])
    f.h(1042, "lost_submit", job=3)
    reserve(f, "h3", 1050)
    return f, [], {"reserves_empty": 1, "reserves_passed_over": 0,
                   "frames_lost_with_submit": 1}


def retried_frame():
    """Frame 1 alone: its first render (h1) is killed and reported, it
    waits from the end of run 101 (1005.03) until run 111 (1009.8)."""
    f = Farm()
    f.h(1000, "phase", phase="setup")
    f.submit(1001, 1, [1])
    f.h(1002, "phase", phase="load")
    f.attempt(1, 101, "h1", 1003, 1005, death="killed", end_state="waiting", signal=9,
              publish=False, output=False)
    f.attempt(1, 111, "h2", 1010, 1012)
    f.h(1019, "phase", phase="heal")
    f.h(1020, "heal", backlog=0, slots=6)
    f.h(1030, "quiet", all_terminal=True)
    return f


@case
def reserve_waits_from_the_release_commit():
    # run 101 ended at 1005.03 but its release committed at 1005.6: frame 1
    # waits for other sessions only from then; h3's empty call at 1005.7
    # passes nothing over, the one at 1005.9 passes frame 1 over
    f = retried_frame()
    next(r for r in f.runs if r["proc"] == 101)["committed_at"] = wall(1005.6)
    reserve(f, "h3", 1005.7)
    reserve(f, "h3", 1005.9)
    return f, [C5("passed_over", 1)], {"reserves_empty": 2, "reserves_passed_over": 1}


@case
def reserve_frame_booked_before_its_submit_was_logged():
    # the harness logs a submit after its commit: run 101 began 0.05 s
    # before the submit event, so frame 1 waited only after it ended
    f = retried_frame()
    next(r for r in f.runs if r["proc"] == 101)["started_at"] = wall(1000.95)
    reserve(f, "h3", 1003)
    reserve(f, "h3", 1007)
    return f, [C5("passed_over", 1)], {"reserves_empty": 2, "reserves_passed_over": 1}


@case
def reserve_long_call_excused():
    # a call from 1039.6 that lasted until 1040.0 (it waited): run 116
    # claims frame 6 at 1040.8, within a second of the call's end though
    # not of its start, so a concurrent call took it
    f = clean()
    reserve(f, "h2", 1039.6, end=wall(1040.0))
    return f, [], {"reserves_empty": 1, "reserves_passed_over": 0}


@case
def reserve_long_call_passed_over():
    # the same call without its end, and one from 1014 to 1020: frame 6
    # waits until 1040.8, more than a second after either ended
    f = clean()
    reserve(f, "h2", 1039.6)
    reserve(f, "h3", 1014, end=wall(1020))
    return f, [C5("passed_over", 6), C5("passed_over", 6)], {"reserves_empty": 2, "reserves_passed_over": 2}


@case
def reserve_waits_from_the_run_end():
    # without a commit time, from the end of the run
    f = retried_frame()
    reserve(f, "h3", 1005.7)
    return f, [C5("passed_over", 1)], {"reserves_empty": 1, "reserves_passed_over": 1}


@case
def witness_violation():
    f = clean()
    f.r(1004, "witness_violation", 102, frame=2, host="h2", holder=999)
    return f, [C1("witness_violation", 2)], {"witness_violations": 1}


@case
def witness_violation_with_unknown_holder():
    f = clean()
    f.r(1004, "witness_violation", 102, frame=2, host="h2", holder=None)
    return f, [C1("witness_violation", 2)], {}


@case
def overlapping_renders():
    # 102's lease is taken away at 1004.2 but its render lives on to 1006,
    # past the start of 122: the renders overlap (and so exceed job-1 and
    # folder-1 in the render sweep) while the DB runs do not
    f = clean()
    f.drop(102)
    f.attempt(2, 102, "h2", 1003, 1006, death="killed", reason="host_lost",
              end_state="waiting", db=(1002.8, 1004.2), publish=False, output=False)
    f.attempt(2, 122, "h3", 1004.5, 1007)
    return f, [C1("render_overlap", 2), C4("render_cap", "job-1"),
               C4("render_cap", "folder-1")], {}


@case
def overlapping_db_runs():
    # render 102 died at 1004 but its run ends at 1006, after 122 was booked
    f = clean()
    f.drop(102)
    f.attempt(2, 102, "h2", 1003, 1004, death="killed", reason="killed", end_state="waiting",
              db=(1002.8, 1006), publish=False, output=False, signal=9)
    f.attempt(2, 122, "h3", 1004.5, 1007)
    return f, [C1("run_overlap", 2), C4("run_cap", "job-1"), C4("run_cap", "folder-1")], {}


@case
def render_never_seen_dead():
    f = clean()
    f.drop(116)
    f.attempt(6, 116, "h1", 1041, 1044, death=None)
    return f, [C1("never_seen_dead", 6)], {"renders_never_seen_dead": 1}


@case
def publish_outside_run():
    f = clean()
    next(p for p in f.publishes if p["proc"] == 101)["at"] = wall(1007)
    f.publishes.append({"frame": 1, "proc": 555, "at": wall(1004)})
    # in time for proc 101's run, but for a frame that run is not
    f.publishes.append({"frame": 2, "proc": 101, "at": wall(1005)})
    return f, [C2("publish_outside_run", 1), C2("publish_outside_run", 1),
               C2("publish_outside_run", 2)], {}


@case
def accepted_report_of_another_host_or_epoch():
    f = clean()
    f.report("h2", wall(1008.1), 103, 3, "accepted")
    f.report("h1", wall(1006.1), 101, 1, "accepted", epoch=2)
    return f, [C2("ack_mismatch", 3), C2("ack_mismatch", 1)], {}


@case
def accepted_report_unknown_to_db_after_failover():
    f = clean()
    f.report("h1", wall(1013), 777, 6, "accepted")
    return f, [C2("ack_without_run", 6)], {"acks_lost_in_failover": 1}


@case
def without_failover_nothing_may_be_lost():
    f = clean()
    f.drop_fault(next(e["id"] for e in f.harness
                      if e["ev"] == "fault_on" and e["kind"] == "failover"))
    f.failovers = []
    return f, [C2("ack_without_run", 6), C6("render_without_run", 6)], \
        {"acks_lost_in_failover": 0}


def accepted_report_in_a_cut(sync):
    """Proc 96's accepted report 14 s before the failover (as above), but
    within a cut of the primary from its standby (--ha)."""
    f, _, _ = accepted_report_long_before_a_failover_is_not_excused()
    f.h(1010, "fault_on", id=90, kind="ha_partition", target=None, sync=sync)
    f.h(1026, "fault_off", id=90)
    return f


@case
def accepted_report_in_an_asynchronous_cut_is_excused():
    return accepted_report_in_a_cut(False), [], {"acks_lost_in_failover": 1}


@case
def accepted_report_in_a_synchronous_cut_is_not_excused():
    return accepted_report_in_a_cut(True), [C2("ack_without_run", 6)], {"acks_lost_in_failover": 0}


@case
def two_completed_runs():
    f = clean()
    f.attempt(1, 131, "h2", 1007, 1009)
    return f, [C3("completed_runs", 1)], {}


@case
def succeeded_frame_without_completed_run():
    f = clean()
    next(run for run in f.runs if run["proc"] == 113)["reason"] = "killed"
    return f, [C3("completed_runs", 3)], {}


@case
def output_from_another_proc():
    f = clean()
    f.outputs[2] = {"frame": 2, "proc": 101, "content": "proc=101 chunk=0\n"}
    return f, [C3("output_proc", 2)], {}


@case
def output_with_foreign_chunk():
    f = clean()
    f.outputs[4]["content"] += "proc=101 chunk=2\n"
    return f, [C3("output_content", 4)], {}


@case
def output_missing():
    f = clean()
    del f.outputs[5]
    return f, [C3("output_missing", 5)], {}


def lose_last_publish(f, failover_at, kind="failover"):
    """Render 116 (frame 6, publish at 1043.8) publishes; a failover (a
    fault of kind) that begins at failover_at loses the commit, its
    completion lands after."""
    f.fault(failover_at, failover_at + 2, kind)
    f.failovers.append({"wall": wall(failover_at)})
    del f.outputs[6]
    f.publishes = [p for p in f.publishes if p["proc"] != 116]
    return f


@case
def publish_lost_in_failover():
    return lose_last_publish(clean(), 1045), [], {"publishes_lost_in_failover": 1}


# harness.py --ha: the manager's faults and the watcher's promotions are
# failovers too
for _kind in ("ha_failover", "ha_node_kill", "ha_partition", "promotion"):
    def _lost_in(kind=_kind):
        return lose_last_publish(clean(), 1045, kind), [], {"publishes_lost_in_failover": 1}
    _lost_in.__name__ = "publish_lost_in_failover_" + _kind
    case(_lost_in)


@case
def publish_lost_in_a_server_crash_is_not_excused():
    # a crash restart loses no commit: not a failover
    return (lose_last_publish(clean(), 1045, "server_crash"), [C3("output_missing", 6)],
            {"publishes_lost_in_failover": 0})


@case
def publish_long_before_failover_is_not_excused():
    return (lose_last_publish(clean(), 1054.5), [C3("output_missing", 6)],
            {"publishes_lost_in_failover": 0})


def over_an_earlier_output(f):
    """Frame 6 ran first as render 86 (1030-1033), which published its
    output and was then lost by its agent; render 116 ran it again."""
    f.attempt(6, 86, "h3", 1030, 1033, death="killed", reason="lost_by_agent",
              end_state="waiting", accepted=False)
    f.outputs[6] = {"frame": 6, "proc": 86, "content": "proc=86 chunk=0\nproc=86 chunk=1\n"}
    f.publishes = [p for p in f.publishes if p["proc"] != 116]
    return f


@case
def publish_lost_in_failover_over_an_earlier_output():
    # the lost publish leaves the earlier render's output in place
    f = over_an_earlier_output(clean())
    f.fault(1045, 1047, "failover")
    f.failovers.append({"wall": wall(1045)})
    return f, [], {"publishes_lost_in_failover": 1}


@case
def earlier_output_without_a_failover_is_not_excused():
    return over_an_earlier_output(clean()), [C3("output_proc", 6)], {"publishes_lost_in_failover": 0}


@case
def output_missing_though_its_publish_committed():
    f = lose_last_publish(clean(), 1045)
    f.publishes.append({"frame": 6, "proc": 116, "at": wall(1043.9)})
    return f, [C3("output_missing", 6)], {"publishes_lost_in_failover": 0}


@case
def accepted_report_long_before_a_failover_is_not_excused():
    f = clean()
    f.failovers = [{"wall": wall(1025)}]    # 14 s after proc 96's accepted report
    ids = {e["id"] for e in f.harness if e["ev"] == "fault_on" and e["kind"] == "failover"}
    for e in f.harness:
        if e["ev"] in ("fault_on", "fault_off") and e["id"] in ids:
            e["t"] = 1025
            e["wall"] = wall(1025)
    return f, [C2("ack_without_run", 6), C6("render_without_run", 6)], {"acks_lost_in_failover": 0}


@case
def frame_left_waiting():
    f = clean()
    f.drop(105)
    f.attempt(5, 105, "h3", 1007, 1010, death="killed", reason="host_lost",
              end_state="waiting", publish=False, output=False)
    f.frames[5]["state"] = "waiting"
    f.event("harness", "quiet")["all_terminal"] = False
    return f, [C3("frame_not_terminal", 5), C5("not_quiet")], {}


@case
def submission_lost_in_failover():
    # job 3 was acknowledged by the old primary and lost with it; the harness
    # also logs a fault_off for a fault it failed to inject
    f = clean()
    f.h(1009, "submit", job=3, frames=[11, 12])
    f.h(1011.5, "lost_submit", job=3)
    f.h(1012, "fault_off", id=99, error=True)
    return f, [], {"frames_lost_with_submit": 2, "fault_off_unmatched": 1,
                   "submitted_frames": 8}


@case
def submitted_frame_missing():
    f = clean()
    del f.frames[6]
    return f, [C3("frame_missing", 6)], {}


@case
def cap_exceeded_in_render_sweep():
    # render 107 runs 1004-1005 beside 101 and 102 (job-1 cap 2); its DB run
    # is placed where the DB sweep sees no excess
    f = clean()
    f.submit(1001, 1, [7])
    f.attempt(7, 107, "h3", 1004, 1005, db=(1006.5, 1006.9))
    return f, [C4("render_cap", "job-1"), C4("render_cap", "folder-1")], {}


@case
def cap_exceeded_in_db_sweep():
    f = clean()
    f.submit(1001, 1, [7])
    f.attempt(7, 107, "h3", 1006.2, 1006.7, db=(1004, 1006.75))
    return f, [C4("run_cap", "job-1"), C4("run_cap", "folder-1")], {}


@case
def slot_violation():
    f = clean()
    f.r(1004, "slot_violation", 102, host="h2", group="job-1")
    return f, [C4("slot_violation", "job-1")], {"slot_violations": 1}


@case
def live_proc_left():
    f = clean()
    f.procs.append({"id": 116, "frame": 6, "host": "h1", "state": "killing"})
    return f, [C5("live_proc", 6)], {}


@case
def slow_recovery():
    f = clean()
    f.drop(116)
    f.attempt(6, 116, "h1", 1070, 1073)
    return f, [C5("slow_recovery")], {"recovery_seconds": 33.03}


@case
def proc_reused_by_runs_and_renders():
    f = clean()
    f.drop(113)
    f.attempt(3, 103, "h2", 1009, 1012)
    return f, [C6("proc_reused"), C6("proc_reused", 3)], {}


@case
def render_on_another_host_than_its_run():
    f = clean()
    f.event("renders", "start", proc=105)["host"] = "h1"
    return f, [C6("proc_reused", 5)], {}


@case
def check_not_empty():
    f = clean()
    f.check.append({"invariant": "usage", "detail": "job 1 cores 200, live procs 100"})
    return f, [V("C7_check", "check_row", None)], {}


@case
def host_freeze_allowed():
    return with_freeze(clean()), [], {
        "freeze_overlaps_allowed": 1, "freeze_zombies": 1, "witness_violations": 1,
        "witness_violations_allowed": 1, "slot_violations": 1, "slot_violations_allowed": 1,
        "faults_by_kind": {"agent_stop": 1, "failover": 1, "host_freeze": 1, "render_kill": 1}}


@case
def host_freeze_zombie_dies_too_late():
    # thaw at 1027, freeze_k 5: dying at 1033 is one second too late, and the
    # zombie then counts against job-2 and limit-l1 for its whole life
    f = with_freeze(clean(), die_at=1033.0)
    return f, [C1("witness_violation", 8), C1("render_overlap", 8),
               C4("slot_violation", "limit-l1"), C4("render_cap", "job-2"),
               C4("render_cap", "limit-l1")], \
        {"freeze_overlaps_allowed": 0, "freeze_zombies": 0}


@case
def host_freeze_zombie_with_accepted_report():
    f = with_freeze(clean(), effect=True)
    return f, [C1("witness_violation", 8), C1("render_overlap", 8),
               C4("slot_violation", "limit-l1"), C4("render_cap", "job-2"),
               C4("render_cap", "limit-l1"), C2("ack_mismatch", 8)], {"freeze_zombies": 0}


@case
def host_freeze_overlap_began_before_the_freeze():
    # 118 starts at 1019.5, before h3 froze at 1020: the freeze excuses nothing
    # that began before it (from 1020 on, 108 is an excused zombie for the caps)
    f = with_freeze(clean(), new_start=1019.5)
    return f, [C1("witness_violation", 8), C1("render_overlap", 8),
               C4("slot_violation", "limit-l1")], {"freeze_zombies": 1}


@case
def host_freeze_excuses_no_render_started_after_thaw():
    # render 128 starts on h3 after the thaw and loses its lease at once; it
    # dies within freeze_k of the thaw, but it was never frozen: overlapping
    # it is not excused
    f = with_freeze(clean())
    f.submit(1018, 1, [10])
    f.attempt(10, 128, "h3", 1027.5, 1030, death="killed", reason="host_lost",
              end_state="waiting", db=(1027.3, 1027.7), publish=False, output=False)
    f.attempt(10, 138, "h1", 1028, 1029)
    return f, [C1("render_overlap", 10)], {"freeze_zombies": 1, "freeze_overlaps_allowed": 1}


@case
def host_freeze_excuses_only_its_frame_and_groups():
    # zombie 108 (frame 8, job 2) excuses neither a witness conflict on
    # frame 9 nor a full job-1
    f = with_freeze(clean())
    f.r(1025, "witness_violation", 109, frame=9, host="h2", holder=108)
    f.r(1025, "slot_violation", 109, host="h2", group="job-1")
    # 108 is dead at 1028: a file that still names it was read just after
    # some other render took the lock
    f.r(1028.2, "witness_violation", 148, frame=8, host="h2", holder=108)
    return f, [C1("witness_violation", 9), C4("slot_violation", "job-1"),
               C1("witness_violation", 8)], \
        {"witness_violations_allowed": 1, "slot_violations_allowed": 1}


# --------------------------------------------------------------------------
# C8: dependencies

def dep(kind, job, on_job, layer=None, on_layer=None, frame=None, on_frame=None):
    return {"kind": kind, "job": job, "layer": layer, "frame": frame, "on_job": on_job,
            "on_layer": on_layer, "on_frame": on_frame, "satisfied": True}


def dep_farm(attempts=True):
    """Job 1: layer 10 (sim) has task 1 (frame 1) and task 2 (frames 2-3, a
    chunk of 2); layer 11 (render) waits for it frame by frame: task 3
    (frame 1) for task 1, tasks 4 and 5 (frames 2, 3) both for task 2.
    Job 2 waits for job 1 (after_jobs); its layer 21 (task 8) waits for its
    layer 20 (tasks 6, 7).  Caps are wide.  A DB run ends 0.03 s after
    its render: task 1 ends 1005.03, 2 at 1006.03, 5 at 1008.53 (job 1's
    last), 7 at 1011.53 (layer 20's last)."""
    f = Farm()
    f.caps.update({"job-1": 4, "job-2": 4, "folder-1": 8, "show-alpha": 8, "limit-l1": 4})
    f.h(1000, "phase", phase="setup")
    f.submit(1001, 1, [1, 2, 3, 4, 5])
    f.submit(1001, 2, [6, 7, 8])
    for fid, layer, size in ((1, 10, 1), (2, 10, 2), (3, 11, 1), (4, 11, 1), (5, 11, 1),
                             (6, 20, 1), (7, 20, 1), (8, 21, 1)):
        f.frames[fid].update(layer=layer, size=size)
    f.depends = [dep("frame", 1, 1, 11, 10, 3, 1), dep("frame", 1, 1, 11, 10, 4, 2),
                 dep("frame", 1, 1, 11, 10, 5, 2), dep("layer", 2, 2, 21, 20),
                 dep("job", 2, 1)]
    f.h(1002, "phase", phase="load")
    if attempts:
        f.attempt(1, 201, "h1", 1003, 1005)
        f.attempt(2, 202, "h2", 1003, 1006)
        f.attempt(3, 203, "h1", 1005.5, 1007)
        f.attempt(4, 204, "h2", 1006.5, 1008)
        f.attempt(5, 205, "h3", 1006.5, 1008.5)
        f.attempt(6, 206, "h1", 1009, 1011)
        f.attempt(7, 207, "h2", 1009, 1011.5)
        f.attempt(8, 208, "h3", 1012, 1014)
    f.h(1019, "phase", phase="heal")
    f.h(1020, "heal", backlog=0, slots=6)
    f.h(1020, "phase", phase="quiescence")
    f.h(1025, "quiet", all_terminal=True)
    f.h(1025, "phase", phase="final")
    return f


def dep_retime(f, frame, start, end):
    """Move every trace of the attempt of frame (one attempt) to [start, end]."""
    proc = next(run["proc"] for run in f.runs if run["frame"] == frame)
    f.drop(proc)
    f.frames[frame]["attempts"] -= 1
    f.attempt(frame, proc, "h3", start, end)
    return f


@case
def dep_clean():
    return dep_farm(), [], {"depends_recorded": True, "tasks_with_prerequisites": 6,
                            "chunked_tasks": 1, "renders_checked_for_prerequisites": 6,
                            "depends_by_kind": {"frame": 3, "job": 1, "layer": 1}}


@case
def dep_layer_started_before_prerequisite():
    # task 8 starts at 1011.3, before task 7 of layer 20 ends (1011.53)
    f = dep_retime(dep_farm(), 8, 1011.3, 1013)
    return f, [C8("ran_before_prerequisites", 8)], {"renders_before_prerequisites": 1}


@case
def dep_within_clock_slack():
    # a start 0.04 s before the prerequisite's commit is within ORDER_SLACK
    f = dep_retime(dep_farm(), 8, 1011.53 - 0.04, 1013)
    return f, [], {"renders_before_prerequisites": 0}


@case
def dep_frame_by_frame_across_a_chunk():
    # task 5 (frame 3) waits for task 2 (frames 2-3): it starts at 1005.9,
    # before task 2 ends (1006.03); task 3 is not held by task 2
    f = dep_retime(dep_farm(), 5, 1005.9, 1006.5)
    return f, [C8("ran_before_prerequisites", 5)], {}


@case
def dep_chunked_dependent():
    # the dependent is the chunk: task 4 holds frames 2-3 and waits for
    # tasks 1 and 2 (single frames); it starts after 1 but before 2 ends
    f = dep_farm()
    f.frames[4]["size"] = 2
    f.frames[2]["size"] = 1
    f.depends[1] = dep("frame", 1, 1, 11, 10, 4, 1)
    f.depends[2] = dep("frame", 1, 1, 11, 10, 4, 2)
    dep_retime(f, 4, 1005.5, 1007)
    f.frames[5]["state"] = "eaten"          # left without prerequisites of its own
    f.drop(205)
    return f, [C8("ran_before_prerequisites", 4)], {"chunked_tasks": 1}


@case
def dep_job_on_job():
    # task 6 of job 2 starts at 1008.2, before job 1's task 5 ends (1008.53)
    f = dep_retime(dep_farm(), 6, 1008.2, 1010)
    return f, [C8("ran_before_prerequisites", 6)], {}


def dep_retried(start3):
    """Task 1's first run dies (1004.03), an operator retries it and its
    second run succeeds (1005.03); task 3 starts at start3."""
    f = dep_farm(attempts=False)
    f.attempt(1, 201, "h1", 1003, 1004, end_state="dead", publish=False, output=False)
    f.attempt(1, 211, "h1", 1004.5, 1005)
    f.attempt(2, 202, "h2", 1003, 1006)
    f.attempt(3, 203, "h1", start3, start3 + 1)
    for fid, proc, host, start, end in ((4, 204, "h2", 1006.5, 1008), (5, 205, "h3", 1006.5, 1008.5),
                                        (6, 206, "h1", 1009, 1011), (7, 207, "h2", 1009, 1011.5),
                                        (8, 208, "h3", 1012, 1014)):
        f.attempt(fid, proc, host, start, end)
    return f


@case
def dep_prerequisite_retried_dependent_after_success():
    return dep_retried(1005.2), [], {"renders_before_prerequisites": 0}


@case
def dep_prerequisite_retried_dependent_after_death():
    # task 3 starts after the first run died, before the second succeeded
    return dep_retried(1004.6), [C8("ran_before_prerequisites", 3)], {}


@case
def dep_prerequisite_eaten():
    # task 2 killed and eaten at 1004.03 (the run's end_state): tasks 4 and
    # 5 may start at 1004.5; job 2's dependency on job 1 is met by it too
    f = dep_farm(attempts=False)
    f.attempt(1, 201, "h1", 1003, 1005)
    f.attempt(2, 202, "h2", 1003, 1004, reason="killed", end_state="eaten", death="killed",
              publish=False, output=False)
    f.frames[2]["state"] = "eaten"
    for fid, proc, host, start, end in ((3, 203, "h1", 1005.5, 1007), (4, 204, "h2", 1004.5, 1006),
                                        (5, 205, "h3", 1004.5, 1006.5), (6, 206, "h1", 1007.5, 1009),
                                        (7, 207, "h2", 1007.5, 1009.5), (8, 208, "h3", 1010, 1012)):
        f.attempt(fid, proc, host, start, end)
    return f, [], {"prerequisite_ends_unknown": 0}


@case
def dep_prerequisite_eaten_without_run():
    # task 2 eaten while it waited: no run says when; tasks 4 and 5 are not
    # checked against it, and count as freed
    f = dep_farm(attempts=False)
    f.frames[2]["state"] = "eaten"
    for fid, proc, host, start, end in ((1, 201, "h1", 1003, 1005), (3, 203, "h1", 1005.5, 1007),
                                        (4, 204, "h2", 1003.5, 1006), (5, 205, "h3", 1003.5, 1006.5),
                                        (6, 206, "h1", 1007.5, 1009), (7, 207, "h2", 1007.5, 1009.5),
                                        (8, 208, "h3", 1010, 1012)):
        f.attempt(fid, proc, host, start, end)
    # renders of tasks 4, 5 and of job 2's 6, 7, 8 each have task 2 unknown
    return f, [], {"prerequisite_ends_unknown": 5}


def dep_left(all_terminal=True):
    """Task 8 never ran and ended 'depend', though layer 20 and job 1 all
    succeeded."""
    f = dep_farm()
    f.drop(208)
    f.frames[8].update(state="depend", attempts=0)
    if not all_terminal:
        f.event("harness", "quiet")["all_terminal"] = False
    return f


@case
def dep_depend_left():
    return dep_left(), [C3("frame_not_terminal", 8), C8("depend_left", 8)], {}


@case
def dep_depend_left_run_cut_short():
    return dep_left(False), [C3("frame_not_terminal", 8), C5("not_quiet")], \
        {"depend_left_run_cut_short": 1}


@case
def dep_held_by_dead_prerequisite():
    # task 2 died: tasks 4 and 5 (frame by frame), job 2 (its job) and so
    # task 8 are rightly left 'depend'
    f = dep_farm(attempts=False)
    f.attempt(1, 201, "h1", 1003, 1005)
    f.attempt(2, 202, "h2", 1003, 1004, end_state="dead", publish=False, output=False)
    f.attempt(3, 203, "h1", 1005.5, 1007)
    for fid in (2, 4, 5, 6, 7, 8):
        f.frames[fid]["state"] = "dead" if fid == 2 else "depend"
    return f, [], {"frames_held_by_prerequisites": 5}


@case
def dep_depend_is_not_waiting():
    # empty reserve() calls while task 8 is 'depend' (until 1011.53) pass
    # nothing over; one at 1011.7 is too soon after it was freed; task 8
    # starts at 1014 (its run at 1013.8), so a call at 1012.5 passes it over
    f = dep_retime(dep_farm(), 8, 1014, 1015)
    for t in (1004, 1010, 1011.7):
        reserve(f, "h3", t)
    reserve(f, "h2", 1012.5)
    return f, [C5("passed_over", 8)], {"reserves_passed_over": 1}


def dep_job_finish(recorded):
    """Job 1's finish committed at 1009.5 (the worker's, after its last
    task ended at 1008.53); job 2's tasks 6, 7 start at 1010.5 (runs at
    1010.3), task 8 at 1013; an empty reserve() call at 1009.2."""
    f = dep_farm()
    for fid, start, end in ((6, 1010.5, 1012), (7, 1010.5, 1012.5), (8, 1013, 1014)):
        dep_retime(f, fid, start, end)
    if recorded:
        f.job_finish = {1: wall(1009.5), 2: wall(1014.1)}
    reserve(f, "h3", 1009.2)
    return f


@case
def dep_job_waits_for_job_finish():
    # job 2's tasks wait from job 1's finish: nothing waits at 1009.2
    return dep_job_finish(True), [], {"reserves_passed_over": 0, "reserves_empty": 1}


@case
def dep_job_finish_not_recorded():
    # without the finish, job 1's last task's end (1008.53) is taken
    return dep_job_finish(False), [C5("passed_over", 6)], {"reserves_passed_over": 1}


# --------------------------------------------------------------------------
# Runner

def delays(second=1049.5, third=1051.4, last=1052.4):
    """clean() with the layers' delays recorded (job 1's layer: requeue
    code 75, requeue_delay 2 s, max_requeues 1, retry_delay 0.5 s; job 2's:
    no codes, no delays) and frame 7 of job 1, submitted after the heal:
    its first run (1046-1047) exits 75, a requeue, delayed 2 s; its second
    (from `second`) exits 75 again, past max_requeues: a failure, delayed
    0.5 s; its third (from `third`) succeeds.  Frame 3's killed render
    (clean) is a failure too, delayed 0.5 s, and its next run started
    0.77 s later."""
    f = clean()
    f.layers = [{"id": 10, "requeue_exit_codes": [75], "requeue_delay": 2, "max_requeues": 1,
                 "retry_delay": 0.5},
                {"id": 20, "requeue_exit_codes": [], "requeue_delay": 30, "max_requeues": 20,
                 "retry_delay": 0}]
    f.submit(1045, 1, [7])
    f.attempt(7, 107, "h1", 1046, 1047, end_state="waiting", status=75, publish=False,
              output=False)
    f.attempt(7, 117, "h2", second, second + 1, end_state="waiting", status=75, publish=False,
              output=False)
    f.attempt(7, 127, "h3", third, last)
    return f


@case
def delays_kept():
    # each next run starts after its delay: the second 0.27 s after the
    # requeue's 2 s, the third 0.17 s after the retry's 0.5 s (a requeue's 2 s
    # would not have been over: the count of requeues decides)
    return delays(), [], {"delays_recorded": True, "requeued_runs": 1, "delayed_runs": 3}


@case
def delays_not_recorded():
    # without layers the delays are not checked, however early a rebooking
    f = delays(second=1047.5)
    f.layers = None
    return f, [], {"delays_recorded": False, "delayed_runs": 0}


@case
def requeue_booked_early():
    # the second run starts 1.27 s after the requeue: its 2 s delay was not over
    return delays(second=1048.5), [C9("booked_early", 7)], {"requeued_runs": 1}


@case
def retry_booked_early():
    # the third run starts 0.37 s after the second's failure: 0.5 s was not over
    return delays(third=1051.1), [C9("booked_early", 7)], {"delayed_runs": 3}


@case
def delayed_frame_not_passed_over():
    # frame 7 is waiting but delayed until 1049.03, bookable once the
    # worker's round and DUE_SLACK have passed (1052.03): an empty reserve()
    # at 1051.5 passes nothing over; one at 1055, with the frame still not
    # booked until 1057.8, does
    f = delays(second=1058, third=1060, last=1061)
    reserve(f, "h1", 1051.5)
    reserve(f, "h2", 1055)
    return f, [C5("passed_over", 7)], {"reserves_empty": 2, "reserves_passed_over": 1}


def C10(kind, ident=None):
    return V("C10_timeouts", kind, ident)


def timeouts(end=1051.0, db_end=None, seen_dead=True, second=None):
    """clean() with the layers' timeouts recorded (job 1's layer: timeout
    4 s, timeout_no_output 3 s; job 2's: none) and frame 7 of job 1,
    submitted after the heal: its first render (1046) hangs (its hang
    event at 1047) until frameq has it killed at `end`; its run (from
    1045.8) ends `timeout` at db_end (end + 0.03 by default), the report
    accepted, and the frame waits; the second run (from `second`, by
    default end + 1.5, for 2 s; none if seen_dead is false) succeeds.  Its deadline is 1049.8, the bound 1055.95 (+ quarantine
    4.15 s, poll 1 s, ROUND_SLACK 1 s); the render's 1056.15 (from 1046)."""
    f = clean()
    f.layers = [{"id": 10, "requeue_exit_codes": [], "requeue_delay": 0, "max_requeues": 0,
                 "retry_delay": 0, "timeout": 4, "timeout_no_output": 3},
                {"id": 20, "requeue_exit_codes": [], "requeue_delay": 0, "max_requeues": 0,
                 "retry_delay": 0, "timeout": None, "timeout_no_output": None}]
    f.params.update(hang_runs=1, timeout_max=4)
    f.submit(1045, 1, [7])
    f.attempt(7, 107, "h1", 1046, end, reason="timeout", end_state="waiting",
              death="killed" if seen_dead else None, signal=15, publish=False, output=False,
              accepted=True, db=(1045.8, end + 0.03 if db_end is None else db_end))
    f.r(1047, "hang", 107, frame=7, mode="hang")
    if seen_dead:
        second = end + 1.5 if second is None else second
        f.attempt(7, 117, "h2", second, second + 2)
    return f


@case
def timeouts_kept():
    # the hung render is killed 1.2 s past its deadline, its run ends
    # `timeout` (an accepted report: no ack_mismatch); frames 1-3's runs
    # have the failover (1011) in their way
    return timeouts(), [], {"timeouts_recorded": True, "timeout_overrun_max_seconds": 1.23,
                            "hung_renders": {"hang": 1}, "hung_ended_by": {"timeout": 1},
                            "timed_runs_extended_by_faults": 3}


@case
def timeouts_not_recorded():
    # layers without timeout keys: C10 is not applied
    f = timeouts(end=1070)
    for row in f.layers:
        del row["timeout"], row["timeout_no_output"]
    return f, [], {"timeouts_recorded": False, "timed_runs": 0}


@case
def timeout_overrun():
    # killed at 1056.5: the run ends 0.58 s past its bound, the render
    # 0.35 s past its own
    return timeouts(end=1056.5), [C10("timeout_overrun", 7), C10("render_overrun", 7)], {}


@case
def timeout_overrun_in_the_db_only():
    # the render dies in time, but its run ends only at 1057: its end
    # was not reported, and no fault was in the way
    return timeouts(db_end=1057.0, second=1058), [C10("timeout_overrun", 7)], {}


@case
def timeout_overrun_excused_by_a_db_fault():
    # a server crash from 1050 to 1052: the bound moves by its 2 s plus
    # quarantine, poll and the agent's backoff
    f = timeouts(end=1056.5)
    f.fault(1050, 1052, "server_crash")
    return f, [], {"timed_runs_extended_by_faults": 4}


@case
def timeout_overrun_not_excused_by_another_hosts_fault():
    # a fault of h3 is in the way of nothing on h1
    f = timeouts(end=1056.5)
    f.fault(1050, 1052, "proxy_blackhole", "h3")
    return f, [C10("timeout_overrun", 7), C10("render_overrun", 7)], {}


@case
def timeout_overrun_not_excused_by_a_render_kill():
    # a render killed on h1 holds up nothing
    f = timeouts(end=1056.5)
    f.fault(1050, 1050, "render_kill", "h1")
    return f, [C10("timeout_overrun", 7), C10("render_overrun", 7)], {}


@case
def timeout_overrun_excused_by_terminated_sessions():
    # sessions terminated at 1055 (within the bound): it moves by poll + 1 s
    f = timeouts(end=1056.5)
    f.fault(1055, 1055, "terminate_backends")
    return f, [], {}


@case
def timeout_overrun_excused_by_its_hosts_fault():
    # h1 cut off from 1049 to 1050: its report could not be sent
    f = timeouts(end=1056.5)
    f.fault(1049, 1050, "proxy_blackhole", "h1")
    return f, [], {}


@case
def hung_render_never_ended():
    # liveness: the hung render was never seen dead (and its frame, never
    # run again, ended dead)
    f = timeouts(seen_dead=False)
    f.frames[7]["state"] = "dead"
    next(r for r in f.runs if r["proc"] == 107)["end_state"] = "dead"
    return f, [C1("never_seen_dead", 7), C10("hung_not_ended", 7)], {}


@case
def hung_run_never_ended():
    # liveness: the render died, but its run never ended in the database
    # (no report of it was accepted; the frame never ran again)
    f = timeouts()
    f.drop(117)
    f.logs["h1"] = [ln for ln in f.logs["h1"] if " proc=107 " not in ln]
    run = next(r for r in f.runs if r["proc"] == 107)
    run.update(ended_at=None, reason=None, end_state=None)
    f.procs.append({"id": 107, "frame": 7, "host": "h1", "state": "killing"})
    f.frames[7]["state"] = "running"
    return f, [C10("hung_not_ended", 7), C5("live_proc", 7), C3("frame_not_terminal", 7)], {}


def batched():
    """clean() as batches of reports: h1 reports frame 1 alone, with a
    booking; h3 frames 4 and 5 in one transaction (one committed_at), and
    frame 5 again (its answer lost: duplicate); h1 a stale report; h2 the
    report of frame 6's first run, which the failover (1011) lost."""
    f = clean()
    f.batch("h1", wall(1006.05), [101], ["accepted"], booked=1)
    f.committed(101, 1006.04)
    f.batch("h3", wall(1010.06), [105, 104], ["accepted", "accepted"], booked="none")
    f.committed(104, 1010.05)
    f.committed(105, 1010.05)
    f.batch("h3", wall(1010.5), [105], ["duplicate"])
    f.batch("h1", wall(1013), [99], ["stale"])
    f.batch("h2", wall(1010.85), [96], ["accepted"])
    return f


@case
def batches_clean():
    return batched(), [], {"batches": 5, "batch_reports": 6, "batch_largest": 2,
                           "batches_with_booking": 4, "batch_acks_lost_in_failover": 1,
                           "batch_answers": {"accepted": 4, "duplicate": 1, "stale": 1}}


@case
def batch_accepted_twice():
    # frame 2's run accepted again, later: the answer should have been
    # duplicate.  Accepted twice around the failover (1011) is no violation:
    # the failover may have lost the first commit (frame 1's run)
    f = batched()
    f.batch("h2", wall(1025), [102], ["accepted"])
    f.batch("h2", wall(1030), [102], ["accepted"])
    f.batch("h1", wall(1010.5), [101], ["accepted"])
    return f, [C11("batch_ack_twice", 2)], {"batches": 8}


@case
def batch_accepted_without_its_run():
    # h1 accepts h2's proc 102; a proc the DB never had; proc 101 under another epoch
    f = batched()
    f.batch("h1", wall(1020), [102, 555], ["accepted", "accepted"])
    f.batch("h1", wall(1021), [101], ["accepted"], epoch=2)
    return f, [C11("batch_ack_unmatched", 2), C11("batch_ack_unmatched", None),
               C11("batch_ack_unmatched", 1)], {}


@case
def batch_in_two_transactions():
    # frames 4 and 5 in one batch, but their runs ended in two transactions
    f = batched()
    f.committed(104, 1009.5)
    return f, [C11("batch_split")], {}


@case
def batch_malformed():
    # two answers for three procs; a proc twice in one batch (accepted twice)
    f = batched()
    f.batch("h2", wall(1020), [102, 113, 102], ["accepted", "accepted"])
    f.batch("h2", wall(1021), [113, 113], ["accepted", "accepted"])
    return f, [C11("batch_answers"), C11("batch_proc_twice"), C11("batch_ack_twice", 3)], {}


def ident(v):
    return v.get("group", v.get("frame"))


def run_case(fn, tmp):
    farm, expected, stats = fn()
    outdir = os.path.join(tmp, fn.__name__)
    farm.write(outdir)
    verdict = check.check_outdir(outdir)
    got = collections.Counter(V(v["check"], v["kind"], ident(v)) for v in verdict["violations"])
    want = collections.Counter(expected)
    problems = []
    if got != want:
        problems.append(f"unexpected {sorted(got - want, key=str)}, "
                        f"missing {sorted(want - got, key=str)}")
        problems += [f"    {v['check']} {v['kind']}: {v['detail']}" for v in verdict["violations"]]
    if verdict["ok"] != (not expected):
        problems.append(f"ok is {verdict['ok']}")
    for key, value in stats.items():
        if verdict["stats"].get(key) != value:
            problems.append(f"stats[{key!r}] = {verdict['stats'].get(key)!r}, want {value!r}")
    return problems


def run_cli(outdir):
    p = subprocess.run([sys.executable, os.path.join(HERE, "check.py"), outdir],
                       capture_output=True, text=True)
    verdict = None
    path = os.path.join(outdir, "verdict.json")
    if os.path.exists(path):
        with open(path) as f:
            verdict = json.load(f)
    return p, verdict


def cli_cases(tmp):
    """The command line: exit status, summary and verdict.json."""
    results = []

    def add(name, problems):
        results.append((name, problems))

    d = os.path.join(tmp, "cli_clean")
    clean().write(d)
    p, verdict = run_cli(d)
    lines = p.stdout.splitlines()
    add("cli_clean_exits_0_with_a_line_per_check",
        [f"rc {p.returncode}: {p.stderr}"] * (p.returncode != 0)
        + ["no verdict.json ok"] * (not (verdict and verdict["ok"]))
        + [f"no summary line for {c}" for c in check.CHECKS
           if not any(ln.startswith(c) for ln in lines)]
        + ["no verdict line"] * (not lines or not lines[-1].startswith("verdict: OK")))

    d = os.path.join(tmp, "cli_fail")
    farm = clean()
    farm.check.append({"invariant": "usage", "detail": "off by one"})
    farm.write(d)
    p, verdict = run_cli(d)
    add("cli_violation_exits_1",
        [f"rc {p.returncode}"] * (p.returncode != 1)
        + ["verdict.json not failing"] * (not verdict or verdict["ok"])
        + ["no FAIL line"] * ("C7_check        FAIL" not in p.stdout))

    def malformed(name, spoil):
        d = os.path.join(tmp, name)
        clean().write(d)
        spoil(d)
        # a verdict left from an earlier run must be replaced
        with open(os.path.join(d, "verdict.json"), "w") as f:
            json.dump({"ok": True}, f)
        p, verdict = run_cli(d)
        add(name, [f"rc {p.returncode}, stderr {p.stderr.strip()!r}"] * (p.returncode != 2)
            + ["verdict.json does not say error"] * (not verdict or verdict.get("ok")
                                                     or "error" not in verdict))

    def append(path, text):
        with open(path, "a") as f:
            f.write(text)

    def rewrite_jsonl(path, fn):
        with open(path) as f:
            events = [json.loads(ln) for ln in f]
        with open(path, "w") as f:
            f.writelines(json.dumps(e) + "\n" for e in events if fn(e) is not False)

    malformed("malformed_missing_final_json", lambda d: os.remove(os.path.join(d, "final.json")))
    malformed("malformed_missing_agents_dir",
              lambda d: [os.remove(os.path.join(d, "agents", h + ".log")) for h in HOSTS]
              and os.rmdir(os.path.join(d, "agents")))
    malformed("malformed_bad_json_line",
              lambda d: append(os.path.join(d, "history", "renders.jsonl"), '{"ev": "exit", "t"\n'))
    malformed("malformed_unknown_render_event",
              lambda d: append(os.path.join(d, "history", "renders.jsonl"),
                               '{"ev": "strat", "t": 1.0, "proc": 1}\n'))
    malformed("malformed_start_without_groups",
              lambda d: rewrite_jsonl(os.path.join(d, "history", "renders.jsonl"),
                                      lambda e: e.pop("groups", None)))
    malformed("malformed_no_heal_event",
              lambda d: rewrite_jsonl(os.path.join(d, "history", "harness.jsonl"),
                                      lambda e: e["ev"] != "heal"))
    malformed("malformed_reported_line_without_proc",
              lambda d: append(os.path.join(d, "agents", "h1.log"),
                               "2026-11-29T12:00:00.123Z reported frame=1 answer=accepted\n"))

    def reserve_without_booked(d):
        path = os.path.join(d, "final.json")
        with open(path) as f:
            final = json.load(f)
        final["reserves"] = [{"host": "h1", "at": wall(1014)}]
        with open(path, "w") as f:
            json.dump(final, f)
    malformed("malformed_reserve_without_booked", reserve_without_booked)

    def committed_at_text(d):
        path = os.path.join(d, "final.json")
        with open(path) as f:
            final = json.load(f)
        final["runs"][0]["committed_at"] = "yesterday"
        with open(path, "w") as f:
            json.dump(final, f)
    malformed("malformed_run_committed_at", committed_at_text)

    def frame_depend_without_on_frame(d):
        path = os.path.join(d, "final.json")
        with open(path) as f:
            final = json.load(f)
        final["depends"] = [{"kind": "frame", "job": 1, "layer": 10, "frame": 2, "on_job": 1,
                             "on_layer": 10, "on_frame": None}]
        with open(path, "w") as f:
            json.dump(final, f)
    malformed("malformed_frame_depend_without_on_frame", frame_depend_without_on_frame)
    p = subprocess.run([sys.executable, os.path.join(HERE, "check.py")],
                       capture_output=True, text=True)
    add("cli_usage_exits_2", [f"rc {p.returncode}"] * (p.returncode != 2))
    return results


# --------------------------------------------------------------------------
# dblog.py: the harness's record of reserve() calls, from server logs

import dblog  # noqa: E402

RESERVE_SQL = ("SELECT b.proc, b.frame FROM frameq.reserve($1, $2, $3::bigint, $4::int) b "
               "LEFT JOIN LATERAL jsonb_each_text(b.env) e ON true")
HEARTBEAT_SQL = "SELECT h.kill::text FROM frameq.heartbeat($1, $2, $3::bigint, $4::bigint[]) h"
ATTACH_SQL = "SELECT a.epoch FROM frameq.attach($1, $2, $3) a"


class ServerLog:
    """A synthetic server log, as the harness's servers write it (times are
    monotonic-style seconds, written as wall(t))."""

    def __init__(self):
        self.lines = []

    def record(self, t, pid, user, level, text):
        w = wall(t)
        stamp = datetime.datetime.fromtimestamp(w, datetime.timezone.utc)
        first, *rest = text.split("\n")
        self.lines.append(f"{stamp.strftime('%Y-%m-%d %H:%M:%S.%f')[:-3]} UTC [{pid}] "
                          f"@{w:.3f} {user}: {level}:  {first}\n")
        self.lines += [f"\t{ln}\n" for ln in rest]

    def statement(self, t_end, ms, pid, host, query, rows=0):
        """A completed statement of host's role, auto_explain'ed at t_end."""
        scan = {"Node Type": "Function Scan", "Parent Relationship": "Outer",
                "Function Name": query.split("frameq.")[1].split("(")[0] if "frameq." in query
                else "x", "Alias": "b", "Actual Rows": rows, "Actual Loops": 1}
        each = {"Node Type": "Function Scan", "Function Name": "jsonb_each_text",
                "Alias": "e", "Actual Rows": 2, "Actual Loops": max(rows, 1)}
        plan = {"Node Type": "Nested Loop", "Join Type": "Left", "Actual Rows": 2 * rows,
                "Actual Loops": 1, "Plans": [scan, each]}
        self.record(t_end, pid, "fqh_" + host, "LOG",
                    f"duration: {ms:.3f} ms  plan:\n"
                    + json.dumps({"Query Text": query, "Plan": plan}, indent=2))

    def reserve(self, t, host, rows=0, pid=500, ms=4.0):
        self.statement(t + ms / 1000, ms, pid, host, RESERVE_SQL, rows)

    def heartbeat(self, t, host, pid=500, ms=3.0):
        self.statement(t + ms / 1000, ms, pid, host, HEARTBEAT_SQL, 1)

    def write(self, path):
        with open(path, "w") as f:
            f.writelines(self.lines)


def dblog_cases(tmp):
    """reserve_calls() on synthetic logs of two servers."""
    results = []
    a, b = ServerLog(), ServerLog()
    a.record(1000, 10, "", "LOG", "starting PostgreSQL 15.20 on x86_64-pc-linux-gnu")
    a.record(1000.2, 11, "postgres", "LOG",
             "frameq worker: started; no bookings or lease expiry for 4.2 s")
    a.statement(1001, 2.0, 500, "h1", ATTACH_SQL, 1)
    a.reserve(1002, "h1")                       # in the quarantine
    a.heartbeat(1004.3, "h1")
    a.reserve(1004.5, "h1")                     # up, room
    a.reserve(1004.8, "h1", rows=2)             # booked 2 (the scan's rows, not the join's)
    a.reserve(1004.9, "h2")                     # no lease of h2 on record
    a.heartbeat(1006.5, "h1")
    a.reserve(1007.0, "h1")                     # runs 1 and 2 fill h1: no room
    a.reserve(1009.8, "h1")                     # last renewal 1006.5 + ttl 3 < 1009.8
    a.statement(1010, 1.0, 600, "h1", "INSERT INTO fqh.output VALUES (1, 2, 'x')", 0)
    a.heartbeat(1011.0, "h1")
    a.reserve(1011.2, "h1")                     # run 2 has ended (committed 1011.1): room
    a.heartbeat(1011.5, "h1", pid=501, ms=20)   # another session of h1 ...
    a.reserve(1011.51, "h1")                    # ... overlaps this call: no room
    a.heartbeat(1011.95, "h3", pid=700)
    a.reserve(1012.0, "h3", pid=700)            # renewed, but within ttl of an operator action
    a.record(1012.5, 10, "", "LOG", "terminating any other active server processes")
    a.heartbeat(1013.0, "h1", pid=502)
    a.reserve(1013.1, "h1", pid=502)            # after a crash, before the worker
    a.record(1013.5, 12, "postgres", "LOG",
             "frameq worker: started; no bookings or lease expiry for 4.2 s")
    a.heartbeat(1017.7, "h1", pid=502)
    a.reserve(1017.8, "h1", pid=502)            # up again
    a.lines.append("pg_ctl: stray output\n")
    a.record(1018, 10, "", "LOG", "received immediate shutdown request")
    b.record(1018.5, 20, "postgres", "LOG", "frameq worker: started; frameq.quarantine is off")
    b.reserve(1019.0, "h1")                     # b promoted: no lease of h1 on b yet
    b.heartbeat(1019.5, "h1")
    b.reserve(1019.6, "h1")
    b.reserve(1030.0, "h1")                     # after the final read
    paths = {}
    for name, log in (("a", a), ("b", b)):
        paths[name] = os.path.join(tmp, f"dblog-{name}.log")
        log.write(paths[name])
    gib = 1 << 30
    runs = [{"host": "h1", "started_at": wall(1004.8), "ended_at": wall(1008),
             "committed_at": wall(1008.01), "cores_cc": 100, "memory": gib},
            {"host": "h1", "started_at": wall(1004.8), "ended_at": wall(1011.0),
             "committed_at": wall(1011.1), "cores_cc": 100, "memory": gib},
            {"host": "h1", "started_at": wall(1011.6), "ended_at": wall(1012),
             "committed_at": None, "cores_cc": 100, "memory": gib}]
    calls = dblog.reserve_calls(paths, runs, ttl=3.0, host_cc=200, host_memory=4 * gib,
                                operator=[("h3", wall(1011.5), wall(1011.9))],
                                until=wall(1025))
    got = [(c["server"], c["host"], round(c["at"] - WALL, 3), c["booked"], c["up"], c["room"])
           for c in calls]
    want = [("a", "h1", 1002.0, 0, False, True),
            ("a", "h1", 1004.5, 0, True, True),
            ("a", "h1", 1004.8, 2, True, False),
            ("a", "h2", 1004.9, 0, False, True),
            ("a", "h1", 1007.0, 0, True, False),
            ("a", "h1", 1009.8, 0, False, True),
            ("a", "h1", 1011.2, 0, True, True),
            ("a", "h1", 1011.51, 0, True, False),
            ("a", "h3", 1012.0, 0, False, True),
            ("a", "h1", 1013.1, 0, False, True),
            ("a", "h1", 1017.8, 0, True, True),
            ("b", "h1", 1019.0, 0, False, True),
            ("b", "h1", 1019.6, 0, True, True)]
    results.append(("dblog_reserve_calls",
                    [] if got == want else
                    [f"got  {g}" for g in got if g not in want]
                    + [f"want {w}" for w in want if w not in got]))

    broken = ServerLog()
    broken.record(1001, 500, "fqh_h1", "LOG", "duration: 1.000 ms  plan:\n{\"Query Text\": ")
    path = os.path.join(tmp, "dblog-broken.log")
    broken.write(path)
    try:
        dblog.reserve_calls({"a": path}, [], ttl=3.0, host_cc=200, host_memory=gib)
        results.append(("dblog_plan_unreadable_is_an_error", ["no LogError"]))
    except dblog.LogError:
        results.append(("dblog_plan_unreadable_is_an_error", []))
    return results


def main():
    passed = failed = 0
    with tempfile.TemporaryDirectory(prefix="frameq-check-") as tmp:
        results = []
        for fn in CASES:
            try:
                results.append((fn.__name__, run_case(fn, tmp)))
            except Exception:
                results.append((fn.__name__, [traceback.format_exc()]))
        results += cli_cases(tmp)
        try:
            results += dblog_cases(tmp)
        except Exception:
            results.append(("dblog_cases", [traceback.format_exc()]))
    for name, problems in results:
        if problems:
            failed += 1
            print(f"not ok - {name}")
            for p in problems:
                print(f"    {p}")
        else:
            passed += 1
            print(f"ok - {name}")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
