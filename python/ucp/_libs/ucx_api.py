"""UCX-Py's low-level API names (``ucp._libs.ucx_api``) over the native extension.

Provided so far: ``Feature``, ``AllocatorType``, ``UCXAddress``, ``get_current_options``,
``get_ucx_version`` and the exception classes. The callback-style transfer functions of
UCX-Py's Cython module are not provided yet (see the project README).
"""
import enum

from .. import _ucx_async
from .exceptions import *  # noqa: F401,F403

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


class UCXAddress(bytes):
    """A worker address: the opaque bytes of ``ucp_worker_get_address``. It is ``bytes``, so it
    has the buffer protocol, hashes by value and pickles."""

    @classmethod
    def from_buffer(cls, buffer):
        """An address from anything with the buffer protocol (the bytes are copied)."""
        return cls(memoryview(buffer).tobytes())

    @classmethod
    def from_worker(cls, worker):
        """The address of a native worker."""
        return cls(worker.address())

    @property
    def length(self):
        """Length in bytes."""
        return len(self)

    def __reduce__(self):
        return (UCXAddress.from_buffer, (bytes(self),))
