"""A Dask comm backend over ``ucp``: the ``ucxa://`` scheme (distributed keeps ``ucx`` for its
deprecation stub). Registered through the ``distributed.comm.backends`` entry point, so
``LocalCluster(protocol="ucxa")`` and ``dask worker ucxa://host:port`` find it without an
import.

Framing: one Dask message is one ``Endpoint.send_multi`` (UCXX's multi-buffer framing: a
header with each frame's size and memory type, then the frames; the sender posts them all at
once, the receiver posts every frame's receive as soon as the header is in). A message with no
frames tells the peer this side is closing (Dask messages always have at least one frame).
Device frames are received into device memory (RMM, else CuPy).

Configuration lives under ``ucxa`` in the Dask config (all optional): ``ucxa.tls`` and
``ucxa.net-devices`` (UCX_TLS / UCX_NET_DEVICES; ``auto``: the devices nearest the process's
GPU, see ``ucp._libs.topological_distance.auto_net_devices``) and ``ucxa.environment`` (more ``UCX_*``
options, names without the prefix), ``ucxa.spin-us`` (``ucp``'s busy-poll limit for this
process; default 0, as Dask's reads wait long) and ``ucxa.host-pool-size`` (how much freed
receive memory each process keeps for reuse, default 256 MiB; 0 turns the pool off). The comm
sets ``UCX_CM_REUSEADDR=y`` unless the environment says otherwise, as distributed's TCP
listener sets ``SO_REUSEADDR``. UCX is initialised lazily in each process, on first use.

Host frames are received into buffers from a ``ucp.HostPool``: memory that an earlier, freed
frame already wrote, so a receive does not pay the kernel's first-write page faults again
(those cost more than the copy itself; docs/dask.md has the figures).
"""
import asyncio
import logging
import os

import dask
from dask.utils import parse_bytes
from distributed.comm.addressing import parse_host_port, unparse_host_port
from distributed.comm.core import BaseListener, Comm, CommClosedError, Connector
from distributed.comm.registry import Backend
from distributed.comm.utils import ensure_concrete_host, from_frames, to_frames
from distributed.protocol.utils import host_array
from distributed.utils import ensure_ip, get_ip

import ucp
from ucp._libs.topological_distance import auto_net_devices
from ucp.continuous_ucx_progress import set_spin_us
from ucp.utils import interface_of

logger = logging.getLogger(__name__)

SCHEME = "ucxa"

# This process's pool for received host frames (None: not made yet, or turned off).
_host_pool = None
# Allocates a received host frame: from _host_pool, else host_array (uninitialised memory;
# a bytearray would be zero-filled first).
_allocate_host_frame = host_array


def _config_size(key, default):
    """The ``ucxa.<key>`` setting as a number of bytes >= 0 (``"256 MiB"`` style allowed), or
    ``default`` when unset."""
    value = dask.config.get(f"{SCHEME}.{key}", default=None)
    if value is None:
        return default
    try:
        size = parse_bytes(value)
        if size < 0:
            raise ValueError("negative")
    except (TypeError, ValueError) as e:
        raise ValueError(f"{SCHEME}.{key}: expected a size in bytes >= 0, got {value!r}") from e
    return size


def _make_host_pool():
    """Makes this process's receive pool once, sized by ``ucxa.host-pool-size`` (0: none)."""
    global _host_pool, _allocate_host_frame
    if _host_pool is not None:
        return
    size = _config_size("host-pool-size", 256 << 20)
    if size:
        pool = _host_pool = ucp.HostPool(size)
        _allocate_host_frame = lambda n: memoryview(pool.allocate(n))  # noqa: E731
    else:
        _allocate_host_frame = host_array


def _max_message_size():
    """``ucxa.max-message-size`` (bytes or e.g. ``"8 GiB"``): the largest message a comm
    accepts from its peer; None (unset): ``ucp.core.default_max_message_size()``."""
    return _config_size("max-message-size", None)


