"""UCX-Py's ``Endpoint``: a connection to one peer with tag messages on the endpoint's own
tags, multi-frame and length-prefixed messages, active messages, and the close protocol
(``close()`` sends the control message, ``abort()`` closes at once). Each transfer is one call
into the native extension (``None`` when UCX finished it inline, else a future)."""
import asyncio
import contextlib
import logging
import time

from . import _ucx_async as _native
from . import framing
from ._libs.arr import Array
from ._libs.exceptions import UCXEndpointClosed, UCXError
from .continuous_ucx_progress import inline_spin_us
from .ctrl_msg import CtrlMsg
from .framing import MultiHeader
from .pending import gather_posted, post_all, wait

logger = logging.getLogger("ucx")

__all__ = ["Endpoint", "EndpointClosedError"]


# When a large receive that finished in the call last let the event loop run.
_last_yield = [0.0]


async def _let_the_loop_run():
    """After a receive of a large message that finished in the call (maybe read through by
    single copy, never waiting): a loop of such receives would hold the event loop (its timers
    fired 0.5 s late under a stream of 1 MiB messages), so at most every millisecond the loop
    gets a turn. Not after each one: a pass through the loop costs more than a 64 KiB read."""
    now = time.monotonic()
    if now - _last_yield[0] >= 0.001:
        _last_yield[0] = now
        await asyncio.sleep(0)


# The earlier name of ``UCXEndpointClosed`` (kept for code that imported it).
EndpointClosedError = UCXEndpointClosed


