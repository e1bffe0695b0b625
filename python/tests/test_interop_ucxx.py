"""Interoperation with real UCXX (PyPI ``ucxx-cu12``, CPU-only) in both directions.

The UCXX side is python/tests/peers/ucxx_peer.py run by the Python of a separate virtualenv
(``UCXASYNC_UCXX_PYTHON``, default ``<repo>/.venv-ucxx/bin/python``; scripts/ucxx-venv.sh
creates it with the same UCX as .venv). Skipped when that interpreter is absent.

The peer receives each message and sends it back with every byte plus one, so each echo
checks that both sides really saw the other's bytes. Covered: our client detecting a UCXX
listener's handshake, a UCXX client on a ``wire_protocol="ucxx"`` listener of ours, and a
close on either side failing the other side's pending receive.
"""
import asyncio
import os
import pathlib

import numpy as np
import pytest

import ucp
from conftest import run

ROOT = pathlib.Path(__file__).resolve().parents[2]
PEER = pathlib.Path(__file__).resolve().parent / "peers" / "ucxx_peer.py"
UCXX_PYTHON = pathlib.Path(os.environ.get("UCXASYNC_UCXX_PYTHON", ROOT / ".venv-ucxx" / "bin" / "python"))

pytestmark = pytest.mark.skipif(
    not os.access(UCXX_PYTHON, os.X_OK),
    reason=f"no UCXX interpreter at {UCXX_PYTHON} (create it: source scripts/ucxx-venv.sh && ucxx_venv; or set UCXASYNC_UCXX_PYTHON)",
)

SIZES = [0, 8, 1 << 20]
LINE_TIMEOUT = 20  # seconds to wait for one line from the peer
EXIT_TIMEOUT = 30  # seconds for the peer to exit once told to

