"""UCX-Py's low-level API (`ucp._libs.ucx_api`): objects, the callback convention of the
transfer functions, requests, feature checks, cancellation on peer failure, and RMA."""
import io
import os
import pickle

import pytest

from ucp._libs import ucx_api
from ucp._libs.arr import Array
from ucp._libs.utils_test import blocking_flush, blocking_recv, blocking_send
from ucp.exceptions import UCXCanceled


def self_endpoint(features=None):
    ctx = ucx_api.UCXContext({}) if features is None else ucx_api.UCXContext(feature_flags=features)
    worker = ucx_api.UCXWorker(ctx)
    ep = ucx_api.UCXEndpoint.create_from_worker_address(worker, worker.get_address(), endpoint_error_handling=True)
    return ctx, worker, ep


def test_address_pickles_and_hashes():
    _, worker, _ = self_endpoint()
    addr = worker.get_address()
    again = pickle.loads(pickle.dumps(addr))
    assert again == addr and hash(again) == hash(addr) and again.length == len(bytes(addr))


def test_callback_convention_and_requests():
    _, worker, ep = self_endpoint()
    calls = []

    def cb(request, exception, *args, **kwargs):
        calls.append((request, exception, args, kwargs))

    # A receive with nothing to match stays in flight and returns a request.
    buf = Array(bytearray(5))
    req = ucx_api.tag_recv_nb(worker, buf, 5, tag=3, cb_func=cb, cb_args=("a",), cb_kwargs={"k": 1}, ep=ep)
    assert isinstance(req, ucx_api.UCXRequest) and req.info["status"] == "pending"
    sent = ucx_api.tag_send_nb(ep, Array(b"hello"), 5, tag=3, cb_func=cb)
    while not calls:
        worker.progress()
    request, exception, args, kwargs = calls[-1]
    assert request is req and exception is None and args == ("a",) and kwargs == {"k": 1}
    assert req.closed() and req.info["status"] == "finished"
    assert bytes(buf.obj) == b"hello"
    # A send UCX finished inline returns None and never calls its callback.
    if sent is None:
        assert len(calls) == 1


def test_cancel_reports_canceled_with_the_name():
    _, worker, ep = self_endpoint()
    got = []
    req = ucx_api.tag_recv_nb(worker, Array(bytearray(1)), 1, tag=9, cb_func=lambda r, e: got.append(e), ep=ep)
    worker.request_cancel(req)
    while not got:
        worker.progress()
    assert isinstance(got[0], UCXCanceled) and "tag_recv_nb" in got[0].args[0]


def test_feature_checks():
    _, worker, ep = self_endpoint(features=(ucx_api.Feature.AM,))
    with pytest.raises(ValueError, match="UCXContext must be created with `Feature.TAG`"):
        ucx_api.tag_send_nb(ep, Array(b"x"), 1, tag=0, cb_func=None)
    with pytest.raises(ValueError, match="UCXContext must be created with `Feature.STREAM`"):
        ucx_api.stream_send_nb(ep, Array(b"x"), 1, cb_func=None)


def test_blocking_helpers_and_am():
    ctx, worker, ep = self_endpoint()
    blocking_send(worker, ep, b"abc", tag=1)
    got = bytearray(3)
    blocking_recv(worker, ep, got, tag=1)
    assert got == b"abc"
    received = []
    ucx_api.am_send_nbx(ep, Array(b"am!"), 3, cb_func=lambda r, e: None)
    ucx_api.am_recv_nb(ep, cb_func=lambda obj, exc: received.append((obj, exc)))
    while not received:
        worker.progress()
    assert received == [(bytearray(b"am!"), None)]
    blocking_flush(worker)
    blocking_flush(ep)


@pytest.mark.parametrize("size", [10, 1 << 20])
def test_rma_put_get_and_ucxio(size):
    ctx, worker, ep = self_endpoint()
    mem = ucx_api.UCXMemoryHandle.alloc(ctx, size)
    rkey = ep.unpack_rkey(mem.pack_rkey())
    remote = ucx_api.RemoteMemory(rkey, mem.address, size)
    data = os.urandom(size)
    if not remote.put_nbi(data):
        blocking_flush(ep)
    back = bytearray(size)
    if not remote.get_nbi(back):
        blocking_flush(ep)
    assert back == data
    with pytest.raises(IndexError, match="Out of bounds in UCX RMA interface"):
        remote.put_nbi(data, offset=1)

    uio = ucx_api.UCXIO(mem.address, size, rkey)
    payload = os.urandom(size)
    uio.write(payload)
    uio.seek(-5, io.SEEK_END)
    assert uio.read(5) == payload[-5:]
    assert uio.seek(1 << 31) == size and uio.read(1) == b""


def test_map_python_buffers():
    ctx = ucx_api.UCXContext({})
    writable = bytearray(b"0123456789")
    mem = ctx.map(writable)
    assert mem.length >= 10 and mem.pack_rkey()
    readonly = ctx.map(b"immutable")
    assert readonly.pack_rkey()
