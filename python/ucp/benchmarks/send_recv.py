"""Round-trip (ping-pong) benchmark between a server and a client process.

The client sends a message, the server echoes it back; the report gives half the round-trip
time as latency and 2 x message size / round-trip time as bandwidth.

On one machine:
    UCX_TLS=tcp,cuda_copy,cuda_ipc python -m ucp.benchmarks.send_recv \\
        --server-dev 2 --client-dev 1 --object_type rmm --reuse-alloc --n-bytes 1GB

On two machines:
    # server
    python -m ucp.benchmarks.send_recv --server-only --port 13337 --n-bytes 1GB --n-iter 100
    # client
    python -m ucp.benchmarks.send_recv --client-only --server-address SERVER_IP --port 13337 \\
        --n-bytes 1GB --n-iter 100

Backends (-l): "ucp-async" (the `ucp` asyncio API, default) and "tornado" (TCP baseline);
"ucp-core" (UCX-Py's low-level API) is not supported yet.
"""
import argparse
import asyncio
import os

import numpy as np

import ucp
from ucp._libs.utils import format_bytes, parse_bytes, print_key_value, print_separator
from ucp.utils import get_event_loop, mp, stop, supervise, wait_for_port

BACKENDS = ["ucp-async", "ucp-core", "tornado"]


def _get_backend_implementation(backend):
    if backend == "ucp-async":
        from ucp.benchmarks.backends.ucp_async import UCXPyAsyncClient, UCXPyAsyncServer

        return {"client": UCXPyAsyncClient, "server": UCXPyAsyncServer}
    if backend == "tornado":
        try:
            from ucp.benchmarks.backends.tornado import TornadoClient, TornadoServer
        except ImportError as e:
            raise RuntimeError(f"The 'tornado' backend needs the `tornado` package: {e}") from e
        return {"client": TornadoClient, "server": TornadoServer}
    raise ValueError(f"Unknown backend {backend}")


def _set_cuda_device(object_type, device):
    if object_type in ("cupy", "rmm"):
        import numba.cuda

        os.environ["CUDA_VISIBLE_DEVICES"] = str(device)
        numba.cuda.current_context()


def _run(obj):
    if asyncio.iscoroutinefunction(obj.run):
        get_event_loop().run_until_complete(obj.run())
    else:
        obj.run()


def server(queue, args):
    if args.server_cpu_affinity >= 0:
        os.sched_setaffinity(0, [args.server_cpu_affinity])
    _set_cuda_device(args.object_type, args.server_dev)
    _run(_get_backend_implementation(args.backend)["server"](args, queue))


def client(queue, port, server_address, args):
    if args.client_cpu_affinity >= 0:
        os.sched_setaffinity(0, [args.client_cpu_affinity])
    _set_cuda_device(args.object_type, args.client_dev)
    client = _get_backend_implementation(args.backend)["client"](args, queue, server_address, port)
    _run(client)

    times = queue.get()
    if args.report_gil_contention:
        contention_metric = queue.get()

    assert len(times) == args.n_iter
    # Each iteration moves the message twice (there and back): latency is half a round trip.
    bw_avg = format_bytes(2 * args.n_iter * args.n_bytes / sum(times))
    bw_med = format_bytes(2 * args.n_bytes / np.median(times))
    lat_avg = int(sum(times) * 1e9 / (2 * args.n_iter))
    lat_med = int(np.median(times) * 1e9 / 2)

    print("Roundtrip benchmark")
    print_separator(separator="=")
    print_key_value(key="Iterations", value=f"{args.n_iter}")
    print_key_value(key="Bytes", value=f"{format_bytes(args.n_bytes)}")
    print_key_value(key="Object type", value=f"{args.object_type}")
    print_key_value(key="Reuse allocation", value=f"{args.reuse_alloc}")
    client.print_backend_specific_config()
    print_separator(separator="=")
    if args.object_type == "numpy":
        print_key_value(key="Device(s)", value="CPU-only")
        s_aff = args.server_cpu_affinity if args.server_cpu_affinity >= 0 else "affinity not set"
        c_aff = args.client_cpu_affinity if args.client_cpu_affinity >= 0 else "affinity not set"
        print_key_value(key="Server CPU", value=f"{s_aff}")
        print_key_value(key="Client CPU", value=f"{c_aff}")
    else:
        print_key_value(key="Device(s)", value=f"{args.server_dev}, {args.client_dev}")
    print_separator(separator="=")
    print_key_value("Bandwidth (average)", value=f"{bw_avg}/s")
    print_key_value("Bandwidth (median)", value=f"{bw_med}/s")
    print_key_value("Latency (average)", value=f"{lat_avg} ns")
    print_key_value("Latency (median)", value=f"{lat_med} ns")
    if args.report_gil_contention:
        print_key_value("GIL contention", value=f"{contention_metric}")
    if not args.no_detailed_report:
        print_separator(separator="=")
        print_key_value(key="Iterations", value="Bandwidth, Latency")
        print_separator(separator="-")
        for i, t in enumerate(times):
            print_key_value(key=i, value=f"{format_bytes(2 * args.n_bytes / t)}/s, {int(t * 1e9 / 2)}ns")


