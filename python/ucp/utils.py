"""Small helpers shared by the `ucp` package and its users (UCX-Py's `ucp.utils`).

`hash64bits` derives tags and the handshake checksum, so its output must stay
bit-identical to UCX-Py's: peers running UCX-Py check it on the wire.
"""
import asyncio
import hashlib
import logging
import multiprocessing
import os
import socket
import time

import numpy as np

# Spawn, not fork: forking a process that holds UCX contexts or CUDA state breaks the child.
mp = multiprocessing.get_context("spawn")


def get_event_loop():
    """The running event loop, or a new one (not set as current) when none is running.

    Unlike `asyncio.get_event_loop()` this neither warns nor fails outside a running loop.
    """
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.new_event_loop()


class _HostTimeFilter(logging.Filter):
    """Adds the `timestamp` and `hostname` fields that the UCX-Py log format uses."""

    def filter(self, record):
        record.timestamp = "%.6f" % time.time()
        record.hostname = socket.gethostname()
        return True


def get_ucxpy_logger():
    """The "ucx" logger, configured as UCX-Py does.

    Level from `UCXPY_LOG_LEVEL` (default WARNING), no propagation to the root logger,
    and one stream handler printing e.g. ``[1585175070.291146] [host:1054] UCXPY  WARNING Test``.
    Calling it again re-reads the level but does not add another handler.
    """
    logger = logging.getLogger("ucx")
    logger.propagate = False
    if not any(getattr(h, "_ucxpy_handler", False) for h in logger.handlers):
        handler = logging.StreamHandler()
        handler._ucxpy_handler = True
        handler.setFormatter(
            logging.Formatter("[%(timestamp)s] [%(hostname)s:%(process)d] UCXPY  %(levelname)s %(message)s")
        )
        handler.addFilter(_HostTimeFilter())
        logger.addHandler(handler)
    # Upper-cased so that "debug" works too; an unknown name raises ValueError, as in UCX-Py.
    logger.setLevel(logging.getLevelName(os.getenv("UCXPY_LOG_LEVEL", "WARNING").upper()))
    return logger


def hash64bits(*args):
    """64-bit unsigned hash of `args`: the first 8 bytes (big-endian) of SHA-1 over `repr(args)`."""
    return int(hashlib.sha1(repr(args).encode()).hexdigest()[:16], 16)


def hmean(a):
    """Harmonic mean of the values in `a` (0 when there are none)."""
    a = np.asarray(a, dtype=float)
    if len(a):
        return 1 / np.mean(1 / a)
    return 0


# --- Peer processes of examples and benchmarks -------------------------------------------
# A script that starts a peer process must never hang when one side fails: a non-daemon child
# that outlives a failed parent keeps the interpreter waiting at exit forever.


def wait_for_port(q, server_process, timeout=60.0):
    """The port `server_process` puts on `q`; fails at once if the process dies first."""
    from queue import Empty

    deadline = time.monotonic() + timeout
    while True:
        try:
            return q.get(timeout=0.5)
        except Empty:
            if not server_process.is_alive():
                raise RuntimeError(
                    f"the server process exited (code {server_process.exitcode}) before listening"
                ) from None
            if time.monotonic() > deadline:
                raise RuntimeError(f"the server process reported no port within {timeout:.0f} s") from None


def stop(process, grace=5.0):
    """Terminates `process` (killing it if it ignores that for `grace` seconds) and reaps it."""
    if process.is_alive():
        process.terminate()
        process.join(grace)
    if process.is_alive():
        process.kill()
        process.join()


def supervise(processes, grace=5.0, finish=30.0):
    """Waits for `processes` ({name: process}); once one fails, the others get `grace` seconds
    to notice and are then stopped, and once all but one have succeeded the last gets `finish`
    seconds. Raises SystemExit naming the ones that failed."""
    failed_at = done_at = None
    while any(p.is_alive() for p in processes.values()):
        for p in processes.values():
            p.join(0.05)
        now = time.monotonic()
        codes = [p.exitcode for p in processes.values()]
        if failed_at is None and any(c not in (None, 0) for c in codes):
            failed_at = now
        if done_at is None and codes.count(0) >= len(codes) - 1:
            done_at = now
        if (failed_at is not None and now - failed_at > grace) or (done_at is not None and now - done_at > finish):
            for p in processes.values():
                stop(p)
    failed = {name: p.exitcode for name, p in processes.items() if p.exitcode}
    if failed:
        raise SystemExit("failed: " + ", ".join(f"{name} (exit code {code})" for name, code in failed.items()))


def run_with_server(server_process, client, finish=30.0):
    """Runs `client()` in this process while `server_process` serves it: stops the server at
    once if the client raises, and gives it `finish` seconds to end after a success."""
    ok = False
    try:
        client()
        ok = True
    finally:
        if ok:
            server_process.join(finish)
        stop(server_process)
    if server_process.exitcode:
        raise SystemExit(f"the server process failed (exit code {server_process.exitcode})")


def interface_of(ip):
    """The name of the network interface that owns address `ip` (IPv4: its primary address;
    IPv6: any), or None for a wildcard address, a host name, or an address no interface owns."""
    import fcntl
    import ipaddress
    import struct

    try:
        addr = ipaddress.ip_address(ip)
    except ValueError:  # a host name: left to UCX, which resolves it
        return None
    if addr.is_unspecified:
        return None
    if addr.version == 6:
        try:
            with open("/proc/net/if_inet6") as f:
                for line in f:
                    fields = line.split()
                    if ipaddress.ip_address(int(fields[0], 16)) == addr:
                        return fields[-1]
        except OSError:
            pass
        return None
    siocgifaddr = 0x8915
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for _, name in socket.if_nameindex():
            try:
                packed = fcntl.ioctl(s.fileno(), siocgifaddr, struct.pack("256s", name[:15].encode()))
            except OSError:  # no IPv4 address
                continue
            if socket.inet_ntoa(packed[20:24]) == str(addr):
                return name
    return None
