"""Every reserve() call of a harness run, as the database saw it, read from
the servers' logs (test/fault/harness.py writes the result into final.json's
"reserves"; test/fault/check.py's C5 passed_over rule reads it).

How the servers log (set up by the harness):
  - log_line_prefix = LOG_LINE_PREFIX: the log time as epoch seconds with
    milliseconds (%n, the DB's wall clock, like now() and the runs' times),
    the backend's pid and the session's user;
  - auto_explain is preloaded, and each host's login role (fqh_<host>, which
    its agent and renders use) has ROLE_SETTINGS: every statement of theirs
    that completes is logged with its JSON plan, its duration and each
    node's actual rows.  A statement that fails is not logged, so neither is
    a reserve() that raised (a stale epoch, a lapsed lease, a terminated
    session): it booked nothing that survived.

A call's "at" is its log time minus its duration (the executor's start: a
statement's planning comes before, its commit after, both in milliseconds);
"booked" is the rows of the plan's reserve() function scan.  "up" and "room"
are false whenever the host may have been down or full, since false only
excuses a call (check.py's docstring lists the conditions).
"""

import collections
import json
import re

LOG_LINE_PREFIX = "%m [%p] @%n %u: "
ROLE_SETTINGS = {"auto_explain.log_min_duration": "0", "auto_explain.log_analyze": "on",
                 "auto_explain.log_timing": "off", "auto_explain.log_format": "json"}
ROLE_PREFIX = "fqh_"

# "%m [%p] @%n %u: LEVEL:  message"; a multi-line message (a plan) goes on
# in lines that begin with a tab
RECORD = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? \S+ \[(\d+)\] @(\d+(?:\.\d+)?) "
                    r"(\S*): ([A-Z0-9]+):  (.*)$")
DURATION = re.compile(r"^duration: (\d+(?:\.\d+)?) ms  plan:$")
WORKER_STARTED = re.compile(r"^frameq worker: started; (?:no bookings or lease expiry for "
                            r"(\d+(?:\.\d+)?) s|frameq\.quarantine is off)")
# shared memory is set up again after these: a quarantine begins
RESETS = ("terminating any other active server processes",
          "all server processes terminated; reinitializing",
          "received smart shutdown request", "received fast shutdown request",
          "received immediate shutdown request", "database system is shut down",
          "starting PostgreSQL")
CALLS = (("reserve", "frameq.reserve("), ("heartbeat", "frameq.heartbeat("),
         ("attach", "frameq.attach("))

EPS = 0.005             # the log's millisecond resolution, and then some
ROUNDING = 0.05         # the worker prints its quarantine with one decimal
UNKNOWN_COMMIT = 1.0    # a run's end without a commit time: visible this late


class LogError(Exception):
    """A server log the harness cannot read as it configured it."""


Record = collections.namedtuple("Record", "pid t user level text where")
Statement = collections.namedtuple("Statement", "server pid host kind start end rows")


def read_records(path):
    """The log's records, each with its continuation lines joined."""
    records = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for n, line in enumerate(f, 1):
            line = line.rstrip("\n")
            m = RECORD.match(line)
            if m:
                pid, t, user, level, text = m.groups()
                records.append(Record(int(pid), float(t), user, level, [text], f"{path}:{n}"))
            elif records and line.startswith("\t"):
                records[-1].text.append(line[1:])
            # anything else (a tool's own output through pg_ctl -l) is not
            # a record
    return [r._replace(text="\n".join(r.text)) for r in records]


def function_rows(plan, name):
    """Actual rows of the first function scan of name in a JSON plan."""
    todo = [plan]
    while todo:
        node = todo.pop(0)
        if node.get("Function Name") == name:
            return int(round(node["Actual Rows"] * node.get("Actual Loops", 1)))
        todo.extend(node.get("Plans", []))
    return None


