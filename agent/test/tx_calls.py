#!/usr/bin/env python3
"""Which transaction each frameq call of an agent went in, from a server log
written with log_statement = 'all' and a log_line_prefix that ends with
"%v " (the virtual transaction id: one per transaction, the same for every
statement of a pipeline up to its Sync).

    tx_calls.py SERVER_LOG PROC...

For the given procs, counts the transactions that carried a report_log or
a complete_many for any of them, and for each proc whether its report_log
went in the transaction of its complete_many.  Prints one line:

    transactions=N together=K apart=A no_log=L own_reserves=R

together: procs whose report_log and complete_many shared one transaction;
apart: procs whose report_log went in another transaction; no_log: procs
with no report_log at all; own_reserves: transactions with a reserve and no
complete_many (reserves of the agent's own) from the first to the last of
those N.  Proc arrays are the calls' fourth parameter.
"""
import re
import sys

LINE = re.compile(r" (\d+/\d+) LOG:  execute <unnamed>: (.*)$")
PARAM = re.compile(r"\$(\d+) = (NULL|'((?:[^']|'')*)')(?:, |$)")


def params(text):
    out = []
    pos = 0
    while pos < len(text):
        m = PARAM.match(text, pos)
        if not m:
            break
        out.append(None if m.group(2) == "NULL" else m.group(3).replace("''", "'"))
        pos = m.end()
    return out


def main():
    log, procs = sys.argv[1], set(sys.argv[2:])
    with open(log, encoding="utf-8", errors="replace") as f:
        lines = f.read().split("\n")
    seen = {"report_log": {}, "complete_many": {}}
    order = []              # (line, vxid, call) of every reserve and complete_many
    for i, line in enumerate(lines):
        m = LINE.search(line)
        if not m:
            continue
        vxid, sql = m.groups()
        for c in ("reserve", "complete_many"):
            if "frameq.%s(" % c in sql:
                order.append((i, vxid, c))
        call = next((c for c in seen if "frameq.%s(" % c in sql), None)
        if not call:
            continue
        for detail in lines[i + 1:i + 3]:
            if "DETAIL:  parameters: " in detail:
                p = params(detail.split("DETAIL:  parameters: ", 1)[1])
                for proc in (p[3] or "").strip("{}").split(","):
                    if proc in procs:
                        seen[call].setdefault(proc, set()).add(vxid)
                break
    txs = set()
    for calls in seen.values():
        for vx in calls.values():
            txs |= vx
    at = [i for i, vx, _ in order if vx in txs]
    own = set()
    if at:
        ends = {vx for _, vx, c in order if c == "complete_many"}
        own = {vx for i, vx, c in order
               if c == "reserve" and vx not in ends and at[0] <= i <= at[-1]}
    together = apart = no_log = 0
    for proc in procs:
        logs = seen["report_log"].get(proc, set())
        ends = seen["complete_many"].get(proc, set())
        if not logs:
            no_log += 1
        elif logs & ends:
            together += 1
        else:
            apart += 1
    print("transactions=%d together=%d apart=%d no_log=%d own_reserves=%d"
          % (len(txs), together, apart, no_log, len(own)))


main()
