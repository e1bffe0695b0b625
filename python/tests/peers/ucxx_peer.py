"""A UCXX peer for python/tests/test_interop_ucxx.py, run by the UCXX virtualenv's Python
(.venv-ucxx, PyPI ``ucxx-cu12``), never by the tests' own interpreter.

    ucxx_peer.py server [--then ...]       listen on a free port, print "PORT <n>", serve one client
    ucxx_peer.py client PORT [--then ...]  connect to 127.0.0.1:PORT, print "CONNECTED"

Its first line is "UCX <version>" (the UCX library UCXX loaded).

Either way it serves one session on the endpoint, with UCXX's asyncio API:
for each size in --sizes, receive a message of that size and send it back with every
byte incremented by one (mod 256), so the test can tell the peer really saw its data and it
really got the peer's. Then, by --then:

    wait       wait for stdin to close (the test closes its endpoint meanwhile, or not)
    close      wait for a line on stdin (the test has received the echoes: UCXX's close does
               not flush, so closing right after a rendezvous send can fail the peer's receive
               of it), close the endpoint (``await ep.close()``), print "CLOSED", then wait
               for stdin to close, so the test sees the close while this process is still alive
    multi      receive one ``recv_multi`` message, print "MULTI <frame sizes, comma-separated>",
               send the frames back with ``send_multi``, every byte plus one, then wait as
               ``wait`` does
    recv-fail  post a receive nobody will answer and report how it ended: "RECV-FAILED
               ucxx-error|other <type> <message>" then "ALIVE <ep.alive>" (the test closed its
               endpoint and UCXX noticed), "RECV-HUNG" (15 s passed) or "RECV-GOT"

Progress lines go to stdout, flushed; the exit status is 0 when the session went as planned.
Every wait has a time limit, so a peer never outlives a failing test by long.
"""
import argparse
import asyncio
import os
import sys

import numpy as np
import ucxx

LIMIT = 30.0  # seconds for the whole session, and for waiting on stdin


def say(*words):
    print(*words, flush=True)


async def wait_stdin_closed():
    """Returns when the test closes our stdin (or after LIMIT seconds)."""
    loop = asyncio.get_running_loop()
    try:
        await asyncio.wait_for(loop.run_in_executor(None, sys.stdin.read), LIMIT)
    except asyncio.TimeoutError:
        say("STDIN-TIMEOUT")


async def session(ep, sizes, then):
    for size in sizes:
        buf = np.empty(size, dtype="u1")
        await ep.recv(buf)
        await ep.send(buf + np.uint8(1))
        say("ECHOED", size)
    if then == "multi":
        frames = [np.frombuffer(memoryview(f).cast("B"), dtype="u1") for f in await ep.recv_multi()]
        say("MULTI", ",".join(str(f.nbytes) for f in frames))
        await ep.send_multi([f + np.uint8(1) for f in frames])
    if then == "close":
        await asyncio.wait_for(asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline), LIMIT)
        await ep.close()
        say("CLOSED")
        await wait_stdin_closed()
        return 0
    if then == "recv-fail":
        try:
            await asyncio.wait_for(ep.recv(np.empty(8, dtype="u1")), 15)
        except asyncio.TimeoutError:
            say("RECV-HUNG")
            return 1
        except Exception as e:  # what UCXX raises is what we report
            kind = "ucxx-error" if isinstance(e, ucxx.exceptions.UCXError) else "other"
            say("RECV-FAILED", kind, type(e).__module__ + "." + type(e).__name__, repr(str(e)))
            say("ALIVE", ep.alive)
            return 0
        say("RECV-GOT")
        return 1
    await wait_stdin_closed()
    return 0


async def main(args):
    sizes = [int(s) for s in args.sizes.split(",") if s]
    say("UCX", ".".join(map(str, ucxx.get_ucx_version())))
    if args.role == "client":
        ep = await ucxx.create_endpoint("127.0.0.1", args.port)
        say("CONNECTED")
        return await session(ep, sizes, args.then)

    done = asyncio.get_running_loop().create_future()
    endpoints = []  # a dropped UCXX endpoint closes: keep it

    async def handler(ep):
        endpoints.append(ep)
        try:
            rc = await session(ep, sizes, args.then)
        except Exception as e:
            say("ERROR", repr(e))
            rc = 1
        if not done.done():
            done.set_result(rc)

    listener = ucxx.create_listener(handler)  # noqa: F841  (listens while referenced)
    say("PORT", listener.port)
    return await done


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("role", choices=["server", "client"])
    parser.add_argument("port", type=int, nargs="?")
    parser.add_argument("--sizes", default="0,8,1048576")
    parser.add_argument("--then", choices=["wait", "close", "multi", "recv-fail"], default="wait")
    args = parser.parse_args()
    try:
        rc = asyncio.run(asyncio.wait_for(main(args), LIMIT + 20))
    except Exception as e:
        say("ERROR", repr(e))
        rc = 1
    sys.stdout.flush()
    # UCXX's progress and notifier threads can make interpreter teardown slow or hang; the
    # session is over and everything we had to say is said.
    os._exit(rc)
