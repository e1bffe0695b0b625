"""Shared set-up for the ``ucp`` tests: loopback only, and a fresh global context per test in
each progress mode."""
import asyncio
import gc
import os

import pytest

# Tests talk over loopback only (the machine may have other interfaces).
os.environ.setdefault("UCX_NET_DEVICES", "lo")
os.environ.setdefault("UCXPY_IFNAME", "lo")

import ucp  # noqa: E402

MODES = {"blocking": True, "polling": False}


def reset():
    """``ucp.reset()``. Where a test left endpoints or listeners open (a failed one: pytest
    keeps its frames), they are aborted and closed first, so the tests after it start with a
    fresh context instead of each failing its own set-up; the test that left them still fails
    with reset's error."""
    try:
        ucp.reset()
    except ucp.exceptions.UCXError:
        from ucp.application import Listener
        from ucp.endpoint import Endpoint

        contexts = [c for c in (ucp.core._ctx, ucp.core._other_ctx) if c is not None]
        for o in gc.get_objects():
            if isinstance(o, Endpoint) and any(o._ctx is c for c in contexts):
                o.abort()
            elif isinstance(o, Listener) and any(o._ctx is c for c in contexts):
                o.close()
        del contexts
        ucp.reset()
        raise


@pytest.fixture(params=list(MODES))
def progress_mode(request):
    """Initialises UCX in blocking, then in polling progress mode; resets afterwards."""
    reset()
    ucp.init(blocking_progress_mode=MODES[request.param])
    yield request.param
    reset()


@pytest.fixture
def fresh_ucp():
    """A reset global context before and after the test (lazily re-created)."""
    reset()
    yield
    reset()


def has_ipv6_loopback():
    """Whether this machine can bind ``::1`` (IPv6 may be off)."""
    import socket

    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


def run(coro, timeout=30):
    """Runs a coroutine to completion with a time limit (a hang fails, not blocks)."""

    async def limited():
        return await asyncio.wait_for(coro, timeout)

    return asyncio.run(limited())


def launched_ranks_pass(n, script, *args, timeout=120):
    """Runs ``python -m ucp.launch -n N script args...`` and asserts that the job exited 0
    and every rank printed ``OK rank R`` (their lines may interleave: they share the pipe).
    Returns the job's stdout."""
    import subprocess
    import sys

    p = subprocess.run(
        [sys.executable, "-m", "ucp.launch", "-n", str(n), str(script), *args],
        capture_output=True, text=True, timeout=timeout,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    assert all(f"OK rank {r}" in p.stdout for r in range(n)), p.stdout
    return p.stdout


async def rail_pair(rails=2, listener=None):
    """A ``ucp.multirail`` group connected to a ``RailListener`` of ``rails`` rails (or to
    ``listener``): returns (listener, client group, server group)."""
    from ucp.multirail import RailGroup, RailListener

    listener = listener or RailListener(rails)
    client, server = await asyncio.gather(
        RailGroup.connect([("127.0.0.1", p) for p in listener.ports]), asyncio.wait_for(listener.accept(), 10)
    )
    return listener, client, server


async def pair(handler=None, **listener_kw):
    """A listener whose callback stores the server endpoint, and a client connected to it.
    Returns (listener, client endpoint, server endpoint). The listener keeps every endpoint
    it accepted alive (``lf.accepted``): a dropped endpoint closes, as in UCX-Py."""
    server_ep = asyncio.get_running_loop().create_future()
    accepted = []

    async def on_connect(ep):
        accepted.append(ep)
        if handler is not None:
            await handler(ep)
        if not server_ep.done():
            server_ep.set_result(ep)

    lf = ucp.create_listener(on_connect, **listener_kw)
    lf.accepted = accepted
    client = await ucp.create_endpoint("127.0.0.1", lf.port)
    server = await server_ep
    # Settled: the same-host single-copy path's hello exchange (its receives count in
    # `Worker.inflight()`, which tests read) has run, where both sides offer the path.
    await settled(client, server)
    return lf, client, server


async def settled(*eps, timeout=5):
    """Waits until each endpoint's single-copy hello exchange (if it has one) is done."""
    deadline = asyncio.get_running_loop().time() + timeout
    for ep in eps:
        while ep._tags and ep._tags.get("single_copy") and ep.single_copy[:2] != (True, True):
            assert asyncio.get_running_loop().time() < deadline, f"no single-copy verdicts: {ep.single_copy}"
            await asyncio.sleep(0.001)


async def posted(coro, settle=()):
    """Starts `coro` (a transfer) as a task and returns the task once its operation is in
    flight in UCX, or it has already finished: a wait on that state, not a sleep that a slow
    machine could outlast.

    The wait reads the worker's count of operations in flight, which an endpoint's
    single-copy hello exchange also moves: pass in `settle` the endpoints whose exchange may
    still be running (one fresh from a listener or another process), or a hello finishing
    just as the transfer is posted leaves the count where it was and the wait never ends."""
    await settled(*settle)
    worker = ucp.core._get_ctx().worker
    before = worker.inflight()
    task = asyncio.ensure_future(coro)
    while worker.inflight() <= before and not task.done():
        await asyncio.sleep(0)
    return task
