"""The `ucxa://` Dask comm backend: distributed's comm API over ucp (connect/listen, 20
concurrent clients, closing from either side, connect timeout, addresses) and a LocalCluster
whose workers exchange data over it."""
import asyncio
import sys
import time

import numpy as np
import pytest

distributed = pytest.importorskip("distributed")

from distributed.comm import CommClosedError, connect, listen  # noqa: E402
from distributed.comm.registry import get_backend  # noqa: E402

from conftest import run  # noqa: E402


def test_backend_is_registered_by_entry_point():
    backend = get_backend("ucxa")
    assert type(backend).__name__ == "UCXABackend"
    assert backend.get_address_host_port("127.0.0.1:1234") == ("127.0.0.1", 1234)
    assert backend.resolve_address("localhost:5") == "127.0.0.1:5"


def test_config_namespace_sets_ucx_options(fresh_ucp):
    import dask

    import ucp
    from ucp.dask_comm import _init_ucx

    with dask.config.set({"ucxa.environment": {"seg-size": "4K"}, "ucxa.net-devices": "lo"}):
        _init_ucx()
    config = ucp.get_config()
    assert config["SEG_SIZE"] == "4K"
    assert config["NET_DEVICES"] == "lo"


def test_client_server_twenty_clients(fresh_ucp):
    async def main():
        async def handle(comm):
            while True:
                try:
                    msg = await comm.read()
                except CommClosedError:
                    return
                await comm.write({"echo": msg, "peer": comm.peer_address})

        async with listen("ucxa://127.0.0.1:0", handle) as listener:
            assert listener.listen_address.startswith("ucxa://127.0.0.1:")
            assert listener.contact_address == listener.listen_address

            async def client(i):
                comm = await connect(listener.contact_address)
                assert comm.peer_address == listener.contact_address
                assert comm.local_address.startswith("ucxa://127.0.0.1:")
                payload = {"i": i, "data": np.arange(i * 1000, dtype="f8")}
                await comm.write(payload)
                reply = await comm.read()
                assert reply["echo"]["i"] == i
                np.testing.assert_array_equal(reply["echo"]["data"], payload["data"])
                # The server saw the client's real address.
                assert reply["peer"] == comm.local_address
                await comm.close()
                assert comm.closed()

            await asyncio.gather(*(client(i) for i in range(20)))

    run(main(), timeout=120)


def test_close_reaches_a_pending_read_on_either_side(fresh_ucp):
    async def main():
        server_comms = []

        async def handle(comm):
            server_comms.append(comm)

        async with listen("ucxa://127.0.0.1:0", handle) as listener:
            # Client closes: the server's pending read fails promptly.
            comm = await connect(listener.contact_address)
            while not server_comms:
                await asyncio.sleep(0.01)
            pending = asyncio.ensure_future(server_comms[0].read())
            await asyncio.sleep(0.05)
            t0 = time.monotonic()
            await comm.close()
            with pytest.raises(CommClosedError):
                await asyncio.wait_for(pending, 5)
            assert time.monotonic() - t0 < 2
            # Server aborts: the client's pending read fails, and so do later writes.
            comm2 = await connect(listener.contact_address)
            while len(server_comms) < 2:
                await asyncio.sleep(0.01)
            pending = asyncio.ensure_future(comm2.read())
            await asyncio.sleep(0.05)
            server_comms[1].abort()
            with pytest.raises(CommClosedError):
                await asyncio.wait_for(pending, 5)
            with pytest.raises(CommClosedError):
                await comm2.write("after close")

    run(main(), timeout=60)


