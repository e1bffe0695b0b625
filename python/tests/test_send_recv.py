"""Tag send/receive between two endpoints: every buffer kind and size, exact-size receives and
their errors, user tags, send_obj/recv_obj, send_multi/recv_multi — in both progress modes."""
import asyncio
import re

import numpy as np
import pytest

import ucp
from conftest import pair, run

SIZES = [0, 1, 8, 100, 8192, 65536, 1 << 20, 16 << 20]
DTYPES = ["u1", "i2", "i4", "i8", "f4", "f8", "c16"]


@pytest.mark.parametrize("size", SIZES)
def test_bytes_both_ways(progress_mode, size):
    async def main():
        lf, client, server = await pair()
        msg = bytes(np.random.default_rng(size).integers(0, 256, size, dtype=np.uint8))
        got = bytearray(size)
        # Rendezvous sends finish only once the receive is posted: run both at once.
        await asyncio.gather(client.send(msg), server.recv(got))
        assert got == msg
        echo = bytearray(size)
        await asyncio.gather(server.send(memoryview(got)), client.recv(memoryview(echo)))
        assert echo == msg
        await client.close()
        lf.close()

    run(main())


@pytest.mark.parametrize("dtype", DTYPES)
def test_numpy_arrays(progress_mode, dtype):
    async def main():
        lf, client, server = await pair()
        a = (np.arange(3 * 1000) % 127).astype(dtype).reshape(3, 1000)
        b = np.zeros_like(a)
        await asyncio.gather(client.send(a), server.recv(b))
        np.testing.assert_array_equal(a, b)
        # Fortran order is contiguous too.
        f = np.asfortranarray(a)
        g = np.zeros_like(f, order="F")
        await asyncio.gather(client.send(f), server.recv(g))
        np.testing.assert_array_equal(f, g)
        await client.close()
        lf.close()

    run(main())


def test_shorter_message_is_a_length_mismatch(progress_mode):
    async def main():
        lf, client, server = await pair()
        await client.send(b"abc")
        with pytest.raises(ucp.exceptions.UCXMsgTruncated, match=r"length mismatch: 3 \(got\) != 100 \(expected\)"):
            await server.recv(bytearray(100))
        lf.close()

    run(main())


def test_longer_message_is_truncated_not_cut(progress_mode):
    async def main():
        lf, client, server = await pair()
        buf = bytearray(10)
        recv = server.recv(buf)
        await client.send(bytes(100))
        with pytest.raises(ucp.exceptions.UCXError, match="Message truncated"):
            await recv
        lf.close()

    run(main())


def test_bad_buffers_are_refused_with_clear_errors(fresh_ucp):
    async def main():
        lf, client, server = await pair()
        with pytest.raises(ValueError, match="writing to readonly buffer!"):
            await server.recv(b"immutable")
        with pytest.raises(ValueError, match="Array must be C or F contiguous"):
            await client.send(np.arange(10)[::2])
        with pytest.raises(TypeError, match="buffer protocol"):
            await client.send(12345)
        lf.close()

    run(main())


def test_user_tags_keep_messages_apart(progress_mode):
    async def main():
        lf, client, server = await pair()
        await client.send(b"one", tag=1)
        await client.send(b"two", tag="two")
        await client.send(b"raw", tag=0xDEADBEEF, force_tag=True)
        # Tags were hashed with the endpoint's own: a plain receive does not see them.
        assert not server._ctx.worker.tag_probe(server._tags["msg_recv"])
        got = bytearray(3)
        await server.recv(got, tag="two")
        assert got == b"two"
        await server.recv(got, tag=1)
        assert got == b"one"
        # A forced tag is sent as is; the receiver forces the same value.
        await server.recv(got, tag=0xDEADBEEF, force_tag=True)
        assert got == b"raw"
        lf.close()

    run(main())


def test_send_obj_recv_obj(progress_mode):
    async def main():
        lf, client, server = await pair()
        await client.send_obj(b"hello world")
        assert bytes(await server.recv_obj()) == b"hello world"
        _, got = await asyncio.gather(
            server.send_obj(np.arange(10, dtype="f8")), client.recv_obj(allocator=lambda n: np.empty(n, dtype="u1"))
        )
        np.testing.assert_array_equal(got.view("f8"), np.arange(10, dtype="f8"))
        lf.close()

    run(main())


