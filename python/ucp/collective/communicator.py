"""``Communicator``: one rank's endpoints to every rank, and the collectives over them
(messages by rank, ``barrier``, ``allgather``, ``alltoallv`` on host memory with its direct
and bounce-buffer paths, ``alltoallv_device`` for CUDA arrays). ucx-async's twin is
``collective/communicator.rs`` (and ``device.rs``, ``path.rs``)."""
import asyncio
import collections
import os

from .. import _ucx_async as _native
from .. import core, framing
from .._libs.arr import Array
from .._libs.exceptions import UCXCanceled, UCXCloseError, UCXConnectionReset, UCXError
from .._libs.ucx_api import UCXAddress
from .bootstrap import boot_context, init_nearest_devices, join, serve
from .launch import ERROR_HANDLING, RENDEZVOUS_FILE, launch_env
from ..continuous_ucx_progress import inline_spin_us
from ..pending import frees_on_failure
from .posted import Posted, spin_until_done
from .shared_window import SharedWindow
from . import _buffers

_PATHS = ("auto", "direct", "buffered")


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
        self._native_eps = [ep._ep for ep in endpoints]  # for the native calls (collective_call)
        self._rooms = None  # per rank: where a native alltoallv's announcement lands
        self._nothing = bytearray(0)  # a barrier's gather
        self._transports = None
        self._direct = None  # whether no part goes through the bounce pool (_always_direct)

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
        self._direct = None

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
            init_nearest_devices()
        elif net_devices is not None:
            raise ValueError(f"net_devices must be None or \"auto\", not {net_devices!r}")
        mine = bytes(core.get_worker_address())
        if error_handling is None:
            error_handling = _native.error_handling_parse(os.environ.get(ERROR_HANDLING))
        ctx = boot_context()
        try:
            if rank == 0:
                table, boot = await serve(ctx, size, host, port or 0, mine, rendezvous_file, error_handling)
            else:
                table, boot = await join(ctx, rank, size, host, port, mine, rendezvous_file, error_handling)
            eps = [
                await core.create_endpoint_from_worker_address(
                    UCXAddress.from_buffer(a), endpoint_error_handling=error_handling
                )
                for a in table
            ]
            if error_handling:
                # UCX then serves ranks on one host with TCP: each pair of ranks also starts
                # the same-host single-copy path, on tags both derive from the table (not
                # where UCX_MM_ERROR_HANDLING=y gives UCX shared memory: the endpoint's
                # offers_single_copy).
                key = _native.single_copy_table_key(list(table))
                for r, ep in enumerate(eps):
                    if r != rank:
                        ep._ep.start_single_copy(*_native.single_copy_pair_tags(key, rank, r))
            comm = cls(rank, eps)
            await comm.barrier()
            for ep in boot:  # aborted on both sides, as ucx-async does: a close would leave a
                ep.abort()  # control message nobody receives
        finally:
            ctx._stop()  # the bootstrap's worker is not progressed again, failed or not
        # One pass of the loop runs what the bootstrap left queued (its stopped driver's
        # pass): collectives that complete without suspending never would, and every call's
        # spin rule (`inline_spin_us`) would look at it (0.1 us a call).
        await asyncio.sleep(0)
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
        (``None``: nothing), all posted before anything waits (``Posted``)."""
        me, tag = self._rank, _native.collective_own_tag
        posted = Posted()
        for r, b in enumerate(recvs):
            if b is not None:
                posted.recv(self._eps[r], b, tag(seq, r, batch))
        for r, b in enumerate(sends):
            if b is not None:
                posted.send(self._eps[r], b, tag(seq, me, batch))
        await posted.settle()

    @frees_on_failure
    async def barrier(self):
        """Returns once every rank has called ``barrier``."""
        # An empty message to and from every other rank, in one native call.
        seq = self._next_seq()
        left = _native.collective_allgather(self._native_eps, self._rank, seq, b"", self._nothing, inline_spin_us(), True)
        if left:
            await self._finish_native(seq, left, None)

    @frees_on_failure
    async def allgather(self, mine, out):
        """Gathers every rank's ``mine`` (the same length everywhere) into ``out`` (writable,
        ``size * len(mine)`` bytes), rank by rank."""
        # Up to 1 KiB: sent first (eager, they finish at once), then each rank's received in
        # turn with the inline spin, in one native call (``collective_call``).
        left = _native.collective_allgather(self._native_eps, self._rank, self._seq, mine, out, inline_spin_us(), False)
        if left is not None:
            seq = self._next_seq()
            if left:
                await self._finish_native(seq, left, None)
            return
        await self._allgather_general(mine, out)

    async def _allgather_general(self, mine, out):
        """``allgather`` as Python steps (more than 1 KiB, or not host memory)."""
        mine = memoryview(mine).cast("B")
        out = memoryview(out).cast("B")
        n = len(mine)
        if len(out) != n * self.size:
            raise ValueError(f"out holds {len(out)} bytes, {self.size} ranks x {n} need {n * self.size}")
        seq = self._next_seq()
        if n == 0:
            return
        await self._exchange(seq, 0, [mine] * self.size, [out[r * n : (r + 1) * n] for r in range(self.size)])

    @frees_on_failure
    async def alltoallv(self, parts):
        """All-to-all with a part of any size (zero included) per rank: ``parts[r]`` goes to
        rank ``r``; returns a list whose element ``r`` (a bytearray) is what rank ``r`` sent
        this rank. The parts' announcements (size and path) are exchanged first."""
        out = []
        await self.alltoallv_into(parts, out)
        return out

    @frees_on_failure
    async def alltoallv_into(self, parts, out):
        """``alltoallv`` into ``out``, a list made into one bytearray per rank, each resized to
        what that rank sends: called again with the same list, it reuses those bytearrays'
        memory (no allocation once they have grown to their sizes)."""
        if len(parts) != len(self._eps):
            raise ValueError(f"{len(parts)} parts for {len(self._eps)} ranks")
        if self._path != "buffered":
            # One native call (``collective_call``) sends every announcement, a part that
            # rides in it inline and, where no part can go through the bounce pool, a larger
            # one as one message behind it, copies the own part, then takes each peer's
            # announcement in turn with the inline spin, receiving a direct part into its
            # bytearray, and spins until what it posted is done. What is left (still in
            # flight, failed, a part in batches) is settled here (``_finish_native``). Two
            # ranks (examples/python/alltoall.py): 1 KiB 19-20 -> 3.3-4.0 us, 1 MiB
            # 331-389 -> 200-303 us against the Python steps.
            # 3.11 makes a function's closure cells on every call: the paths that need them
            # are other methods, so this one makes none (with `_always_direct` asked only
            # once: 1.50-1.55 -> 1.23-1.30 us a 1-rank call, scripts/bench_collective_overhead.py).
            if self._rooms is None:
                self._new_rooms()
            left = _native.collective_alltoallv(
                self._native_eps, self._rank, self._seq, parts, out, self._rooms, inline_spin_us(),
                self._always_direct() if self._direct is None else self._direct,
            )
            if left is not None:
                seq = self._next_seq()
                if left:
                    await self._finish_native(seq, left, out)
                return
        await self._alltoallv_general(parts, out)

    def _new_rooms(self):
        """Fresh rooms for the native alltoallv's announcements, one per rank."""
        room = _native.alltoallv_announce_room(self.size)
        self._rooms = [bytearray(room) for _ in range(self.size)]

    async def _alltoallv_general(self, parts, out):
        """``alltoallv_into`` as Python steps: parts through the bounce pool, or anything the
        native call leaves to Python whole."""
        size = self.size
        me = self._rank
        parts = [memoryview(p).cast("B") for p in parts]
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

        peers = [r for r in range(size) if r != me]
        # Every peer's announcement receive, then every announcement send (and a direct part's
        # messages behind it), is posted before anything waits (``Posted``); parts sent through
        # the bounce pool run as tasks, and every part's receives are posted once its
        # announcement has arrived. As in ucx-async, no peer waits for another's announcement.
        posted = Posted()
        recvs = []  # (rank, its buffer, its length or future): announcements, waited in turn
        for r in peers:
            incoming = bytearray(room)
            try:
                recvs.append((r, incoming, self._eps[r]._post_recv_up_to(incoming, tag(seq, r, 0), 0)))
            except Exception as e:
                posted.failures.append(e)
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
            # The announcements that are in (a spin's worth) come first: their parts' receives
            # posted, the peers' data moves while this rank copies its own part, which never
            # leaves the process. The rest are then waited for in turn.
            if recvs:
                spin_until_done(self._eps[me]._worker, [got for _, _, got in recvs if not isinstance(got, int)])
        except BaseException:
            self._abandon(posted, recvs)
            raise
        own_copied = []

        def copy_own():
            if not own_copied:
                _buffers.copy_own(out, parts, me)
                own_copied.append(True)

        await self._take_in_turn(seq, recvs, out, posted, before_wait=copy_own)
        copy_own()
        # Every peer's operations settle before the call returns, even when one peer's fail:
        # the healthy peers' parts arrive whole, and nothing is left running behind the call.
        await posted.settle()

    async def _finish_native(self, seq, left, out):
        """Settles what a call's native part left in flight or failed (its leftovers:
        ``collective_call``'s module doc), as any call settles: every peer's operations end
        before the call returns, then the first failure is raised. ``out``: alltoallv's output
        list, for the parts of announcements still to come."""
        posted = Posted()
        announcing = []  # (rank, room, future): announcements still on their way
        for kind, r, x in left:
            ep = self._eps[r]
            if kind == "send":
                posted.adopt(ep, x, False)
            elif kind == "recv":
                posted.adopt(ep, x, True)
            elif kind == "announcing":
                announcing.append((r, self._rooms[r], x))
            elif kind == "announced":
                self._take_announcement(seq, r, self._rooms[r], x, out, posted)
            else:  # "recv_failed", "send_failed"
                posted.failures.append(x)
        try:
            await self._take_in_turn(seq, announcing, out, posted)
        except BaseException:
            self._rooms = None  # a room UCX may still write is not reused
            raise
        await posted.settle()

    async def _take_in_turn(self, seq, pending, out, posted, before_wait=None):
        """Takes each announcement of ``pending`` (rank, the buffer it lands in, its length or
        its receive's future) in turn (``_take_announcement``), calling ``before_wait()`` first
        whenever one is still to come. Cancelled (or worse) while waiting, it cancels what
        ``posted`` holds and lets go of the receives not waited for yet: nothing of the call
        outlives it."""
        waited = 0  # how many of `pending` were (or are being) waited for
        try:
            for k, (r, incoming, got) in enumerate(pending):
                if before_wait is not None and not isinstance(got, int) and not got.done():
                    before_wait()
                waited = k + 1
                try:
                    n = await self._eps[r]._recv_up_to_done(got)
                except Exception as e:
                    posted.failures.append(e)
                    continue
                self._take_announcement(seq, r, incoming, n, out, posted)
        except BaseException:
            self._abandon(posted, pending[waited:])
            raise

    def _abandon(self, posted, pending):
        """Cancels what ``posted`` holds and lets go of the announcement receives ``pending``
        (as ``_take_in_turn``'s)."""
        posted.cancel()
        for r, _, got in pending:
            self._eps[r]._abandon_recv(got)

    def _take_announcement(self, seq, r, incoming, n, out, posted):
        """Reads rank ``r``'s announcement (``n`` bytes of ``incoming``) into ``out[r]``: its
        part, if the part came inside it, else receives of the part's messages on ``posted``.
        What is wrong with it becomes one of ``posted``'s failures."""
        size, ep, tag = self.size, self._eps[r], _native.collective_own_tag
        try:
            length, batch, data = _native.alltoallv_announce_decode(bytes(memoryview(incoming)[:n]), size)
        except ValueError as e:
            posted.failures.append(ValueError(f"rank {r} sent a bad announcement: {e}"))
            return
        messages = _native.alltoallv_messages(length, batch) if data is None else []
        try:
            _buffers.resize(out[r], length)
        except (MemoryError, OverflowError):
            # No room for the part: its messages are received and dropped, so its sender
            # completes; this call then fails with the reason.
            posted.failures.append(MemoryError(f"rank {r} announced a part of {length} bytes, which cannot be allocated"))
            for b, _, _ in messages:
                posted.discard(ep, tag(seq, r, b))
            return
        if data is not None:
            _buffers.copy_into(out[r], data)
            return
        # Every message of the part (one, or a batch each) straight into its range.
        view = memoryview(out[r])
        for b, start, stop in messages:
            posted.recv(ep, view[start:stop], tag(seq, r, b))

    @frees_on_failure
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
        posted = Posted()
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

    def _always_direct(self):
        """Whether no part of any size goes through the bounce pool: ``_batch_for`` sends even
        the largest part to every peer as one message (the ``direct`` path, or ``auto`` where
        no peer's transports would choose the pool)."""
        if self._direct is None:
            self._direct = all(self._batch_for(r, 1 << 62) == 0 for r in range(self.size) if r != self._rank)
        return self._direct

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

    async def shared_window(self, slot):
        """Opens this rank's ``SharedWindow`` (room for a part of up to ``slot`` bytes from each
        rank, twice: ``2 * size * slot`` bytes of shared memory) and maps every other rank's:
        an all-to-all whose parts are copied once, into the receiver's memory (see
        ``ucp.collective.shared_window``). Collective, in order with the other collectives;
        the slots may differ between ranks."""
        return await SharedWindow.open(self, slot)

    async def close(self):
        """A final barrier (so no rank closes while another still sends to it), a closing
        round (so none closes while its barrier message is still on its way to another), then
        lets every endpoint go. A rank that disconnects during the closing round has passed
        the barrier, so that counts as its part of the round."""
        await self.barrier()
        await self._closing_round()
        for ep in self._eps:
            # Past the closing round a peer may be gone already, and an endpoint without
            # error handling then raises from its close (as UCX-Py's did); it is closed all
            # the same, and the others must be too.
            try:
                ep.abort()
            except UCXError:
                pass

    async def _closing_round(self):
        """``close``'s second round: an empty message to and from every other rank, where a
        peer's disconnect stands for its message. UCX completes a send once it has taken the
        message, so a rank that aborted its endpoints right after the barrier could reset the
        connection under its last barrier message, and a slower rank's barrier then failed
        with that rank's disconnect. A peer sends here only after its barrier, so its message
        means it has this rank's; a peer that is gone has passed the barrier."""
        me, seq, tag = self._rank, self._next_seq(), _native.collective_own_tag

        async def gone_is_done(op):
            try:
                await op
            except (UCXConnectionReset, UCXCloseError, UCXCanceled):
                pass

        ops = []
        for r, ep in enumerate(self._eps):
            if r != me:
                ops.append(gone_is_done(ep.send(b"", tag=tag(seq, me, 0), force_tag=True)))
                ops.append(gone_is_done(ep.recv(bytearray(0), tag=tag(seq, r, 0), force_tag=True)))
        await asyncio.gather(*ops)