def _init_ucx(host=None):
    """Initialises UCX in this process once, with the ``ucxa`` Dask config. A listener's
    ``host`` limits UCX's network devices to its interface unless ``ucxa.net-devices`` or
    ``UCX_NET_DEVICES`` says otherwise (UCX's tcp transport listens on every device it uses)."""
    _make_host_pool()
    if ucp.core.initialized():
        return
    # A Dask read is posted long before its message comes, so spinning for a prompt reply
    # (ucp's default for ping-pong) mostly burns CPU the worker's tasks need.
    spin_us = dask.config.get(f"{SCHEME}.spin-us", default=0)
    if "UCXPY_SPIN_US" not in os.environ:
        set_spin_us(spin_us)
    # As distributed's TCP listener (SO_REUSEADDR): a scheduler restarted on its port must
    # bind while the old connections linger in TIME_WAIT, which UCX's default refuses.
    options = {"CM_REUSEADDR": "y"}
    for key, name in (("tls", "TLS"), ("net-devices", "NET_DEVICES")):
        value = dask.config.get(f"{SCHEME}.{key}", default=None)
        if value is not None:
            options[name] = str(value)
    for name, value in (dask.config.get(f"{SCHEME}.environment", default=None) or {}).items():
        options[str(name).upper().replace("-", "_").removeprefix("UCX_")] = str(value)
    if options.get("NET_DEVICES") == "auto":
        # CUDA device 0: the first CUDA_VISIBLE_DEVICES entry, which dask-cuda sets per worker.
        auto = None if "UCX_NET_DEVICES" in os.environ else auto_net_devices(0, host=host)
        del options["NET_DEVICES"]
        if auto is not None:
            options["NET_DEVICES"] = auto
    if host and "NET_DEVICES" not in options and "UCX_NET_DEVICES" not in os.environ:
        device = interface_of(host)
        if device is not None:
            options["NET_DEVICES"] = device
    ucp.init(options, env_takes_precedence=True)


class UCXAComm(Comm):
    """One connection: a ``ucp`` endpoint with Dask's framing."""

    def __init__(self, ep, local_addr, peer_addr, deserialize=True):
        super().__init__(deserialize=deserialize)
        self._ep = ep
        self._local_addr = local_addr
        self._peer_addr = peer_addr
        self._sending = None  # the sends of the last write, until they have finished

    @property
    def local_address(self):
        return self._local_addr

    @property
    def peer_address(self):
        return self._peer_addr

    def closed(self):
        return self._ep is None or self._ep.closed()

    def abort(self):
        ep, self._ep = self._ep, None
        if ep is not None:
            try:
                ep.abort()
            except Exception as e:  # closed all the same; abort() runs in finally blocks
                logger.debug("%s: the endpoint's close failed: %r", self, e)
        sending, self._sending = self._sending, None
        if sending is not None:
            # Canceled with the endpoint; nobody waits for it any more.
            sending.add_done_callback(lambda f: f.cancelled() or f.exception())

    async def close(self):
        ep = self._ep
        if ep is None:
            return
        try:
            await self._sent()
            if not ep.closed():
                await ep.send_multi([])  # no frames: closing
        except Exception:  # the peer may be gone already; closing is what we want anyway
            pass
        finally:
            self.abort()

    async def write(self, msg, serializers=None, on_error="message"):
        ep = self._ep
        if ep is None or ep.closed():
            raise CommClosedError(f"{self} is closed")
        frames = await to_frames(
            msg,
            allow_offload=self.allow_offload,
            serializers=serializers,
            on_error=on_error,
            context={"sender": self.local_info, "recipient": self.remote_info, **self.handshake_options},
        )
        # The previous message must be under way first (order on the tag), and its failure is
        # this write's failure.
        await self._sent()
        # Posted now, finished later: a large (rendezvous) send completes only once the peer
        # receives, and a writer must not wait for a reader that is itself still writing.
        try:
            nbytes, self._sending = ep.post_multi(frames)
        except Exception as e:
            self.abort()
            raise CommClosedError(f"{self}: {e!r}") from e
        if self._sending is not None and self._sending.done():
            await self._sent()
        return nbytes

    async def _sent(self):
        """Waits for the sends of the last write; a failure closes the comm."""
        sending, self._sending = self._sending, None
        if sending is None:
            return
        try:
            await sending
        except Exception as e:
            self.abort()
            raise CommClosedError(f"{self}: {e!r}") from e
        finally:
            sending = None  # a failure's traceback holds this frame (see ucp.pending.wait)

    async def read(self, deserializers=None):
        ep = self._ep
        if ep is None:
            raise CommClosedError(f"{self} is closed")
        try:
            # Device frames go to RMM, else CuPy.
            frames = await ep.recv_multi(allocator=_allocate_host_frame, max_size=_max_message_size())
            if not frames:
                raise CommClosedError(f"{self}: the peer closed the connection")
        except CommClosedError:
            self.abort()
            raise
        except BaseException as e:
            # A canceled or failed receive, or the endpoint gone: the comm is unusable.
            self.abort()
            if isinstance(e, asyncio.CancelledError):
                raise
            raise CommClosedError(f"{self}: {e!r}") from e
        try:
            return await from_frames(
                frames, deserialize=self.deserialize, deserializers=deserializers, allow_offload=self.allow_offload
            )
        except EOFError as e:
            # A truncated or garbled message (as distributed's TCP comm treats it): this
            # connection cannot be trusted any more.
            self.abort()
            raise CommClosedError(f"{self}: aborted on truncated or garbled data") from e


