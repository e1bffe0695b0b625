"""Across processes: a peer killed mid-receive, spawned peers, UCXX-flavour listeners, and a
Rust ucx-async peer (the `echo` example) in both directions."""
import asyncio
import functools
import logging
import multiprocessing
import os
import pathlib
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import ucp
from conftest import posted, run

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _connect_then_wait(port, q):
    async def main():
        ep = await ucp.create_endpoint("127.0.0.1", port)
        await ep.send(b"hi")
        q.put("connected")
        await asyncio.sleep(60)

    asyncio.run(main())


def _echo_forever(q):
    async def main():
        async def handler(ep):
            buf = np.empty(8, dtype="u1")
            while True:
                try:
                    await ep.recv(buf)
                    await ep.send(buf)
                except ucp.exceptions.UCXBaseException:
                    return

        lf = ucp.create_listener(handler)
        q.put(lf.port)
        await asyncio.sleep(60)

    asyncio.run(main())


def test_prompt_reply_completes_the_receive_inline(fresh_ucp):
    """A receive progresses the worker before it hands back a future (UCXPY_SPIN_US): a reply
    from another process that lands meanwhile completes the call itself, with no future."""
    ctx = multiprocessing.get_context("spawn")
    q = ctx.Queue()
    peer = ctx.Process(target=_echo_forever, args=(q,), daemon=True)
    peer.start()
    try:

        async def main():
            ep = await ucp.create_endpoint("127.0.0.1", q.get(timeout=30))
            inline = 0
            for i in range(50):
                out = np.full(8, i, dtype="u1")
                back = np.zeros(8, dtype="u1")
                await ep.send(out)
                fut = ep._ep.tag_recv_checked(back, ep._tags["msg_recv"], 1_000_000)
                if fut is None:
                    inline += 1
                else:
                    await fut
                np.testing.assert_array_equal(back, out)
            # Without a spin the same receive is posted before the reply exists: a future.
            await ep.send(out)
            fut = ep._ep.tag_recv_checked(back, ep._tags["msg_recv"], 0)
            assert fut is not None
            await fut
            await ep.close()
            return inline

        assert run(main(), timeout=60) == 50
    finally:
        peer.kill()
        peer.join()


def test_killed_peer_cancels_pending_receive(progress_mode):
    spawn = multiprocessing.get_context("spawn")
    q = spawn.Queue()

    async def main():
        server_ep = asyncio.get_running_loop().create_future()

        async def handler(ep):
            server_ep.set_result(ep)

        lf = ucp.create_listener(handler)
        proc = spawn.Process(target=_connect_then_wait, args=(lf.port, q))
        proc.start()
        try:
            ep = await server_ep
            await ep.recv(bytearray(2))
            assert await asyncio.get_running_loop().run_in_executor(None, q.get, True, 30) == "connected"
            pending = await posted(ep.recv(bytearray(8)), settle=[ep])
            pending_am = asyncio.ensure_future(ep.am_recv())
            os.kill(proc.pid, signal.SIGKILL)
            # One class for the cause, for what was pending and what comes after.
            with pytest.raises(ucp.UCXPeerFailure):
                await asyncio.wait_for(pending, 20)
            with pytest.raises(ucp.UCXPeerFailure):
                await asyncio.wait_for(pending_am, 20)
            assert ep.closed()
            for op in (ep.recv(bytearray(8)), ep.send(b"x"), ep.am_send(b"x"), ep.am_recv()):
                with pytest.raises(ucp.UCXPeerFailure):
                    await asyncio.wait_for(op, 20)
        finally:
            proc.kill()
            proc.join()
            lf.close()

    run(main(), timeout=60)


def _receive_once_then_exit(port):
    async def main():
        ep = await ucp.create_endpoint("127.0.0.1", port, endpoint_error_handling=False)
        await ep.recv(bytearray(8))

    asyncio.run(main())


