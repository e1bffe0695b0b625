"""UCX-Py's high-level API: ``ApplicationContext``, ``Endpoint``, ``Listener``, the peer-info
handshake, the control message, and the module functions that use a lazily created global
context.

The wire protocol is UCX-Py's (``ucp-compat.md`` §2), bit for bit; listeners can speak UCXX's
handshake instead, and ``create_endpoint`` detects which one a listener speaks. Every transfer
is one call into the native extension, which returns ``None`` when UCX finished it inline and
an asyncio future otherwise.
"""
import array
import asyncio
import contextlib
import gc
import logging
import os
import re
import socket
import struct
import weakref
from functools import partial  # noqa: F401  (UCX-Py's namespace had it)

from . import _ucx_async
from ._libs import ucx_api
from ._libs.arr import Array
from ._libs.exceptions import (
    UCXBaseException,
    UCXCanceled,
    UCXEndpointClosed,
    UCXError,
    UCXPeerFailure,
)
from .continuous_ucx_progress import BlockingMode, NonBlockingMode, others_ready, spin_us
from .utils import get_event_loop, hash64bits, interface_of

logger = logging.getLogger("ucx")

# The global application context, created by the first API call that needs it.
_ctx = None

# Peer-info layouts (native byte order, as UCX-Py packed them).
_PEER_INFO_UCXPY = struct.Struct("QQQ")  # msg_tag, ctrl_tag, hash64bits(msg_tag, ctrl_tag)
_PEER_INFO_UCXX = struct.Struct("QQ")  # msg_tag, hash64bits(msg_tag)

WIRE_PROTOCOLS = ("ucx-py", "ucxx")

def default_max_message_size():
    """The largest message ``recv_obj`` and ``recv_multi`` accept by default: the
    ``UCXPY_MAX_MESSAGE_SIZE`` environment variable (bytes), else this machine's physical
    memory. The size comes from the peer, which could otherwise make us allocate without bound."""
    value = os.environ.get("UCXPY_MAX_MESSAGE_SIZE")
    if value is not None:
        try:
            size = int(value)
            if size < 0:
                raise ValueError
        except ValueError:
            raise ValueError(f"UCXPY_MAX_MESSAGE_SIZE must be a number of bytes >= 0, not {value!r}") from None
        return size
    return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


# The most frames `recv_multi` accepts in one message (Dask sends tens to thousands).
_MAX_FRAMES = 1_000_000


def _refuse(ep, why):
    """Refuses what the peer announced: aborts the endpoint (the refused message's data would
    otherwise be read as the next message) and raises ``UCXError`` saying ``why``."""
    ep.abort()
    raise UCXError(f"{why}; the endpoint was closed")


def _check_message_size(ep, what, nbytes, max_size):
    """Refuses a message above ``max_size``."""
    if max_size is None:
        max_size = default_max_message_size()
    if nbytes > max_size:
        _refuse(ep, f"{what}: the peer announced {nbytes} bytes, more than the maximum of {max_size}")


# Loop iterations a connecting client yields after the handshake (see create_endpoint).
_HANDSHAKE_YIELDS = 3


def _default_wire_protocol():
    value = os.environ.get("UCXPY_WIRE_PROTOCOL", "ucx-py")
    if value not in WIRE_PROTOCOLS:
        raise ValueError(f"UCXPY_WIRE_PROTOCOL must be one of {WIRE_PROTOCOLS}, not {value!r}")
    return value


async def _await(fut, timeout=None):
    """Awaits an operation's future (``None`` means it finished inline)."""
    if fut is None:
        return True
    if timeout is None:
        return await fut
    return await asyncio.wait_for(fut, timeout=timeout)


async def exchange_peer_info(endpoint, msg_tag, ctrl_tag, listener, connect_timeout=5.0, wire_protocol=None):
    """Exchanges tags with the peer over the stream API and returns the peer's
    ``{"msg_tag", "ctrl_tag"}`` (``ctrl_tag`` is ``None`` for a UCXX peer).

    The listener sends first. A listener speaks ``wire_protocol`` (UCX-Py's by default); a
    client reads 16 bytes and tells UCXX's 16-byte message from UCX-Py's 24-byte one by its
    checksum, then answers in the same format.
    """
    if wire_protocol is None:
        wire_protocol = "ucx-py"
    if listener:
        if wire_protocol == "ucxx":
            mine = _PEER_INFO_UCXX.pack(msg_tag, hash64bits(msg_tag))
        else:
            mine = _PEER_INFO_UCXPY.pack(msg_tag, ctrl_tag, hash64bits(msg_tag, ctrl_tag))
        await _await(endpoint.stream_send(mine, name="peer info send"), connect_timeout)
        peer = bytearray(len(mine))
        await _await(endpoint.stream_recv(peer, name="peer info recv"), connect_timeout)
        return _check_peer_info(peer, wire_protocol)

    head = bytearray(_PEER_INFO_UCXX.size)
    await _await(endpoint.stream_recv(head, name="peer info recv"), connect_timeout)
    peer_msg_tag, second = _PEER_INFO_UCXX.unpack(head)
    if second == hash64bits(peer_msg_tag):
        flavour = "ucxx"
        peer = head
        mine = _PEER_INFO_UCXX.pack(msg_tag, hash64bits(msg_tag))
    else:
        flavour = "ucx-py"
        rest = bytearray(_PEER_INFO_UCXPY.size - _PEER_INFO_UCXX.size)
        await _await(endpoint.stream_recv(rest, name="peer info recv"), connect_timeout)
        peer = head + rest
        mine = _PEER_INFO_UCXPY.pack(msg_tag, ctrl_tag, hash64bits(msg_tag, ctrl_tag))
    await _await(endpoint.stream_send(mine, name="peer info send"), connect_timeout)
    return _check_peer_info(peer, flavour)


