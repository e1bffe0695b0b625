"""Several threads and event loops sharing the one worker: each thread runs its own loop with
its own endpoints, while the others progress the same worker (UCX-Py could deadlock here)."""
import asyncio
import threading

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
