"""UCX-Py's control message, the close protocol's one message: ``(opcode, close_after_n_recv)``
sent on the peer's control tag; opcode 1 means "shut down once you have received N messages".
The bytes are ucx-core's (``wire::ctrl``); this is when it is posted and what receiving it
does."""
import logging
import weakref
from functools import partial

from . import _ucx_async as _native
from .pending import as_future

logger = logging.getLogger("ucx")

__all__ = ["CtrlMsg"]


class CtrlMsg:
    """UCX-Py's ``CtrlMsg`` (same methods)."""

    nbytes = _native.CTRL_MSG_LEN

    @staticmethod
    def serialize(opcode, close_after_n_recv):
        return _native.ctrl_msg_encode(int(opcode), int(close_after_n_recv))

    @staticmethod
    def deserialize(serialized_bytes):
        return _native.ctrl_msg_decode(bytes(serialized_bytes))

    @staticmethod
    def handle_ctrl_msg(ep_weakref, log, msg, fut):
        """Acts on a received control message (a done-callback of the control receive, so it
        runs after the tasks that the same progress pass woke, as in UCX-Py)."""
        if fut.cancelled() or fut.exception() is not None:
            # Canceled when the endpoint closed; nothing to do.
            logger.debug("%s ended: %r", log, None if fut.cancelled() else fut.exception())
            return
        ep = ep_weakref()
        if ep is None or ep.closed():
            if ep is not None:
                ep.abort()
            return
        opcode, close_after_n_recv = CtrlMsg.deserialize(msg)
        if opcode == 1:
            ep.close_after_n_recv(close_after_n_recv, count_from_ep_creation=True)
        else:
            logger.error("Received unknown control opcode: %s", opcode)

    @staticmethod
    def setup_ctrl_recv(ep):
        """Posts the receive for the peer's control message."""
        msg = bytearray(CtrlMsg.nbytes)
        log = "[Recv shutdown] ep: %s, tag: %s" % (hex(ep.uid), hex(ep._tags["ctrl_recv"]))
        # A future even when the message was already there (received inline).
        fut = as_future(ep._ep.tag_recv(msg, ep._tags["ctrl_recv"], name=log))
        fut.add_done_callback(partial(CtrlMsg.handle_ctrl_msg, weakref.ref(ep), log, msg))
