"""Active messages (default and registered allocators, queueing per sender), worker-address
endpoints with forced tags and worker-wide receives, fence and flush."""
import asyncio

import numpy as np
import pytest

import ucp
from conftest import pair, run


@pytest.mark.parametrize("size", [0, 1, 100, 8192, 1 << 20])
def test_am_default_allocator_is_bytearray(progress_mode, size):
    async def main():
        lf, client, server = await pair()
        msg = bytes(range(256)) * (size // 256) + bytes(size % 256)
        await asyncio.gather(client.am_send(msg), asyncio.sleep(0))
        got = await server.am_recv()
        assert isinstance(got, bytearray)
        assert got == msg
        lf.close()

    run(main())


def test_am_messages_queue_per_sender_in_order(progress_mode):
    async def main():
        lf, a, server_a = await pair()
        b = await ucp.create_endpoint("127.0.0.1", lf.port)
        for i in range(3):
            await a.am_send(bytes([i]))
        await b.am_send(b"from b")
        got = [bytes(await server_a.am_recv()) for _ in range(3)]
        assert got == [b"\x00", b"\x01", b"\x02"]
        assert not server_a._ep.am_probe()
        lf.close()

    run(main())


def test_am_registered_host_allocator(fresh_ucp):
    async def main():
        ucp.register_am_allocator(lambda n: np.empty(n, dtype="u1"), "host")
        lf, client, server = await pair()
        data = np.arange(5000, dtype="u1")
        await asyncio.gather(client.am_send(data), asyncio.sleep(0))
        got = await server.am_recv()
        assert isinstance(got, np.ndarray)
        np.testing.assert_array_equal(got, data)
        lf.close()

    run(main())


def test_am_allocator_type_must_be_known(fresh_ucp):
    with pytest.raises(ucp.exceptions.UCXError, match="Allocator type not supported"):
        ucp.register_am_allocator(bytearray, "tpu")


def test_pending_am_recv_is_canceled_when_peer_closes(progress_mode):
    async def main():
        lf, client, server = await pair()
        pending = asyncio.ensure_future(client.am_recv())
        # A wait on the state: `am_recv` counts the receive, then registers it at once.
        while client._recv_count == 0:
            await asyncio.sleep(0)
        await server.close()
        with pytest.raises(ucp.exceptions.UCXCanceled, match="am_recv"):
            await pending
        lf.close()

    run(main())


def test_worker_address_endpoints_with_forced_tags(progress_mode):
    async def main():
        address = ucp.get_worker_address()
        assert isinstance(address, ucp._libs.ucx_api.UCXAddress)
        assert address.length == len(bytes(address)) > 0
        again = ucp.get_ucx_address_from_buffer(bytes(address))
        assert again == address and hash(again) == hash(address)
        ep = await ucp.create_endpoint_from_worker_address(address)
        recv = asyncio.ensure_future(ucp.recv(got := bytearray(6), tag=42))
        await ep.send(b"forced", tag=42, force_tag=True)
        await recv
        assert got == b"forced"
        # Without force_tag there are no endpoint tags to hash with.
        with pytest.raises(ucp.exceptions.UCXError, match="force_tag=True"):
            await ep.send(b"x")
        ep.abort()

    run(main())


def test_fence_and_flush(progress_mode):
    async def main():
        lf, client, server = await pair()
        ucp.fence()
        await asyncio.gather(client.send(bytes(100_000)), server.recv(bytearray(100_000)))
        await ucp.flush()
        await client.flush()
        lf.close()

    run(main())


def test_flush_and_fence_before_init_do_nothing(fresh_ucp):
    ucp.fence()
    run(ucp.flush())
    assert ucp.core._ctx is None
