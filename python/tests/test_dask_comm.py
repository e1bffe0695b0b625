"""The `ucxa://` Dask comm backend: distributed's comm API over ucp (connect/listen, 20
concurrent clients, closing from either side, connect timeout, addresses) and a LocalCluster
whose workers exchange data over it."""
import asyncio
import contextlib
import sys
import time

import numpy as np
import pytest

distributed = pytest.importorskip("distributed")

from distributed.comm import CommClosedError, connect, listen  # noqa: E402
from distributed.comm.registry import get_backend  # noqa: E402

from conftest import has_ipv6_loopback, posted, run  # noqa: E402


@pytest.fixture(scope="module", autouse=True)
def _ucp_released_after_the_module():
    """distributed closes a client's and a cluster's comms on its own loop threads, a moment
    after the ``with`` block that closed them returns. Wait (up to 10 s) until nothing uses
    this process's UCX context any more, so the next module's ``ucp.reset()`` finds it free;
    anything still holding it then is a leak, and fails here."""
    import weakref

    import ucp
    from ucp.continuous_ucx_progress import set_spin_us, spin_us

    spin_before = spin_us()  # the comm turns the spin off process-wide
    yield
    set_spin_us(spin_before)
    if ucp.core._ctx is None:
        return
    ref = weakref.ref(ucp.core._ctx)
    deadline = time.monotonic() + 10
    while True:
        try:
            ucp.reset()
            return
        except ucp.exceptions.UCXError as e:
            if time.monotonic() > deadline:
                raise AssertionError(f"{e}\nheld by:\n{_holders_of_live_endpoints()}") from e
            ucp.core._ctx = ref()  # reset() let go of it before it found the holders: retry
            time.sleep(0.1)


def _holders_of_live_endpoints(depth=3):
    """What refers to each open ``ucp`` endpoint, `depth` levels up (to name a leak)."""
    import gc

    import ucp

    def short(o):
        return f"{type(o).__module__}.{type(o).__qualname__} {repr(o)[:160]}"

    lines = []
    seen = set()

    def walk(o, level):
        if level == depth:
            return
        for r in gc.get_referrers(o):
            if id(r) in seen or r is lines or type(r).__name__ == "frame" and level:
                continue
            seen.add(id(r))
            lines.append("  " * (level + 1) + "<- " + short(r))
            walk(r, level + 1)

    live = [o for o in gc.get_objects() if isinstance(o, ucp.core.Endpoint) and o._ctx is not None]
    seen.add(id(live))
    for ep in live:
        seen.add(id(ep))
        lines.append(short(ep))
        walk(ep, 0)
    return "\n".join(lines)


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


def test_spin_is_off_by_default_and_configurable(fresh_ucp, monkeypatch):
    """Dask reads wait long for their message: no spin unless ``ucxa.spin-us`` asks for one;
    an explicit UCXPY_SPIN_US wins."""
    import dask

    import ucp
    from ucp.continuous_ucx_progress import set_spin_us, spin_us
    from ucp.dask_comm import _init_ucx

    monkeypatch.delenv("UCXPY_SPIN_US", raising=False)
    set_spin_us(100)
    _init_ucx()
    assert spin_us() == 0
    ucp.reset()
    with dask.config.set({"ucxa.spin-us": 50}):
        _init_ucx()
    assert spin_us() == 50
    ucp.reset()
    monkeypatch.setenv("UCXPY_SPIN_US", "7")
    set_spin_us(7)
    _init_ucx()
    assert spin_us() == 7


@contextlib.asynccontextmanager
async def comm_pair():
    """A client comm and the server comm it connected to, over a listener on 127.0.0.1 (the
    listener stops on exit; the comms stay open)."""
    server_comm = asyncio.get_running_loop().create_future()

    async def handle(comm):
        server_comm.set_result(comm)

    async with listen("ucxa://127.0.0.1:0", handle) as listener:
        comm = await connect(listener.contact_address)
        yield comm, await server_comm


@pytest.fixture
def fresh_host_pool(monkeypatch):
    """The comm's receive pool as if this process had not made it yet."""
    import ucp.dask_comm as dask_comm

    monkeypatch.setattr(dask_comm, "_host_pool", None)
    monkeypatch.setattr(dask_comm, "_allocate_host_frame", dask_comm.host_array)
    return dask_comm


