"""One rank of a test job for ucp.collective (run by test_collective.py, under ucp.launch or
beside Rust ranks). Modes:

- ``selftest [PATH BATCH]``: alltoallv with random sizes (zero included) over rounds,
  allgather, messages by rank and tag, barrier; every byte checked.
- ``mirror-alltoall MAX ITERS [PATH BATCH]``: the exact sequence of examples/alltoall.rs
  (sizes 1 KiB to MAX by powers of 4, 4 MiB / size warm-ups (3 to 1000), then ITERS x (barrier, alltoallv, allgather
  of 8 bytes)), so it can stand in for one of its ranks; the parts' bytes are checked.

- ``window``: ``SharedWindow`` with random sizes on both sides of a 64 KiB slot (zero
  included) over rounds, every window mapped, every byte checked; then a slow reader (rank 0
  reads its parts only after the others have started the next call) whose parts stay; then
  the same through a window of 512 KiB slots, reached on huge pages.
- ``mirror-window MAX ITERS``: the exact sequence of ``examples/alltoall.rs --window-only``
  (per size: open a window with slots of the size, warm-ups, then ITERS x (barrier, window
  alltoallv, allgather of 8 bytes)), beside its Rust ranks; the parts' bytes are checked.
- ``device-allocation-fails``: ``alltoallv_device`` where rank 1's allocator raises: rank 1's
  call raises it, the others' complete whole, and a second call works on every rank.
- ``huge-announcement``: rank 1 announces a part of 2**50 bytes to rank 0 (and sends 1000):
  rank 0's call fails naming the size, the others' complete whole, a second call works.
- ``device [host]``: ``alltoallv_device`` with random sizes (zero included) over rounds, on
  CuPy arrays (needs a GPU), or with ``host`` on NumPy arrays received into bytearrays (the
  same messages, on any machine); every byte checked.

PATH and BATCH (default ``auto`` and the pool's default) go to ``set_data_path``.

Exits 0 and prints ``OK rank R`` on success."""
import asyncio
import gc
import os
import random
import struct
import sys
import types

from ucp import _ucx_async as native
from ucp.collective import Communicator


def part(src, dst, rnd):
    rng = random.Random(src * 1_000_003 + dst * 7919 + rnd)
    n = rng.choice([0, rng.randrange(64), rng.randrange(70_000), rng.randrange(1 << 20)])
    return bytes((i * 31 + src * 7 + dst) & 0xFF for i in range(n))


async def selftest(c):
    for rnd in range(3):
        got = await c.alltoallv([part(c.rank, d, rnd) for d in range(c.size)])
        for src, b in enumerate(got):
            assert bytes(b) == part(src, c.rank, rnd), (rnd, src, c.rank, len(b))
    # alltoallv_into reuses the caller's list and its bytearrays round after round.
    reused, kept = [], None
    for rnd in range(3, 6):
        await c.alltoallv_into([part(c.rank, d, rnd) for d in range(c.size)], reused)
        for src, b in enumerate(reused):
            assert bytes(b) == part(src, c.rank, rnd), (rnd, src, c.rank, len(b))
        if kept is not None:
            assert [id(b) for b in reused] == kept, "the same bytearrays were reused"
        kept = [id(b) for b in reused]
    # Parts in a tuple, as in a list (the native call reads both by index).
    got = await c.alltoallv(tuple(part(c.rank, d, 6) for d in range(c.size)))
    for src, b in enumerate(got):
        assert bytes(b) == part(src, c.rank, 6), (6, src, c.rank, len(b))
    await inline_edge(c)
    await small_out_large_in(c)
    out = bytearray(3 * c.size)
    await c.allgather(bytes([c.rank] * 3), out)
    assert out == bytes(r for r in range(c.size) for _ in range(3)), out
    nxt, prv = (c.rank + 1) % c.size, (c.rank - 1) % c.size
    await asyncio.gather(c.send(nxt, bytes([c.rank, 2]), 2), c.send(nxt, bytes([c.rank, 1]), 1))
    b = bytearray(2)
    await c.recv(prv, b, 1)
    assert b == bytes([prv, 1]), b
    await c.recv(prv, b, 2)
    assert b == bytes([prv, 2]), b
    await c.barrier()
    await cancelled_call(c)


