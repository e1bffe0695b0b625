"""Dask over `ucxa` and over `tcp` on a cluster shaped like three hosts: the scheduler and two
workers each in a network namespace (and pid and IPC namespaces) of their own, bridged, so
nothing but TCP joins them (`scripts/bench_dask_p2p.py --cluster netns` times the same). A p2p
merge and a p2p shuffle give the same result over both protocols. Skips without root,
iproute2 and unshare, or without Dask."""
import os
import pathlib
import shutil
import sys

import pytest

pytest.importorskip("distributed")
pytest.importorskip("pandas")

SCRIPTS = pathlib.Path(__file__).resolve().parents[2] / "scripts"
sys.path.insert(0, str(SCRIPTS))
import bench_dask_p2p  # noqa: E402


def _unavailable():
    if os.geteuid() != 0:
        return "needs root (network namespaces)"
    for tool in ("ip", "unshare"):
        if shutil.which(tool) is None:
            return f"needs {tool}"
    return None


@pytest.mark.skipif(_unavailable() is not None, reason=str(_unavailable()))
def test_p2p_merge_and_shuffle_agree_over_ucxa_and_tcp_between_namespaces():
    net = bench_dask_p2p.Netns()
    try:
        results = {p: bench_dask_p2p.run_netns(net, p, rows=200_000, parts=4, runs=1) for p in ("tcp", "ucxa")}
    finally:
        net.close()
    for workload in ("merge", "shuffle"):
        (n_tcp, s_tcp), (n_ucxa, s_ucxa) = (results[p]["times"][workload][1] for p in ("tcp", "ucxa"))
        assert n_tcp == n_ucxa > 0, (workload, n_tcp, n_ucxa)
        assert abs(s_tcp - s_ucxa) <= 1e-9 * abs(s_tcp), (workload, s_tcp, s_ucxa)