def test_host_pool_size_is_configurable(fresh_ucp, fresh_host_pool):
    import dask

    dask_comm = fresh_host_pool
    with dask.config.set({"ucxa.host-pool-size": "1 MiB"}):
        dask_comm._init_ucx()
    assert dask_comm._host_pool.max_bytes == 2**20
    dask_comm._host_pool = None
    with dask.config.set({"ucxa.host-pool-size": 0}):
        dask_comm._init_ucx()
    assert dask_comm._host_pool is None
    assert dask_comm._allocate_host_frame is dask_comm.host_array
    with dask.config.set({"ucxa.host-pool-size": "lots"}):
        with pytest.raises(ValueError, match="ucxa.host-pool-size: expected a size in bytes >= 0, got 'lots'"):
            dask_comm._init_ucx()


def test_reads_land_in_memory_that_earlier_reads_freed(fresh_ucp, fresh_host_pool):
    """Each large frame a comm reads comes from the pool, and a message the reader has let go
    of gives its memory to the next one (which still arrives intact)."""
    dask_comm = fresh_host_pool

    async def main():
        async with comm_pair() as (comm, server):
            for i in range(4):
                sent = np.full(2**21, i, dtype="u1")
                got, _ = await asyncio.gather(comm.read(), server.write({"x": sent}))
                np.testing.assert_array_equal(got["x"], sent)
                del got
            await comm.close()
            await server.close()

    run(main(), timeout=60)
    assert dask_comm._host_pool.reused >= 3


@pytest.mark.parametrize(
    "host",
    ["127.0.0.1", pytest.param("[::1]", marks=pytest.mark.skipif(not has_ipv6_loopback(), reason="no IPv6 loopback"))],
)
def test_client_server_twenty_clients(fresh_ucp, host):
    async def main():
        async def handle(comm):
            while True:
                try:
                    msg = await comm.read()
                except CommClosedError:
                    return
                await comm.write({"echo": msg, "peer": comm.peer_address})

        async with listen(f"ucxa://{host}:0", handle) as listener:
            assert listener.listen_address.startswith(f"ucxa://{host}:")
            assert listener.contact_address == listener.listen_address

            async def client(i):
                comm = await connect(listener.contact_address)
                assert comm.peer_address == listener.contact_address
                assert comm.local_address.startswith(f"ucxa://{host}:")
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
            pending = await posted(server_comms[0].read(), settle=[server_comms[0]._ep, comm._ep])
            t0 = time.monotonic()
            await comm.close()
            with pytest.raises(CommClosedError):
                await asyncio.wait_for(pending, 5)
            assert time.monotonic() - t0 < 2
            # Server aborts: the client's pending read fails, and so do later writes.
            comm2 = await connect(listener.contact_address)
            while len(server_comms) < 2:
                await asyncio.sleep(0.01)
            pending = await posted(comm2.read(), settle=[comm2._ep, server_comms[1]._ep])
            server_comms[1].abort()
            with pytest.raises(CommClosedError):
                await asyncio.wait_for(pending, 5)
            with pytest.raises(CommClosedError):
                await comm2.write("after close")

    run(main(), timeout=60)


def test_abort_and_close_do_not_raise_when_the_endpoint_close_fails(fresh_ucp):
    """distributed calls abort() in finally blocks and destructors: an endpoint whose close
    raises (UCX reports a failed flush) still leaves the comm closed, and nothing raised."""
    import ucp

    async def main():
        server_comms = []

        async def handle(comm):
            server_comms.append(comm)

        async with listen("ucxa://127.0.0.1:0", handle) as listener:
            comms = [await connect(listener.contact_address) for _ in range(2)]
            for comm in comms:
                ep = comm._ep
                real_abort = ep.abort

                def failing_abort(real_abort=real_abort):
                    real_abort()
                    raise ucp.exceptions.UCXError("Error while closing endpoint: Input/output error")

                ep.abort = failing_abort
            comms[0].abort()
            await comms[1].close()
            assert all(comm.closed() for comm in comms)
            while len(server_comms) < 2:
                await asyncio.sleep(0.01)
            for comm in server_comms:
                comm.abort()

    run(main(), timeout=60)


def test_a_listener_can_listen_again_on_its_port_at_once(fresh_ucp):
    """distributed's TCP listener sets SO_REUSEADDR, so a scheduler restarted on its port
    binds while the old connections linger in TIME_WAIT. UCX does not by default
    (UCX_CM_REUSEADDR=n); the comm turns it on."""
    from ucp.collective import free_port

    port = free_port()

    async def main():
        for _ in range(2):
            closed = []

            async def handle(comm):
                await comm.write("hello")
                await comm.close()
                closed.append(comm)

            async with listen(f"ucxa://127.0.0.1:{port}", handle) as listener:
                for _ in range(3):
                    comm = await connect(listener.contact_address)
                    assert await comm.read() == "hello"
                    await comm.close()
                while len(closed) < 3:  # the server's closes done (run's limit fails a hang)
                    await asyncio.sleep(0.01)

    run(main(), timeout=60)