def test_close_to_a_gone_peer_logs_the_failed_send_by_name(fresh_ucp, caplog):
    """Without error handling nothing tells us the peer process ended; close()'s control
    message then fails, inline or later, and the warning names the send as UCX-Py's did
    (`UCXError('<[Send shutdown] ep: ...>: Connection reset by remote peer')`)."""
    spawn = multiprocessing.get_context("spawn")

    async def main():
        server_ep = asyncio.get_running_loop().create_future()
        lf = ucp.create_listener(server_ep.set_result, endpoint_error_handling=False)
        proc = spawn.Process(target=_receive_once_then_exit, args=(lf.port,))
        proc.start()
        ep = await asyncio.wait_for(server_ep, 30)
        await ep.send(bytearray(8))
        await asyncio.get_running_loop().run_in_executor(None, proc.join, 30)
        assert proc.exitcode == 0
        lf.close()
        with caplog.at_level(logging.WARNING):
            # Then the endpoint's flushing close fails too, and says so, as UCX-Py's did.
            with pytest.raises(ucp.exceptions.UCXError, match="Error while closing endpoint") as failed:
                await ep.close()
        assert ep.closed()
        return ep, failed.value

    ep, failure = run(main(), timeout=60)
    assert "UCXError('<[Send shutdown] ep: 0x" in caplog.text, caplog.text
    # The failed close let go of the context, although the endpoint and the exception (whose
    # traceback holds the closing frames) are still referenced.
    ucp.reset()
    del ep, failure


def _echo_once_then_close_when_told(q, server_closed, error_handling):
    async def main():
        async def handler(ep):
            buf = np.empty(8, dtype="u1")
            await ep.recv(buf)
            await ep.send(buf)
            while not ep.closed():  # the client's shutdown message closes it
                await asyncio.sleep(0.01)
            server_closed.set()

        lf = ucp.create_listener(handler, endpoint_error_handling=error_handling)
        q.put(lf.port)
        # Stay alive: the client's close must meet a closed endpoint, not a dead process.
        await asyncio.get_running_loop().run_in_executor(None, server_closed.wait, 30)
        await asyncio.sleep(5)

    asyncio.run(main())


@pytest.mark.parametrize("error_handling", [False, True])
def test_close_after_the_peer_obeyed_the_shutdown_message_succeeds(fresh_ucp, error_handling):
    """close() tells the peer to close, and the peer may close before our endpoint's own close
    runs; that reset is what close() asked for and is not raised (check_wheel's transfer once
    failed so: "Error while closing endpoint: ... Connection reset by remote peer"). The
    client's close is held until the server's endpoint is closed, to make that order certain."""
    spawn = multiprocessing.get_context("spawn")
    q, server_closed = spawn.Queue(), spawn.Event()
    proc = spawn.Process(target=_echo_once_then_close_when_told, args=(q, server_closed, error_handling))
    proc.start()
    try:

        async def main():
            port = await asyncio.get_running_loop().run_in_executor(None, q.get, True, 30)
            ep = await ucp.create_endpoint("127.0.0.1", port, endpoint_error_handling=error_handling)
            await ep.send(b"12345678")
            buf = bytearray(8)
            await ep.recv(buf)
            assert buf == b"12345678"
            abort = ep.abort

            def abort_once_the_server_closed():
                assert server_closed.wait(30), "the server never closed its endpoint"
                # Let the server's close reach this side's transports.
                end = time.monotonic() + 0.2
                while time.monotonic() < end:
                    ucp.progress()
                abort()

            ep.abort = abort_once_the_server_closed
            await ep.close()
            assert ep.closed()

        run(main(), timeout=60)
    finally:
        proc.join(30)
        proc.kill()
    assert proc.exitcode == 0


def _hand_out_address_then_reset(q, done):
    address = bytes(ucp.get_worker_address())
    ucp.reset()
    q.put(address)
    done.wait(30)


