"""`Array`: a zero-copy description (address, size, shape, strides, memory type) of a host
buffer or a CUDA array, as UCX-Py's `ucp._libs.arr.Array`.

Transfers only need `ptr` and `nbytes`; the other properties let callers check contiguity
and writability before handing memory to UCX. Host objects are read through the buffer
protocol (`memoryview`), CUDA objects through `__cuda_array_interface__`; nothing is copied.
"""
import ctypes
import operator

__all__ = ["Array", "DeviceBytes", "asarray", "byte_view"]


class _PyBuffer(ctypes.Structure):
    # CPython's Py_buffer (part of the stable ABI since 3.11, unchanged before).
    _fields_ = [
        ("buf", ctypes.c_void_p),
        ("obj", ctypes.c_void_p),
        ("len", ctypes.c_ssize_t),
        ("itemsize", ctypes.c_ssize_t),
        ("readonly", ctypes.c_int),
        ("ndim", ctypes.c_int),
        ("format", ctypes.c_char_p),
        ("shape", ctypes.c_void_p),
        ("strides", ctypes.c_void_p),
        ("suboffsets", ctypes.c_void_p),
        ("internal", ctypes.c_void_p),
    ]


# Prototypes taking the Py_buffer by address (c_void_p) are about twice as fast to call as
# ctypes.pythonapi attributes with byref(); PYFUNCTYPE keeps the GIL held, as the C API needs.
_PyObject_GetBuffer = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_void_p, ctypes.c_int)(
    ("PyObject_GetBuffer", ctypes.pythonapi)
)
_PyBuffer_Release = ctypes.PYFUNCTYPE(None, ctypes.c_void_p)(("PyBuffer_Release", ctypes.pythonapi))
# PyBUF_FULL_RO: accepts any layout (strided, read-only) that a memoryview can describe.
_PyBUF_FULL_RO = 0x0100 | 0x0010 | 0x0008 | 0x0004


def _buffer_address(mv):
    """Address of the first byte of `mv`, exactly what the exporter put in Py_buffer.buf.

    numpy or ctypes views would need a writable or contiguous buffer; asking the memoryview
    for its Py_buffer works for every layout and keeps the non-null pointer CPython gives
    even to empty objects.
    """
    view = _PyBuffer()
    address = ctypes.addressof(view)
    # No writability or contiguity is asked for, so a (live) memoryview always grants this.
    _PyObject_GetBuffer(mv, address, _PyBUF_FULL_RO)
    ptr = view.buf or 0
    _PyBuffer_Release(address)
    return ptr


# Item sizes of the common CAI typestrs, so that CUDA arrays need numpy only for exotic ones.
_ITEMSIZES = {
    "|b1": 1,
    "|i1": 1,
    "|u1": 1,
    **{f"{order}{kind}{size}": size for order in "<>" for kind in "iuf" for size in (2, 4, 8)},
    "<f16": 16,
    ">f16": 16,
    **{f"{order}c{size}": size for order in "<>" for size in (8, 16, 32)},
}


def _c_strides(itemsize, shape):
    strides = []
    s = itemsize
    for n in reversed(shape):
        strides.append(s)
        s *= n
    return tuple(reversed(strides))


def _is_contiguous(itemsize, shape, strides, order):
    """CPython's rule (PyBuffer_IsContiguous): empty arrays are contiguous and the strides of
    dimensions of length 1 do not matter; this is also how numpy sets its flags."""
    if 0 in shape:
        return True
    dims = range(len(shape) - 1, -1, -1) if order == "C" else range(len(shape))
    expected = itemsize
    for i in dims:
        if shape[i] > 1 and strides[i] != expected:
            return False
        expected *= shape[i]
    return True


