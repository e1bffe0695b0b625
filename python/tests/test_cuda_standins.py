"""Buffer classification for device memory, checked on any machine with stand-in objects:
an object with ``__cuda_array_interface__`` is device memory even when it also
offers the buffer protocol (CuPy 14's arrays do), and CAI v3's fields are honoured. Without a
GPU, device memory is refused at the last step before UCX would get the pointer, with the
"no CUDA support" message: reaching it proves the classification. The real-GPU tests are in
test_cuda.py."""
import asyncio

import numpy as np
import pytest

import ucp
from ucp._libs.arr import Array
from conftest import pair, rail_pair, run

NO_CUDA = "UCX is not configured with CUDA support"


def cai(nbytes=64, **fields):
    iface = {"shape": (nbytes,), "typestr": "|u1", "data": (0x7F0000000000, False), "version": 3}
    iface.update(fields)
    return iface


class NumbaLike:
    """Numba's DeviceNDArray shape: the interface only, strides None, no stream."""

    def __init__(self, **fields):
        self.__cuda_array_interface__ = cai(**fields)


class RmmLike:
    """rmm.DeviceBuffer's shape: a byte buffer with the interface as a property, on the
    legacy default stream."""

    @property
    def __cuda_array_interface__(self):
        return cai(stream=1)


class CupyLike(np.ndarray):
    """CuPy 14's shape: the buffer protocol and the interface together (a NumPy array's buffer
    stands in for the host view CuPy refuses to give)."""

    @property
    def __cuda_array_interface__(self):
        return cai(self.nbytes, strides=None, stream=None)


def cupy_like(n=64):
    return np.zeros(n, dtype="u1").view(CupyLike)


@pytest.fixture
def host_only(fresh_ucp):
    async def probe():
        lf, client, server = await pair()
        support = client.cuda_support()
        lf.close()
        return support

    if run(probe()):
        pytest.skip("UCX has CUDA support here: stand-ins would hand UCX a fake device pointer")


@pytest.mark.parametrize("make", [cupy_like, NumbaLike, RmmLike])
def test_device_memory_is_classified_as_cuda(host_only, make):
    obj = make()
    assert Array(obj).cuda

    async def main():
        lf, client, server = await pair()
        with pytest.raises(ValueError, match=NO_CUDA):
            await client.send(obj)
        with pytest.raises(ValueError, match=NO_CUDA):
            await server.recv(obj)
        with pytest.raises(ValueError, match=NO_CUDA):
            await client.am_send(obj)
        with pytest.raises(ValueError, match=NO_CUDA):
            await client.send_obj(obj)
        lf.close()

    run(main())


@pytest.mark.parametrize(
    "fields, error, message",
    [
        ({"stream": 0}, ValueError, "'stream' is 0, which the CUDA Array Interface disallows"),
        ({"stream": "s"}, ValueError, "'stream' must be None or an int"),
        ({"mask": object()}, NotImplementedError, "masked arrays are not supported"),
        ({"shape": (4, 4), "typestr": "<f4", "strides": (4, 32)}, ValueError, "Array must be C or F contiguous"),
        ({"typestr": "|x"}, ValueError, "cannot tell the item size"),
    ],
)
def test_interface_fields_are_checked(host_only, fields, error, message):
    async def main():
        lf, client, server = await pair()
        with pytest.raises(error, match=message):
            await client.send(NumbaLike(**fields))
        lf.close()

    run(main())


def test_read_only_device_memory_is_no_receive_target(host_only):
    async def main():
        lf, client, server = await pair()
        with pytest.raises(ValueError, match="writing to readonly buffer"):
            await server.recv(NumbaLike(data=(0x7F0000000000, True)))
        # A read-only source is fine until the CUDA-support check.
        with pytest.raises(ValueError, match=NO_CUDA):
            await client.send(NumbaLike(data=(0x7F0000000000, True)))
        lf.close()

    run(main())


def test_zero_size_device_array_is_cuda_too(host_only):
    async def main():
        lf, client, server = await pair()
        with pytest.raises(ValueError, match=NO_CUDA):
            await client.send(NumbaLike(nbytes=0, data=(0, False)))
        lf.close()

    run(main())


