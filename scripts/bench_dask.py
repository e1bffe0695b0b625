"""CPU versions of dask-cuda's `local_cupy` transpose-sum and `local_cudf_merge` benchmarks on a
2-worker LocalCluster over 127.0.0.1, for tcp, our ucxa, and distributed-ucxx's ucxx when it is
installed. Prints each protocol's wall clocks, its throughput (bytes of input / wall clock, from
the median and from the best run; each cluster first makes --warmup untimed runs) and, as
dask-cuda does, the quartiles of the bandwidth each
worker pair logged for its transfers over 1 MiB; then the transpose ratios (ucxa against tcp and
against ucxx) that docs/performance.md reports.

Every cluster runs in a fresh Python process (so that only one UCX stack is ever loaded in the
scheduler/client process). With --rounds R each protocol gets R clusters, interleaved (tcp,
ucxa, ucxx, tcp, ...), so that a slow spell of the machine does not fall on one protocol only.

Run: .venv/bin/python scripts/bench_dask.py [--rounds 3] [--runs 4] [--size 10000 --chunk-size 2500]
With distributed-ucxx (the `ucxx` protocol) too, from the venv that has it and our `ucp`:
    bash scripts/setup_bench_ucxx.sh && .venv-ucxx/bin/python scripts/bench_dask.py
"""
import argparse
import json
import statistics
import subprocess
import sys
import time
from collections import defaultdict

import numpy as np

BENCHMARKS = ("transpose", "merge")


def transpose_sum(client, args):
    import dask.array as da

    x = client.persist(da.random.random((args.size, args.size), chunks=args.chunk_size))
    x.sum().compute()  # materialised before timing
    t0 = time.perf_counter()
    (x + x.T).sum().compute()
    return time.perf_counter() - t0, x.nbytes


def merge(client, args):
    import dask.dataframe as dd
    import pandas as pd

    rows = args.rows
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


def incoming_transfers(client):
    """(receiving worker, sending worker, bytes, bytes/s) of each logged transfer."""
    logs = client.run(
        lambda dask_worker: [(e["who"], e["total"], e["bandwidth"]) for e in dask_worker.transfer_incoming_log]
    )
    return [(receiver, *entry) for receiver, entries in logs.items() for entry in entries]


def run_cluster(protocol, args):
    """One LocalCluster: every benchmark, `args.runs` times. Returns what the parent needs."""
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
        client.wait_for_workers(args.workers)
        names = {addr: i for i, addr in enumerate(sorted(client.scheduler_info()["workers"]))}
        fns = {"transpose": transpose_sum, "merge": merge}
        for name in args.benchmarks:
            for _ in range(args.warmup):  # connections between the workers, first-touch memory
                fns[name](client, args)
            times, moved, transfers = [], [], []
            for _ in range(args.runs):
                client.run(lambda dask_worker: dask_worker.transfer_incoming_log.clear())
                dt, nbytes = fns[name](client, args)
                times.append(dt)
                logged = incoming_transfers(client)
                moved.append(sum(total for *_, total, _ in logged))
                transfers += [
                    (names[receiver], names.get(sender, -1), total, bw)
                    for receiver, sender, total, bw in logged
                    if total >= args.ignore_size
                ]
            results[name] = {"times": times, "nbytes": nbytes, "moved": moved, "transfers": transfers}
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


