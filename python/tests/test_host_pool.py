"""`ucp.HostPool`: receive buffers whose memory returns to the pool only once nothing in
Python can reach it any more, and is then handed out again."""
import asyncio
import gc
import threading

import numpy as np
import pytest

import ucp
from conftest import pair, run

MiB = 1 << 20


def address(buf):
    return np.frombuffer(memoryview(buf), dtype="u1").ctypes.data


def test_allocate_gives_writable_memory_of_the_size_asked():
    pool = ucp.HostPool(16 * MiB)
    buf = pool.allocate(MiB + 3)
    assert len(buf) == MiB + 3
    view = memoryview(buf)
    assert (view.nbytes, view.readonly, view.format, view.ndim) == (MiB + 3, False, "B", 1)
    a = np.frombuffer(view, dtype="u1")
    a[:] = 7
    assert bytes(view[-3:]) == b"\x07\x07\x07"
    assert address(buf) % 4096 == 0  # page-aligned
    assert "pooled" in repr(buf)


def test_a_freed_buffer_is_reused():
    pool = ucp.HostPool(16 * MiB)
    buf = pool.allocate(MiB)
    first = address(buf)
    del buf
    assert pool.cached_bytes == MiB
    again = pool.allocate(MiB)
    assert address(again) == first
    assert pool.reused == 1
    assert pool.cached_bytes == 0


def test_a_view_keeps_the_block_out_of_the_pool():
    """NumPy points a view of a view at the memory's owner, skipping the arrays between: the
    owner is the buffer, so the block stays taken while any view lives."""
    pool = ucp.HostPool(16 * MiB)
    buf = pool.allocate(MiB)
    a = np.frombuffer(memoryview(buf), dtype="u1")
    a[:] = 1
    tail = a[10:]
    del buf, a
    gc.collect()
    assert pool.cached_bytes == 0
    other = np.frombuffer(memoryview(pool.allocate(MiB)), dtype="u1")
    assert pool.reused == 0
    other[:] = 2
    assert (tail == 1).all()
    del tail
    assert pool.cached_bytes == MiB


def test_a_block_serves_sizes_from_half_of_it_to_all_of_it():
    pool = ucp.HostPool(64 * MiB)
    pool.allocate(4 * MiB)  # freed at once
    assert pool.cached_bytes == 4 * MiB
    bigger = pool.allocate(4 * MiB + 1)  # does not fit: fresh memory
    assert pool.reused == 0
    smaller = pool.allocate(MiB)  # under half of the free block: fresh memory too
    assert pool.reused == 0
    half = pool.allocate(2 * MiB)  # fits, and keeps at most twice what it needs
    assert pool.reused == 1
    assert len(half) == 2 * MiB
    del bigger, smaller, half


def test_the_pool_keeps_at_most_max_bytes():
    pool = ucp.HostPool(2 * MiB)
    bufs = [pool.allocate(MiB) for _ in range(4)]
    del bufs
    assert pool.cached_bytes == 2 * MiB
    assert pool.max_bytes == 2 * MiB
    pool.clear()
    assert pool.cached_bytes == 0


def test_small_buffers_are_not_pooled():
    pool = ucp.HostPool(16 * MiB, min_size=4096)
    small = pool.allocate(4095)
    assert "pooled" not in repr(small)
    assert address(small) % 16 == 0  # malloc's alignment, not a page of its own
    del small
    assert pool.cached_bytes == 0
    empty = pool.allocate(0)
    assert len(empty) == 0 and memoryview(empty).nbytes == 0
    off = ucp.HostPool(0)
    off.allocate(MiB)
    assert off.cached_bytes == 0


def test_bad_sizes_are_refused_by_name():
    pool = ucp.HostPool(MiB)
    with pytest.raises(ValueError, match="nbytes must be >= 0, got -1"):
        pool.allocate(-1)
    with pytest.raises(ValueError, match="max_bytes must be >= 0, got -5"):
        ucp.HostPool(-5)
    with pytest.raises(ValueError, match="min_size must be >= 0"):
        ucp.HostPool(MiB, min_size=-1)
    with pytest.raises(MemoryError, match="too large"):
        pool.allocate(2**63 - 1)


def test_a_buffer_freed_on_another_thread_returns():
    pool = ucp.HostPool(16 * MiB)
    bufs = [pool.allocate(MiB) for _ in range(8)]

    def drop():
        bufs.clear()

    t = threading.Thread(target=drop)
    t.start()
    t.join()
    assert pool.cached_bytes == 8 * MiB
    reused = pool.allocate(MiB)
    assert pool.reused == 1
    del reused


def test_recv_multi_into_pooled_buffers(fresh_ucp):
    """Frames received over loopback into pool memory arrive intact, and the second message
    lands in the memory the first one freed."""
    pool = ucp.HostPool(64 * MiB)

    async def main():
        listener, client, server = await pair()
        for i in range(2):
            frames = [np.full(3 * MiB, i + 1, dtype="u1"), np.arange(MiB // 8, dtype="i8") * i]
            _, got = await asyncio.gather(client.send_multi(frames), server.recv_multi(allocator=pool.allocate))
            assert [len(f) for f in got] == [3 * MiB, MiB]
            assert (np.frombuffer(memoryview(got[0]), dtype="u1") == i + 1).all()
            np.testing.assert_array_equal(np.frombuffer(memoryview(got[1]), dtype="i8"), frames[1])
            del got
        await client.close()
        await server.close()
        listener.close()

    run(main())
    assert pool.reused >= 2