async def large_parts(c):
    """Parts of 1 MiB, every byte checked, once every same-host single-copy link is up (they
    come up in the background; never without peer error handling); prints how many messages
    went that way, summed over the peers: ``SINGLE_COPY rank R: sent received``."""
    others = [r for r in range(c.size) if r != c.rank]
    links = lambda: [c._peer(r).single_copy for r in others]  # noqa: E731
    if any(s[0] or s[1] for s in links()) or native.error_handling_parse(os.environ.get("UCXA_ERROR_HANDLING")):
        for _ in range(10_000):
            if all(s[0] and s[1] for s in links()):
                break
            await asyncio.sleep(0.001)
    n = 1 << 20
    got = await c.alltoallv([bytes([c.rank * 16 + d]) * n for d in range(c.size)])
    for src, b in enumerate(got):
        assert bytes(b) == bytes([src * 16 + c.rank]) * n, (src, c.rank, len(b))
    sent = sum(s[2] for s in links())
    received = sum(s[3] for s in links())
    print(f"SINGLE_COPY rank {c.rank}: {sent} {received}", flush=True)


async def cancelled_call(c):
    """An alltoallv cancelled while it waits (rank 0 calls it alone) leaves nothing behind:
    no task, and no receive still posted. A message each peer then sends on the tag that call
    was receiving on stays unreceived, rather than vanishing into a dropped buffer."""
    seq = c._seq
    if c.rank == 0:
        before = len(asyncio.all_tasks())
        try:
            await asyncio.wait_for(c.alltoallv([b"x"] * c.size), 0.2)
        except asyncio.TimeoutError:
            pass
        else:
            raise AssertionError("alltoallv finished without its peers")
        assert len(asyncio.all_tasks()) == before, "the cancelled alltoallv left tasks running"
    else:
        c._next_seq()  # the call rank 0 made alone, so that the next calls match
    await c.barrier()
    if c.rank != 0:
        await c._eps[0].send(b"late", native.collective_own_tag(seq, c.rank, 0), force_tag=True)
    await c.barrier()
    if c.rank == 0:
        for src in range(1, c.size):
            tag = native.collective_own_tag(seq, src, 0)
            assert c._eps[src]._worker.tag_probe(tag), f"rank {src}'s message went to a receive the cancel left posted"


async def small_out_large_in(c):
    """Rank 0 sends only parts that ride in their announcements (its sends go first, then it
    takes each announcement in turn) while every other rank sends it a part of its own
    messages (direct) and small ones to the rest: every byte arrives on every rank."""

    def mixed(src, dst):
        n = 5 if src == 0 else (200_000 if dst == 0 else 3)
        return bytes((i * 13 + src * 5 + dst) & 0xFF for i in range(n))

    for _ in range(2):
        got = await c.alltoallv([mixed(c.rank, d) for d in range(c.size)])
        for src, b in enumerate(got):
            assert bytes(b) == mixed(src, c.rank), ("small out, large in", src, c.rank, len(b))


async def inline_edge(c):
    """Parts at the edge of what travels inside the announcement (empty, exactly the inline
    maximum, one byte more) arrive whole, and leave no message unreceived (batch 1 is the
    first message after the announcement)."""
    inline_max = native.alltoallv_announce_room(c.size) - 12
    sizes = [0, inline_max, inline_max + 1]

    def edge(src, dst):
        return bytes((i * 7 + src * 3 + dst) & 0xFF for i in range(sizes[(src + dst) % 3]))

    seq = c._seq
    got = await c.alltoallv([edge(c.rank, d) for d in range(c.size)])
    for src, b in enumerate(got):
        assert bytes(b) == edge(src, c.rank), ("inline edge", src, c.rank, len(b))
    await c.barrier()
    for src in range(c.size):
        if src != c.rank:
            tag = native.collective_own_tag(seq, src, 1)
            assert not c._eps[src]._worker.tag_probe(tag), f"a message from rank {src} was never received"


