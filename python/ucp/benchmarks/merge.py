"""The distributed merge benchmark behind ``cudf_merge`` (cuDF tables on GPUs, UCX-Py's
benchmark and command line) and ``numpy_merge`` (the same on host memory with NumPy, which
runs anywhere).

Each worker builds two tables of ``--chunk-size`` rows: a "build" table whose keys are unique
across the cluster, and an "other" table of which a ``--frac-match`` share of keys are build
keys. Every iteration hash-partitions both tables into one part per worker, sends each worker
its part over ``ucp`` endpoints (all at once), concatenates what it received with its own part,
and merges (inner join on ``key``). The workers run as processes of
``ucp.benchmarks.utils.run_cluster_workers``, synchronised by ``run_cluster_server``.

Reported: wall-clock per iteration, the exchange's bandwidth (bytes this worker sent to others
over the time its exchanges took, harmonic mean over workers), and throughput (rows' bytes of
every worker's tables per second).
"""
import argparse
import asyncio
import gc
import json
import os
import pickle
import tempfile
import time
from time import monotonic as clock

import numpy as np

from ucp._libs.utils import format_bytes, format_time, print_multi, print_separator
from ucp.benchmarks.utils import _run_cluster_server, _run_cluster_workers, run_cluster_server, run_cluster_workers
from ucp.utils import hmean

__all__ = ["main", "parse_args", "NumpyTables", "CudfTables"]


class NumpyTables:
    """Tables as dicts of equal-length NumPy int64 columns; the merge is a sort-and-search
    join (build keys are unique)."""

    name = "NumPy"

    def __init__(self, args):
        self.args = args

    def generate(self, rank, rows, n_chunks, kind, frac_match):
        rng = np.random.default_rng(1_000_003 * rank + (kind == "other"))
        if kind == "build":
            start = rows * rank
            return {"key": np.arange(start, start + rows, dtype=np.int64), "payload": np.arange(rows, dtype=np.int64)}
        # A `frac_match` share of keys anywhere in the cluster's build keys, the rest beyond them.
        total = rows * n_chunks
        matching = rng.random(rows) < frac_match
        keys = np.where(matching, rng.integers(0, total, rows), rng.integers(total, 2 * total, rows))
        return {"key": keys.astype(np.int64), "payload": rng.integers(0, 1 << 40, rows, dtype=np.int64)}

    def partition(self, table, n):
        part = table["key"] % n
        order = np.argsort(part, kind="stable")
        bounds = np.searchsorted(part[order], np.arange(n + 1))
        return [{c: v[order[bounds[i] : bounds[i + 1]]] for c, v in table.items()} for i in range(n)]

    def nbytes(self, table):
        return sum(v.nbytes for v in table.values())

    def rows(self, table):
        return len(table["key"])

    def concat(self, tables):
        return {c: np.concatenate([t[c] for t in tables]) for c in tables[0]}

    def merge(self, build, other):
        order = np.argsort(build["key"], kind="stable")
        keys = build["key"][order]
        at = np.searchsorted(keys, other["key"])
        hit = at < len(keys)
        hit[hit] = keys[at[hit]] == other["key"][hit]
        src = order[at[hit]]
        return {"key": other["key"][hit], "payload_x": build["payload"][src], "payload_y": other["payload"][hit]}

    async def send(self, ep, table):
        columns = list(table.values())
        await ep.send(np.array([len(columns[0])], dtype=np.uint64))
        for col in columns:
            await ep.send(np.ascontiguousarray(col))

    async def recv(self, ep):
        n = np.empty(1, dtype=np.uint64)
        await ep.recv(n)
        table = {}
        for name in ("key", "payload"):
            table[name] = np.empty(int(n[0]), dtype=np.int64)
            await ep.recv(table[name])
        return table

    def prepare(self, rank):
        pass


