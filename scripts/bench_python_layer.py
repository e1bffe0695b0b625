"""What `ucp`'s Python layer adds to a small message: 8 B ping-pongs between two processes on
127.0.0.1 through ``Endpoint.send``/``recv`` ("api") and through the extension's calls that
they make ("native": ``tag_send_checked``/``tag_recv_checked`` with the same inline spin,
awaiting only a future they hand back), alternated block by block in the same pair of
processes, both sides switching together. This machine's speed moves between minutes, so only
blocks run side by side compare; the last column is each block's median over the first mode's
block of the same round.

    .venv/bin/python scripts/bench_python_layer.py [--blocks 16] [--block 2000] [--size 8]

Prints, per mode, the one-way time (half the median round trip of a block) as min / median /
max over the blocks, and the ratio to the first mode. Expects scripts/setup.sh to have run.
"""
import argparse
import asyncio
import multiprocessing as mp
import statistics
import time

import numpy as np

MODES = ("api", "native")
WARMUP = 100


def round_trip(ep, mode, size, first_send):
    """One round trip on ``ep`` in ``mode`` (the client sends first, the server answers)."""
    buf = np.zeros(size, dtype="u1")
    if mode == "api":
        send, recv = ep.send, ep.recv

        async def api():
            if first_send:
                await send(buf)
                await recv(buf)
            else:
                await recv(buf)
                await send(buf)

        return api

    from ucp.continuous_ucx_progress import inline_spin_us

    native, send_tag, recv_tag = ep._ep, ep._tags["msg_send"], ep._tags["msg_recv"]

    async def send_native():
        fut = native.tag_send_checked(buf, send_tag, inline_spin_us(), False)
        if fut is not None:
            await fut

    async def recv_native():
        fut = native.tag_recv_checked(buf, recv_tag, inline_spin_us())
        if fut is not None:
            await fut

    async def direct():
        if first_send:
            await send_native()
            await recv_native()
        else:
            await recv_native()
            await send_native()

    return direct


def server(args, port_queue):
    import ucp

    async def main():
        done = asyncio.Event()

        async def handler(ep):
            trips = [round_trip(ep, m, args.size, False) for m in MODES]
            for _ in range(args.blocks):
                for trip in trips:
                    for _ in range(args.block + WARMUP):
                        await trip()
            await ep.recv(bytearray(1))
            done.set()

        listener = ucp.create_listener(handler)
        port_queue.put(listener.port)
        await done.wait()
        listener.close()

    asyncio.run(main())


def client(args, port):
    import ucp

    async def main():
        ep = await ucp.create_endpoint("127.0.0.1", port)
        trips = [round_trip(ep, m, args.size, True) for m in MODES]
        clock = time.perf_counter_ns
        one_way = {m: [] for m in MODES}
        for _ in range(args.blocks):
            for mode, trip in zip(MODES, trips):
                times = []
                for _ in range(args.block + WARMUP):
                    start = clock()
                    await trip()
                    times.append(clock() - start)
                one_way[mode].append(statistics.median(times[WARMUP:]) / 2000)
        await ep.send(bytearray(1))
        await ep.close()
        first = one_way[MODES[0]]
        print(f"{args.size} B, {args.blocks} blocks of {args.block} round trips; one-way µs, min / median / max")
        for mode in MODES:
            v = sorted(one_way[mode])
            r = sorted(x / y for x, y in zip(one_way[mode], first))
            print(
                f"{mode:8s} {v[0]:.2f} / {statistics.median(v):.2f} / {v[-1]:.2f}   "
                f"/ {MODES[0]}: {r[0]:.3f} / {statistics.median(r):.3f} / {r[-1]:.3f}"
            )

    asyncio.run(main())


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--blocks", type=int, default=16, help="rounds of one block per mode")
    parser.add_argument("--block", type=int, default=2000, help="round trips timed per block")
    parser.add_argument("--size", type=int, default=8, help="message size in bytes")
    args = parser.parse_args()
    if args.blocks < 1 or args.block < 1 or args.size < 1:
        parser.error("--blocks, --block and --size must be at least 1")
    mp.set_start_method("spawn")
    ports = mp.Queue()
    peer = mp.Process(target=server, args=(args, ports))
    peer.start()
    try:
        client(args, ports.get(timeout=60))
    finally:
        peer.join(timeout=30)
        if peer.is_alive():
            peer.kill()


if __name__ == "__main__":
    main()
