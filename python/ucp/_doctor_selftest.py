"""``python -m ucp.doctor``'s loopback self-test: this process listens on 127.0.0.1 and sends
1 MiB messages for about half a second to a child process (this module run as a script), which
receives them and answers the last; both run with ``ucp``'s defaults. The result is the
bandwidth, a copy of the same size in this process beside it, how many messages went by the
same-host single-copy path (the child read them from this process's memory), and what UCX
chose for the endpoint: its lanes' transports and the protocol of a message of that size,
which carries the messages the single-copy path does not.
"""
import asyncio
import subprocess
import sys
import time

import ucp
from ucp import _ucx_async as _native

#: Seconds the child may take to start, connect and receive, beyond the sending time.
_GRACE = 30.0


def memcpy_bandwidth(size, seconds=0.1):
    """Bytes per second of copying ``size`` bytes from one buffer into another here."""
    src, dst = bytearray(b"\x01") * size, bytearray(size)
    dst[:] = src  # the pages touched before the clock starts
    copies, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds:
        dst[:] = src
        copies += 1
    return copies * size / elapsed


async def _send_for(ep, size, seconds):
    """Sends ``size``-byte messages until ``seconds`` have passed (the last one says so in its
    first byte), waits for the peer's answer; ``(messages, elapsed seconds)``."""
    buf = bytearray(b"\x01") * size
    messages, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        await ep.send(buf)
        messages += 1
    buf[0] = 0
    await ep.send(buf)
    await ep.recv(bytearray(8))
    return messages + 1, time.perf_counter() - start


async def _run(size, seconds):
    done = asyncio.get_running_loop().create_future()

    async def serve(ep):
        try:
            messages, elapsed = await _send_for(ep, size, seconds)
            info, copied = ep.ucx_info(), ep.single_copy[2]
            if not done.done():
                done.set_result((messages, elapsed, info, copied))
        except Exception as e:  # the peer failed: the report says how
            if not done.done():
                done.set_exception(e)

    listener = ucp.create_listener(serve, ip="127.0.0.1")
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "ucp._doctor_selftest", "127.0.0.1", str(listener.port), str(size),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )
    output = asyncio.ensure_future(child.communicate())
    try:
        # The child failing (it could not connect, say) ends the wait too, with its output.
        await asyncio.wait({done, output}, timeout=seconds + _GRACE, return_when=asyncio.FIRST_COMPLETED)
        if not done.done():
            why = output.result()[0].decode()[-500:] if output.done() else "no message within the time allowed"
            raise RuntimeError(f"the receiving process did not take the messages: {why}")
        messages, elapsed, info, copied = done.result()
        out, _ = await asyncio.wait_for(output, _GRACE)
        if child.returncode != 0:
            raise RuntimeError(f"the receiving process exited with {child.returncode}: {out.decode()[-500:]}")
    finally:
        output.cancel()
        if child.returncode is None:
            child.kill()
            await child.wait()
        listener.close()
    return messages, elapsed, info, copied


def run(size=1 << 20, seconds=0.5):
    """The self-test's result: ``{"size", "seconds", "messages", "bandwidth" (bytes/s),
    "memcpy" (bytes/s), "single_copy_messages" (how many of the messages went by the
    same-host single-copy path), "transports" (the endpoint's lanes), "protocol", "transport"
    (the row for ``size`` of its tag-send table)}``."""
    messages, elapsed, info, copied = asyncio.run(_run(size, seconds))
    result = {
        "size": size,
        "seconds": elapsed,
        "messages": messages,
        "bandwidth": messages * size / elapsed,
        "memcpy": memcpy_bandwidth(size),
        "single_copy_messages": copied,
        "transports": _native.doctor_lane_transports(info),
        "protocol": None,
        "transport": None,
    }
    for _config, operation, rows in _native.doctor_tables(info):
        if operation == _native.DOCTOR_TAG_SEND_HOST:
            for first, last, _range, protocol, transport in rows:
                if first <= size and (last is None or size <= last):
                    result["protocol"], result["transport"] = protocol, transport
    return result


async def _receive(host, port, size):
    ep = await ucp.create_endpoint(host, port)
    buf = bytearray(size)
    while True:
        await ep.recv(buf)
        if buf[0] == 0:
            break
    await ep.send(bytearray(8))
    await ep.close()


if __name__ == "__main__":
    # The receiving side: python -m ucp._doctor_selftest HOST PORT SIZE
    host, port, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    asyncio.run(asyncio.wait_for(_receive(host, port, size), _GRACE))
