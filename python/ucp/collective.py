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
"""
import asyncio
import collections
import logging
import os
import socket
import time

from . import _ucx_async as _native
from . import core, framing
from .continuous_ucx_progress import inline_spin_us
from ._libs.arr import Array
from ._libs.exceptions import UCXCanceled, UCXCloseError, UCXError, UCXMsgTruncated
from ._libs.ucx_api import UCXAddress

__all__ = ["Communicator", "launch_env", "local_rank", "rank_net_devices"]

logger = logging.getLogger("ucx")

# The longest hello rank 0 accepts (a worker address is a few hundred bytes to a few KiB);
# the same limit as ucx-async's.
_MAX_HELLO = 64 << 10
_PATHS = ("auto", "direct", "buffered")
BOOTSTRAP_TIMEOUT = 60.0

#: The variable naming a rendezvous file (``Communicator.bootstrap``'s ``rendezvous_file``).
RENDEZVOUS_FILE = "UCXA_RENDEZVOUS_FILE"
#: The variable choosing the ranks' error handling, ``peer`` or ``none``
#: (``Communicator.bootstrap``'s ``error_handling``).
ERROR_HANDLING = "UCXA_ERROR_HANDLING"


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


class Communicator:
    """One rank's view of an N-rank job; see the module doc. Make one with ``bootstrap`` or
    ``from_env``."""

    def __init__(self, rank, endpoints):
        self._rank = rank
        self._eps = endpoints
        self._seq = 0
        self._path = "auto"
        self._batch, self._depth = _native.alltoallv_bounce_defaults()
        self._pool = {}  # rank -> list of bounce buffers, made on first use
        self._transports = None

    def set_data_path(self, path, batch=None, depth=None):
        """How this rank sends ``alltoallv`` parts: ``"auto"`` (the default), ``"direct"`` or
        ``"buffered"``; ``batch`` (bytes) and ``depth`` (batches in flight per peer) shape the
        bounce pool. Receivers follow each sender's choice."""
        if path not in _PATHS:
            raise ValueError(f"data path {path!r} is not one of {_PATHS}")
        batch = self._batch if batch is None else int(batch)
        depth = self._depth if depth is None else int(depth)
        if not 0 < batch < 1 << 32 or depth < 1:
            raise ValueError(f"a bounce pool needs 1 to {(1 << 32) - 1} bytes per batch and a depth of at least 1, not {batch} x {depth}")
        if (batch, depth) != (self._batch, self._depth):
            self._pool.clear()
        self._path, self._batch, self._depth = path, batch, depth

    @property
    def rank(self):
        return self._rank

    @property
    def size(self):
        return len(self._eps)

    @classmethod
    async def from_env(cls, net_devices=None):
        """Joins the job the launcher's environment describes (``launch_env``)."""
        rank, size, host, port = launch_env()
        path = os.environ.get(RENDEZVOUS_FILE) or None
        return await cls.bootstrap(rank, size, host, port, net_devices=net_devices, rendezvous_file=path)

    @classmethod
    async def bootstrap(cls, rank, size, host, port, net_devices=None, rendezvous_file=None, error_handling=None):
        """Joins a job of ``size`` ranks as ``rank``: rank 0 listens on ``host``:``port``, the
        others connect to it (retrying for up to ``BOOTSTRAP_TIMEOUT`` seconds while it is not
        up yet). With ``rendezvous_file`` (a path every rank sees, new per job) they meet
        there instead: rank 0 listens on ``host`` and any free port (``port`` ``None`` or 0),
        writes its address to the file (whole, by a rename) and removes it once all have
        joined; the others wait for the file and read it again while its address does not
        answer (a file an earlier job left). ``net_devices="auto"``: initialise ``ucp`` with
        the devices nearest this rank's GPU (``rank_net_devices``), if ``ucp`` is not
        initialised yet. ``error_handling``: whether the ranks' endpoints have UCX's peer
        error handling (default: ``UCXA_ERROR_HANDLING``, ``peer`` unless it says ``none``).
        With it a rank that dies fails the others' operations; without it, as with MPI, UCX
        may use shared memory with CMA's single copy, and a rank's death can leave the others
        waiting, so the launcher must end the job (``python -m ucp.launch`` and ``mpirun``
        do). Every rank must choose the same: rank 0 refuses, by name, one that did not."""
        if not 1 <= size <= 1 << 16:
            raise ValueError(f"a world has 1 to 65536 ranks, not {size}")
        if not 0 <= rank < size:
            raise ValueError(f"rank {rank} is not below the world size {size}")
        if net_devices == "auto":
            _init_nearest_devices()
        elif net_devices is not None:
            raise ValueError(f"net_devices must be None or \"auto\", not {net_devices!r}")
        mine = bytes(core.get_worker_address())
        if error_handling is None:
            error_handling = _native.error_handling_parse(os.environ.get(ERROR_HANDLING))
        if rank == 0:
            table, boot = await _serve(size, host, port or 0, mine, rendezvous_file, error_handling)
        else:
            table, boot = await _join(rank, size, host, port, mine, rendezvous_file, error_handling)
        eps = [
            await core.create_endpoint_from_worker_address(UCXAddress.from_buffer(a), endpoint_error_handling=error_handling)
            for a in table
        ]
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
        (``None``: nothing), all posted before anything waits (``_Posted``)."""
        me, tag = self._rank, _native.collective_own_tag
        posted = _Posted()
        for r, b in enumerate(recvs):
            if b is not None:
                posted.recv(self._eps[r], b, tag(seq, r, batch))
        for r, b in enumerate(sends):
            if b is not None:
                posted.send(self._eps[r], b, tag(seq, me, batch))
        await posted.settle()

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
        this rank. The parts' announcements (size and path) are exchanged first."""
        out = []
        await self.alltoallv_into(parts, out)
        return out

    async def alltoallv_into(self, parts, out):
        """``alltoallv`` into ``out``, a list made into one bytearray per rank, each resized to
        what that rank sends: called again with the same list, it reuses those bytearrays'
        memory (no allocation once they have grown to their sizes)."""
        size = self.size
        if len(parts) != size:
            raise ValueError(f"{len(parts)} parts for {size} ranks")
        parts = [memoryview(p).cast("B") for p in parts]
        me = self._rank
        # Decided, and checked against the tag layout, before anything is sent: a refused part
        # leaves no peer waiting for half a call.
        batches = [0 if r == me else self._batch_for(r, len(p)) for r, p in enumerate(parts)]
        announce = []  # per rank: the announcement message, and whether the part is in it
        for r, (p, b) in enumerate(zip(parts, batches)):
            try:
                head, inline = _native.alltoallv_announce(len(p), b, size)
            except ValueError as e:
                raise ValueError(f"the part for rank {r} ({len(p)} bytes in batches of {b}): {e}") from None
            announce.append((head + p if inline and r != me else head, inline))
        seq = self._next_seq()
        # Each peer gets an announcement (batch 0, small parts inside it: ucx-core's
        # wire::alltoallv), then the rest of its part (batches 1 and up).
        room = _native.alltoallv_announce_room(size)
        tag = _native.collective_own_tag
        del out[size:]
        out.extend(bytearray() for _ in range(size - len(out)))
        for r in range(size):
            if not isinstance(out[r], bytearray):
                out[r] = bytearray()

        # Every peer's announcement receive, then every announcement send (and a direct part's
        # messages behind it), is posted before anything waits (``_Posted``); parts sent through
        # the bounce pool run as tasks, and every part's receives are posted once its
        # announcement has arrived. As in ucx-async, no peer waits for another's announcement.
        peers = [r for r in range(size) if r != me]
        posted = _Posted()
        recvs = []  # (rank, its buffer, its length or future): announcements, waited in turn
        for r in peers:
            incoming = bytearray(room)
            try:
                recvs.append((r, incoming, self._eps[r]._post_recv_up_to(incoming, tag(seq, r, 0), 0)))
            except Exception as e:
                posted.failures.append(e)
        waited = 0  # how many of `recvs` were (or are being) waited for
        try:
            for r in peers:
                message, inline = announce[r]
                ep = self._eps[r]
                if not posted.send(ep, message, tag(seq, me, 0), fast=True) or inline:
                    continue
                if batches[r]:
                    posted.task(self._send_part(seq, r, parts[r], batches[r]))
                    continue
                # A direct part's messages go at once, behind their announcement.
                for b, start, stop in _native.alltoallv_messages(len(parts[r]), 0):
                    posted.send(ep, parts[r][start:stop], tag(seq, me, b))
            # This rank's own part never leaves the process; copied while the peers read theirs.
            _resize(out[me], len(parts[me]))
            _copy_into(out[me], parts[me])
            if recvs:
                _spin_until_done(self._eps[me]._worker, [got for _, _, got in recvs if not isinstance(got, int)])
            for k, (r, incoming, got) in enumerate(recvs):
                waited = k + 1
                ep = self._eps[r]
                try:
                    n = await ep._recv_up_to_done(got)
                    try:
                        length, batch, data = _native.alltoallv_announce_decode(
                            bytes(memoryview(incoming)[:n]), size
                        )
                    except ValueError as e:
                        raise ValueError(f"rank {r} sent a bad announcement: {e}") from None
                except Exception as e:
                    posted.failures.append(e)
                    continue
                messages = _native.alltoallv_messages(length, batch) if data is None else []
                try:
                    _resize(out[r], length)
                except (MemoryError, OverflowError):
                    # No room for the part: its messages are received and dropped, so its
                    # sender completes; this call then fails with the reason.
                    posted.failures.append(MemoryError(f"rank {r} announced a part of {length} bytes, which cannot be allocated"))
                    for b, _, _ in messages:
                        posted.discard(ep, tag(seq, r, b))
                    continue
                if data is not None:
                    _copy_into(out[r], data)
                    continue
                # Every message of the part (one, or a batch each) straight into its range.
                view = memoryview(out[r])
                for b, start, stop in messages:
                    posted.recv(ep, view[start:stop], tag(seq, r, b))
        except BaseException:
            # Cancelled (or worse) while waiting: nothing of this call may outlive it.
            posted.cancel()
            for r, _, got in recvs[waited:]:
                self._eps[r]._abandon_recv(got)
            raise
        # Every peer's operations settle before the call returns, even when one peer's fail:
        # the healthy peers' parts arrive whole, and nothing is left running behind the call.
        await posted.settle()

    async def alltoallv_device(self, parts, allocator=None):
        """``alltoallv`` for CUDA memory: ``parts[r]`` (an object with
        ``__cuda_array_interface__``, contiguous; host buffers are accepted too) goes to rank
        ``r``; returns a list whose element ``r`` is ``allocator(nbytes)`` holding what rank
        ``r`` sent (default: an RMM ``DeviceBuffer``, else a CuPy array, as ``recv_multi``'s;
        any buffer of exactly ``nbytes`` bytes will do, host memory included).

        The parts' sizes go first, through a host ``alltoallv``; then each part is one message
        from memory to memory (UCX's CUDA transports: CUDA IPC between processes on one node),
        this rank's own part included (through its loopback endpoint). Never inline and never
        through the bounce pool, which are host memory. The same messages as ucx-async's
        ``alltoallv_device_into`` (ucx-core's ``wire::alltoallv``; a job mixing the two on
        device memory has not run yet). It uses two operation numbers. Where the allocator
        fails (or gives a buffer of the wrong size), the part is received and dropped, the
        call completes on every other rank, and this rank then raises the allocator's
        error; the communicator stays usable."""
        if len(parts) != self.size:
            raise ValueError(f"{len(parts)} parts for {self.size} ranks")
        arrays = []
        for r, p in enumerate(parts):
            try:
                a = Array(p)
            except Exception as e:
                raise ValueError(f"the part for rank {r} is not a buffer: {e}") from None
            if a.cuda and not a.contiguous:
                raise ValueError(f"the part for rank {r} is not contiguous")
            arrays.append(a)
        if allocator is None:
            allocator = framing.device_buffer
        lens = await self.alltoallv([_native.alltoallv_device_len(a.nbytes) for a in arrays])
        sizes = []
        for r, b in enumerate(lens):
            try:
                sizes.append(_native.alltoallv_device_len_decode(bytes(b)))
            except ValueError as e:
                raise ValueError(f"rank {r} sent a bad part size: {e}") from None
        # The peers know the sizes now and will send: a part this rank has no room for is
        # still received, and dropped, so the call completes everywhere else and the
        # communicator stays in step; this rank then raises the allocator's error.
        out, failure = [], None
        for r, n in enumerate(sizes):
            try:
                buf = allocator(n)
                if Array(buf).nbytes != n:
                    raise ValueError(f"the allocator gave {Array(buf).nbytes} bytes for rank {r}'s part of {n}")
            except Exception as e:
                failure, buf = failure or e, None
            out.append(buf)
        seq = self._next_seq()
        me, batch, tag = self._rank, _native.alltoallv_device_part_batch(), _native.collective_own_tag
        posted = _Posted()
        sent = [not a.nbytes or posted.send(self._eps[r], parts[r], tag(seq, me, batch)) for r, a in enumerate(arrays)]
        for r in range(self.size):
            if not sizes[r] or (r == me and not sent[me]):  # no own part is coming: none to wait for
                continue
            if out[r] is None:
                posted.discard(self._eps[r], tag(seq, r, batch))
            else:
                posted.recv(self._eps[r], out[r], tag(seq, r, batch))
        try:
            await posted.settle()
        except Exception:
            if failure is None:
                raise
            raise failure  # this rank's own failure first; the transfers' is its context
        if failure is not None:
            raise failure
        return out

    def _batch_for(self, r, nbytes):
        """The batch size this rank sends ``nbytes`` to rank ``r`` in (0: one message)."""
        if nbytes == 0 or self._path == "direct":
            return 0
        if self._path == "auto":
            if self._transports is None:
                self._transports = [ep._ep.transports() for ep in self._eps]
            if not _native.alltoallv_auto_buffered(self._transports[r], nbytes):
                return 0
        return self._batch

    async def _send_part(self, seq, r, part, batch):
        """Sends ``part`` to rank ``r`` in batches of ``batch`` bytes copied through the bounce
        pool (``batch`` > 0; a direct part's messages are posted by ``alltoallv_into``)."""
        ep, tag = self._eps[r], _native.collective_own_tag
        messages = _native.alltoallv_messages(len(part), batch)
        slots = self._pool.setdefault(r, [bytearray(self._batch) for _ in range(self._depth)])
        inflight = collections.deque()
        try:
            for k, (b, start, stop) in enumerate(messages):
                if len(inflight) == len(slots):  # the oldest send hands its buffer back
                    await inflight.popleft()
                slot = memoryview(slots[k % len(slots)])[: stop - start]
                slot[:] = part[start:stop]
                inflight.append(asyncio.ensure_future(ep.send(slot, tag=tag(seq, self._rank, b), force_tag=True)))
            await asyncio.gather(*inflight)
        except BaseException:
            for f in inflight:  # a failed part stops its other batches too
                f.cancel()
            raise

    async def close(self):
        """A final barrier, then lets every endpoint go."""
        await self.barrier()
        for ep in self._eps:
            ep.abort()


