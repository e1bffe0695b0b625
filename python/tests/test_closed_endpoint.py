"""No operation on a closed endpoint reports success, whoever closed it and however: each way
the endpoint can end (our ``close()``, ``abort()``, the unreceived-bytes cap, a matched
receive the caller cancelled, a timed-out receive, the peer's failure) against each
operation (tag, multi-frame, length-prefixed, active message, stream, RMA, flush), each
raising the class of its cause."""
import asyncio
import contextlib
import logging
import os
import subprocess
import sys

import numpy as np
import pytest

import ucp
from conftest import MODES, pair, run

# Whether this process offers the same-host single-copy path (UCXA_SINGLE_COPY).
SINGLE_COPY = ucp._ucx_async.single_copy_ctrl_tag(1) is not None


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
        # Large enough that the transfer lasts tens of milliseconds over TCP; the receive is
        # given up a little later each attempt, so that one lands while the message is under
        # way: not before UCX matched it (UCX withdraws it then) and not after it arrived.
        big = 256 << 20
        inbox, data = np.zeros(big, dtype="u1"), np.ones(big, dtype="u1")
        send = asyncio.ensure_future(client.send(data))
        for attempt in range(40):
            recv = asyncio.ensure_future(server.recv(inbox))
            await asyncio.sleep(0.001 * (attempt % 10))
            if how == "cancelled":
                recv.cancel()
            else:
                recv = asyncio.ensure_future(asyncio.wait_for(recv, 0))
            try:
                await recv
            except (asyncio.CancelledError, asyncio.TimeoutError):
                pass
            if not server._ep.initialized:
                break
            if send.done():
                # The message arrived whole before the receive was given up: send another.
                send = asyncio.ensure_future(client.send(data))
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


async def _check(how, quiet):
    """Ends a pair's server endpoint ``how`` (UCX's error logs muted by ``quiet()``), then
    asserts that every operation on it fails with the class of that end."""
    with quiet():
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


@pytest.mark.parametrize("how", ["close", "abort", "cap", "cancelled", "timed out", "peer failed"])
def test_no_operation_on_an_ended_endpoint_reports_success(progress_mode, how, caplog):
    if how in ("cancelled", "timed out") and SINGLE_COPY:
        # Between two of our endpoints on one host the large message goes by the single-copy
        # path: a 64-byte descriptor, read as soon as it is matched, so no receive is ever
        # caught matched and unfinished. A process with the path off has UCX move it.
        p = subprocess.run(
            [sys.executable, __file__, how, progress_mode],
            env=dict(os.environ, UCXA_SINGLE_COPY="0"), cwd=os.path.dirname(__file__),
            capture_output=True, text=True, timeout=120,
        )
        assert p.returncode == 0 and "CHECKED" in p.stdout, p.stdout[-3000:] + p.stderr[-3000:]
        return
    run(_check(how, lambda: caplog.at_level(logging.ERROR, logger="ucx")), timeout=60)


if __name__ == "__main__":
    # One way and progress mode in a process of its own (see the test).
    ucp.init(blocking_progress_mode=MODES[sys.argv[2]])
    run(_check(sys.argv[1], contextlib.nullcontext), timeout=60)
    print("CHECKED", flush=True)
