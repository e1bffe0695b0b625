"""Network namespaces for the tests whose network must misbehave or have addresses of its own.
Every namespace is named ``ucxnf-<pid>-<n>`` and deleted when its ``with`` block ends, also on
failure; nothing is sent outside them. ``unavailable()`` says why they cannot be made here
(not root, no ``ip`` or ``nft``, no permission), for a clean skip."""
import contextlib
import itertools
import os
import shutil
import subprocess
import sys
import time

PREFIX = "ucxnf-"
_count = itertools.count()
_why_not = []


def _name():
    return f"{PREFIX}{os.getpid()}-{next(_count)}"


def run(*cmd, ns=None, check=True, input=None):
    """Runs ``cmd`` (inside namespace ``ns`` if given); returns its stdout."""
    full = (["ip", "netns", "exec", ns] if ns else []) + [str(c) for c in cmd]
    p = subprocess.run(full, capture_output=True, text=True, input=input, timeout=30)
    if check and p.returncode != 0:
        raise RuntimeError(f"{' '.join(full)} failed ({p.returncode}): {p.stderr.strip()}")
    return p.stdout


def unavailable():
    """Why namespaces (with nftables inside) cannot be used here, or None (checked once)."""
    if not _why_not:
        _why_not.append(_probe())
    return _why_not[0]


def _probe():
    if not sys.platform.startswith("linux"):
        return "Linux network namespaces only"
    if os.geteuid() != 0:
        return "needs root (network namespaces)"
    for tool in ("ip", "nft"):
        if shutil.which(tool) is None:
            return f"needs {tool}"
    try:
        with namespace() as ns:
            drop_syns(ns, "1-2")
    except (RuntimeError, OSError, subprocess.SubprocessError) as e:
        return f"cannot make a network namespace here: {e}"
    return None


@contextlib.contextmanager
def namespace():
    """A new namespace with its loopback up; deleted afterwards."""
    ns = _name()
    run("ip", "netns", "add", ns)
    try:
        run("ip", "link", "set", "lo", "up", ns=ns)
        yield ns
    finally:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)


@contextlib.contextmanager
def veth_pair(v4=("10.201.0.1", "10.201.0.2"), v6=("fd00:4e46::1", "fd00:4e46::2")):
    """Two namespaces joined by a veth pair (``eth1`` in each), with the IPv4 addresses ``v4``
    (/24) and the IPv6 unique-local addresses ``v6`` (/64; ``None`` for none), one of each
    per side; both deleted afterwards (the pair goes with them)."""
    with namespace() as a, namespace() as b:
        run("ip", "-n", a, "link", "add", "eth1", "type", "veth", "peer", "name", "eth1", "netns", b)
        for ns, i in ((a, 0), (b, 1)):
            if v4:
                run("ip", "-n", ns, "addr", "add", f"{v4[i]}/24", "dev", "eth1")
            if v6:
                run("ip", "-n", ns, "addr", "add", f"{v6[i]}/64", "dev", "eth1", "nodad")
            run("ip", "-n", ns, "link", "set", "eth1", "up")
        _wait_until_up(a, b)
        yield a, b


def _wait_until_up(*namespaces):
    """Waits until ``eth1`` runs in each namespace: UCX uses an interface only once it runs
    (carrier on both ends); until then it finds the addresses unreachable."""
    deadline = time.monotonic() + 10
    for ns in namespaces:
        while "state UP" not in run("ip", "-n", ns, "link", "show", "eth1"):
            if time.monotonic() > deadline:
                raise RuntimeError(f"eth1 never came up in {ns}")
            time.sleep(0.02)


@contextlib.contextmanager
def routed_pair(subnets=("10.202.1", "10.202.2")):
    """Two hosts on networks of their own joined through a router: namespaces ``a`` and
    ``b``, each with ``eth1`` at ``<subnet>.2/24`` and a default route through the router
    namespace's ``<subnet>.1``, which forwards between them. Yields ``(a, router, b)`` and the
    two hosts' addresses; all three are deleted afterwards (the veth pairs go with them).
    ``partition(router)`` stops the router passing packets, ``heal(router)`` lets them through
    again."""
    with namespace() as a, namespace() as router, namespace() as b:
        for ns, link, subnet in ((a, "ra", subnets[0]), (b, "rb", subnets[1])):
            run("ip", "-n", router, "link", "add", link, "type", "veth", "peer", "name", "eth1", "netns", ns)
            run("ip", "-n", router, "addr", "add", f"{subnet}.1/24", "dev", link)
            run("ip", "-n", ns, "addr", "add", f"{subnet}.2/24", "dev", "eth1")
            run("ip", "-n", router, "link", "set", link, "up")
            run("ip", "-n", ns, "link", "set", "eth1", "up")
            run("ip", "-n", ns, "route", "add", "default", "via", f"{subnet}.1")
        run("sysctl", "-q", "-w", "net.ipv4.ip_forward=1", ns=router)
        _wait_until_up(a, b)
        yield (a, router, b), (f"{subnets[0]}.2", f"{subnets[1]}.2")


def partition(router):
    """The router drops every packet it would forward (nothing between the two hosts gets
    through, and nobody is told: no reset, no ICMP)."""
    rules = (
        "table inet ucxnf_partition {\n  chain forward {\n"
        "    type filter hook forward priority 0; policy drop;\n  }\n}\n"
    )
    run("nft", "-f", "-", ns=router, input=rules)


def heal(router):
    """Removes what ``partition`` added."""
    run("nft", "delete", "table", "inet", "ucxnf_partition", ns=router)


def drop_syns(ns, ports):
    """Drops TCP connection attempts (SYNs) to ``ports`` (``"A-B"``) arriving in ``ns``."""
    rules = (
        "table inet ucxnf {\n  chain input {\n    type filter hook input priority 0; policy accept;\n"
        f"    tcp dport {ports} tcp flags syn drop\n  }}\n}}\n"
    )
    run("nft", "-f", "-", ns=ns, input=rules)


def allow_syns(ns):
    """Removes what ``drop_syns`` added."""
    run("nft", "delete", "table", "inet", "ucxnf", ns=ns)


def listening(pid):
    """The TCP addresses process ``pid`` listens on, as ``(ip, port)`` pairs (from
    ``/proc/net/tcp*`` in its namespace and its open sockets)."""
    import ipaddress

    inodes = set()
    fd_dir = f"/proc/{pid}/fd"
    for fd in os.listdir(fd_dir):
        try:
            target = os.readlink(f"{fd_dir}/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    found = set()
    for table, v6 in (("tcp", False), ("tcp6", True)):
        try:
            with open(f"/proc/{pid}/net/{table}") as f:
                lines = f.read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state != "0A" or inode not in inodes:  # 0A: LISTEN
                continue
            hex_ip, hex_port = local.split(":")
            raw = bytes.fromhex(hex_ip)
            # /proc prints each 32-bit word in host order (little-endian here).
            raw = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
            ip = ipaddress.IPv6Address(raw) if v6 else ipaddress.IPv4Address(raw)
            found.add((str(ip), int(hex_port, 16)))
    return found
