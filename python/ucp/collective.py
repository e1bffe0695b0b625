"""Collectives over N ranks: ``Communicator``, the Python face of ucx-async's (same tags, same
bootstrap bytes, so Python and Rust ranks can share one job).

Every rank connects to rank 0's listener and sends its hello (rank, world size, worker
address) framed as ``send_obj``; rank 0 answers each with the table of all worker addresses;
then every rank has an endpoint to every rank's worker (itself included). Messages carry
their source in the tag (``ucp._ucx_async.collective_user_tag``/``collective_own_tag``), and
the communicator's own operations are numbered in call order: every rank must call the same
collectives in the same order, each awaited before the next, as with MPI.

Only host buffers and the direct path exist yet (no bounce-buffer pool, no batching).
"""
import asyncio
import os
import struct
import time

from . import _ucx_async as _native
from . import core
from ._libs.ucx_api import UCXAddress

__all__ = ["Communicator", "launch_env"]

# The longest hello rank 0 accepts (a worker address is a few hundred bytes to a few KiB);
# the same limit as ucx-async's.
_MAX_HELLO = 64 << 10
_SIZE = struct.Struct("<Q")
BOOTSTRAP_TIMEOUT = 60.0


def launch_env(environ=None):
    """``(rank, size, host, port)`` from what launchers set: torchrun (``RANK``,
    ``WORLD_SIZE``), Open MPI (``OMPI_COMM_WORLD_RANK``/``_SIZE``) or PMI (``PMI_RANK``/
    ``_SIZE``), with rank 0's address in ``MASTER_ADDR``/``MASTER_PORT``. Raises
    ``ValueError`` naming what is missing or wrong."""
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
    if "MASTER_ADDR" not in env:
        raise ValueError("MASTER_ADDR is not set (rank 0's host)")
    port = number("MASTER_PORT")
    if not 1 <= port <= 65535:
        raise ValueError(f"MASTER_PORT={port} is not a port number")
    return rank, size, env["MASTER_ADDR"], port


