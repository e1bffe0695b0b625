"""`ucp._libs.arr.Array` describes host buffers exactly as `memoryview` does and CUDA arrays as
their `__cuda_array_interface__` says, without copying."""
import array
import ctypes
import io
import mmap
import pickle

import numpy as np
import pytest

from ucp._libs.arr import Array, asarray

builtin_buffers = [
    b"",
    b"abcd",
    bytearray(),
    bytearray(b"abcd"),
    array.array("i", []),
    array.array("i", [0, 1, 2, 3]),
    array.array("I", [0, 1, 2, 3]),
    array.array("f", []),
    array.array("d", [0, 1, 2, 3]),
    memoryview(array.array("B", [0, 1, 2, 3, 4, 5])).cast("B", (3, 2)),
    memoryview(b"abcd"),
    memoryview(bytearray(b"abcdef"))[1:5],
    memoryview(b"abcdef")[::2],
    memoryview(bytearray(b"abcdef"))[::-1],
    io.BytesIO(b"abcd").getbuffer(),
    mmap.mmap(-1, 5),
]


def _numpy_arrays():
    out = []
    for dtype in ["u1", "i2", "<u4", ">i4", "f4", "f8", "c16", "?"]:
        base = np.arange(24).astype(dtype).reshape(2, 3, 4)
        out += [
            base,
            np.asfortranarray(base),
            base[:, 1:, ::2],
            base.transpose(2, 0, 1),
            base[::-1],
            base[0],
            base[:, :1, :],
            base[:0],
            np.array(7, dtype=dtype),
        ]
    readonly = np.arange(10.0)
    readonly.flags.writeable = False
    out.append(readonly)
    return out


numpy_arrays = _numpy_arrays()


def _address(mv):
    """Independent check of the buffer address: ctypes for writable views, numpy otherwise."""
    if not mv.readonly and mv.c_contiguous and mv.nbytes:
        return ctypes.addressof(ctypes.c_char.from_buffer(mv.cast("B")))
    return np.asarray(mv).__array_interface__["data"][0]


@pytest.mark.parametrize("buffer", builtin_buffers + numpy_arrays)
def test_host_attributes_equal_memoryview(buffer):
    arr = Array(buffer)
    mv = memoryview(buffer)
    assert arr.cuda is False
    assert arr.readonly == mv.readonly
    assert arr.obj is mv.obj
    assert arr.itemsize == mv.itemsize
    assert arr.ndim == mv.ndim
    assert arr.shape == mv.shape
    assert arr.strides == mv.strides
    assert arr.nbytes == mv.nbytes
    assert arr.c_contiguous == mv.c_contiguous
    assert arr.f_contiguous == mv.f_contiguous
    assert arr.contiguous == mv.contiguous


@pytest.mark.parametrize("buffer", builtin_buffers + numpy_arrays)
def test_host_ptr_is_the_buffer_address(buffer):
    arr = Array(buffer)
    # CPython hands out non-null pointers even for empty objects; UCX-Py's tests rely on it.
    assert arr.ptr != 0
    mv = memoryview(buffer)
    if mv.nbytes:
        assert arr.ptr == _address(mv)


@pytest.mark.parametrize("arr", numpy_arrays)
def test_numpy_flags_and_pointer(arr):
    a = Array(arr)
    assert a.ptr == arr.__array_interface__["data"][0]
    assert a.shape == arr.shape
    assert a.strides == arr.strides
    assert a.nbytes == arr.nbytes
    assert a.c_contiguous == arr.flags.c_contiguous
    assert a.f_contiguous == arr.flags.f_contiguous
    assert a.contiguous == (arr.flags.c_contiguous or arr.flags.f_contiguous)
    assert a.readonly == (not arr.flags.writeable)


def test_slices_point_into_their_base():
    base = np.arange(100, dtype="u1")
    assert Array(base[10:]).ptr == Array(base).ptr + 10
    assert Array(memoryview(base)[::-1]).ptr == Array(base).ptr + 99
    # The exporter is the base array, as memoryview reports it.
    assert Array(memoryview(base)[10:]).obj is base


def test_no_copy_is_made():
    buf = bytearray(b"\0" * 8)
    arr = Array(buf)
    ctypes.memmove(arr.ptr, b"abcdefgh", 8)
    assert buf == b"abcdefgh"


def test_readonly_flags():
    assert Array(b"x").readonly is True
    assert Array(bytearray(b"x")).readonly is False
    assert Array(memoryview(bytearray(b"x")).toreadonly()).readonly is True


def test_non_buffer_objects_are_rejected():
    with pytest.raises(TypeError):
        Array(5)
    with pytest.raises(TypeError):
        Array("a str is not a buffer")
    with pytest.raises(TypeError):
        Array([1, 2, 3])