def test_send_multi_recv_multi(progress_mode):
    async def main():
        lf, client, server = await pair()
        frames = [b"a", bytes(100_000), np.arange(7, dtype="i4")]
        _, got = await asyncio.gather(client.send_multi(frames), server.recv_multi())
        assert [bytes(g) for g in got] == [b"a", bytes(100_000), np.arange(7, dtype="i4").tobytes()]
        await client.send_multi([])
        assert await server.recv_multi() == []
        lf.close()

    run(main())


def test_send_multi_with_more_frames_than_one_header_holds(fresh_ucp):
    """250 frames need three of UCXX's 100-frame headers; empty frames keep their place."""

    async def main():
        lf, client, server = await pair()
        frames = [bytes([i % 256]) * (i % 5) for i in range(250)]
        _, got = await asyncio.gather(client.send_multi(frames), server.recv_multi())
        assert [bytes(g) for g in got] == frames
        lf.close()

    run(main())


def test_multi_header_is_ucxx_header_layout():
    """UCXX's ``ucxx::Header`` as its serialize() writes it: next (1 byte), nframes (8), 100
    int CUDA flags, 100 size_t sizes, packed, little-endian."""
    from ucp.framing import MultiHeader as _MultiHeader

    (h,) = _MultiHeader.pack_all([(False, 5), (True, 70000)])
    assert len(h) == 1 + 8 + 4 * 100 + 8 * 100 == 1209
    assert h[0] == 0 and int.from_bytes(h[1:9], "little") == 2
    assert [int.from_bytes(h[9 + 4 * i : 13 + 4 * i], "little") for i in range(3)] == [0, 1, 0]
    assert [int.from_bytes(h[409 + 8 * i : 417 + 8 * i], "little") for i in range(3)] == [5, 70000, 0]
    first, second = _MultiHeader.pack_all([(False, 1)] * 101)
    assert (first[0], second[0]) == (1, 0)
    assert _MultiHeader.unpack(second) == (False, [(False, 1)])
    bad = bytearray(h)
    bad[1:9] = (101).to_bytes(8, "little")
    with pytest.raises(ucp.exceptions.UCXError, match="more than 100 frames"):
        _MultiHeader.unpack(bad)


def test_tags_match_the_peer(fresh_ucp):
    async def main():
        lf, client, server = await pair()
        assert client._tags["msg_send"] == server._tags["msg_recv"]
        assert client._tags["msg_recv"] == server._tags["msg_send"]
        assert client._tags["ctrl_send"] == server._tags["ctrl_recv"]
        assert client._tags["ctrl_recv"] == server._tags["ctrl_send"]
        lf.close()

    run(main())


def test_an_inline_receive_still_checks_the_length(fresh_ucp):
    async def main():
        lf, client, server = await pair()
        await client.send(b"xy")
        # Let the message arrive before the receive is posted, so it completes inline.
        while not server._ctx.worker.tag_probe(server._tags["msg_recv"]):
            await asyncio.sleep(0.001)
        with pytest.raises(ucp.exceptions.UCXMsgTruncated, match=re.escape("2 (got) != 5 (expected)")):
            await server.recv(bytearray(5))
        lf.close()

    run(main())


def test_a_finished_operation_leaves_nothing_queued_on_the_loop(fresh_ucp):
    """An operation's future watches for its cancellation with a done-callback, which the
    extension takes off before it sets the result: otherwise asyncio queues a call to it on
    the loop for every finished operation, and code that finishes operations inline without
    waiting on the loop (the collectives' spin) piled them up until each check of the loop's
    ready queue crawled (5000 1 KiB alltoallv calls on 2 ranks: 26 -> 205 µs a call). A
    cancelled future still cancels its operation in UCX (test_reliability's cancel tests)."""
    from ucp.continuous_ucx_progress import _is_driver

    async def main():
        lf, client, server = await pair()
        loop = asyncio.get_running_loop()
        buf = bytearray(8)
        fut = server._post_recv(buf, server._tag("msg_recv", None, False), 0)
        assert fut is not None, "nothing was sent yet, so the receive is in flight"
        await client.send(b"12345678")
        while not fut.done():
            server._worker.progress()
        queued = [h for h in loop._ready if not _is_driver(getattr(h._callback, "__self__", None))]
        assert queued == [], queued
        assert buf == b"12345678"
        server._recv_finished()
        lf.close()

    run(main())


