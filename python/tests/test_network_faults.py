"""What the network does to connects, in network namespaces made for each test
(``netns.py``; skipped without root, ``ip`` or ``nft``): dropped connection attempts must not
block the event loop, and the handshake's timeout must fire on time."""
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


def _peer(ns, role, ip, port, *args, env=None, stdin=None):
    full_env = dict(os.environ, **(env or {}))
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
