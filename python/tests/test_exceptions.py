"""UCX-Py's exception hierarchy, its re-export as `ucp.exceptions`, and `log_errors`."""
import io
import logging
import pickle
import warnings

import pytest

import ucp
import ucp._libs.exceptions as libs_exceptions
import ucp.exceptions as exceptions
from ucp.exceptions import (
    UCXBaseException,
    UCXCanceled,
    UCXCloseError,
    UCXConfigError,
    UCXConnectionRefused,
    UCXConnectionReset,
    UCXEndpointClosed,
    UCXError,
    UCXMsgTruncated,
    UCXNotConnected,
    UCXPeerFailure,
    UCXUnreachable,
    UCXWarning,
    log_errors,
)

NOT_UCXERROR = [UCXCloseError, UCXCanceled, UCXConnectionReset, UCXMsgTruncated, UCXNotConnected, UCXUnreachable]


def test_hierarchy():
    assert UCXBaseException.__bases__ == (Exception,)
    assert UCXError.__bases__ == (UCXBaseException,)
    assert UCXConfigError.__bases__ == (UCXError,)
    assert UCXWarning.__bases__ == (UserWarning,)
    for cls in NOT_UCXERROR:
        assert cls.__bases__ == (UCXBaseException,)


@pytest.mark.parametrize("cls", NOT_UCXERROR)
def test_catching_ucxerror_does_not_catch_the_others(cls):
    # Endpoint.close swallows UCXError only; a cancellation must get through.
    with pytest.raises(cls):
        try:
            raise cls("x")
        except UCXError:
            pytest.fail(f"{cls.__name__} was caught as UCXError")


def test_causes_are_each_class_ucx_py_raised_for_them():
    # A peer failure: UCX-Py raised UCXCanceled (pending receives), UCXError (operations
    # after, "Endpoint timeout") or UCXConnectionReset; a handler for any of them catches it.
    for cls in (UCXCanceled, UCXError, UCXConnectionReset):
        assert issubclass(UCXPeerFailure, cls)
    # Our close: UCXCanceled (pending), UCXCloseError or AttributeError (after).
    for cls in (UCXCanceled, UCXCloseError, AttributeError):
        assert issubclass(UCXEndpointClosed, cls)
    assert not issubclass(UCXEndpointClosed, UCXError), "Endpoint.close's except UCXError would hide it"
    assert not issubclass(UCXPeerFailure, UCXCloseError) and not issubclass(UCXEndpointClosed, UCXPeerFailure)
    for cls in (UCXPeerFailure, UCXEndpointClosed):
        e = pickle.loads(pickle.dumps(cls("why")))
        assert type(e) is cls and e.args == ("why",)
    assert ucp.UCXPeerFailure is UCXPeerFailure and ucp.UCXEndpointClosed is UCXEndpointClosed


def test_config_error_is_a_ucxerror():
    with pytest.raises(UCXError):
        raise UCXConfigError("Option FOO doesn't exist")


def test_repr_and_str():
    assert repr(UCXError("x")) == "UCXError('x')"
    assert repr(UCXCanceled("<[Recv #000] tag: 0x1>: ")) == "UCXCanceled('<[Recv #000] tag: 0x1>: ')"
    assert str(UCXCloseError("Endpoint closed")) == "Endpoint closed"


def test_picklable():
    e = pickle.loads(pickle.dumps(UCXMsgTruncated("length mismatch: 3 (got) != 100 (expected)")))
    assert type(e) is UCXMsgTruncated
    assert e.args == ("length mismatch: 3 (got) != 100 (expected)",)


def test_reexported_from_libs():
    names = set(libs_exceptions.__all__)
    assert "log_errors" in names
    assert len(names) == 14
    for name in names:
        assert getattr(exceptions, name) is getattr(libs_exceptions, name)


@pytest.fixture
def ucx_log():
    logger = logging.getLogger("ucx")
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    logger.addHandler(handler)
    saved_level = logger.level
    logger.setLevel(logging.ERROR)
    yield stream
    logger.removeHandler(handler)
    logger.setLevel(saved_level)


