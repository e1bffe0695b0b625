"""CPU versions of dask-cuda's `local_cupy` transpose-sum and `local_cudf_merge` benchmarks,
run on a LocalCluster once per protocol (tcp, our ucxa, and distributed-ucxx's ucxx when it is
installed), one after the other on 127.0.0.1, each protocol in a fresh Python process of its own
(so that only one UCX stack is ever loaded in the scheduler/client process). Prints, per
protocol, the wall clock of each run, the throughput (bytes of input processed / wall clock) and
the quartiles of the per-transfer bandwidth the workers logged.

Run: .venv/bin/python scripts/bench_dask.py [--workers 2] [--size 8000] [--rows 4000000] [--runs 3]
With distributed-ucxx (the `ucxx` protocol) too, from the venv that has it and our `ucp`:
    bash scripts/setup_bench_ucxx.sh && .venv-ucxx/bin/python scripts/bench_dask.py
"""
import argparse
import subprocess
import sys
import time

import numpy as np


def transpose_sum(client, n):
    import dask.array as da

    x = da.random.random((n, n), chunks=(n // 8, n // 8))
    x = client.persist(x)
    client.wait_for_workers(1)
    x.sum().compute()  # materialised before timing
    t0 = time.perf_counter()
    (x + x.T).sum().compute()
    return time.perf_counter() - t0, x.nbytes


def merge(client, rows):
    import dask.dataframe as dd
    import pandas as pd

    rng = np.random.default_rng(0)
    left = dd.from_pandas(
        pd.DataFrame({"key": rng.integers(0, rows, rows), "a": rng.random(rows)}), npartitions=16
    )
    right = dd.from_pandas(
        pd.DataFrame({"key": rng.integers(0, rows, rows // 4), "b": rng.random(rows // 4)}), npartitions=4
    )
    left, right = client.persist([left, right])
    nbytes = int(left.memory_usage(deep=True).sum().compute() + right.memory_usage(deep=True).sum().compute())
    t0 = time.perf_counter()
    len(left.merge(right, on="key", shuffle_method="tasks"))
    return time.perf_counter() - t0, nbytes


def transfer_bandwidths(client):
    """Bandwidths of the transfers over 1 MB (smaller ones measure latency, not bandwidth)."""
    logs = client.run(
        lambda dask_worker: [e["bandwidth"] for e in dask_worker.transfer_incoming_log if e["total"] > 1_000_000]
    )
    return [bw for values in logs.values() for bw in values]


def run(protocol, args):
    from distributed import Client, LocalCluster

    results = {}
    with LocalCluster(
        protocol=protocol,
        n_workers=args.workers,
        threads_per_worker=1,
        processes=True,
        host="127.0.0.1",
        dashboard_address=None,
    ) as cluster, Client(cluster) as client:
        for name, fn, size in (("transpose", transpose_sum, args.size), ("merge", merge, args.rows)):
            times = []
            for _ in range(args.runs):
                client.run(lambda dask_worker: dask_worker.transfer_incoming_log.clear())
                dt, nbytes = fn(client, size)
                times.append(dt)
            bws = transfer_bandwidths(client)
            results[name] = (times, nbytes, bws)
    return results


def versions():
    from importlib.metadata import PackageNotFoundError, version

    found = []
    for dist in ("distributed", "distributed-ucxx-cu12", "ucxx-cu12", "libucx-cu12"):
        try:
            found.append(f"{dist} {version(dist)}")
        except PackageNotFoundError:
            pass
    return ", ".join(found)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--size", type=int, default=8000, help="transpose: the array is size x size float64")
    parser.add_argument("--rows", type=int, default=4_000_000, help="merge: rows of the left table")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--protocols", default="tcp,ucxa,ucxx")
    parser.add_argument("--no-header", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    protocols = args.protocols.split(",")

    if not args.no_header:
        print(f"# {sys.executable}: {versions()}")
        print(f"{'protocol':<8} {'benchmark':<10} {'wall clock s (runs)':<28} {'throughput':>12} {'transfer bw p25/p50/p75 MiB/s':>32}")
    if len(protocols) > 1:
        # One fresh process per protocol.
        failed = []
        for protocol in protocols:
            argv = [a for a in sys.argv[1:]]
            cmd = [sys.executable, __file__, *argv, "--protocols", protocol, "--no-header"]
            if subprocess.run(cmd).returncode:
                failed.append(protocol)
        if failed:
            sys.exit(f"failed: {', '.join(failed)}")
        return

    from distributed.comm.registry import get_backend

    for protocol in protocols:
        try:
            get_backend(protocol)
        except Exception as e:  # e.g. distributed-ucxx not installed, or ucx's deprecation stub
            print(f"{protocol:<8} skipped: {type(e).__name__}: {str(e)[:80]}")
            continue
        for name, (times, nbytes, bws) in run(protocol, args).items():
            best = min(times)
            q = np.percentile(bws, [25, 50, 75]) / 2**20 if bws else [float("nan")] * 3
            print(
                f"{protocol:<8} {name:<10} {' '.join(f'{t:.2f}' for t in times):<28} "
                f"{nbytes / best / 2**20:>8.0f} MiB/s {q[0]:>10.0f} {q[1]:>8.0f} {q[2]:>8.0f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