def _check_peer_info(peer, flavour):
    if flavour == "ucxx":
        peer_msg_tag, checksum = _PEER_INFO_UCXX.unpack(peer)
        expected = hash64bits(peer_msg_tag)
        peer_ctrl_tag = None
    else:
        peer_msg_tag, peer_ctrl_tag, checksum = _PEER_INFO_UCXPY.unpack(peer)
        expected = hash64bits(peer_msg_tag, peer_ctrl_tag)
    if expected != checksum:
        raise RuntimeError(f"Checksum invalid! {hex(expected)} != {hex(checksum)}")
    return {"msg_tag": peer_msg_tag, "ctrl_tag": peer_ctrl_tag}


def _new_tags(ep_handle):
    seed = os.urandom(16)
    return hash64bits("msg_tag", seed, ep_handle), hash64bits("ctrl_tag", seed, ep_handle)


def _tag_map(msg_tag, ctrl_tag, peer_info):
    return {
        "msg_send": peer_info["msg_tag"],
        "msg_recv": msg_tag,
        "ctrl_send": peer_info["ctrl_tag"],
        "ctrl_recv": ctrl_tag if peer_info["ctrl_tag"] is not None else None,
    }


class CtrlMsg:
    """UCX-Py's control message: ``(opcode, close_after_n_recv)`` as two native u64s, sent on
    the peer's control tag. Opcode 1 means "shut down after you have received N messages"."""

    fmt = "QQ"
    nbytes = struct.calcsize(fmt)

    @staticmethod
    def serialize(opcode, close_after_n_recv):
        return struct.pack(CtrlMsg.fmt, int(opcode), int(close_after_n_recv))

    @staticmethod
    def deserialize(serialized_bytes):
        return struct.unpack(CtrlMsg.fmt, serialized_bytes)

    @staticmethod
    def handle_ctrl_msg(ep_weakref, log, msg, fut):
        """Acts on a received control message (a done-callback of the control receive, so it
        runs after the tasks that the same progress pass woke, as in UCX-Py)."""
        if fut.cancelled() or fut.exception() is not None:
            # Canceled when the endpoint closed; nothing to do.
            logger.debug("%s ended: %r", log, None if fut.cancelled() else fut.exception())
            return
        ep = ep_weakref()
        if ep is None or ep.closed():
            if ep is not None:
                ep.abort()
            return
        opcode, close_after_n_recv = CtrlMsg.deserialize(msg)
        if opcode == 1:
            ep.close_after_n_recv(close_after_n_recv, count_from_ep_creation=True)
        else:
            logger.error("Received unknown control opcode: %s", opcode)

    @staticmethod
    def setup_ctrl_recv(ep):
        """Posts the receive for the peer's control message."""
        msg = bytearray(CtrlMsg.nbytes)
        log = "[Recv shutdown] ep: %s, tag: %s" % (hex(ep.uid), hex(ep._tags["ctrl_recv"]))
        fut = ep._ep.tag_recv(msg, ep._tags["ctrl_recv"], name=log)
        if fut is None:  # the message was already there
            fut = get_event_loop().create_future()
            fut.set_result(True)
        fut.add_done_callback(partial(CtrlMsg.handle_ctrl_msg, weakref.ref(ep), log, msg))


async def _listener_handler_coroutine(conn_request, ctx, func, endpoint_error_handling, wire_protocol):
    # Failures before the user's callback runs (a client that went away, a handshake timeout)
    # are logged, never left as "Task exception was never retrieved".
    try:
        ucx_ep = ctx.worker.accept(conn_request, endpoint_error_handling)
    except UCXBaseException as e:
        logger.warning("Accepting a connection failed: %s", str(e))
        return
    msg_tag, ctrl_tag = _new_tags(ucx_ep.handle)
    try:
        peer_info = await exchange_peer_info(
            ucx_ep,
            msg_tag,
            ctrl_tag,
            listener=True,
            connect_timeout=ctx.connect_timeout,
            wire_protocol=wire_protocol,
        )
    except (UCXBaseException, RuntimeError, asyncio.TimeoutError, asyncio.CancelledError) as e:
        # Formatted now: a record holding the exception would keep its frames (and the
        # context) alive in any handler that stores records.
        logger.warning("Handshake with a connecting client failed: %s", repr(e))
        ucx_ep.close()
        return
    ep = Endpoint(endpoint=ucx_ep, ctx=ctx, tags=_tag_map(msg_tag, ctrl_tag, peer_info))
    logger.debug("_listener_handler() server: %s, msg-tag-send: %s", hex(ep.uid), hex(ep._tags["msg_send"]))
    if ep._tags["ctrl_recv"] is not None:
        CtrlMsg.setup_ctrl_recv(ep)
    # The endpoint holds the context until it is closed; this frame must not hold it longer
    # (UCX-Py's tests reset() while a handler that closed its endpoint takes its last step).
    del ctx, ucx_ep
    if asyncio.iscoroutinefunction(func):
        await func(ep)
    else:
        func(ep)


