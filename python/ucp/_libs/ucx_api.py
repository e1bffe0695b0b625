"""UCX-Py's low-level API (``ucp._libs.ucx_api``) over the native extension.

Objects: ``UCXContext``, ``UCXWorker``, ``UCXEndpoint``, ``UCXListener``, ``UCXAddress``,
``UCXRequest``. Transfers: ``tag_send_nb``, ``tag_recv_nb``, ``stream_send_nb``,
``stream_recv_nb``, ``am_send_nbx``, ``am_recv_nb``. Each returns ``None`` when UCX finished
inline (and then does not call the callback), else a ``UCXRequest``; the callback is called as
``cb_func(request, exception, *cb_args, **cb_kwargs)`` (``am_recv_nb``: ``(obj, exception,
...)``) from within ``UCXWorker.progress()``. RMA: ``UCXContext.alloc``/``map`` give a
``UCXMemoryHandle`` whose ``PackedRemoteKey`` a peer unpacks into a ``UCXRkey``
(``UCXEndpoint.unpack_rkey``) for ``put_nb``/``get_nb`` (``put_nbi``/``get_nbi`` without a
callback), and ``RemoteMemory`` and the file-like ``UCXIO`` do the same over a bounded range of
the peer's memory.
"""
import enum
import io
import logging
import weakref

from .. import _ucx_async
from .arr import Array
from .exceptions import *  # noqa: F401,F403
from .exceptions import UCXError

logger = logging.getLogger("ucx")

get_ucx_version = _ucx_async.get_ucx_version


def get_current_options():
    """UCX's configuration from the environment, without initialising UCX (names without
    ``UCX_``)."""
    return _ucx_async.current_options()


class Feature(enum.IntEnum):
    """``UCP_FEATURE_*`` flags."""

    TAG = 1 << 0
    RMA = 1 << 1
    AMO32 = 1 << 2
    AMO64 = 1 << 3
    WAKEUP = 1 << 4
    STREAM = 1 << 5
    AM = 1 << 6


class AllocatorType(enum.IntEnum):
    """Memory types of active-message allocators."""

    HOST = 0
    CUDA = 1
    UNSUPPORTED = -1


class UCXObject:
    """Something with a native handle that ``close()`` releases once (UCX-Py's base class)."""

    def __init__(self):
        self._finalizer = None

    def close(self):
        if self._finalizer is not None:
            self._finalizer()

    @property
    def initialized(self):
        return self._finalizer is not None and self._finalizer.alive


class UCXContext(UCXObject):
    """A UCX context with ``config_dict`` (UCX options without ``UCX_``) and ``feature_flags``."""

    def __init__(
        self,
        config_dict={},
        feature_flags=(Feature.TAG, Feature.WAKEUP, Feature.STREAM, Feature.AM, Feature.RMA),
    ):
        super().__init__()
        bits = 0
        for f in feature_flags:
            bits |= int(f)
        self._native = _ucx_async.Context(dict(config_dict), bits)
        self._feature_flags = tuple(feature_flags)
        self._config = self._native.config()
        self._finalizer = weakref.finalize(self, lambda: None)

    def get_config(self):
        return self._config

    @property
    def handle(self):
        return self._native.handle

    def info(self):
        return self._native.info()

    @property
    def cuda_support(self):
        return self._native.cuda_support

    @property
    def feature_flags(self):
        return self._feature_flags

    def alloc(self, size):
        """``size`` bytes of host memory allocated and registered by UCX."""
        return UCXMemoryHandle.alloc(self, size)

    def map(self, mem):
        """Registers the memory of ``mem`` (anything with the buffer protocol)."""
        return UCXMemoryHandle.map(self, mem)

    def _require(self, feature):
        if not self._native.features & int(feature):
            raise ValueError(f"UCXContext must be created with `Feature.{feature.name}`")


