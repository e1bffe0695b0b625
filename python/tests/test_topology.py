"""``ucp._libs.topological_distance`` (UCX-Py's API on the ucx-topology crate) and the Dask
comm's ``net-devices: auto``, on the shipped DGX-like topology
(crates/ucx-topology/tests/data/dgx.xml: 8 GPUs, 4 NICs, 2 GPUs and 1 NIC per PCIe switch) and
on this machine's."""
import os
import pathlib
import subprocess
import sys

import pytest

from ucp._libs.topological_distance import XML_ENV, TopologicalDistance

DGX = pathlib.Path(__file__).resolve().parents[2] / "crates/ucx-topology/tests/data/dgx.xml"
GPUS = ["0000:03:00.0", "0000:04:00.0", "0000:08:00.0", "0000:09:00.0"]
GPUS += ["0000:83:00.0", "0000:84:00.0", "0000:88:00.0", "0000:89:00.0"]


@pytest.fixture
def dgx(monkeypatch):
    """The DGX-like topology, every GPU visible; skipped (with the reason) without libhwloc."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    try:
        return TopologicalDistance(DGX)
    except OSError as e:
        if "hwloc is unavailable" in str(e):
            pytest.skip(f"XML topologies need libhwloc: {e}")
        raise


def d(*pairs):
    return [{"distance": dist, "name": name} for dist, name in pairs]


def test_distances_from_device_index_as_ucx_py_lists_them(dgx):
    assert dgx.source == "xml"
    assert dgx.get_cuda_distances_from_device_index(0, "network") == d(
        (2, "ib0"), (4, "enp11s0f0"), (4, "ib1"), (4, "ib2"), (4, "ib3")
    )
    # UCX-Py's default device_type is "openfabrics".
    assert dgx.get_cuda_distances_from_device_index(0) == d((2, "mlx5_0"), (4, "mlx5_1"), (4, "mlx5_2"), (4, "mlx5_3"))


def test_other_gpus_by_distance(dgx):
    got = dgx.get_cuda_distances_from_device_index(5, "gpu")
    assert got[0] == {"distance": 2, "name": GPUS[4]}
    assert sorted(x["name"] for x in got[1:]) == sorted(set(GPUS) - {GPUS[4], GPUS[5]})
    assert {x["distance"] for x in got[1:]} == {4}


@pytest.mark.parametrize("index", range(8))
def test_each_gpu_is_nearest_its_switch_nic(dgx, index):
    got = dgx.get_cuda_distances_from_device_index(index, device_type="openfabrics")
    assert got[0] == {"distance": 2, "name": f"mlx5_{index // 2}"}
    assert [x["distance"] for x in got[1:]] == [4, 4, 4]


def test_distances_from_pci_info_both_spellings(dgx):
    want = dgx.get_cuda_distances_from_device_index(4, "network")
    assert want[0] == {"distance": 2, "name": "ib2"}
    assert dgx.get_cuda_distances_from_pci_info(0, 0x83, 0, "network") == want
    assert dgx.get_cuda_distances_from_pci_info(0, 0x83, 0, device_type="network") == want
    assert dgx.get_cuda_distances_from_pci_info(domain=0, bus=0x83, device=0, device_type="network") == want
    assert dgx.get_cuda_distances_from_pci_info("0000:83:00.0", "network") == want
    assert dgx.get_cuda_distances_from_pci_info("83:00.0", device_type="network") == want


def test_cuda_visible_devices_maps_the_index_to_the_physical_gpu(dgx, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "6,1")
    assert dgx.get_cuda_distances_from_device_index(0)[0]["name"] == "mlx5_3"
    assert dgx.get_cuda_distances_from_device_index(1)[0]["name"] == "mlx5_0"
    with pytest.raises(ValueError, match="no CUDA device 2: 2 visible"):
        dgx.get_cuda_distances_from_device_index(2)


def test_ucx_net_devices_keep_ties_and_use_active_ports(dgx):
    want = ["mlx5_0:1,ib0"] * 2 + ["mlx5_1:1,ib1"] * 2 + ["mlx5_2:2,ib2"] * 2 + ["mlx5_3:1,ib3"] * 2
    assert [dgx.get_ucx_net_devices(i) for i in range(8)] == want
    assert [dgx.get_ucx_net_devices(pci_bus_id=g) for g in GPUS] == want
    assert dgx.get_ucx_net_devices(cpus="0-3") == "mlx5_0:1,mlx5_1:1,ib0,ib1"
    assert dgx.get_ucx_net_devices(cpus=[2, 5]) == "mlx5_0:1,mlx5_1:1,mlx5_2:2,mlx5_3:1,ib0,ib1,ib2,ib3"


def test_cpu_set_distances(dgx):
    got = dgx.get_distances_from_cpus("4-7", "network")
    assert got == d((0, "ib2"), (0, "ib3"), (2, "enp11s0f0"), (2, "ib0"), (2, "ib1"))


def test_bad_inputs_are_named(dgx):
    with pytest.raises(ValueError, match="0000:zz:00.0"):
        dgx.get_cuda_distances_from_pci_info("0000:zz:00.0")
    with pytest.raises(ValueError, match="no PCI device 0000:42:00.0"):
        dgx.get_cuda_distances_from_pci_info(0, 0x42, 0)
    with pytest.raises(ValueError, match="no CUDA device 8"):
        dgx.get_cuda_distances_from_device_index(8)
    with pytest.raises(ValueError, match="'block'"):
        dgx.get_cuda_distances_from_device_index(0, "block")
    with pytest.raises(ValueError, match="bad CPU list"):
        dgx.get_distances_from_cpus("3-1")
    with pytest.raises(TypeError):
        dgx.get_cuda_distances_from_pci_info(0, 3)
    with pytest.raises(TypeError):
        dgx.get_cuda_distances_from_pci_info("0000:83:00.0", 1, 2)


def test_xml_that_does_not_load_names_the_file(dgx, tmp_path):
    bad = tmp_path / "bad.xml"
    bad.write_text("<topology version='2.0'><object")
    with pytest.raises(OSError, match=str(bad)):
        TopologicalDistance(bad)


def test_env_var_points_at_the_xml(dgx, monkeypatch):
    monkeypatch.setenv(XML_ENV, str(DGX))
    td = TopologicalDistance()
    assert td.source == "xml"
    assert td.get_cuda_distances_from_device_index(2, "network")[0] == {"distance": 2, "name": "ib1"}


def test_this_machine():
    td = TopologicalDistance()
    assert td.source in ("hwloc", "sysfs")
    names = [x["name"] for x in td.get_distances_from_cpus(sorted(os.sched_getaffinity(0)), "network")]
    # The interfaces with a PCI device; lo and other virtual ones have none.
    pci = sorted(n for n in os.listdir("/sys/class/net") if "/devices/pci" in os.path.realpath(f"/sys/class/net/{n}"))
    assert sorted(names) == pci
    if not td._topology.nvidia_gpus():
        with pytest.raises(ValueError, match="no CUDA device 0"):
            td.get_cuda_distances_from_device_index(0)


# ---- Dask: ucxa.net-devices: auto ------------------------------------------------------------


def _auto_options(env, host=None):
    """The UCX options ``_init_ucx`` passes to ``ucp.init`` with ``net-devices: auto``, in a
    fresh interpreter with ``env`` (ucp.init itself is replaced: the synthetic devices do not
    exist here)."""
    code = f"""