@pytest.mark.parametrize("mm_error_handling", [None, "y"])
def test_worker_address_of_a_closed_worker_is_unreachable(fresh_ucp, monkeypatch, mm_error_handling):
    """An endpoint to a worker that was closed (its process lives on) fails: at creation with
    UCX-Py's "Destination is unreachable" where UCX finds out at once, or, over TCP with
    non-blocking connects (UCX_TCP_CONN_NB=y, ucp's default), at its first operation, as the
    peer's failure. Over shared memory (UCX_MM_ERROR_HANDLING=y, the opt-in) the same."""
    if mm_error_handling:
        monkeypatch.setenv("UCX_MM_ERROR_HANDLING", mm_error_handling)  # read by both processes' UCX
    spawn = multiprocessing.get_context("spawn")
    q, done = spawn.Queue(), spawn.Event()
    proc = spawn.Process(target=_hand_out_address_then_reset, args=(q, done))
    proc.start()
    try:
        address = ucp.get_ucx_address_from_buffer(q.get(timeout=30))

        async def main():
            try:
                ep = await ucp.create_endpoint_from_worker_address(address)
            except ucp.exceptions.UCXError as e:
                assert "Destination is unreachable" in str(e), e
                return
            # UCX learns of the refused connection in progress; the operation fails with it.
            with pytest.raises(ucp.exceptions.UCXPeerFailure):
                await asyncio.wait_for(ep.send(b"12345678", tag=1, force_tag=True), 10)
            ep.abort()

        run(main())
    finally:
        done.set()
        proc.join(30)


def test_ucxx_flavour_listener_and_detecting_client(fresh_ucp, monkeypatch):
    async def main():
        got = asyncio.get_running_loop().create_future()

        async def handler(ep):
            buf = np.empty(4, dtype="i4")
            await ep.recv(buf)
            await ep.send(buf * 2)
            got.set_result(ep)

        lf = ucp.create_listener(handler, wire_protocol="ucxx")
        ep = await ucp.create_endpoint("127.0.0.1", lf.port)
        assert ep._tags["ctrl_send"] is None  # a UCXX peer has no control channel
        back = np.empty(4, dtype="i4")
        await ep.send(np.arange(4, dtype="i4"))
        await ep.recv(back)
        np.testing.assert_array_equal(back, np.arange(4) * 2)
        server = await got
        assert server._tags["ctrl_recv"] is None
        await ep.close()
        lf.close()

    run(main())
    monkeypatch.setenv("UCXPY_WIRE_PROTOCOL", "nonsense")
    with pytest.raises(ValueError, match="UCXPY_WIRE_PROTOCOL"):
        ucp.create_listener(lambda ep: None)


def rust_echo():
    """The ucx-async echo example, built if `cargo test` has not built it already."""
    exe = ROOT / "target" / "debug" / "examples" / "echo"
    if not exe.exists():
        subprocess.run(["cargo", "build", "-q", "-p", "ucx-async", "--example", "echo"], cwd=ROOT, check=True)
    return str(exe)


# The echo example's schedule with --iters 1: sizes and round trips per size (100 warm-up).
ECHO_SCHEDULE = [(8, 101), (1024, 101), (65536, 200), (1 << 20, 200)]


def test_python_client_rust_server(progress_mode):
    server = subprocess.Popen([rust_echo(), "--server", "--iters", "1"], stdout=subprocess.PIPE, text=True)
    try:
        port = int(server.stdout.readline().split()[1])

        async def main():
            ep = await ucp.create_endpoint("127.0.0.1", port)
            for size, n in ECHO_SCHEDULE:
                out = np.random.default_rng(size).integers(0, 256, size, dtype="u1")
                back = np.empty_like(out)
                for _ in range(n):
                    await asyncio.gather(ep.send(out), ep.recv(back))
                np.testing.assert_array_equal(out, back)
            await ep.close()

        run(main(), timeout=60)
        assert server.wait(timeout=30) == 0
    finally:
        server.kill()
        server.wait()


def test_rust_client_python_server(progress_mode):
    async def main():
        done = asyncio.get_running_loop().create_future()

        async def echo(ep):
            try:
                for size, n in ECHO_SCHEDULE:
                    buf = bytearray(size)
                    for _ in range(n):
                        await ep.recv(buf)
                        await ep.send(buf)
                # The Rust client closes with UCX-Py's control message: we notice.
                for _ in range(500):
                    if ep.closed():
                        break
                    await asyncio.sleep(0.01)
                done.set_result(ep.closed())
            except Exception as e:  # surface it in the test, not as a lost task
                done.set_exception(e)

        lf = ucp.create_listener(echo)
        client = await asyncio.create_subprocess_exec(
            rust_echo(), "--client", str(lf.port), "--iters", "1", stdout=asyncio.subprocess.PIPE
        )
        out, _ = await client.communicate()
        assert client.returncode == 0, out
        assert b"1048576" in out  # it printed its table
        assert await done is True
        lf.close()

    run(main(), timeout=60)


