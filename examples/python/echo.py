"""Echo between two processes with ucp and NumPy: the server receives an array, increments it
and sends it back; the client checks every element and prints latency and bandwidth.

Run: python examples/python/echo.py [--iters N]   (127.0.0.1 only)
"""
import argparse
import asyncio
import multiprocessing
import time

import numpy as np

SIZES = [8, 1024, 65536, 1 << 20]


def server(port_queue, iters):
    import ucp

    async def main():
        done = asyncio.get_running_loop().create_future()

        async def echo(ep):
            try:
                for size in SIZES:
                    buf = np.empty(size, dtype="u1")
                    for _ in range(iters):
                        await ep.recv(buf)
                        buf += 1
                        await ep.send(buf)
                await ep.close()
            except Exception as e:  # the client failed: end this process with the error
                done.set_exception(e)
            else:
                done.set_result(None)

        listener = ucp.create_listener(echo, ip="127.0.0.1")
        port_queue.put(listener.port)
        await done
        listener.close()

    asyncio.run(main())


async def client(port, iters):
    import ucp

    ep = await ucp.create_endpoint("127.0.0.1", port)
    print(f"ucp {ucp.__version__} on UCX {ucp.__ucx_version__}, two processes over 127.0.0.1")
    print(f"{'bytes':>9} {'iters':>6} {'one-way p50':>12} {'bandwidth':>12}")
    for size in SIZES:
        out = np.zeros(size, dtype="u1")
        back = np.empty_like(out)
        rtts = []
        for _ in range(iters):
            t0 = time.perf_counter()
            await ep.send(out)
            await ep.recv(back)
            rtts.append(time.perf_counter() - t0)
        assert (back == out + 1).all(), "the server's increment did not come back"
        rtts.sort()
        p50 = rtts[len(rtts) // 2]
        print(f"{size:>9} {iters:>6} {p50 / 2 * 1e6:>9.2f} us {2 * size / p50 / 2**20:>7.1f} MiB/s")
    await ep.close()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, default=1000)
    args = parser.parse_args()
    from ucp.utils import run_with_server, wait_for_port

    spawn = multiprocessing.get_context("spawn")
    q = spawn.Queue()
    p = spawn.Process(target=server, args=(q, args.iters))
    p.start()
    # If either side fails, the other is stopped and this exits non-zero within seconds.
    run_with_server(p, lambda: asyncio.run(client(wait_for_port(q, p), args.iters)))


if __name__ == "__main__":
    main()
