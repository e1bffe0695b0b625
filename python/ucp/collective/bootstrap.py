"""How ranks meet: rank 0 collects every rank's hello (rank, world size, worker address) on a
listener, reached at a known address or through a rendezvous file, and answers each with the
table of all worker addresses, or every rank that came with a refusal saying why. The bytes
are ucx-core's (``wire::bootstrap``); ucx-async's twin is ``collective/bootstrap.rs``. The
listener and its endpoints live on a worker of their own (``boot_context``)."""
import asyncio
import logging
import os
import socket
import time

from .. import _ucx_async as _native
from .. import core
from ..application import ApplicationContext
from .launch import rank_net_devices

logger = logging.getLogger("ucx")

# The longest hello rank 0 accepts (a worker address is a few hundred bytes to a few KiB);
# the same limit as ucx-async's.
MAX_HELLO = 64 << 10
BOOTSTRAP_TIMEOUT = 60.0


def init_nearest_devices():
    """Initialises ``ucp`` on the devices nearest this rank's GPU (``rank_net_devices``) for
    ``bootstrap(net_devices="auto")``, unless ``ucp`` is up already or ``UCX_NET_DEVICES`` is
    set."""
    if core.initialized():
        logger.warning("net_devices='auto': ucp is already initialised; its devices stay as they are")
        return
    if "UCX_NET_DEVICES" in os.environ:
        return  # the user's choice wins
    devices = rank_net_devices()
    if devices is not None:
        core.init({"NET_DEVICES": devices})


def boot_context():
    """A worker of its own for the bootstrap's listener and endpoints, on ``ucp``'s UCX
    context, to be dropped once the ranks are connected. Endpoints made through a listener
    start on TCP lanes, and on a worker that ever had one UCX keeps polling TCP (an
    ``epoll_wait`` system call in every progress call) after the endpoint is gone: 2.5 per
    1 KiB alltoallv round on rank 1 of 2, and 0.8 on rank 0."""
    main = core._get_ctx()
    return ApplicationContext(
        blocking_progress_mode=main.blocking_progress_mode,
        connect_timeout=main.connect_timeout,
        _context=main.context,
    )


def publish(path, host, port):
    """Writes the rendezvous file for rank 0 at ``host``:``port``, whole (a rename)."""
    ip = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][4][0]
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(_native.rendezvous_text(ip, port))
    os.replace(tmp, path)


def read_rendezvous(path):
    """Rank 0's ``(ip, port)`` from the rendezvous file, ``None`` while it is not there."""
    try:
        with open(path) as f:
            text = f.read()
    except FileNotFoundError:
        return None
    try:
        return _native.rendezvous_parse(text)
    except ValueError as e:
        raise ValueError(f"the rendezvous file {path} is not ours: {e}") from None


async def serve(boot, size, host, port, mine, rendezvous_file=None, error_handling=True):
    """Rank 0: collects every other rank's hello on a listener of ``boot`` (``boot_context``),
    answers each with the table, or, if a hello does not fit the job, every rank that came
    with a refusal saying why."""
    table = [None] * size
    table[0] = mine
    joined = []
    done = asyncio.get_running_loop().create_future()

    async def handler(ep):
        try:
            hello = await ep.recv_obj(max_size=MAX_HELLO)
            rank, address = _native.bootstrap_hello_admit(bytes(hello), size, error_handling)
            if table[rank] is not None:
                raise ValueError(f"rank {rank} joined twice")
            table[rank] = address
            joined.append(ep)
            if len(joined) == size - 1 and not done.done():
                done.set_result(None)
        except Exception as e:  # a bad hello fails the bootstrap, with its reason
            joined.append(ep)  # refused below, with every rank that came
            if not done.done():
                done.set_exception(e)

    listener = boot.create_listener(handler, port=port, ip=host if host not in ("", "0.0.0.0") else None)
    try:
        if rendezvous_file is not None:
            publish(rendezvous_file, host, listener.port)
        if size > 1:
            try:
                await done
            except Exception as e:  # none of them waits for a table that will not come
                no = _native.bootstrap_refusal(str(e))
                await asyncio.gather(*(ep.send_obj(no) for ep in joined), return_exceptions=True)
                raise
        blob = _native.bootstrap_table(table)
        await asyncio.gather(*(ep.send_obj(blob) for ep in joined))
    finally:
        listener.close()
        if rendezvous_file is not None:  # every rank has read it, or the bootstrap failed:
            try:  # a later job must not find it
                os.remove(rendezvous_file)
            except FileNotFoundError:
                pass
    return table, joined


async def join(boot, rank, size, host, port, mine, rendezvous_file=None, error_handling=True):
    """Ranks 1 and up: connect to rank 0 from ``boot`` (``boot_context``; retrying while it is
    not up, reading the rendezvous file again each time if there is one), hello, table."""
    deadline = time.monotonic() + BOOTSTRAP_TIMEOUT
    while True:
        if rendezvous_file is not None:
            root = read_rendezvous(rendezvous_file)
            if root is None:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"the rendezvous file {rendezvous_file} did not appear within {BOOTSTRAP_TIMEOUT} s")
                await asyncio.sleep(0.1)
                continue
            host, port = root
        try:
            ep = await boot.create_endpoint(host, port)
            break
        except Exception:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.1)
    await ep.send_obj(_native.bootstrap_hello(rank, size, mine, error_handling))
    blob = await ep.recv_obj(max_size=16 + size * (4 + MAX_HELLO))
    table = _native.bootstrap_table_decode(bytes(blob))
    if len(table) != size:
        raise ValueError(f"the address table has {len(table)} ranks, this rank expects {size}")
    return table, [ep]
