"""Several threads and event loops sharing the one worker: each thread runs its own loop with
its own endpoints, while the others progress the same worker (UCX-Py could deadlock here)."""
import asyncio
import threading
import time

import numpy as np

import ucp
from conftest import pair


def test_event_loops_in_several_threads(fresh_ucp):
    errors = []
    results = []

    def worker_thread(i):
        async def main():
            lf, client, server = await pair()
            for n in range(200):
                out = np.full(1000 + i, n % 251, dtype="u1")
                back = np.empty_like(out)
                await asyncio.gather(client.send(out), server.recv(back))
                assert (back == out).all()
            await client.close()
            lf.close()
            return i

        try:
            results.append(asyncio.run(asyncio.wait_for(main(), 60)))
        except BaseException as e:  # reported below, in the test's thread
            errors.append(e)

    ucp.init()
    threads = [threading.Thread(target=worker_thread, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(90)
    assert not any(t.is_alive() for t in threads), "a thread hung"
    assert not errors, errors
    assert sorted(results) == [0, 1, 2, 3]


def test_progress_from_another_thread_while_loop_waits(fresh_ucp):
    """A plain thread hammering ucp.progress() while a loop waits on a receive: the receive
    completes (resolved across threads) and nothing deadlocks."""
    stop = threading.Event()

    async def main():
        lf, client, server = await pair()
        t = threading.Thread(target=lambda: [ucp.progress() for _ in iter(stop.is_set, True)])
        t.start()
        try:
            for _ in range(100):
                got = bytearray(5)
                recv = asyncio.ensure_future(server.recv(got))
                await asyncio.sleep(0)
                await client.send(b"hello")
                await asyncio.wait_for(recv, 10)
                assert got == b"hello"
        finally:
            stop.set()
            t.join(10)
        lf.close()

    asyncio.run(main())


class _LoopWithHook(asyncio.SelectorEventLoop):
    """An event loop that runs ``before_next_future`` (once) inside its next ``create_future``:
    the moment when a submitting call runs Python and another thread may take the GIL."""

    before_next_future = None

    def create_future(self):
        hook, self.before_next_future = self.before_next_future, None
        if hook is not None:
            hook()
        return super().create_future()


def test_completion_while_the_submitter_makes_its_future(fresh_ucp):
    """An operation that completes, and is drained by another progress call, between its
    submission and the creation of its future still resolves that future (the completion was
    once dropped because the operation was not yet in the in-flight table: a handshake on one
    of several threads' loops then timed out)."""
    payload = b"handshake bytes!"

    async def main():
        lf, client, server = await pair()
        got = bytearray(len(payload))

        def complete_and_drain():
            client._ep.stream_send(payload)
            deadline = time.monotonic() + 10
            while got != payload and time.monotonic() < deadline:
                ucp.progress()
            assert got == payload, "the stream receive never completed in UCX"

        asyncio.get_running_loop().before_next_future = complete_and_drain
        fut = server._ep.stream_recv(got)
        assert fut is not None, "the receive finished inline; the test needs it in flight"
        await asyncio.wait_for(fut, 10)
        assert got == payload
        await client.close()
        lf.close()

    with asyncio.Runner(loop_factory=_LoopWithHook) as runner:
        runner.run(main())
