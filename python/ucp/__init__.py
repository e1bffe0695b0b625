"""ucx-async's `ucp`: UCX-Py's API on a Rust core.

This is the package skeleton: it loads UCX from the ``libucx`` wheel (as UCX-Py did) and
exposes the loaded UCX version. The full UCX-Py API is the subject of the Python-package issue.
"""
import os

# UCX-Py's import-time default: the memory-type cache off unless the user chose otherwise.
os.environ.setdefault("UCX_MEMTYPE_CACHE", "n")

try:
    import libucx

    # dlopen the wheel's libucs/libuct/libucp before the extension needs them, so the extension
    # works wherever the wheel is installed (RAPIDS_LIBUCX_PREFER_SYSTEM_LIBRARY=true prefers a
    # system UCX).
    libucx.load_library()
except ImportError:  # a system UCX, found by the dynamic loader
    pass

from ._ucx_async import get_ucx_version  # noqa: E402

__ucx_min_version__ = "1.18.0"
__ucx_version__ = "%d.%d.%d" % get_ucx_version()

__all__ = ["get_ucx_version"]