def _listener_handler(conn_request, callback_func, ctx_ref, event_loop, endpoint_error_handling, wire_protocol):
    ctx = ctx_ref()
    if ctx is None:
        conn_request.reject()
        return
    coro = _listener_handler_coroutine(conn_request, ctx, callback_func, endpoint_error_handling, wire_protocol)
    if asyncio._get_running_loop() is event_loop:
        event_loop.create_task(coro)
    else:
        asyncio.run_coroutine_threadsafe(coro, event_loop)


class ApplicationContext:
    """The UCX context, its one worker, and the progress drivers of the event loops using it.

    ``blocking_progress_mode``: sleep on the wakeup fd (default) or poll; default from the
    environment (``UCXPY_NON_BLOCKING_MODE`` present means polling). ``connect_timeout``: the
    handshake's time limit in seconds (default ``UCXPY_CONNECT_TIMEOUT`` or 5).
    """

    def __init__(self, config_dict={}, blocking_progress_mode=None, connect_timeout=None):
        self.progress_tasks = []
        self.context = _ucx_async.Context(dict(config_dict))
        self.worker = _ucx_async.Worker(self.context)

        if blocking_progress_mode is not None:
            self.blocking_progress_mode = blocking_progress_mode
        else:
            self.blocking_progress_mode = "UCXPY_NON_BLOCKING_MODE" not in os.environ

        if connect_timeout is None:
            self.connect_timeout = float(os.environ.get("UCXPY_CONNECT_TIMEOUT", 5))
        else:
            self.connect_timeout = connect_timeout

        self.epoll_fd = self.worker.efd() if self.blocking_progress_mode else None
        weakref.finalize(self, _stop_progress, self.progress_tasks, self.worker)

        # Progress from the start, so messages can arrive before any endpoint exists (in a
        # running loop; otherwise from the first call made in one).
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            self.continuous_ucx_progress()
        logger.info(
            "UCX context created: UCX %s, %s progress mode",
            "%d.%d.%d" % _ucx_async.get_ucx_version(),
            "blocking" if self.blocking_progress_mode else "non-blocking",
        )

    def create_listener(self, callback_func, port=0, endpoint_error_handling=True, ip=None, wire_protocol=None):
        """Listens on ``port`` (0: any free port) of ``ip`` (default: every IPv4 address) and
        calls ``callback_func(endpoint)`` (a function or coroutine function) for each client
        once the handshake is done. ``wire_protocol``: ``"ucx-py"`` (default, or
        ``UCXPY_WIRE_PROTOCOL``) or ``"ucxx"``."""
        if wire_protocol is None:
            wire_protocol = _default_wire_protocol()
        if wire_protocol not in WIRE_PROTOCOLS:
            raise ValueError(f"wire_protocol must be one of {WIRE_PROTOCOLS}, not {wire_protocol!r}")
        self.continuous_ucx_progress()
        if port is None:
            port = 0
        loop = get_event_loop()
        handler = partial(
            _listener_handler,
            callback_func=callback_func,
            ctx_ref=weakref.ref(self),
            event_loop=loop,
            endpoint_error_handling=endpoint_error_handling,
            wire_protocol=wire_protocol,
        )
        return Listener(self.worker.listen(handler, port, ip), self)

    async def create_endpoint(self, ip_address, port, endpoint_error_handling=True):
        """Connects to a listener and does the handshake; returns an ``Endpoint``."""
        self.continuous_ucx_progress()
        ip = _resolve(ip_address)
        ucx_ep = self.worker.connect(ip, port, endpoint_error_handling)
        # Progress once at once: many simultaneous connects otherwise stall (UCX-Py PR #504).
        self.worker.progress()
        msg_tag, ctrl_tag = _new_tags(ucx_ep.handle)
        try:
            peer_info = await exchange_peer_info(
                ucx_ep, msg_tag, ctrl_tag, listener=False, connect_timeout=self.connect_timeout
            )
        except BaseException:
            try:
                ucx_ep.close()
            except UCXBaseException:  # the connection failed; the handshake error is the news
                pass
            raise
        # Our last handshake send usually finishes inline, where UCX-Py's went through a
        # future: yield a few loop iterations so that a listener in this process can finish
        # its side (and start its callback) before we return, as it could with UCX-Py.
        for _ in range(_HANDSHAKE_YIELDS):
            await asyncio.sleep(0)
        ep = Endpoint(endpoint=ucx_ep, ctx=self, tags=_tag_map(msg_tag, ctrl_tag, peer_info))
        logger.debug(
            "create_endpoint() client: %s, msg-tag-send: %s, msg-tag-recv: %s",
            hex(ep.uid),
            hex(ep._tags["msg_send"]),
            hex(ep._tags["msg_recv"]),
        )
        if ep._tags["ctrl_recv"] is not None:
            CtrlMsg.setup_ctrl_recv(ep)
        return ep

    async def create_endpoint_from_worker_address(self, address, endpoint_error_handling=True):
        """An endpoint to the worker at ``address`` (a ``UCXAddress`` or bytes); no handshake,
        so transfers must use ``force_tag=True``."""
        self.continuous_ucx_progress()
        ucx_ep = self.worker.connect_to_worker(bytes(address), endpoint_error_handling)
        self.worker.progress()
        return Endpoint(endpoint=ucx_ep, ctx=self, tags=None)

    def continuous_ucx_progress(self, event_loop=None):
        """Drives progress from ``event_loop`` (default: the current one), once per loop."""
        loop = event_loop if event_loop is not None else get_event_loop()
        for task in [t for t in self.progress_tasks if t.event_loop.is_closed()]:
            task.stop()
            self.progress_tasks.remove(task)
        if any(t.event_loop is loop for t in self.progress_tasks):
            return
        if self.blocking_progress_mode:
            task = BlockingMode(self.worker, loop, self.epoll_fd)
        else:
            task = NonBlockingMode(self.worker, loop)
        self.progress_tasks.append(task)

    def get_ucp_worker(self):
        return self.worker.handle

    def get_config(self):
        return self.context.config()

    def ucp_context_info(self):
        return self.context.info()

    def ucp_worker_info(self):
        return self.worker.info()

    def fence(self):
        self.worker.fence()

    async def flush(self):
        return await _await(self.worker.flush())

    def get_worker_address(self):
        return ucx_api.UCXAddress.from_worker(self.worker)

    def register_am_allocator(self, allocator, allocator_type):
        """Sets the callable (taking a size) that allocates received active messages of
        ``allocator_type`` ("host" or "cuda")."""
        types = {"host": ucx_api.AllocatorType.HOST, "cuda": ucx_api.AllocatorType.CUDA}
        if allocator_type not in types:
            raise UCXError("Allocator type not supported")
        self.worker.register_am_allocator(allocator, int(types[allocator_type]))

    async def recv(self, buffer, tag):
        """Receives on the worker (no endpoint) a message with exactly ``tag``."""
        return await _await(self.worker.tag_recv(buffer, tag))


