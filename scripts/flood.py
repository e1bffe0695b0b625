"""Flood and close: a client process sends messages that nobody receives, then the server
closes the endpoint. Repeats for several cycles, each with a new client, and reports the
server's RSS. Exit status 1 if RSS after a later cycle exceeds RSS after the first by more
than --max-growth: unread messages must be dropped when their endpoint closes, and the memory
they took must be reused, not leaked.

    python scripts/flood.py                              # 8192 x 4 KiB per cycle, 5 cycles
    python scripts/flood.py --messages 2048 --cycles 4   # what the tests run

With --cap BYTES, the flood instead goes on while the endpoint stays open, against a server
whose UCXPY_MAX_UNCLAIMED_BYTES is BYTES: the server must close the endpoint before the
client is done, and its RSS must grow by at most twice the cap plus --max-rss-over MiB (UCX
keeps a 4 KiB eager message in about 8 KiB: 1 GiB of them unreceived took 2 060 MiB).
`--cap none` shows what happens without one (expect a failure). `--stream` floods the
endpoint's stream instead of its tag (bytes nobody reads).

    python scripts/flood.py --cap 67108864 --messages 262144   # 1 GiB offered, 64 MiB cap

RSS does not go back to where it was before the first flood: UCX's receive-buffer pools grow
to the peak and are kept for reuse (docs/reliability.md).
"""
import argparse
import asyncio
import multiprocessing
import os
import sys

import numpy as np

DONE_TAG = 0xF100D  # the client's last message, after its flood (same connection, so in order)
GO_TAG = 0xF100E  # the server's answer: close now


def rss_mib():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024


def client(port, messages, size):
    import ucp

    async def main():
        ep = await ucp.create_endpoint("127.0.0.1", port)
        flood = np.ones(size, dtype="u1")
        for _ in range(messages):
            await ep.send(flood)
        await ep.send(np.ones(1, dtype="u1"), tag=DONE_TAG, force_tag=True)
        await ep.recv(np.empty(1, dtype="u1"), tag=GO_TAG, force_tag=True)
        await ep.close()

    asyncio.run(main())


async def serve(args):
    import ucp

    rounds = asyncio.Queue()

    async def handle(ep):
        # Never receives the flood: waits for the client's last message, which arrives after it.
        await ep.recv(np.empty(1, dtype="u1"), tag=DONE_TAG, force_tag=True)
        queued = ep._worker.tag_probe(ep._tags["msg_recv"])
        peak = rss_mib()
        await ep.send(np.ones(1, dtype="u1"), tag=GO_TAG, force_tag=True)
        ep.abort()  # drops the unread flood
        await rounds.put((queued, peak))

    lf = ucp.create_listener(handle, ip="127.0.0.1")
    spawn = multiprocessing.get_context("spawn")
    baseline = rss_mib()
    print(f"flood: {args.cycles} cycles of {args.messages} x {args.size} B unread messages; server RSS before: {baseline:.0f} MiB")
    after = []
    for cycle in range(args.cycles):
        proc = spawn.Process(target=client, args=(lf.port, args.messages, args.size), daemon=True)
        proc.start()
        queued, peak = await asyncio.wait_for(rounds.get(), args.timeout)
        await asyncio.get_running_loop().run_in_executor(None, proc.join, args.timeout)
        if proc.exitcode != 0:
            sys.exit(f"flood: the client of cycle {cycle + 1} failed (exit code {proc.exitcode})")
        if not queued:
            sys.exit("flood: the flood was not waiting in UCX's queue: this run tested nothing")
        after.append(rss_mib())
        print(f"flood: cycle {cycle + 1}: RSS with the flood queued {peak:.0f} MiB, after close {after[-1]:.0f} MiB")
    lf.close()
    worst = max(after[1:], default=after[0])
    growth = worst / after[0] - 1
    print(f"flood: RSS after later cycles within {growth:+.1%} of after the first (allowed {args.max_growth:+.0%})")
    if growth > args.max_growth:
        print("flood: FAILED: memory grows with each flood")
        sys.exit(1)
    print("flood: passed")