class Endpoint:
    """A connection to one peer: tag messages on per-endpoint tags, active messages, and the
    close protocol. Made by ``create_endpoint``, a listener, or
    ``create_endpoint_from_worker_address``."""

    def __init__(self, endpoint, ctx, tags=None):
        self._ep = endpoint
        self._uid = endpoint.handle
        self._ctx = ctx
        self._worker = ctx.worker
        self._send_count = 0
        self._recv_count = 0
        self._finished_recv_count = 0
        self._shutting_down_peer = False
        self._close_after_n_recv = None
        self._tags = tags
        # What the peer leaves unreceived on its own tags counts against the endpoint's cap.
        # Not user or forced tags: collectives use a new one per operation, and watching
        # each would grow without end.
        for key in ("msg_recv", "ctrl_recv"):
            tag = (tags or {}).get(key)
            if tag is not None:
                endpoint.watch_tag(tag)
        if tags and tags.get("single_copy"):
            # A peer of ours: large host messages between two processes on one host may go
            # by single copy (the native hello exchange decides, in the background).
            endpoint.start_single_copy(tags["msg_recv"], tags["msg_send"])

    @property
    def uid(self):
        """The UCX endpoint handle, as an int (valid after close too)."""
        return self._uid

    def closed(self):
        ep = self._ep
        return ep is None or not ep.initialized or not ep.is_alive()

    @property
    def single_copy(self):
        """``(sending, receiving, sent, received)``: whether this side's large host messages go
        by same-host single copy (the peer reads them from this process's memory), whether it
        reads the peer's, and how many messages did each way (docs/configuration.md,
        ``UCXA_SINGLE_COPY``)."""
        ep = self._ep
        return ep.single_copy() if ep is not None else (False, False, 0, 0)

    @property
    def single_copy_staged(self):
        """Of the messages this side sent by same-host single copy, how many it first copied
        onto huge pages, as it does for memory on 4 KiB pages (docs/configuration.md,
        ``UCXA_SINGLE_COPY_STAGING``)."""
        ep = self._ep
        return ep.single_copy_staged() if ep is not None else 0

    @property
    def alive(self):
        """Whether the endpoint is open and its peer has not failed (UCXX's ``alive``)."""
        return not self.closed()

    def abort(self):
        """Closes the endpoint at once without telling the peer: pending operations on it
        fail with ``UCXEndpointClosed``; the close callback runs. A peer that already failed
        or left is no error; only an endpoint without error handling, whose close UCX fails at
        once, raises ``UCXError`` (as UCX-Py's did); it is closed all the same."""
        ep, self._ep, self._ctx = self._ep, None, None
        if ep is not None:
            logger.debug("Endpoint.abort(): %s", hex(self.uid))
            # Let go of the context even when the close fails (and raises): a caller that
            # keeps the exception, and so this frame, must not keep the context in use.
            try:
                ep.close()
            finally:
                # Messages on this endpoint's own tags can no longer be received: drop them,
                # or a peer's unread sends stay in UCX's unexpected queue for good.
                for key in ("msg_recv", "ctrl_recv"):
                    tag = (self._tags or {}).get(key)
                    if tag is not None:
                        self._worker.purge_unexpected(tag)

    async def close(self):
        """Tells the peer to close after it has received everything sent so far, then closes."""
        if self.closed():
            self.abort()
            return
        if self._shutting_down_peer:
            return
        self._shutting_down_peer = True
        self._ep.begin_close()
        try:
            if self._tags is not None and self._tags.get("ctrl_send") is not None:
                log = "[Send shutdown] ep: %s, tag: %s, close_after_n_recv: %d" % (
                    hex(self.uid),
                    hex(self._tags["ctrl_send"]),
                    self._send_count,
                )
                logger.debug(log)
                msg = CtrlMsg.serialize(opcode=1, close_after_n_recv=self._send_count)
                await wait(self._ep.tag_send(msg, self._tags["ctrl_send"], name=log))
                self._ep.told_peer_to_close()
        except UCXError as e:
            logging.warning("UCX failed closing worker %s (probably already closed): %s" % (hex(self.uid), repr(e)))
        finally:
            if not self.closed():
                self._worker.progress()
                await asyncio.sleep(0)
                self.abort()

    def _tag(self, key, tag, force_tag):
        if force_tag:
            return tag
        if self._tags is None:
            raise UCXError("an endpoint made from a worker address has no tags of its own: pass tag=<int> and force_tag=True")
        if tag is None:
            return self._tags[key]
        return _native.user_tag(self._tags[key], hash(tag))

    def _post_send(self, buffer, tag, spin_us, fast=False):
        """Submits a send on the already computed ``tag``: ``None`` if UCX finished it at once,
        else its future. ``fast``: UCX completes it as early as it can, eagerly where it would
        otherwise start a rendezvous."""
        ep = self._ep
        if ep is None:
            raise UCXEndpointClosed("Endpoint closed")
        self._send_count += 1
        # One native call: raises the peer's failure, or UCXEndpointClosed if closed, first.
        return ep.tag_send_checked(buffer, tag, spin_us, fast)

    def _post_recv(self, buffer, tag, spin_us):
        """Submits a receive on the already computed ``tag``: ``None`` if it finished at once,
        else its future. The caller counts it finished (``_recv_finished``)."""
        ep = self._ep
        if ep is None:
            raise UCXEndpointClosed("Endpoint closed")
        self._recv_count += 1
        # Unless a matching message is already waiting, raises the peer's failure, or
        # UCXEndpointClosed if closed, first. It progresses for up to ``spin_us`` before it hands
        # back a future, so a prompt reply needs no trip through the event loop.
        return ep.tag_recv_checked(buffer, tag, spin_us)

    def _recv_finished(self, n=1):
        self._finished_recv_count += n
        if self._close_after_n_recv is not None and self._finished_recv_count >= self._close_after_n_recv:
            self.abort()

    # ``send`` and ``recv`` run for every message, so each does its work in its own body
    # (``_tag``'s usual case, ``_post_send``/``_post_recv``, ``_recv_finished``): every Python
    # call or coroutine less took about 0.1 us off a one-way 8 B message (docs/log.md, Python).

    async def send(self, buffer, tag=None, force_tag=False):
        """Sends ``buffer`` (buffer protocol or ``__cuda_array_interface__``) on the
        endpoint's tag (or ``tag``, hashed with it unless ``force_tag``). A send that did not
        happen raises: on an endpoint closed for any reason (``UCXEndpointClosed``, saying
        why), whose peer failed (``UCXPeerFailure``), or cancelled by UCX (``UCXCanceled``).
        UCX-Py returned ``None`` for some of these, as if the data had been sent."""
        tags = self._tags
        if tag is None and not force_tag and tags is not None:
            tag = tags["msg_send"]
        else:
            tag = self._tag("msg_send", tag, force_tag)
        ep = self._ep
        if ep is None:
            raise UCXEndpointClosed("Endpoint closed")
        self._send_count += 1
        # One native call: raises the peer's failure, or UCXEndpointClosed if closed, first.
        # It asks ``inline_spin_us`` only if the send did not finish at once. (A send that
        # finished at once returns without a coroutine call: the 8 B round trip's path.)
        fut = ep.tag_send_checked(buffer, tag, inline_spin_us, False)
        if fut is None:
            return True
        try:
            return await fut
        finally:
            fut = None  # see _await_recv

    async def recv(self, buffer, tag=None, force_tag=False):
        """Receives into ``buffer`` (writable, contiguous) a message of exactly its size. A
        message that arrived before the endpoint closed can still be received."""
        tags = self._tags
        if tag is None and not force_tag and tags is not None:
            tag = tags["msg_recv"]
        else:
            tag = self._tag("msg_recv", tag, force_tag)
        ep = self._ep
        if ep is None:
            raise UCXEndpointClosed("Endpoint closed")
        self._recv_count += 1
        # As ``_post_recv``: checks, then progresses for up to the spin (asked of
        # ``inline_spin_us`` only if needed) before a future. ``True``: a large message
        # finished at once (``mark_large``).
        fut = ep.tag_recv_checked(buffer, tag, inline_spin_us, False, True)
        if fut is None:
            ret = True
        elif fut is True:
            ret = True
            await _let_the_loop_run()
        else:
            try:
                ret = await self._await_recv(fut)
            finally:
                fut = None  # see _await_recv
        n = self._finished_recv_count = self._finished_recv_count + 1
        if self._close_after_n_recv is not None and n >= self._close_after_n_recv:
            self.abort()
        return ret

    def _post_recv_up_to(self, buffer, tag, spin_us):
        """Submits a receive (``force_tag``) of a message of at most ``buffer``'s size, for
        messages whose size the receiver cannot know (the collectives' announcements, which
        carry small parts): the length if the message was already there, else its future,
        for ``_recv_up_to_done``. Lets a caller post many receives before it waits."""
        ep = self._ep
        if ep is None:
            raise UCXEndpointClosed("Endpoint closed")
        self._recv_count += 1
        return ep.tag_recv_checked(buffer, tag, spin_us, up_to=True)

    def _abandon_recv(self, got):
        """Lets go of a ``_post_recv_up_to`` receive whose caller will not wait for it (it was
        cancelled): an unfinished one is cancelled; one whose message already arrived lost that
        message, so the endpoint is closed, as ``_await_recv`` does."""
        if not isinstance(got, int) and not got.done():
            got.cancel()
        elif isinstance(got, int) or (not got.cancelled() and got.exception() is None):
            ep = self._ep
            if ep is not None:
                ep.close_for_lost_message()

    async def _recv_up_to_done(self, got):
        """The length ``_post_recv_up_to``'s receive got, once it has."""
        if not isinstance(got, int):
            got = await self._await_recv(got)
        self._recv_finished()
        return got

    async def _await_recv(self, fut):
        # A frame that awaits a future which fails must not keep it: the failure's traceback
        # holds the frame, the frame the future, the future the failure. That cycle kept the
        # endpoint and its buffers alive until Python's cycle collector ran (a server whose
        # peers were killed held 15-30 MiB more between collections). Hence `fut = None` in
        # the `finally` of every such await.
        try:
            return await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled() and fut.exception() is None:
                # The message arrived, but the caller's cancel reached the task first: it is
                # lost to them. Closed as when UCX could not withdraw the receive, so the next
                # receive fails clearly instead of silently getting the message after.
                ep = self._ep
                if ep is not None:
                    ep.close_for_lost_message()
            raise
        finally:
            fut = None

    async def send_multi(self, buffers, tag=None, force_tag=False):
        """Sends several frames as one message, in UCXX's multi-buffer framing (so a UCXX
        ``recv_multi`` receives them too): headers of up to 100 frames each, then the frames,
        all posted at once (no task per frame) and awaited together."""
        _, sent = self.post_multi(buffers, tag, force_tag)
        if sent is not None:
            try:
                await sent
            finally:
                sent = None  # see _await_recv

    def post_multi(self, buffers, tag=None, force_tag=False):
        """``send_multi`` without the coroutine: posts everything before it returns. Returns
        the frames' total size and a future of the sends (``None``: all finished at once), so
        a caller that must not wait for the peer (Dask's comm) need not make a task."""
        arrays = [Array(b) for b in buffers]
        headers = MultiHeader.pack_all([(a.cuda, a.nbytes) for a in arrays])
        tag = self._tag("msg_send", tag, force_tag)
        sent = post_all(self._post_send(b, tag, 0) for b in (*headers, *buffers))
        return sum(a.nbytes for a in arrays), sent

    async def recv_multi(self, tag=None, force_tag=False, allocator=bytearray, device_allocator=None, max_size=None):
        """Receives the frames of one ``send_multi`` (ours or UCXX's): host frames into
        ``allocator(nbytes)``, CUDA frames into ``device_allocator(nbytes)`` (default: an RMM
        ``DeviceBuffer``, or a CuPy array). Every frame's receive is posted as soon as the
        headers are in. A message larger than ``max_size`` bytes (default
        ``default_max_message_size()``) is refused before anything is allocated."""
        header = bytearray(MultiHeader.SIZE)
        await self.recv(header, tag=tag, force_tag=force_tag)
        # From here on the message is partly received: the rest must not be left for the
        # next receive to read as a message of its own.
        async with self._whole_message():
            layout, nbytes = [], 0
            while True:
                more, frames = MultiHeader.unpack(header)
                layout += frames
                nbytes += sum(n for _, n in frames)
                # Checked per header: a peer announcing headers without end is refused as soon
                # as its total passes a limit, not once it has filled our memory with entries.
                framing.check_message_size(self, "recv_multi", nbytes, max_size)
                if len(layout) > framing.MAX_FRAMES:
                    framing.refuse(self, f"recv_multi: the peer announced more than {framing.MAX_FRAMES} frames")
                if not more:
                    break
                header = bytearray(MultiHeader.SIZE)
                await self.recv(header, tag=tag, force_tag=force_tag)
            if any(cuda for cuda, _ in layout) and device_allocator is None:
                device_allocator = framing.device_buffer
            frames = [device_allocator(n) if cuda else allocator(n) for cuda, n in layout]
            tag = self._tag("msg_recv", tag, force_tag)
            await gather_posted(self._post_recv(b, tag, 0) for b in frames)
        self._recv_finished(len(frames))
        return frames

    async def am_send(self, buffer):
        """Sends ``buffer`` as an active message (received with ``am_recv``)."""
        if self._ep is None:
            raise UCXEndpointClosed("Endpoint closed")
        self._send_count += 1
        return await wait(self._ep.am_send(buffer))  # no local future: see _await_recv

    async def am_recv(self):
        """The next active message from the peer, in an object from the registered allocator
        (``bytearray`` by default for host memory)."""
        if self._ep is None:
            raise UCXEndpointClosed("Endpoint closed")
        if not self._ep.am_probe():
            self._ep.check_open()
        self._recv_count += 1
        fut = self._ep.am_recv()
        try:
            ret = await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled() and fut.exception() is None and self._ep is not None:
                # The message arrived, but the caller's cancel reached the task first: put it
                # back for the next am_recv.
                self._ep.am_requeue(fut.result())
            raise
        finally:
            fut = None  # see _await_recv
        self._recv_finished()
        return ret

    async def send_obj(self, obj, tag=None):
        """Sends ``obj`` preceded by its size (8 bytes)."""
        if not isinstance(obj, (bytes, bytearray, memoryview)) and not hasattr(obj, "__cuda_array_interface__"):
            obj = memoryview(obj)
        nbytes = framing.encode_obj_len(Array(obj).nbytes)
        # Both posted before the first wait: a cancel between them would leave the peer a size
        # without its object. (UCX finishes a posted send whatever the caller does.)
        tag = self._tag("msg_send", tag, False)
        await gather_posted(self._post_send(b, tag, 0) for b in (nbytes, obj))

    async def recv_obj(self, tag=None, allocator=bytearray, max_size=None):
        """Receives an object sent with ``send_obj`` into ``allocator(size)``; a size above
        ``max_size`` (default ``default_max_message_size()``) is refused before allocating."""
        prefix = bytearray(framing.OBJ_LEN_SIZE)
        await self.recv(prefix, tag=tag)
        async with self._whole_message():
            nbytes = framing.decode_obj_len(prefix)
            framing.check_message_size(self, "recv_obj", nbytes, max_size)
            obj = allocator(nbytes)
            await self.recv(obj, tag=tag)
        return obj

    @contextlib.asynccontextmanager
    async def _whole_message(self):
        """Around the receives that finish a message whose first part was received: if the
        caller cancels them, the rest of the message would be read as the next one, so the
        endpoint is closed (the next receive says why) instead."""
        try:
            yield
        except asyncio.CancelledError:
            ep = self._ep
            if ep is not None:
                ep.close_for_lost_message()
            raise

    def close_after_n_recv(self, n, count_from_ep_creation=False):
        """Closes the endpoint once ``n`` more receives (or ``n`` since creation) finished."""
        if not count_from_ep_creation:
            n += self._finished_recv_count
        if self._close_after_n_recv is not None:
            raise UCXError("close_after_n_recv has already been set to: %d (abs)" % self._close_after_n_recv)
        if n == self._finished_recv_count:
            self.abort()
        elif n > self._finished_recv_count:
            self._close_after_n_recv = n
        else:
            raise UCXError(
                "`n` cannot be less than current recv_count: %d (abs) < %d (abs)" % (n, self._finished_recv_count)
            )

    def set_close_callback(self, callback_func):
        """Runs ``callback_func()`` once, when the endpoint closes or its peer fails."""
        self._ep.set_close_callback(callback_func)

    async def flush(self):
        """Waits until every operation posted on the endpoint has completed remotely."""
        if self._ep is None:
            raise UCXEndpointClosed("Endpoint closed")
        return await wait(self._ep.flush())

    def cuda_support(self):
        return self._ctx.context.cuda_support

    def get_ucp_worker(self):
        return self._ctx.worker.handle

    def get_ucp_endpoint(self):
        return self._ep.handle

    def ucx_info(self):
        return self._ep.info()

    @property
    def local_address(self):
        """``(host, port)`` of this side of a client-server endpoint, when known."""
        return self._ep.socket_addrs()[0]

    @property
    def peer_address(self):
        """``(host, port)`` of the peer of a client-server endpoint, when known."""
        return self._ep.socket_addrs()[1]