def _stop_progress(progress_tasks, worker):
    for task in progress_tasks:
        try:
            task.stop()
        except Exception:  # a loop closed at interpreter exit
            pass
    progress_tasks.clear()
    worker.cancel_all()


def _resolve(host):
    """An IP address for ``host`` (IPv4 preferred, as UCX-Py's ``gethostbyname``)."""
    try:
        socket.inet_pton(socket.AF_INET, host)
        return host
    except OSError:
        pass
    try:
        socket.inet_pton(socket.AF_INET6, host)
        return host
    except OSError:
        pass
    infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    infos.sort(key=lambda i: i[0] != socket.AF_INET)
    return infos[0][4][0]


class Listener:
    """A listening socket; ``close()`` or garbage collection stops it (endpoints already made
    stay open)."""

    def __init__(self, backend, ctx=None):
        self._b = backend
        self._ctx = ctx

    def closed(self):
        return self._b.closed()

    @property
    def ip(self):
        """The address listened on (``0.0.0.0`` for every IPv4 address)."""
        return self._b.ip

    @property
    def port(self):
        return self._b.port

    def close(self):
        """Stops listening."""
        if self._b is not None:
            self._b.close()
            self._ctx = None


# The earlier name of ``UCXEndpointClosed`` (kept for code that imported it).
EndpointClosedError = UCXEndpointClosed


