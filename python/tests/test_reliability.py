"""Failure paths a careless or hostile caller or peer reaches: untrusted worker
addresses are refused with a reason instead of aborting the process; a cancelled receive
never swallows the next message."""
import array
import asyncio
import random
import threading
import time

import numpy as np
import pytest

import ucp
from conftest import pair, posted, run


def test_bad_worker_addresses_are_refused_not_fatal(fresh_ucp):
    real = bytes(ucp.get_worker_address())
    rng = random.Random(15)
    inputs = [b"", b"\x07" * 8, real[: len(real) // 2], real + b"\x00"]
    inputs += [bytes(rng.randrange(256) for _ in range(rng.randrange(8, 1024))) for _ in range(40)]
    for at in range(len(real)):
        flipped = bytearray(real)
        flipped[at] ^= 0xFF
        inputs.append(bytes(flipped))

    async def main():
        refused = 0
        for data in inputs:
            try:
                ep = await ucp.create_endpoint_from_worker_address(data)
            except ValueError as e:
                assert str(e).startswith("not a UCX worker address: "), e
                refused += 1
            except ucp.exceptions.UCXError:
                pass  # well-formed but unreachable: UCX said so
            else:
                ep.abort()
        return refused

    refused = run(main())
    assert refused >= 44, refused  # the empty, short, long and random ones at least


def test_empty_worker_address_message(fresh_ucp):
    with pytest.raises(ValueError, match="a UCX worker address cannot be empty"):
        run(ucp.create_endpoint_from_worker_address(b""))


@pytest.mark.parametrize("size", [64, 1 << 20])
def test_timed_out_recv_does_not_swallow_the_next_message(progress_mode, size):
    async def main():
        lf, client, server = await pair()
        abandoned = np.zeros(size, dtype="u1")
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(server.recv(abandoned), 0.01)
        first, second = np.full(size, 1, dtype="u1"), np.full(size, 2, dtype="u1")
        got = np.zeros(size, dtype="u1")
        await asyncio.gather(client.send(first), server.recv(got))
        assert (got == 1).all(), "the message after a timed-out receive went elsewhere"
        await asyncio.gather(client.send(second), server.recv(got))
        assert (got == 2).all()
        assert not abandoned.any(), "UCX wrote into the buffer of a cancelled receive"
        lf.close()

    run(main())


@pytest.mark.parametrize("size", [64, 1 << 20])
def test_cancelled_recv_task_releases_its_message(progress_mode, size):
    async def main():
        lf, client, server = await pair()
        task = asyncio.ensure_future(server.recv(np.zeros(size, dtype="u1")))
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        got = np.zeros(size, dtype="u1")
        await asyncio.gather(client.send(np.full(size, 7, dtype="u1")), server.recv(got))
        assert (got == 7).all()
        lf.close()

    run(main())


def test_cancel_during_a_transfer_never_misdelivers(progress_mode):
    """A receive cancelled while its message is arriving: either UCX withdrew it (the next
    receive gets that message) or the endpoint is closed with a clear error; the next receive
    never silently gets the message after."""
    big = 16 << 20

    async def trial(delay):
        lf, client, server = await pair()
        recv = asyncio.ensure_future(server.recv(np.zeros(big, dtype="u1")))
        send = asyncio.ensure_future(client.send(np.full(big, 1, dtype="u1")))
        await asyncio.sleep(delay)
        recv.cancel()
        try:
            await recv
            outcome = "finished"  # the transfer won the race: the message was received
        except asyncio.CancelledError:
            outcome = "cancelled"
        if outcome == "cancelled":
            got = np.zeros(big, dtype="u1")
            try:
                await asyncio.wait_for(server.recv(got), 10)
                assert (got == 1).all(), "the next receive got something else than the message"
                outcome = "withdrawn"
            except ucp.exceptions.UCXCloseError as e:
                assert "cancelled after UCX had matched a message" in str(e), e
                outcome = "closed"
        send.cancel()
        client.abort()
        lf.close()
        return outcome

    async def main():
        return [await trial(d) for d in (0, 0.001, 0.003, 0.01)]

    outcomes = run(main(), timeout=60)
    assert set(outcomes) <= {"finished", "withdrawn", "closed"}, outcomes


def test_cancelled_am_recv_does_not_take_the_next_message(progress_mode):
    async def main():
        lf, client, server = await pair()
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(server.am_recv(), 0.01)
        await client.am_send(b"after the timeout")
        assert await asyncio.wait_for(server.am_recv(), 5) == b"after the timeout"
        lf.close()

    run(main())


def test_am_recv_cancelled_as_its_message_arrives_leaves_it_for_the_next(progress_mode):
    """The message reached the receive's future, then the caller's cancel reached the task
    first: the message goes back to the queue, in order."""

    async def main():
        lf, client, server = await pair()
        task = asyncio.ensure_future(server.am_recv())
        await asyncio.sleep(0)  # the task now awaits its future
        waiting = task._fut_waiter
        client._ep.am_send(b"first")
        _progress_until(waiting.done)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await client.am_send(b"second")
        assert await asyncio.wait_for(server.am_recv(), 5) == b"first"
        assert await asyncio.wait_for(server.am_recv(), 5) == b"second"
        lf.close()

    run(main())


def _progress_until(cond, timeout=10):
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "UCX never delivered the message"
        ucp.progress()


def _progress_in_a_thread_until_handed_over(fut):
    """Progresses the worker from another thread (the loop blocked meanwhile) until that
    thread has handed ``fut``'s outcome to the loop, which has not run it yet."""
    loop = asyncio.get_running_loop()

    def handed_over():
        return any(getattr(h, "_args", None) and h._args[0] is fut for h in list(loop._ready))

    t = threading.Thread(target=_progress_until, args=(handed_over,))
    t.start()
    t.join()


def test_am_message_handed_to_a_cancelled_receive_on_another_loop_is_requeued(progress_mode):
    async def main():
        lf, client, server = await pair()
        fut = server._ep.am_recv()
        client._ep.am_send(b"first")
        _progress_in_a_thread_until_handed_over(fut)
        fut.cancel()
        await client.am_send(b"second")
        assert await asyncio.wait_for(server.am_recv(), 5) == b"first"
        assert await asyncio.wait_for(server.am_recv(), 5) == b"second"
        lf.close()

    run(main())


def test_am_message_in_transit_to_a_cancelled_receive_is_not_overtaken(progress_mode):
    """A receive posted while the first message is still on its way to a cancelled receive
    (the loop has not run the hand-over yet) gets the first, not the next to arrive. With
    Python 3.12's wait_for, which awaits the coroutine in place, the test above met this on
    a 16-core machine: "second" arrived and went to the new receive before "first" was put
    back."""

    async def main():
        lf, client, server = await pair()
        loop = asyncio.get_running_loop()
        fut = server._ep.am_recv()
        client._ep.am_send(b"first")
        _progress_in_a_thread_until_handed_over(fut)
        fut.cancel()
        nxt = server._ep.am_recv()  # nothing queued: it waits
        client._ep.am_send(b"second")

        def second_arrived():
            queued = server._ep.am_probe()
            return queued or any(getattr(h, "_args", None) and h._args[0] is nxt for h in list(loop._ready))

        t = threading.Thread(target=_progress_until, args=(second_arrived,))
        t.start()
        t.join()
        assert await nxt == b"first"
        assert await asyncio.wait_for(server.am_recv(), 5) == b"second"
        lf.close()

    run(main())


def test_message_handed_to_a_cancelled_receive_on_another_loop_closes_the_endpoint(progress_mode):
    """A tag message cannot be put back in UCX: the endpoint closes, so the next receive fails
    clearly instead of silently getting the message after."""

    async def main():
        lf, client, server = await pair()
        first = bytearray(5)
        fut = server._post_recv(first, server._tag("msg_recv", None, False), 0)
        client._ep.tag_send(b"first", client._tag("msg_send", None, False))
        _progress_in_a_thread_until_handed_over(fut)
        fut.cancel()
        await asyncio.sleep(0)
        await _send_unless_closed(client, b"secnd")  # what the receive would get without the close
        with pytest.raises(ucp.exceptions.UCXCloseError, match="cancelled after UCX had matched"):
            await asyncio.wait_for(server.recv(bytearray(5)), 5)
        client.abort()
        lf.close()

    run(main())


async def _send_unless_closed(ep, data):
    """Sends what a receiver that did not close would read next; the receiver's close may
    have reached ``ep`` first."""
    try:
        await ep.send(data)
    except ucp.exceptions.UCXBaseException:
        pass


def _signal_in_allocator(allocated):
    def allocator(n):
        allocated.set()
        return bytearray(n)

    return allocator


def test_recv_obj_cancelled_after_the_size_closes_the_endpoint(progress_mode):
    """Cancelled between the size and the object, ``recv_obj`` must not leave the object to be
    read as the next size (here it would announce 3 bytes and wait for them forever)."""

    async def main():
        lf, client, server = await pair()
        allocated = asyncio.Event()
        task = asyncio.ensure_future(server.recv_obj(allocator=_signal_in_allocator(allocated)))
        await client.send(array.array("Q", [8]))
        await asyncio.wait_for(allocated.wait(), 5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await _send_unless_closed(client, array.array("Q", [3]))  # the object, read as a size
        with pytest.raises(ucp.exceptions.UCXCloseError, match="cancelled after UCX had matched"):
            await asyncio.wait_for(server.recv_obj(), 5)
        client.abort()
        lf.close()

    run(main())


def test_recv_multi_cancelled_after_the_headers_closes_the_endpoint(progress_mode):
    async def main():
        lf, client, server = await pair()
        allocated = asyncio.Event()
        task = asyncio.ensure_future(server.recv_multi(allocator=_signal_in_allocator(allocated)))
        for header in ucp.framing.MultiHeader.pack_all([(False, 4)]):
            await client.send(header)
        await asyncio.wait_for(allocated.wait(), 5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await _send_unless_closed(client, b"data")
        with pytest.raises(ucp.exceptions.UCXCloseError, match="cancelled after UCX had matched"):
            await asyncio.wait_for(server.recv_multi(), 5)
        client.abort()
        lf.close()

    run(main())


def test_transfers_after_close_raise_close_error(progress_mode):
    async def main():
        lf, client, server = await pair()
        await client.close()
        for op in (client.recv(bytearray(8)), client.send(b"x"), client.am_recv(), client.am_send(b"x")):
            with pytest.raises(ucp.UCXEndpointClosed, match="Endpoint closed") as e:
                await op
            assert isinstance(e.value, (ucp.exceptions.UCXCloseError, AttributeError))  # what UCX-Py raised
        lf.close()

    run(main())


@pytest.mark.parametrize("how", ["close", "abort"])
def test_transfers_pending_at_our_close_raise_endpoint_closed(progress_mode, how):
    async def main():
        lf, client, server = await pair()
        pending = [
            await posted(server.recv(bytearray(8))),
            server._ep.stream_recv(bytearray(8)),  # a future, already in flight
            asyncio.ensure_future(server.am_recv()),
        ]
        await asyncio.sleep(0)
        if how == "close":
            await server.close()
        else:
            server.abort()
        for op in pending:
            with pytest.raises(ucp.UCXEndpointClosed) as e:
                await asyncio.wait_for(op, 5)
            assert isinstance(e.value, ucp.exceptions.UCXCanceled)  # what UCX-Py raised
        client.abort()
        lf.close()

    run(main())


def test_failed_reset_leaves_the_context_in_place(fresh_ucp):
    async def main():
        lf = ucp.create_listener(lambda ep: None)
        before = ucp.get_worker_address()
        with pytest.raises(ucp.exceptions.UCXError, match="not all Endpoints"):
            ucp.reset()
        assert bytes(ucp.get_worker_address()) == bytes(before), "reset built a second context"
        lf.close()

    run(main())
    ucp.reset()


def test_announced_sizes_above_the_maximum_are_refused(progress_mode, monkeypatch):
    async def main():
        lf, client, server = await pair()
        await asyncio.gather(client.send_obj(b"x" * 1000), asyncio.sleep(0))
        with pytest.raises(ucp.exceptions.UCXError, match="announced 1000 bytes, more than the maximum of 999"):
            await server.recv_obj(max_size=999)
        assert server.closed()  # the refused data must not be read as the next message
        lf, client, server = await pair()
        await asyncio.gather(client.send_multi([b"a" * 600, b"b" * 600]), asyncio.sleep(0))
        monkeypatch.setenv("UCXPY_MAX_MESSAGE_SIZE", "1000")
        with pytest.raises(ucp.exceptions.UCXError, match="recv_multi: the peer announced 1200 bytes"):
            await server.recv_multi()
        monkeypatch.setenv("UCXPY_MAX_MESSAGE_SIZE", "1200")
        lf, client, server = await pair()
        await asyncio.gather(client.send_multi([b"a" * 600, b"b" * 600]), asyncio.sleep(0))
        assert await server.recv_multi() == [b"a" * 600, b"b" * 600]
        lf.close()

    run(main())


def test_default_maximum_is_physical_memory(monkeypatch):
    import os

    monkeypatch.delenv("UCXPY_MAX_MESSAGE_SIZE", raising=False)
    assert ucp.core.default_max_message_size() == os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    monkeypatch.setenv("UCXPY_MAX_MESSAGE_SIZE", "lots")
    with pytest.raises(ValueError, match="UCXPY_MAX_MESSAGE_SIZE must be a number of bytes"):
        ucp.core.default_max_message_size()


def test_dask_max_message_size_setting():
    dask = pytest.importorskip("dask")
    pytest.importorskip("distributed")  # ucp.dask_comm needs it, not dask alone
    from ucp import dask_comm

    assert dask_comm._max_message_size() is None
    with dask.config.set({"ucxa.max-message-size": "1 MiB"}):
        assert dask_comm._max_message_size() == 1 << 20
    with dask.config.set({"ucxa.max-message-size": "-1"}):
        with pytest.raises(ValueError, match="max-message-size"):
            dask_comm._max_message_size()


_LISTEN_ON_LOOPBACK = r"""
import asyncio, os, socket
import ucp

def listening_addresses():
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        target = os.readlink(f"/proc/self/fd/{fd}") if os.path.exists(f"/proc/self/fd/{fd}") else ""
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    out = set()
    for table in ("/proc/self/net/tcp", "/proc/self/net/tcp6"):
        with open(table) as f:
            for row in list(f)[1:]:
                cols = row.split()
                if cols[3] == "0A" and cols[9] in inodes:  # LISTEN, ours
                    out.add(cols[1].split(":")[0])
    return out

async def main():
    lf = ucp.create_listener(lambda ep: None, ip="127.0.0.1")
    print(ucp.get_config()["NET_DEVICES"])
    print(sorted(listening_addresses()))
    lf.close()

asyncio.run(main())
"""


def test_listener_ip_limits_ucx_devices_to_its_interface():
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "UCX_NET_DEVICES"}
    out = subprocess.run([sys.executable, "-c", _LISTEN_ON_LOOPBACK], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    devices, addresses = out.stdout.splitlines()[-2:]
    assert devices == "lo", out.stdout
    # /proc/net/tcp writes 127.0.0.1 as 0100007F; no socket of the process listens elsewhere.
    assert set(eval(addresses)) <= {"0100007F"}, addresses


def test_interface_of():
    from ucp.utils import interface_of

    assert interface_of("127.0.0.1") == "lo"
    assert interface_of("0.0.0.0") is None
    assert interface_of("localhost") is None  # host names are left to UCX


def test_closing_an_endpoint_drops_its_unread_messages(progress_mode):
    """A peer's sends nobody will receive (the endpoint is closed) leave UCX's unexpected
    queue when the endpoint closes."""

    async def main():
        lf, client, server = await pair()
        tag = server._tags["msg_recv"]
        for _ in range(1000):
            await client.send(np.ones(4096, dtype="u1"))
        # A last message on another tag comes after the flood on the same connection: once it
        # is in, the whole flood is waiting in UCX's queue.
        await asyncio.gather(
            client.send(b"x", tag=0xF100D, force_tag=True), server.recv(bytearray(1), tag=0xF100D, force_tag=True)
        )
        worker = server._worker
        assert worker.tag_probe(tag), "the flood should be waiting in UCX's queue"
        server.abort()
        assert not worker.tag_probe(tag), "the closed endpoint's messages are still queued"
        client.abort()
        lf.close()

    run(main())


def test_shared_memory_is_not_opted_into_for_endpoints_that_handle_failure():
    """`import ucp` leaves UCX_MM_ERROR_HANDLING to UCX (off): with it on, a peer killed while
    writing into this process's shared-memory queue jams the queue for every other peer
    (docs/python.md, "Shared memory and dead peers")."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "UCX_MM_ERROR_HANDLING"}
    code = "import os, ucp; print(os.environ.get('UCX_MM_ERROR_HANDLING'))"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["None"], out.stdout