def test_python_echo_example_runs():
    out = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "python" / "echo.py"), "--iters", "20"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert "1048576" in out.stdout  # the last row of its table


def test_cupy_echo_example_runs_or_says_why_not():
    example = ROOT / "examples" / "python" / "echo_cupy.py"
    out = subprocess.run([sys.executable, str(example)], capture_output=True, text=True, timeout=120)
    try:
        import cupy

        gpu = cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        gpu = False
    if gpu:
        assert out.returncode == 0, out.stderr
        assert "every byte is 1" in out.stdout
    else:
        assert out.returncode == 2
        assert "no CUDA GPU" in out.stderr


def _stream_forever(port, size):
    async def main():
        ep = await ucp.create_endpoint("127.0.0.1", port)
        msg = np.ones(size, dtype="u1")
        while True:
            await ep.send(msg)

    asyncio.run(main())


def _receive_stream(size, streaming, failed=None, received=None):
    """A listener handler that receives ``size``-byte messages until its endpoint fails:
    ``streaming`` is set at the first message, ``failed`` to the failure, and ``received``
    (a list) grows by one per message."""

    async def handler(ep):
        buf = np.empty(size, dtype="u1")
        try:
            while True:
                await ep.recv(buf)
                if received is not None:
                    received.append(None)
                if not streaming.done():
                    streaming.set_result(None)
        except ucp.exceptions.UCXBaseException as e:
            if failed is not None:
                failed.set_result(e)
        finally:
            ep.abort()

    return handler


@pytest.mark.parametrize("blocking", [True, False])
@pytest.mark.parametrize("size", [64 << 10, 1 << 20])
def test_killed_streaming_peer_fails_the_receive_in_progress(fresh_ucp, monkeypatch, blocking, size):
    """The peer dies while its messages are arriving: a receive UCX has matched to a message
    it will never finish (multi-fragment eager, forced with RNDV_THRESH=inf on both sides)
    must fail, not hang. It hung, blocking the event loop, before the engine failed such
    operations itself."""
    monkeypatch.setenv("UCX_RNDV_THRESH", "inf")  # for the spawned peer
    ucp.reset()
    ucp.init(options={"RNDV_THRESH": "inf"}, blocking_progress_mode=blocking)
    spawn = multiprocessing.get_context("spawn")

    async def main():
        loop = asyncio.get_running_loop()
        streaming, failed = loop.create_future(), loop.create_future()

        lf = ucp.create_listener(_receive_stream(size, streaming, failed))
        proc = spawn.Process(target=_stream_forever, args=(lf.port, size))
        proc.start()
        try:
            await asyncio.wait_for(streaming, 30)
            await asyncio.sleep(0.2)  # the next messages are under way when the peer dies
            os.kill(proc.pid, signal.SIGKILL)
            await asyncio.wait_for(failed, 10)
        finally:
            proc.kill()
            proc.join()
            lf.close()

    run(main(), timeout=60)


def _handler_outcome(peer, size, steps):
    """Runs a listener whose handler returns ``await steps(ep)`` against a spawned
    ``peer(port, size)``, and returns what the steps returned or raised (a timeout included:
    the test reports it)."""
    spawn = multiprocessing.get_context("spawn")

    async def main():
        outcome = asyncio.get_running_loop().create_future()

        async def handler(ep):
            try:
                outcome.set_result(await steps(ep))
            except BaseException as e:
                outcome.set_result(e)
            finally:
                ep.abort()

        lf = ucp.create_listener(handler)
        proc = spawn.Process(target=peer, args=(lf.port, size))
        proc.start()
        try:
            return await asyncio.wait_for(outcome, 60)
        finally:
            proc.kill()
            proc.join()
            lf.close()

    return run(main(), timeout=90)


def _signal_self_mid_message(sig, port, size):
    async def main():
        ep = await ucp.create_endpoint("127.0.0.1", port)
        await ep.send(np.ones(1, dtype="u1"))
        # Post the big send without progressing the worker: UCX writes what the socket takes
        # (its first fragments, or a rendezvous request), then the process dies (SIGKILL) or
        # stays stopped with its connection open (SIGSTOP) before the rest.
        ep._ep.tag_send(np.ones(size, dtype="u1"), ep._tags["msg_send"])
        os.kill(os.getpid(), sig)

    asyncio.run(main())