class UCXWorker(UCXObject):
    """The context's worker (``UCS_THREAD_MODE_MULTI``)."""

    def __init__(self, context):
        super().__init__()
        self._context = context
        self._native = _ucx_async.Worker(context._native)
        self._finalizer = weakref.finalize(self, self._native.cancel_all)

    @property
    def handle(self):
        return self._native.handle

    @property
    def context(self):
        return self._context

    def progress(self):
        """Progresses until UCX has nothing more to do (at most one bounded batch of rounds);
        runs completion callbacks."""
        self._native.progress()

    def arm(self):
        return self._native.arm()

    def init_blocking_progress_mode(self):
        """The wakeup fd to wait on (readable after ``arm()`` returned True and events came)."""
        return self._native.efd()

    def fence(self):
        self._native.fence()

    def tag_probe(self, tag):
        return self._native.tag_probe(tag)

    def flush(self, cb_func, cb_args=None, cb_kwargs=None):
        return _submit_always(lambda on_done: self._native.flush(on_done), cb_func, cb_args, cb_kwargs, "flush")

    def get_address(self):
        return UCXAddress.from_worker(self)

    def info(self):
        return self._native.info()

    def cancel_inflight_messages(self):
        """How many operations endpoint failures canceled since the last call."""
        return self._native.cancel_inflight_messages()

    def register_am_allocator(self, allocator, allocator_type):
        if allocator_type not in (AllocatorType.HOST, AllocatorType.CUDA):
            raise UCXError("Allocator type not supported")
        self._native.register_am_allocator(allocator, int(allocator_type))

    def request_cancel(self, req):
        req.cancel()


class UCXAddress(bytes):
    """A worker address: the opaque bytes of ``ucp_worker_get_address``. It is ``bytes``, so it
    has the buffer protocol, hashes by value and pickles."""

    @classmethod
    def from_buffer(cls, buffer):
        """An address from anything with the buffer protocol (the bytes are copied)."""
        return cls(memoryview(buffer).tobytes())

    @classmethod
    def from_worker(cls, worker):
        """The address of a worker (a ``UCXWorker`` or a native worker)."""
        return cls(getattr(worker, "_native", worker).address())

    @property
    def address(self):
        """An id of the address bytes (UCX-Py gave their pointer)."""
        return id(self)

    @property
    def length(self):
        """Length in bytes."""
        return len(self)

    def __reduce__(self):
        return (UCXAddress.from_buffer, (bytes(self),))


class UCXEndpoint(UCXObject):
    """An endpoint; made with ``create``, ``create_from_worker_address`` or
    ``create_from_conn_request``."""

    def __init__(self, worker, native):
        super().__init__()
        self._worker = worker
        self._native = native
        self._finalizer = weakref.finalize(self, native.close)

    @classmethod
    def create(cls, worker, ip_address, port, endpoint_error_handling):
        native = worker._native.connect(ip_address, port, endpoint_error_handling)
        return cls(worker, native)

    @classmethod
    def create_from_worker_address(cls, worker, address, endpoint_error_handling):
        native = worker._native.connect_to_worker(bytes(address), endpoint_error_handling)
        return cls(worker, native)

    @classmethod
    def create_from_conn_request(cls, worker, conn_request, endpoint_error_handling):
        native = worker._native.accept(conn_request, endpoint_error_handling)
        return cls(worker, native)

    @property
    def worker(self):
        return self._worker

    @property
    def handle(self):
        return self._native.handle

    def info(self):
        return self._native.info()

    def is_alive(self):
        return self._native.is_alive()

    def raise_on_error(self):
        self._native.raise_on_error()

    def set_close_callback(self, cb):
        self._native.set_close_callback(cb)

    def am_probe(self):
        return self._native.am_probe()

    def flush(self, cb_func, cb_args=None, cb_kwargs=None):
        return _submit_always(lambda on_done: self._native.flush(on_done), cb_func, cb_args, cb_kwargs, "ep flush")

    def unpack_rkey(self, rkey):
        """A peer's ``PackedRemoteKey`` (or its bytes), unpacked for this endpoint."""
        return UCXRkey(self, rkey)