class Endpoint:
    """A connection to one peer: tag messages on per-endpoint tags, active messages, and the
    close protocol. Made by ``create_endpoint``, a listener, or
    ``create_endpoint_from_worker_address``."""

    def __init__(self, endpoint, ctx, tags=None):
        self._ep = endpoint
        self._uid = endpoint.handle
        self._ctx = ctx
        self._worker = ctx.worker
        self._send_count = 0
        self._recv_count = 0
        self._finished_recv_count = 0
        self._shutting_down_peer = False
        self._close_after_n_recv = None
        self._tags = tags

    @property
    def uid(self):
        """The UCX endpoint handle, as an int (valid after close too)."""
        return self._uid

    def closed(self):
        ep = self._ep
        return ep is None or not ep.initialized or not ep.is_alive()

    @property
    def alive(self):
        """Whether the endpoint is open and its peer has not failed (UCXX's ``alive``)."""
        return not self.closed()

    def abort(self):
        """Closes the endpoint at once without telling the peer: pending operations on it
        fail with ``UCXEndpointClosed``; the close callback runs."""
        ep, self._ep, self._ctx = self._ep, None, None
        if ep is not None:
            logger.debug("Endpoint.abort(): %s", hex(self.uid))
            # Let go of the context even when the close fails (and raises): a caller that
            # keeps the exception, and so this frame, must not keep the context in use.
            try:
                ep.close()
            finally:
                # Messages on this endpoint's own tags can no longer be received: drop them,
                # or a peer's unread sends stay in UCX's unexpected queue for good.
                for key in ("msg_recv", "ctrl_recv"):
                    tag = (self._tags or {}).get(key)
                    if tag is not None:
                        self._worker.purge_unexpected(tag)

    async def close(self):
        """Tells the peer to close after it has received everything sent so far, then closes."""
        if self.closed():
            self.abort()
            return
        if self._shutting_down_peer:
            return
        self._shutting_down_peer = True
        self._ep.begin_close()
        try:
            if self._tags is not None and self._tags.get("ctrl_send") is not None:
                log = "[Send shutdown] ep: %s, tag: %s, close_after_n_recv: %d" % (
                    hex(self.uid),
                    hex(self._tags["ctrl_send"]),
                    self._send_count,
                )
                logger.debug(log)
                msg = CtrlMsg.serialize(opcode=1, close_after_n_recv=self._send_count)
                await _await(self._ep.tag_send(msg, self._tags["ctrl_send"], name=log))
        except UCXError as e:
            logging.warning("UCX failed closing worker %s (probably already closed): %s" % (hex(self.uid), repr(e)))
        finally:
            if not self.closed():
                self._worker.progress()
                await asyncio.sleep(0)
                self.abort()

    def _tag(self, key, tag, force_tag):
        if force_tag:
            return tag
        if self._tags is None:
            raise UCXError("an endpoint made from a worker address has no tags of its own: pass tag=<int> and force_tag=True")
        if tag is None:
            return self._tags[key]
        return hash64bits(self._tags[key], hash(tag))

    def _post_send(self, buffer, tag, spin_us):
        """Submits a send on the already computed ``tag``: ``None`` if UCX finished it at once,
        else its future."""
        ep = self._ep
        if ep is None:
            raise UCXEndpointClosed("Endpoint closed")
        self._send_count += 1
        # One native call: raises the peer's failure, or UCXEndpointClosed if closed, first.
        return ep.tag_send_checked(buffer, tag, spin_us)

    def _post_recv(self, buffer, tag, spin_us):
        """Submits a receive on the already computed ``tag``: ``None`` if it finished at once,
        else its future. The caller counts it finished (``_recv_finished``)."""
        ep = self._ep
        if ep is None:
            raise UCXEndpointClosed("Endpoint closed")
        self._recv_count += 1
        # Unless a matching message is already waiting, raises the peer's failure, or
        # UCXEndpointClosed if closed, first. It progresses for up to ``spin_us`` before it hands
        # back a future, so a prompt reply needs no trip through the event loop.
        return ep.tag_recv_checked(buffer, tag, spin_us)

    def _recv_finished(self, n=1):
        self._finished_recv_count += n
        if self._close_after_n_recv is not None and self._finished_recv_count >= self._close_after_n_recv:
            self.abort()

    async def send(self, buffer, tag=None, force_tag=False):
        """Sends ``buffer`` (buffer protocol or ``__cuda_array_interface__``) on the
        endpoint's tag (or ``tag``, hashed with it unless ``force_tag``)."""
        tag = self._tag("msg_send", tag, force_tag)
        try:
            fut = self._post_send(buffer, tag, _inline_spin_us())
            if fut is None:
                return True
            return await fut
        except UCXCanceled as e:
            if self._cancel_is_an_error(e):
                raise e

    def _cancel_is_an_error(self, e):
        """Whether a send's ``UCXCanceled`` is the caller's news: when this endpoint was
        aborted meanwhile (as in UCX-Py) or its peer failed (UCX-Py returned then as if the
        send had succeeded)."""
        return self._ep is None or isinstance(e, UCXPeerFailure)

    async def recv(self, buffer, tag=None, force_tag=False):
        """Receives into ``buffer`` (writable, contiguous) a message of exactly its size. A
        message that arrived before the endpoint closed can still be received."""
        tag = self._tag("msg_recv", tag, force_tag)
        fut = self._post_recv(buffer, tag, _inline_spin_us())
        try:
            ret = True if fut is None else await fut
        except asyncio.CancelledError:
            if fut is not None and fut.done() and not fut.cancelled() and fut.exception() is None:
                # The message arrived, but the caller's cancel reached the task first: it is
                # lost to them. Closed as when UCX could not withdraw the receive, so the next
                # receive fails clearly instead of silently getting the message after.
                ep = self._ep
                if ep is not None:
                    ep.close_for_lost_message()
            raise
        self._recv_finished()
        return ret

    async def send_multi(self, buffers, tag=None, force_tag=False):
        """Sends several frames as one message, in UCXX's multi-buffer framing (so a UCXX
        ``recv_multi`` receives them too): headers of up to 100 frames each, then the frames,
        all posted at once (no task per frame) and awaited together."""
        _, sent = self._post_multi(buffers, tag, force_tag)
        if sent is not None:
            await sent

    def _post_multi(self, buffers, tag=None, force_tag=False):
        """``send_multi`` without the coroutine: posts everything before it returns. Returns
        the frames' total size and a future of the sends (``None``: all finished at once), so
        a caller that must not wait for the peer (Dask's comm) need not make a task."""
        arrays = [Array(b) for b in buffers]
        headers = _MultiHeader.pack_all([(a.cuda, a.nbytes) for a in arrays])
        tag = self._tag("msg_send", tag, force_tag)
        sent = _post_all(self._post_send(b, tag, 0) for b in (*headers, *buffers))
        return sum(a.nbytes for a in arrays), sent

    async def recv_multi(self, tag=None, force_tag=False, allocator=bytearray, device_allocator=None, max_size=None):
        """Receives the frames of one ``send_multi`` (ours or UCXX's): host frames into
        ``allocator(nbytes)``, CUDA frames into ``device_allocator(nbytes)`` (default: an RMM
        ``DeviceBuffer``, or a CuPy array). Every frame's receive is posted as soon as the
        headers are in. A message larger than ``max_size`` bytes (default
        ``default_max_message_size()``) is refused before anything is allocated."""
        header = bytearray(_MultiHeader.SIZE)
        await self.recv(header, tag=tag, force_tag=force_tag)
        # From here on the message is partly received: the rest must not be left for the
        # next receive to read as a message of its own.
        async with self._whole_message():
            layout, nbytes = [], 0
            while True:
                more, frames = _MultiHeader.unpack(header)
                layout += frames
                nbytes += sum(n for _, n in frames)
                # Checked per header: a peer announcing headers without end is refused as soon
                # as its total passes a limit, not once it has filled our memory with entries.
                _check_message_size(self, "recv_multi", nbytes, max_size)
                if len(layout) > _MAX_FRAMES:
                    _refuse(self, f"recv_multi: the peer announced more than {_MAX_FRAMES} frames")
                if not more:
                    break
                header = bytearray(_MultiHeader.SIZE)
                await self.recv(header, tag=tag, force_tag=force_tag)
            if any(cuda for cuda, _ in layout) and device_allocator is None:
                device_allocator = _device_buffer
            frames = [device_allocator(n) if cuda else allocator(n) for cuda, n in layout]
            tag = self._tag("msg_recv", tag, force_tag)
            await _gather_posted(self._post_recv(b, tag, 0) for b in frames)
        self._recv_finished(len(frames))
        return frames

    async def am_send(self, buffer):
        """Sends ``buffer`` as an active message (received with ``am_recv``)."""
        if self._ep is None:
            raise UCXEndpointClosed("Endpoint closed")
        self._ep.raise_on_error()
        if self.closed():
            raise UCXEndpointClosed("Endpoint closed")
        self._send_count += 1
        fut = self._ep.am_send(buffer)
        return True if fut is None else await fut

    async def am_recv(self):
        """The next active message from the peer, in an object from the registered allocator
        (``bytearray`` by default for host memory)."""
        if self._ep is None:
            raise UCXEndpointClosed("Endpoint closed")
        if not self._ep.am_probe():
            self._ep.raise_on_error()
            if self.closed():
                raise UCXEndpointClosed("Endpoint closed")
        self._recv_count += 1
        fut = self._ep.am_recv()
        try:
            ret = await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled() and fut.exception() is None and self._ep is not None:
                # The message arrived, but the caller's cancel reached the task first: put it
                # back for the next am_recv.
                self._ep.am_requeue(fut.result())
            raise
        self._finished_recv_count += 1
        if self._close_after_n_recv is not None and self._finished_recv_count >= self._close_after_n_recv:
            self.abort()
        return ret

    async def send_obj(self, obj, tag=None):
        """Sends ``obj`` preceded by its size (8 bytes)."""
        if not isinstance(obj, (bytes, bytearray, memoryview)) and not hasattr(obj, "__cuda_array_interface__"):
            obj = memoryview(obj)
        nbytes = array.array("Q", [_nbytes(obj)])
        # Both posted before the first wait: a cancel between them would leave the peer a size
        # without its object. (UCX finishes a posted send whatever the caller does.)
        tag = self._tag("msg_send", tag, False)
        try:
            await _gather_posted(self._post_send(b, tag, 0) for b in (nbytes, obj))
        except UCXCanceled as e:
            if self._cancel_is_an_error(e):
                raise e

    async def recv_obj(self, tag=None, allocator=bytearray, max_size=None):
        """Receives an object sent with ``send_obj`` into ``allocator(size)``; a size above
        ``max_size`` (default ``default_max_message_size()``) is refused before allocating."""
        nbytes = array.array("Q", [0])
        await self.recv(nbytes, tag=tag)
        async with self._whole_message():
            _check_message_size(self, "recv_obj", nbytes[0], max_size)
            obj = allocator(nbytes[0])
            await self.recv(obj, tag=tag)
        return obj

    @contextlib.asynccontextmanager
    async def _whole_message(self):
        """Around the receives that finish a message whose first part was received: if the
        caller cancels them, the rest of the message would be read as the next one, so the
        endpoint is closed (the next receive says why) instead."""
        try:
            yield
        except asyncio.CancelledError:
            ep = self._ep
            if ep is not None:
                ep.close_for_lost_message()
            raise

    def close_after_n_recv(self, n, count_from_ep_creation=False):
        """Closes the endpoint once ``n`` more receives (or ``n`` since creation) finished."""
        if not count_from_ep_creation:
            n += self._finished_recv_count
        if self._close_after_n_recv is not None:
            raise UCXError("close_after_n_recv has already been set to: %d (abs)" % self._close_after_n_recv)
        if n == self._finished_recv_count:
            self.abort()
        elif n > self._finished_recv_count:
            self._close_after_n_recv = n
        else:
            raise UCXError(
                "`n` cannot be less than current recv_count: %d (abs) < %d (abs)" % (n, self._finished_recv_count)
            )

    def set_close_callback(self, callback_func):
        """Runs ``callback_func()`` once, when the endpoint closes or its peer fails."""
        self._ep.set_close_callback(callback_func)

    async def flush(self):
        return await _await(self._ep.flush())

    def cuda_support(self):
        return self._ctx.context.cuda_support

    def get_ucp_worker(self):
        return self._ctx.worker.handle

    def get_ucp_endpoint(self):
        return self._ep.handle

    def ucx_info(self):
        return self._ep.info()

    @property
    def local_address(self):
        """``(host, port)`` of this side of a client-server endpoint, when known."""
        return self._ep.socket_addrs()[0]

    @property
    def peer_address(self):
        """``(host, port)`` of the peer of a client-server endpoint, when known."""
        return self._ep.socket_addrs()[1]