class Array:
    """An efficient wrapper for host and device array-like objects.

    Parameters
    ----------
    obj: object exposing the buffer protocol or ``__cuda_array_interface__``
        A host or device array-like object.
    """

    __slots__ = ("_ptr", "_readonly", "_obj", "_mv", "_itemsize", "_ndim", "_shape", "_strides", "_cuda", "_nbytes")

    def __init__(self, obj):
        iface = getattr(obj, "__cuda_array_interface__", None)
        if iface is not None:
            self._init_cuda(obj, iface)
        else:
            self._init_host(obj)
        nbytes = self._itemsize
        for n in self._shape:
            nbytes *= n
        self._nbytes = nbytes

    def _init_host(self, obj):
        mv = memoryview(obj)
        if mv.suboffsets:
            raise NotImplementedError("Suboffsets are not supported")
        self._cuda = False
        # Kept: the low-level transfers hand exactly this memory to UCX.
        self._mv = mv
        self._ptr = _buffer_address(mv)
        self._obj = mv.obj
        self._readonly = mv.readonly
        self._itemsize = mv.itemsize
        self._ndim = mv.ndim
        self._shape = mv.shape
        self._strides = mv.strides

    def _init_cuda(self, obj, iface):
        if not isinstance(iface, dict):
            raise TypeError(f"Expected dict, got {type(iface).__name__}")
        if iface.get("mask") is not None:
            raise NotImplementedError("mask attribute not supported")
        self._cuda = True
        self._obj = obj

        data = iface["data"]
        if not isinstance(data, tuple):
            raise TypeError(f"Expected tuple, got {type(data).__name__}")
        ptr, readonly = data
        ptr = operator.index(ptr)
        if not 0 <= ptr < 2**64:
            raise OverflowError(f"CUDA array pointer out of range: {ptr}")
        self._ptr = ptr
        self._readonly = bool(readonly)

        typestr = iface["typestr"]
        if typestr is None:
            raise ValueError("Expected `str`, but got `None`")
        if not isinstance(typestr, str):
            raise TypeError(f"Expected str, got {type(typestr).__name__}")
        if typestr == "":
            raise ValueError("Got unexpected empty `str`")
        itemsize = _ITEMSIZES.get(typestr)
        if itemsize is None:
            try:
                import numpy
            except ImportError:
                raise ValueError(
                    f"Unexpected data type, '{typestr}'. Please install NumPy to handle this format."
                ) from None
            itemsize = numpy.dtype(typestr).itemsize
        self._itemsize = itemsize

        shape = iface["shape"]
        if not isinstance(shape, tuple):
            raise TypeError(f"Expected tuple, got {type(shape).__name__}")
        shape = tuple(operator.index(n) for n in shape)
        strides = iface.get("strides")
        if strides is None:
            # The CAI leaves out strides for C-contiguous arrays.
            strides = _c_strides(itemsize, shape)
        else:
            if not isinstance(strides, tuple):
                raise TypeError(f"Expected tuple, got {type(strides).__name__}")
            if len(strides) != len(shape):
                raise ValueError("The length of shape and strides must be equal")
            strides = tuple(operator.index(s) for s in strides)
        self._ndim = len(shape)
        self._shape = shape
        self._strides = strides

    def __reduce__(self):
        # It holds a raw address, meaningless in another process.
        raise TypeError(f"cannot pickle {type(self).__name__!r} object")

    def __reduce_ex__(self, protocol):
        return self.__reduce__()

    def __repr__(self):
        kind = "cuda" if self._cuda else "host"
        return (
            f"<{type(self).__name__} {kind} ptr={self._ptr:#x} nbytes={self._nbytes} "
            f"shape={self._shape} obj={type(self._obj).__name__}>"
        )

    @property
    def ptr(self):
        """Address of the first element (int)."""
        return self._ptr

    @property
    def readonly(self):
        return self._readonly

    @property
    def obj(self):
        """The exporting object (for host buffers, `memoryview(obj).obj`)."""
        return self._obj

    @property
    def itemsize(self):
        return self._itemsize

    @property
    def ndim(self):
        return self._ndim

    @property
    def shape(self):
        return self._shape

    @property
    def strides(self):
        return self._strides

    @property
    def cuda(self):
        """True for objects exposing ``__cuda_array_interface__``."""
        return self._cuda

    @property
    def nbytes(self):
        return self._nbytes

    @property
    def c_contiguous(self):
        return _is_contiguous(self._itemsize, self._shape, self._strides, "C")

    @property
    def f_contiguous(self):
        return _is_contiguous(self._itemsize, self._shape, self._strides, "F")

    @property
    def contiguous(self):
        return self.c_contiguous or self.f_contiguous


def asarray(obj):
    """Coerce `obj` to an `Array`; an existing `Array` is returned as is."""
    if isinstance(obj, Array):
        return obj
    return Array(obj)


class DeviceBytes:
    """Bytes of a CUDA array as a CUDA array of their own (``|u1``, one dimension), keeping
    the array alive: what a message split into chunks sends from and receives into. A slice
    (step 1) is another range of the same array; each range names the array's CAI ``stream``,
    so the consumer still waits for its producer."""

    __slots__ = ("_base", "_ptr", "_nbytes", "_readonly", "_stream")

    def __init__(self, base, ptr, nbytes, readonly, stream):
        self._base = base
        self._ptr = ptr
        self._nbytes = nbytes
        self._readonly = readonly
        self._stream = stream

    @property
    def __cuda_array_interface__(self):
        return {
            "shape": (self._nbytes,),
            "typestr": "|u1",
            "data": (self._ptr, self._readonly),
            "strides": None,
            "version": 3,
            "stream": self._stream,
        }

    @property
    def nbytes(self):
        return self._nbytes

    @property
    def readonly(self):
        return self._readonly

    def __len__(self):
        return self._nbytes

    def __getitem__(self, key):
        if not isinstance(key, slice):
            raise TypeError(f"DeviceBytes takes byte slices, not {type(key).__name__}")
        start, stop, step = key.indices(self._nbytes)
        if step != 1:
            raise ValueError("DeviceBytes slices must be contiguous (step 1)")
        n = max(stop - start, 0)
        return DeviceBytes(self._base, self._ptr + start, n, self._readonly, self._stream)

    def __repr__(self):
        return f"<DeviceBytes ptr={self._ptr:#x} nbytes={self._nbytes} of {type(self._base).__name__}>"


def byte_view(obj):
    """``obj``'s memory as bytes that can be sliced into chunks: a ``memoryview`` cast to
    bytes for host memory, a :class:`DeviceBytes` for a CUDA array (which must be C- or
    F-contiguous: one piece of memory). Both have ``nbytes``, ``readonly`` and byte slices."""
    arr = Array(obj)
    if not arr.cuda:
        return memoryview(obj).cast("B")
    if not arr.contiguous:
        raise ValueError("Array must be C or F contiguous")
    return DeviceBytes(obj, arr.ptr, arr.nbytes, arr.readonly, obj.__cuda_array_interface__.get("stream"))