class Communicator:
    """One rank's view of an N-rank job; see the module doc. Make one with ``bootstrap`` or
    ``from_env``."""

    def __init__(self, rank, endpoints):
        self._rank = rank
        self._eps = endpoints
        self._seq = 0

    @property
    def rank(self):
        return self._rank

    @property
    def size(self):
        return len(self._eps)

    @classmethod
    async def from_env(cls):
        """Joins the job the launcher's environment describes (``launch_env``)."""
        rank, size, host, port = launch_env()
        return await cls.bootstrap(rank, size, host, port)

    @classmethod
    async def bootstrap(cls, rank, size, host, port):
        """Joins a job of ``size`` ranks as ``rank``: rank 0 listens on ``host``:``port``, the
        others connect to it (retrying for up to ``BOOTSTRAP_TIMEOUT`` seconds while it is not
        up yet)."""
        if not 1 <= size <= 1 << 16:
            raise ValueError(f"a world has 1 to 65536 ranks, not {size}")
        if not 0 <= rank < size:
            raise ValueError(f"rank {rank} is not below the world size {size}")
        mine = bytes(core.get_worker_address())
        if rank == 0:
            table, boot = await _serve(size, host, port, mine)
        else:
            table, boot = await _join(rank, size, host, port, mine)
        eps = [await core.create_endpoint_from_worker_address(UCXAddress.from_buffer(a)) for a in table]
        comm = cls(rank, eps)
        await comm.barrier()
        for ep in boot:  # aborted on both sides, as ucx-async does: a close would leave a
            ep.abort()  # control message nobody receives
        return comm

    def _peer(self, rank):
        if not 0 <= rank < self.size:
            raise ValueError(f"rank {rank} is not below the world size {self.size}")
        return self._eps[rank]

    def _next_seq(self):
        seq = self._seq
        self._seq = (seq + 1) & 0x7FFFFFFF
        return seq

    async def send(self, dest, buffer, tag):
        """Sends ``buffer`` to rank ``dest`` with ``tag`` (below 2**31)."""
        t = _native.collective_user_tag(tag, self._rank)
        await self._peer(dest).send(buffer, tag=t, force_tag=True)

    async def recv(self, src, buffer, tag):
        """Receives into ``buffer`` (which the message must fill) what rank ``src`` sent with
        ``tag``."""
        t = _native.collective_user_tag(tag, src)
        await self._peer(src).recv(buffer, tag=t, force_tag=True)

    async def _exchange(self, seq, batch, sends, recvs):
        """Sends ``sends[r]`` to and receives ``recvs[r]`` from every rank ``r`` with an entry
        (``None``: nothing), all at once."""
        me = self._rank
        tag = _native.collective_own_tag(seq, me, batch)
        ops = [self._eps[r].send(b, tag=tag, force_tag=True) for r, b in enumerate(sends) if b is not None]
        ops += [
            self._eps[r].recv(b, tag=_native.collective_own_tag(seq, r, batch), force_tag=True)
            for r, b in enumerate(recvs)
            if b is not None
        ]
        await asyncio.gather(*ops)

    async def barrier(self):
        """Returns once every rank has called ``barrier``."""
        empty = [bytearray(0) for _ in range(self.size)]
        await self._exchange(self._next_seq(), 0, [b""] * self.size, empty)

    async def allgather(self, mine, out):
        """Gathers every rank's ``mine`` (the same length everywhere) into ``out`` (writable,
        ``size * len(mine)`` bytes), rank by rank."""
        mine = memoryview(mine).cast("B")
        out = memoryview(out).cast("B")
        n = len(mine)
        if len(out) != n * self.size:
            raise ValueError(f"out holds {len(out)} bytes, {self.size} ranks x {n} need {n * self.size}")
        seq = self._next_seq()
        if n == 0:
            return
        await self._exchange(seq, 0, [mine] * self.size, [out[r * n : (r + 1) * n] for r in range(self.size)])

    async def alltoallv(self, parts):
        """All-to-all with a part of any size (zero included) per rank: ``parts[r]`` goes to
        rank ``r``; returns a list whose element ``r`` (a bytearray) is what rank ``r`` sent
        this rank. The sizes are exchanged first."""
        if len(parts) != self.size:
            raise ValueError(f"{len(parts)} parts for {self.size} ranks")
        parts = [memoryview(p).cast("B") for p in parts]
        me, seq = self._rank, self._next_seq()
        sizes = [bytearray(_SIZE.pack(len(p))) for p in parts]
        incoming = [bytearray(8) if r != me else None for r in range(self.size)]
        await self._exchange(seq, 0, [s if r != me else None for r, s in enumerate(sizes)], incoming)
        out = [bytearray(_SIZE.unpack(s)[0]) if s is not None else bytearray(parts[me]) for s in incoming]
        sends = [p if r != me and len(p) else None for r, p in enumerate(parts)]
        recvs = [b if r != me and len(b) else None for r, b in enumerate(out)]
        await self._exchange(seq, 1, sends, recvs)
        return out

    async def close(self):
        """A final barrier, then lets every endpoint go."""
        await self.barrier()
        for ep in self._eps:
            ep.abort()


async def _serve(size, host, port, mine):
    """Rank 0: collects every other rank's hello on a listener, answers each with the table."""
    table = [None] * size
    table[0] = mine
    joined = []
    done = asyncio.get_running_loop().create_future()

    async def handler(ep):
        try:
            hello = await ep.recv_obj(max_size=_MAX_HELLO)
            rank, their_size, address = _native.bootstrap_hello_decode(bytes(hello))
            if their_size != size:
                raise ValueError(f"rank {rank} was started with world size {their_size}, rank 0 with {size}")
            if not 0 < rank < size or table[rank] is not None:
                raise ValueError(f"rank {rank} joined twice or is out of range 1..{size}")
            table[rank] = address
            joined.append(ep)
            if len(joined) == size - 1 and not done.done():
                done.set_result(None)
        except Exception as e:  # a bad hello fails the bootstrap, with its reason
            if not done.done():
                done.set_exception(e)

    listener = core.create_listener(handler, port=port, ip=host if host not in ("", "0.0.0.0") else None)
    try:
        if size > 1:
            await done
        blob = _native.bootstrap_table(table)
        await asyncio.gather(*(ep.send_obj(blob) for ep in joined))
    finally:
        listener.close()
    return table, joined


async def _join(rank, size, host, port, mine):
    """Ranks 1 and up: connect to rank 0 (retrying while it is not up), hello, table."""
    deadline = time.monotonic() + BOOTSTRAP_TIMEOUT
    while True:
        try:
            ep = await core.create_endpoint(host, port)
            break
        except Exception:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.1)
    await ep.send_obj(_native.bootstrap_hello(rank, size, mine))
    blob = await ep.recv_obj(max_size=16 + size * (4 + _MAX_HELLO))
    table = _native.bootstrap_table_decode(bytes(blob))
    if len(table) != size:
        raise ValueError(f"the address table has {len(table)} ranks, this rank expects {size}")
    return table, [ep]
