"""Small helpers shared by the `ucp` package and its users (UCX-Py's `ucp.utils`).

`hash64bits` derives tags and the handshake checksum, so its output must stay
bit-identical to UCX-Py's: peers running UCX-Py check it on the wire.
"""
import asyncio
import hashlib
import logging
import multiprocessing
import os
import socket
import time

import numpy as np

# Spawn, not fork: forking a process that holds UCX contexts or CUDA state breaks the child.
mp = multiprocessing.get_context("spawn")


def get_event_loop():
    """The running event loop, or a new one (not set as current) when none is running.

    Unlike `asyncio.get_event_loop()` this neither warns nor fails outside a running loop.
    """
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.new_event_loop()


class _HostTimeFilter(logging.Filter):
    """Adds the `timestamp` and `hostname` fields that the UCX-Py log format uses."""

    def filter(self, record):
        record.timestamp = "%.6f" % time.time()
        record.hostname = socket.gethostname()
        return True


def get_ucxpy_logger():
    """The "ucx" logger, configured as UCX-Py does.

    Level from `UCXPY_LOG_LEVEL` (default WARNING), no propagation to the root logger,
    and one stream handler printing e.g. ``[1585175070.291146] [host:1054] UCXPY  WARNING Test``.
    Calling it again re-reads the level but does not add another handler.
    """
    logger = logging.getLogger("ucx")
    logger.propagate = False
    if not any(getattr(h, "_ucxpy_handler", False) for h in logger.handlers):
        handler = logging.StreamHandler()
        handler._ucxpy_handler = True
        handler.setFormatter(
            logging.Formatter("[%(timestamp)s] [%(hostname)s:%(process)d] UCXPY  %(levelname)s %(message)s")
        )
        handler.addFilter(_HostTimeFilter())
        logger.addHandler(handler)
    # Upper-cased so that "debug" works too; an unknown name raises ValueError, as in UCX-Py.
    logger.setLevel(logging.getLevelName(os.getenv("UCXPY_LOG_LEVEL", "WARNING").upper()))
    return logger


def hash64bits(*args):
    """64-bit unsigned hash of `args`: the first 8 bytes (big-endian) of SHA-1 over `repr(args)`."""
    return int(hashlib.sha1(repr(args).encode()).hexdigest()[:16], 16)


def hmean(a):
    """Harmonic mean of the values in `a` (0 when there are none)."""
    a = np.asarray(a, dtype=float)
    if len(a):
        return 1 / np.mean(1 / a)
    return 0