class _MultiHeader:
    """UCXX's multi-buffer header (``ucxx::Header``), packed as UCXX writes it: ``next``
    (another header follows; 1 byte), the frame count (8 bytes), then 100 CUDA flags (4 bytes
    each) and 100 sizes (8 bytes each), little-endian, unused slots zero."""

    FRAMES = 100
    _STRUCT = struct.Struct("<?Q%di%dQ" % (FRAMES, FRAMES))
    SIZE = _STRUCT.size  # 1209

    @classmethod
    def pack_all(cls, frames):
        """The headers for ``frames`` (``(is_cuda, nbytes)`` pairs); one even for none."""
        chunks = [frames[i : i + cls.FRAMES] for i in range(0, len(frames), cls.FRAMES)] or [[]]
        headers = []
        for i, chunk in enumerate(chunks):
            pad = [0] * (cls.FRAMES - len(chunk))
            cuda = [int(c) for c, _ in chunk] + pad
            sizes = [n for _, n in chunk] + pad
            headers.append(cls._STRUCT.pack(i + 1 < len(chunks), len(chunk), *cuda, *sizes))
        return headers

    @classmethod
    def unpack(cls, header):
        """``(more_headers_follow, [(is_cuda, nbytes), ...])``; a corrupt header is an error."""
        fields = cls._STRUCT.unpack(header)
        more, n = fields[0], fields[1]
        if n > cls.FRAMES:
            raise UCXError(f"recv_multi: a header announced {n} frames (at most {cls.FRAMES})")
        cuda, sizes = fields[2 : 2 + cls.FRAMES], fields[2 + cls.FRAMES :]
        return more, [(bool(cuda[i]), sizes[i]) for i in range(n)]


