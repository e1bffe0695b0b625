"""The cap on what a peer may leave unreceived on one endpoint (``UCXPY_MAX_UNCLAIMED_BYTES``,
``Worker.set_max_unclaimed_bytes``): a peer over it gets its endpoint closed with the reason,
other endpoints are untouched; messages held for a slow receiver, a large rendezvous first,
are received whole and in order; ``none`` lifts the cap. Unread stream bytes count against
the same cap, and stream bytes held before a receive come first."""
import asyncio
import logging
import time

import numpy as np
import pytest

import ucp
from conftest import pair, run
from ucp.pending import wait as wait_native


def _worker():
    return ucp.core._get_ctx().worker


async def _until(cond, what, timeout=10):
    """Progresses (as a busy caller would) until ``cond()``; fails naming ``what``."""
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out waiting for " + what
        _worker().progress()
        await asyncio.sleep(0.001)


def test_a_peer_over_the_cap_gets_its_endpoint_closed(progress_mode, caplog):
    async def main():
        _worker().set_max_unclaimed_bytes(256 << 10)
        lf, client, server = await pair()
        lf2, other_client, other_server = await pair()
        # 200 messages of 4 KiB (eager: ucp's rendezvous threshold is 8 KiB) nobody receives.
        msg = np.ones(4096, dtype="u1")
        with caplog.at_level(logging.WARNING, logger="ucx"):
            for _ in range(200):
                await client.send(msg)
            await _until(server.closed, "the flooded endpoint to close")
        assert "over the limit of 262144 bytes" in caplog.text
        with pytest.raises(ucp.UCXEndpointClosed, match="left .* messages unreceived"):
            await server.recv(np.empty(4096, dtype="u1"))
        # What it held was dropped; the other endpoint still works.
        assert _worker().unclaimed() == (0, 0)
        got = np.zeros(4096, dtype="u1")
        await asyncio.gather(other_client.send(msg), other_server.recv(got))
        assert (got == 1).all()
        lf.close()
        lf2.close()

    run(main())


def test_held_messages_are_received_whole_and_in_order(progress_mode):
    async def main():
        # 1 MiB: the 50 KiB behind the large message fit, the large one itself would not.
        _worker().set_max_unclaimed_bytes(1 << 20)
        lf, client, server = await pair()
        big = np.arange(1 << 20, dtype="u4")  # 4 MiB: a rendezvous, sent before its receive
        sends = asyncio.ensure_future(client.send(big))
        await asyncio.sleep(0)
        small = [np.full(1024, i, dtype="u1") for i in range(50)]
        for m in small:
            await client.send(m)
        await _until(lambda: _worker().unclaimed()[0] == 51, "the worker to hold all 51 messages")
        assert not server.closed(), "the next message of a tag never counts against the cap"
        got = np.empty_like(big)
        await server.recv(got)
        np.testing.assert_array_equal(got, big)
        await sends
        for i, m in enumerate(small):
            one = np.empty(1024, dtype="u1")
            await server.recv(one)
            assert (one == i).all(), f"message {i} came out of order"
        assert _worker().unclaimed() == (0, 0)
        lf.close()

    run(main())


def test_closing_drops_what_is_held_for_the_endpoint(progress_mode):
    async def main():
        lf, client, server = await pair()
        for _ in range(10):
            await client.send(np.ones(1000, dtype="u1"))
        await _until(lambda: _worker().unclaimed()[0] == 10, "the worker to hold the messages")
        server.abort()
        assert _worker().unclaimed() == (0, 0)
        lf.close()

    run(main())


def test_no_cap_holds_nothing(progress_mode):
    async def main():
        w = _worker()
        assert w.max_unclaimed_bytes == 1 << 30, "the default cap"
        w.set_max_unclaimed_bytes(None)
        assert w.max_unclaimed_bytes is None
        lf, client, server = await pair()
        for _ in range(20):
            await client.send(np.ones(4096, dtype="u1"))
        for _ in range(50):
            w.progress()
            await asyncio.sleep(0.001)
        assert w.unclaimed() == (0, 0)
        assert w.tag_probe(server._tags["msg_recv"])
        for _ in range(20):
            await server.recv(np.empty(4096, dtype="u1"))
        lf.close()

    run(main())


@pytest.mark.parametrize("value, cap", [("12345", 12345), ("none", None), (" NONE ", None), ("", 1 << 30)])
def test_the_cap_from_the_environment(fresh_ucp, monkeypatch, value, cap):
    monkeypatch.setenv("UCXPY_MAX_UNCLAIMED_BYTES", value)
    ucp.init()
    assert _worker().max_unclaimed_bytes == cap


@pytest.mark.parametrize("value", ["lots", "-1", "1.5"])
def test_a_bad_cap_in_the_environment_is_refused(fresh_ucp, monkeypatch, value):
    monkeypatch.setenv("UCXPY_MAX_UNCLAIMED_BYTES", value)
    with pytest.raises(ValueError, match="UCXPY_MAX_UNCLAIMED_BYTES must be a number of bytes or 'none', not"):
        ucp.init()


def test_unread_stream_bytes_count_against_the_cap(progress_mode):
    async def main():
        _worker().set_max_unclaimed_bytes(256 << 10)
        lf, client, server = await pair()
        chunk = np.ones(64 << 10, dtype="u1")
        for _ in range(8):  # 512 KiB nobody reads
            try:
                await wait_native(client._ep.stream_send(chunk))
            except ucp.exceptions.UCXBaseException:
                break
        await _until(server.closed, "the endpoint to close")
        with pytest.raises(ucp.UCXEndpointClosed, match="stream bytes unread, over the limit of 262144 bytes"):
            await server.recv(np.empty(8, dtype="u1"))
        lf.close()

    run(main())


def test_stream_bytes_held_before_a_receive_come_first_and_in_order(progress_mode):
    async def main():
        lf, client, server = await pair()
        first = np.arange(30000, dtype="u4").view("u1")  # 120 000 bytes
        for part in (first[:100], first[100:5000], first[5000:]):
            await wait_native(client._ep.stream_send(part))
        await _until(lambda: server._ep.stream_backlog == first.nbytes, "the stream bytes to be held")
        head = np.empty(50000, dtype="u1")
        await wait_native(server._ep.stream_recv(head))
        np.testing.assert_array_equal(head, first[:50000])
        # More than is held: the rest of the backlog, then UCX.
        later = np.full(4000, 7, dtype="u1")
        rest = np.empty(first.nbytes - 50000 + later.nbytes, dtype="u1")
        pending = wait_native(server._ep.stream_recv(rest))
        assert server._ep.stream_backlog == 0
        await wait_native(client._ep.stream_send(later))
        await pending
        np.testing.assert_array_equal(rest[: first.nbytes - 50000], first[50000:])
        np.testing.assert_array_equal(rest[first.nbytes - 50000 :], later)
        lf.close()

    run(main())
