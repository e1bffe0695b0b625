"""A network that stops passing packets between two peers: each peer in a network namespace of
its own, the two joined through a router namespace (``netns.routed_pair``) whose nftables drop
everything they would forward (no reset, no ICMP: the peers are told nothing). Both sides of an
idle pair and of a busy pair (1 MiB echoes in flight) must fail with ``UCXPeerFailure`` within
``UCXA_PEER_TIMEOUT`` (6 s here, to keep the tests short; the default's value is ucx-core's
``tests/config.rs``), and a 2 s silence under the default must heal with no error and the echoes
resuming intact. Each peer runs in pid and IPC namespaces of its own too, so neither can take
the other for a process on its host (the same-host single-copy path would move large messages
outside the network). Skipped without root, ``ip`` or ``nft``."""
import json
import os
import queue
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import netns
from ucp._ucx_async import library_defaults

pytestmark = pytest.mark.skipif(netns.unavailable() is not None, reason=str(netns.unavailable()))

PEER = Path(__file__).parent / "peers" / "partition_peer.py"
TIMEOUT = 6.0


class Peer:
    """``partition_peer.py`` in namespace ``ns``; its JSON lines are read as they come."""

    def __init__(self, ns, args, env):
        # Without conftest's loopback-only settings, and without the library's defaults that
        # `import ucp` put in this environment: each peer derives its own (from
        # UCXA_PEER_TIMEOUT) where the test did not choose.
        ours = {"UCX_" + name for name, _ in library_defaults()}
        full = {k: v for k, v in os.environ.items() if k not in ("UCX_NET_DEVICES", "UCXPY_IFNAME", *ours)}
        # Each host's one interface; UCXA_SINGLE_COPY=0 where pid namespaces cannot be made.
        full.update(env, UCX_NET_DEVICES="eth1")
        if shutil.which("unshare"):
            isolate = ["unshare", "--pid", "--ipc", "--fork", "--kill-child", "--mount-proc"]
        else:
            isolate, full["UCXA_SINGLE_COPY"] = [], "0"
        self.proc = subprocess.Popen(
            ["ip", "netns", "exec", ns, *isolate, sys.executable, str(PEER), *map(str, args)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=full,
        )
        self.lines = queue.Queue()
        self.seen = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            try:
                self.lines.put(json.loads(line))
            except ValueError:
                continue
        self.lines.put(None)

    def next(self, key, timeout):
        """The next line with ``key`` within ``timeout`` seconds, or None."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            try:
                line = self.lines.get(timeout=left) if left > 0 else self.lines.get_nowait()
            except queue.Empty:
                return None
            if line is None:
                raise AssertionError(f"the peer ended early: {self.proc.stderr.read()[-3000:]}")
            self.seen.append(line)
            if key in line:
                return line

    def finish(self):
        """Closes its stdin; returns its summary line."""
        self.proc.stdin.close()
        return self.next("echoes", 15)

    def kill(self):
        self.proc.kill()
        self.proc.wait()


def _partitioned(mode, env, blip=None, wait=TIMEOUT + 4):
    """A server and a client in a routed pair, running ``mode`` with ``env``; once both run,
    the router drops everything, for ``blip`` seconds (then ``wait`` more), or until both
    peers failed or ``wait`` passed. Returns ({side: seconds from the drop to its failure,
    or None}, {side: error line or None}, {side: summary})."""
    with netns.routed_pair() as ((a, router, b), (server_ip, _)):
        server = Peer(a, ["server", server_ip, mode], env)
        client = None
        try:
            port = server.next("port", 30)["port"]
            client = Peer(b, ["client", server_ip, port, mode], env)
            assert client.next("ready", 30) and server.next("ready", 30), (client.seen, server.seen)
            time.sleep(0.5)
            dropped = time.time()
            netns.partition(router)
            if blip is not None:
                time.sleep(blip)
                netns.heal(router)
            deadline = time.monotonic() + wait
            errors = {}
            for side, peer in (("client", client), ("server", server)):
                errors[side] = peer.next("error", deadline - time.monotonic())
            if blip is None:
                netns.heal(router)
            summaries = {"client": client.finish(), "server": server.finish()}
        finally:
            for p in (client, server):
                if p is not None:
                    p.kill()
    took = {side: None if e is None else round(e["t"] - dropped, 2) for side, e in errors.items()}
    for s in summaries.values():
        for key in ("stall_at", "last_at"):
            if s and s[key] is not None:
                s[key] = round(s[key] - dropped, 2)
    return took, errors, summaries


@pytest.mark.parametrize("mode", ["idle", "echo"])
def test_both_sides_of_a_partitioned_pair_fail_within_the_peer_timeout(mode):
    # UCX 1.22's own settings: the side that accepted the tcp transport's connection never
    # failed (no keepalive on its socket), and data in flight waited for the kernel's
    # retransmissions (about 15 minutes); the side that connected failed after 28 s idle.
    took, errors, summaries = _partitioned(mode, {"UCXA_PEER_TIMEOUT": str(TIMEOUT)})
    for side in ("client", "server"):
        assert errors[side] is not None, f"{side}: no failure {TIMEOUT + 4} s after the partition: {took}"
        assert errors[side]["error"] == "UCXPeerFailure", (side, errors[side])
        assert took[side] < TIMEOUT, (side, took)
        s = summaries[side]
        assert s["corrupt"] == 0 and s["max_gap"] < 1.0, (side, s)
    if mode == "echo":
        assert summaries["client"]["echoes"] >= 3


def test_a_short_silence_heals_without_an_error():
    # The default timeout; a drop of 2 s, while 1 MiB echoes are in flight. TCP's
    # retransmissions carry the stream on once packets pass again: no error on either side,
    # every echo intact, and more of them after the drop. The stall shows the echoes crossed
    # the router (the drop held them up).
    took, errors, summaries = _partitioned("echo", {}, blip=2.0, wait=8.0)
    assert errors == {"client": None, "server": None}, errors
    client = summaries["client"]
    assert client["corrupt"] == 0 and summaries["server"]["corrupt"] == 0, summaries
    assert client["longest_stall"] >= 1.5 and -1 < client["stall_at"] < 1, client
    assert client["last_at"] > client["stall_at"] + client["longest_stall"] + 1, client
    assert client["max_gap"] < 1.0, client