def _device_buffer(nbytes):
    """Device memory for a received CUDA frame: RMM's, else CuPy's."""
    try:
        import rmm

        return rmm.DeviceBuffer(size=nbytes)
    except ImportError:
        import cupy

        return cupy.empty(nbytes, dtype="u1")


def _post_all(posts):
    """Posts operations one by one (each gives its future, or ``None`` if finished at once);
    returns one future of them all, or ``None``. If posting one fails, those already posted
    are left to finish, their outcome consumed."""
    pending = []
    try:
        for fut in posts:
            if fut is not None:
                pending.append(fut)
    except BaseException:
        for fut in pending:
            fut.add_done_callback(lambda f: f.cancelled() or f.exception())
        raise
    return asyncio.gather(*pending) if pending else None


async def _gather_posted(posts):
    """Posts operations as ``_post_all`` does and waits for them."""
    done = _post_all(posts)
    if done is not None:
        await done


def _inline_spin_us():
    """How long a receive may progress the worker before it yields (``UCXPY_SPIN_US``): only
    when nothing else on this event loop is ready to run, which a spin would only delay."""
    return 0 if others_ready(asyncio.get_running_loop()) else spin_us()


def _nbytes(obj):
    """Size in bytes of a buffer-protocol or CUDA-array object."""
    return Array(obj).nbytes