class _Posted:
    """The operations of one collective call, posted as native futures before anything waits
    (a task per message and its passes through the event loop cost more than a small part's
    whole exchange), plus tasks for what takes several steps. ``settle`` waits for all of them,
    even when some fail, then raises the first failure: a failed peer costs the others nothing,
    and nothing of the call runs on after it."""

    def __init__(self):
        self.ops = []  # (endpoint, future, whether a receive, or _DISCARD) of what UCX has not finished
        self.nbytes = 0  # what those operations move, for the spin's budget
        self.tasks = []
        self.failures = []

    def recv(self, ep, buffer, tag):
        """Posts a receive of exactly ``len(buffer)`` bytes on ``tag``."""
        try:
            fut = ep._post_recv(buffer, tag, 0)
        except Exception as e:
            self.failures.append(e)
            return
        if fut is None:
            ep._recv_finished()
        else:
            self.ops.append((ep, fut, True))
            self.nbytes += _nbytes(buffer)

    def discard(self, ep, tag):
        """Posts a receive that takes the message on ``tag`` and drops it: with one byte of
        room UCX cuts the message short and its sender still completes (rendezvous
        included); only a failure of the endpoint counts against it."""
        try:
            fut = ep._post_recv(bytearray(1), tag, 0)
        except Exception as e:
            if not _cut_short(e):
                self.failures.append(e)
                return
            fut = None
        if fut is None:
            ep._recv_finished()
        else:
            self.ops.append((ep, fut, _DISCARD))

    def send(self, ep, buffer, tag, fast=False):
        """Posts a send on ``tag``; whether it was posted (False: it failed at once)."""
        try:
            fut = ep._post_send(buffer, tag, 0, fast)
        except Exception as e:
            if ep._send_failure(e) is not None:
                self.failures.append(e)
            return False
        if fut is not None:
            self.ops.append((ep, fut, False))
            self.nbytes += _nbytes(buffer)
        return True

    def task(self, coroutine):
        self.tasks.append(asyncio.ensure_future(coroutine))

    def cancel(self):
        for f in (*(f for _, f, _ in self.ops), *self.tasks):
            f.cancel()

    async def settle(self):
        futures = [f for _, f, _ in self.ops]
        if not self.tasks and (not futures or _spin_until_done(self.ops[0][0]._worker, futures, self.nbytes)):
            # All finished inline: their outcomes, with no pass through the event loop.
            settled = [_outcome(f) for f in futures]
        else:
            try:
                settled = await asyncio.gather(*futures, *self.tasks, return_exceptions=True)
            except BaseException:
                self.cancel()  # cancelled: nothing of this call runs on
                raise
        for (ep, _, is_recv), result in zip(self.ops, settled):
            if is_recv is _DISCARD and (not isinstance(result, BaseException) or _cut_short(result)):
                ep._recv_finished()
                continue
            if not isinstance(result, BaseException):
                if is_recv:
                    ep._recv_finished()
            elif is_recv or ep._send_failure(result) is not None:
                self.failures.append(result)
        self.failures += [t for t in settled[len(self.ops) :] if isinstance(t, BaseException)]
        if self.failures:
            raise self.failures[0]


