"""A ucp server or client for the partition tests (``test_partitions.py``), each run in a
network namespace of its own, the two joined through a router that the test makes drop
everything.

``server IP MODE``: listens on ``IP`` (any port), prints ``{"port": P}``, and serves one
client. ``client IP PORT MODE``: connects to it.

``MODE`` ``idle``: one 8-byte echo, then each side waits in a receive that no message will
meet. ``echo``: the client sends 1 MiB messages, each filled with its sequence number, and
the server sends each back; the client checks every byte, then sends the next.

Each side prints ``{"ready": true}`` once its side of the traffic runs (the client after three
echoes), ``{"error": CLASS, "msg": TEXT, "t": WALL_CLOCK}`` when its pending operation fails,
and, once its stdin closes, ``{"echoes": N, "corrupt": N, "longest_stall": S, "stall_at": T,
"last_at": T, "max_gap": S}`` and exits: how many echoes completed and how many came back
wrong, the longest time between two completed echoes and when it started, when the last one
completed (wall clock), and the longest the event loop was blocked."""
import asyncio
import json
import sys
import time

import ucp

SIZE = 1 << 20


def say(**what):
    print(json.dumps(what), flush=True)


class Heartbeat:
    """A task that wakes every 10 ms; ``max_gap``: the most it woke late, in seconds."""

    def __init__(self):
        self.max_gap = 0.0
        self.task = asyncio.create_task(self._beat())

    async def _beat(self):
        last = time.monotonic()
        while True:
            await asyncio.sleep(0.01)
            now = time.monotonic()
            self.max_gap = max(self.max_gap, now - last - 0.01)
            last = now


class Tally:
    def __init__(self):
        self.echoes = 0
        self.corrupt = 0
        self.last = time.time()
        self.longest_stall = 0.0
        self.stall_at = None

    def echoed(self, ok):
        now = time.time()
        if now - self.last > self.longest_stall:
            self.longest_stall, self.stall_at = now - self.last, self.last
        self.last = now
        self.echoes += 1
        self.corrupt += not ok


def payload(i):
    return i.to_bytes(8, "little") * (SIZE // 8)


async def traffic(ep, role, mode, tally):
    try:
        if mode == "idle":
            buf = bytearray(8)
            if role == "client":
                await ep.send(b"12345678")
                await ep.recv(buf)
            else:
                await ep.recv(buf)
                await ep.send(buf)
            say(ready=True)
            await ep.recv(bytearray(8))
        elif role == "client":
            buf = bytearray(SIZE)
            i = 0
            while True:
                sent = payload(i)
                await ep.send(sent)
                await ep.recv(buf)
                tally.echoed(buf == sent)
                i += 1
                if i == 3:
                    say(ready=True)
        else:
            buf = bytearray(SIZE)
            say(ready=True)
            while True:
                await ep.recv(buf)
                await ep.send(buf)
                tally.echoed(True)
        say(error=None, msg="the receive completed", t=time.time())
    except Exception as e:  # noqa: B902 (the class is the news)
        say(error=type(e).__name__, msg=str(e), t=time.time())


async def main():
    role, ip = sys.argv[1], sys.argv[2]
    beat = Heartbeat()
    tally = Tally()
    tasks = []
    if role == "server":
        mode = sys.argv[3]

        async def serve(ep):
            tasks.append(asyncio.current_task())
            await traffic(ep, role, mode, tally)

        listener = ucp.create_listener(serve, port=0, ip=ip)
        say(port=listener.port)
    else:
        port, mode = int(sys.argv[3]), sys.argv[4]
        ep = await ucp.create_endpoint(ip, port)
        tasks.append(asyncio.create_task(traffic(ep, role, mode, tally)))
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    for t in tasks:
        t.cancel()
    say(echoes=tally.echoes, corrupt=tally.corrupt, longest_stall=round(tally.longest_stall, 3),
        stall_at=tally.stall_at, last_at=tally.last, max_gap=round(beat.max_gap, 3))


if __name__ == "__main__":
    asyncio.run(main())
