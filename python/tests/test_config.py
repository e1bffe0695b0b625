"""Initialisation and configuration: lazy init, init/reset rules, options and the
environment, config getters, versions, info strings, logging, import-time defaults."""
import logging
import os
import subprocess
import sys

import pytest

import ucp


def test_import_does_not_initialise_ucx():
    code = "import ucp; ucp.get_ucx_version(); ucp.get_config(); print(ucp.core._ctx is None)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "True"


def test_import_sets_ucx_py_defaults_only_where_unset():
    code = "import os, ucp; print(os.environ['UCX_RNDV_THRESH'], os.environ['UCX_MEMTYPE_CACHE'])"
    env = {k: v for k, v in os.environ.items() if k not in ("UCX_RNDV_THRESH", "UCX_MEMTYPE_CACHE")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    assert out.stdout.split() == ["intra:8192,inter:64k", "n"]
    env["UCX_RNDV_THRESH"] = "1234"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    assert out.stdout.split()[0] == "1234"


def test_import_makes_connects_non_blocking_only_where_unset():
    # UCX_TCP_CONN_NB=y: test_network_faults.py shows what a blocking connect does.
    code = "import os, ucp; print(os.environ['UCX_TCP_CONN_NB'])"
    env = {k: v for k, v in os.environ.items() if k != "UCX_TCP_CONN_NB"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    assert out.stdout.strip() == "y"
    env["UCX_TCP_CONN_NB"] = "n"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    assert out.stdout.strip() == "n"


PEER_TIMEOUT_SETTINGS = ("UCX_TCP_KEEPIDLE", "UCX_KEEPALIVE_INTERVAL", "UCX_KEEPALIVE_NUM_EPS", "UCX_TCP_USER_TIMEOUT")


@pytest.mark.parametrize(
    "peer_timeout, expected",
    [
        (None, ["inf", "3750ms", "inf", "15000ms"]),  # the default, 30 s
        ("12", ["inf", "1500ms", "inf", "6000ms"]),
        ("off", ["-", "-", "-", "-"]),  # UCX's own
        ("soon", ["inf", "3750ms", "inf", "15000ms"]),  # refused on stderr: the default
    ],
)
def test_import_bounds_how_long_a_silent_peer_goes_unnoticed(peer_timeout, expected):
    # UCXA_PEER_TIMEOUT's settings (test_partitions.py shows what they do), each only where
    # unset.
    code = f"import os, ucp; print(*(os.environ.get(n, '-') for n in {PEER_TIMEOUT_SETTINGS}))"
    env = {k: v for k, v in os.environ.items() if k not in (*PEER_TIMEOUT_SETTINGS, "UCXA_PEER_TIMEOUT")}
    if peer_timeout is not None:
        env["UCXA_PEER_TIMEOUT"] = peer_timeout
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    assert out.stdout.split() == expected
    assert ("UCXA_PEER_TIMEOUT" in out.stderr) == (peer_timeout == "soon"), out.stderr
    env["UCX_TCP_USER_TIMEOUT"] = "1m"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    assert out.stdout.split()[3] == "1m"


def test_init_twice_is_refused(fresh_ucp):
    ucp.init()
    with pytest.raises(RuntimeError, match="UCX is already initiated"):
        ucp.init()


def test_options_are_applied_and_bad_ones_named(fresh_ucp):
    ucp.init({"SEG_SIZE": "2K"})
    assert ucp.get_config()["SEG_SIZE"] == "2K"
    ucp.reset()
    with pytest.raises(ucp.exceptions.UCXConfigError, match="Option NOT_AN_OPTION doesn't exist"):
        ucp.init({"NOT_AN_OPTION": "1"})
    with pytest.raises(ucp.exceptions.UCXConfigError, match="Couldn't set option SEG_SIZE to lots"):
        ucp.init({"SEG_SIZE": "lots"})
    # A transport name UCX does not have: the error carries UCX's reason, with the valid names.
    with pytest.raises(ucp.exceptions.UCXError, match="transport 'bogus' is not available, please use one or more of"):
        ucp.init({"TLS": "bogus"})


def test_env_takes_precedence(fresh_ucp, monkeypatch):
    monkeypatch.setenv("UCX_SEG_SIZE", "4K")
    ucp.init({"SEG_SIZE": "2K"}, env_takes_precedence=True)
    assert ucp.get_config()["SEG_SIZE"] == "4K"
    ucp.reset()
    ucp.init({"SEG_SIZE": "2K"})
    assert ucp.get_config()["SEG_SIZE"] == "2K"


def test_get_config_before_init_reads_the_environment(fresh_ucp, monkeypatch):
    monkeypatch.setenv("UCX_SEG_SIZE", "3K")
    config = ucp.get_config()
    assert config["SEG_SIZE"] == "3K"
    assert config["TLS"] == os.environ.get("UCX_TLS", "all")
    assert ucp.core._ctx is None


def test_progress_mode_from_environment(fresh_ucp, monkeypatch):
    monkeypatch.setenv("UCXPY_NON_BLOCKING_MODE", "0")  # presence is what counts
    monkeypatch.setenv("UCXPY_CONNECT_TIMEOUT", "1.5")
    ucp.init()
    ctx = ucp.core._get_ctx()
    assert ctx.blocking_progress_mode is False
    assert ctx.connect_timeout == 1.5


def test_getters(fresh_ucp):
    assert isinstance(ucp.get_ucp_worker(), int) and ucp.get_ucp_worker() != 0
    assert "resource" in ucp.get_ucp_context_info()
    assert isinstance(ucp.get_ucp_worker_info(), str)
    transports = ucp.get_active_transports()
    assert "self" in transports and "tcp" in transports
    ucp.progress()
    assert ucp.core._get_ctx().context.cuda_support is False or "cuda" in str(transports)


def test_init_logs_info_and_no_errors(fresh_ucp):
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    logger = logging.getLogger("ucx")
    old = logger.level
    logger.setLevel(logging.DEBUG)
    logger.addHandler(handler)
    try:
        ucp.init()
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old)
    assert any(r.levelno == logging.INFO for r in records)
    assert not any(r.levelno >= logging.ERROR for r in records)


def test_version_strings():
    assert ucp.__ucx_version__ == "%d.%d.%d" % ucp.get_ucx_version()
    assert ucp.__ucx_min_version__ == "1.18.0"
    assert isinstance(ucp.__version__, str) and ucp.__version__
    assert ucp.__git_commit__ == ""


def test_ucx_py_names_are_there():
    for name in [
        "ApplicationContext", "Endpoint", "Listener", "CtrlMsg", "BlockingMode", "NonBlockingMode",
        "UCXCanceled", "UCXCloseError", "UCXError", "create_endpoint", "create_endpoint_from_worker_address",
        "create_listener", "exchange_peer_info", "fence", "flush", "get_active_transports", "get_address",
        "get_config", "get_ucp_context_info", "get_ucp_worker", "get_ucp_worker_info",
        "get_ucx_address_from_buffer", "get_ucx_version", "get_ucxpy_logger", "get_worker_address",
        "hash64bits", "init", "progress", "recv", "register_am_allocator", "reset", "continuous_ucx_progress",
    ]:
        assert hasattr(ucp, name), name