@pytest.mark.parametrize("protocol", ["eager", "rendezvous"])
def test_receive_after_the_peer_died_mid_message_fails(fresh_ucp, monkeypatch, protocol):
    """The peer dies while its big message is arriving, and only then is the receive posted.
    A waiting message may still be received after its peer failed, but this one is missing
    its tail (eager) or its source (rendezvous): the receive must fail, not hang. The eager
    case hung until some later, unrelated event (40-75 s) before the receive checked this."""
    size = 256 << 20  # far more than a socket takes at once
    if protocol == "eager":
        monkeypatch.setenv("UCX_RNDV_THRESH", "inf")  # for the spawned peer
        ucp.reset()
        ucp.init(options={"RNDV_THRESH": "inf"})

    async def steps(ep):
        await ep.recv(np.empty(1, dtype="u1"))
        while ep._ep.is_alive():
            await asyncio.sleep(0.001)
        assert ep._worker.tag_probe(ep._tags["msg_recv"]), "no part of the message arrived"
        await asyncio.wait_for(ep.recv(np.empty(size, dtype="u1")), 10)
        return "received"

    result = _handler_outcome(functools.partial(_signal_self_mid_message, signal.SIGKILL), size, steps)
    assert isinstance(result, ucp.exceptions.UCXBaseException), repr(result)


@pytest.mark.parametrize("blocking", [True, False])
def test_event_loop_keeps_running_while_a_peer_streams(fresh_ucp, monkeypatch, blocking):
    """A peer that never stops sending keeps every UCX progress round busy. Progress runs in
    bounded batches, so the event loop's timers still fire: "progress until a round finds
    nothing" held a receiver that had fallen behind for over a minute."""
    monkeypatch.setenv("UCX_RNDV_THRESH", "inf")  # for the spawned peer: eager, like the stream
    ucp.reset()
    ucp.init(options={"RNDV_THRESH": "inf"}, blocking_progress_mode=blocking)
    size = 1 << 20
    spawn = multiprocessing.get_context("spawn")

    async def main():
        loop = asyncio.get_running_loop()
        streaming = loop.create_future()
        received = []  # one entry per message

        lf = ucp.create_listener(_receive_stream(size, streaming, received=received))
        proc = spawn.Process(target=_stream_forever, args=(lf.port, size))
        proc.start()
        try:
            await asyncio.wait_for(streaming, 30)
            worst, end = 0.0, loop.time() + 3
            while loop.time() < end:
                t = loop.time()
                await asyncio.sleep(0.01)
                worst = max(worst, loop.time() - t - 0.01)
        finally:
            proc.kill()
            proc.join()
            lf.close()
        assert len(received) > 10, len(received)  # the stream did flow while the timers ran
        assert worst < 0.5, f"a 10 ms timer fired {worst:.2f} s late while the peer streamed"

    run(main(), timeout=60)


def test_abort_fails_a_receive_matched_to_an_unfinished_message(fresh_ucp, monkeypatch):
    """A receive UCX has matched to the head of a multi-fragment eager message ignores
    UCX's cancel; once the endpoint is aborted the tail can never arrive, so the receive must
    fail, not wait forever (it did: abort canceled it and UCX kept it)."""
    size = 256 << 20
    monkeypatch.setenv("UCX_RNDV_THRESH", "inf")  # for the spawned peer
    ucp.reset()
    ucp.init(options={"RNDV_THRESH": "inf"})

    async def steps(ep):
        await ep.recv(np.empty(1, dtype="u1"))
        while not ep._worker.tag_probe(ep._tags["msg_recv"]):  # the head is here
            await asyncio.sleep(0.001)
        recv = await posted(ep.recv(np.empty(size, dtype="u1")))
        ep.abort()
        await asyncio.wait_for(recv, 10)
        return "received"

    result = _handler_outcome(functools.partial(_signal_self_mid_message, signal.SIGSTOP), size, steps)
    assert isinstance(result, ucp.exceptions.UCXBaseException), repr(result)
