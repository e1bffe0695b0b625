"""UCX-Py's exception hierarchy, and the `log_errors` helper.

Only `UCXConfigError` derives from `UCXError`; cancellations, resets, close and
truncation errors derive from `UCXBaseException` alone, so code that catches
`UCXError` (e.g. `Endpoint.close`) does not swallow them. Users rely on this.

`UCXConnectionRefused` is ours too: a connect that no listener answered (nothing listens at the
address, or its listener turned the connection away), which is not a peer's failure since
there never was a peer. It is also a `UCXConnectionReset` and a `UCXError`, as UCX-Py raised
for it. An address that cannot be reached raises `UCXUnreachable` (UCX-Py's). Both name the
address.

Two classes are ours, one per cause of an endpoint's end, raised by every operation that
the end fails (pending at that moment or started after):
- `UCXPeerFailure`: the peer failed (its process ended, the connection was reset, keepalive
  timed out, its network went silent for ``UCXA_PEER_TIMEOUT`` seconds).
- `UCXEndpointClosed`: this side closed or aborted the endpoint (also when the peer's close
  message asked it to).
A caller's own cancel (task cancel, `asyncio.wait_for` timeout) raises
`asyncio.CancelledError`, as anywhere in asyncio; `UCXCanceled` alone means UCX cancelled an
operation for another reason (`cancel_inflight_messages`, the worker going away). Each of
ours is also an instance of every class UCX-Py raised in its situation, so handlers written
for UCX-Py keep working.
"""
import contextlib
import logging

__all__ = [
    "UCXBaseException",
    "UCXError",
    "UCXConfigError",
    "UCXWarning",
    "UCXCloseError",
    "UCXCanceled",
    "UCXConnectionReset",
    "UCXMsgTruncated",
    "UCXNotConnected",
    "UCXUnreachable",
    "UCXPeerFailure",
    "UCXEndpointClosed",
    "UCXConnectionRefused",
    "log_errors",
]

logger = logging.getLogger("ucx")


@contextlib.contextmanager
def log_errors(reraise_exception=False):
    """Log any exception raised in the block on the "ucx" logger; swallow it unless `reraise_exception`."""
    try:
        yield
    except BaseException as e:
        logger.exception(e)
        if reraise_exception:
            raise


class UCXBaseException(Exception):
    pass


class UCXError(UCXBaseException):
    pass


class UCXConfigError(UCXError):
    pass


class UCXWarning(UserWarning):
    pass


class UCXCloseError(UCXBaseException):
    pass


class UCXCanceled(UCXBaseException):
    pass


class UCXConnectionReset(UCXBaseException):
    pass


class UCXMsgTruncated(UCXBaseException):
    pass


class UCXNotConnected(UCXBaseException):
    pass


class UCXUnreachable(UCXBaseException):
    pass


class UCXPeerFailure(UCXConnectionReset, UCXCanceled, UCXError):
    """The peer failed: its process ended, the connection was reset, keepalive timed out, or
    its network passed no packets for ``UCXA_PEER_TIMEOUT`` seconds (30 by default).
    UCX-Py raised ``UCXCanceled`` for receives pending at that moment, ``UCXError`` (with
    UCX's status text) for operations after, and ``UCXConnectionReset`` for some."""


class UCXEndpointClosed(UCXCloseError, UCXCanceled, AttributeError):
    """This side closed or aborted the endpoint. UCX-Py raised ``UCXCanceled`` for operations
    pending at the close, ``UCXCloseError`` for some after it, and ``AttributeError``
    (``'NoneType' object has no attribute ...``) for the rest."""


class UCXConnectionRefused(UCXConnectionReset, UCXError):
    """A connect that no listener answered: nothing listens at the address, or its listener
    turned the connection away. Not a ``UCXPeerFailure``: there never was a peer. UCX reports
    it as a reset connection, so UCX-Py raised ``UCXError`` or ``UCXConnectionReset``; this is
    both. The message names the address (``ip:port``)."""
