#!/usr/bin/python3
"""The witness render of the frameq fault-injection harness.

The agent starts one per booking (the layer's command), with FRAMEQ_PROC,
FRAMEQ_FRAME, FRAMEQ_JOB and FRAMEQ_HOST in its environment, and from the
layer's env FQH_DIR (the run's directory), FQH_GROUPS (the capped groups
of its job as "group:slots,...") and FQH_CONNINFO (inherited from its
agent: the host's fault proxies).

1. It takes an exclusive, non-blocking flock on witness/frame-<F> and writes
   its proc into it.  The kernel drops a flock only when its holder dies,
   so if a second run of the frame is alive, the lock is taken: it logs a
   witness_violation naming the holder, and carries on.
2. It takes one of the slot files caps/<group>/slot-<i> of each of its
   groups (a group has as many slots as its cap allows frames); when none
   is free, a live process exceeds the cap: it logs a slot_violation.
3. It writes its output, tagged with its proc, in chunks with pauses.
4. A hung or silent render (FQH_HANG, from its layer's env: "mode:runs:
   percent,...", given only to jobs whose layers have a `timeout` and a
   `timeout_no_output`) stops here on its first `runs` runs (marker files
   misbehaved/<frame>-<mode>-<i>), for a frame picked by its number (by
   another hash than FQH_MISBEHAVE's): it logs a hang event and never
   ends on its own.  "hang" goes on writing a line every 0.5 s (only the
   layer's timeout stops it), "silent" writes nothing more (its
   timeout_no_output stops it).  It holds its witness lock and slots all
   the while, as a real render would.  Only frameq's kill (or its lease's
   end, or SIGALRM after FQH_ALARM seconds) ends it.
5. A misbehaving render (FQH_MISBEHAVE, from its layer's env: "code:runs:
   percent,...") stops here: a frame picked by its number for one entry
   (percent of the frames, by the run's seed FQH_SEED) exits with that
   code, without publishing, on its first `runs` runs (counted in marker
   files misbehaved/<frame>-<code>-<i>, shared by every host of the machine),
   and renders normally after.  Code 75 is the harness's requeue exit code
   (frameq requeues the task after its requeue_delay); any other is a
   failure (retried after retry_delay).
6. It publishes the output only in a transaction that first checks
   frameq.owns(proc, secret) with the FRAMEQ_RUN_SECRET its agent gave it
   (true only for the proc's own render; it then holds the proc row
   against release until the commit), then exits 0.  Not the owner: exit
   3, nothing published.  Database unreachable for too long: exit 4.
   It logs in as its host's role (FQH_CONNINFO, its agent's conninfo).

Its stdout (the agent's log of the run, whose idle time the agent reports)
gets a line per chunk written and per publish attempt, so a render that
works is never idle for long.

Each event is one JSON line appended (O_APPEND, one write) to
history/renders.jsonl, with t = CLOCK_MONOTONIC seconds.
"""

import fcntl
import json
import os
import signal
import sys
import time

T0 = time.monotonic()
DIR = os.environ["FQH_DIR"]
PROC = int(os.environ["FRAMEQ_PROC"])
FRAME = int(os.environ["FRAMEQ_FRAME"])
JOB = int(os.environ["FRAMEQ_JOB"])
HOST = os.environ["FRAMEQ_HOST"]
SECRET = os.environ.get("FRAMEQ_RUN_SECRET")
HISTORY = os.open(os.path.join(DIR, "history", "renders.jsonl"),
                  os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)


def log(ev, t=None, **kw):
    rec = {"ev": ev, "t": time.monotonic() if t is None else t, "proc": PROC}
    rec.update(kw)
    os.write(HISTORY, (json.dumps(rec) + "\n").encode())


def render_time():
    """0.4 to 2.8 s, fixed per frame (FQH_RENDER_MAX is the upper bound)."""
    return 0.4 + (FRAME * 7919 % 25) / 10.0


