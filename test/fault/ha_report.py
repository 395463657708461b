#!/usr/bin/python3
"""The failovers of a harness run under a pg_auto_failover formation
(harness.py --ha pg_auto_failover), in numbers, for doc/reliability.md.

    python3 test/fault/ha_report.py OUTDIR [OUTDIR ...]

Reads each run's history/harness.jsonl, final.json and agents/*.log (the
checker's inputs; run the checker for the verdict) and prints, over all the
runs given:

  - faults per kind;
  - failovers (changes of primary, as the harness's watcher saw them) by
    cause: the manager's fault whose span holds the promotion, or none;
  - per failover, by replication (synchronous or not, in force when the
    fault began): accepted reports whose commit the new primary does not
    have (the frame ran again) and submissions lost;
  - the time from the primary's death (the fault's start: the kill, the
    cut, the `perform failover` command) to the promotion, and to the
    first booking on the new primary, as multiples of frameq.lease_ttl
    (p50, p99, max);
  - the lease and the quarantine across each failover: the new primary's
    frameq worker starts (its server log) at the promotion itself, while
    pg_auto_failover may keep the node read-only until it confirms the
    old primary is gone; from that start, the first booking (never before
    the quarantine's end), and the runs released for a lost lease
    (host_lost) before the quarantine's end (must be none).
"""

import collections
import json
import os
import statistics
import sys

sys.dont_write_bytecode = True
import check  # noqa: E402
import dblog  # noqa: E402

LOSS_WINDOW = check.LOSS_WINDOW
HA_KINDS = ("ha_failover", "ha_node_kill", "ha_partition")


def pct(xs, p):
    xs = sorted(xs)
    if not xs:
        return None
    k = (len(xs) - 1) * p / 100.0
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def one_run(outdir, acc):
    hist = [json.loads(line) for line in open(os.path.join(outdir, "history", "harness.jsonl"))]
    final = json.load(open(os.path.join(outdir, "final.json")))
    ttl = final["params"]["ttl"]
    acc["ttl"] = ttl
    # the quarantine, exactly: the worker's log line rounds it to 0.1 s
    # (4.15 s shows as 4.2, which counted releases 30 ms after its end)
    exact = ttl * (1 + final["params"]["drift"]) + final["params"]["margin"]
    for k, n in final["faults"].items():
        acc["faults"][k] += n
    ons = {e["id"]: e for e in hist if e["ev"] == "fault_on"}
    offs = {e["id"]: e for e in hist if e["ev"] == "fault_off"}
    heal = next((e for e in hist if e["ev"] == "heal"), hist[-1])
    promotions = [e for e in hist if e["ev"] == "promotion"]

    # each promotion's cause: the fault (any kind that takes the primary
    # away) whose span holds it
    fos = []
    for p in promotions:
        cause = None
        for fid, on in ons.items():
            if on["kind"] not in HA_KINDS + ("server_crash", "worker_kill"):
                continue
            off = offs.get(fid, heal)
            if on["t"] <= p["promoted_t"] <= off["t"]:
                cause = on
                break
        if cause is None:
            # else the database's fault that came last before it, within 30 s
            # (the monitor acts on a crash a few seconds after it ended)
            before = [on for on in ons.values()
                      if on["kind"] in ("server_crash", "worker_kill", "terminate_backends")
                      and p["t"] - 30 <= on["t"] <= p["promoted_t"]]
            if before:
                cause = dict(max(before, key=lambda on: on["t"]))
                cause["kind"] += " (before it)"
        fos.append({"p": p, "cause": cause,
                    "sync": cause.get("sync") if cause else None,
                    "acks": 0, "submits": 0})
        acc["by_cause"][cause["kind"] if cause else "none"] += 1

    # accepted reports the final database does not reflect, each on the
    # first failover within the loss window after it
    runs_by_proc = collections.defaultdict(list)
    for r in final["runs"]:
        runs_by_proc[r["proc"]].append(r)
    reports, _ = check.load_agent_logs(os.path.join(outdir, "agents"))
    for rep in reports:
        if rep["answer"] != "accepted":
            continue
        if any(r["reason"] in ("completed", "killed", "timeout", "stalled", "oom")
               for r in runs_by_proc.get(rep["proc"], [])):
            continue
        later = [f for f in fos if rep["wall"] < f["p"]["wall"] <= rep["wall"] + LOSS_WINDOW]
        # or the failover of an asynchronous cut that holds it (check.py C2)
        cut = [f for f in fos if f["cause"] and f["cause"]["kind"] == "ha_partition"
               and f["sync"] is False and f["cause"]["wall"] <= rep["wall"]
               <= offs.get(f["cause"]["id"], heal)["wall"]]
        if later or cut:
            (later or cut)[0]["acks"] += 1
        else:
            acc["acks_unexplained"] += 1
    for e in hist:
        if e["ev"] == "lost_submit":
            before = [f for f in fos if f["p"]["t"] <= e["t"] + 0.5]
            if before:
                before[-1]["submits"] += 1

    # each server's frameq worker starts: (DB wall, quarantine seconds)
    worker_starts = {}
    for node in ("a", "b"):
        path = os.path.join(outdir, "pg", node, "server.log")
        if os.path.exists(path):
            worker_starts[node] = [(r.t, float(m.group(1) or 0)) for r in dblog.read_records(path)
                                   for m in [dblog.WORKER_STARTED.match(r.text)] if m]
    starts = sorted(((r["started_at"], r) for r in final["runs"]), key=lambda sr: sr[0])
    for f in fos:
        p = f["p"]
        mode = {True: "sync", False: "async", None: "unknown"}[f["sync"]]
        acc["lost"][mode].append((f["acks"], f["submits"]))
        acc["lost_by"][(f["cause"]["kind"] if f["cause"] else "none", mode)].append(f["acks"])
        first = next((s for s, _ in starts if s >= p["promoted_wall"]), None)
        ws = [w for w in worker_starts.get(p["new"], []) if w[0] <= p["promoted_wall"] + 0.5]
        if ws:
            w0, period = ws[-1]
            if period and abs(period - exact) <= 0.05:
                period = exact
            acc["read_only_after_start"].append(p["promoted_wall"] - w0)
            booked = next((s for s, _ in starts if s >= w0), None)
            if booked is not None:
                acc["first_after_start"].append(booked - w0)
                acc["quarantine"] = period
            early = [r for _, r in starts
                     if r["reason"] == "host_lost" and r["ended_at"] is not None
                     and w0 <= r["ended_at"] < w0 + period]
            acc["released_in_quarantine"] += len(early)
            acc["released_after"].extend(r["ended_at"] - w0 for _, r in starts
                                         if r["reason"] == "host_lost" and r["ended_at"] is not None
                                         and w0 <= r["ended_at"] < w0 + 60)
        if f["cause"] and f["cause"]["kind"] in HA_KINDS and first is not None:
            death = f["cause"]["wall"]
            acc["death_to_promotion"][f["cause"]["kind"]].append(p["promoted_wall"] - death)
            acc["death_to_booking"][f["cause"]["kind"]].append(first - death)
    acc["runs"] += 1


