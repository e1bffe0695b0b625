"""ucp.multirail over real UCX on loopback: messages from 0 B to 8 MiB at each rail count,
ratio, weights and stage count arrive intact and in order; bad splits and crossed rails are
refused by name; a failed rail fails the message on both sides without a hang; a receive
cancelled midway aborts the group. The protocol is ucx-async's (bytes from ucx-core): a Rust
peer process checks a Python group's bytes in ``test_python_group_talks_to_rust``."""
import asyncio
import os
import pathlib
import subprocess

import pytest

import ucp
from conftest import rail_pair, run
from ucp.multirail import RailGroup, RailListener

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def pattern(n, seed):
    return bytes((i * 31 ^ seed ^ (i >> 12)) & 0xFF for i in range(n)) if n < 4096 else _big(n, seed)


def _big(n, seed):
    block = bytes((i * 31 ^ seed) & 0xFF for i in range(4096))
    return (block * (n // 4096 + 1))[:n]


async def transfer(a, b, data, **split):
    got = bytearray(len(data) + 3)
    got[len(data) :] = b"\xee" * 3
    _, n = await asyncio.gather(a.send(data, **split), b.recv(got))
    assert n == len(data)
    assert got[: len(data)] == data, f"bytes differ at {len(data)} bytes with {split}"
    assert got[len(data) :] == b"\xee" * 3, "written past the message"


def test_every_size_split_and_stage_count_arrives_intact(progress_mode):
    async def main():
        for rails in (1, 2, 3):
            listener, a, b = await rail_pair(rails)
            splits = [{}, {"stages": 3}]
            if rails > 1:
                splits += [{"ratio": 0.0}, {"ratio": 0.75, "stages": 2}, {"ratio": 1.0}]
                splits += [{"weights": list(range(1, rails + 1)), "stages": 2}]
            for split in splits:
                for size in (0, 1, 7, 65_537, 1 << 20, 8 << 20):
                    await transfer(a, b, pattern(size, size % 251), **split)
            await transfer(b, a, pattern(3 << 20, 9), stages=2)  # the other way
            a.abort()
            b.abort()
            listener.close()

    run(main(), timeout=120)


def test_messages_arrive_in_order_while_sends_overlap(fresh_ucp):
    async def main():
        listener, a, b = await rail_pair(2)
        msgs = [pattern(100_000 * (i + 1), i) for i in range(6)]

        async def receive_all():
            out = []
            for m in msgs:
                got = bytearray(len(m))
                assert await b.recv(got) == len(m)
                out.append(bytes(got))
            return out

        _, got = await asyncio.gather(asyncio.gather(*(a.send(m, stages=2) for m in msgs)), receive_all())
        assert got == msgs
        a.abort()
        b.abort()
        listener.close()

    run(main())


def test_bad_input_is_refused_with_the_reason(fresh_ucp):
    async def main():
        listener, a, b = await rail_pair(2)
        with pytest.raises(ValueError, match="split ratio 1.5"):
            await a.send(b"x", ratio=1.5)
        with pytest.raises(ValueError, match="3 weights for a group of 2 rails"):
            await a.send(b"x", weights=[1, 1, 1])
        with pytest.raises(ValueError, match="stages"):
            await a.send(b"x", stages=0)
        # A message bigger than the buffer: refused by name, and the group aborted.
        small = bytearray(100)
        send = asyncio.ensure_future(a.send(pattern(10_000, 1)))
        with pytest.raises(ValueError, match="a message of 10000 bytes does not fit the 100-byte buffer"):
            await b.recv(small)
        with pytest.raises(ucp.exceptions.UCXError, match="aborted or closed"):
            await b.recv(small)
        await asyncio.wait_for(asyncio.gather(send, return_exceptions=True), 10)
        a.abort()
        listener.close()
        with pytest.raises(ValueError, match="0 rails"):
            RailGroup([])

    run(main())


def test_crossed_rails_are_refused(fresh_ucp):
    async def main():
        listener = RailListener(2)
        crossed = [("127.0.0.1", p) for p in reversed(listener.ports)]
        client = await RailGroup.connect(crossed)
        # Neither rail names its listener's rail: no group is ever complete.
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(listener.accept(), 1.0)
        client.abort()
        listener.close()

    run(main())


def test_a_failed_rail_fails_the_message_on_both_sides(progress_mode):
    async def main():
        listener, a, b = await rail_pair(2)
        data = pattern(64 << 20, 5)
        got = bytearray(len(data))
        # Rail 1 fails while the receive waits and before the message is sent: not by timing
        # (64 MiB goes in one event-loop step by same-host single copy), and the message
        # cannot beat the failure.
        received = asyncio.ensure_future(b.recv(got))
        await asyncio.sleep(0)
        b.rails[1].abort()
        sent, received = await asyncio.gather(a.send(data, stages=4), received, return_exceptions=True)
        assert isinstance(received, ucp.exceptions.UCXBaseException), received
        assert "rail 1" in str(received) or "rail 0" in str(received), received
        assert sent is None or isinstance(sent, ucp.exceptions.UCXBaseException), sent
        with pytest.raises(ucp.exceptions.UCXError, match="aborted or closed"):
            await b.recv(got)
        later = await asyncio.wait_for(asyncio.gather(a.send(data), return_exceptions=True), 10)
        assert isinstance(later[0], ucp.exceptions.UCXBaseException), later
        listener.close()

    run(main(), timeout=60)


def test_a_receive_cancelled_while_it_waits_aborts_the_group(fresh_ucp):
    async def main():
        listener, a, b = await rail_pair(2)
        data = pattern(32 << 20, 6)
        got = bytearray(len(data))
        # Cancelled while it waits, before the message comes (a message can arrive whole
        # within one event-loop step by same-host single copy: no cancel by timing).
        received = asyncio.ensure_future(b.recv(got))
        await asyncio.sleep(0)
        received.cancel()
        with pytest.raises(asyncio.CancelledError):
            await received
        send = asyncio.ensure_future(a.send(data, stages=2))
        with pytest.raises(ucp.exceptions.UCXError, match="aborted or closed"):
            await b.recv(got)
        await asyncio.wait_for(asyncio.gather(send, return_exceptions=True), 10)
        a.abort()
        listener.close()

    run(main())


def _rust_pattern(n, seed):
    """examples/multirail.rs's `pattern`: byte i is (i*131 ^ seed ^ (i >> 10)) mod 256."""
    return bytes((i * 131 ^ seed ^ (i >> 10)) & 0xFF for i in range(n))


def test_python_group_talks_to_rust(fresh_ucp):
    """A Python RailGroup sends to the Rust multirail example's TEST-mode peer (a separate
    process checking every byte) and receives its acknowledgements: the same header, tags and
    split arithmetic on both sides."""
    subprocess.run(["cargo", "build", "-q", "-p", "ucx-async", "--example", "multirail"], cwd=ROOT, check=True)
    exe = os.path.join(ROOT, "target", "debug", "examples", "multirail")
    sizes, iters = [0, 65_537, 1_000_000], 2
    args = ["--serve", "--modes", "TEST", "--rails", "2", "--stages", "2", "--ratios", "0.5"]
    args += ["--sizes", ",".join(map(str, sizes)), "--iters", str(iters)]
    env = dict(os.environ, UCX_NET_DEVICES="lo")
    peer = subprocess.Popen([exe, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True)
    try:
        line = peer.stdout.readline()
        assert line.startswith("PORT "), (line, peer.stderr.read() if peer.poll() is not None else "")
        ports = [int(p) for p in line.split()[1].split(",")]

        async def main():
            group = await RailGroup.connect([("127.0.0.1", p) for p in ports])
            for size in sizes:
                for i in range(iters + 1):  # the example's warm-up, then its iterations
                    await group.send(_rust_pattern(size, i), ratio=0.5, stages=2)
                ok = bytearray(1)
                await group.rails[0].recv(ok)
                assert ok == b"\x01", f"the Rust peer found different bytes at {size} bytes"
            await group.rails[0].send(b"\x00")  # goodbye: the peer lets go
            group.abort()

        run(main(), timeout=60)
        assert peer.wait(30) == 0, peer.stderr.read()
    finally:
        if peer.poll() is None:
            peer.kill()
            peer.wait()


def test_rails_on_contexts_of_their_own_use_the_devices_asked_for(progress_mode):
    """Given ``devices``, each rail (both sides) gets a UCX context and worker of its own with
    that ``NET_DEVICES``; the group still moves every byte. (Here every rail's device is
    ``lo``: the one this machine can use.)"""

    async def main():
        listener = RailListener(2, devices=["lo", "lo"])
        ports = [("127.0.0.1", p) for p in listener.ports]
        a, b = await asyncio.gather(RailGroup.connect(ports, devices=["lo", "lo"]), asyncio.wait_for(listener.accept(), 10))
        for group in (a, b):
            contexts = [ep._ctx for ep in group.rails]
            assert contexts[0] is not contexts[1], "a context per rail"
            assert all(ctx is not ucp.core._ctx for ctx in contexts), "not ucp's own context"
            assert all(ctx.get_config()["NET_DEVICES"] == "lo" for ctx in contexts)
        await transfer(a, b, pattern(3 << 20, 9), ratio=0.5, stages=2)
        with pytest.raises(ValueError, match="3 device settings for 2 rails"):
            await RailGroup.connect(ports, devices=["lo"] * 3)
        for group in (a, b):
            await group.close()
        listener.close()

    run(main(), timeout=60)


def test_rail_devices_give_each_rail_a_nic_nearest_the_gpu_first():
    from ucp.multirail import rail_devices

    dgx = pathlib.Path(__file__).resolve().parents[2] / "crates/ucx-topology/tests/data/dgx.xml"
    try:
        got = rail_devices(5, pci="0000:03:00.0", xml=str(dgx))
    except OSError as e:
        pytest.skip(f"XML topologies need libhwloc: {e}")
    # GPU 0's switch NIC first, then the others by name; the fifth rail reuses the first NIC.
    assert got == ["mlx5_0:1,ib0", "mlx5_1:1,ib1", "mlx5_2:2,ib2", "mlx5_3:1,ib3", "mlx5_0:1,ib0"]

    # No origin: this process's GPU by its local rank (the XML's GPUs are its visible ones).
    if "CUDA_VISIBLE_DEVICES" not in os.environ:
        assert rail_devices(4, xml=str(dgx)) == got[:4]
        os.environ["LOCAL_RANK"] = "7"
        try:
            assert rail_devices(2, xml=str(dgx))[0] == "mlx5_3:1,ib3", "GPU 7's own NIC first"
        finally:
            del os.environ["LOCAL_RANK"]


def test_rails_choose_their_devices_from_the_topology(progress_mode):
    """``devices="auto"`` on both sides: each rail on a context of its own with the devices
    ``rail_devices`` picks from this machine's topology (no GPU here: nearest this process's
    CPUs) plus the interface of the address the rails meet at, and the group moves every byte
    between them."""
    from ucp.multirail import rail_devices

    try:
        want = rail_devices(2)
    except (OSError, RuntimeError, ValueError) as e:
        pytest.skip(f"no topology here: {e}")

    async def main():
        listener = RailListener(2, ip="127.0.0.1", devices="auto")
        ports = [("127.0.0.1", p) for p in listener.ports]
        a, b = await asyncio.gather(RailGroup.connect(ports, devices="auto"), asyncio.wait_for(listener.accept(), 10))
        # Each side's rails also keep 127.0.0.1's interface: the address they meet at.
        want_here = [d if "lo" in d.split(",") else d + ",lo" for d in want]
        for group in (a, b):
            assert [ep._ctx.get_config()["NET_DEVICES"] for ep in group.rails] == want_here
        await transfer(a, b, pattern(3 << 20, 5), ratio=0.5, stages=2)
        for group in (a, b):
            await group.close()
        listener.close()

    run(main(), timeout=60)
