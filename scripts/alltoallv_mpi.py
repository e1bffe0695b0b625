"""MPI's Alltoallv (mpi4py) with the same sizes and timing rule as examples/alltoall.rs: per
pair 1 KiB up to MAX by powers of 4, 4 MiB / size warm-up calls (3 to 1000), then the median over iterations of the
slowest rank's time for one call. Run under mpirun; rank 0 prints one RESULT line per size.
Arguments: MAX (bytes, default 64 MiB), ITERS (default 20), MIN (bytes, default 1 KiB)."""
import sys
import time

import numpy as np
from mpi4py import MPI

comm = MPI.COMM_WORLD
rank, ranks = comm.Get_rank(), comm.Get_size()
max_size = int(sys.argv[1]) if len(sys.argv) > 1 else 64 << 20
iters = int(sys.argv[2]) if len(sys.argv) > 2 else 20
size = int(sys.argv[3]) if len(sys.argv) > 3 else 1 << 10
while size <= max_size:
    send = np.empty(size * ranks, dtype="u1")
    for r in range(ranks):
        send[r * size:(r + 1) * size] = rank * ranks + r
    recv = np.empty_like(send)
    counts = [size] * ranks
    displs = [r * size for r in range(ranks)]
    n = max(3, -(-iters // 4)) if size > 4 << 20 else iters
    for _ in range(min(max((4 << 20) // size, 3), 1000)):  # warm-up, as examples/alltoall.rs
        comm.Alltoallv([send, counts, displs, MPI.BYTE], [recv, counts, displs, MPI.BYTE])
    times = []
    for _ in range(n):
        comm.Barrier()
        t = time.perf_counter_ns()
        comm.Alltoallv([send, counts, displs, MPI.BYTE], [recv, counts, displs, MPI.BYTE])
        times.append(comm.allreduce(time.perf_counter_ns() - t, op=MPI.MAX))
    assert all(recv[s * size] == s * ranks + rank for s in range(ranks))
    times.sort()
    median = max(times[len(times) // 2], 1)
    if rank == 0:
        moved = ranks * (ranks - 1) * size
        print(f"RESULT impl=mpi ranks={ranks} size={size} median_us={median / 1e3:.1f} gbps={moved / median:.3f}", flush=True)
    size *= 4
