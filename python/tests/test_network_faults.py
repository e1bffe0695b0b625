"""Connects and listeners on networks of their own: network namespaces made for each test
(``netns.py``; skipped without root, ``ip`` or ``nft``). Dropped connection attempts must not
block the event loop, and the handshake's timeout must fire on time; IPv6 works over a
unique-local address between two namespaces; a listener given an address listens on that
address's interface only (UCX's own tcp port included), and says so where UCX was made for
every interface before it; distributed's own comm checks pass on ``ucxa``, IPv6 forms
included, where its test module is at hand."""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import netns

pytestmark = pytest.mark.skipif(netns.unavailable() is not None, reason=str(netns.unavailable()))

PEER = Path(__file__).parent / "peers" / "net_peer.py"
LISTENER_PORT = 13337
# UCX's tcp transport listens on a port of its own per device (UCX_TCP_PORT_RANGE pins it);
# the side with the lower address (then port) makes the transport's connection.
LOW_PORTS, HIGH_PORTS = "20000-20999", "21000-21999"


def _env(extra=None):
    """This environment without conftest's loopback-only settings (a namespace has only
    the interfaces its test made), plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if k not in ("UCX_NET_DEVICES", "UCXPY_IFNAME")}
    return dict(env, **(extra or {}))


def _peer(ns, role, ip, port, *args, env=None, stdin=None):
    full_env = _env(env)
    return subprocess.Popen(
        ["ip", "netns", "exec", ns, sys.executable, str(PEER), role, ip, str(port), *map(str, args)],
        stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=full_env,
    )


def _json_line(proc, timeout=30):
    """The next JSON line the process prints (a line that is not JSON is skipped)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            raise AssertionError(f"the peer ended early: {proc.stderr.read()}")
        try:
            return json.loads(line)
        except ValueError:
            continue
    raise AssertionError("no line from the peer in time")


def _connect_while_syns_are_dropped(connecting_side, drop_seconds, conn_nb=None):
    """A server and a client in one namespace; UCX's tcp transport's connection attempts are
    dropped (the CM listener's pass) from the client's first attempt until ``drop_seconds``
    later; the client tries twice. Returns (client's report, server's report)."""
    env = {"UCX_NET_DEVICES": "lo", "UCXPY_CONNECT_TIMEOUT": "5"}
    if conn_nb is not None:
        env["UCX_TCP_CONN_NB"] = conn_nb
    client_ports, server_ports = (LOW_PORTS, HIGH_PORTS) if connecting_side == "client" else (HIGH_PORTS, LOW_PORTS)
    with netns.namespace() as ns:
        netns.drop_syns(ns, "20000-21999")
        server = _peer(ns, "server", "127.0.0.1", LISTENER_PORT, env=dict(env, UCX_TCP_PORT_RANGE=server_ports),
                       stdin=subprocess.PIPE)
        try:
            assert _json_line(server)["port"] == LISTENER_PORT
            client = _peer(ns, "client", "127.0.0.1", LISTENER_PORT, 2, env=dict(env, UCX_TCP_PORT_RANGE=client_ports))
            try:
                assert _json_line(client) == {"connecting": True}
                time.sleep(drop_seconds)
                netns.allow_syns(ns)
                report = _json_line(client, timeout=60)
            finally:
                client.kill()
                client.wait()
            server.stdin.close()
            server_report = _json_line(server)
        finally:
            server.kill()
            server.wait()
    return report, server_report


@pytest.mark.parametrize("connecting_side", ["client", "server"])
def test_dropped_connection_attempts_do_not_block_the_event_loop(connecting_side):
    # The side with the lower address makes the tcp transport's connection: the client's
    # event loop (a connect) and the listener's (an accept) are each tested.
    report, server_report = _connect_while_syns_are_dropped(connecting_side, drop_seconds=6)
    first, *rest = report["attempts"]
    # The handshake's 5 s limit fires on time (it fired only once a blocking connect returned,
    # 7 s and more, and then too late), and the retry connects once the drop is over.
    assert first["outcome"].startswith("TimeoutError"), report
    assert 4.9 < first["seconds"] < 5.6, report
    assert rest and rest[-1]["outcome"] == "connected", report
    blocked = report["max_gap"] if connecting_side == "client" else server_report["max_gap"]
    assert blocked < 1.0, (report, server_report)


def test_blocking_connects_block_the_event_loop():
    # The control, UCX's own default: the measurement above sees a blocked loop where there
    # is one (the connect blocked 7 s: the kernel's SYN retries at 1, 3 and 7 s).
    report, _ = _connect_while_syns_are_dropped("client", drop_seconds=6, conn_nb="n")
    assert report["max_gap"] > 5.0, report
    assert report["attempts"][0]["seconds"] > 6.0, report