def test_large_write_completes_before_the_peer_reads(fresh_ucp):
    """A 12 MB write returns while the peer has not posted a read yet (a rendezvous send
    cannot finish before that): both sides may write before they read."""

    async def main():
        server_comm = asyncio.get_running_loop().create_future()

        async def handle(comm):
            server_comm.set_result(comm)

        async with listen("ucxa://127.0.0.1:0", handle) as listener:
            comm = await connect(listener.contact_address)
            server = await server_comm
            big = np.arange(12_000_000 // 8, dtype="i8")
            await asyncio.wait_for(comm.write({"x": big}), 10)
            await asyncio.wait_for(server.write({"y": big}), 10)
            got_server = await asyncio.wait_for(server.read(), 10)
            got_client = await asyncio.wait_for(comm.read(), 10)
            np.testing.assert_array_equal(got_server["x"], big)
            np.testing.assert_array_equal(got_client["y"], big)
            await comm.close()
            await server.close()

    run(main(), timeout=60)


def test_hundred_listeners_with_distinct_addresses_and_repr(fresh_ucp):
    async def main():
        seen = []

        async def handle(comm):
            seen.append(comm)
            await comm.write("hi")

        listeners = [await listen("ucxa://127.0.0.1:0", handle) for _ in range(100)]
        try:
            addresses = {lst.contact_address for lst in listeners}
            assert len(addresses) == 100
            for lst in listeners[::20]:
                comm = await connect(lst.contact_address)
                assert await comm.read() == "hi"
                text = repr(comm)
                assert "UCXAComm" in text and comm.local_address in text and lst.contact_address in text
                await comm.close()
            assert len(seen) == 5
        finally:
            for lst in listeners:
                lst.stop()

    run(main(), timeout=120)


def test_connect_timeout(fresh_ucp):
    async def main():
        # Nothing listens there: connect retries until its timeout, then raises OSError.
        t0 = time.monotonic()
        with pytest.raises(OSError):
            await connect("ucxa://127.0.0.1:9", timeout=0.5)
        assert time.monotonic() - t0 < 5

    run(main(), timeout=30)


def _transpose_sum(n):
    import dask.array as da

    x = da.arange(n * n, chunks=n * n // 8).reshape((n, n)).rechunk((n // 4, n // 4))
    return (x + x.T).sum(axis=0)


def local_cluster():
    """Two worker processes talking ucxa over 127.0.0.1."""
    from distributed import LocalCluster

    return LocalCluster(
        protocol="ucxa",
        n_workers=2,
        threads_per_worker=1,
        processes=True,
        host="127.0.0.1",
        dashboard_address=None,
    )


@pytest.fixture(scope="module")
def cluster_client():
    from distributed import Client

    with local_cluster() as cluster:
        with Client(cluster) as client:
            yield client


@pytest.mark.parametrize("method", ["tasks", "p2p"])
def test_rechunk(cluster_client, method):
    import dask
    import dask.array as da

    a = np.arange(240 * 240, dtype="i8").reshape(240, 240)
    x = da.from_array(a, chunks=(240, 10))
    with dask.config.set({"array.rechunk.method": method}):
        y = x.rechunk((10, 240))
    np.testing.assert_array_equal(cluster_client.compute(y).result(), a)


@pytest.mark.parametrize("method", ["tasks", "p2p"])
def test_dataframe_shuffle_and_merge(cluster_client, method):
    import dask.dataframe as dd
    import pandas as pd

    left = pd.DataFrame({"k": np.arange(2000) % 97, "a": np.arange(2000)})
    right = pd.DataFrame({"k": np.arange(97), "b": np.arange(97) * 10})
    dl = dd.from_pandas(left, npartitions=8)
    dr = dd.from_pandas(right, npartitions=3)
    shuffled = cluster_client.compute(dl.shuffle("k", shuffle_method=method)).result()
    pd.testing.assert_frame_equal(shuffled.sort_values("a").reset_index(drop=True), left)
    merged = cluster_client.compute(dl.merge(dr, on="k", shuffle_method=method)).result()
    expected = left.merge(right, on="k")
    pd.testing.assert_frame_equal(
        merged.sort_values("a").reset_index(drop=True), expected.sort_values("a").reset_index(drop=True)
    )


def test_local_cluster_workers_exchange_data():
    from distributed import Client

    with local_cluster() as cluster:
        assert cluster.scheduler_address.startswith("ucxa://127.0.0.1:")
        with Client(cluster) as client:
            n = 400
            got = _transpose_sum(n).compute()
            a = np.arange(n * n).reshape(n, n)
            np.testing.assert_array_equal(got, (a + a.T).sum(axis=0))
            transferred = client.run(lambda dask_worker: dask_worker.state.transfer_incoming_count_total)
            assert sum(transferred.values()) > 0, transferred


def _slow_square(x):
    time.sleep(0.05)
    return x * x


def test_killed_worker_is_noticed_and_work_rescheduled():
    import os
    import signal

    from distributed import Client

    with local_cluster() as cluster:
        with Client(cluster) as client:
            futures = client.map(_slow_square, range(60))
            while sum(f.done() for f in futures) < 5:
                time.sleep(0.01)
            pids = client.run(os.getpid)
            victim = sorted(pids)[0]
            # The worker process dies without a goodbye (its nanny restarts it).
            os.kill(pids[victim], signal.SIGKILL)
            assert client.gather(futures) == [x * x for x in range(60)]
            assert victim not in client.scheduler_info()["workers"]


def test_cli_scheduler_and_worker():
    """`dask scheduler --protocol ucxa` and `dask worker ucxa://...` as separate processes."""
    import os
    import shutil
    import socket
    import subprocess

    from distributed import Client

    dask_cli = shutil.which("dask") or os.path.join(os.path.dirname(sys.executable), "dask")
    with socket.socket() as s:  # a free port for the scheduler
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    address = f"ucxa://127.0.0.1:{port}"
    common = ["--no-dashboard"]
    sched = subprocess.Popen(
        [dask_cli, "scheduler", "--protocol", "ucxa", "--host", "127.0.0.1", "--port", str(port), *common],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    worker = subprocess.Popen(
        [dask_cli, "worker", address, "--host", "127.0.0.1", "--nthreads", "1", *common],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        with Client(address, timeout=30) as client:
            client.wait_for_workers(1, timeout=30)
            assert all(w.startswith("ucxa://127.0.0.1:") for w in client.scheduler_info()["workers"])
            assert client.submit(sum, [1, 2, 3]).result(timeout=30) == 6
    finally:
        for p in (worker, sched):
            p.terminate()
        for p in (worker, sched):
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()