class UCXListener(UCXObject):
    """Listens on ``port`` (0: any) and calls ``cb_func(conn_request, *cb_args, **cb_kwargs)``
    from ``progress()`` for each client; pass ``conn_request`` to
    ``UCXEndpoint.create_from_conn_request``."""

    def __init__(self, worker, port, cb_func, cb_args=None, cb_kwargs=None, ip=None):
        super().__init__()
        args = tuple(cb_args or ())
        kwargs = dict(cb_kwargs or {})

        def on_conn(conn_request):
            try:
                cb_func(conn_request, *args, **kwargs)
            except Exception:  # UCX-Py logged these; there is no caller to raise to
                logger.exception("Listener callback raised")

        self._native = worker._native.listen(on_conn, port, ip)
        self._finalizer = weakref.finalize(self, self._native.close)

    @property
    def port(self):
        return self._native.port

    @property
    def ip(self):
        return self._native.ip

    @property
    def handle(self):
        return id(self._native)


class UCXRequest:
    """An operation in flight (UCX-Py's ``UCXRequest``)."""

    def __init__(self, native, name):
        self._native = native
        self._name = name

    @property
    def handle(self):
        return self._native.id

    def closed(self):
        return self._native.done()

    def close(self):
        """Nothing to free here: the engine releases the request when it finishes."""

    def cancel(self):
        self._native.cancel()

    @property
    def info(self):
        return {"status": "finished" if self.closed() else "pending", "name": self._name}

    def __hash__(self):
        return hash(self.handle)

    def __eq__(self, other):
        return isinstance(other, UCXRequest) and self.handle == other.handle

    def __repr__(self):
        return f"<UCXRequest {self._name} {self.info['status']}>"


def _submit(start, cb_func, cb_args, cb_kwargs, name=None):
    """Starts a transfer with a callback in UCX-Py's convention; returns None when it finished
    inline (the callback is then not called), else a UCXRequest."""
    args = tuple(cb_args or ())
    kwargs = dict(cb_kwargs or {})
    holder = []

    def on_done(value, exc):
        cb_func(holder[0] if holder else None, exc, *args, **kwargs)

    native = start(on_done)
    if native is None:
        return None
    req = UCXRequest(native, name)
    holder.append(req)
    return req


class _Finished:
    """The native side of a request that finished inline."""

    id = 0

    def done(self):
        return True

    def cancel(self):
        pass


def _submit_always(start, cb_func, cb_args, cb_kwargs, name):
    """As ``_submit``, but always returns a request and calls the callback, even when UCX
    finished inline (UCX-Py's flush behaved so; callers test the request, not None)."""
    req = _submit(start, cb_func, cb_args, cb_kwargs, name)
    if req is None:
        req = UCXRequest(_Finished(), name)
        cb_func(req, None, *tuple(cb_args or ()), **dict(cb_kwargs or {}))
    return req


def _memory(buffer, nbytes, writable=False):
    """What the native transfer takes for an ``Array`` (or any buffer) and ``nbytes``."""
    if not isinstance(buffer, Array):
        buffer = Array(buffer)
    if writable and buffer.readonly:
        raise ValueError("writing to readonly buffer!")
    if not buffer.contiguous:
        raise ValueError("Array must be C or F contiguous")
    if buffer.cuda:
        if nbytes != buffer.nbytes:
            raise ValueError("a CUDA buffer is sent whole (nbytes must equal its size)")
        return buffer.obj
    mv = buffer._mv
    if nbytes == mv.nbytes:
        return mv
    if nbytes > mv.nbytes:
        raise ValueError(f"nbytes ({nbytes}) is larger than the buffer ({mv.nbytes})")
    return mv.cast("B")[:nbytes]


def tag_send_nb(ep, buffer, nbytes, tag, cb_func, cb_args=None, cb_kwargs=None, name=None):
    ep.worker.context._require(Feature.TAG)
    ep.raise_on_error()
    mem = _memory(buffer, nbytes)
    name = name or "tag_send_nb"
    return _submit(lambda on_done: ep._native.tag_send(mem, tag, on_done, name), cb_func, cb_args, cb_kwargs, name)


def tag_recv_nb(worker, buffer, nbytes, tag, cb_func, tag_mask=-1, cb_args=None, cb_kwargs=None, name=None, ep=None):
    worker.context._require(Feature.TAG)
    mem = _memory(buffer, nbytes, writable=True)
    name = name or "tag_recv_nb"
    mask = tag_mask & 0xFFFF_FFFF_FFFF_FFFF
    native_ep = ep._native if ep is not None else None
    return _submit(
        lambda on_done: worker._native.tag_recv(mem, tag, mask, on_done, native_ep, name),
        cb_func,
        cb_args,
        cb_kwargs,
        name,
    )


