"""UCX-Py's ``ApplicationContext`` (the UCX context, its one worker, and the progress drivers
of the event loops that use it) and ``Listener``: accepting connections, connecting, and the
handshake's place in both. ``ucp.core`` keeps one of these as its global context."""
import asyncio
import logging
import os
import socket
import weakref
from functools import partial

from . import _ucx_async
from ._libs import ucx_api
from ._libs.exceptions import UCXBaseException, UCXConnectionRefused, UCXError, UCXUnreachable
from .continuous_ucx_progress import BlockingMode, NonBlockingMode
from .ctrl_msg import CtrlMsg
from .endpoint import Endpoint
from .handshake import WIRE_PROTOCOLS, default_wire_protocol, exchange_peer_info, new_tags, tag_map
from .pending import wait
from .utils import get_event_loop

logger = logging.getLogger("ucx")

__all__ = ["ApplicationContext", "Listener"]

# Loop iterations a connecting client yields after the handshake (see create_endpoint).
_HANDSHAKE_YIELDS = 3


async def _listener_handler_coroutine(conn_request, ctx, func, endpoint_error_handling, wire_protocol):
    # Failures before the user's callback runs (a client that went away, a handshake timeout)
    # are logged, never left as "Task exception was never retrieved".
    try:
        ucx_ep = ctx.worker.accept(conn_request, endpoint_error_handling)
    except UCXBaseException as e:
        logger.warning("Accepting a connection failed: %s", str(e))
        return
    msg_tag, ctrl_tag = new_tags(ucx_ep)
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
    ep = Endpoint(endpoint=ucx_ep, ctx=ctx, tags=tag_map(msg_tag, ctrl_tag, peer_info))
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


_DEFAULT = object()


def _max_unclaimed_bytes(value):
    """``UCXPY_MAX_UNCLAIMED_BYTES``'s value: a number of bytes, ``none`` (no cap), or unset."""
    if value is None or value.strip() == "":
        return _DEFAULT
    if value.strip().lower() == "none":
        return None
    try:
        n = int(value)
    except ValueError:
        n = -1
    if n < 0:
        raise ValueError("UCXPY_MAX_UNCLAIMED_BYTES must be a number of bytes or 'none', not %r" % value)
    return n


class ApplicationContext:
    """The UCX context, its one worker, and the progress drivers of the event loops using it.

    ``blocking_progress_mode``: sleep on the wakeup fd (default) or poll; default from the
    environment (``UCXPY_NON_BLOCKING_MODE`` present means polling). ``connect_timeout``: the
    handshake's time limit in seconds (default ``UCXPY_CONNECT_TIMEOUT`` or 5).
    ``UCXPY_MAX_UNCLAIMED_BYTES``: the cap on what a peer may leave unreceived on one endpoint
    (``Worker.set_max_unclaimed_bytes``; default 1 GiB, ``none`` for no cap).
    """

    def __init__(self, config_dict={}, blocking_progress_mode=None, connect_timeout=None, *, _context=None):
        # ``_context``: share that UCX context (a second worker on it; the collectives'
        # bootstrap) instead of creating one from ``config_dict``.
        self.progress_tasks = []
        max_unclaimed = _max_unclaimed_bytes(os.environ.get("UCXPY_MAX_UNCLAIMED_BYTES"))
        self.context = _context if _context is not None else _ucx_async.Context(dict(config_dict))
        # The address family UCX's tcp transport uses (UCX_TCP_AF_PRIO's first): it carries
        # connections of that family only (``ucp.core`` keeps a context per family).
        af_prio = dict(config_dict).get("TCP_AF_PRIO") or os.environ.get("UCX_TCP_AF_PRIO") or "inet,inet6"
        self.tcp_family = socket.AF_INET6 if af_prio.split(",")[0].strip().lower() == "inet6" else socket.AF_INET
        self.worker = _ucx_async.Worker(self.context)
        if max_unclaimed is not _DEFAULT:
            self.worker.set_max_unclaimed_bytes(max_unclaimed)

        if blocking_progress_mode is not None:
            self.blocking_progress_mode = blocking_progress_mode
        else:
            self.blocking_progress_mode = "UCXPY_NON_BLOCKING_MODE" not in os.environ

        if connect_timeout is None:
            self.connect_timeout = float(os.environ.get("UCXPY_CONNECT_TIMEOUT", 5))
        else:
            self.connect_timeout = connect_timeout

        self.epoll_fd = self.worker.efd() if self.blocking_progress_mode else None
        self._stop = weakref.finalize(self, _stop_progress, self.progress_tasks, self.worker)

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
            wire_protocol = default_wire_protocol()
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
        """Connects to a listener and does the handshake; returns an ``Endpoint``. A connect
        that no listener answers raises ``UCXConnectionRefused`` (or ``UCXUnreachable``),
        naming the address."""
        self.continuous_ucx_progress()
        ip = await resolve(ip_address)
        ucx_ep = self.worker.connect(ip, port, endpoint_error_handling)
        # Progress once at once: many simultaneous connects otherwise stall (UCX-Py PR #504).
        self.worker.progress()
        msg_tag, ctrl_tag = new_tags(ucx_ep)
        try:
            peer_info = await exchange_peer_info(
                ucx_ep, msg_tag, ctrl_tag, listener=False, connect_timeout=self.connect_timeout
            )
        except BaseException as e:
            try:
                ucx_ep.close()
            except UCXBaseException:  # the connection failed; the handshake error is the news
                pass
            where = host_port(ip, port)
            if isinstance(e, UCXUnreachable):
                # UCX says only "Destination is unreachable"; where this side's transports are
                # why (UCX_TLS=sm, say), the error says so.
                hint = self.worker.unreachable_listener_hint()
                raise UCXUnreachable(f"{e} ({where}: {hint})" if hint else f"{e} ({where})") from e
            if isinstance(e, UCXConnectionRefused):
                raise UCXConnectionRefused(
                    f"connecting to {where}: refused: nothing listens there, or its listener turned "
                    f"the connection away ({e})"
                ) from e.__cause__
            raise
        # Our last handshake send usually finishes inline, where UCX-Py's went through a
        # future: yield a few loop iterations so that a listener in this process can finish
        # its side (and start its callback) before we return, as it could with UCX-Py.
        for _ in range(_HANDSHAKE_YIELDS):
            await asyncio.sleep(0)
        ep = Endpoint(endpoint=ucx_ep, ctx=self, tags=tag_map(msg_tag, ctrl_tag, peer_info))
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
        return await wait(self.worker.flush())

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
        return await wait(self.worker.tag_recv(buffer, tag))


