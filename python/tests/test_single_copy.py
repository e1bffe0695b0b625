"""The same-host single-copy path between processes (peer error handling on, where UCX itself
moves host data over TCP): large host messages travel by it, whole and in order, beside small
ones that do not; it is off with ``UCXA_SINGLE_COPY=0`` and against a peer that does not
offer it (as a stock UCX-Py peer), and messages still arrive; a Rust ucx-async peer takes it
too; a receive too small fails as a truncation; a sender killed while its message is read
fails only its own endpoint, and the receiver never gets other bytes than those sent."""
import asyncio
import multiprocessing
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import ucp
from conftest import run
from test_processes import rust_echo

MIN = 64 << 10  # ucx_core::single_copy::DEFAULT_THRESHOLD
SIZES = [8, MIN - 1, MIN, 1 << 20, (16 << 20) + 3]


def _data(n, seed):
    return np.random.default_rng(seed).integers(0, 256, n, dtype="u1")


def _echo_server(q, sizes, env):
    os.environ.update(env)
    os.environ.setdefault("UCX_NET_DEVICES", "lo")

    async def main():
        done = asyncio.get_running_loop().create_future()

        async def handler(ep):
            try:
                for n in sizes:
                    buf = np.empty(n, dtype="u1")
                    await ep.recv(buf)
                    await ep.send(buf)
                await ep.recv(np.empty(1, dtype="u1"))  # the client's last word
                done.set_result(ep.single_copy)
            except Exception as e:
                done.set_exception(e)

        lf = ucp.create_listener(handler)
        q.put(lf.port)
        q.put(await asyncio.wait_for(done, 60))

    asyncio.run(main())


def _spawn(target, *args):
    ctx = multiprocessing.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=target, args=(q, *args), daemon=True)
    p.start()
    return p, q


async def _until_on(ep, timeout=10):
    deadline = time.monotonic() + timeout
    while not (ep.single_copy[0] and ep.single_copy[1]):
        assert time.monotonic() < deadline, f"the single-copy path did not turn on: {ep.single_copy}"
        await asyncio.sleep(0.005)


async def _echo_sizes(ep, sizes):
    for i, n in enumerate(sizes):
        out = _data(n, i)
        back = np.empty(n, dtype="u1")
        await ep.send(out)
        await ep.recv(back)
        np.testing.assert_array_equal(back, out)


@pytest.mark.parametrize("server_env", [{}, {"UCXA_SINGLE_COPY": "0"}], ids=["on", "peer-without-it"])
def test_large_messages_between_processes(fresh_ucp, server_env):
    peer, q = _spawn(_echo_server, SIZES, server_env)
    try:

        async def main():
            ep = await ucp.create_endpoint("127.0.0.1", q.get(timeout=30))
            if not server_env:
                await _until_on(ep)
            else:
                await asyncio.sleep(0.2)  # time enough for a hello that must not come
            await _echo_sizes(ep, SIZES)
            await ep.send(np.zeros(1, dtype="u1"))
            theirs = q.get(timeout=30)
            mine = ep.single_copy
            await ep.close()
            return mine, theirs

        mine, theirs = run(main(), timeout=90)
        large = sum(n >= MIN for n in SIZES)
        if server_env:
            # A peer that does not offer the path (a stock UCX-Py peer draws its control tag
            # at random just so): nothing but the ordinary messages.
            assert mine == (False, False, 0, 0) and theirs == (False, False, 0, 0), (mine, theirs)
        else:
            assert mine == (True, True, large, large), mine
            assert theirs == (True, True, large, large), theirs
    finally:
        peer.kill()
        peer.join()


def _staging_expected():
    """Whether this machine stages: transparent huge pages offered (`madvise` or `always`) and
    staging not turned off."""
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
            thp = f.read()
    except OSError:
        return False
    return ("[never]" not in thp) and os.environ.get("UCXA_SINGLE_COPY_STAGING") != "0"


def test_arrays_on_small_pages_are_staged(fresh_ucp):
    # NumPy's arrays under 4 MiB sit on 4 KiB pages: the 64 KiB and 1 MiB ones are copied
    # onto huge pages before the peer reads them. NumPy advises huge pages for the 16 MiB
    # one, which is then read where it is, but whether the kernel gave them depends on what
    # the process freed before (the Rust tests check that rule, with memory they place).
    sizes = [MIN, 1 << 20, 16 << 20]
    refused = ucp._ucx_async.single_copy_staging_refusals()
    peer, q = _spawn(_echo_server, sizes, {})
    try:

        async def main():
            ep = await ucp.create_endpoint("127.0.0.1", q.get(timeout=30))
            await _until_on(ep)
            await _echo_sizes(ep, sizes)
            await ep.send(np.zeros(1, dtype="u1"))
            q.get(timeout=30)
            counts = ep.single_copy, ep.single_copy_staged
            await ep.close()
            return counts

        (sending, receiving, sent, _), staged = run(main(), timeout=90)
        assert sending and receiving and sent == len(sizes), (sending, receiving, sent)
        if not _staging_expected():
            pytest.skip("no transparent huge pages here, or UCXA_SINGLE_COPY_STAGING=0: nothing is staged")
        if ucp._ucx_async.single_copy_staging_refusals() != refused:
            pytest.skip("the kernel had no huge page free for a fresh staging block: staging paused")
        assert staged in (2, 3), f"{staged} of the three arrays staged: the 64 KiB and 1 MiB ones must be"
    finally:
        peer.kill()
        peer.join()