def stream_send_nb(ep, buffer, nbytes, cb_func, cb_args=None, cb_kwargs=None, name=None):
    ep.worker.context._require(Feature.STREAM)
    mem = _memory(buffer, nbytes)
    name = name or "stream_send_nb"
    return _submit(lambda on_done: ep._native.stream_send(mem, on_done, name), cb_func, cb_args, cb_kwargs, name)


def stream_recv_nb(ep, buffer, nbytes, cb_func, cb_args=None, cb_kwargs=None, name=None):
    ep.worker.context._require(Feature.STREAM)
    mem = _memory(buffer, nbytes, writable=True)
    name = name or "stream_recv_nb"
    return _submit(lambda on_done: ep._native.stream_recv(mem, on_done, name), cb_func, cb_args, cb_kwargs, name)


def am_send_nbx(ep, buffer, nbytes, cb_func, cb_args=None, cb_kwargs=None, name=None):
    ep.worker.context._require(Feature.AM)
    mem = _memory(buffer, nbytes)
    name = name or "am_send_nbx"
    return _submit(lambda on_done: ep._native.am_send(mem, on_done, name), cb_func, cb_args, cb_kwargs, name)


def am_recv_nb(ep, cb_func, cb_args=None, cb_kwargs=None, name="am_recv_nb"):
    """Calls ``cb_func(obj, exception, *cb_args, **cb_kwargs)`` with the next active message
    from ``ep``'s peer (at once if one is queued). Returns None."""
    ep.worker.context._require(Feature.AM)
    args = tuple(cb_args or ())
    kwargs = dict(cb_kwargs or {})
    ep._native.am_recv(lambda obj, exc: cb_func(obj, exc, *args, **kwargs))
    return None


# --- remote memory access -------------------------------------------------------------


class UCXMemoryHandle(UCXObject):
    """Memory registered with UCX: allocated by it (``alloc``) or a buffer's (``map``)."""

    def __init__(self, context, native):
        super().__init__()
        self._context = context
        self._native = native
        self._finalizer = weakref.finalize(self, lambda: None)

    @classmethod
    def alloc(cls, ctx, size):
        return cls(ctx, _ucx_async.MemoryHandle.alloc(ctx._native, size))

    @classmethod
    def map(cls, ctx, mem):
        return cls(ctx, _ucx_async.MemoryHandle.map(ctx._native, mem))

    def pack_rkey(self):
        return PackedRemoteKey.from_mem_handle(self)

    @property
    def mem_handle(self):
        return self._native

    @property
    def address(self):
        return self._native.address

    @property
    def length(self):
        return self._native.length


class PackedRemoteKey(bytes):
    """A packed remote key: bytes to send to a peer (buffer protocol, hashable, picklable)."""

    @classmethod
    def from_buffer(cls, buffer):
        return cls(memoryview(buffer).tobytes())

    @classmethod
    def from_mem_handle(cls, mem):
        return cls(mem._native.pack_rkey())

    @property
    def key(self):
        return id(self)

    @property
    def length(self):
        return len(self)

    def __reduce__(self):
        return (PackedRemoteKey.from_buffer, (bytes(self),))


class UCXRkey(UCXObject):
    """A peer's remote key unpacked on endpoint ``ep``."""

    def __init__(self, ep, rkey):
        super().__init__()
        self._ep = ep
        self._native = ep._native.unpack_rkey(bytes(rkey))
        self._finalizer = weakref.finalize(self, lambda: None)

    @property
    def ep(self):
        return self._ep


def _check_rma(ep):
    ep.worker.context._require(Feature.RMA)


def put_nb(buffer, nbytes, remote_addr, rkey, cb_func, cb_args=None, cb_kwargs=None, name=None):
    _check_rma(rkey.ep)
    mem = _memory(buffer, nbytes)
    name = name or "put_nb"
    native = rkey.ep._native
    return _submit(lambda on_done: native.put(mem, remote_addr, rkey._native, on_done), cb_func, cb_args, cb_kwargs, name)