async def only_the_drivers_pass_queued():
    """A connected pair on the running loop, settled, then the blocking driver's pass queued
    alone: returns the listener, the endpoints, the loop and the driver."""
    from ucp.continuous_ucx_progress import _drivers

    lf, client, server = await pair()
    loop = asyncio.get_running_loop()
    for _ in range(3):
        await asyncio.sleep(0)
    driver = _drivers[ucp.core._get_ctx().worker][loop]
    driver._schedule()
    assert len(loop._ready) == 1, list(loop._ready)
    return lf, (client, server), loop, driver


def test_the_spin_rule_tells_the_drivers_passes_from_other_work(fresh_ucp):
    """``others_ready`` (whether an inline spin would delay something on the loop) passes over
    the blocking driver's queued passes (``_run``, and ``_on_fd`` as the selector queues it),
    known by the function they call, and sees anything else; a pass a stopped driver left
    queued still counts as a driver's."""
    from ucp.continuous_ucx_progress import others_ready

    async def main():
        lf, eps, loop, driver = await only_the_drivers_pass_queued()
        assert not others_ready(loop), list(loop._ready)
        loop.call_soon(driver._on_fd)
        assert not others_ready(loop), list(loop._ready)
        loop.call_soon(lambda: None)
        assert others_ready(loop)
        await asyncio.sleep(0)
        assert not loop._ready or not others_ready(loop)
        driver.stop()
        loop.call_soon(driver._run)
        assert not others_ready(loop), "a stopped driver's queued pass is still a driver's"
        await asyncio.sleep(0)
        lf.close()

    run(main())


def test_the_inline_spin_runs_with_only_the_drivers_pass_queued(fresh_ucp):
    """``inline_spin_us`` (what ``send`` and ``recv`` may spin) knows the usual queue, the pass
    the blocking driver queued last, by identity: with it alone the spin runs; with anything
    beside it, or anything else alone, it does not."""
    from ucp.continuous_ucx_progress import inline_spin_us, set_spin_us, spin_us

    before = spin_us()
    set_spin_us(100)

    async def main():
        lf, eps, loop, driver = await only_the_drivers_pass_queued()
        assert inline_spin_us() == 100, "only the driver's pass is queued"
        loop.call_soon(lambda: None)
        assert inline_spin_us() == 0, "other work is queued beside the pass"
        for _ in range(100):
            await asyncio.sleep(0)
            if not loop._ready:
                break
        loop.call_soon(lambda: None)
        assert inline_spin_us() == 0, "other work is queued (alone, once the driver went idle)"
        await asyncio.sleep(0)
        lf.close()

    try:
        run(main())
    finally:
        set_spin_us(before)


def test_the_spin_rule_passes_over_a_non_blocking_drivers_step(fresh_ucp):
    """A non-blocking driver's next step (its asyncio task's, a step that is no bound method,
    queued at every loop iteration) is the driver's, not other work: with only it queued,
    ``others_ready`` is false, and the inline spin still runs."""
    from ucp.continuous_ucx_progress import others_ready

    ucp.init(blocking_progress_mode=False)

    async def main():
        lf, client, server = await pair()
        loop = asyncio.get_running_loop()
        await asyncio.sleep(0)
        assert loop._ready, "the driver's step is queued"
        assert not others_ready(loop), list(loop._ready)
        loop.call_soon(lambda: None)
        assert others_ready(loop)
        await asyncio.sleep(0)
        lf.close()

    run(main())


