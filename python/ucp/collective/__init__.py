"""Collectives over N ranks: ``Communicator``, the Python face of ucx-async's (same tags, same
bootstrap bytes, so Python and Rust ranks can share one job).

Every rank connects to rank 0's listener and sends its hello (rank, world size, worker
address) framed as ``send_obj``; rank 0 answers each with the table of all worker addresses;
then every rank has an endpoint to every rank's worker (itself included). Messages carry
their source in the tag (``ucp._ucx_async.collective_user_tag``/``collective_own_tag``), and
the communicator's own operations are numbered in call order: every rank must call the same
collectives in the same order, each awaited before the next, as with MPI.

``alltoallv`` parts travel on one of two paths (``set_data_path``), as in ucx-async: direct
(one message per part, from and into the caller's buffers) or buffered (batches copied through
a pool of bounce buffers made once, a window of them in flight). ``"auto"`` picks buffered only
for large parts to peers over an RDMA network. Each part's announcement tells its receiver
which path it takes, so ranks may choose differently; the bytes, the batch arithmetic and the
automatic rule are ucx-core's (``wire::alltoallv``). ``alltoallv_device`` moves CUDA
arrays, each part one message from device memory to device memory.

The package's modules: ``launch`` (the launchers' variables, rank 0's port, a rank's nearest
devices),
``bootstrap`` (how ranks meet), ``communicator`` (``Communicator`` and its collectives),
``posted`` (a call's operations, posted before anything waits, and the inline spin),
``shared_window`` (``SharedWindow``: an all-to-all through shared-memory windows, each part
copied once into the receiver's memory, for ranks on one host).
"""
from .bootstrap import BOOTSTRAP_TIMEOUT
from .communicator import Communicator
from .shared_window import SharedWindow
from .launch import ERROR_HANDLING, RENDEZVOUS_FILE, free_port, launch_env, local_rank, rank_net_devices

__all__ = [
    "BOOTSTRAP_TIMEOUT",
    "Communicator",
    "ERROR_HANDLING",
    "RENDEZVOUS_FILE",
    "SharedWindow",
    "free_port",
    "launch_env",
    "local_rank",
    "rank_net_devices",
]
