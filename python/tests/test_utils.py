"""`ucp.utils` and `ucp._libs.utils`: tag hashing, event loops, the "ucx" logger, interface
addresses and the benchmark formatting helpers."""
import asyncio
import hashlib
import io
import logging
import os
import re
import socket

import numpy as np
import pytest

import ucp.utils
from ucp._libs import utils as libs_utils
from ucp.utils import get_event_loop, get_ucxpy_logger, hash64bits, hmean


def test_hash64bits_test_vector():
    # The handshake checksum (UCX-Py's hash64bits of msg_tag and ctrl_tag), computed with UCX-Py.
    assert hash64bits(0x0123456789ABCDEF, 0xFEDCBA9876543210) == 0xA2B220F5DA2F1831


def test_hash64bits_is_sha1_of_the_tuple_repr():
    seed = os.urandom(16)
    expected = int.from_bytes(hashlib.sha1(repr(("msg_tag", seed, 42)).encode()).digest()[:8], "big")
    assert hash64bits("msg_tag", seed, 42) == expected
    assert hash64bits(5) == int(hashlib.sha1(b"(5,)").hexdigest()[:16], 16)
    assert hash64bits(1, 2) != hash64bits(2, 1)
    assert 0 <= hash64bits() < 2**64


def test_get_event_loop_outside_a_loop_returns_a_new_unset_loop():
    loop = get_event_loop()
    try:
        assert isinstance(loop, asyncio.AbstractEventLoop)
        assert not loop.is_running()
        other = get_event_loop()
        assert other is not loop
        other.close()
        assert loop.run_until_complete(asyncio.sleep(0, result=3)) == 3
    finally:
        loop.close()


def test_get_event_loop_inside_a_loop_returns_the_running_one():
    async def inner():
        return get_event_loop() is asyncio.get_running_loop()

    assert asyncio.run(inner())


@pytest.fixture
def fresh_ucx_logger():
    logger = logging.getLogger("ucx")
    saved = (logger.handlers[:], logger.level, logger.propagate)
    logger.handlers.clear()
    yield logger
    logger.handlers[:], logger.level, logger.propagate = saved


def ours(logger):
    """The handlers get_ucxpy_logger added (pytest 9 adds its own capture handlers to
    non-propagating loggers too)."""
    return [h for h in logger.handlers if getattr(h, "_ucxpy_handler", False)]


def test_logger_configuration(fresh_ucx_logger, monkeypatch):
    monkeypatch.delenv("UCXPY_LOG_LEVEL", raising=False)
    logger = get_ucxpy_logger()
    assert logger is fresh_ucx_logger
    assert logger.level == logging.WARNING
    assert logger.propagate is False
    assert len(ours(logger)) == 1
    # Calling again must not duplicate output, but does re-read the level.
    monkeypatch.setenv("UCXPY_LOG_LEVEL", "debug")
    assert get_ucxpy_logger() is logger
    assert len(ours(logger)) == 1
    assert logger.level == logging.DEBUG
    monkeypatch.setenv("UCXPY_LOG_LEVEL", "INFO")
    assert get_ucxpy_logger().level == logging.INFO


def test_logger_format(fresh_ucx_logger):
    logger = get_ucxpy_logger()
    stream = io.StringIO()
    ours(logger)[0].setStream(stream)
    logger.warning("Test %d", 7)
    line = stream.getvalue()
    pattern = r"\[(\d+\.\d{6})\] \[(.+):(\d+)\] UCXPY  WARNING Test 7\n"
    m = re.fullmatch(pattern, line)
    assert m, line
    assert m.group(2) == socket.gethostname()
    assert int(m.group(3)) == os.getpid()


def test_hmean():
    assert hmean(np.array([1.0, 2.0, 4.0])) == pytest.approx(3 / (1 + 0.5 + 0.25))
    assert hmean(np.array([5.0, 5.0])) == pytest.approx(5.0)
    assert hmean(np.array([])) == 0


def test_mp_is_a_spawn_context():
    assert ucp.utils.mp.get_start_method() == "spawn"


def test_get_address_of_loopback():
    assert libs_utils.get_address("lo") == "127.0.0.1"
    assert libs_utils.get_address(ifname="lo") == "127.0.0.1"


def test_get_address_invalid_interface_raises_oserror():
    with pytest.raises(OSError):
        libs_utils.get_address("no-such-if0")