def _stop_progress(progress_tasks, worker):
    for task in progress_tasks:
        try:
            task.stop()
        except Exception:  # a loop closed at interpreter exit
            pass
    progress_tasks.clear()
    worker.cancel_all()


async def resolve(host):
    """An IP address for ``host`` (IPv4 preferred, as UCX-Py's ``gethostbyname``). A host name
    is looked up off the event loop (``loop.getaddrinfo``), which a slow resolver would block."""
    for family in (socket.AF_INET, socket.AF_INET6):
        try:
            socket.inet_pton(family, host)
            return host
        except OSError:
            pass
    infos = await asyncio.get_running_loop().getaddrinfo(host, None, type=socket.SOCK_STREAM)
    infos.sort(key=lambda i: i[0] != socket.AF_INET)
    return infos[0][4][0]


def host_port(ip, port):
    """``ip:port``, with an IPv6 address in brackets."""
    return f"[{ip}]:{port}" if ":" in str(ip) else f"{ip}:{port}"


def tcp_devices(ctx):
    """The network devices UCX's tcp transport uses in ``ctx`` (and listens on, each on a
    port of its own), e.g. ``["eth0", "lo"]``."""
    devices = []
    for line in ctx.ucp_context_info().splitlines():
        if "resource" in line and "-- tcp/" in line:
            devices.append(line.rsplit("-- tcp/", 1)[1].strip())
    return devices


# How often a listener looks for connections that make UCX's connection manager spin.
_GUARD_INTERVAL = 1.0


def _guard(loop, listener_ref):
    """Once a second (a timer on ``loop``, not a task: a loop closed with the listener still
    open then leaves nothing pending behind), lets go of connections to the listener's port
    that made UCX 1.22's connection manager spin (garbage, then close; docs/reliability.md).
    Ends with the listener."""
    listener = listener_ref()
    if listener is None or listener._b is None or listener.closed():
        return
    try:
        n = listener._b.release_stuck_connections()
    except RuntimeError as e:
        logger.warning("The listener on port %d stops looking for stuck connections: %s", listener.port, e)
        return
    if n:
        logger.warning(
            "Let go of %d connection(s) to port %d that made UCX's connection manager spin "
            "(garbage, then close)", n, listener.port,
        )
    listener._guard = loop.call_later(_GUARD_INTERVAL, _guard, loop, listener_ref)


class Listener:
    """A listening socket; ``close()`` or garbage collection stops it (endpoints already made
    stay open). Unless ``UCXPY_LISTENER_GUARD=0``, a task on the event loop lets go of
    connections that make UCX's connection manager spin (see ``_guard``)."""

    def __init__(self, backend, ctx=None):
        self._b = backend
        self._ctx = ctx
        self._guard = None
        if os.environ.get("UCXPY_LISTENER_GUARD", "1") != "0":
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                pass  # no loop to run on: created outside one
            else:
                self._guard = loop.call_later(_GUARD_INTERVAL, _guard, loop, weakref.ref(self))

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
        if self._guard is not None:
            self._guard.cancel()
            self._guard = None
        if self._b is not None:
            self._b.close()
            self._ctx = None