async def mirror_alltoall(c, max_size, iters):
    size = 1 << 10
    while size <= max_size:
        parts = [bytes([(c.rank * c.size + r) & 0xFF]) * size for r in range(c.size)]
        n = max(3, -(-iters // 4)) if size > 4 << 20 else iters
        for _ in range(min(max((4 << 20) // size, 3), 1000)):
            await c.alltoallv(parts)
        for _ in range(n):
            await c.barrier()
            got = await c.alltoallv(parts)
            for s, b in enumerate(got):
                assert bytes(b) == bytes([(s * c.size + c.rank) & 0xFF]) * size, (size, s)
            await c.allgather(struct.pack("<Q", 1), bytearray(8 * c.size))
        size *= 4


async def window(c):
    w = await c.shared_window(64 << 10)
    assert w.mapped == c.size, (w.mapped, c.size)
    for rnd in range(6):
        await w.alltoallv([part(c.rank, d, rnd) for d in range(c.size)])
        for src in range(c.size):
            assert bytes(w.part(src)) == part(src, c.rank, rnd), (rnd, src, c.rank, len(w.part(src)))
    assert w.part(c.rank).readonly
    for rnd in range(4):
        await w.alltoallv([bytes([rnd * 16 + c.rank * 3 + d]) * 3000 for d in range(c.size)])
        if c.rank == 0:
            await asyncio.sleep(0.1)  # the others start the next call meanwhile
        for src in range(c.size):
            assert bytes(w.part(src)) == bytes([rnd * 16 + src * 3 + c.rank]) * 3000, (rnd, src)
    # Windows of 2 MiB and more are reached through a second attachment on huge pages.
    assert w.on_huge_pages == 0, w.on_huge_pages
    big = await c.shared_window(512 << 10)
    assert (big.mapped, big.on_huge_pages) == (c.size, c.size), (big.mapped, big.on_huge_pages)
    for rnd in range(6, 10):
        await big.alltoallv([part(c.rank, d, rnd) for d in range(c.size)])
        for src in range(c.size):
            assert bytes(big.part(src)) == part(src, c.rank, rnd), (rnd, src, c.rank, len(big.part(src)))


async def mirror_window(c, max_size, iters):
    size = 1 << 10
    while size <= max_size:
        parts = [bytes([(c.rank * c.size + r) & 0xFF]) * size for r in range(c.size)]
        n = max(3, -(-iters // 4)) if size > 4 << 20 else iters
        w = await c.shared_window(size)
        for _ in range(min(max((4 << 20) // size, 3), 1000)):
            await w.alltoallv(parts)
        for _ in range(n):
            await c.barrier()
            await w.alltoallv(parts)
            for s in range(c.size):
                assert bytes(w.part(s)) == bytes([(s * c.size + c.rank) & 0xFF]) * size, (size, s)
            await c.allgather(struct.pack("<Q", 1), bytearray(8 * c.size))
        size *= 4


async def device_alltoallv(c, on_host):
    """``alltoallv_device`` with ``part``'s sizes and bytes, on CuPy arrays or (``on_host``)
    NumPy arrays received into bytearrays."""
    import numpy as np

    if on_host:
        xp, allocator = np, bytearray
    else:
        import cupy as xp

        allocator = None  # the default: RMM's or CuPy's device memory
    for rnd in range(3):
        parts = [xp.asarray(np.frombuffer(part(c.rank, d, rnd), dtype="u1")) for d in range(c.size)]
        got = await c.alltoallv_device(parts, allocator)
        for src, b in enumerate(got):
            if not on_host:
                assert hasattr(b, "__cuda_array_interface__"), type(b)
                b = xp.asnumpy(xp.asarray(b).view("u1"))
            assert bytes(b) == part(src, c.rank, rnd), ("device", rnd, src, c.rank, len(b))
    await c.barrier()


async def device_allocation_fails(c):
    """``alltoallv_device`` where rank 1's allocator fails: rank 1 raises the allocator's
    error, every other rank's call completes with every part, and the communicator stays in
    step (a second call after it works everywhere)."""
    def allocator(n):
        if c.rank == 1:
            raise MemoryError("no room for a part (on purpose)")
        return bytearray(n)

    sizes = [0, 10, 100_000, 3 << 20]  # inline-sized to rendezvous-sized
    parts = [bytes([c.rank * 16 + d]) * sizes[(c.rank + d) % 4] for d in range(c.size)]
    try:
        got = await asyncio.wait_for(c.alltoallv_device(parts, allocator), 30)
    except asyncio.TimeoutError:
        raise AssertionError(f"rank {c.rank}: alltoallv_device hung on rank 1's failed allocation") from None
    except MemoryError:
        assert c.rank == 1
    else:
        assert c.rank != 1, "rank 1's allocator failed, and its call did not say so"
        for s, b in enumerate(got):
            assert bytes(b) == bytes([s * 16 + c.rank]) * sizes[(s + c.rank) % 4], (c.rank, s, len(b))
    got = await asyncio.wait_for(c.alltoallv_device(parts, bytearray), 30)
    for s, b in enumerate(got):
        assert bytes(b) == bytes([s * 16 + c.rank]) * sizes[(s + c.rank) % 4], ("after", c.rank, s, len(b))


async def huge_announcement(c):
    """Rank 1 tells rank 0 its part is 2**50 bytes (and sends 1000): rank 0 cannot make room,
    receives the message only to drop it, and its call fails naming the size; ranks 1 and 2
    complete theirs whole, and a second call works on every rank."""
    import ucp.collective.communicator as collective

    honest = collective._native

    class Liar:
        def __getattr__(self, name):
            return getattr(honest, name)

        @staticmethod
        def collective_alltoallv(*args):
            return None  # the native call announces honestly: the general path lies

        @staticmethod
        def alltoallv_announce(length, batch, world):
            if length == 1000:  # the part for rank 0
                return honest.alltoallv_announce(1 << 50, 0, world)[0], False
            return honest.alltoallv_announce(length, batch, world)

    def part_for(src, dst):
        return bytes([src * 16 + dst]) * (1000 if (src, dst) == (1, 0) else 100_000)

    if c.rank == 1:
        collective._native = Liar()
    try:
        got = await asyncio.wait_for(c.alltoallv([part_for(c.rank, d) for d in range(c.size)]), 30)
    except asyncio.TimeoutError:
        raise AssertionError(f"rank {c.rank}: alltoallv hung on rank 1's announcement") from None
    except MemoryError as e:
        assert c.rank == 0 and "rank 1 announced a part of 1125899906842624 bytes" in str(e), e
    else:
        assert c.rank != 0, "rank 0 took a part of 2**50 bytes"
        for s, b in enumerate(got):
            assert bytes(b) == part_for(s, c.rank), (c.rank, s, len(b))
    finally:
        collective._native = honest
    got = await asyncio.wait_for(c.alltoallv([bytes([c.rank]) * 5000 for _ in range(c.size)]), 30)
    assert [bytes(b) for b in got] == [bytes([s]) * 5000 for s in range(c.size)], "the call after"


def collective_cycles():
    """The functions of ``ucp`` whose frames Python's cycle collector finds unreachable now
    (a failed call's traceback holding a frame that holds the failed operations: everything
    the call moved stays until the collector runs)."""
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        gc.collect()
        frames = {
            f"{o.f_code.co_name} ({os.path.basename(o.f_code.co_filename)})"
            for o in gc.garbage
            if isinstance(o, types.FrameType) and f"{os.sep}ucp{os.sep}" in o.f_code.co_filename
        }
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    return sorted(frames)


async def rank_gone(c):
    """The last rank leaves without a word; the others' alltoallv of 1 MiB parts fails for it,
    but only once their own exchange has settled: each has the others' parts whole."""
    await c.barrier()
    last = c.size - 1
    if c.rank == last:
        # Only once the others are past the barrier: sooner, the abort could reset the
        # connections under this rank's own barrier messages.
        for r in range(last):
            await c.recv(r, bytearray(1), 7)
        for ep in c._eps:
            ep.abort()
        os._exit(0)
    await c.send(last, b"\x00", 7)
    parts = [bytes([c.rank * 16 + d]) * (1 << 20) for d in range(c.size)]
    out = []
    # No `wait_for` here (the test's process timeout guards a hang): its own frame keeps the
    # call's task, and with it the failure, which is what the check below looks for.
    gc.collect()
    gc.disable()
    try:
        await c.alltoallv_into(parts, out)
    except Exception as e:  # the departed rank's failure, by whatever name UCX gives it
        print(f"FAILED AS EXPECTED rank {c.rank}: {type(e).__name__}", flush=True)
    else:
        raise AssertionError("alltoallv went on as if the last rank were there")
    await asyncio.sleep(0)  # the wakeup's handle lets go of what woke this task
    await asyncio.sleep(0)
    cycles = collective_cycles()
    gc.enable()
    assert not cycles, f"rank {c.rank}: the failed call left reference cycles through {cycles}"
    for s in range(c.size - 1):
        assert bytes(out[s]) == bytes([s * 16 + c.rank]) * (1 << 20), f"rank {c.rank} lacks rank {s}'s part"
    # A small call (every part inside its announcement, done natively) fails the same way.
    small = [bytes([c.rank * 16 + d]) * 1000 for d in range(c.size)]
    try:
        await asyncio.wait_for(c.alltoallv_into(small, out), 30)
    except asyncio.TimeoutError:
        raise AssertionError("a small alltoallv hung on a rank that left") from None
    except Exception as e:
        print(f"FAILED AS EXPECTED rank {c.rank}: {type(e).__name__}", flush=True)
    else:
        raise AssertionError("a small alltoallv went on as if the last rank were there")
    for s in range(c.size - 1):
        assert bytes(out[s]) == bytes([s * 16 + c.rank]) * 1000, f"rank {c.rank} lacks rank {s}'s small part"
    print(f"OK rank {c.rank}", flush=True)
    os._exit(0)  # the communicator cannot close cleanly without the last rank


async def main():
    c = await Communicator.from_env()
    mode, args = sys.argv[1], sys.argv[2:]
    if mode == "rank-gone":
        await rank_gone(c)
    if mode == "selftest":
        path = args[0:2]
    else:
        path = args[2:4]
    if path:
        c.set_data_path(path[0], batch=int(path[1]))
    if mode == "device":
        await device_alltoallv(c, args[:1] == ["host"])
    elif mode == "device-allocation-fails":
        await device_allocation_fails(c)
    elif mode == "huge-announcement":
        await huge_announcement(c)
    elif mode == "window":
        await window(c)
    elif mode == "mirror-window":
        await mirror_window(c, int(args[0]), int(args[1]))
    elif mode == "selftest":
        # Which transports reach the next rank: CMA only without error handling.
        print(f"CMA rank {c.rank}: {'cma' in c._peer((c.rank + 1) % c.size).ucx_info()}", flush=True)
        await selftest(c)
        await large_parts(c)
    else:
        await mirror_alltoall(c, int(args[0]), int(args[1]))
    await c.close()
    print(f"OK rank {c.rank}", flush=True)


if __name__ == "__main__":
    asyncio.run(main())
