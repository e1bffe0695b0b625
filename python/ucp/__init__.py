"""ucx-async's ``ucp``: UCX-Py's API and wire protocol on a Rust core.

Importing sets UCX-Py's ``UCX_*`` defaults (only where unset), loads UCX from the ``libucx``
wheel when it is installed (``RAPIDS_LIBUCX_PREFER_SYSTEM_LIBRARY=true`` prefers a system
UCX), and checks its version. UCX itself is initialised lazily by the first API call that
needs it (or ``ucp.init()``).
"""
import logging
import os

logger = logging.getLogger("ucx")

#: The ``UCX_*`` defaults this import set, name -> value (``python -m ucp.doctor`` shows them).
_defaults_applied = {}
#: The variables ``ucp`` has a default for that the user had set before the import, name ->
#: the user's value (kept).
_user_set = {}


def _set_default(name, value):
    """Sets environment variable ``name`` to ``value`` unless the user has set it, and records
    which of the two holds. ``value`` may be a function, called only where the variable is
    unset, whose ``None`` means no default here."""
    if name in os.environ:
        _user_set[name] = os.environ[name]
        return
    if callable(value):
        value = value()
        if value is None:
            return
    os.environ[name] = value
    _defaults_applied[name] = value


# UCX-Py's import-time default, needed before UCX is loaded: the memory-type cache off.
_set_default("UCX_MEMTYPE_CACHE", "n")

try:
    import libucx

    # dlopen the wheel's libucs/libuct/libucp before the extension needs them.
    libucx.load_library()
except ImportError:  # a system UCX, found by the dynamic loader
    pass

try:
    from ._ucx_async import get_ucx_version as _native_ucx_version  # noqa: E402
    from ._ucx_async import library_defaults as _native_library_defaults  # noqa: E402
except ImportError as e:  # the extension links libucp: without a usable UCX it cannot load
    if "libuc" not in str(e):
        raise
    raise ImportError(
        f"ucp cannot load the UCX library ({e}). Install the libucx-cu12 wheel "
        "(pip install libucx-cu12), or put a UCX >= 1.18 where the dynamic loader finds it."
    ) from e

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

# UCX-Py's remaining import-time defaults, each only where the user has not chosen. The
# rendezvous threshold is UCX-Py's 8192 within a host; between hosts messages under 64 KiB go
# eagerly, which spares them the rendezvous's round trip over TCP (scripts/sweep_rndv.py;
# docs/configuration.md has the figures).
_set_default("UCX_RNDV_THRESH", "intra:8192,inter:64k")
_set_default("UCX_RNDV_FRAG_MEM_TYPE", "cuda")
_set_default("UCX_MAX_RNDV_RAILS", "1")
# The library's own defaults, whose one home is ucx-core's LIBRARY_DEFAULTS (every context
# ucx-core makes applies them too): set here as well, so that they show in the environment
# for child processes and tools run with ucp's settings (docs/configuration.md says why each).
for _name, _value in _native_library_defaults():
    _set_default("UCX_" + _name, _value)
# UCX_MM_ERROR_HANDLING is left to UCX (off), as UCX-Py did. With it on, shared memory serves
# endpoints with peer-failure handling (on one host: a third of the latency, 17-22x the
# bandwidth at 1 MiB), but a peer killed while writing into a process's shared-memory queue
# jams that queue for every other peer (docs/python.md, "Shared memory and dead peers").


def _full_registration_ratio():
    """``"1.0"`` where BAR1 covers every GPU's memory: registering all of it only works there."""
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
        return "1.0" if large_bar1 else None
    except Exception:  # no driver, no GPU
        return None


if pynvml is not None:
    _set_default("UCX_CUDA_COPY_MAX_REG_RATIO", _full_registration_ratio)
