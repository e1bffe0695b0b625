"""Public home of UCX-Py's exceptions (`ucp.exceptions.UCXError`, ...); they live in `ucp._libs.exceptions`."""
from ._libs.exceptions import *  # noqa: F401,F403
