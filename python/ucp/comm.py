"""UCX-Py's ``ucp.comm``: asyncio futures over the native operations, for code that drives
endpoints and workers directly. Each function returns a future (already done when UCX
finished the operation inline)."""
from .pending import as_future as _future


def tag_send(ep, buffer, nbytes, tag, name="tag_send", event_loop=None):
    return _future(ep.tag_send(buffer, tag, name=name), event_loop)


def am_send(ep, buffer, nbytes, name="am_send", event_loop=None):
    return _future(ep.am_send(buffer, name=name), event_loop)


def stream_send(ep, buffer, nbytes, name="stream_send", event_loop=None):
    return _future(ep.stream_send(buffer, name=name), event_loop)


def tag_recv(obj, buffer, nbytes, tag, name="tag_recv", event_loop=None):
    """A worker-wide receive; given an endpoint, it is canceled when that endpoint closes."""
    return _future(obj.tag_recv(buffer, tag, name=name), event_loop)


def am_recv(ep, name="am_recv", event_loop=None):
    return ep.am_recv()


def stream_recv(ep, buffer, nbytes, name="stream_recv", event_loop=None):
    return _future(ep.stream_recv(buffer, name=name), event_loop)


def flush_worker(worker, event_loop=None):
    return _future(worker.flush(), event_loop)


def flush_ep(ep, event_loop=None):
    return _future(ep.flush(), event_loop)


__all__ = ["tag_send", "am_send", "stream_send", "tag_recv", "am_recv", "stream_recv", "flush_worker", "flush_ep"]
