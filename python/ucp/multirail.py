"""Multi-rail: one message split over several ``ucp`` endpoints to the same peer (rails).

``RailGroup.send`` puts a header on rail 0 (the message's size and each rail's share) and
every chunk at once on its rail; ``RailGroup.recv`` receives each chunk straight into its
place in the caller's buffer. ``RailGroup.connect`` dials a ``RailListener``, whose rails
each say which group and rail they are. The bytes, the tags and the arithmetic that cuts a
message come from ucx-core through the extension: the protocol of ucx-async's ``RailGroup``.

By default every rail lives on ``ucp``'s one context, so all use the same devices: rails then
add connections, not NICs. Given ``devices`` (one ``UCX_NET_DEVICES`` value per rail, or
``"auto"``: ``rail_devices()``'s choice from the topology), each rail gets a UCX context and
worker of its own (an ``ApplicationContext``) on those devices, as ucx-async's rails do.

Buffers are host memory (the buffer protocol) or CUDA arrays (``__cuda_array_interface__``),
cut into chunks by ``ucp._libs.arr.byte_view``; the two sides' memory types may differ.

A failure on any rail, a message too big for the buffer, or a transfer cancelled midway
aborts every rail: the message's other chunks would otherwise be read as the next message.
"""
import asyncio
import logging
import os
from functools import partial

from . import _ucx_async as _native
from ._libs.arr import byte_view
from ._libs.exceptions import UCXBaseException, UCXError
from .application import ApplicationContext
from .core import create_endpoint, create_listener

__all__ = ["RailGroup", "RailListener", "rail_devices"]

logger = logging.getLogger("ucx")

_HELLO_LEN = 18
# How long an accepted rail may take to say which group it belongs to.
_HELLO_TIMEOUT = 5.0


def _weights(rails, ratio, weights):
    """The rails' weights from ``ratio`` (the share sent on the peer rails, rails 1 and up,
    the rest on rail 0) or ``weights``; even when neither is given."""
    if weights is not None:
        if ratio is not None:
            raise ValueError("give ratio or weights, not both")
        if len(weights) != rails:
            raise ValueError(f"{len(weights)} weights for a group of {rails} rails")
        return [float(w) for w in weights]
    if ratio is None:
        return [1.0] * rails
    return _native.multirail_ratio_weights(rails, float(ratio))


def _on_rail(rail, e):
    """``e`` with the rail named, of the same class (the cause stays catchable)."""
    try:
        return type(e)(f"rail {rail}: {e}")
    except Exception:  # a class that takes other arguments
        return e


def rail_devices(rails, cuda=None, pci=None, cpus=None, xml=None):
    """One ``UCX_NET_DEVICES`` value per rail: a NIC each, nearest the CUDA device ``cuda`` (or
    PCI device ``pci``, or CPU set ``cpus``) first, NICs reused in order when there are fewer
    than ``rails`` (ucx-topology's ``Topology::rail_devices``). With none of the three: from
    this process's GPU (its local rank's, as ``net-devices: auto`` picks it), else from the CPUs
    it may run on (``Topology::auto_rail_devices``). ``xml``: an hwloc XML topology instead of
    this machine's (default ``UCXPY_TOPOLOGY_XML``)."""
    from ._libs.topological_distance import load_topology

    topology = load_topology(xml)
    if cuda is None and pci is None and cpus is None:
        from .collective import local_rank

        return topology.auto_rail_devices(local_rank(), rails)
    return topology.rail_devices(rails, pci=pci, cuda=cuda, cpus=cpus)


