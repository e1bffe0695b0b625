"""UCX-Py's ``ucp._libs``: the low-level API (``ucx_api``), buffers (``arr``), exceptions and
utilities. Here they are thin Python over the native extension ``ucp._ucx_async``."""
from . import exceptions  # noqa: F401