def report(protocol, name, times, nbytes, moved, transfers):
    mib = 2**20
    median, best = statistics.median(times), min(times)
    print(
        f"{protocol:<6} {name:<9} runs {len(times):>2}: median {median:.2f} s, best {best:.2f} s "
        f"({min(times):.2f}-{max(times):.2f}); throughput {nbytes / median / mib:.0f} MiB/s median, "
        f"{nbytes / best / mib:.0f} MiB/s best; moved between workers {statistics.median(moved) / mib:.0f} MiB "
        f"a run (median)"
    )
    by_pair = defaultdict(list)
    for receiver, sender, total, bw in transfers:
        by_pair[sender, receiver].append((total, bw))
    for (w1, w2), entries in sorted(by_pair.items()):
        q = np.quantile([bw for _, bw in entries], [0.25, 0.5, 0.75]) / mib
        total = sum(t for t, _ in entries) / mib
        print(
            f"{'':<6} {'':<9} ({w1:02d},{w2:02d}) transfer bandwidth p25/p50/p75 "
            f"{q[0]:.0f} / {q[1]:.0f} / {q[2]:.0f} MiB/s ({len(entries)} transfers, {total:.0f} MiB)"
        )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--size", type=int, default=10000, help="transpose: the array is size x size float64")
    parser.add_argument("--chunk-size", type=int, default=2500, help="transpose: square chunks of this side")
    parser.add_argument("--rows", type=int, default=4_000_000, help="merge: rows of the left table")
    parser.add_argument("--runs", type=int, default=4, help="timed runs of each benchmark per cluster")
    parser.add_argument("--warmup", type=int, default=1, help="untimed runs first, per cluster")
    parser.add_argument("--rounds", type=int, default=3, help="clusters per protocol, interleaved")
    parser.add_argument("--ignore-size", type=int, default=2**20, help="transfers smaller than this are not counted")
    parser.add_argument("--protocols", default="tcp,ucxa,ucxx")
    parser.add_argument("--benchmarks", default=",".join(BENCHMARKS))
    parser.add_argument(
        "--cluster-timeout", type=float, default=900, help="seconds one cluster's runs may take before it is stopped"
    )
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.benchmarks = [b for b in args.benchmarks.split(",") if b]
    unknown = sorted(set(args.benchmarks) - set(BENCHMARKS))
    if unknown:
        parser.error(f"unknown benchmark(s) {', '.join(unknown)}; choose from {', '.join(BENCHMARKS)}")

    if args.child:  # one cluster of one protocol; the parent reads the JSON line
        print(json.dumps(run_cluster(args.protocols, args)), flush=True)
        return

    from distributed.comm.registry import get_backend

    protocols = []
    for protocol in args.protocols.split(","):
        try:
            get_backend(protocol)
            protocols.append(protocol)
        except Exception as e:  # e.g. distributed-ucxx not installed, or ucx's deprecation stub
            print(f"{protocol}: skipped: {type(e).__name__}: {str(e)[:80]}")
    print(f"# {sys.executable}: {versions()}")
    print(
        f"# {args.workers} workers x 1 thread; transpose {args.size}x{args.size} float64 in "
        f"{args.chunk_size}x{args.chunk_size} chunks; merge {args.rows} x {args.rows // 4} rows; "
        f"{args.rounds} rounds x ({args.warmup} untimed + {args.runs} timed runs)"
    )
    collected = {p: {b: {"times": [], "nbytes": 0, "moved": [], "transfers": []} for b in args.benchmarks} for p in protocols}
    failed = set()
    for round_ in range(args.rounds):
        for protocol in protocols:
            if protocol in failed:
                continue
            argv = [a for a in sys.argv[1:] if a != "--child"]
            cmd = [sys.executable, __file__, *argv, "--protocols", protocol, "--child"]
            try:
                # A cluster that hangs (a worker or the scheduler stuck on a failed peer) is
                # stopped and counted as failed, never waited on forever.
                out = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, timeout=args.cluster_timeout)
            except subprocess.TimeoutExpired:
                print(f"{protocol}: round {round_ + 1} stopped after {args.cluster_timeout:.0f} s")
                failed.add(protocol)
                continue
            lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
            if out.returncode or not lines:
                print(f"{protocol}: round {round_ + 1} failed (exit {out.returncode})")
                failed.add(protocol)
                continue
            cluster = json.loads(lines[-1])
            for name, r in cluster.items():
                c = collected[protocol][name]
                c["times"] += r["times"]
                c["moved"] += r["moved"]
                c["nbytes"] = r["nbytes"]
                c["transfers"] += r["transfers"]
            print(f"# round {round_ + 1} {protocol}: " + ", ".join(
                f"{name} {' '.join(f'{t:.2f}' for t in r['times'])} s "
                f"({' '.join(f'{m / 2**20:.0f}' for m in r['moved'])} MiB moved)"
                for name, r in cluster.items()
            ), flush=True)
    for protocol in protocols:
        for name in args.benchmarks:
            c = collected[protocol][name]
            if c["times"]:
                report(protocol, name, c["times"], c["nbytes"], c["moved"], c["transfers"])
    t = {p: collected[p].get("transpose", {}).get("times") for p in protocols}
    if t.get("ucxa"):
        for peer, target in (("tcp", 1), ("ucxx", 2)):
            if t.get(peer):
                med = statistics.median(t[peer]) / statistics.median(t["ucxa"])
                best = min(t[peer]) / min(t["ucxa"])
                print(f"transpose ucxa / {peer}: {med:.2f}x by median, {best:.2f}x by best (target >= {target}x)")
    if failed:
        sys.exit(f"failed: {', '.join(sorted(failed))}")


if __name__ == "__main__":
    main()