class UCXAConnector(Connector):
    async def connect(self, address, deserialize=True, **connection_args):
        _init_ucx()
        host, port = parse_host_port(address)
        try:
            ep = await ucp.create_endpoint(ensure_ip(host), port)
        except (ucp.exceptions.UCXBaseException, RuntimeError) as e:
            # OSError makes distributed retry until its connect timeout.
            raise OSError(f"connecting to {SCHEME}://{address}: {e}") from e
        local = ep.local_address
        local_addr = f"{SCHEME}://{unparse_host_port(*local)}" if local else f"{SCHEME}://"
        return UCXAComm(ep, local_addr, f"{SCHEME}://{address}", deserialize=deserialize)


class UCXAListener(BaseListener):
    prefix = f"{SCHEME}://"  # distributed's Worker builds addresses with it

    def __init__(self, address, comm_handler, deserialize=True, allow_offload=True, **connection_args):
        super().__init__()
        self._host, self._port = parse_host_port(address, default_port=0)
        self.comm_handler = comm_handler
        self.deserialize = deserialize
        self.allow_offload = allow_offload
        self._listener = None

    async def start(self):
        _init_ucx(ensure_ip(self._host) if self._host else None)

        async def serve(ep):
            if self._listener is None:
                # Accepted, but the listener was stopped before this ran: nobody would abort
                # this comm's handshake (Server.stop has aborted the handshaking ones already),
                # and the client would wait for it forever.
                ep.abort()
                return
            peer = ep.peer_address
            peer_addr = f"{SCHEME}://{unparse_host_port(*peer)}" if peer else f"{SCHEME}://"
            comm = UCXAComm(ep, self.contact_address, peer_addr, deserialize=self.deserialize)
            comm.allow_offload = self.allow_offload
            try:
                await self.on_connection(comm)
            except CommClosedError:
                logger.debug("Connection closed during the handshake: %s", comm)
                return
            await self.comm_handler(comm)

        host = ensure_ip(self._host) if self._host else "0.0.0.0"
        self._listener = ucp.create_listener(serve, port=self._port, ip=host)

    def stop(self):
        # Only stops accepting: comms already accepted, even those still in their handshake,
        # live on (as with TCP; listen()'s context manager stops its listener as soon as the
        # client's connect() returns, possibly before the server side has read the client's
        # handshake). distributed's Server.stop calls abort_handshaking_comms() itself.
        if self._listener is not None:
            self._listener.close()
            self._listener = None

    @property
    def port(self):
        return self._listener.port if self._listener is not None else self._port

    @property
    def listen_address(self):
        return f"{SCHEME}://{unparse_host_port(self._host or '0.0.0.0', self.port)}"

    @property
    def contact_address(self):
        host = ensure_concrete_host(self._host or "0.0.0.0")
        return f"{SCHEME}://{unparse_host_port(host, self.port)}"


class UCXABackend(Backend):
    """The ``ucxa`` backend (distributed instantiates it with no arguments)."""

    def get_connector(self):
        return UCXAConnector()

    def get_listener(self, loc, handle_comm, deserialize, **connection_args):
        return UCXAListener(loc, handle_comm, deserialize, **connection_args)

    def get_address_host(self, loc):
        return parse_host_port(loc)[0]

    def get_address_host_port(self, loc):
        return parse_host_port(loc)

    def resolve_address(self, loc):
        host, port = parse_host_port(loc)
        return unparse_host_port(ensure_ip(host), port)

    def get_local_address_for(self, loc):
        host, port = parse_host_port(loc)
        return unparse_host_port(get_ip(ensure_ip(host)), None)
