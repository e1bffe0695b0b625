"""ucx-async's ``ucp``: UCX-Py's API and wire protocol on a Rust core.

Importing sets UCX-Py's ``UCX_*`` defaults (only where unset), loads UCX from the ``libucx``
wheel when it is installed (``RAPIDS_LIBUCX_PREFER_SYSTEM_LIBRARY=true`` prefers a system
UCX), and checks its version. UCX itself is initialised lazily by the first API call that
needs it (or ``ucp.init()``).
"""
import logging
import os

logger = logging.getLogger("ucx")

# UCX-Py's import-time default, needed before UCX is loaded: the memory-type cache off.
if "UCX_MEMTYPE_CACHE" not in os.environ:
    os.environ["UCX_MEMTYPE_CACHE"] = "n"

try:
    import libucx

    # dlopen the wheel's libucs/libuct/libucp before the extension needs them.
    libucx.load_library()
except ImportError:  # a system UCX, found by the dynamic loader
    pass

from ._ucx_async import get_ucx_version as _native_ucx_version  # noqa: E402

__ucx_min_version__ = "1.18.0"
__ucx_version__ = "%d.%d.%d" % _native_ucx_version()
if _native_ucx_version() < tuple(int(x) for x in __ucx_min_version__.split(".")):
    raise ImportError(
        f"Support for UCX {__ucx_version__} has ended. Please upgrade to {__ucx_min_version__} or newer."
    )

from .core import *  # noqa: E402,F401,F403
from .core import get_ucx_version  # noqa: E402,F401
from .utils import get_ucxpy_logger  # noqa: E402,F401
from ._libs.utils import get_address  # noqa: E402,F401
from ._libs.exceptions import (  # noqa: E402,F401
    UCXCanceled,
    UCXCloseError,
    UCXConnectionRefused,
    UCXEndpointClosed,
    UCXError,
    UCXPeerFailure,
)
from ._libs.arr import Array  # noqa: E402,F401
from ._ucx_async import HostBuffer, HostPool  # noqa: E402,F401
from ._version import __git_commit__, __version__  # noqa: E402,F401
from . import comm, core, exceptions, utils  # noqa: E402,F401

try:
    import pynvml  # noqa: F401
except ImportError:
    pynvml = None

logger = get_ucxpy_logger()

# UCX-Py's remaining import-time defaults, each only where the user has not chosen.
if "UCX_RNDV_THRESH" not in os.environ:
    os.environ["UCX_RNDV_THRESH"] = "8192"
if "UCX_RNDV_FRAG_MEM_TYPE" not in os.environ:
    os.environ["UCX_RNDV_FRAG_MEM_TYPE"] = "cuda"
if "UCX_MAX_RNDV_RAILS" not in os.environ:
    os.environ["UCX_MAX_RNDV_RAILS"] = "1"
# Non-blocking connects for UCX's tcp transport (ucx-core's LIBRARY_DEFAULTS too): a blocking
# connect() runs inside progress and froze the event loop while connection attempts were
# dropped (docs/configuration.md).
if "UCX_TCP_CONN_NB" not in os.environ:
    os.environ["UCX_TCP_CONN_NB"] = "y"
# UCX_MM_ERROR_HANDLING is left to UCX (off), as UCX-Py did. With it on, shared memory serves
# endpoints with peer-failure handling (on one host: a third of the latency, 17-22x the
# bandwidth at 1 MiB), but a peer killed while writing into a process's shared-memory queue
# jams that queue for every other peer (docs/python.md, "Shared memory and dead peers").
if pynvml is not None and "UCX_CUDA_COPY_MAX_REG_RATIO" not in os.environ:
    # Registering all of a GPU's memory only works where BAR1 covers it on every GPU.
    try:
        pynvml.nvmlInit()
        large_bar1 = True
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            try:
                if pynvml.nvmlDeviceGetMigMode(handle)[0]:
                    continue
            except pynvml.NVMLError:
                pass
            total = pynvml.nvmlDeviceGetMemoryInfo(handle).total
            bar1 = pynvml.nvmlDeviceGetBAR1MemoryInfo(handle).bar1Total
            large_bar1 &= total <= bar1
        if large_bar1:
            os.environ["UCX_CUDA_COPY_MAX_REG_RATIO"] = "1.0"
    except Exception:  # no driver, no GPU
        pass