def test_large_write_completes_before_the_peer_reads(fresh_ucp):
    """A 12 MB write returns while the peer has not posted a read yet (a rendezvous send
    cannot finish before that): both sides may write before they read."""

    async def main():
        async with comm_pair() as (comm, server):
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


# The deserialize flag of listen() and connect(), as distributed's generic comm checks test it
# (check_deserialize, check_deserialize_roundtrip, check_deserialize_eoferror in its
# distributed/comm/tests/test_comms.py, which the wheel does not ship): written anew here.

def _serialized_message(x, to_ser, ser):
    """A message with a plain value, a value marked for serialization (``to_serialize``, i.e.
    ``Serialize``) and one serialized already (``Serialized``)."""
    from distributed.protocol import Serialized, serialize, to_serialize

    return {"op": "update", "x": x, "to_ser": [to_serialize(to_ser)], "ser": Serialized(*serialize(ser))}


def _same(got, expected):
    if isinstance(expected, bytes):
        return isinstance(got, (bytes, bytearray, memoryview)) and bytes(got) == expected
    return type(got) is type(expected) and got == expected


def _check_received(out, x, to_ser, ser, deserialized):
    """What the reader of ``_serialized_message(x, to_ser, ser)`` must see."""
    from distributed.protocol import Serialize, Serialized, deserialize

    assert sorted(out) == ["op", "ser", "to_ser", "x"]
    assert out["op"] == "update"
    assert _same(out["x"], x)
    assert isinstance(out["to_ser"], (list, tuple)) and len(out["to_ser"]) == 1
    (got_to_ser,) = out["to_ser"]
    got_ser = out["ser"]
    if deserialized:
        assert _same(got_to_ser, to_ser)
        assert _same(got_ser, ser)
    else:
        # Both stay serialized: header and frames that the reader can deserialize itself.
        assert isinstance(got_ser, Serialized)
        assert _same(deserialize(got_ser.header, got_ser.frames), ser)
        if isinstance(got_to_ser, Serialized):
            assert _same(deserialize(got_to_ser.header, got_to_ser.frames), to_ser)
        else:  # a transport may hand the Serialize wrapper on as it is
            assert isinstance(got_to_ser, Serialize) and _same(got_to_ser.data, to_ser)


async def _comm_pair(deserialize):
    """A connected (client, server) pair, both sides with the given deserialize flag; the
    listener is stopped already (established comms outlive it)."""
    accepted = asyncio.Queue()

    async def handle(comm):
        await accepted.put(comm)

    async with listen("ucxa://127.0.0.1:0", handle, deserialize=deserialize) as listener:
        client = await connect(listener.contact_address, deserialize=deserialize)
        server = await asyncio.wait_for(accepted.get(), 10)
    assert client.deserialize is deserialize and server.deserialize is deserialize
    return client, server


@pytest.mark.parametrize("size", ["small", "large"])
@pytest.mark.parametrize("deserialize", [True, False], ids=["deserialize", "no-deserialize"])
@pytest.mark.parametrize("side", ["listener", "connector"])
def test_deserialize_flag(fresh_ucp, side, deserialize, size):
    """listen(deserialize=...) governs what the server side reads, connect(deserialize=...)
    what the client side reads; the other side keeps the default (True)."""
    import os

    if size == "small":
        values = (b"abc", 123, 456)
    else:  # 4 MiB each, incompressible
        big = os.urandom(2**20) * 4
        values = (big, big[::-1], big[1:] + big[:1])
    msg = _serialized_message(*values)
    original = dict(msg)

    async def main():
        received = asyncio.get_running_loop().create_future()
        done = asyncio.Event()

        async def handle(comm):
            try:
                if side == "listener":
                    received.set_result(await comm.read())
                else:
                    assert comm.deserialize  # the listener's default
                    await comm.write(msg)
                    await done.wait()
            except Exception as e:
                if not received.done():
                    received.set_exception(e)
            finally:
                await comm.close()

        listen_kw = {"deserialize": deserialize} if side == "listener" else {}
        connect_kw = {"deserialize": deserialize} if side == "connector" else {}
        async with listen("ucxa://127.0.0.1:0", handle, **listen_kw) as listener:
            comm = await connect(listener.contact_address, **connect_kw)
        nbytes = None
        try:
            if side == "listener":
                assert comm.deserialize  # connect()'s default
                nbytes = await comm.write(msg)
                out = await asyncio.wait_for(received, 20)
            else:
                assert comm.deserialize is deserialize
                out = await asyncio.wait_for(comm.read(), 20)
            done.set()
        finally:
            await comm.close()
        return out, nbytes

    out, nbytes = run(main(), timeout=60)
    assert msg == original  # the writer's message is left as it was
    if nbytes is not None and size == "large":
        assert nbytes >= 3 * len(values[0])  # x, to_ser and ser all went over
    _check_received(out, *values, deserialize)