def test_rust_peer_takes_the_path_too(fresh_ucp):
    server = subprocess.Popen([rust_echo(), "--server", "--iters", "1"], stdout=subprocess.PIPE, text=True)
    try:
        port = int(server.stdout.readline().split()[1])

        async def main():
            ep = await ucp.create_endpoint("127.0.0.1", port)
            await _until_on(ep)
            # The echo example's schedule (see test_processes): 8 B, 1 KiB, 64 KiB, 1 MiB.
            for size, n in [(8, 101), (1024, 101), (65536, 200), (1 << 20, 200)]:
                out = _data(size, size)
                back = np.empty_like(out)
                for _ in range(n):
                    await asyncio.gather(ep.send(out), ep.recv(back))
                np.testing.assert_array_equal(out, back)
            counts = ep.single_copy
            await ep.close()
            return counts

        sending, receiving, sent, received = run(main(), timeout=90)
        assert sending and receiving
        assert sent == received == 400, (sent, received)
        assert server.wait(timeout=30) == 0
    finally:
        server.kill()
        server.wait()


def test_a_receive_too_small_is_a_truncation_and_the_endpoint_goes_on(progress_mode):
    async def main():
        from conftest import pair

        lf, client, server = await pair()
        await _until_on(client)
        await _until_on(server)
        out = _data(1 << 20, 1)
        # As for a message UCX itself finds too long: UCXError, "Message truncated", and the
        # sender is answered, whatever the receive's room: fewer bytes than a descriptor too.
        for room in (1 << 19, 63, 8, 0):
            send = asyncio.ensure_future(client.send(out))
            with pytest.raises(ucp.exceptions.UCXError, match="(?i)truncated"):
                await server.recv(np.empty(room, dtype="u1"))
            await asyncio.wait_for(send, 10)
        # Small messages still arrive whole in small receives.
        small = np.empty(5, dtype="u1")
        await asyncio.gather(client.send(out[:5]), server.recv(small))
        np.testing.assert_array_equal(small, out[:5])
        back = np.empty(1 << 20, dtype="u1")
        await asyncio.gather(client.send(out), server.recv(back))
        np.testing.assert_array_equal(back, out)
        assert server.single_copy[3] == 1  # the truncated one was not taken
        lf.close()

    run(main())


def _sender_then_wait(q, n):
    os.environ.setdefault("UCX_NET_DEVICES", "lo")

    async def main():
        ep = await ucp.create_endpoint("127.0.0.1", q.get())
        await _until_on(ep)
        data = np.full(n, 7, dtype="u1")
        send = asyncio.ensure_future(ep.send(data))
        await asyncio.sleep(0)
        q.put("posted")
        await send
        await asyncio.sleep(60)

    asyncio.run(main())


def test_a_sender_killed_while_read_fails_only_its_endpoint(fresh_ucp):
    n = 256 << 20

    async def main():
        ctx = multiprocessing.get_context("spawn")
        q_kill = ctx.Queue()
        victim = ctx.Process(target=_sender_then_wait, args=(q_kill, n), daemon=True)
        survivor, q_live = _spawn(_echo_server, [1 << 20], {})
        eps = []
        lf = ucp.create_listener(lambda ep: eps.append(ep))
        victim.start()
        q_kill.put(lf.port)
        try:
            while not eps:
                await asyncio.sleep(0.01)
            ep = eps[0]
            await _until_on(ep)
            live = await ucp.create_endpoint("127.0.0.1", q_live.get(timeout=30))
            buf = np.zeros(n, dtype="u1")
            assert q_kill.get(timeout=30) == "posted"
            recv = asyncio.ensure_future(ep.recv(buf))
            await asyncio.sleep(0.001)
            os.kill(victim.pid, signal.SIGKILL)
            try:
                await asyncio.wait_for(recv, 30)
                assert (buf == 7).all(), "a receive from a killed sender got other bytes than those sent"
                outcome = "whole"
            except (ucp.exceptions.UCXError, ucp.exceptions.UCXPeerFailure) as e:
                outcome = type(e).__name__
            # The other peer's endpoint is untouched.
            await _echo_sizes(live, [1 << 20])
            await live.send(np.zeros(1, dtype="u1"))
            assert q_live.get(timeout=30)[2] == 1
            await live.close()
            lf.close()
            return outcome
        finally:
            victim.kill()
            survivor.kill()

    outcome = run(main(), timeout=120)
    assert outcome in ("whole", "UCXError", "UCXPeerFailure"), outcome