def test_host_objects_with_interface_none_stay_host(fresh_ucp):
    class HostWithNone(np.ndarray):
        __cuda_array_interface__ = None

    obj = np.arange(8, dtype="u1").view(HostWithNone)

    async def main():
        lf, client, server = await pair()
        got = bytearray(8)
        await asyncio.gather(client.send(obj), server.recv(got))
        assert bytes(got) == bytes(range(8))
        lf.close()

    run(main())


def test_byte_view_cuts_a_device_array_into_device_ranges():
    """``byte_view``: a CUDA array's bytes as ranges that are CUDA arrays themselves (what
    ``ucp.multirail`` sends and receives chunks as), with the array's stream and readonly
    flag; host memory stays a memoryview. No UCX is involved."""
    from ucp._libs.arr import DeviceBytes, byte_view

    view = byte_view(NumbaLike(nbytes=100, stream=7))
    assert isinstance(view, DeviceBytes) and view.nbytes == 100 and not view.readonly
    part = view[10:40]
    iface = part.__cuda_array_interface__
    assert iface["data"] == (0x7F0000000000 + 10, False) and iface["shape"] == (30,) and iface["stream"] == 7
    assert Array(part).cuda and Array(part).nbytes == 30
    assert part[5:5].nbytes == 0 and view[90:200].nbytes == 10
    assert byte_view(NumbaLike(data=(0x7F0000000000, True))).readonly
    with pytest.raises(ValueError, match="step 1"):
        view[::2]
    with pytest.raises(ValueError, match="C or F contiguous"):
        byte_view(NumbaLike(shape=(4, 4), typestr="<f4", strides=(4, 32)))
    host = byte_view(np.arange(6, dtype="u2"))
    assert isinstance(host, memoryview) and host.nbytes == 12 and host.format == "B"


def test_multirail_sends_device_chunks_as_device_memory(host_only):
    """A CuPy-shaped array given to ``RailGroup.send`` or ``recv`` is cut into device chunks:
    without CUDA support, the first chunk is refused with the no-CUDA message (and that
    side aborts its group)."""
    async def main():
        listener, client, server = await rail_pair(2)
        with pytest.raises(ValueError, match=NO_CUDA):
            await client.send(cupy_like(1 << 16), ratio=0.5, stages=2)
        listener, client, server = await rail_pair(listener=listener)
        sent, got = await asyncio.gather(
            client.send(bytes(1 << 16), ratio=0.5, stages=2), server.recv(cupy_like(1 << 16)), return_exceptions=True
        )
        assert isinstance(got, ValueError) and NO_CUDA in str(got), repr(got)
        listener.close()

    run(main())


def test_alltoallv_device_hands_parts_to_ucx_as_device_memory(host_only):
    """``Communicator.alltoallv_device`` on one rank: a CuPy-shaped part and a stand-in
    receive buffer reach UCX as device memory (the no-CUDA refusal, for the send and the
    receive of the rank's own part); what it refuses before that is named."""
    from ucp.collective import Communicator

    async def main():
        c = await Communicator.bootstrap(0, 1, "127.0.0.1", 0)
        with pytest.raises(ValueError, match=NO_CUDA):
            await c.alltoallv_device([cupy_like(64)], allocator=cupy_like)
        with pytest.raises(ValueError, match="the allocator gave 3 bytes for rank 0's part of 64"):
            await c.alltoallv_device([cupy_like(64)], allocator=lambda n: bytearray(3))
        with pytest.raises(ValueError, match="2 parts for 1 ranks"):
            await c.alltoallv_device([cupy_like(), cupy_like()])
        with pytest.raises(ValueError, match="the part for rank 0 is not contiguous"):
            await c.alltoallv_device([NumbaLike(shape=(4, 4), typestr="<f4", strides=(4, 32))])
        with pytest.raises(ValueError, match="the part for rank 0 is not a buffer"):
            await c.alltoallv_device([object()])
        # The same call with host memory on both ends goes through (the messages are the same).
        got = await c.alltoallv_device([b"abc"], allocator=bytearray)
        assert got == [bytearray(b"abc")]
        await c.close()

    run(main())
