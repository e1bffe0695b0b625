"""UCX-Py's SSH cluster launcher, by name only: UCX-Py's benchmarks import ``run_ssh_cluster``
from here, so the module exists and they import unmodified. Launching over SSH is not offered;
start the benchmark's ``--server`` and its workers on each node by hand (each benchmark's
``--help`` says how)."""

__all__ = ["run_ssh_cluster"]


def run_ssh_cluster(args, server_host, worker_hosts, num_workers, get_server_command, get_worker_command):
    """Raises ``RuntimeError``: see the module doc."""
    raise RuntimeError(
        "multi-node launching over SSH (--hosts) is not offered by this ucp; start --server on "
        f"{server_host} and the workers on {', '.join(worker_hosts)} by hand"
    )