@pytest.mark.parametrize("deserialize", [True, False], ids=["deserialize", "no-deserialize"])
def test_deserialize_roundtrip(fresh_ucp, deserialize):
    """A message goes there and, as read, back again; 12 MB are written before the peer reads.
    Without deserialization the Serialized values pass through the relay untouched."""
    import os

    big = os.urandom(2**20) * 4
    values = (big, big[::-1], big[1:] + big[:1])

    async def main():
        from distributed.protocol import Serialized

        a, b = await _comm_pair(deserialize)
        msg = _serialized_message(*values)
        await asyncio.wait_for(a.write(msg), 10)
        relayed = await asyncio.wait_for(b.read(), 10)
        if not deserialize:
            assert isinstance(relayed["ser"], Serialized)
        await asyncio.wait_for(b.write(relayed), 10)
        back = await asyncio.wait_for(a.read(), 10)
        await a.close()
        await b.close()
        return relayed, back

    relayed, back = run(main(), timeout=60)
    _check_received(relayed, *values, deserialize)
    _check_received(back, *values, deserialize)


def test_serialized_data_forwarded_without_deserializing(fresh_ucp):
    """What the scheduler does: a hop that does not deserialize forwards a worker's array to
    a reader that does, which gets the array back intact (its frames travel as frames)."""

    async def main():
        from distributed.protocol import Serialized, to_serialize

        forwarded = asyncio.get_running_loop().create_future()
        array = np.arange(300_000, dtype="f8").reshape(600, 500).T  # not contiguous

        async def final(comm):
            forwarded.set_result(await comm.read())
            await comm.close()

        async with listen("ucxa://127.0.0.1:0", final) as sink:

            async def relay(comm):
                try:
                    msg = await comm.read()
                    # Still serialized here: the relay never sees the array.
                    assert isinstance(msg["data"], Serialized), msg
                    out = await connect(sink.contact_address)
                    await out.write({**msg, "hops": msg["hops"] + 1})
                    await out.close()
                except Exception as e:
                    forwarded.set_exception(e)
                finally:
                    await comm.close()

            async with listen("ucxa://127.0.0.1:0", relay, deserialize=False) as hop:
                comm = await connect(hop.contact_address)
                await comm.write({"hops": 0, "data": to_serialize(array)})
                got = await asyncio.wait_for(forwarded, 20)
                await comm.close()
        return array, got

    array, got = run(main(), timeout=60)
    assert got["hops"] == 1
    assert isinstance(got["data"], np.ndarray)
    np.testing.assert_array_equal(got["data"], array)


def _raise_eoferror():
    raise EOFError


class _RaisesEOFErrorWhenUnpickled:
    def __reduce__(self):
        return _raise_eoferror, ()


def test_eoferror_while_deserializing_closes_the_comm(fresh_ucp):
    """An EOFError from deserializing (a garbled or truncated message) is a CommClosedError
    for the reader, its comm is aborted, and the peer's pending read fails too."""
    from distributed.protocol import to_serialize

    async def main():
        server_read = asyncio.get_running_loop().create_future()

        async def handle(comm):
            await comm.write({"data": to_serialize(_RaisesEOFErrorWhenUnpickled())})
            try:
                await comm.read()
            except Exception as e:
                server_read.set_result(e)
            else:
                server_read.set_result(None)

        async with listen("ucxa://127.0.0.1:0", handle) as listener:
            comm = await connect(listener.contact_address)
            with pytest.raises(CommClosedError):
                await asyncio.wait_for(comm.read(), 10)
            assert comm.closed()
            with pytest.raises(CommClosedError):
                await comm.write("after the error")
            peer_error = await asyncio.wait_for(server_read, 5)
        return peer_error

    assert isinstance(run(main(), timeout=30), CommClosedError)


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
    pytest.importorskip("pandas")  # the test extra; distributed alone does not bring it
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
    import subprocess

    from distributed import Client

    from ucp.collective import free_port

    dask_cli = shutil.which("dask") or os.path.join(os.path.dirname(sys.executable), "dask")
    port = free_port()  # for the scheduler, which the worker starting beside it cannot take
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