# The kind of a `_Posted` operation that receives a message only to drop it.
_DISCARD = "discard"


def _cut_short(e):
    """Whether a receive's error says only that the message was longer than its room (UCX's
    truncation, or our length check), not that the endpoint failed or closed."""
    return isinstance(e, (UCXError, UCXMsgTruncated)) and not isinstance(e, (UCXCanceled, UCXCloseError))


def _spin_until_done(worker, futures, nbytes=0):
    """Progresses ``worker`` inline until every future in ``futures`` (operations UCX runs,
    moving ``nbytes`` in all) is done, for up to ``UCXPY_SPIN_US`` (grown with ``nbytes`` as
    ucx-async's inline spin grows: ``spin_budget_us``) and only when nothing else on the event
    loop is ready (``continuous_ucx_progress.inline_spin_us``, as ``Endpoint.send``/``recv``
    do). A small collective's messages arrive within microseconds over shared memory, a large
    part's copy takes about its size / 8 GB/s inside the spin's progress calls, and every pass
    through the event loop costs more than either. Returns whether all are done."""
    pending = [f for f in futures if not f.done()]
    if not pending:
        return True
    budget = inline_spin_us()
    if not budget:
        return False
    budget = _native.spin_budget_us(budget, nbytes)
    deadline = time.perf_counter() + budget * 1e-6
    while pending:
        left = deadline - time.perf_counter()
        if left <= 0:
            return False
        worker.spin(int(left * 1e6) + 1)
        pending = [f for f in pending if not f.done()]
    return True


