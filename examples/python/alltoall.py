"""alltoallv throughput over ucp.collective's Communicator, the Python twin of
examples/alltoall.rs and of scripts/alltoallv_mpi.py (mpi4py), with the same sizes and timing
rule: per pair --min-size (default 1 KiB) up to --max-size (default 64 MiB) by powers of 4,
4 MiB / size warm-up calls (3 to 1000), then the median over --iters calls (fewer above
4 MiB) of the slowest rank's time for one call. Parts are slices of one NumPy array (on huge
pages from 4 MiB, as NumPy allocates them), as MPI's are; the received parts reuse one list of
bytearrays. Rank 0
prints one RESULT line per size.

Run: python -m ucp.launch -n 2 examples/python/alltoall.py [--max-size B] [--iters N] [--window]
UCXA_ERROR_HANDLING=none gives the ranks endpoints without peer error handling, as MPI's.
--window times ``SharedWindow.alltoallv`` instead (slots of the part size; the parts read
where they landed), as ``alltoall --window-only`` does in Rust.
"""
import argparse
import asyncio
import struct
import time

import numpy as np

from ucp.collective import Communicator


async def main(args):
    comm = await Communicator.from_env()
    rank, ranks = comm.rank, comm.size
    size = max(args.min_size, 1)
    got = []
    while size <= args.max_size:
        # One array holding every rank's part, as MPI's side has them (NumPy puts arrays of
        # 4 MiB and more on huge pages, which 4 ranks' 1 MiB parts reach together).
        send = np.repeat(np.arange(rank * ranks, (rank + 1) * ranks, dtype="u1"), size)
        parts = [send[r * size : (r + 1) * size] for r in range(ranks)]
        n = max(3, -(-args.iters // 4)) if size > 4 << 20 else args.iters
        if args.window:
            window = await comm.shared_window(size)

            async def call():
                await window.alltoallv(parts)
                return window.parts()

        else:

            async def call():
                await comm.alltoallv_into(parts, got)
                return got

        for _ in range(min(max((4 << 20) // size, 3), 1000)):
            await call()
        times = []
        everyone = bytearray(8 * ranks)
        for _ in range(n):
            await comm.barrier()
            t = time.perf_counter_ns()
            out = await call()
            mine = struct.pack("<Q", time.perf_counter_ns() - t)
            await comm.allgather(mine, everyone)
            times.append(max(struct.unpack(f"<{ranks}Q", everyone)))
        wrong = [s for s in range(ranks) if len(out[s]) != size or out[s][0] != (s * ranks + rank) % 256]
        if wrong:
            raise SystemExit(f"rank {rank}: wrong parts from ranks {wrong} at {size} bytes")
        times.sort()
        median = max(times[len(times) // 2], 1)
        if rank == 0:
            moved = ranks * (ranks - 1) * size
            print(
                f"RESULT impl={'ucp-python-window' if args.window else 'ucp-python'} ranks={ranks} size={size} median_us={median / 1e3:.1f} gbps={moved / median:.3f}",
                flush=True,
            )
        size *= 4
    await comm.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--min-size", type=int, default=1 << 10)
    parser.add_argument("--max-size", type=int, default=64 << 20)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--window", action="store_true", help="time SharedWindow.alltoallv instead")
    asyncio.run(main(parser.parse_args()))
