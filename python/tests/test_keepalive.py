"""A worker-address endpoint (no connection manager) noticing a killed peer. Over tcp UCX
sees the connection reset at once. Over shared memory it does not notice at all (no failure
45 s after a SIGKILL, with UCX's ``KEEPALIVE_INTERVAL`` at its default 20 s or at 1 s; measured
with UCX 1.22): docs/reliability.md lists this as a UCX limit, and this test pins the
tcp behaviour, which is the one to use where a peer may die."""
import asyncio
import multiprocessing
import os
import signal
import time

import pytest

import ucp
from conftest import posted, run


def _serve_worker_address(q):
    async def main():
        q.put(bytes(ucp.get_worker_address()))
        await asyncio.sleep(60)

    asyncio.run(main())


@pytest.mark.parametrize("blocking", [True, False])
def test_worker_address_endpoint_over_tcp_notices_a_killed_peer(fresh_ucp, blocking):
    ucp.reset()
    ucp.init(options={"TLS": "tcp,self"}, blocking_progress_mode=blocking)
    spawn = multiprocessing.get_context("spawn")
    q = spawn.Queue()
    proc = spawn.Process(target=_serve_worker_address, args=(q,), daemon=True)
    proc.start()

    async def main():
        address = await asyncio.get_running_loop().run_in_executor(None, q.get, True, 30)
        ep = await ucp.create_endpoint_from_worker_address(address)
        await ep.send(b"x", tag=1, force_tag=True)  # the endpoint is wired up
        pending = await posted(ep.recv(bytearray(8), tag=2, force_tag=True))
        os.kill(proc.pid, signal.SIGKILL)
        start = time.monotonic()
        with pytest.raises(ucp.exceptions.UCXBaseException):
            await asyncio.wait_for(pending, 15)
        ep.abort()
        return time.monotonic() - start

    try:
        took = run(main(), timeout=60)
    finally:
        proc.kill()
        proc.join()
    assert took < 5, f"the dead peer was noticed after {took:.1f} s"