def _nbytes(buffer):
    """How many bytes ``buffer`` holds (host or device array, memoryview, bytes), for a spin's
    budget only: 0 where it does not say."""
    n = getattr(buffer, "nbytes", None)
    if isinstance(n, int):
        return n
    try:
        return len(buffer)
    except TypeError:
        return 0


def _outcome(future):
    """A done future's result, or its exception (as ``gather(return_exceptions=True)``)."""
    if future.cancelled():
        return asyncio.CancelledError()
    return future.exception() or future.result()


def _copy_into(buf, data):
    """Copies ``data`` (any buffer of ``len(buf)`` bytes) into the bytearray ``buf`` in one
    pass. (``buf[:] = data`` first copies a non-bytearray ``data`` into a new bytearray: for a
    16 MiB part, a second copy and 16 MiB of fresh pages.)"""
    memoryview(buf)[:] = memoryview(data).cast("B")


def _resize(buf, n):
    """Makes the bytearray ``buf`` ``n`` bytes long: shrinking keeps the allocation, growing
    reuses it where it can (the new bytes are zero until a receive writes them)."""
    if len(buf) != n:
        buf[n:] = b""
        buf.extend(bytes(n - len(buf)))


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
    from ._libs.topological_distance import auto_net_devices

    return auto_net_devices(local_rank(environ), xml=xml)