def _rail_contexts(n, devices, hosts):
    """``None`` for each rail on ucp's context, else one ``ApplicationContext`` per rail on its
    devices. ``"auto"``: ``rail_devices(n)``'s, each plus the interface that owns its rail's
    address in ``hosts`` (a local address, such as 127.0.0.1, is reached only through its own
    interface, as the Dask comm's ``net-devices: auto`` keeps its listener's)."""
    from ._libs.topological_distance import with_own_interface

    if devices is None:
        return [None] * n
    if devices == "auto":
        devices = [with_own_interface(d, host) for d, host in zip(rail_devices(n), hosts)]
        logger.info("rail devices chosen from the topology: %s", devices)
    if len(devices) != n:
        raise ValueError(f"{len(devices)} device settings for {n} rails")
    return [ApplicationContext({"NET_DEVICES": d}) for d in devices]


class RailGroup:
    """Several ``ucp`` endpoints to one peer used as one connection. The n-th ``recv`` gets
    the peer's n-th ``send``."""

    def __init__(self, endpoints):
        if not 1 <= len(endpoints) <= 64:
            raise ValueError(f"{len(endpoints)} rails: a group has 1 to 64")
        for i, ep in enumerate(endpoints):
            if ep._tags is None:
                raise ValueError(f"rail {i} was made from a worker address and has no tags of its own")
        self._rails = list(endpoints)
        self._sent = 0
        self._received = 0
        self._broken = False

    @classmethod
    async def connect(cls, addresses, devices=None):
        """Connects rail ``i`` to ``addresses[i]`` (``(host, port)``, a ``RailListener``'s
        ports), all at once, and introduces each rail. ``devices``: one ``UCX_NET_DEVICES``
        value per rail, each rail then on a UCX context of its own (see the module doc), or
        ``"auto"`` (``rail_devices``' choice, plus the interface of a rail's address where this
        host owns it)."""
        n = len(addresses)
        if not 1 <= n <= 64:
            raise ValueError(f"{n} rails: a group has 1 to 64")
        contexts = _rail_contexts(n, devices, [h for h, _ in addresses])
        group = int.from_bytes(os.urandom(8), "little")

        async def rail(i, host, port):
            try:
                ctx = contexts[i]
                ep = await (ctx.create_endpoint(host, port) if ctx is not None else create_endpoint(host, port))
                await ep.send(_native.multirail_hello(group, i, n))
                return ep
            except UCXBaseException as e:
                raise _on_rail(i, e) from e

        results = await asyncio.gather(*(rail(i, h, p) for i, (h, p) in enumerate(addresses)), return_exceptions=True)
        failed = [r for r in results if isinstance(r, BaseException)]
        if failed:
            for r in results:
                if not isinstance(r, BaseException):
                    r.abort()
            raise failed[0]
        return cls(results)

    @property
    def rails(self):
        """The rails' endpoints, in order."""
        return list(self._rails)

    async def send(self, buffer, ratio=None, weights=None, stages=1):
        """Sends ``buffer`` split by ``ratio`` (the share on the peer rails) or ``weights``
        (one per rail; even if neither), each rail's share in ``stages`` chunks."""
        self._check()
        view = byte_view(buffer)
        shares = _native.multirail_shares(_weights(len(self._rails), ratio, weights), view.nbytes)
        header, chunks = _native.multirail_header(view.nbytes, stages, shares)
        message = self._sent
        self._sent += 1
        posts = [self._part(0, "msg_send", header, message, 0)]
        for rail, part, at, length in chunks:
            if length:
                posts.append(self._part(rail, "msg_send", view[at : at + length], message, part))
        try:
            await asyncio.gather(*posts)
        except BaseException:
            self.abort()
            raise

    async def recv(self, buffer):
        """Receives the next message into the start of ``buffer`` (writable); returns its
        length. A message longer than ``buffer`` raises ``ValueError`` and aborts the group."""
        self._check()
        view = byte_view(buffer)
        if view.readonly:
            raise ValueError("recv needs a writable buffer")
        message = self._received
        self._received += 1
        try:
            header = bytearray(_native.multirail_header_len(len(self._rails)))
            await self._part(0, "msg_recv", header, message, 0)
            try:
                total, shares, chunks = _native.multirail_header_decode(bytes(header))
            except ValueError as e:
                raise UCXError(f"RailGroup.recv: protocol violation: {e}") from e
            if len(shares) != len(self._rails):
                raise UCXError(f"RailGroup.recv: a message split over {len(shares)} rails, the group has {len(self._rails)}")
            if total > view.nbytes:
                raise ValueError(f"RailGroup.recv: a message of {total} bytes does not fit the {view.nbytes}-byte buffer")
            posts = [
                self._part(rail, "msg_recv", view[at : at + length], message, part)
                for rail, part, at, length in chunks
                if length
            ]
            # Every chunk settles before a failure is raised: UCX may be writing into the
            # caller's buffer, and the sender's abort ends the rest promptly.
            for r in await asyncio.gather(*posts, return_exceptions=True):
                if isinstance(r, BaseException):
                    raise r
            return total
        except BaseException:
            self.abort()
            raise

    async def close(self):
        """Closes every rail (each tells its peer, as ``Endpoint.close`` does)."""
        self._broken = True
        for ep in self._rails:
            await ep.close()

    def abort(self):
        """Aborts every rail at once."""
        self._broken = True
        for ep in self._rails:
            ep.abort()

    def _check(self):
        if self._broken:
            raise UCXError("RailGroup: the group was aborted or closed")

    async def _part(self, rail, key, data, message, part):
        ep = self._rails[rail]
        tag = _native.multirail_part_tag(ep._tags[key], message, part)
        try:
            if key == "msg_send":
                await ep.send(data, tag=tag, force_tag=True)
            else:
                await ep.recv(data, tag=tag, force_tag=True)
        except UCXBaseException as e:
            raise _on_rail(rail, e) from e


