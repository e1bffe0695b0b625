"""No operation on a closed endpoint reports success, whoever closed it and however: each way
the endpoint can end (our ``close()``, ``abort()``, the unreceived-bytes cap, a matched
receive the caller cancelled, a timed-out receive, the peer's failure) against each
operation (tag, multi-frame, length-prefixed, active message, stream, RMA, flush), each
raising the class of its cause."""
import asyncio
import logging

import numpy as np
import pytest

import ucp
from conftest import pair, run


def _worker():
    return ucp.core._get_ctx().worker


async def _until(cond, what, timeout=10):
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not cond():
        assert loop.time() < deadline, "timed out waiting for " + what
        _worker().progress()
        await asyncio.sleep(0.001)


async def _closed_by_us(how):
    """A connected pair whose server endpoint this side ended ``how``; returns
    (listener, client, server, the class later operations on server must raise, and a
    pattern their message must match)."""
    lf, client, server = await pair()
    # A key to the client's memory, for the RMA operations (unpacked while the endpoint lives).
    mem = ucp._ucx_async.MemoryHandle.alloc(ucp.core._get_ctx().context, 64)
    server.test_rma = (mem, server._ep.unpack_rkey(mem.pack_rkey()))
    server.test_native = server._ep  # the native endpoint, which close() lets go of
    if how == "close":
        await server.close()
        return lf, client, server, ucp.UCXEndpointClosed, "Endpoint closed"
    if how == "abort":
        server.abort()
        return lf, client, server, ucp.UCXEndpointClosed, "Endpoint closed"
    if how == "cap":
        _worker().set_max_unclaimed_bytes(64 << 10)
        for _ in range(40):  # 4 KiB each, eager: nobody receives them
            await client.send(np.ones(4096, dtype="u1"))
        await _until(lambda: not server._ep.initialized, "the cap to close the endpoint")
        return lf, client, server, ucp.UCXEndpointClosed, "UCXPY_MAX_UNCLAIMED_BYTES"
    if how in ("cancelled", "timed out"):
        # A receive UCX has matched to a message under way, then given up by its caller.
        big = 32 << 20
        recv = asyncio.ensure_future(server.recv(np.zeros(big, dtype="u1")))
        send = asyncio.ensure_future(client.send(np.ones(big, dtype="u1")))
        await _until(lambda: _worker().inflight() >= 2 or recv.done(), "the transfer to start")
        for _ in range(20):
            if not server._ep.initialized:
                break
            if how == "cancelled":
                recv.cancel()
            else:
                recv = asyncio.ensure_future(asyncio.wait_for(recv, 0))
            try:
                await recv
            except (asyncio.CancelledError, asyncio.TimeoutError):
                pass
            if server._ep.initialized:
                # UCX withdrew it (not matched yet): try again with the message under way.
                recv = asyncio.ensure_future(server.recv(np.zeros(big, dtype="u1")))
                await asyncio.sleep(0.002)
        if server._ep.initialized:
            pytest.skip("UCX withdrew every receive: no matched receive was cancelled")
        send.cancel()
        return lf, client, server, ucp.UCXEndpointClosed, "cancelled after UCX had matched"
    if how == "peer failed":
        client.abort()  # the peer's side goes away without the close message
        await _until(lambda: not server._ep.is_alive(), "the peer's failure to be reported")
        return lf, client, server, ucp.UCXPeerFailure, ""
    raise AssertionError(how)


def _operations(ep):
    """Every transfer of a high-level endpoint, and the native ones beneath it, as
    (name, coroutine factory)."""

    async def native(post):
        fut = post()
        if fut is not None:
            await fut

    return [
        ("send 8 B", lambda: ep.send(np.ones(8, dtype="u1"))),
        ("send 64 MiB", lambda: ep.send(np.ones(64 << 20, dtype="u1"))),
        ("recv", lambda: ep.recv(np.zeros(8, dtype="u1"))),
        ("send_multi", lambda: ep.send_multi([b"a", np.ones(1 << 20, dtype="u1")])),
        ("recv_multi", lambda: ep.recv_multi()),
        ("send_obj", lambda: ep.send_obj(b"object")),
        ("recv_obj", lambda: ep.recv_obj()),
        ("am_send", lambda: ep.am_send(b"x")),
        ("am_recv", lambda: ep.am_recv()),
        ("flush", lambda: ep.flush()),
        ("stream_send", lambda: native(lambda: ep.test_native.stream_send(b"x"))),
        ("stream_recv", lambda: native(lambda: ep.test_native.stream_recv(bytearray(1)))),
        ("put", lambda: native(lambda: ep.test_native.put(bytearray(8), ep.test_rma[0].address, ep.test_rma[1]))),
        ("get", lambda: native(lambda: ep.test_native.get(bytearray(8), ep.test_rma[0].address, ep.test_rma[1]))),
    ]


@pytest.mark.parametrize("how", ["close", "abort", "cap", "cancelled", "timed out", "peer failed"])
def test_no_operation_on_an_ended_endpoint_reports_success(progress_mode, how, caplog):
    async def main():
        with caplog.at_level(logging.ERROR, logger="ucx"):
            lf, client, server, cls, pattern = await _closed_by_us(how)
        assert not server.alive
        succeeded, wrong = [], []
        for name, op in _operations(server):
            try:
                await asyncio.wait_for(op(), 10)
            except asyncio.TimeoutError:
                wrong.append(f"{name}: hung")
            except Exception as e:
                if not isinstance(e, cls) or pattern not in str(e) and name != "flush":
                    wrong.append(f"{name}: {type(e).__name__}: {e}")
            else:
                succeeded.append(name)
        assert not succeeded, f"reported success on an endpoint ended by {how}: {succeeded}"
        assert not wrong, "\n".join(wrong)
        client.abort()
        lf.close()

    run(main(), timeout=60)