def test_get_address_uses_ucxpy_ifname(monkeypatch):
    monkeypatch.setenv("UCXPY_IFNAME", "lo")
    assert libs_utils.get_address() == "127.0.0.1"
    monkeypatch.setenv("UCXPY_IFNAME", "no-such-if0")
    with pytest.raises(OSError):
        libs_utils.get_address()
    # An explicit name wins over the environment.
    assert libs_utils.get_address("lo") == "127.0.0.1"


def _fake_sys_class_net(tmp_path, monkeypatch, names):
    for name in names:
        (tmp_path / name).mkdir()
    real_listdir = os.listdir
    monkeypatch.setattr(
        libs_utils.os, "listdir", lambda p: real_listdir(tmp_path) if p == "/sys/class/net" else real_listdir(p)
    )


def test_get_address_never_picks_loopback(tmp_path, monkeypatch):
    monkeypatch.delenv("UCXPY_IFNAME", raising=False)
    _fake_sys_class_net(tmp_path, monkeypatch, ["lo", "eth-missing", "ib-missing", "wlan0"])
    with pytest.raises(RuntimeError, match="A network address could not be determined"):
        libs_utils.get_address()


def test_get_address_prefix_priority(tmp_path, monkeypatch):
    monkeypatch.delenv("UCXPY_IFNAME", raising=False)
    candidates = [name for _, name in socket.if_nameindex() if name.startswith(("eth", "en", "docker"))]
    with_address = []
    for name in candidates:
        try:
            with_address.append((name, libs_utils.get_address(name)))
        except OSError:
            pass
    if not with_address:
        pytest.skip("no eth/en/docker interface with an IPv4 address here")
    name, address = with_address[0]
    # Missing "ib" interfaces are skipped; "docker" ranks last whatever the sort order.
    _fake_sys_class_net(tmp_path, monkeypatch, ["docker-missing", "ib-missing", "lo", name])
    assert libs_utils.get_address() == address


def test_default_get_address_is_not_loopback(monkeypatch):
    monkeypatch.delenv("UCXPY_IFNAME", raising=False)
    try:
        address = libs_utils.get_address()
    except RuntimeError:
        pytest.skip("no ib/eth/en/docker interface with an address here")
    assert socket.inet_aton(address)
    assert not address.startswith("127.")


@pytest.fixture
def without_dask(monkeypatch):
    monkeypatch.setattr(libs_utils, "_dask_utils", lambda: None)


@pytest.mark.parametrize(
    "n, text",
    [(0, "0 B"), (1023, "1023 B"), (1024, "1.00 KiB"), (10_000_000, "9.54 MiB"), (3 * 1024**3, "3.00 GiB"),
     (2 * 1024**4, "2.00 TiB")],
)
def test_format_bytes(without_dask, n, text):
    assert libs_utils.format_bytes(n) == text


@pytest.mark.parametrize("t, text", [(5e-9, "5.000 ns"), (2.5e-6, "2.500 us"), (0.0125, "12.500 ms"), (3, "3.000 s")])
def test_format_time(without_dask, t, text):
    assert libs_utils.format_time(t) == text


@pytest.mark.parametrize(
    "text, n",
    [("10 Mb", 10_000_000), ("1MiB", 2**20), ("5kB", 5000), ("2 GiB", 2 * 2**30), ("100", 100), (100, 100),
     ("1e3", 1000), ("MB", 10**6), ("1.5 KiB", 1536), ("7b", 7)],
)
def test_parse_bytes(without_dask, text, n):
    assert libs_utils.parse_bytes(text) == n


@pytest.mark.parametrize("text", ["10 Xb", "abc1 MB", "1..5 kB"])
def test_parse_bytes_rejects_garbage(without_dask, text):
    with pytest.raises(ValueError):
        libs_utils.parse_bytes(text)


def test_print_helpers(capsys):
    libs_utils.print_key_value("Iterations", 10)
    libs_utils.print_separator(separator="=")
    libs_utils.print_multi(["a", "b", "c"], key_length=3)
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "Iterations                | 10"
    assert out[1] == "=" * 80
    assert out[2] == "a   | b   | c"


def test_nvtx_annotate_works_as_context_manager_and_decorator():
    with libs_utils.nvtx_annotate("x", color="red", domain="ucxpy"):
        pass

    @libs_utils.nvtx_annotate("f", color="blue", domain="ucxpy")
    def f(x):
        return x + 1

    assert f(1) == 2
