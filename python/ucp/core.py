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
import logging
import os
import re
import weakref
from functools import partial  # noqa: F401  (UCX-Py's namespace had it)

from . import _ucx_async
from ._libs import ucx_api
from ._libs.arr import Array  # noqa: F401  (re-exported, as before the split)
from ._libs.exceptions import (  # noqa: F401  (re-exported)
    UCXBaseException,
    UCXCanceled,
    UCXEndpointClosed,
    UCXError,
    UCXPeerFailure,
)
from .application import ApplicationContext, Listener
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


def initialized():
    """Whether the global context exists (``init()`` ran, or an API call made it)."""
    return _ctx is not None


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
