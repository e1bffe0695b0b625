"""Where a ucp round trip's time goes, per side: inside the native calls that post a send or a
receive (UCX's work and the inline spin, with the GIL released) and outside them (Python,
asyncio, awaiting a future the spin did not finish). Both processes time themselves, so the
peer's Python shows up as its "outside" share, not inside this side's spin.

Ping-pong over 127.0.0.1 with `Endpoint.send`/`recv`, host memory (NumPy) and, where CuPy and a
GPU are present, device memory (CuPy). Prints, per side and size, the median round trip and
the median time outside the native calls per round trip (µs), and how many sends and receives
were not finished inline (their futures were awaited).

Run: python scripts/bench_py_overhead.py [--sizes 8,1048576] [--rounds 3000] [--memory host|cuda]
                                         [--no-error-handling]
(the UCX_* and UCXPY_* of the environment apply to both sides)
"""
import argparse
import asyncio
import statistics
import time

from peer_process import run_with_server


def arrays(memory, n):
    if memory == "cuda":
        import cupy

        return cupy.arange(n, dtype="u1"), cupy.zeros(n, dtype="u1")
    import numpy

    return numpy.arange(n, dtype="u1"), numpy.zeros(n, dtype="u1")


class Timed:
    """Stands in for an endpoint's native object (``ep._ep``): adds the time spent inside its
    two calls that post a send or a receive to `inside`, and counts in `left[name]` the calls
    that handed back a future (not finished inline); everything else goes to the native object."""

    def __init__(self, ep):
        self.inside = 0.0
        self.left = {"send": 0, "recv": 0}
        self._native = ep._ep
        ep._ep = self

    def __getattr__(self, name):
        return getattr(self._native, name)

    def _timed(self, name, post, *args, **kwargs):
        t0 = time.perf_counter()
        try:
            fut = post(*args, **kwargs)
        finally:
            self.inside += time.perf_counter() - t0
        if fut is not None:
            self.left[name] += 1
        return fut

    def tag_send_checked(self, *args, **kwargs):
        return self._timed("send", self._native.tag_send_checked, *args, **kwargs)

    def tag_recv_checked(self, *args, **kwargs):
        return self._timed("recv", self._native.tag_recv_checked, *args, **kwargs)


async def pingpong(ep, memory, sizes, rounds, first):
    """Runs the rounds on `ep` (`first`: this side sends first); per size, the medians of the
    round trip and of the time outside the post calls, in µs."""
    timed = Timed(ep)
    out = {}
    for n in sizes:
        a, b = arrays(memory, n)
        rtts, outside = [], []
        left0 = dict(timed.left)
        for i in range(rounds + rounds // 10):
            inside0, t0 = timed.inside, time.perf_counter()
            if first:
                await ep.send(a)
                await ep.recv(b)
            else:
                await ep.recv(b)
                await ep.send(b)
            rtt = time.perf_counter() - t0
            if i >= rounds // 10:
                rtts.append(rtt)
                outside.append(rtt - (timed.inside - inside0))
        left = {k: v - left0[k] for k, v in timed.left.items()}
        out[n] = (statistics.median(rtts) * 1e6, statistics.median(outside) * 1e6, left)
    return out


def report(side, results):
    for n, (rtt, outside, left) in results.items():
        futures = ", ".join(f"{k} {v}" for k, v in left.items())
        print(f"{side:6} {n:>9} B: round trip {rtt:8.1f} µs, outside the native calls {outside:6.1f} µs; "
              f"not finished inline: {futures}")


async def serve(memory, sizes, rounds, eh):
    import ucp

    done = asyncio.get_running_loop().create_future()

    async def handler(ep):
        try:
            done.set_result(await pingpong(ep, memory, sizes, rounds, first=False))
        except Exception as e:
            done.set_exception(e)

    lf = ucp.create_listener(handler, ip="127.0.0.1", endpoint_error_handling=eh)
    print("PORT", lf.port, flush=True)
    report("server", await done)


async def client(port, memory, sizes, rounds, eh):
    import ucp

    ep = await ucp.create_endpoint("127.0.0.1", port, endpoint_error_handling=eh)
    report("client", await pingpong(ep, memory, sizes, rounds, first=True))
    try:
        await ep.close()
    except ucp.exceptions.UCXError:
        pass  # without error handling, a peer that has already gone makes the close fail


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sizes", default="8,1048576", help="bytes per message, comma-separated")
    p.add_argument("--rounds", type=int, default=3000, help="timed round trips per size")
    p.add_argument("--memory", choices=("host", "cuda"), default="host")
    p.add_argument("--no-error-handling", action="store_true", help="endpoints without peer error handling")
    p.add_argument("--server", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args()
    sizes = [int(s) for s in a.sizes.split(",")]
    if a.server:
        asyncio.run(serve(a.memory, sizes, a.rounds, not a.no_error_handling))
        return
    args = [__file__, "--server", "--sizes", a.sizes, "--rounds", str(a.rounds), "--memory", a.memory]
    args += ["--no-error-handling"] if a.no_error_handling else []
    eh = not a.no_error_handling
    _, server_report = run_with_server(args, lambda port: asyncio.run(client(port, a.memory, sizes, a.rounds, eh)))
    print(server_report, end="")


if __name__ == "__main__":
    main()
