"""UCX-Py's exception hierarchy, and the `log_errors` helper.

Only `UCXConfigError` derives from `UCXError`; cancellations, resets, close and
truncation errors derive from `UCXBaseException` alone, so code that catches
`UCXError` (e.g. `Endpoint.close`) does not swallow them. Users rely on this.
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
