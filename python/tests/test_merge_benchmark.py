"""The merge benchmarks: ``numpy_merge`` runs a cluster of worker processes whose merged rows
match a merge of all tables in one process; ``cudf_merge`` says what it needs where cuDF is
absent; and the names UCX-Py's own ``cudf_merge.py`` imports from ``ucp`` exist with the
parameters it passes, so that script runs unmodified where cuDF is installed."""
import inspect
import subprocess
import sys

import pytest

from ucp.benchmarks import merge


def run(module, *args):
    return subprocess.run(
        [sys.executable, "-m", f"ucp.benchmarks.{module}", *args], capture_output=True, text=True, timeout=180
    )


def test_numpy_merge_on_three_workers_matches_a_single_process_merge():
    p = run("numpy_merge", "-d", "0,1,2", "-c", "5000", "--iter", "2", "--warmup-iter", "1")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "(matches a single-process merge)" in p.stdout, p.stdout
    assert p.stdout.count("MiB/s") + p.stdout.count("KiB/s") + p.stdout.count("GiB/s") >= 4, p.stdout


def test_the_numpy_tables_merge_like_a_dict_join():
    args = merge.parse_args("numpy", ["-d", "0,1", "-c", "300", "--frac-match", "0.5"])
    lib = merge.NumpyTables(args)
    build = lib.generate(0, 300, 2, "build", 0.5)
    other = lib.generate(1, 300, 2, "other", 0.5)
    got = lib.merge(build, other)
    index = dict(zip(build["key"].tolist(), build["payload"].tolist()))
    want = [(k, index[k], p) for k, p in zip(other["key"].tolist(), other["payload"].tolist()) if k in index]
    assert list(zip(got["key"].tolist(), got["payload_x"].tolist(), got["payload_y"].tolist())) == want
    parts = lib.partition(other, 3)
    assert sum(lib.rows(p) for p in parts) == lib.rows(other)
    assert all((p["key"] % 3 == i).all() for i, p in enumerate(parts))


def test_cudf_merge_says_what_it_needs_without_cudf():
    pytest.importorskip("numpy")
    try:
        import cudf  # noqa: F401

        pytest.skip("cuDF is installed here")
    except ImportError:
        pass
    p = run("cudf_merge", "-c", "10")
    assert p.returncode != 0
    assert "cudf_merge needs cuDF, CuPy and RMM" in p.stderr and "numpy_merge" in p.stderr, p.stderr


# What UCX-Py's ucp/benchmarks/cudf_merge.py imports from ucp, with the parameters it uses.
UCXPY_CUDF_MERGE_NEEDS = {
    "ucp._libs.utils": {"format_bytes": ["x"], "format_time": ["x"], "print_multi": ["values"], "print_separator": ["separator", "length"]},
    "ucp.benchmarks.asyncssh": {
        "run_ssh_cluster": ["args", "server_host", "worker_hosts", "num_workers", "get_server_command", "get_worker_command"]
    },
    "ucp.benchmarks.utils": {
        "_run_cluster_server": ["server_file", "n_workers"],
        "run_cluster_server": ["server_file", "n_workers"],
        "_run_cluster_workers": ["server_info", "num_workers", "num_node_workers", "node_idx", "worker_func", "worker_args", "ensure_cuda_device"],
        "run_cluster_workers": ["server_info", "num_workers", "num_node_workers", "node_idx", "worker_func", "worker_args", "ensure_cuda_device"],
    },
    "ucp.utils": {"hmean": ["a"]},
    "ucp": {"get_address": []},
}


@pytest.mark.parametrize("module", sorted(UCXPY_CUDF_MERGE_NEEDS))
def test_ucxpy_cudf_merge_finds_what_it_imports(module):
    mod = __import__(module, fromlist=["_"])
    for name, params in UCXPY_CUDF_MERGE_NEEDS[module].items():
        fn = getattr(mod, name)
        have = inspect.signature(fn).parameters
        assert all(p in have for p in params), (module, name, list(have))
