"""distributed's own generic comm checks on ``ucxa://``: the ``check_*`` functions of its
``distributed/comm/tests/test_comms.py`` (not in distributed's wheel: pass the file, e.g. from a
checkout of dask/distributed) called with ``ucxa`` addresses, as its tests call them with
``tcp`` ones, IPv4 and IPv6 forms. Prints one line per check and exits 1 if any failed.

    python scripts/dask_comm_checks.py PATH/TO/test_comms.py

The ``[::]`` forms contact the machine's external IPv6 address (distributed's ``get_ipv6()``),
and the ``0.0.0.0`` forms its external IPv4 one; where there is none, those checks are skipped
and said so. To give them one without using the host's network, run inside a network
namespace with a veth pair (``python/tests/test_network_faults.py`` does, through
``python/tests/netns.py``). The TLS checks do not apply, nor do those that patch tornado's
TCP internals.
"""
import asyncio
import importlib.util
import socket
import sys
import time
import traceback


def load(path):
    # The module builds TLS contexts from certificates the wheel does not ship; no check run
    # here uses them.
    import distributed.utils_test as utils_test

    utils_test.get_cert = lambda name: name
    utils_test.get_server_ssl_context = lambda *a, **k: None
    utils_test.get_client_ssl_context = lambda *a, **k: None
    spec = importlib.util.spec_from_file_location("distributed_test_comms", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def free_port(family=socket.AF_INET):
    with socket.socket(family) as s:
        s.bind(("::1" if family == socket.AF_INET6 else "127.0.0.1", 0))
        return s.getsockname()[1]


def external(getter):
    try:
        return getter()
    except Exception:  # no route: the host has no such address
        return None


def checks(t):
    """(name, coroutine function or None with the reason to skip), in order."""
    from distributed.utils import get_ip, get_ipv6

    ip4, ip6 = external(get_ip), external(get_ipv6)
    eq = t.tcp_eq
    p4, p6 = free_port(), free_port(socket.AF_INET6)
    out = []

    def add(name, fn, skip=None):
        out.append((name, None if skip else fn, skip))

    for addr, listen_check, contact_check, needs in [
        ("ucxa://127.0.0.1", eq("127.0.0.1"), None, None),
        (f"ucxa://127.0.0.1:{p4}", eq("127.0.0.1", p4), None, None),
        ("ucxa://0.0.0.0", eq("0.0.0.0"), eq(ip4), ip4),
        (f"ucxa://0.0.0.0:{p4 + 1}", eq("0.0.0.0", p4 + 1), eq(ip4, p4 + 1), ip4),
        ("ucxa://", eq("0.0.0.0"), eq(ip4), ip4),
        (f"ucxa://:{p4 + 2}", eq("0.0.0.0", p4 + 2), eq(ip4, p4 + 2), ip4),
        ("ucxa://[::1]", eq("::1"), None, None),
        (f"ucxa://[::1]:{p6}", eq("::1", p6), None, None),
        ("ucxa://[::]", eq("::"), eq(ip6), ip6),
        (f"ucxa://[::]:{p6 + 1}", eq("::", p6 + 1), eq(ip6, p6 + 1), ip6),
    ]:
        skip = None if needs is not None or contact_check is None else "no external address"
        add(
            f"check_client_server {addr}",
            lambda a=addr, lc=listen_check, cc=contact_check: t.check_client_server(a, lc, cc),
            skip,
        )
    add("check_comm_closed_implicit", lambda: t.check_comm_closed_implicit("ucxa://127.0.0.1"))
    add("check_comm_closed_explicit", lambda: t.check_comm_closed_explicit("ucxa://127.0.0.1"))
    add("check_connect_timeout", lambda: t.check_connect_timeout(f"ucxa://127.0.0.1:{free_port()}"))

    async def many():
        for addr in ("ucxa://127.0.0.1", "ucxa://0.0.0.0", "ucxa://"):
            await t.check_many_listeners(addr)

    add("check_many_listeners", many)
    add("check_deserialize", lambda: t.check_deserialize("ucxa://"))
    add("check_deserialize_roundtrip", lambda: t.check_deserialize_roundtrip("ucxa://"))
    add("check_deserialize_eoferror", lambda: t.check_deserialize_eoferror("ucxa://"))

    async def repr_():
        a, b = await t.get_comm_pair("ucxa://127.0.0.1")
        assert a.local_address in repr(b) and b.local_address in repr(a)
        await t.check_repr(a, b)

    add("check_repr", repr_)

    async def addresses():
        a, b = await t.get_comm_pair("ucxa://127.0.0.1")
        await t.check_addresses(a, b)

    add("check_addresses", addresses)

    # test_do_not_share_buffers builds its listener with its `tcp` fixture: here a ucxa one.
    # Its helper get_host_array knows NumPy, memoryview, bytes and bytearray owners only, so
    # it runs without the comm's receive pool (whose HostBuffer owns each frame).
    listeners = []

    class UcxaAsTcp:
        @staticmethod
        async def TCPListener(host, handler):
            from distributed.comm import listen

            listener = await listen(f"ucxa://{host}", handler)
            listeners.append(listener)
            return listener

    async def do_not_share_buffers(list_cls):
        import dask
        import ucp.dask_comm as dask_comm

        saved = dask_comm._host_pool, dask_comm._allocate_host_frame
        dask_comm._host_pool, dask_comm._allocate_host_frame = None, dask_comm.host_array
        try:
            with dask.config.set({"ucxa.host-pool-size": 0}):
                await t.test_do_not_share_buffers.__wrapped__(UcxaAsTcp, list_cls)
        finally:
            for listener in listeners:
                listener.stop()
            listeners.clear()
            dask_comm._host_pool, dask_comm._allocate_host_frame = saved

    for cls in (list, t.OpaqueList):
        add(f"test_do_not_share_buffers[{cls.__name__}]", lambda c=cls: do_not_share_buffers(c))
    return out


async def reset_ucp():
    """A fresh UCX for the next check, as each of distributed's tests gets a fresh process
    state: the first listener's address otherwise decides the devices for all (a listener
    on 127.0.0.1 limits UCX to lo). distributed closes comms on its own a moment later."""
    import ucp

    deadline = time.monotonic() + 10
    while True:
        try:
            ucp.reset()
            return
        except ucp.exceptions.UCXError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.1)


async def run_all(t):
    failed = ran = 0
    for name, fn, skip in checks(t):
        if fn is None:
            print(f"SKIP {name}: {skip}", flush=True)
            continue
        ran += 1
        t0 = time.monotonic()
        try:
            await asyncio.wait_for(fn(), 120)
            print(f"PASS {name} ({time.monotonic() - t0:.1f} s)", flush=True)
        except BaseException:  # noqa: B902 (each check's failure is reported, the rest still run)
            failed += 1
            print(f"FAIL {name}\n{traceback.format_exc()}", flush=True)
        await reset_ucp()
    print(f"{ran - failed} of {ran} passed", flush=True)
    return failed


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    t = load(sys.argv[1])
    sys.exit(1 if asyncio.run(run_all(t)) else 0)


if __name__ == "__main__":
    main()