def test_off_everywhere_with_the_setting(fresh_ucp):
    code = (
        "import asyncio, numpy as np, ucp\n"
        "async def main():\n"
        "    lf = ucp.create_listener(lambda ep: None)\n"
        "    ep = await ucp.create_endpoint('127.0.0.1', lf.port)\n"
        "    await asyncio.sleep(0.2)\n"
        "    print(ep.single_copy, ep._tags['single_copy'])\n"
        "    ep.abort(); lf.close()\n"
        "asyncio.run(main())\n"
    )
    env = {**os.environ, "UCXA_SINGLE_COPY": "0", "UCX_NET_DEVICES": "lo"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "(False, False, 0, 0) False", out.stdout


@pytest.mark.parametrize(
    "env_extra, error_handling",
    [({}, True), ({"UCX_MM_ERROR_HANDLING": "y"}, True), ({}, False)],
    ids=["default", "ucx-shared-memory-with-error-handling", "no-error-handling"],
)
def test_taken_only_where_ucx_would_use_tcp(fresh_ucp, env_extra, error_handling):
    # Without peer error handling, or with UCX_MM_ERROR_HANDLING=y, UCX moves host data
    # between local processes by shared memory (and CMA) itself, faster than the path: no
    # mark in the handshake, no hello, every byte by UCX. By default the path is taken.
    code = (
        "import asyncio, numpy as np, ucp\n"
        "EH = " + repr(error_handling) + "\n"
        "async def main():\n"
        "    got = asyncio.get_running_loop().create_future()\n"
        "    async def echo(ep):\n"
        "        buf = np.empty(1 << 20, dtype='u1')\n"
        "        await ep.recv(buf)\n"
        "        await ep.send(buf)\n"
        "        got.set_result(ep)\n"
        "    lf = ucp.create_listener(echo, endpoint_error_handling=EH)\n"
        "    ep = await ucp.create_endpoint('127.0.0.1', lf.port, endpoint_error_handling=EH)\n"
        "    for _ in range(200):\n"
        "        if ep.single_copy[0]:\n"
        "            break\n"
        "        await asyncio.sleep(0.005)\n"
        "    out = np.arange(1 << 20, dtype='u1')\n"
        "    back = np.empty_like(out)\n"
        "    await asyncio.gather(ep.send(out), ep.recv(back))\n"
        "    assert (back == out).all()\n"
        "    server = await got\n"
        "    print('counts', ep.single_copy, server.single_copy, ep._tags['single_copy'], flush=True)\n"
        "    await ep.close(); lf.close()\n"
        "asyncio.run(main())\n"
    )
    # Only the settings under test: the path on, UCX's transports all there.
    env = {k: v for k, v in os.environ.items() if k not in ("UCXA_SINGLE_COPY", "UCX_MM_ERROR_HANDLING", "UCX_TLS")}
    env.update({"UCX_NET_DEVICES": "lo", **env_extra})
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    counts = [line for line in out.stdout.splitlines() if line.startswith("counts ")]
    if env.get("UCX_MM_ERROR_HANDLING") or not error_handling:
        assert counts == ["counts (False, False, 0, 0) (False, False, 0, 0) False"], out.stdout
    else:
        assert counts == ["counts (True, True, 1, 1) (True, True, 1, 1) True"], out.stdout


def test_a_cancelled_send_is_still_delivered(progress_mode):
    """As a send UCX cannot withdraw goes on to completion, a single-copy send whose caller
    cancels it still delivers its message whole (the buffer is kept until the answer)."""

    async def main():
        from conftest import pair

        lf, client, server = await pair()
        out = _data(4 << 20, 3)
        send = asyncio.ensure_future(client.send(out))
        await asyncio.sleep(0)
        send.cancel()
        del out  # the operation holds the buffer, not this frame
        back = np.empty(4 << 20, dtype="u1")
        await server.recv(back)
        np.testing.assert_array_equal(back, _data(4 << 20, 3))
        assert server.single_copy[3] == 1
        lf.close()

    run(main())


def test_a_peer_that_is_gone_by_the_end_of_the_handshake_is_no_error_of_the_path(fresh_ucp):
    """The listener's side drops its endpoint as soon as it has it (UCX-Py's own
    test_close_callback does): the client's endpoint may have failed before its hello
    exchange could start. Making it still succeeds, as without the path; its operations then
    report the peer's failure."""

    async def main():
        lf = ucp.create_listener(lambda ep: None)  # the endpoint is dropped, so closed
        for _ in range(10):
            ep = await ucp.create_endpoint("127.0.0.1", lf.port)
            await asyncio.sleep(0.05)
            with pytest.raises((ucp.exceptions.UCXPeerFailure, ucp.exceptions.UCXEndpointClosed)):
                await asyncio.wait_for(ep.recv(np.empty(8, dtype="u1")), 5)
            ep.abort()
        lf.close()

    run(main())
