"""IPv6 listeners and connects, and IPv4 and IPv6 in one process. UCX's tcp transport uses one
address family per device (``UCX_TCP_AF_PRIO``) and UCX 1.22 corrupts the heap on a
connection of the other family (the process died in ``sysmalloc``); ``ucp`` serves each family
from a context whose tcp transport uses it, and ucx-core refuses a mismatch by name. A global
(unique-local) IPv6 address between two network namespaces: ``test_network_faults.py``."""
import asyncio
import socket

import pytest

import ucp
from conftest import has_ipv6_loopback, run

pytestmark = pytest.mark.skipif(not has_ipv6_loopback(), reason="no IPv6 loopback")


async def _echo_through(ip, connect_to=None, size=100_000):
    """A listener on ``ip``, a client connected to it (at ``connect_to``), one message each
    way; returns the two endpoints' contexts' tcp families (listener's, client's)."""
    served = asyncio.get_running_loop().create_future()

    async def serve(ep):
        buf = bytearray(size)
        await ep.recv(buf)
        await ep.send(buf)
        served.set_result(ep._ctx.tcp_family)
        await ep.close()

    lf = ucp.create_listener(serve, ip=ip)
    try:
        ep = await ucp.create_endpoint(connect_to or ip, lf.port)
        client_family = ep._ctx.tcp_family
        data = bytes(range(256)) * (size // 256) + bytes(size % 256)
        await ep.send(data)
        back = bytearray(size)
        await ep.recv(back)
        assert back == data
        families = (await asyncio.wait_for(served, 10), client_family)
        await ep.close()
        return families
    finally:
        lf.close()


def test_ipv6_loopback_listener_and_connect(progress_mode):
    assert run(_echo_through("::1")) == (socket.AF_INET6, socket.AF_INET6)


def test_ipv6_wildcard_listener_takes_ipv6_clients(fresh_ucp):
    assert run(_echo_through("::", connect_to="::1")) == (socket.AF_INET6, socket.AF_INET6)


def test_ipv4_and_ipv6_in_one_process_in_either_order(fresh_ucp):
    async def main():
        for ip in ("127.0.0.1", "::1", "127.0.0.1", "::1"):
            family = socket.AF_INET6 if ":" in ip else socket.AF_INET
            assert await _echo_through(ip) == (family, family), ip
        # IPv4 made the global context; IPv6 the other one, with init()'s arguments.
        assert ucp.core._ctx.tcp_family == socket.AF_INET
        assert ucp.core._other_ctx.tcp_family == socket.AF_INET6

    run(main())
    ucp.reset()
    assert ucp.core._ctx is None and ucp.core._other_ctx is None

    async def ipv6_first():
        await _echo_through("::1")
        await _echo_through("127.0.0.1")
        assert ucp.core._ctx.tcp_family == socket.AF_INET6
        assert ucp.core._other_ctx.tcp_family == socket.AF_INET

    run(ipv6_first())


def test_the_other_familys_context_gets_inits_arguments(fresh_ucp):
    ucp.init({"RNDV_THRESH": "4096"}, blocking_progress_mode=False, connect_timeout=7)
    run(_echo_through("::1"))
    other = ucp.core._other_ctx
    assert other.tcp_family == socket.AF_INET6
    assert other.get_config()["RNDV_THRESH"] == "intra:4K,inter:4K"
    assert other.blocking_progress_mode is False and other.connect_timeout == 7


def test_reset_refuses_while_the_other_familys_endpoints_live(fresh_ucp):
    ucp.init()  # the global context, IPv4

    async def main():
        lf = ucp.create_listener(lambda ep: None, ip="::1")  # the other one holds it
        with pytest.raises(ucp.exceptions.UCXError, match="not all Endpoints and/or Listeners"):
            ucp.reset()
        # The live (IPv6) context stays; the unused IPv4 one is gone.
        assert ucp.core._ctx is lf._ctx and ucp.core._other_ctx is None
        lf.close()

    run(main())
    ucp.reset()


def test_a_family_the_user_chose_against_is_refused_by_name(fresh_ucp):
    # UCX_TCP_AF_PRIO (or TCP_AF_PRIO in init) is the user's: no second context, and UCX's
    # tcp transport then cannot carry IPv6. The listener is refused by name instead of the
    # process aborting when a client comes.
    ucp.init({"TCP_AF_PRIO": "inet,inet6"})

    async def main():
        with pytest.raises(ucp.exceptions.UCXError, match=r"TCP_AF_PRIO=inet6,inet") as info:
            ucp.create_listener(lambda ep: None, ip="::1")
        assert "IPv6" in str(info.value) and " on lo " in str(info.value), info.value
        with pytest.raises(ucp.exceptions.UCXError, match=r"TCP_AF_PRIO=inet6,inet"):
            await ucp.create_endpoint("::1", 9)
        assert ucp.core._other_ctx is None

    run(main())
