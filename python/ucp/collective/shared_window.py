"""``SharedWindow``: an all-to-all through shared memory, each part copied once, straight
into the receiver's memory, and read there. ucx-async's twin is
``collective/shared_window.rs``; the bytes (entries, notes) are ucx-core's
``wire::shared_window``, so Python and Rust ranks share one job.

Each rank's window is memory UCX allocated in shared memory, which every other rank on the
host maps through its remote key (``SharedWindowMemory``, native). A sender copies each part of
up to the receiver's slot into its slot of the receiver's window, then sends the receiver a
note (the length, and whether the part is in the window); a part over the slot, or to a rank
whose window cannot be mapped (another host), follows its note as one message. The mapping
needs no transport lane, so the window moves data through shared memory whatever the
endpoints' error handling, and a dead peer still fails the call through its notes.

Each window has two halves of one slot per sender, and call k writes half k % 2: a rank
reaches call k + 2 only after every peer's note of call k + 1, which a peer sends only once it
has started call k + 1, that is once it is done with the parts of call k. So a part read with
``part`` stays as it was until the caller's next call; copy it to keep it longer.
"""
from .. import _ucx_async as _native
from .. import core
from ..pending import frees_on_failure
from ..continuous_ucx_progress import inline_spin_us
from ._buffers import copy_into, resize


class SharedWindow:
    """An all-to-all through shared-memory windows, opened by ``Communicator.shared_window``.
    Every rank calls ``alltoallv`` together, in order with the communicator's other
    collectives; ``part(r)`` is what rank ``r`` sent in the last call."""

    def __init__(self, comm, memory):
        self._comm = comm
        self._memory = memory
        self._calls = 0
        self._landed = [None] * comm.size  # by sender: ("window", n), ("message", n) or None
        self._messages = [bytearray() for _ in range(comm.size)]

    @classmethod
    async def open(cls, comm, slot):
        """``Communicator.shared_window``: allocates this rank's window (``2 * size * slot``
        bytes) and maps every other rank's; collective."""
        slot = int(slot)
        if slot < 0:
            raise ValueError(f"a slot of {slot} bytes")
        me, size = comm.rank, comm.size
        memory = _native.SharedWindowMemory(core._get_ctx().context, me, size, slot)
        key = memory.pack_rkey()
        lens = bytearray(8 * size)
        await comm.allgather(len(key).to_bytes(8, "little"), lens)
        longest = max(int.from_bytes(lens[i : i + 8], "little") for i in range(0, 8 * size, 8))
        if longest > 1 << 20:
            raise ValueError(f"a rank announced a window key of {longest} bytes")
        entry = _native.shared_window_entry(memory.address, slot, key, longest)
        room = len(entry)
        entries = bytearray(room * size)
        await comm.allgather(entry, entries)
        bad = None  # a peer's bad entry, raised after the barrier so that no rank waits in it
        for r in range(size):
            if r == me:
                continue
            try:
                address, peer_slot, peer_key = _native.shared_window_entry_decode(bytes(entries[r * room : (r + 1) * room]))
                memory.map(r, comm._native_eps[r].unpack_rkey(peer_key), address, peer_slot)
            except Exception as e:  # a bad entry, or a key UCX cannot unpack
                bad = bad or ValueError(f"rank {r}'s window: {e}")
        # No rank returns (and may drop its window, whose memory goes once no process maps
        # it) before every rank has mapped every other's.
        await comm.barrier()
        if bad is not None:
            raise bad
        return cls(comm, memory)

    @property
    def mapped(self):
        """How many ranks' windows this rank reaches through shared memory (itself included)."""
        return self._memory.mapped

    @property
    def on_huge_pages(self):
        """How many of those this rank reaches through a second attachment of the window on
        huge pages (windows under 2 MiB, or outside System V shared memory, have none)."""
        return self._memory.on_huge_pages

    @frees_on_failure
    async def alltoallv(self, parts):
        """``parts[r]`` (a host buffer) goes to rank ``r``; afterwards ``part(r)`` is what rank
        ``r`` sent this rank. Parts of at most the receiver's slot are copied into its window,
        larger ones go as messages."""
        comm = self._comm
        me, size = comm.rank, comm.size
        if len(parts) != size:
            raise ValueError(f"{len(parts)} parts for {size} ranks")
        half = self._calls % 2
        notes, fits = self._memory.write(half, list(parts))  # the copies, and each part's note
        self._calls += 1
        self._landed = [None] * size
        seq = comm._next_seq()
        note_len = len(notes[me])
        heard = bytearray(note_len * size)
        # In one native call, the worker spinning for the inline budget (as a small allgather).
        left = _native.collective_exchange_small(comm._native_eps, me, seq, notes, heard, inline_spin_us())
        if left:
            await comm._finish_native(seq, left, None)
        sends, recvs = [None] * size, [None] * size
        landed = [None] * size
        bad = None  # the first peer's bad note, raised once the healthy peers' parts are in
        for r in range(size):
            if r == me:
                continue
            if not fits[r]:
                sends[r] = parts[r]
            try:
                n, in_window = _native.shared_window_note_decode(bytes(heard[r * note_len : (r + 1) * note_len]))
            except ValueError as e:
                bad = bad or ValueError(f"rank {r} sent a bad note: {e}")
                continue
            if in_window:
                if n > self._memory.slot:
                    bad = bad or ValueError(f"rank {r} wrote {n} bytes into a slot of {self._memory.slot}")
                    continue
                landed[r] = ("window", n)
            else:
                recvs[r] = self._messages[r]
                resize(recvs[r], n)
                landed[r] = ("message", n)
        if any(b is not None for b in sends) or any(b is not None for b in recvs):
            await comm._exchange(seq, 1, sends, recvs)
        if bad is not None:
            raise bad
        own = _native.shared_window_note_decode(notes[me])[0]
        if fits[me]:
            landed[me] = ("window", own)
        else:
            resize(self._messages[me], own)
            copy_into(self._messages[me], parts[me])
            landed[me] = ("message", own)
        self._landed = landed

    def part(self, source):
        """What rank ``source`` sent this rank in the last ``alltoallv``, read-only (empty before
        the first call, or after a failed one); it stays as it is until the next call."""
        if not 0 <= source < self._comm.size:
            raise ValueError(f"rank {source} is not below the world size {self._comm.size}")
        landed = self._landed[source]
        if landed is None:
            return memoryview(b"")
        where, n = landed
        if where == "window":
            return memoryview(self._memory.view((self._calls + 1) % 2, source, n))
        return memoryview(self._messages[source]).toreadonly()

    def parts(self):
        """The parts of the last call, by sender."""
        return [self.part(r) for r in range(self._comm.size)]