def statements(server, records):
    """The hosts' reserve, heartbeat and attach calls in one server's log."""
    out = []
    for r in records:
        if r.level != "LOG" or not r.user.startswith(ROLE_PREFIX):
            continue
        first, _, rest = r.text.partition("\n")
        m = DURATION.match(first)
        if not m:
            continue
        try:
            explained = json.loads(rest)
            query = explained["Query Text"]
        except (ValueError, KeyError, TypeError):
            raise LogError(f"{r.where}: an auto_explain record without its JSON plan") from None
        kind = next((k for k, text in CALLS if text in query), None)
        if kind is None:
            continue
        rows = None
        if kind == "reserve":
            rows = function_rows(explained["Plan"], "reserve")
            if rows is None:
                raise LogError(f"{r.where}: a reserve() call without a reserve function scan")
        out.append(Statement(server, r.pid, r.user[len(ROLE_PREFIX):], kind,
                             r.t - float(m.group(1)) / 1000.0, r.t, rows))
    return out


def quarantine_marks(records):
    """[(t, period)] of one server: period None for a reset (a quarantine
    begins, to end only after the next worker start), else the worker
    started and the quarantine ends period seconds later."""
    marks = []
    for r in records:
        m = WORKER_STARTED.match(r.text)
        if m:
            marks.append((r.t, float(m.group(1)) + ROUNDING if m.group(1) else 0.0))
        elif r.text.startswith(RESETS):
            marks.append((r.t, None))
    return marks


def past_quarantine(marks, start, end):
    """Was the server past its quarantine, and not restarted, from start to end?"""
    last = None
    for t, period in marks:
        if t <= start:
            last = (t, period)
        elif t <= end + EPS and period is None:
            return False
    return last is not None and last[1] is not None and start >= last[0] + last[1] + EPS


def reserve_calls(logs, runs, *, ttl, host_cc, host_memory, operator=(), until=None):
    """Every reserve() call in the servers' logs, oldest first.

    logs      {server name: path of its log}
    runs      final.json's runs, with cores_cc, memory and committed_at
    ttl       frameq.lease_ttl in seconds
    host_cc, host_memory  each host's capacity (cores in hundredths, bytes)
    operator  [(host, begin, end)] in wall seconds: the host's state was
              changed by an operator meanwhile
    until     calls that began later are left out
    """
    stmts, marks = [], {}
    for server, path in sorted(logs.items()):
        records = read_records(path)
        stmts += statements(server, records)
        marks[server] = quarantine_marks(records)
    leases = collections.defaultdict(list)       # (server, host) -> [(start, end)]
    sessions = collections.defaultdict(list)     # (server, host) -> statements
    for s in stmts:
        sessions[(s.server, s.host)].append(s)
        if s.kind in ("heartbeat", "attach"):
            leases[(s.server, s.host)].append((s.start, s.end))
    # each run holds its cores from its booking to the commit of its end
    need_cc = max((run["cores_cc"] for run in runs), default=100)
    need_memory = max((run["memory"] for run in runs), default=0)
    held = collections.defaultdict(list)
    for run in runs:
        if run["ended_at"] is None:
            free_at = None
        elif run.get("committed_at") is not None:
            free_at = max(run["ended_at"], run["committed_at"])
        else:
            free_at = run["ended_at"] + UNKNOWN_COMMIT
        held[run["host"]].append((run["started_at"], free_at, run["cores_cc"], run["memory"]))

    calls = []
    for s in sorted(stmts, key=lambda s: s.start):
        if s.kind != "reserve" or (until is not None and s.start > until):
            continue
        up = (past_quarantine(marks[s.server], s.start, s.end)
              and any(end <= s.start + EPS and start + ttl > s.end
                      for start, end in leases[(s.server, s.host)])
              and not any(h == s.host and s.start <= off + ttl and s.end >= on
                          for h, on, off in operator))
        live = [(cc, mem) for begin, free_at, cc, mem in held[s.host]
                if begin <= s.end + EPS and (free_at is None or free_at > s.start - EPS)]
        room = (sum(cc for cc, _ in live) + need_cc <= host_cc
                and sum(mem for _, mem in live) + need_memory <= host_memory
                and not any(o.pid != s.pid and o.start <= s.end + EPS and o.end >= s.start - EPS
                            for o in sessions[(s.server, s.host)]))
        calls.append({"host": s.host, "at": round(s.start, 6), "end": round(s.end, 6),
                      "booked": s.rows, "up": up, "room": room, "server": s.server, "pid": s.pid})
    return calls