class CudfTables:
    """cuDF DataFrames on the worker's GPU, moved as UCX-Py's benchmark moved them: the pickled
    header of ``device_serialize``, then each device frame. Written to UCX-Py's interface; this
    project's machines have no GPU, so it has not run here."""

    name = "cuDF"

    def __init__(self, args):
        # RMM and cuDF read this at import; set before importing them.
        os.environ.setdefault("RAPIDS_NO_INITIALIZE", "True")
        import cudf
        import cupy
        import rmm
        from cudf.core.abc import Serializable
        from rmm.allocators.cupy import rmm_cupy_allocator

        self.args, self.cudf, self.cupy, self.rmm = args, cudf, cupy, rmm
        self.serializable, self.allocator = Serializable, rmm_cupy_allocator

    def prepare(self, rank):
        self.rmm.reinitialize(pool_allocator=True, initial_pool_size=self.args.rmm_init_pool_size)
        self.cupy.cuda.set_allocator(self.allocator)

    def generate(self, rank, rows, n_chunks, kind, frac_match):
        cp = self.cupy
        rs = cp.random.RandomState(1_000_003 * rank + (kind == "other"))
        if kind == "build":
            start = rows * rank
            return self.cudf.DataFrame(
                {"key": cp.arange(start, start + rows, dtype="int64"), "payload": cp.arange(rows, dtype="int64")}
            )
        total = rows * n_chunks
        matching = rs.random_sample(rows) < frac_match
        keys = cp.where(matching, rs.randint(0, total, rows), rs.randint(total, 2 * total, rows))
        return self.cudf.DataFrame({"key": keys.astype("int64"), "payload": rs.randint(0, 1 << 40, rows, dtype="int64")})

    def partition(self, table, n):
        return table.partition_by_hash(["key"], n)

    def nbytes(self, table):
        return int(table.memory_usage(index=True).sum())

    def rows(self, table):
        return len(table)

    def concat(self, tables):
        return self.cudf.concat(tables)

    def merge(self, build, other):
        return build.merge(other, on="key")

    async def send(self, ep, table):
        header, frames = table.device_serialize()
        header["frame_ifaces"] = [f.__cuda_array_interface__ for f in frames]
        header = pickle.dumps(header)
        await ep.send(np.array([len(header)], dtype=np.uint64))
        await ep.send(header)
        for frame in frames:
            await ep.send(frame)

    async def recv(self, ep):
        n = np.empty(1, dtype=np.uint64)
        await ep.recv(n)
        header = bytearray(int(n[0]))
        await ep.recv(header)
        header = pickle.loads(header)
        frames = [self.cupy.empty(i["shape"], dtype=i["typestr"]) for i in header["frame_ifaces"]]
        for frame in frames:
            await ep.recv(frame)
        return self.serializable.device_deserialize(header, frames)


async def _barrier(rank, eps):
    # Rank 0 hears from everyone, then answers everyone.
    token = np.zeros(1, dtype=np.uint8)
    if rank == 0:
        await asyncio.gather(*(ep.recv(np.empty(1, dtype=np.uint8)) for ep in eps.values()))
        await asyncio.gather(*(ep.send(token) for ep in eps.values()))
    else:
        await eps[0].send(token)
        await eps[0].recv(np.empty(1, dtype=np.uint8))


async def _exchange(lib, rank, eps, parts, timings):
    """Sends part r to every worker r, receives every worker's part for this one; returns the
    concatenation (own part first, then by rank)."""
    t = clock()
    others = sorted(eps)
    received, _ = await asyncio.gather(
        asyncio.gather(*(lib.recv(eps[r]) for r in others)),
        asyncio.gather(*(lib.send(eps[r], parts[r]) for r in others)),
    )
    if timings is not None:
        timings.append((clock() - t, sum(lib.nbytes(parts[r]) for r in others)))
    return lib.concat([parts[rank], *received])


async def _join(lib, args, rank, eps, build, other, timings=None):
    build = await _exchange(lib, rank, eps, lib.partition(build, args.n_chunks), timings)
    other = await _exchange(lib, rank, eps, lib.partition(other, args.n_chunks), timings)
    return lib.merge(build, other)


def _library(args):
    return CudfTables(args) if args.library == "cudf" else NumpyTables(args)