def capped_client(port, messages, size, report, stream):
    import ucp
    from ucp.pending import wait

    async def main():
        ep = await ucp.create_endpoint("127.0.0.1", port)
        flood = np.ones(size, dtype="u1")
        sent = 0
        try:
            for _ in range(messages):
                if stream:
                    await wait(ep._ep.stream_send(flood))
                else:
                    await ep.send(flood)
                sent += 1
        except ucp.exceptions.UCXBaseException:
            pass  # the server closed the endpoint, as it should
        report.put(sent)
        ep.abort()

    asyncio.run(main())


async def serve_capped(args):
    """The flood on an open endpoint, against the cap."""
    import ucp

    os.environ["UCXPY_MAX_UNCLAIMED_BYTES"] = args.cap
    closed = asyncio.get_running_loop().create_future()
    peak = [0.0]

    async def handle(ep):
        # Never receives: watches RSS until the endpoint is closed under it.
        while not ep.closed() and not closed.done():
            peak[0] = max(peak[0], rss_mib())
            await asyncio.sleep(0.005)
        if not closed.done():
            closed.set_result(ep.closed())

    lf = ucp.create_listener(handle, ip="127.0.0.1")
    cap = ucp.core._get_ctx().worker.max_unclaimed_bytes
    spawn = multiprocessing.get_context("spawn")
    report = spawn.Queue()
    baseline = rss_mib()
    offered = args.messages * args.size
    what = "stream sends" if args.stream else "messages"
    print(f"flood: {args.messages} {what} x {args.size} B ({offered / 2**20:.0f} MiB) offered on an open endpoint; cap {cap} B; server RSS before: {baseline:.0f} MiB")
    proc = spawn.Process(target=capped_client, args=(lf.port, args.messages, args.size, report, args.stream), daemon=True)
    proc.start()
    sent = await asyncio.get_running_loop().run_in_executor(None, report.get, True, args.timeout)
    await asyncio.get_running_loop().run_in_executor(None, proc.join, args.timeout)
    cut_off = sent < args.messages and closed.done() and closed.result()
    print(f"flood: the client sent {sent} messages ({sent * args.size / 2**20:.0f} MiB) before its endpoint ended; cut off by the server: {cut_off}")
    print(f"flood: server RSS peak {peak[0]:.0f} MiB ({peak[0] - baseline:+.0f} MiB), now {rss_mib():.0f} MiB")
    lf.close()
    allowed = 2 * (cap or 0) / 2**20 + args.max_rss_over
    if not cut_off or peak[0] - baseline > allowed:
        print(f"flood: FAILED: the server must cut the client off and grow at most {allowed:.0f} MiB")
        sys.exit(1)
    print("flood: passed")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=8192, help="unread messages per cycle")
    parser.add_argument("--size", type=int, default=4096, help="bytes per message")
    parser.add_argument("--cycles", type=int, default=5)
    parser.add_argument("--max-growth", type=float, default=0.05, help="allowed RSS growth after the first cycle")
    parser.add_argument("--timeout", type=float, default=120, help="seconds allowed per cycle")
    parser.add_argument("--cap", help="flood an open endpoint against this UCXPY_MAX_UNCLAIMED_BYTES instead")
    parser.add_argument("--max-rss-over", type=float, default=64, help="with --cap: MiB of RSS growth allowed beyond the cap")
    parser.add_argument("--stream", action="store_true", help="with --cap: flood the endpoint's stream, not its tag")
    args = parser.parse_args()
    if args.cap is not None:
        os.environ.setdefault("UCX_NET_DEVICES", "lo")
        asyncio.run(serve_capped(args))
        return
    if args.cycles < 2:
        parser.error("--cycles must be at least 2 (growth is measured against the first)")
    os.environ.setdefault("UCX_NET_DEVICES", "lo")
    asyncio.run(serve(args))


if __name__ == "__main__":
    main()