def show(name, xs, ttl):
    if not xs:
        return "%s: none" % name
    return ("%s: n=%d p50 %.1f s (%.1f x ttl), p99 %.1f s (%.1f x ttl), max %.1f s"
            % (name, len(xs), pct(xs, 50), pct(xs, 50) / ttl, pct(xs, 99), pct(xs, 99) / ttl, max(xs)))


def main():
    acc = {"faults": collections.Counter(), "by_cause": collections.Counter(),
           "lost": collections.defaultdict(list), "acks_unexplained": 0,
           "lost_by": collections.defaultdict(list),
           "first_after_start": [], "read_only_after_start": [], "released_after": [],
           "released_in_quarantine": 0, "quarantine": None,
           "death_to_promotion": collections.defaultdict(list),
           "death_to_booking": collections.defaultdict(list), "runs": 0, "ttl": 3.0}
    for d in sys.argv[1:]:
        one_run(d, acc)
    ttl = acc["ttl"]
    print("runs: %d" % acc["runs"])
    print("faults: %d  %s" % (sum(acc["faults"].values()),
                              json.dumps(dict(sorted(acc["faults"].items())))))
    print("failovers: %d by cause %s" % (sum(acc["by_cause"].values()),
                                        json.dumps(dict(sorted(acc["by_cause"].items())))))
    for mode, xs in sorted(acc["lost"].items()):
        acks = [a for a, _ in xs]
        subs = [s for _, s in xs]
        print("%s: %d failovers; accepted reports lost: %d in all, per failover max %d, "
              "mean %.2f; failovers losing any %d; submissions lost %d"
              % (mode, len(xs), sum(acks), max(acks), statistics.mean(acks),
                 sum(1 for a in acks if a), sum(subs)))
    for (kind, mode), acks in sorted(acc["lost_by"].items()):
        print("  %s, %s: %d failovers, accepted reports lost %s" % (kind, mode, len(acks), acks))
    print("accepted reports lost with no failover within %d s after them: %d"
          % (LOSS_WINDOW, acc["acks_unexplained"]))
    for kind in HA_KINDS:
        print(show("death to promotion, " + kind, acc["death_to_promotion"][kind], ttl))
        print(show("death to first booking, " + kind, acc["death_to_booking"][kind], ttl))
    both = [x for k in HA_KINDS for x in acc["death_to_booking"][k]]
    print(show("death to first booking, all", both, ttl))
    print(show("new primary's worker start to read-write (the manager's confirmation)",
               acc["read_only_after_start"], ttl))
    print("quarantine: %s s" % acc["quarantine"])
    print(show("new primary's worker start to its first booking", acc["first_after_start"], ttl))
    print(show("new primary's worker start to its releases for a lost lease (within 60 s)",
               acc["released_after"], ttl))
    print("runs released for a lost lease within the quarantine after a promotion: %d"
          % acc["released_in_quarantine"])


if __name__ == "__main__":
    main()