async def worker(rank, eps, args):
    """One worker's benchmark (``run_cluster_workers``' ``worker_func``): its results dict."""
    lib = _library(args)
    lib.prepare(rank)
    build = lib.generate(rank, args.chunk_size, args.n_chunks, "build", args.frac_match)
    other = lib.generate(rank, args.chunk_size, args.n_chunks, "other", args.frac_match)
    table_bytes = lib.nbytes(build) + lib.nbytes(other)
    for _ in range(args.warmup_iter):
        await _join(lib, args, rank, eps, build, other)
        await _barrier(rank, eps)
        if args.collect_garbage:
            gc.collect()
    it = {"bw": [], "wallclock": [], "throughput": [], "data_processed": [], "rows": []}
    timings = []
    started = clock()
    for _ in range(args.iter):
        iter_timings = []
        t = clock()
        merged = await _join(lib, args, rank, eps, build, other, iter_timings)
        await _barrier(rank, eps)
        took = clock() - t
        if args.collect_garbage:
            gc.collect()
        it["bw"].append(sum(b for _, b in iter_timings) / max(sum(s for s, _ in iter_timings), 1e-9))
        it["wallclock"].append(took)
        it["throughput"].append(args.n_chunks * table_bytes / took)
        it["data_processed"].append(table_bytes)
        it["rows"].append(lib.rows(merged))
        timings += iter_timings
    took = clock() - started
    return {
        "bw": sum(b for _, b in timings) / max(sum(s for s, _ in timings), 1e-9),
        "wallclock": took,
        "throughput": args.n_chunks * table_bytes * args.iter / took,
        "data_processed": table_bytes * args.iter,
        "iter_results": it,
    }


def expected_rows(args):
    """The merge's row count computed in one process from every worker's tables (NumPy only),
    or None where that would take too long."""
    if args.library != "numpy" or args.chunk_size * args.n_chunks > 20_000_000:
        return None
    lib = NumpyTables(args)
    gen = [lib.generate(r, args.chunk_size, args.n_chunks, k, args.frac_match) for r in range(args.n_chunks) for k in ("build", "other")]
    build = lib.concat(gen[0::2])
    other = lib.concat(gen[1::2])
    return lib.rows(lib.merge(build, other))


def parse_args(library, argv=None):
    """UCX-Py's ``cudf_merge`` command line (``--hosts``/SSH launching is not offered)."""
    from ucp._libs.utils import get_address

    p = argparse.ArgumentParser(description=f"Distributed merge of {library} tables over ucp")
    p.add_argument("--chunks-per-dev", metavar="N", default=1, type=int, help="Workers per device (default 1).")
    p.add_argument(
        "-d", "--devs", metavar="LIST", default="0", type=str,
        help='Devices to use (default "0"); with NumPy, only their count matters: one worker slot each.',
    )
    p.add_argument("-l", "--listen-address", metavar="ip", default=get_address(), type=str, help="Server listen address.")
    p.add_argument("-c", "--chunk-size", type=int, default=4, metavar="N", help="Rows per table per worker (default 4).")
    p.add_argument("--frac-match", metavar="FRAC", default=0.3, type=float, help="Share of matching rows (default 0.3).")
    p.add_argument("--profile", metavar="FILENAME", default=None, type=str, help="Accepted for compatibility; ignored.")
    p.add_argument("--cuda-profile", default=False, action="store_true", help="Accepted for compatibility; ignored.")
    p.add_argument("--rmm-init-pool-size", metavar="BYTES", default=None, type=int, help="Initial RMM pool (cuDF only).")
    p.add_argument("--collect-garbage", default=False, action="store_true", help="gc.collect() after each iteration.")
    p.add_argument("--iter", default=1, type=int, help="Benchmark iterations (default 1).")
    p.add_argument("--warmup-iter", default=5, type=int, help="Warm-up iterations (default 5).")
    p.add_argument("--server", default=False, action="store_true", help="Run the synchronising server only.")
    p.add_argument("--server-file", type=str, help="File holding the server's address (written with --server).")
    p.add_argument("--server-address", type=str, help="IP:PORT of a server started with --server.")
    p.add_argument("--num-workers", type=int, help="Workers in the whole cluster (with --server).")
    p.add_argument("--node-idx", type=int, help="This node's index in a manual multi-node run.")
    args = p.parse_args(argv)
    args.library = library
    args.devs = [int(d) for d in args.devs.split(",")]
    args.num_node_workers = len(args.devs) * args.chunks_per_dev
    args.n_chunks = args.num_workers or args.num_node_workers
    if args.chunk_size < 1 or args.iter < 1 or args.warmup_iter < 0 or not 0 <= args.frac_match <= 1:
        p.error("--chunk-size and --iter must be at least 1, --warmup-iter at least 0, --frac-match in [0, 1]")
    return args


