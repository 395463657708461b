#!/usr/bin/python3
"""Fault proxies for the frameq fault-injection harness.

One process serves the TCP relays of every simulated host.  Each host has
one relay per database server (its agent's and its renders' conninfo lists
the host's relays, never a server directly), so a partition cuts exactly
that host off, with real TCP behaviour on both sides:

    pass       forward everything
    blackhole  keep every socket open, forward nothing (new connections are
               accepted and then hang), like a cable pulled out; what was
               held back is forwarded, in order, when the mode changes
    reset      abort every connection with a TCP RST, and reset new ones
    cut        abort every connection with a TCP RST, and let new ones hang
               as in blackhole: a cable pulled out, seen by a client whose
               TCP settings (tcp_user_timeout, keepalives) end a silent
               connection; a proxy's kernel acknowledges what it is sent,
               so an established connection can only be ended, never left
               unanswered the way a real cut leaves it
    delay MS   forward each chunk MS milliseconds late, in order

Usage:  proxy.py HOST:[LISTEN_ADDRESS:]LISTEN_PORT:TARGET_PORT ...
(the listen address is 127.0.0.1 unless given, the target always
127.0.0.1) then lines on stdin:  "HOST MODE [MS]"; each is answered "ok" (or
"error ...") on stdout once it is in force.  End of input stops the proxy.
"""

import asyncio
import socket
import struct
import sys


class Host:
    def __init__(self, name):
        self.name = name
        self.mode = "pass"
        self.delay = 0.0
        self.changed = asyncio.Event()
        self.conns = set()

    def set_mode(self, mode, ms=0):
        self.mode = mode
        self.delay = ms / 1000.0
        self.changed.set()
        self.changed = asyncio.Event()
        if mode in ("reset", "cut"):
            for c in list(self.conns):
                c.abort()

    async def gate(self):
        """Wait until data may be forwarded; return the delay to apply."""
        while self.mode in ("blackhole", "reset", "cut"):
            await self.changed.wait()
        return self.delay if self.mode == "delay" else 0.0


def hard_close(writer):
    """Close with RST rather than FIN."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
    writer.transport.abort()


TASKS = set()    # strong references: a pending pump must not be collected


class Conn:
    def __init__(self, host, cr, cw, sr, sw):
        self.host = host
        self.ends = (cw, sw)
        self.tasks = [asyncio.ensure_future(self.pump(cr, sw)),
                      asyncio.ensure_future(self.pump(sr, cw))]
        for t in self.tasks:
            TASKS.add(t)
            t.add_done_callback(TASKS.discard)

    def abort(self):
        for w in self.ends:
            hard_close(w)
        for t in self.tasks:
            t.cancel()

    async def pump(self, reader, writer):
        try:
            while True:
                data = await reader.read(65536)
                if not data:
                    break
                delay = await self.host.gate()
                if delay:
                    await asyncio.sleep(delay)
                    # a mode change while sleeping (blackhole, reset) wins
                    await self.host.gate()
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError, asyncio.CancelledError):
            pass
        finally:
            self.host.conns.discard(self)
            for w in self.ends:
                try:
                    w.close()
                except Exception:
                    pass


async def serve(host, listen_address, listen_port, target_port):
    async def handle(cr, cw):
        if host.mode == "reset":
            hard_close(cw)
            return
        # a blackholed host's new connection hangs before reaching the server
        while host.mode in ("blackhole", "cut"):
            await host.changed.wait()
        if host.mode == "reset":
            hard_close(cw)
            return
        try:
            sr, sw = await asyncio.open_connection("127.0.0.1", target_port)
        except OSError:
            hard_close(cw)  # the server is down: refuse, as it would
            return
        host.conns.add(Conn(host, cr, cw, sr, sw))

    return await asyncio.start_server(handle, listen_address, listen_port, reuse_address=True)


async def control(hosts):
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while True:
        line = await reader.readline()
        if not line:
            return
        parts = line.decode().split()
        try:
            host = hosts[parts[0]]
            mode = parts[1]
            if mode not in ("pass", "blackhole", "reset", "cut", "delay"):
                raise ValueError("unknown mode " + mode)
            host.set_mode(mode, int(parts[2]) if mode == "delay" else 0)
            print("ok", flush=True)
        except (IndexError, KeyError, ValueError) as e:
            print("error", repr(e), flush=True)


async def main():
    hosts = {}
    servers = []
    for spec in sys.argv[1:]:
        name, *listen, target_port = spec.split(":")
        address, listen_port = listen if len(listen) == 2 else ["127.0.0.1"] + listen
        host = hosts.setdefault(name, Host(name))
        servers.append(await serve(host, address, int(listen_port), int(target_port)))
    print("ready", flush=True)
    await control(hosts)
    for s in servers:
        s.close()


if __name__ == "__main__":
    asyncio.run(main())