def test_ipv6_over_a_unique_local_address_between_namespaces():
    with netns.veth_pair() as (a, b):
        server = _peer(a, "server", "fd00:4e46::1", 0, stdin=subprocess.PIPE)
        try:
            port = _json_line(server)["port"]
            client = _peer(b, "client", "fd00:4e46::1", port)
            try:
                assert _json_line(client) == {"connecting": True}
                report = _json_line(client)
            finally:
                client.kill()
                client.wait()
            assert report["attempts"] == [{"outcome": "connected", "seconds": report["attempts"][0]["seconds"]}], report
            server.stdin.close()
            _json_line(server)
            assert server.wait(10) == 0, "the server lived"
        finally:
            server.kill()
            server.wait()


LISTEN_PEER = Path(__file__).parent / "peers" / "listen_peer.py"


def _listening(ns, init, ip):
    """Where a process in ``ns`` listens after ``ucp.init(init)`` (None: no init) and
    ``create_listener(ip=ip)``: (its listener's port, every (address, port) it listens on,
    the warnings it got)."""
    proc = subprocess.Popen(
        ["ip", "netns", "exec", ns, sys.executable, str(LISTEN_PEER), json.dumps({"init": init, "ip": ip})],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(),
    )
    try:
        report = _json_line(proc)
        return report["port"], netns.listening(proc.pid), report["warnings"]
    finally:
        proc.stdin.close()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_a_listener_given_an_address_listens_on_its_interface_only():
    with netns.veth_pair() as (a, _):
        # Given before UCX is initialised: UCX's devices are limited to the address's
        # interface, so its own tcp port listens there too and nowhere else.
        for ip, local in (("127.0.0.1", {"127.0.0.1"}), ("10.201.0.1", {"10.201.0.1"}),
                          ("fd00:4e46::1", {"fd00:4e46::1"})):
            port, sockets, warned = _listening(a, None, ip)
            assert {addr for addr, _ in sockets} == local, (ip, sockets)
            assert (ip, port) in sockets and len(sockets) == 2, ("the listener and UCX's own port", sockets)
            assert warned == []
        # Given after ucp.init() made UCX for every interface: UCX's port on eth1 is open too,
        # and a warning says so and how to restrict it.
        port, sockets, warned = _listening(a, {}, "127.0.0.1")
        assert ("127.0.0.1", port) in sockets
        assert "10.201.0.1" in {addr for addr, _ in sockets}, sockets
        assert len(warned) == 1 and "eth1" in warned[0] and "UCX_NET_DEVICES=lo" in warned[0], warned
        # init() told which device: no warning, nothing beyond lo.
        port, sockets, warned = _listening(a, {"NET_DEVICES": "lo"}, "127.0.0.1")
        assert {addr for addr, _ in sockets} == {"127.0.0.1"} and warned == [], (sockets, warned)
        # No address (UCX-Py's default): every IPv4 address, and UCX's port on each interface.
        port, sockets, warned = _listening(a, None, None)
        assert ("0.0.0.0", port) in sockets and {"127.0.0.1", "10.201.0.1"} <= {addr for addr, _ in sockets}
        assert warned == []


@pytest.mark.skipif(
    not os.environ.get("UCXA_DISTRIBUTED_TEST_COMMS"),
    reason="set UCXA_DISTRIBUTED_TEST_COMMS to distributed's distributed/comm/tests/test_comms.py",
)
def test_distributeds_own_comm_checks_pass_on_ucxa():
    # In a namespace whose eth1 has an IPv4 and a unique-local IPv6 address and default
    # routes through it (no packet leaves the two namespaces), so the 0.0.0.0 and [::] forms
    # have external addresses to contact.
    pytest.importorskip("distributed")
    script = Path(__file__).parents[2] / "scripts" / "dask_comm_checks.py"
    with netns.veth_pair() as (a, _):
        netns.run("ip", "route", "add", "default", "via", "10.201.0.2", ns=a)
        netns.run("ip", "-6", "route", "add", "default", "via", "fd00:4e46::2", ns=a)
        p = subprocess.run(
            ["ip", "netns", "exec", a, sys.executable, str(script), os.environ["UCXA_DISTRIBUTED_TEST_COMMS"]],
            capture_output=True, text=True, timeout=900, env=_env(),
        )
    assert p.returncode == 0, p.stdout[-5000:] + p.stderr[-5000:]
    assert "SKIP" not in p.stdout, p.stdout
    for form in ("ucxa://[::1]", "ucxa://[::]"):
        assert f"PASS check_client_server {form}" in p.stdout, p.stdout
