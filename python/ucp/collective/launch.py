"""Where a rank learns its place in the job: the variables launchers set (torchrun, Open MPI,
PMI, MPICH, our ``python -m ucp.launch``), the rendezvous-file and error-handling variables,
a port for rank 0 to listen on, and the network devices nearest a rank's GPU. ucx-async's twin is ``collective/launch.rs``."""
import os
import random
import socket

#: The variable naming a rendezvous file (``Communicator.bootstrap``'s ``rendezvous_file``).
RENDEZVOUS_FILE = "UCXA_RENDEZVOUS_FILE"
#: The variable choosing the ranks' error handling, ``peer`` or ``none``
#: (``Communicator.bootstrap``'s ``error_handling``).
ERROR_HANDLING = "UCXA_ERROR_HANDLING"


def free_port(host="127.0.0.1"):
    """A port on ``host`` that nothing is bound to and that the kernel does not hand out by
    itself, for a launcher to give rank 0 (``MASTER_PORT``) before the ranks start. A port
    from binding port 0 is from the kernel's ephemeral range, from which every socket the
    starting ranks open draws (UCX's own among them), so another rank could hold it by the
    time rank 0 listens: a job failed so ("Address already in use"). Ports outside that range
    (``/proc/sys/net/ipv4/ip_local_port_range``), from 10000 up, are taken only by an explicit
    bind."""
    low, high = _ephemeral_ports()
    outside = [(10000, low - 1), (high + 1, 65535)]
    outside = [(a, b) for a, b in outside if a <= b]
    rng = random.SystemRandom()
    for _ in range(100):
        a, b = rng.choices(outside, weights=[b - a + 1 for a, b in outside])[0]
        port = rng.randint(a, b)
        with socket.socket() as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
        return port
    with socket.socket() as s:  # every try was taken: any free port, as before
        s.bind((host, 0))
        return s.getsockname()[1]


def _ephemeral_ports():
    """The kernel's range of ports for sockets bound to port 0 (Linux's default elsewhere)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low, high = (int(v) for v in f.read().split())
        return low, high
    except (OSError, ValueError):
        return 32768, 60999


def launch_env(environ=None):
    """``(rank, size, host, port)`` from what launchers set: torchrun (``RANK``,
    ``WORLD_SIZE``), Open MPI (``OMPI_COMM_WORLD_RANK``/``_SIZE``) or PMI (``PMI_RANK``/
    ``_SIZE``), with rank 0's address in ``MASTER_ADDR``/``MASTER_PORT``. Where
    ``UCXA_RENDEZVOUS_FILE`` is set (ranks meet at that file, see ``Communicator.bootstrap``),
    ``port`` is ``None`` (rank 0 takes any free port) and ``host`` defaults to 127.0.0.1, as in
    ucx-async's ``Launch``. Raises ``ValueError`` naming what is missing or wrong."""
    env = os.environ if environ is None else environ
    pairs = [("RANK", "WORLD_SIZE"), ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"), ("PMI_RANK", "PMI_SIZE")]
    found = next(((r, s) for r, s in pairs if r in env and s in env), None)
    if found is None:
        raise ValueError("no launcher variables: set RANK and WORLD_SIZE (as torchrun does)")

    def number(name):
        try:
            return int(env[name])
        except (KeyError, ValueError):
            raise ValueError(f"{name}={env.get(name)!r} is not a number") from None

    rank, size = number(found[0]), number(found[1])
    if not 1 <= size <= 1 << 16:
        raise ValueError(f"{found[1]}={size}: a world has 1 to 65536 ranks")
    if not 0 <= rank < size:
        raise ValueError(f"{found[0]}={rank} is not below {found[1]}={size}")
    if env.get(RENDEZVOUS_FILE):
        return rank, size, env.get("MASTER_ADDR", "127.0.0.1"), None
    if "MASTER_ADDR" not in env:
        raise ValueError(f"MASTER_ADDR is not set (rank 0's host), nor {RENDEZVOUS_FILE} (a file to meet at)")
    port = number("MASTER_PORT")
    if not 1 <= port <= 65535:
        raise ValueError(f"MASTER_PORT={port} is not a port number")
    return rank, size, env["MASTER_ADDR"], port


def local_rank(environ=None):
    """This process's rank among the ranks on its host: ``LOCAL_RANK`` (torchrun, our
    launcher), ``OMPI_COMM_WORLD_LOCAL_RANK`` (Open MPI), ``MPI_LOCALRANKID`` (MPICH), else 0."""
    env = os.environ if environ is None else environ
    for name in ("LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID"):
        if name in env:
            try:
                return int(env[name])
            except ValueError:
                raise ValueError(f"{name}={env[name]!r} is not a number") from None
    return 0


def rank_net_devices(environ=None, xml=None):
    """The ``UCX_NET_DEVICES`` value for this rank: the devices nearest the CUDA device of its
    local rank (each rank on a host drives its own GPU), else nearest its CPUs; ``None`` when
    nothing fits (``topological_distance.auto_net_devices``, the Dask comm's rule too)."""
    from .._libs.topological_distance import auto_net_devices

    return auto_net_devices(local_rank(environ), xml=xml)
