"""The `tornado` benchmark backend: the same round trips over plain TCP streams, as a baseline
(host memory only; needs the `tornado` package).
"""
import asyncio

import numpy as np
from tornado.iostream import StreamClosedError
from tornado.tcpclient import TCPClient
from tornado.tcpserver import TCPServer

from ucp.benchmarks.backends.base import BaseClient, BaseServer, timed_round_trips

# Large enough for messages up to 1 GiB (tornado's default is 100 MiB).
MAX_BUFFER_SIZE = 1024**3


class TornadoServer(BaseServer):
    has_cuda_support = False

    def __init__(self, args, queue):
        self.args = args
        self.queue = queue

    def _start_listener(self, server, port):
        """Listen on `port`, or on the first free port from 10000 up when it is None."""
        if port is not None:
            server.listen(port)
            return port
        for candidate in range(10000, 60000):
            try:
                server.listen(candidate)
            except OSError:
                continue
            return candidate
        raise RuntimeError("No free port between 10000 and 60000")

    async def run(self):
        args = self.args
        done = asyncio.Event()

        class EchoServer(TCPServer):
            async def handle_stream(self, stream, address):
                if args.reuse_alloc:
                    recv_msg = np.zeros(args.n_bytes, dtype="u1")
                for _ in range(args.n_iter + args.n_warmup_iter):
                    if not args.reuse_alloc:
                        recv_msg = np.zeros(args.n_bytes, dtype="u1")
                    try:
                        await stream.read_into(recv_msg.data)
                        await stream.write(recv_msg.data)
                    except StreamClosedError as e:
                        print(e)
                        break
                done.set()

        server = EchoServer(max_buffer_size=MAX_BUFFER_SIZE)
        self.queue.put(self._start_listener(server, args.port))
        await done.wait()


class TornadoClient(BaseClient):
    has_cuda_support = False

    def __init__(self, args, queue, server_address, port):
        self.args = args
        self.queue = queue
        self.server_address = server_address
        self.port = port

    async def run(self):
        args = self.args
        stream = await TCPClient().connect(self.server_address, self.port, max_buffer_size=MAX_BUFFER_SIZE)

        send_msg = np.arange(args.n_bytes, dtype="u1")
        recv_msg = np.zeros(args.n_bytes, dtype="u1") if args.reuse_alloc else None

        async def round_trip(i):
            msg = recv_msg if args.reuse_alloc else np.zeros(args.n_bytes, dtype="u1")
            await stream.write(send_msg.data)
            await stream.read_into(msg.data)

        await timed_round_trips(args, self.queue, round_trip)