def main(library, argv=None):
    args = parse_args(library, argv)
    gpu = library == "cudf"
    if gpu:
        try:
            import cudf  # noqa: F401
            import cupy  # noqa: F401
            import rmm  # noqa: F401
        except ImportError as e:
            raise SystemExit(f"cudf_merge needs cuDF, CuPy and RMM ({e}); ucp.benchmarks.numpy_merge runs without") from None
    if args.server:
        if args.num_workers is None:
            raise SystemExit("--server needs --num-workers")
        return run_cluster_server(args.server_file, args.n_chunks)
    if args.server_file or args.server_address:
        if args.server_address:
            host, port = args.server_address.rsplit(":", 1)
            info = {"address": host, "port": int(port)}
        else:
            info = args.server_file
        return run_cluster_workers(info, args.n_chunks, args.num_node_workers, args.node_idx or 0, worker, args, ensure_cuda_device=gpu)
    with tempfile.TemporaryDirectory() as tmp:
        server_file = os.path.join(tmp, "server.json")
        server, queue = _run_cluster_server(server_file, args.n_chunks)
        info = _wait_for_server_file(server_file, server)
    procs = _run_cluster_workers(info, args.n_chunks, args.num_node_workers, 0, worker, args, ensure_cuda_device=gpu)
    stats = [queue.get() for _ in range(args.n_chunks)]
    for p in procs:
        p.join()
    server.join()
    if any(p.exitcode for p in [*procs, server]):
        raise SystemExit("a worker or the server failed")
    report(args, stats)


def _wait_for_server_file(path, server, timeout=60.0):
    """The server's address once it has written it (a state, not a sleep), or an error if the
    server died or took longer than ``timeout`` seconds."""
    deadline = clock() + timeout
    while clock() < deadline:
        try:
            with open(path) as f:
                return json.load(f)
        except (FileNotFoundError, json.JSONDecodeError):  # not there, or half written
            if not server.is_alive():
                raise SystemExit("the benchmark's server process died before it listened") from None
            time.sleep(0.01)
    raise SystemExit(f"the benchmark's server did not write {path} within {timeout} s")


def report(args, stats):
    it0 = stats[0]["iter_results"]
    print(f"{'cuDF' if args.library == 'cudf' else 'NumPy'} merge benchmark")
    print_separator(separator="-", length=110)
    print_multi(values=["Device(s)", ",".join(map(str, args.devs))])
    print_multi(values=["Chunks per device", f"{args.chunks_per_dev}"])
    print_multi(values=["Rows per chunk", f"{args.chunk_size}"])
    print_multi(values=["Total data processed", format_bytes(sum(s["data_processed"] for s in stats))])
    print_multi(values=["Data processed per iter", format_bytes(sum(s["iter_results"]["data_processed"][0] for s in stats))])
    print_multi(values=["Row matching fraction", f"{args.frac_match}"])
    rows = sum(s["iter_results"]["rows"][-1] for s in stats)
    expected = expected_rows(args)
    check = "" if expected is None else (" (matches a single-process merge)" if rows == expected else f" (WRONG: a single-process merge has {expected})")
    print_multi(values=["Result rows", f"{rows}{check}"])
    print_separator(separator="=", length=110)
    print_multi(values=["Wall-clock", format_time(stats[0]["wallclock"])])
    print_multi(values=["Bandwidth", f"{format_bytes(hmean(np.array([s['bw'] for s in stats])))}/s"])
    print_multi(values=["Throughput", f"{format_bytes(stats[0]['throughput'])}/s"])
    print_separator(separator="=", length=110)
    print_multi(values=["Run", "Wall-clock", "Bandwidth", "Throughput"])
    for i in range(args.iter):
        bw = hmean(np.array([s["iter_results"]["bw"][i] for s in stats]))
        print_multi(
            values=[i, format_time(it0["wallclock"][i]), f"{format_bytes(bw)}/s", f"{format_bytes(it0['throughput'][i])}/s"]
        )
    if expected is not None and rows != expected:
        raise SystemExit(1)