import dask, ucp
from ucp import dask_comm
seen = {{}}
ucp.init = lambda options, **kw: seen.update(options)
with dask.config.set({{"ucxa.net-devices": "auto"}}):
    dask_comm._init_ucx({host!r})
print(seen.get("NET_DEVICES"))
"""
    full = {k: v for k, v in os.environ.items() if k not in ("UCX_NET_DEVICES", "CUDA_VISIBLE_DEVICES", XML_ENV)}
    full.update(env)
    out = subprocess.run([sys.executable, "-c", code], env=full, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_dask_auto_net_devices_follow_the_workers_gpu(dgx):
    pytest.importorskip("distributed")  # the Dask extra: pip install .[dask]
    env = {XML_ENV: str(DGX)}
    assert _auto_options({**env, "CUDA_VISIBLE_DEVICES": "5,0"}) == "mlx5_2:2,ib2"
    assert _auto_options({**env, "CUDA_VISIBLE_DEVICES": "2"}) == "mlx5_1:1,ib1"
    # A listener keeps its own interface.
    assert _auto_options({**env, "CUDA_VISIBLE_DEVICES": "7"}, host="127.0.0.1") == "mlx5_3:1,ib3,lo"
    # UCX_NET_DEVICES in the environment wins, as for any other value.
    assert _auto_options({**env, "UCX_NET_DEVICES": "lo"}) == "None"


def test_dask_cluster_with_auto_net_devices_on_this_machine(monkeypatch):
    """A real LocalCluster: without a GPU, each worker takes the interfaces nearest its CPUs,
    plus the loopback interface it listens on."""
    pytest.importorskip("distributed")  # the Dask extra: pip install .[dask]
    from distributed import Client, LocalCluster

    import dask

    monkeypatch.delenv("UCX_NET_DEVICES", raising=False)
    monkeypatch.delenv(XML_ENV, raising=False)
    try:
        want = TopologicalDistance().get_ucx_net_devices(cpus=sorted(os.sched_getaffinity(0))) + ",lo"
    except RuntimeError:  # no PCI network device here: only the listener's own interface
        want = "lo"
    with dask.config.set({"ucxa.net-devices": "auto"}):
        with LocalCluster(
            protocol="ucxa", n_workers=1, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=None
        ) as cluster, Client(cluster) as client:
            assert client.submit(lambda x: x + 1, 41).result(timeout=60) == 42
            got = client.run(lambda: __import__("ucp").get_config()["NET_DEVICES"])
    assert list(got.values()) == [want]
