"""The distributed hash join against Dask's dataframe merge of the same data.

Runs, on RANKS processes of this machine with ROWS rows per rank and table:
- ours: examples/python/hash_join.py under `python -m ucp.launch` (ucp.collective's
  alltoallv), and the Rust twin examples/hash_join.rs (release build);
- Dask: a LocalCluster of RANKS worker processes (one thread each) merging the same tables
  (`shuffle_method="p2p"`), over `tcp://` and over our `ucxa://`.
Every run's pair count and checksum must equal the others' (the same join), and each reports
its end-to-end time: ours from the first rank's start (tables made, partitioned, exchanged,
joined; the slowest rank), Dask's from the merge's submission to the result (its input tables
already persisted in the workers, so table-making is not counted against it).

Usage: python scripts/bench_join_dask.py [--ranks 2] [--rows 1000000] [--repeat 3]
(expects scripts/setup.sh to have run; prints a Markdown table, the median of --repeat runs).
"""
import argparse
import logging
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples" / "python"))
import hash_join  # noqa: E402  (the tables, the mix function and the checksum rule)

RESULT = re.compile(r"RESULT pairs=(\d+) checksum=(0x[0-9a-f]+)")
END_TO_END = re.compile(r"end to end ([\d.]+) ms")


def ours(cmd):
    """(ms, pairs, checksum) of one run of one of our joins."""
    env = dict(os.environ, UCX_NET_DEVICES=os.environ.get("UCX_NET_DEVICES", "lo"))
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600, cwd=ROOT)
    if out.returncode != 0:
        raise SystemExit(f"{cmd} failed:\n{out.stdout}\n{out.stderr}")
    r, t = RESULT.search(out.stdout), END_TO_END.search(out.stdout)
    return float(t.group(1)), int(r.group(1)), int(r.group(2), 16)


def frame(side, rank, rows, ranks):
    import pandas as pd

    keys, payload = hash_join.table(side, rank, rows, ranks)
    return pd.DataFrame({"key": keys, f"p{side}": payload})


def pair_checksum(df):
    import pandas as pd

    with np.errstate(over="ignore"):
        mixed = hash_join.mix((df["p0"].to_numpy(np.uint64) * np.uint64(31)) ^ df["p1"].to_numpy(np.uint64))
    return pd.DataFrame({"pairs": [len(df)], "checksum": [int(mixed.sum(dtype=np.uint64))]}, dtype=object)


def dask_join(protocol, ranks, rows, repeat):
    """[(ms, pairs, checksum)] of `repeat` merges on one cluster."""
    import dask
    import dask.dataframe as dd
    from dask.distributed import Client, LocalCluster, wait

    kw = {"protocol": protocol}
    if protocol == "ucxa":
        kw["host"] = "127.0.0.1"
    with dask.config.set({"ucxa.net-devices": "lo"}), LocalCluster(
        n_workers=ranks, threads_per_worker=1, processes=True, dashboard_address=None, **kw
    ) as cluster, Client(cluster) as client:
        runs = []
        for _ in range(repeat):
            # Fresh inputs (delayed with pure=False: new keys) each run, persisted before the
            # timer starts: a merge of the same keys submitted again finds the last run's
            # results still in memory and takes ~10 ms.
            parts = lambda side: [dask.delayed(frame, pure=False)(side, r, rows, ranks) for r in range(ranks)]  # noqa: E731
            left = dd.from_delayed(parts(0), meta=frame(0, 0, 0, 1))
            right = dd.from_delayed(parts(1), meta=frame(1, 0, 0, 1))
            left, right = client.persist([left, right])
            wait([left, right])
            t = time.perf_counter()
            merged = left.merge(right, on="key", shuffle_method="p2p")
            out = merged.map_partitions(pair_checksum, meta={"pairs": object, "checksum": object}).compute()
            ms = (time.perf_counter() - t) * 1e3
            runs.append((ms, int(out["pairs"].sum()), sum(int(c) for c in out["checksum"]) & (2**64 - 1)))
            del left, right, merged
        return runs


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--repeat", type=int, default=3)
    a = p.parse_args()
    # The scheduler (in this process) logs every p2p shuffle's start and end as warnings.
    logging.getLogger("distributed.shuffle").setLevel(logging.ERROR)
    subprocess.run(["cargo", "build", "-q", "--release", "-p", "ucx-async", "--example", "hash_join"], cwd=ROOT, check=True)
    py_cmd = [sys.executable, "-m", "ucp.launch", "-n", str(a.ranks), "examples/python/hash_join.py", "--rows", str(a.rows)]
    rust_cmd = [str(ROOT / "target/release/examples/hash_join"), "--ranks", str(a.ranks), "--rows", str(a.rows)]
    results = {
        "ours, Python (ucp.collective)": [ours(py_cmd) for _ in range(a.repeat)],
        "ours, Rust (ucx-async Communicator)": [ours(rust_cmd) for _ in range(a.repeat)],
        "Dask merge, p2p shuffle, tcp://": dask_join("tcp", a.ranks, a.rows, a.repeat),
        "Dask merge, p2p shuffle, ucxa://": dask_join("ucxa", a.ranks, a.rows, a.repeat),
    }
    answers = {(p, c) for runs in results.values() for _, p, c in runs}
    print(f"{a.ranks} ranks x {a.rows} rows per rank and table, median of {a.repeat}; every run found "
          + ("the same pairs and checksum" if len(answers) == 1 else f"DIFFERENT answers: {answers}"))
    print("| join | end to end (ms) | pairs |")
    print("|---|---|---|")
    for name, runs in results.items():
        print(f"| {name} | {statistics.median(r[0] for r in runs):.1f} | {runs[0][1]} |")
    return 0 if len(answers) == 1 else 1


if __name__ == "__main__":
    raise SystemExit(main())
