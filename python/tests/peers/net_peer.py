"""A ucp server or client for the network-fault tests (``test_network_faults.py``), run inside
a network namespace.

``server IP PORT``: listens (``PORT`` 0: any), prints ``{"port": P}``, echoes one 8-byte
message per client, and runs until its stdin closes; then prints ``{"max_gap": S}``, the
longest its event loop was blocked (measured as the client's is).

``client IP PORT [ATTEMPTS]``: prints ``{"connecting": true}``, then connects up to
``ATTEMPTS`` times (default 1; a failed attempt is retried at once) and echoes one message,
while a task on the same event loop wakes every 10 ms and records the longest time between
two of its wake-ups: how long the loop was blocked. Prints one JSON line: each attempt's
outcome and duration, and ``max_gap`` in seconds."""
import asyncio
import json
import sys
import time

import ucp


class Heartbeat:
    """A task that wakes every 10 ms; ``max_gap``: the most it woke late, in seconds."""

    def __init__(self):
        self.max_gap = 0.0
        self.running = True
        self.task = asyncio.create_task(self._beat())

    async def _beat(self):
        last = time.monotonic()
        while self.running:
            await asyncio.sleep(0.01)
            now = time.monotonic()
            self.max_gap = max(self.max_gap, now - last - 0.01)
            last = now

    async def stop(self):
        self.running = False
        await self.task
        return round(self.max_gap, 3)


async def server(ip, port):
    beat = Heartbeat()

    async def serve(ep):
        buf = bytearray(8)
        try:
            await ep.recv(buf)
            await ep.send(buf)
            await ep.close()
        except Exception:  # a client that timed out and went away
            ep.abort()

    listener = ucp.create_listener(serve, port=port, ip=ip)
    print(json.dumps({"port": listener.port}), flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    listener.close()
    print(json.dumps({"max_gap": await beat.stop()}), flush=True)


async def client(ip, port, attempts):
    beat = Heartbeat()
    await asyncio.sleep(0.1)
    print(json.dumps({"connecting": True}), flush=True)
    outcomes = []
    for _ in range(attempts):
        t0 = time.monotonic()
        try:
            ep = await ucp.create_endpoint(ip, port)
            await ep.send(b"12345678")
            buf = bytearray(8)
            await ep.recv(buf)
            await ep.close()
            outcome = "connected" if buf == b"12345678" else "garbled"
        except BaseException as e:  # noqa: B902 (TimeoutError, UCX's errors: the outcome is the news)
            outcome = f"{type(e).__name__}: {e}"
        outcomes.append({"outcome": outcome, "seconds": round(time.monotonic() - t0, 3)})
        if outcome == "connected":
            break
    print(json.dumps({"attempts": outcomes, "max_gap": await beat.stop()}), flush=True)


def main():
    role, ip, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if role == "server":
        asyncio.run(server(ip, port))
    else:
        asyncio.run(client(ip, port, int(sys.argv[4]) if len(sys.argv) > 4 else 1))


if __name__ == "__main__":
    main()