def test_attributes_are_read_only():
    arr = Array(b"abc")
    for name in ["ptr", "readonly", "obj", "itemsize", "ndim", "shape", "strides", "cuda", "nbytes"]:
        with pytest.raises(AttributeError):
            setattr(arr, name, 1)


def test_not_picklable():
    with pytest.raises(TypeError):
        pickle.dumps(Array(b"abc"))


def test_asarray():
    arr = Array(b"abc")
    assert asarray(arr) is arr
    other = asarray(bytearray(b"abc"))
    assert isinstance(other, Array)
    assert other.nbytes == 3


class FakeCudaArray:
    """An input that only exposes `__cuda_array_interface__` (the pointer is never dereferenced)."""

    def __init__(self, **iface):
        self.__cuda_array_interface__ = {"version": 3, "strides": None, **iface}


def test_cuda_c_contiguous_without_strides():
    obj = FakeCudaArray(shape=(2, 3), typestr="<f4", data=(0x7F0000001000, False))
    arr = Array(obj)
    assert arr.cuda is True
    assert arr.obj is obj
    assert arr.ptr == 0x7F0000001000
    assert arr.readonly is False
    assert arr.itemsize == 4
    assert arr.ndim == 2
    assert arr.shape == (2, 3)
    assert arr.strides == (12, 4)
    assert arr.nbytes == 24
    assert (arr.c_contiguous, arr.f_contiguous, arr.contiguous) == (True, False, True)


def test_cuda_strided_layouts():
    f_order = Array(FakeCudaArray(shape=(2, 3), typestr="<f8", data=(4096, True), strides=(8, 16)))
    assert f_order.readonly is True
    assert f_order.strides == (8, 16)
    assert (f_order.c_contiguous, f_order.f_contiguous, f_order.contiguous) == (False, True, True)
    gappy = Array(FakeCudaArray(shape=(2, 3), typestr="<f8", data=(4096, False), strides=(48, 16)))
    assert (gappy.c_contiguous, gappy.f_contiguous, gappy.contiguous) == (False, False, False)
    assert gappy.nbytes == 48


@pytest.mark.parametrize("arr", numpy_arrays)
def test_cuda_interface_agrees_with_numpy(arr):
    # Feed numpy's own description through the CUDA path and compare with numpy's flags.
    iface = arr.__array_interface__
    obj = FakeCudaArray(shape=iface["shape"], typestr=iface["typestr"], data=iface["data"], strides=iface["strides"])
    a = Array(obj)
    assert a.cuda
    assert a.ptr == iface["data"][0]
    assert a.readonly == iface["data"][1]
    assert a.itemsize == arr.itemsize
    assert a.shape == arr.shape
    assert a.strides == arr.strides
    assert a.nbytes == arr.nbytes
    assert a.c_contiguous == arr.flags.c_contiguous
    assert a.f_contiguous == arr.flags.f_contiguous


@pytest.mark.parametrize("typestr, itemsize", [("|b1", 1), (">i2", 2), ("<c32", 32), ("<m8", 8), ("|V7", 7)])
def test_cuda_itemsize_from_typestr(typestr, itemsize):
    assert Array(FakeCudaArray(shape=(5,), typestr=typestr, data=(1, False))).itemsize == itemsize


def test_cuda_zero_dim():
    arr = Array(FakeCudaArray(shape=(), typestr="<i8", data=(64, False)))
    assert (arr.ndim, arr.shape, arr.strides, arr.nbytes) == (0, (), (), 8)
    assert arr.contiguous


def test_cuda_errors():
    with pytest.raises(NotImplementedError, match="mask attribute not supported"):
        Array(FakeCudaArray(shape=(2,), typestr="<f4", data=(1, False), mask=object()))
    with pytest.raises(ValueError, match="Expected `str`, but got `None`"):
        Array(FakeCudaArray(shape=(2,), typestr=None, data=(1, False)))
    with pytest.raises(ValueError, match="Got unexpected empty `str`"):
        Array(FakeCudaArray(shape=(2,), typestr="", data=(1, False)))
    with pytest.raises(ValueError, match="The length of shape and strides must be equal"):
        Array(FakeCudaArray(shape=(2, 3), typestr="<f4", data=(1, False), strides=(4,)))
    with pytest.raises(TypeError):
        Array(FakeCudaArray(shape=[2, 3], typestr="<f4", data=(1, False)))


def test_none_cuda_interface_means_host():
    class HostWithNoneInterface(bytearray):
        __cuda_array_interface__ = None

    buf = HostWithNoneInterface(b"abc")
    arr = Array(buf)
    assert arr.cuda is False
    assert arr.nbytes == 3
    assert arr.obj is buf