def _default_server_address():
    try:
        return ucp.get_address()
    except RuntimeError:
        # No ib/eth/en/docker interface has an address (UCX-Py stopped here). The default
        # setup runs both processes on this machine, where loopback reaches the server.
        return "127.0.0.1"


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description="Roundtrip benchmark")
    parser.add_argument(
        "-n",
        "--n-bytes",
        metavar="BYTES",
        default="10 Mb",
        type=parse_bytes,
        help="Message size, e.g. 100, '1 kB', '10 MiB'. Default '10 Mb' (10_000_000 bytes).",
    )
    parser.add_argument(
        "--n-iter", metavar="N", default=10, type=int, help="Number of send / recv iterations (default 10)."
    )
    parser.add_argument(
        "--n-warmup-iter", default=10, type=int, help="Number of send / recv warmup iterations (default 10)."
    )
    parser.add_argument(
        "-b",
        "--server-cpu-affinity",
        metavar="N",
        default=-1,
        type=int,
        help="CPU affinity for server process (default -1: not set).",
    )
    parser.add_argument(
        "-c",
        "--client-cpu-affinity",
        metavar="N",
        default=-1,
        type=int,
        help="CPU affinity for client process (default -1: not set).",
    )
    parser.add_argument(
        "-o", "--object_type", default="numpy", choices=["numpy", "cupy", "rmm"], help="In-memory array type."
    )
    parser.add_argument(
        "-v", "--verbose", default=False, action="store_true", help="Whether to print timings per iteration."
    )
    parser.add_argument(
        "-s",
        "--server-address",
        metavar="ip",
        default=_default_server_address(),
        type=str,
        help="Server address (default `ucp.get_address()`, or 127.0.0.1 if no interface qualifies).",
    )
    parser.add_argument(
        "-d", "--server-dev", metavar="N", default=0, type=int, help="GPU device on server (default 0)."
    )
    parser.add_argument(
        "-e", "--client-dev", metavar="N", default=0, type=int, help="GPU device on client (default 0)."
    )
    parser.add_argument(
        "--reuse-alloc", default=False, action="store_true", help="Reuse memory allocations between communication."
    )
    parser.add_argument(
        "--cuda-profile",
        default=False,
        action="store_true",
        help="Setting CUDA profiler.start()/stop() around send/recv typically used with "
        "`nvprof --profile-from-start off --profile-child-processes`",
    )
    parser.add_argument(
        "--rmm-init-pool-size",
        metavar="BYTES",
        default=None,
        type=int,
        help="Initial RMM pool size (default 1/2 total GPU memory)",
    )
    parser.add_argument(
        "--server-only",
        default=False,
        action="store_true",
        help="Start up only a server process (to be used with --client-only).",
    )
    parser.add_argument(
        "--client-only",
        default=False,
        action="store_true",
        help="Connect to solitary server process (to be used with --server-only)",
    )
    parser.add_argument(
        "-p",
        "--port",
        default=None,
        type=int,
        help="The port the server will bind to, if not specified, UCX will bind to a random port. "
        "Must be specified when --client-only is used.",
    )
    parser.add_argument(
        "--enable-am",
        default=False,
        action="store_true",
        help="Use Active Message API instead of TAG for transfers",
    )
    parser.add_argument(
        "--rmm-managed-memory",
        default=False,
        action="store_true",
        help="Use RMM managed memory (requires `--object_type rmm`)",
    )
    parser.add_argument(
        "--no-detailed-report", default=False, action="store_true", help="Disable detailed report per iteration."
    )
    parser.add_argument(
        "-l",
        "--backend",
        default="ucp-async",
        choices=BACKENDS,
        help="Backend Library (-l) to use, options are: 'ucp-async' (default), 'ucp-core' (not supported yet) "
        "and 'tornado'.",
    )
    parser.add_argument(
        "--report-gil-contention",
        default=False,
        action="store_true",
        help="Report GIL contention (requires the `gilknocker` package).",
    )
    parser.add_argument(
        "--delay-progress",
        default=False,
        action="store_true",
        help="Only applies to 'ucp-core' backend: delay ucp_worker_progress calls until a minimum number of "
        "outstanding operations is reached, implies non-blocking send/recv. The --max-outstanding argument may "
        "be used to control number of maximum outstanding operations. (Default: disabled)",
    )
    parser.add_argument(
        "--max-outstanding",
        metavar="N",
        default=32,
        type=int,
        help="Only applies to 'ucp-core' backend: number of maximum outstanding operations, see "
        "--delay-progress. (Default: 32)",
    )
    parser.add_argument(
        "--error-handling",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="Enable endpoint error handling.",
    )

    args = parser.parse_args(argv)

    if args.backend == "ucp-core":
        parser.error(
            "the 'ucp-core' backend (UCX-Py's low-level `ucx_api` benchmark) is not supported yet; "
            "use '-l ucp-async' or '-l tornado'"
        )
    if args.client_only and args.port is None:
        parser.error("--client-only requires --port (the port the server listens on)")
    if args.cuda_profile and args.object_type == "numpy":
        raise RuntimeError("`--cuda-profile` requires `--object_type=cupy` or `--object_type=rmm`")
    if args.rmm_managed_memory and args.object_type != "rmm":
        raise RuntimeError("`--rmm-managed-memory` requires `--object_type=rmm`")

    backend_impl = _get_backend_implementation(args.backend)
    if not (backend_impl["client"].has_cuda_support and backend_impl["server"].has_cuda_support):
        if args.object_type in {"cupy", "rmm"}:
            raise RuntimeError(f"Backend '{args.backend}' does not support CUDA transfers")

    if args.backend != "ucp-core" and args.delay_progress:
        raise RuntimeError("`--delay-progress` requires `--backend=ucp-core`")

    if args.report_gil_contention:
        try:
            import gilknocker  # noqa: F401
        except ImportError:
            raise RuntimeError(
                "Could not import `gilknocker`. Make sure it is installed or remove the "
                "`--report-gil-contention` argument."
            ) from None

    return args


def main():
    args = parse_args()
    server_address = args.server_address

    # --server-only starts only the server process, --client-only only the client; by default both.
    if not args.client_only:
        q1 = mp.Queue()
        p1 = mp.Process(target=server, args=(q1, args))
        p1.start()
        try:
            port = wait_for_port(q1, p1)
        except RuntimeError:
            stop(p1)
            raise
        print(f"Server Running at {server_address}:{port}")
    else:
        port = args.port

    if not args.server_only or args.client_only:
        print(f"Client connecting to server at {server_address}:{port}")
        q2 = mp.Queue()
        p2 = mp.Process(target=client, args=(q2, port, server_address, args))
        p2.start()
        # A failure on either side stops the other within seconds (never a hang).
        supervise({"server": p1, "client": p2} if not args.client_only else {"client": p2})
    else:
        supervise({"server": p1})


if __name__ == "__main__":
    main()
