"""The interface each send/recv benchmark backend implements (a server and a client class)."""
from abc import ABC, abstractmethod
from argparse import Namespace
from queue import Queue
from time import monotonic


async def timed_round_trips(args: Namespace, queue: Queue, round_trip):
    """Awaits ``round_trip(i)`` for the warm-up and measured iterations and puts the times of
    the measured ones into ``queue``, then (with ``--report-gil-contention``) the GIL
    contention seen meanwhile: what every backend's client reports."""
    if args.report_gil_contention:
        from gilknocker import KnockKnock

        # The smallest polling interval: with coarser ones small messages always read zero.
        knocker = KnockKnock(polling_interval_micros=1)
        knocker.start()

    times = []
    for i in range(args.n_iter + args.n_warmup_iter):
        start = monotonic()
        await round_trip(i)
        stop = monotonic()
        if i >= args.n_warmup_iter:
            times.append(stop - start)

    if args.report_gil_contention:
        knocker.stop()
    queue.put(times)
    if args.report_gil_contention:
        queue.put(knocker.contention_metric)


class BaseServer(ABC):
    @abstractmethod
    def __init__(self, args: Namespace, queue: Queue):
        """Benchmark server.

        Parameters
        ----------
        args: argparse.Namespace
            Parsed command-line arguments, used by `run`.
        queue: Queue
            Where the server puts the port it listens on.
        """

    @property
    @abstractmethod
    def has_cuda_support() -> bool:
        """Whether the server can transfer CUDA memory (subclasses set a class attribute)."""
        return False

    @abstractmethod
    def run(self):
        """Run the benchmark server (a plain or a coroutine function).

        1. Listen and put the port into the queue given to the constructor;
        2. set up anything else needed (allocators, reusable buffers);
        3. echo every message the client sends back to it;
        4. shut down.
        """


class BaseClient(ABC):
    @abstractmethod
    def __init__(self, args: Namespace, queue: Queue, server_address: str, port: int):
        """Benchmark client.

        Parameters
        ----------
        args: argparse.Namespace
            Parsed command-line arguments, used by `run`.
        queue: Queue
            Where the client puts its timings.
        server_address: str
            Host name or IP address the server listens at.
        port: int
            Port the server listens on.
        """

    @property
    @abstractmethod
    def has_cuda_support() -> bool:
        """Whether the client can transfer CUDA memory (subclasses set a class attribute)."""
        return False

    @abstractmethod
    def run(self):
        """Run the benchmark client (a plain or a coroutine function).

        1. Connect to the server;
        2. set up anything else needed (allocators, reusable buffers);
        3. time round trips (send, then receive the echo), warm-up iterations excluded;
        4. shut down;
        5. put the list of per-iteration seconds into the queue given to the constructor
           (then the GIL contention metric, if `--report-gil-contention`).
        """

    def print_backend_specific_config(self):
        """Print the backend's own settings as "key | value" lines of the report."""