def main():
    # a render stuck on a dead connection must not hang forever: the
    # default action of SIGALRM ends the process (the agent reports it)
    signal.alarm(int(os.environ.get("FQH_ALARM", "40")))

    witness = os.open(os.path.join(DIR, "witness", "frame-%d" % FRAME), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(witness, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.ftruncate(witness, 0)
        os.pwrite(witness, str(PROC).encode(), 0)
    except BlockingIOError:
        try:
            holder = int(os.pread(witness, 32, 0).decode() or "x")
        except ValueError:
            holder = None
        log("witness_violation", frame=FRAME, host=HOST, holder=holder)

    groups = []
    held = []
    for spec in filter(None, os.environ.get("FQH_GROUPS", "").split(",")):
        group, slots = spec.rsplit(":", 1)
        groups.append(group)
        gdir = os.path.join(DIR, "caps", group)
        for i in range(int(slots)):
            fd = os.open(os.path.join(gdir, "slot-%d" % i), os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                held.append(fd)
                break
            except BlockingIOError:
                os.close(fd)
        else:
            log("slot_violation", host=HOST, group=group)

    log("start", t=T0, frame=FRAME, job=JOB, host=HOST, pid=os.getpid(), groups=groups)

    out = os.path.join(DIR, "tmp", "%d.%d" % (FRAME, PROC))
    chunks = 4
    with open(out, "w") as f:
        for i in range(chunks):
            f.write("proc=%d chunk=%d\n" % (PROC, i))
            f.flush()
            print("chunk %d" % i, flush=True)
            time.sleep(render_time() / chunks)
    with open(out) as f:
        content = f.read()

    hang()

    code = misbehave()
    if code is None:
        code = publish(content)
    log("exit", code=code)
    sys.exit(code)


def picked(var, salt):
    """What the entry of env var ("what:runs:percent,...") that picks this
    frame says, if this is one of its first `runs` runs (counted in marker
    files misbehaved/<frame>-<what>-<i>), else None.  The frame is picked
    by its number, the run's seed and salt: the first entry's percent of
    the frames, the next entry's of the rest, and so on."""
    pick = (FRAME * salt + int(os.environ.get("FQH_SEED", "0"))) % 100
    for entry in filter(None, os.environ.get(var, "").split(",")):
        what, runs, percent = entry.split(":")
        if pick >= int(percent):
            pick -= int(percent)
            continue
        for i in range(int(runs)):
            try:
                os.close(os.open(os.path.join(DIR, "misbehaved", "%d-%s-%d" % (FRAME, what, i)),
                                 os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
                return what
            except FileExistsError:
                pass
        return None
    return None


def hang():
    """Hang here, writing a line every 0.5 s or nothing, if FQH_HANG picks
    this run (4. above)."""
    mode = picked("FQH_HANG", 2246822519)
    if mode is None:
        return
    log("hang", frame=FRAME, mode=mode)
    while True:
        if mode == "hang":
            print("still rendering", flush=True)
        time.sleep(0.5)


def misbehave():
    """The exit code of this run if it misbehaves (5. above), else None."""
    code = picked("FQH_MISBEHAVE", 2654435761)
    return None if code is None else int(code)


def publish(content):
    import psycopg2

    deadline = time.monotonic() + 12
    while True:
        print("publishing", flush=True)
        try:
            conn = psycopg2.connect(os.environ["FQH_CONNINFO"], connect_timeout=2,
                                    application_name="fqh-render")
            try:
                with conn:
                    with conn.cursor() as cur:
                        cur.execute("SELECT frameq.owns(%s, %s)", (PROC, SECRET))
                        if not cur.fetchone()[0]:
                            log("publish", frame=FRAME, result="not_owner")
                            return 3
                        cur.execute("INSERT INTO fqh.publish_log (frame, proc) VALUES (%s, %s)",
                                    (FRAME, PROC))
                        cur.execute("INSERT INTO fqh.output (frame, proc, content) VALUES (%s, %s, %s) "
                                    "ON CONFLICT (frame) DO UPDATE SET proc = excluded.proc, "
                                    "content = excluded.content", (FRAME, PROC, content))
                log("publish", frame=FRAME, result="published")
                return 0
            finally:
                conn.close()
        except psycopg2.Error as e:
            # an indeterminate commit is retried: publishing again is idempotent
            if time.monotonic() > deadline:
                log("publish", frame=FRAME, result="error", error=str(e).strip()[:200])
                return 4
            time.sleep(0.5)


if __name__ == "__main__":
    main()
