"""A failed transfer leaves no reference cycle behind: once the caller lets go of it, its
future, its buffer and its endpoint are freed at once, not when Python's cycle collector next
runs. (A failure's traceback holds the frames that awaited it; a frame that kept the failed
future made a cycle, future to failure to traceback to frame to future, and a server whose
peers were SIGKILLed held 15-30 MiB more between collections.) The cycle collector is off
while each test runs, so only a cycle can keep what a weak reference watches."""
import asyncio
import gc
import weakref

import numpy as np

import ucp
from conftest import pair, run
from ucp import pending


def _without_the_cycle_collector(coro):
    gc.collect()
    gc.disable()
    try:
        return run(coro)
    finally:
        gc.enable()


async def _let_the_wakeup_go():
    # The loop's handle that woke this task with the failed future holds that future until
    # the step ends.
    await asyncio.sleep(0)
    await asyncio.sleep(0)


def test_a_failed_receive_leaves_its_buffer_and_future_to_no_cycle(fresh_ucp):
    async def main():
        lf, client, server = await pair()
        buf = np.empty(1 << 20, dtype="u1")
        watched = weakref.ref(buf)
        task = asyncio.ensure_future(client.recv(buf))
        await asyncio.sleep(0.05)
        assert not task.done()
        client.abort()
        try:
            await task
        except Exception:
            failed = True
        else:
            failed = False
        assert failed, "a receive on an aborted endpoint did not fail"
        del buf, task
        await _let_the_wakeup_go()
        alive = watched() is not None
        await server.close()
        lf.close()
        return alive

    assert not _without_the_cycle_collector(main()), "the failed receive's buffer outlived it"


def test_a_failed_wait_with_a_timeout_leaves_its_future_to_no_cycle():
    async def main():
        watched = []
        for timeout in (None, 5.0):
            fut = asyncio.get_running_loop().create_future()
            watched.append(weakref.ref(fut))
            asyncio.get_running_loop().call_soon(fut.set_exception, ucp.exceptions.UCXError("failed"))
            try:
                await pending.wait(fut, timeout)
            except ucp.exceptions.UCXError:
                pass
            del fut
            await _let_the_wakeup_go()
        return [w() is not None for w in watched]

    assert _without_the_cycle_collector(main()) == [False, False], "a failed future outlived its wait"


def _three_futures_the_middle_one_failing():
    """Three futures of the running loop, watched by weak references: the middle one fails and
    the others succeed once the loop runs."""
    loop = asyncio.get_running_loop()
    futs = [loop.create_future() for _ in range(3)]
    loop.call_soon(futs[1].set_exception, ucp.exceptions.UCXError("failed"))
    for f in (futs[0], futs[2]):
        loop.call_soon(f.set_result, True)
    return futs, [weakref.ref(f) for f in futs]


def test_failed_posted_operations_leave_their_futures_to_no_cycle():
    async def main():
        futs, watched = _three_futures_the_middle_one_failing()
        try:
            await pending.gather_posted(iter(futs))
        except ucp.exceptions.UCXError:
            pass
        del futs
        await _let_the_wakeup_go()
        return [w() is not None for w in watched]

    assert _without_the_cycle_collector(main()) == [False] * 3, "a failed gather outlived its wait"


def test_a_failed_collective_call_leaves_its_operations_to_no_cycle(fresh_ucp):
    """``Posted.settle`` (every collective call's wait) raises the first failure; the futures
    of the call's operations, failed or not, are freed with it."""
    from ucp.collective.posted import Posted

    async def main():
        lf, client, server = await pair()
        futs, watched = _three_futures_the_middle_one_failing()
        posted = Posted()
        for f in futs:
            posted.adopt(client, f, False)
        try:
            await posted.settle()
        except ucp.exceptions.UCXError:
            failed = True
        else:
            failed = False
        assert failed, "settle did not raise the failure"
        del futs, f, posted
        await _let_the_wakeup_go()
        alive = [w() is not None for w in watched]
        await client.close()
        await server.close()
        lf.close()
        return alive

    assert _without_the_cycle_collector(main()) == [False] * 3, "a failed call's futures outlived it"