class RailListener:
    """A listener per rail; ``accept()`` returns the next group whose every rail has
    connected and said which group and rail it is. A connection that names another rail
    than its listener's, or no group within 5 s, is dropped and logged. ``devices``: one
    ``UCX_NET_DEVICES`` value per rail, each rail's listener on a UCX context of its own, or
    ``"auto"`` (``rail_devices``' choice, plus ``ip``'s own interface)."""

    def __init__(self, rails, ip=None, devices=None):
        if not 1 <= rails <= 64:
            raise ValueError(f"{rails} rails: a group has 1 to 64")
        self._n = rails
        self._pending = {}
        self._ready = asyncio.Queue()
        listen = [
            (ctx.create_listener if ctx is not None else create_listener)
            for ctx in _rail_contexts(rails, devices, [ip] * rails)
        ]
        self._listeners = [listen[i](partial(self._on_connect, i), ip=ip) for i in range(rails)]

    @property
    def ports(self):
        """The listeners' ports, rail 0 first."""
        return [lf.port for lf in self._listeners]

    async def accept(self):
        """The next complete group."""
        return await self._ready.get()

    def close(self):
        """Stops listening and aborts rails of groups not complete yet."""
        for lf in self._listeners:
            lf.close()
        for slots in self._pending.values():
            for ep in slots:
                if ep is not None:
                    ep.abort()
        self._pending.clear()

    async def _on_connect(self, rail, ep):
        hello = bytearray(_HELLO_LEN)
        try:
            await asyncio.wait_for(ep.recv(hello), _HELLO_TIMEOUT)
            group, said, rails = _native.multirail_hello_decode(bytes(hello))
            if said != rail or rails != self._n:
                raise ValueError(f"the connection says it is rail {said} of {rails}, expected rail {rail} of {self._n}")
        except (UCXBaseException, ValueError, asyncio.TimeoutError) as e:
            logger.warning("RailListener: rail %d refused: %r", rail, e)
            ep.abort()
            return
        slots = self._pending.setdefault(group, [None] * self._n)
        if slots[rail] is not None:
            slots[rail].abort()  # a second connection for the same rail: the first loses
        slots[rail] = ep
        if all(s is not None for s in slots):
            del self._pending[group]
            self._ready.put_nowait(RailGroup(slots))
