"""UCX-Py's ``ucp.core``: the module functions (``init``, ``reset``, ``create_listener``,
``create_endpoint``, ...) on a global ``ApplicationContext`` made lazily by the first call that
needs one. The classes live in their own modules and are re-exported here under the names
UCX-Py's users import:

- ``application``: ``ApplicationContext``, ``Listener``;
- ``endpoint``: ``Endpoint``;
- ``handshake``: the peer-info exchange (``exchange_peer_info``, ``WIRE_PROTOCOLS``);
- ``ctrl_msg``: ``CtrlMsg``, the close protocol's message;
- ``framing``: UCXX's multi-frame header, ``send_obj``'s prefix, message-size limits;
- ``pending``: the "``None`` means done inline, else a future" convention.

The wire bytes are ucx-core's (through the extension); docs/python.md, "Wire protocol", describes them.
"""
import asyncio
import gc
import ipaddress
import logging
import os
import re
import socket
import warnings
import weakref
from functools import partial  # noqa: F401  (UCX-Py's namespace had it)

from . import _ucx_async
from ._libs import ucx_api
from ._libs.arr import Array  # noqa: F401  (re-exported, as before the split)
from ._libs.exceptions import (  # noqa: F401  (re-exported)
    UCXBaseException,
    UCXCanceled,
    UCXConnectionRefused,
    UCXEndpointClosed,
    UCXError,
    UCXPeerFailure,
    UCXWarning,
)
from .application import ApplicationContext, Listener, resolve, tcp_devices
from .continuous_ucx_progress import BlockingMode, NonBlockingMode, others_ready, spin_us  # noqa: F401
from .ctrl_msg import CtrlMsg  # noqa: F401
from .endpoint import Endpoint, EndpointClosedError  # noqa: F401
from .framing import MultiHeader as _MultiHeader  # noqa: F401  (tests and older callers)
from .framing import default_max_message_size  # noqa: F401
from .handshake import WIRE_PROTOCOLS, exchange_peer_info  # noqa: F401
from .utils import get_event_loop, hash64bits, interface_of  # noqa: F401

logger = logging.getLogger("ucx")

# The global application context, created by the first API call that needs it.
_ctx = None
# A second context, for listeners and endpoints of the address family (IPv4 or IPv6) that
# ``_ctx``'s tcp transport does not carry: UCX's tcp transport uses one family per device
# (UCX_TCP_AF_PRIO), and UCX 1.22 corrupts the heap on a connection of the other family (ucx-core
# refuses it). Made by the first listener or endpoint of that family, with init()'s arguments.
_other_ctx = None
# init()'s arguments, for the contexts made after it.
_init_args = {}

_AF_PRIO = {socket.AF_INET: "inet,inet6", socket.AF_INET6: "inet6,inet"}


def initialized():
    """Whether the global context exists (``init()`` ran, or an API call made it)."""
    return _ctx is not None


def _contexts():
    return [c for c in (_ctx, _other_ctx) if c is not None]


def _family(ip):
    """``socket.AF_INET6`` for an IPv6 address (``::`` too), else ``socket.AF_INET``."""
    try:
        return socket.AF_INET6 if ipaddress.ip_address(ip).version == 6 else socket.AF_INET
    except (TypeError, ValueError):  # None (every IPv4 address), "", a host name
        return socket.AF_INET


def _af_prio_chosen(args=None):
    options = (_init_args if args is None else args).get("options", {})
    return "TCP_AF_PRIO" in options or "UCX_TCP_AF_PRIO" in os.environ


def _new_ctx(family=socket.AF_INET, listener_ip=None, args=None):
    """A context with init()'s arguments (or ``args``) whose tcp transport carries ``family``
    (unless the user chose ``TCP_AF_PRIO``). A listener's ``ip`` limits UCX's devices to the
    interface that owns it, unless the user chose them: UCX's tcp transport listens on every
    device it uses."""
    args = _init_args if args is None else args
    options = dict(args.get("options", {}))
    if not _af_prio_chosen(args) and family != socket.AF_INET:
        options["TCP_AF_PRIO"] = _AF_PRIO[family]
    if listener_ip and "NET_DEVICES" not in options and "UCX_NET_DEVICES" not in os.environ:
        device = interface_of(listener_ip)
        if device is not None:
            logger.debug("create_listener(ip=%s): UCX_NET_DEVICES=%s", listener_ip, device)
            options["NET_DEVICES"] = device
    return ApplicationContext(
        options,
        blocking_progress_mode=args.get("blocking_progress_mode"),
        connect_timeout=args.get("connect_timeout"),
    )


def _get_ctx():
    global _ctx
    if _ctx is None:
        _ctx = _new_ctx()
    return _ctx


def _ctx_for(ip, listener=False):
    """The context for a listener on, or an endpoint to, ``ip``, and whether this call made
    it: the global one if its tcp transport carries ``ip``'s family (or the user chose that
    family with ``TCP_AF_PRIO``: a mismatch is then refused by name), else the other."""
    global _ctx, _other_ctx
    family = _family(ip)
    if _ctx is None:
        _ctx = _new_ctx(family, ip if listener else None)
        return _ctx, True
    if _ctx.tcp_family == family or _af_prio_chosen():
        return _ctx, False
    if _other_ctx is None:
        _other_ctx = _new_ctx(family, ip if listener else None)
        return _other_ctx, True
    return _other_ctx, False