def test_the_spin_rule_finds_the_running_loop_of_this_thread_only():
    """``inline_spin_us`` remembers the loop it last found (asyncio's own lookup makes a
    system call on 3.11); it must still answer with the loop running in the calling thread:
    across loops one after another, a loop in another thread at the same time, outside any
    loop (an error, as asyncio's), and in a child forked from inside a running loop."""
    import os
    import threading

    from ucp.continuous_ucx_progress import _running_loop

    async def here():
        return _running_loop() is asyncio.get_running_loop()

    assert asyncio.run(here()) and asyncio.run(here()), "a second loop after the first"
    with pytest.raises(RuntimeError):
        _running_loop()

    other = {}
    started, stop = threading.Event(), threading.Event()

    async def hold():
        other["loop"] = asyncio.get_running_loop()
        other["seen"] = _running_loop()
        started.set()
        while not stop.is_set():
            await asyncio.sleep(0.001)

    t = threading.Thread(target=asyncio.run, args=(hold(),))
    t.start()
    try:
        assert started.wait(10)

        async def mine():
            assert _running_loop() is asyncio.get_running_loop() is not other["loop"]
            assert other["seen"] is other["loop"]
            # The child forked from inside this loop runs no loop.
            pid = os.fork()
            if pid == 0:
                try:
                    _running_loop()
                    code = 1
                except RuntimeError:
                    code = 0
                os._exit(code)
            _, status = os.waitpid(pid, 0)
            assert os.waitstatus_to_exitcode(status) == 0, "the forked child saw its parent's loop"
            return _running_loop() is asyncio.get_running_loop()

        assert asyncio.run(mine())
    finally:
        stop.set()
        t.join()


async def message_waiting(server):
    """Waits until a message on ``server``'s own tag waits to be received."""
    while not server._ctx.worker.tag_probe(server._tags["msg_recv"]):
        await asyncio.sleep(0.001)


def test_the_spin_is_asked_of_a_callable_only_for_an_operation_in_flight(fresh_ucp):
    """``send``/``recv`` pass ``inline_spin_us`` itself: the extension calls it only when the
    operation did not finish at once (a small message usually does, and the call sat between
    a reply's arrival and the next send). A callable that fails is reported, and the
    operation, already submitted, still finishes through its future."""
    import sys

    async def main():
        lf, client, server = await pair()
        native, tag = server._ep, server._tags["msg_recv"]
        asked = []

        def spin():
            asked.append(1)
            return 0

        await client.send(b"12345678")
        await message_waiting(server)
        buf = bytearray(8)
        assert native.tag_recv_checked(buf, tag, spin) is None, "the message was waiting"
        assert asked == [] and buf == b"12345678"

        fut = native.tag_recv_checked(buf, tag, spin)
        assert fut is not None and asked == [1], "nothing was waiting: the spin was asked for"
        await client.send(b"abcdefgh")
        await fut
        assert buf == b"abcdefgh"

        def broken():
            raise RuntimeError("no spin today")

        seen = []  # the errors' types only: their tracebacks would keep the endpoints alive
        hook, sys.unraisablehook = sys.unraisablehook, lambda u: seen.append(type(u.exc_value))
        try:
            fut = native.tag_recv_checked(buf, tag, broken)
        finally:
            sys.unraisablehook = hook
        assert fut is not None and seen == [RuntimeError]
        await client.send(b"ABCDEFGH")
        await fut
        assert buf == b"ABCDEFGH"

        for bad in ("100", -1, 1.5):
            with pytest.raises((TypeError, OverflowError), match="spin_us|negative|int"):
                native.tag_recv_checked(buf, tag, bad)
        lf.close()

    run(main())


def test_a_large_receive_finished_at_once_is_marked_for_a_turn_of_the_loop(fresh_ucp):
    """With ``mark_large``, a receive of at least the single-copy threshold that finished at
    once returns ``True`` (``Endpoint.recv`` then lets the event loop run now and then, so a
    stream of such messages cannot hold its timers); a smaller one returns ``None``, as does
    any receive without the flag."""
    from ucp import _ucx_async as native_mod

    large = native_mod.single_copy_threshold()

    async def main():
        lf, client, server = await pair()
        native, tag = server._ep, server._tags["msg_recv"]
        for size, mark, want in ((large, True, True), (large, False, None), (8, True, None)):
            # A large send finishes once the peer has read it: sent from a task.
            sent = asyncio.ensure_future(client.send(np.full(size, 7, dtype="u1")))
            await message_waiting(server)
            buf = np.zeros(size, dtype="u1")
            got = native.tag_recv_checked(buf, tag, 0, False, mark)
            await sent
            assert got is want, (size, mark, got)
            assert (buf == 7).all()
        lf.close()

    run(main())