def peer_env():
    """Our environment for the peer: conftest set UCX_NET_DEVICES=lo, and `import ucp` set
    UCX-Py's UCX defaults (UCX_RNDV_THRESH, UCX_MAX_RNDV_RAILS, UCX_MEMTYPE_CACHE, ...) where
    unset, so both sides' UCX choose transports and protocols alike. Nothing of this
    interpreter's Python or library path goes along into the other venv."""
    drop = {"PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "LD_LIBRARY_PATH", "LD_PRELOAD"}
    env = {k: v for k, v in os.environ.items() if k not in drop}
    assert env.get("UCX_NET_DEVICES") and env.get("UCX_RNDV_THRESH")
    return env


class Peer:
    """The UCXX peer process: its stdout read line by line with time limits; killed on exit
    from the ``async with`` whatever happened."""

    def __init__(self, tmp_path, *args):
        self.args = [str(UCXX_PYTHON), "-u", str(PEER), *args]
        self.stderr_path = tmp_path / "ucxx_peer.stderr"
        self.lines = []

    async def __aenter__(self):
        self._stderr = open(self.stderr_path, "wb")
        self.proc = await asyncio.create_subprocess_exec(
            *self.args,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=self._stderr,
            env=peer_env(),
        )
        try:
            version = await self.expect("UCX")
            ours = ".".join(map(str, ucp.get_ucx_version()))
            assert version == ours, (
                f"UCXX uses UCX {version}, we use {ours}: the two cannot talk "
                "(fix .venv-ucxx: source scripts/ucxx-venv.sh && ucxx_venv)"
            )
        except BaseException:
            await self.__aexit__()
            raise
        return self

    async def __aexit__(self, *exc):
        proc = getattr(self, "proc", None)
        if proc is not None and proc.returncode is None:
            proc.kill()
            await proc.wait()
        self._stderr.close()

    def transcript(self):
        err = self.stderr_path.read_text(errors="replace")[-3000:]
        return "peer stdout:\n" + "\n".join(self.lines) + "\npeer stderr (tail):\n" + err

    async def line(self):
        try:
            raw = await asyncio.wait_for(self.proc.stdout.readline(), LINE_TIMEOUT)
        except asyncio.TimeoutError:
            pytest.fail("the UCXX peer said nothing for %d s\n%s" % (LINE_TIMEOUT, self.transcript()))
        if not raw:
            await self.proc.wait()
            pytest.fail("the UCXX peer exited (%s) early\n%s" % (self.proc.returncode, self.transcript()))
        text = raw.decode(errors="replace").rstrip("\n")
        self.lines.append(text)
        return text

    async def expect(self, word):
        """Reads the next line, which must start with ``word``; returns the rest."""
        text = await self.line()
        first, _, rest = text.partition(" ")
        assert first == word, f"expected {word!r} from the UCXX peer, got {text!r}\n{self.transcript()}"
        return rest

    async def finish(self):
        """Closes the peer's stdin (its signal to end), waits for it to exit and returns its
        exit status (the rest of its stdout goes to the transcript)."""
        self.proc.stdin.close()
        try:
            out, _ = await asyncio.wait_for(self.proc.communicate(), EXIT_TIMEOUT)
        except asyncio.TimeoutError:
            pytest.fail("the UCXX peer did not exit within %d s\n%s" % (EXIT_TIMEOUT, self.transcript()))
        self.lines.extend(out.decode(errors="replace").splitlines())
        return self.proc.returncode


async def echo(ep, peer):
    """Sends SIZES through the peer and checks every byte came back plus one."""
    for size in SIZES:
        out = np.random.default_rng(size + 1).integers(0, 256, size, dtype="u1")
        back = np.full(size, 0xEE, dtype="u1")
        await asyncio.wait_for(asyncio.gather(ep.send(out), ep.recv(back)), LINE_TIMEOUT)
        np.testing.assert_array_equal(back, out + np.uint8(1), err_msg=f"{size} B through UCXX")
        assert await peer.expect("ECHOED") == str(size)


class Session:
    """One connection between us and the UCXX peer, ``client`` ("ours" or "ucxx") being the
    side that connects; ``then`` is the peer's --then. Gives ``ep`` (ours) and ``peer``."""

    def __init__(self, tmp_path, client, then):
        self.tmp_path, self.client, self.then = tmp_path, client, then
        self.lf = None

    async def __aenter__(self):
        try:
            return await self._connect()
        except BaseException:
            await self.__aexit__()
            raise

    async def _connect(self):
        self.peer = None
        if self.client == "ours":
            self.peer = Peer(self.tmp_path, "server", "--then", self.then)
            await self.peer.__aenter__()
            port = int(await self.peer.expect("PORT"))
            self.ep = await asyncio.wait_for(ucp.create_endpoint("127.0.0.1", port), LINE_TIMEOUT)
        else:
            accepted = asyncio.get_running_loop().create_future()
            self.accepted = []  # a dropped endpoint closes: keep it

            async def handler(ep):
                self.accepted.append(ep)
                if not accepted.done():
                    accepted.set_result(ep)

            self.lf = ucp.create_listener(handler, wire_protocol="ucxx")
            self.peer = Peer(self.tmp_path, "client", str(self.lf.port), "--then", self.then)
            await self.peer.__aenter__()
            await self.peer.expect("CONNECTED")
            self.ep = await asyncio.wait_for(accepted, LINE_TIMEOUT)
        # UCXX's 16-byte peer info: detected by our client, spoken by our listener; either
        # way there is no control channel.
        assert self.ep._tags["ctrl_send"] is None and self.ep._tags["ctrl_recv"] is None
        return self

    async def __aexit__(self, *exc):
        try:
            if self.peer is not None:
                await self.peer.__aexit__(*exc)
        finally:
            # After a failure too, so that the fixture's ucp.reset() reports only the failure.
            for ep in [getattr(self, "ep", None), *getattr(self, "accepted", [])]:
                if ep is not None:
                    ep.abort()
            if self.lf is not None:
                self.lf.close()


@pytest.mark.parametrize("client", ["ours", "ucxx"])
def test_echo(progress_mode, tmp_path, client):
    """(a) our client, UCXX listener; (b) UCXX client, our wire_protocol="ucxx" listener:
    0 B, 8 B and 1 MiB (rendezvous) each way, checked byte for byte."""

    async def main():
        async with Session(tmp_path, client, "wait") as s:
            await echo(s.ep, s.peer)
            await s.ep.close()
            assert await s.peer.finish() == 0, s.peer.transcript()

    run(main(), timeout=90)


@pytest.mark.parametrize("client", ["ours", "ucxx"])
def test_send_multi_and_recv_multi_with_ucxx(progress_mode, tmp_path, client):
    """Our send_multi reaches UCXX's recv_multi and its send_multi our recv_multi: 250 frames
    (three headers of UCXX's framing, up to 100 frames each), empty and rendezvous-sized ones
    among them, checked byte for byte."""
    sizes = [(i * 7919) % 5000 for i in range(248)] + [0, 1 << 20]
    rng = np.random.default_rng(7)
    frames = [rng.integers(0, 256, n, dtype="u1") for n in sizes]

    async def main():
        async with Session(tmp_path, client, "multi") as s:
            await echo(s.ep, s.peer)
            got, _ = await asyncio.wait_for(asyncio.gather(s.ep.recv_multi(), s.ep.send_multi(frames)), LINE_TIMEOUT)
            assert await s.peer.expect("MULTI") == ",".join(map(str, sizes))
            assert [len(g) for g in got] == sizes
            for i, (g, f) in enumerate(zip(got, frames)):
                np.testing.assert_array_equal(np.frombuffer(g, dtype="u1"), f + np.uint8(1), err_msg=f"frame {i}")
            await s.ep.close()
            assert await s.peer.finish() == 0, s.peer.transcript()

    run(main(), timeout=90)


@pytest.mark.parametrize("client", ["ours", "ucxx"])
def test_ucxx_close_fails_our_pending_recv(progress_mode, tmp_path, client):
    """(c) UCXX closes its endpoint (just an abort: UCXX sends no control message); our
    receive posted before or after that fails with a ucp exception, while the peer lives."""

    async def main():
        async with Session(tmp_path, client, "close") as s:
            await echo(s.ep, s.peer)
            pending = asyncio.ensure_future(s.ep.recv(bytearray(8)))
            s.peer.proc.stdin.write(b"close\n")  # only now: see ucxx_peer.py's "close"
            await s.peer.proc.stdin.drain()
            await s.peer.expect("CLOSED")
            with pytest.raises(ucp.exceptions.UCXBaseException):
                await asyncio.wait_for(pending, LINE_TIMEOUT)
            assert s.ep.closed()
            assert s.peer.proc.returncode is None  # noticed the close, not the peer's exit
            assert await s.peer.finish() == 0, s.peer.transcript()

    run(main(), timeout=90)


@pytest.mark.parametrize("client", ["ours", "ucxx"])
def test_our_close_fails_ucxx_pending_recv(progress_mode, tmp_path, client):
    """(c) we close our endpoint; the UCXX peer's pending receive fails with a UCXX
    exception (it reports which) instead of hanging."""

    async def main():
        async with Session(tmp_path, client, "recv-fail") as s:
            await echo(s.ep, s.peer)
            await asyncio.sleep(0.2)  # let the peer post its receive first (either order must work)
            await s.ep.close()
            assert s.ep.closed()
            failed = await s.peer.expect("RECV-FAILED")  # not RECV-HUNG
            assert failed.startswith("ucxx-error "), s.peer.transcript()  # a UCXX exception
            assert await s.peer.expect("ALIVE") == "False"
            assert await s.peer.finish() == 0, s.peer.transcript()

    run(main(), timeout=90)


def test_ucxpy_flavour_listener_rejects_ucxx_client(fresh_ucp, tmp_path):
    """Without wire_protocol="ucxx" our listener speaks UCX-Py's 24-byte handshake, which a
    UCXX client rejects (as it rejects real UCX-Py): the flavour must be chosen."""

    async def main():
        accepted = []
        lf = ucp.create_listener(accepted.append)
        try:
            async with Peer(tmp_path, "client", str(lf.port)) as peer:
                assert (await peer.expect("ERROR")).startswith("RuntimeError('Checksum invalid!"), peer.transcript()
                assert await peer.finish() == 1
            assert accepted == []
        finally:
            lf.close()

    run(main(), timeout=60)
