#!/usr/bin/python3
"""Item 7 of bench/run: kill-order latency, and zombie detection.

    /usr/bin/python3 bench/kill_latency.py KILLS DOWNS

Connects through the PG* environment to the benchmark database, where
bench/run has registered and attached one host (row n = 1 of bench.h_kill)
and submitted a job for it.  Three connections: an agent (reserve,
complete, heartbeat), an operator (kill_frame, set_host_state) and a
listener on the host's channel frameq_host_<id>, read by its own thread,
which timestamps each notification as the socket becomes readable.

For each of KILLS frames: the agent books one frame; the operator calls
kill_frame() in a transaction and then sends COMMIT.  The latency runs from
sending COMMIT to the notification's arrival (one process, one monotonic
clock), so it includes the commit's own WAL flush: an upper bound.  The
time from COMMIT's acknowledgement is a lower bound (the notification can
even arrive first).  The agent then confirms the kill with complete(), as a
real agent would.  DOWNS more rounds do the same with
set_host_state(host, 'down') (and 'up' again after the confirmation).

Zombie detection: a frame is booked and completed; a heartbeat that still
lists its proc must return it in its kill list (the first heartbeat that
reports it).

Prints one line of JSON.
"""
import json
import select
import sys
import threading
import time

import psycopg2


def connect():
    conn = psycopg2.connect("")
    conn.autocommit = True
    return conn


def percentile(sorted_values, p):
    """nearest rank"""
    if not sorted_values:
        return None
    k = max(0, min(len(sorted_values) - 1, -(-len(sorted_values) * p // 100) - 1))
    return sorted_values[int(k)]


def main():
    kills = int(sys.argv[1])
    downs = int(sys.argv[2])

    agent = connect()
    operator = connect()
    operator.autocommit = False
    listener = connect()
    a = agent.cursor()
    o = operator.cursor()

    o.execute("SELECT name, token, epoch, id FROM bench.h_kill WHERE n = 1")
    host, token, epoch, host_id = o.fetchone()
    operator.commit()
    listener.cursor().execute("LISTEN frameq_host_%d" % host_id)

    arrivals = {}
    cond = threading.Condition()
    stopping = threading.Event()

    def listen():
        while not stopping.is_set():
            readable, _, _ = select.select([listener], [], [], 0.2)
            if not readable:
                continue
            arrived = time.monotonic()
            listener.poll()
            with cond:
                while listener.notifies:
                    n = listener.notifies.pop(0)
                    arrivals.setdefault(json.loads(n.payload)["proc"], arrived)
                cond.notify_all()

    thread = threading.Thread(target=listen, daemon=True)
    thread.start()

    def book():
        a.execute("SELECT proc, frame FROM frameq.reserve(%s, %s, %s, 1)", (host, token, epoch))
        row = a.fetchone()
        if row is None:
            raise SystemExit("reserve booked nothing")
        return row

    def complete(proc, status, signal):
        a.execute("SELECT frameq.complete(%s, %s, %s, %s, %s, %s)",
                  (host, token, epoch, proc, status, signal))
        return a.fetchone()[0]

    def wait_for(proc):
        with cond:
            if not cond.wait_for(lambda: proc in arrivals, timeout=30):
                raise SystemExit("no kill notification for proc %d within 30 s" % proc)
            return arrivals[proc]

    def measure(n, kill, restore=None):
        after_commit = []
        after_send = []
        bad = 0
        for _ in range(n):
            proc, frame = book()
            kill(frame)
            sent = time.monotonic()
            operator.commit()
            committed = time.monotonic()
            arrived = wait_for(proc)
            after_commit.append((arrived - committed) * 1000.0)
            after_send.append((arrived - sent) * 1000.0)
            # the agent confirms: its render died of the kill
            if complete(proc, 0, 15) != "accepted":
                bad += 1
            if restore:
                restore()
                operator.commit()
        after_commit.sort()
        after_send.sort()
        return {
            "n": n,
            "p50_ms": percentile(after_send, 50),
            "p99_ms": percentile(after_send, 99),
            "max_ms": after_send[-1] if after_send else None,
            "p50_from_ack_ms": percentile(after_commit, 50),
            "p99_from_ack_ms": percentile(after_commit, 99),
            "min_from_ack_ms": after_commit[0] if after_commit else None,
            "confirm_not_accepted": bad,
        }

    # warm up the three sessions' plans
    for _ in range(5):
        proc, _frame = book()
        complete(proc, 0, 0)

    result = {}
    result["kill_frame"] = measure(
        kills, lambda frame: o.execute("SELECT frameq.kill_frame(%s, 'bench kill')", (frame,)))
    result["host_down"] = measure(
        downs, lambda frame: o.execute("SELECT frameq.set_host_state(%s, 'down')", (host,)),
        restore=lambda: o.execute("SELECT frameq.set_host_state(%s, 'up')", (host,)))

    # zombie: a released proc still reported by the host
    proc, _frame = book()
    accepted = complete(proc, 0, 0)
    a.execute("SELECT kill FROM frameq.heartbeat(%s, %s, %s, %s)",
              (host, token, epoch, [proc]))
    kill_list = a.fetchone()[0] or []
    result["zombie"] = {"completed": accepted, "proc": proc,
                        "in_kill_list": proc in kill_list}

    stopping.set()
    thread.join()
    print(json.dumps(result))


if __name__ == "__main__":
    main()