def _init_nearest_devices():
    if core.initialized():
        logger.warning("net_devices='auto': ucp is already initialised; its devices stay as they are")
        return
    if "UCX_NET_DEVICES" in os.environ:
        return  # the user's choice wins
    devices = rank_net_devices()
    if devices is not None:
        core.init({"NET_DEVICES": devices})


def _publish(path, host, port):
    """Writes the rendezvous file for rank 0 at ``host``:``port``, whole (a rename)."""
    ip = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][4][0]
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(_native.rendezvous_text(ip, port))
    os.replace(tmp, path)


def _read_rendezvous(path):
    """Rank 0's ``(ip, port)`` from the rendezvous file, ``None`` while it is not there."""
    try:
        with open(path) as f:
            text = f.read()
    except FileNotFoundError:
        return None
    try:
        return _native.rendezvous_parse(text)
    except ValueError as e:
        raise ValueError(f"the rendezvous file {path} is not ours: {e}") from None


async def _serve(size, host, port, mine, rendezvous_file=None, error_handling=True):
    """Rank 0: collects every other rank's hello on a listener, answers each with the table,
    or, if a hello does not fit the job, every rank that came with a refusal saying why."""
    table = [None] * size
    table[0] = mine
    joined = []
    done = asyncio.get_running_loop().create_future()

    async def handler(ep):
        try:
            hello = await ep.recv_obj(max_size=_MAX_HELLO)
            rank, address = _native.bootstrap_hello_admit(bytes(hello), size, error_handling)
            if table[rank] is not None:
                raise ValueError(f"rank {rank} joined twice")
            table[rank] = address
            joined.append(ep)
            if len(joined) == size - 1 and not done.done():
                done.set_result(None)
        except Exception as e:  # a bad hello fails the bootstrap, with its reason
            joined.append(ep)  # refused below, with every rank that came
            if not done.done():
                done.set_exception(e)

    listener = core.create_listener(handler, port=port, ip=host if host not in ("", "0.0.0.0") else None)
    try:
        if rendezvous_file is not None:
            _publish(rendezvous_file, host, listener.port)
        if size > 1:
            try:
                await done
            except Exception as e:  # none of them waits for a table that will not come
                no = _native.bootstrap_refusal(str(e))
                await asyncio.gather(*(ep.send_obj(no) for ep in joined), return_exceptions=True)
                raise
        blob = _native.bootstrap_table(table)
        await asyncio.gather(*(ep.send_obj(blob) for ep in joined))
    finally:
        listener.close()
        if rendezvous_file is not None:  # every rank has read it, or the bootstrap failed:
            try:  # a later job must not find it
                os.remove(rendezvous_file)
            except FileNotFoundError:
                pass
    return table, joined


async def _join(rank, size, host, port, mine, rendezvous_file=None, error_handling=True):
    """Ranks 1 and up: connect to rank 0 (retrying while it is not up, reading the rendezvous
    file again each time if there is one), hello, table."""
    deadline = time.monotonic() + BOOTSTRAP_TIMEOUT
    while True:
        if rendezvous_file is not None:
            root = _read_rendezvous(rendezvous_file)
            if root is None:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"the rendezvous file {rendezvous_file} did not appear within {BOOTSTRAP_TIMEOUT} s")
                await asyncio.sleep(0.1)
                continue
            host, port = root
        try:
            ep = await core.create_endpoint(host, port)
            break
        except Exception:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.1)
    await ep.send_obj(_native.bootstrap_hello(rank, size, mine, error_handling))
    blob = await ep.recv_obj(max_size=16 + size * (4 + _MAX_HELLO))
    table = _native.bootstrap_table_decode(bytes(blob))
    if len(table) != size:
        raise ValueError(f"the address table has {len(table)} ranks, this rank expects {size}")
    return table, [ep]