def test_log_errors_swallows_and_logs(ucx_log):
    with log_errors():
        raise UCXError("boom")
    text = ucx_log.getvalue()
    assert "boom" in text
    assert "Traceback" in text and "UCXError" in text


def test_log_errors_reraises(ucx_log):
    with pytest.raises(KeyError):
        with log_errors(reraise_exception=True):
            raise KeyError("k")
    assert "KeyError" in ucx_log.getvalue()


def test_log_errors_quiet_without_error(ucx_log):
    with log_errors():
        pass
    assert ucx_log.getvalue() == ""


def test_warning_category():
    with pytest.warns(UCXWarning, match="careful"):
        warnings.warn("careful", UCXWarning)


def test_a_connect_without_a_transport_for_listeners_says_why(fresh_ucp):
    """UCX says only "Destination is unreachable" when no transport of the context can carry
    a connection to a listener (``TLS=sm``: shared memory alone); ``create_endpoint`` keeps
    UCX-Py's exception and message and adds why, naming the setting. With tcp there is no
    such reason to add."""
    import asyncio

    from conftest import run

    assert ucp.core._get_ctx().worker.unreachable_listener_hint() is None, "tcp is there"
    ucp.reset()
    ucp.init(options={"TLS": "sm"})

    async def main():
        lf = ucp.create_listener(lambda ep: None)
        try:
            with pytest.raises(UCXUnreachable) as info:
                await asyncio.wait_for(ucp.create_endpoint("127.0.0.1", lf.port), 10)
        finally:
            lf.close()
        text = str(info.value)
        assert "Destination is unreachable" in text, text
        assert "no transport for a connection to a listener" in text and "UCX_TLS=sm" in text, text
        assert f"127.0.0.1:{lf.port}" in text, text

    run(main())


def test_a_refused_connect_is_not_a_peer_failure():
    # UCX reports a refused connect as a reset; UCX-Py raised UCXError or UCXConnectionReset.
    assert UCXConnectionRefused.__bases__ == (UCXConnectionReset, UCXError)
    assert not issubclass(UCXConnectionRefused, UCXPeerFailure)
    assert not issubclass(UCXPeerFailure, UCXConnectionRefused)
    e = pickle.loads(pickle.dumps(UCXConnectionRefused("why")))
    assert type(e) is UCXConnectionRefused and e.args == ("why",)
    assert ucp.UCXConnectionRefused is UCXConnectionRefused


def _closed_port():
    """A TCP port on 127.0.0.1 that nothing listens on (bound, then let go)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_connect_to_a_closed_port_is_refused_naming_the_address(progress_mode):
    import asyncio
    import time

    from conftest import run

    async def main():
        for _ in range(3):
            port = _closed_port()
            t0 = time.monotonic()
            with pytest.raises(UCXConnectionRefused) as info:
                await ucp.create_endpoint("127.0.0.1", port)
            assert time.monotonic() - t0 < 2, "refused at once, not at the handshake's timeout"
            assert not isinstance(info.value, UCXPeerFailure)
            assert f"127.0.0.1:{port}: refused" in str(info.value), info.value
            assert isinstance(info.value.__cause__, UCXBaseException), "UCX's own report is kept"
        await asyncio.sleep(0)

    run(main())


def test_an_ipv6_connect_to_a_listener_on_ipv4_only_is_refused(fresh_ucp):
    from conftest import has_ipv6_loopback, run

    if not has_ipv6_loopback():
        pytest.skip("no IPv6 loopback")

    async def main():
        lf = ucp.create_listener(lambda ep: None, ip="127.0.0.1")
        try:
            with pytest.raises(UCXConnectionRefused, match=rf"\[::1\]:{lf.port}: refused"):
                await ucp.create_endpoint("::1", lf.port)
        finally:
            lf.close()

    run(main())
