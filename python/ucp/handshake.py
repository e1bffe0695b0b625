"""The peer-info handshake that follows a client-server connection: each side's tags, swapped
over the stream API, listener first. A listener speaks UCX-Py's 24-byte form (little-endian
``msg_tag``, ``ctrl_tag``, ``hash64bits(msg_tag, ctrl_tag)``) or UCXX's 16-byte one
(``msg_tag``, ``hash64bits(msg_tag)``); a client reads 16 bytes, tells which it got, and answers
in kind (docs/python.md, "Wire protocol").
The bytes and checksums are ucx-core's (``wire::handshake``, through the extension); this is
the flow."""
import os

from . import _ucx_async as _native
from ._libs.exceptions import UCXConnectionRefused, UCXError, UCXNotConnected, UCXUnreachable
from .pending import wait
from .utils import hash64bits

__all__ = ["WIRE_PROTOCOLS", "exchange_peer_info"]

WIRE_PROTOCOLS = ("ucx-py", "ucxx")


def default_wire_protocol():
    """``UCXPY_WIRE_PROTOCOL`` (``"ucx-py"`` when unset)."""
    value = os.environ.get("UCXPY_WIRE_PROTOCOL", "ucx-py")
    if value not in WIRE_PROTOCOLS:
        raise ValueError(f"UCXPY_WIRE_PROTOCOL must be one of {WIRE_PROTOCOLS}, not {value!r}")
    return value


async def exchange_peer_info(endpoint, msg_tag, ctrl_tag, listener, connect_timeout=5.0, wire_protocol=None):
    """Exchanges tags with the peer and returns its ``{"msg_tag", "ctrl_tag"}`` (``ctrl_tag`` is
    ``None`` for a UCXX peer). A bad checksum raises ``RuntimeError("Checksum invalid! ...")``
    as UCX-Py did. A client whose connection fails before the listener's first bytes arrive
    raises ``UCXConnectionRefused``: no listener answered."""
    if wire_protocol is None:
        wire_protocol = "ucx-py"
    send = lambda b: wait(endpoint.stream_send(b, name="peer info send"), connect_timeout)  # noqa: E731
    recv = lambda b: wait(endpoint.stream_recv(b, name="peer info recv"), connect_timeout)  # noqa: E731
    if listener:
        mine = _native.peer_info_encode(wire_protocol, msg_tag, ctrl_tag)
        await send(mine)
        peer = bytearray(len(mine))
        await recv(peer)
        return _peer(wire_protocol, peer)
    head = bytearray(_native.PEER_INFO_DETECT_LEN)
    try:
        await recv(head)
    except (UCXError, UCXNotConnected) as e:
        if isinstance(e, UCXUnreachable):
            raise
        # Nothing from the listener yet: no listener answered (create_endpoint names where).
        raise UCXConnectionRefused(str(e)) from e
    protocol = _native.peer_info_detect(bytes(head))
    peer = head
    if protocol == "ucx-py":
        rest = bytearray(_native.PEER_INFO_UCXPY_LEN - len(head))
        await recv(rest)
        peer = head + rest
    await send(_native.peer_info_encode(protocol, msg_tag, ctrl_tag))
    return _peer(protocol, peer)


def _peer(protocol, peer):
    msg_tag, ctrl_tag = _native.peer_info_decode(protocol, bytes(peer))
    marked = ctrl_tag is not None and _native.single_copy_marked(msg_tag, ctrl_tag)
    return {"msg_tag": msg_tag, "ctrl_tag": ctrl_tag, "single_copy": marked}


def new_tags(ucx_ep):
    """This side's fresh ``(msg_tag, ctrl_tag)`` for the native endpoint ``ucx_ep``:
    ``msg_tag`` by UCX-Py's derivation, ``ctrl_tag`` derived from it with the mark that tells
    a peer of ours that this side speaks the same-host single-copy path (a UCX-Py or UCXX peer
    uses it as any tag). Where the endpoint does not offer the path (turned off with
    ``UCXA_SINGLE_COPY=0``, or UCX's shared memory serves it: no peer error handling, or
    ``UCX_MM_ERROR_HANDLING=y``) both are UCX-Py's."""
    seed = os.urandom(16)
    msg_tag = hash64bits("msg_tag", seed, ucx_ep.handle)
    marked = _native.single_copy_ctrl_tag(msg_tag) if ucx_ep.offers_single_copy else None
    return msg_tag, marked if marked is not None else hash64bits("ctrl_tag", seed, ucx_ep.handle)


def tag_map(msg_tag, ctrl_tag, peer_info):
    """The endpoint's four tags: what it sends and receives on, for messages and control;
    and whether the peer carried the single-copy mark."""
    return {
        "msg_send": peer_info["msg_tag"],
        "msg_recv": msg_tag,
        "ctrl_send": peer_info["ctrl_tag"],
        "ctrl_recv": ctrl_tag if peer_info["ctrl_tag"] is not None else None,
        "single_copy": peer_info.get("single_copy", False),
    }
