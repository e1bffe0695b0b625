"""The `ucp-async` benchmark backend: round trips over `ucp` endpoints with asyncio, using only
the public API (`ucp.init`, `create_listener`, `create_endpoint`, `Endpoint.send/recv/am_send/am_recv`).
"""
import asyncio
from argparse import Namespace
from queue import Queue

import ucp
from ucp._libs.utils import print_key_value
from ucp.benchmarks.backends.base import BaseClient, BaseServer, timed_round_trips
from ucp.benchmarks.utils import get_allocator


def register_am_allocators(args: Namespace):
    """With `--enable-am`, make received active messages arrive as arrays of the benchmarked type."""
    if not args.enable_am:
        return

    import numpy as np

    ucp.register_am_allocator(lambda n: np.empty(n, dtype=np.uint8), "host")
    if args.object_type == "cupy":
        import cupy as cp

        ucp.register_am_allocator(lambda n: cp.empty(n, dtype=cp.uint8), "cuda")
    elif args.object_type == "rmm":
        import rmm

        ucp.register_am_allocator(lambda n: rmm.DeviceBuffer(size=n), "cuda")


class UCXPyAsyncServer(BaseServer):
    has_cuda_support = True

    def __init__(self, args: Namespace, queue: Queue):
        self.args = args
        self.queue = queue

    async def run(self):
        ucp.init()
        args = self.args
        xp = get_allocator(args.object_type, args.rmm_init_pool_size, args.rmm_managed_memory)
        register_am_allocators(args)
        listener = None
        failure = []

        async def echo(ep):
            try:
                if not args.enable_am and args.reuse_alloc:
                    recv_msg = xp.zeros(args.n_bytes, dtype="u1")
                for _ in range(args.n_iter + args.n_warmup_iter):
                    if args.enable_am:
                        await ep.am_send(await ep.am_recv())
                    else:
                        if not args.reuse_alloc:
                            recv_msg = xp.zeros(args.n_bytes, dtype="u1")
                        await ep.recv(recv_msg)
                        await ep.send(recv_msg)
                await ep.close()
            except Exception as e:  # the client failed: the server ends with the error
                failure.append(e)
            finally:
                listener.close()

        listener = ucp.create_listener(echo, port=args.port, endpoint_error_handling=args.error_handling)
        self.queue.put(listener.port)
        while not listener.closed():
            await asyncio.sleep(0.1)
        if failure:
            raise failure[0]


class UCXPyAsyncClient(BaseClient):
    has_cuda_support = True

    def __init__(self, args: Namespace, queue: Queue, server_address: str, port: int):
        self.args = args
        self.queue = queue
        self.server_address = server_address
        self.port = port

    async def run(self):
        ucp.init()
        args = self.args
        xp = get_allocator(args.object_type, args.rmm_init_pool_size, args.rmm_managed_memory)
        register_am_allocators(args)

        ep = await ucp.create_endpoint(self.server_address, self.port, endpoint_error_handling=args.error_handling)

        send_msg = xp.arange(args.n_bytes, dtype="u1")
        recv_msg = xp.zeros(args.n_bytes, dtype="u1") if args.reuse_alloc else None

        if args.cuda_profile:
            xp.cuda.profiler.start()

        async def round_trip(i):
            if args.enable_am:
                await ep.am_send(send_msg)
                await ep.am_recv()
            else:
                msg = recv_msg if args.reuse_alloc else xp.zeros(args.n_bytes, dtype="u1")
                await ep.send(send_msg)
                await ep.recv(msg)

        await timed_round_trips(args, self.queue, round_trip)
        if args.cuda_profile:
            xp.cuda.profiler.stop()

    def print_backend_specific_config(self):
        config = ucp.get_config()
        print_key_value(key="Transfer API", value="AM" if self.args.enable_am else "TAG")
        print_key_value(key="UCX_TLS", value=config["TLS"])
        print_key_value(key="UCX_NET_DEVICES", value=config["NET_DEVICES"])