def get_nb(buffer, nbytes, remote_addr, rkey, cb_func, cb_args=None, cb_kwargs=None, name=None):
    _check_rma(rkey.ep)
    mem = _memory(buffer, nbytes, writable=True)
    name = name or "get_nb"
    native = rkey.ep._native
    return _submit(lambda on_done: native.get(mem, remote_addr, rkey._native, on_done), cb_func, cb_args, cb_kwargs, name)


def _ignore(request, exception):
    if exception is not None:
        logger.error("implicit RMA operation failed: %s", exception)


def put_nbi(buffer, nbytes, remote_addr, rkey, name=None):
    """Starts a put; True if it finished at once, else a flush of the endpoint completes it."""
    return put_nb(buffer, nbytes, remote_addr, rkey, _ignore, name=name) is None


def get_nbi(buffer, nbytes, remote_addr, rkey, name=None):
    """Starts a get; True if it finished at once, else a flush of the endpoint completes it."""
    return get_nb(buffer, nbytes, remote_addr, rkey, _ignore, name=name) is None


class RemoteMemory:
    """``length`` bytes of a peer's memory at ``base``, reached through ``rkey``."""

    def __init__(self, rkey, base, length):
        self._rkey = rkey
        self._base = base
        self._length = length

    def _range(self, memory, offset, size):
        mem = Array(memory)
        if size == 0:
            size = mem.nbytes
        if offset < 0 or size < 0 or offset + size > self._length:
            raise IndexError("Out of bounds in UCX RMA interface")
        return mem, self._base + offset, size

    def put_nb(self, memory, cb_func, cb_args=None, cb_kwargs=None, offset=0, size=0):
        mem, addr, size = self._range(memory, offset, size)
        return put_nb(mem, size, addr, self._rkey, cb_func, cb_args, cb_kwargs)

    def get_nb(self, memory, cb_func, cb_args=None, cb_kwargs=None, offset=0, size=0):
        mem, addr, size = self._range(memory, offset, size)
        return get_nb(mem, size, addr, self._rkey, cb_func, cb_args, cb_kwargs)

    def put_nbi(self, memory, size=0, offset=0):
        mem, addr, size = self._range(memory, offset, size)
        return put_nbi(mem, size, addr, self._rkey)

    def get_nbi(self, memory, size=0, offset=0):
        mem, addr, size = self._range(memory, offset, size)
        return get_nbi(mem, size, addr, self._rkey)


class UCXIO(io.RawIOBase):
    """A file over ``length`` bytes of a peer's memory at ``dest``: reads are gets, writes are
    puts (flushed), each progressing the worker until done. Seeks are clamped to the range."""

    def __init__(self, dest, length, rkey):
        super().__init__()
        self._remote = RemoteMemory(rkey, dest, length)
        self._length = length
        self._pos = 0
        self._worker = rkey.ep.worker
        self._ep = rkey.ep

    def readable(self):
        return True

    def writable(self):
        return True

    def seekable(self):
        return True

    def _wait(self, start):
        done = [False]

        def cb(request, exception):
            if exception is not None:
                raise exception
            done[0] = True

        if start(cb) is not None:
            while not done[0]:
                self._worker.progress()

    def readinto(self, buff):
        data = memoryview(buff).cast("B")
        size = min(len(data), self._length - self._pos)
        if size <= 0:
            return 0
        self._wait(lambda cb: self._remote.get_nb(data[:size], cb, offset=self._pos, size=size))
        self._pos += size
        return size

    def write(self, buff):
        data = memoryview(buff).cast("B")
        size = min(len(data), self._length - self._pos)
        if size <= 0:
            return 0
        self._wait(lambda cb: self._remote.put_nb(data[:size], cb, offset=self._pos, size=size))
        self.flush()
        self._pos += size
        return size

    def flush(self):
        if getattr(self, "_ep", None) is not None:
            done = [False]
            self._ep.flush(lambda request, exception: done.__setitem__(0, True))
            while not done[0]:
                self._worker.progress()

    def seek(self, pos, whence=io.SEEK_SET):
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._length}[whence]
        self._pos = max(0, min(base + pos, self._length))
        return self._pos

    def tell(self):
        return self._pos
