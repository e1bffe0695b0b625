"""What taking a CuPy array costs ucp before UCX sees it, on a GPU:
the per-call time of each step that a send or receive of a device array adds to a host one.

- `__cuda_array_interface__`: CuPy builds its interface dict (the bindings read it once per
  send or receive);
- `ucp._libs.arr.Array`: ucp's Python description of the array (UCX-Py's API; the transfer
  path itself reads the interface natively);
- `cuPointerGetAttribute(CONTEXT)` and `cuStreamSynchronize` on the stream CuPy exports: what
  the bindings' stream wait (CUDA Array Interface v3) calls per transfer.

Prints the median over blocks of calls, in µs per call. Exits 2 without CuPy or a GPU.

Run: python scripts/bench_cuda_intake.py [--calls 2000] [--blocks 20]
"""
import argparse
import ctypes
import statistics
import sys
import time


def per_call_us(fn, calls, blocks):
    times = []
    for _ in range(blocks):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - t0) / calls * 1e6)
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--blocks", type=int, default=20)
    args = parser.parse_args()
    try:
        import cupy

        a = cupy.zeros(1 << 20, dtype="u1")
    except Exception as e:  # no CuPy, no driver or no device: nothing to measure
        print(f"bench_cuda_intake: needs CuPy and a GPU ({e!r})", file=sys.stderr)
        sys.exit(2)
    from ucp._libs.arr import Array

    cuda = ctypes.CDLL("libcuda.so.1")
    cai = a.__cuda_array_interface__
    ptr, stream = cai["data"][0], cai.get("stream")
    ctx = ctypes.c_void_p()
    CU_POINTER_ATTRIBUTE_CONTEXT = 1
    rows = [
        ("CuPy __cuda_array_interface__", lambda: a.__cuda_array_interface__),
        ("ucp._libs.arr.Array(array)", lambda: Array(a)),
        (
            "cuPointerGetAttribute(CONTEXT)",
            lambda: cuda.cuPointerGetAttribute(ctypes.byref(ctx), CU_POINTER_ATTRIBUTE_CONTEXT, ctypes.c_uint64(ptr)),
        ),
        (f"cuStreamSynchronize(stream {stream})", lambda: cuda.cuStreamSynchronize(ctypes.c_void_p(stream or 0))),
        ("(an empty Python call, for scale)", lambda: None),
    ]
    print(f"# CuPy {cupy.__version__}, 1 MiB array, stream {stream}; median of {args.blocks} blocks of {args.calls}")
    for name, fn in rows:
        print(f"{name:<40} {per_call_us(fn, args.calls, args.blocks):8.2f} µs per call")


if __name__ == "__main__":
    main()