# --- the module functions, on the global context ---------------------------------------


def _get_ctx():
    global _ctx
    if _ctx is None:
        _ctx = ApplicationContext()
    return _ctx


def init(options={}, env_takes_precedence=False, blocking_progress_mode=None, connect_timeout=None):
    """Initialises UCX with ``options`` (names without ``UCX_``). Raises ``RuntimeError`` if
    already initialised (call ``reset()`` first)."""
    global _ctx
    if _ctx is not None:
        raise RuntimeError(
            "UCX is already initiated. Call reset() and init() in order to re-initate UCX with new options."
        )
    options = options.copy()
    for k, v in options.items():
        env_k = f"UCX_{k}"
        env_v = os.environ.get(env_k)
        if env_v is not None:
            if env_takes_precedence:
                options[k] = env_v
                logger.debug(f"Ignoring option {k}={v}; using environment {env_k}={env_v}")
            else:
                logger.debug(f"Ignoring environment {env_k}={env_v}; using option {k}={v}")
    _ctx = ApplicationContext(
        options, blocking_progress_mode=blocking_progress_mode, connect_timeout=connect_timeout
    )


def reset():
    """Drops the global context. Raises ``UCXError`` if endpoints or listeners still use it."""
    global _ctx
    if _ctx is not None:
        weakref_ctx = weakref.ref(_ctx)
        _ctx = None
        gc.collect()
        if weakref_ctx() is not None:
            msg = (
                "Trying to reset UCX but not all Endpoints and/or Listeners "
                "are closed(). The following objects are still referencing "
                "ApplicationContext: "
            )
            for o in gc.get_referrers(weakref_ctx()):
                msg += "\n  %s" % str(o)
            # Unlike UCX-Py, a failed reset leaves the context in place: dropping it would
            # make the next call silently build a second UCX context beside the live one.
            _ctx = weakref_ctx()
            raise UCXError(msg)


def get_ucx_version():
    """The loaded UCX's ``(major, minor, release)``; does not initialise UCX."""
    return _ucx_async.get_ucx_version()


def progress():
    """Progresses the worker once (not needed with the automatic progress drivers)."""
    _get_ctx().worker.progress()


def get_config():
    """UCX's configuration (names without ``UCX_``): the context's if initialised, the
    environment's otherwise."""
    if _ctx is None:
        return ucx_api.get_current_options()
    return _ctx.get_config()


def register_am_allocator(allocator, allocator_type):
    return _get_ctx().register_am_allocator(allocator, allocator_type)


def create_listener(callback_func, port=None, endpoint_error_handling=True, ip=None, wire_protocol=None):
    """A listener on ``port`` (any free port if None) of ``ip`` (every IPv4 address if None).

    When ``ip`` names one address and this call creates the global context, UCX's network
    transports are limited to the interface that owns it (``NET_DEVICES``), unless
    ``UCX_NET_DEVICES`` is set: otherwise UCX's tcp transport would also listen on every other
    interface. A context created earlier (``init()``, an endpoint) keeps its devices."""
    global _ctx
    if _ctx is None and ip and "UCX_NET_DEVICES" not in os.environ:
        device = interface_of(ip)
        if device is not None:
            logger.debug("create_listener(ip=%s): UCX_NET_DEVICES=%s", ip, device)
            _ctx = ApplicationContext({"NET_DEVICES": device})
    return _get_ctx().create_listener(
        callback_func,
        port,
        endpoint_error_handling=endpoint_error_handling,
        ip=ip,
        wire_protocol=wire_protocol,
    )


async def create_endpoint(ip_address, port, endpoint_error_handling=True):
    return await _get_ctx().create_endpoint(ip_address, port, endpoint_error_handling=endpoint_error_handling)


async def create_endpoint_from_worker_address(address, endpoint_error_handling=True):
    return await _get_ctx().create_endpoint_from_worker_address(
        address, endpoint_error_handling=endpoint_error_handling
    )


def continuous_ucx_progress(event_loop=None):
    _get_ctx().continuous_ucx_progress(event_loop=event_loop)


def get_ucp_worker():
    return _get_ctx().get_ucp_worker()


def get_worker_address():
    return _get_ctx().get_worker_address()


def get_ucx_address_from_buffer(buffer):
    return ucx_api.UCXAddress.from_buffer(buffer)


async def recv(buffer, tag):
    return await _get_ctx().recv(buffer, tag)


def get_ucp_context_info():
    return _get_ctx().ucp_context_info()


def get_ucp_worker_info():
    return _get_ctx().ucp_worker_info()


def get_active_transports():
    """The transports UCX uses, e.g. ``{"self", "tcp", "sysv", "posix", "cma"}``."""
    info = get_ucp_context_info()
    resources = re.findall("^#.*resource.*md.*dev.*flags.*$", info, re.MULTILINE)
    return set(r.split()[-1].split("/")[0] for r in resources)


async def flush():
    if _ctx is not None:
        return await _ctx.flush()
    await asyncio.sleep(0)


def fence():
    if _ctx is not None:
        _ctx.fence()