def init(options={}, env_takes_precedence=False, blocking_progress_mode=None, connect_timeout=None):
    """Initialises UCX with ``options`` (names without ``UCX_``). Raises ``RuntimeError`` if
    already initialised (call ``reset()`` first)."""
    global _ctx, _init_args
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
    args = {"options": options, "blocking_progress_mode": blocking_progress_mode, "connect_timeout": connect_timeout}
    _ctx = _new_ctx(args=args)
    _init_args = args


def reset():
    """Drops the global context (and the one for the other address family). Raises
    ``UCXError`` if endpoints or listeners still use them."""
    global _ctx, _other_ctx, _init_args
    refs = [weakref.ref(c) if c is not None else None for c in (_ctx, _other_ctx)]
    if refs == [None, None]:
        return
    _ctx = _other_ctx = None
    gc.collect()
    alive = [r() for r in refs if r is not None and r() is not None]
    if alive:
        msg = (
            "Trying to reset UCX but not all Endpoints and/or Listeners "
            "are closed(). The following objects are still referencing "
            "ApplicationContext: "
        )
        for ctx in alive:
            for o in gc.get_referrers(ctx):
                msg += "\n  %s" % str(o)
        del ctx, alive
        # Unlike UCX-Py, a failed reset leaves the live contexts in place: dropping them would
        # make the next call silently build a second UCX context beside the live one. (One
        # nothing used is gone; the other, if alive, becomes the global one.)
        _ctx, _other_ctx = (r() if r is not None else None for r in refs)
        if _ctx is None:
            _ctx, _other_ctx = _other_ctx, None
        raise UCXError(msg)
    _init_args = {}


def get_ucx_version():
    """The loaded UCX's ``(major, minor, release)``; does not initialise UCX."""
    return _ucx_async.get_ucx_version()


def progress():
    """Progresses the worker once (not needed with the automatic progress drivers)."""
    _get_ctx().worker.progress()
    if _other_ctx is not None:
        _other_ctx.worker.progress()


def get_config():
    """UCX's configuration (names without ``UCX_``): the context's if initialised, the
    environment's otherwise."""
    if _ctx is None:
        return ucx_api.get_current_options()
    return _ctx.get_config()


def register_am_allocator(allocator, allocator_type):
    return _get_ctx().register_am_allocator(allocator, allocator_type)


def create_listener(callback_func, port=None, endpoint_error_handling=True, ip=None, wire_protocol=None):
    """A listener on ``port`` (any free port if None) of ``ip`` (every IPv4 address if None;
    ``"::"`` for every IPv6 address, which takes IPv6 clients only).

    When ``ip`` names one address and this call creates the context, UCX's network transports
    are limited to the interface that owns it (``NET_DEVICES``), unless ``UCX_NET_DEVICES`` is
    set: otherwise UCX's tcp transport would also listen on every other interface, each on a
    port of its own. A context created earlier (``init()``, an endpoint) keeps its devices, and
    a ``UCXWarning`` says which other interfaces it exposes and how to restrict them.
    An IPv6 address gets a context whose tcp transport uses IPv6 (``TCP_AF_PRIO=inet6,inet``)
    unless ``UCX_TCP_AF_PRIO`` or ``init(options)`` chose one."""
    ctx, made = _ctx_for(ip, listener=True)
    if not made:
        _warn_about_other_interfaces(ctx, ip)
    return ctx.create_listener(
        callback_func,
        port,
        endpoint_error_handling=endpoint_error_handling,
        ip=ip,
        wire_protocol=wire_protocol,
    )


def _warn_about_other_interfaces(ctx, ip):
    """Warns where ``ctx``'s tcp transport listens beyond the interface that owns ``ip``, unless
    the user chose UCX's devices (``UCX_NET_DEVICES``, ``init``'s ``NET_DEVICES``)."""
    device = interface_of(ip) if ip else None
    if device is None:  # every address, a host name, or no interface owns it: nothing to narrow
        return
    if ctx.get_config().get("NET_DEVICES", "all") != "all":  # the user's choice
        return
    others = [d for d in tcp_devices(ctx) if d != device]
    if others:
        warnings.warn(
            f"create_listener(ip={ip!r}): UCX was initialised before this call for every interface, "
            f"so UCX's tcp transport also listens on {', '.join(others)} (a port of its own on each, "
            f"which takes connections from anyone who reaches it), not only on {device}. To expose "
            f"only {device}: set UCX_NET_DEVICES={device} before UCX is initialised, or call "
            f"ucp.init({{'NET_DEVICES': '{device}'}}), or create the listener with ip=... before "
            f"anything else initialises UCX.",
            UCXWarning,
            stacklevel=3,
        )


async def create_endpoint(ip_address, port, endpoint_error_handling=True):
    """Connects to the listener at ``ip_address`` (an IPv4 or IPv6 address, or a host name)
    and ``port``. An IPv6 address is served by a context whose tcp transport uses IPv6 (see
    ``create_listener``). Raises ``UCXConnectionRefused`` where no listener answered."""
    ip = await resolve(ip_address)
    ctx, _ = _ctx_for(ip)
    return await ctx.create_endpoint(ip, port, endpoint_error_handling=endpoint_error_handling)


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
    if _ctx is None:
        await asyncio.sleep(0)
    for ctx in _contexts():
        await ctx.flush()


def fence():
    for ctx in _contexts():
        ctx.fence()
