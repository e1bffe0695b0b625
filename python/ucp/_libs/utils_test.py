"""Blocking and callback-driven wrappers over the low-level `ucx_api` transfers, for tests and
the `ucp-core` benchmark (UCX-Py's `ucp._libs.utils_test`).

A low-level call returns None when it completed inline, in which case its callback is never
called; every helper here handles both outcomes. `ucx_api` is imported inside the functions so
that this module imports even where the low-level API is unavailable.
"""
import multiprocessing

from .arr import Array

mp = multiprocessing.get_context("spawn")


def blocking_handler(request, exception, finished):
    """Completion callback that marks `finished[0]`; the transfer must not have failed."""
    assert exception is None
    finished[0] = True


def _progress_until(progress, finished):
    while not finished[0]:
        progress()


def blocking_flush(obj):
    """Flush a worker or an endpoint, progressing until done."""
    progress = obj.progress if hasattr(obj, "progress") else obj.worker.progress
    finished = [False]
    if obj.flush(cb_func=blocking_handler, cb_args=(finished,)) is not None:
        _progress_until(progress, finished)


def blocking_send(worker, ep, msg, tag=0):
    """Tag-send `msg` on `ep`, progressing `worker` until it completes."""
    from . import ucx_api

    msg = Array(msg)
    finished = [False]
    req = ucx_api.tag_send_nb(ep, msg, msg.nbytes, tag=tag, cb_func=blocking_handler, cb_args=(finished,))
    if req is not None:
        _progress_until(worker.progress, finished)


def blocking_recv(worker, ep, msg, tag=0):
    """Tag-receive into `msg`, progressing `worker` until it completes (cancelled with `ep`)."""
    from . import ucx_api

    msg = Array(msg)
    finished = [False]
    req = ucx_api.tag_recv_nb(
        worker, msg, msg.nbytes, tag=tag, cb_func=blocking_handler, cb_args=(finished,), ep=ep
    )
    if req is not None:
        _progress_until(worker.progress, finished)


def non_blocking_handler(request, exception, completed_cb):
    """Completion callback that calls `completed_cb()`; the transfer must not have failed."""
    if exception is not None:
        print(exception)
    assert exception is None
    completed_cb()


def non_blocking_send(worker, ep, msg, started_cb, completed_cb, tag=0):
    """Start a tag send; `started_cb()` now, `completed_cb()` when done (maybe before returning)."""
    from . import ucx_api

    msg = Array(msg)
    started_cb()
    req = ucx_api.tag_send_nb(
        ep, msg, msg.nbytes, tag=tag, cb_func=non_blocking_handler, cb_args=(completed_cb,)
    )
    if req is None:
        completed_cb()
    return req


def non_blocking_recv(worker, ep, msg, started_cb, completed_cb, tag=0):
    """Start a tag receive; `started_cb()` now, `completed_cb()` when done (maybe before returning)."""
    from . import ucx_api

    msg = Array(msg)
    started_cb()
    req = ucx_api.tag_recv_nb(
        worker, msg, msg.nbytes, tag=tag, cb_func=non_blocking_handler, cb_args=(completed_cb,), ep=ep
    )
    if req is None:
        completed_cb()
    return req


def blocking_am_send(worker, ep, msg):
    """Active-message send of `msg` on `ep`, progressing `worker` until it completes."""
    from . import ucx_api

    msg = Array(msg)
    finished = [False]
    req = ucx_api.am_send_nbx(ep, msg, msg.nbytes, cb_func=blocking_handler, cb_args=(finished,))
    if req is not None:
        _progress_until(worker.progress, finished)


def blocking_am_recv_handler(recv_obj, exception, ret):
    """Active-message receive callback that stores the received object in `ret[0]`."""
    assert exception is None
    ret[0] = recv_obj


def blocking_am_recv(worker, ep):
    """Receive one active message from `ep`, progressing `worker` until it arrives; returns it."""
    from . import ucx_api

    ret = [None]
    ucx_api.am_recv_nb(ep, cb_func=blocking_am_recv_handler, cb_args=(ret,))
    while ret[0] is None:
        worker.progress()
    return ret[0]
