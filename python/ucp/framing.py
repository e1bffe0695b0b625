"""How a message of several parts is framed, and how large a peer may make one: UCXX's
multi-frame header (``send_multi``/``recv_multi``; the bytes are ucx-core's ``wire::multi_frame``),
``send_obj``'s length prefix (``wire::obj_len``), and the limits ``recv_obj`` and ``recv_multi``
apply to sizes a peer announces."""
import os

from . import _ucx_async as _native
from ._libs.exceptions import UCXError

__all__ = ["MultiHeader", "default_max_message_size"]

# The most frames `recv_multi` accepts in one message (Dask sends tens to thousands).
MAX_FRAMES = 1_000_000


class MultiHeader:
    """UCXX's multi-buffer header (``ucxx::Header``): up to ``FRAMES`` frames' memory types and
    sizes, and whether another header follows; ``SIZE`` bytes each."""

    FRAMES = _native.MULTI_FRAME_MAX_FRAMES
    SIZE = _native.MULTI_FRAME_HEADER_LEN  # 1209

    @staticmethod
    def pack_all(frames):
        """The headers for ``frames`` (``(is_cuda, nbytes)`` pairs); one even for none."""
        return _native.multi_frame_headers([(bool(c), int(n)) for c, n in frames])

    @staticmethod
    def unpack(header):
        """``(more_headers_follow, [(is_cuda, nbytes), ...])``; a corrupt header raises
        ``UCXError``."""
        try:
            return _native.multi_frame_decode(bytes(header))
        except ValueError as e:
            raise UCXError(f"recv_multi: {e}") from None


def encode_obj_len(nbytes):
    """``send_obj``'s 8-byte length prefix."""
    return _native.obj_len_encode(nbytes)


def decode_obj_len(prefix):
    """The length a ``send_obj`` prefix announces."""
    return _native.obj_len_decode(bytes(prefix))


OBJ_LEN_SIZE = len(encode_obj_len(0))


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


def refuse(ep, why):
    """Refuses what the peer announced: aborts the endpoint (the refused message's data would
    otherwise be read as the next message) and raises ``UCXError`` saying ``why``."""
    ep.abort()
    raise UCXError(f"{why}; the endpoint was closed")


def check_message_size(ep, what, nbytes, max_size):
    """Refuses a message above ``max_size`` (default ``default_max_message_size()``)."""
    if max_size is None:
        max_size = default_max_message_size()
    if nbytes > max_size:
        refuse(ep, f"{what}: the peer announced {nbytes} bytes, more than the maximum of {max_size}")


def device_buffer(nbytes):
    """Device memory for a received CUDA frame: RMM's, else CuPy's."""
    try:
        import rmm

        return rmm.DeviceBuffer(size=nbytes)
    except ImportError:
        import cupy

        return cupy.empty(nbytes, dtype="u1")
