"""The package version (UCX-Py exposed ``__version__`` and ``__git_commit__``)."""
from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("ucx-async")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0.0.0"
__git_commit__ = ""
