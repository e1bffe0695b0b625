"""What synchronising a CUDA Array Interface v3 `stream` costs ucp, on a GPU.

ucp waits for an array's `stream` (`cuStreamSynchronize`) before UCX reads or writes it. This
measures that wait twice:

- alone: `cuStreamSynchronize` on the stream CuPy exports, idle, many calls (ctypes);
- in a transfer: round trips between two processes (127.0.0.1, so UCX can use cuda_ipc),
  the client's buffers alternately CuPy arrays (their interface names a stream, so ucp
  synchronises it at every send and receive) and the same memory behind an interface with no
  `stream` (nothing to synchronise). The server always uses the stream-less form, so the
  difference is the client's two synchronisations per round trip. Blocks of the two forms
  alternate, so drift on the machine hits both alike.

Prints median one-way latency per form and size. Exits 2 without CuPy or a GPU.

Run: python scripts/bench_cuda_stream_sync.py [--rounds 2000] [--blocks 6]
"""
import argparse
import asyncio
import ctypes
import statistics
import sys
import time

from peer_process import run_with_server

SIZES = [8, 1 << 20]


class NoStream:
    """The same device memory as `arr`, behind an interface without `stream`."""

    def __init__(self, arr):
        cai = dict(arr.__cuda_array_interface__)
        cai.pop("stream", None)
        self.__cuda_array_interface__ = cai
        self.arr = arr


def have_gpu():
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


async def serve(rounds_total):
    import cupy
    import ucp

    done = asyncio.get_running_loop().create_future()

    async def echo(ep):
        try:
            for n in SIZES:
                buf = NoStream(cupy.zeros(n, dtype="u1"))
                for _ in range(rounds_total):
                    await ep.recv(buf)
                    await ep.send(buf)
            await ep.close()
            done.set_result(None)
        except Exception as e:
            done.set_exception(e)

    lf = ucp.create_listener(echo, ip="127.0.0.1")
    print("PORT", lf.port, flush=True)
    await done


def sync_alone(stream, calls=20000):
    """Seconds per cuStreamSynchronize on an idle `stream`."""
    lib = ctypes.CDLL("libcuda.so.1")
    fn = lib.cuStreamSynchronize
    fn.argtypes = [ctypes.c_void_p]
    fn.restype = ctypes.c_int
    for _ in range(100):
        fn(stream)
    t0 = time.perf_counter()
    for _ in range(calls):
        rc = fn(stream)
    elapsed = time.perf_counter() - t0
    if rc != 0:
        raise SystemExit(f"cuStreamSynchronize({stream}) returned {rc}")
    # The loop and the ctypes call cost something of their own: take an empty call's time off.
    nop = ctypes.CDLL(None).getpid
    t0 = time.perf_counter()
    for _ in range(calls):
        nop()
    return (elapsed - (time.perf_counter() - t0)) / calls


async def client(port, rounds, blocks):
    import cupy
    import ucp

    ep = await ucp.create_endpoint("127.0.0.1", port)
    if not ep.cuda_support():
        raise SystemExit("UCX loaded no CUDA transport (check UCX_TLS)")
    results = {}
    for n in SIZES:
        out = cupy.arange(n, dtype="u1")
        back = cupy.zeros(n, dtype="u1")
        forms = {"with stream": (out, back), "no stream": (NoStream(out), NoStream(back))}
        times = {k: [] for k in forms}
        for block in range(blocks * 2 + 1):  # block 0 warms up
            name = list(forms)[block % 2]
            o, b = forms[name]
            for _ in range(rounds):
                t0 = time.perf_counter()
                await ep.send(o)
                await ep.recv(b)
                if block:
                    times[name].append(time.perf_counter() - t0)
        if not bool((back == out).all()):
            raise SystemExit(f"{n} bytes: the echo came back different")
        results[n] = {k: statistics.median(v) / 2 for k, v in times.items()}
    await ep.close()
    return out.__cuda_array_interface__.get("stream"), results


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=2000, help="round trips per block (default 2000)")
    p.add_argument("--blocks", type=int, default=3, help="blocks per form and size (default 3)")
    p.add_argument("--server", type=int, metavar="ROUNDS", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.server is not None:
        asyncio.run(serve(a.server))
        return
    if not have_gpu():
        print("bench_cuda_stream_sync: no CuPy or no GPU here; nothing measured")
        sys.exit(2)
    rounds_total = a.rounds * (a.blocks * 2 + 1)
    (stream, results), _ = run_with_server(
        [__file__, "--server", str(rounds_total)], lambda port: asyncio.run(client(port, a.rounds, a.blocks))
    )
    print(f"CuPy exports stream {stream!r}")
    if stream:
        print(f"cuStreamSynchronize({stream}) alone, idle: {sync_alone(stream) * 1e6:.2f} µs per call")
    for n, r in results.items():
        w, o = r["with stream"] * 1e6, r["no stream"] * 1e6
        print(f"{n:>8} B one-way: with stream {w:.1f} µs, no stream {o:.1f} µs, difference {w - o:+.1f} µs")


if __name__ == "__main__":
    main()
