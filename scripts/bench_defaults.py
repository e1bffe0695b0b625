#!/usr/bin/env python3
"""What a user gets with the defaults: `ucp` (peer error handling on, nothing set) beside a
plain Python TCP socket (the same benchmark's `tornado` backend) and `ucx_perftest`, at 8 B,
64 KiB, 1 MiB and 16 MiB, between two processes on one host (127.0.0.1) and across a pair of
network namespaces joined by a veth (a real TCP stack between two "hosts": each side in pid
and IPC namespaces of its own too, so no shared memory).

Every side is a ping-pong of one message each way (`python -m ucp.benchmarks.send_recv`,
UCX-Py's benchmark; `ucx_perftest -t tag_lat`), reported as one-way latency and the
bandwidth one message gets (size / one-way time). `ucx_perftest -t tag_bw` without error
handling (a stream of sends, no ping-pong) is printed beside as UCX's ceiling on this machine.
perftest runs with the `UCX_*` variables `import ucp` sets, so its `-e` column is ucp's
like for like. Sides alternate within each round (the machine's speed drifts between
minutes); each cell is min / median / max over the rounds, and the ratio column is ucp's
median over tornado's. The header names the kernel's TCP congestion control, which moves the
socket's (and UCX's tcp transport's) figures.

    python scripts/bench_defaults.py                       # both sites, 3 rounds
    python scripts/bench_defaults.py --sites loopback --rounds 5 --sizes 1048576

The namespace site needs root (`ip netns`); it is skipped, saying so, without it. Namespaces
made here (`ucxa-bench-a`, `ucxa-bench-b`, addresses 10.78.0.1 and .2 on their veth) are
removed on exit.
"""
import argparse
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PY = sys.executable
NS_A, NS_B = "ucxa-bench-a", "ucxa-bench-b"
ADDR_A, ADDR_B = "10.78.0.1", "10.78.0.2"
SIDES = ("ucp", "tornado", "perftest -e", "perftest bw")


def libucx_dir():
    import libucx

    return os.path.dirname(libucx.__file__)


def ucp_env():
    """The UCX_* variables `import ucp` sets where unset (for perftest, like for like)."""
    code = (
        "import os; before = dict(os.environ); import ucp; "
        "print(' '.join(f'{k}={v}' for k, v in sorted(os.environ.items()) "
        "if k.startswith('UCX_') and before.get(k) != v))"
    )
    out = subprocess.run([PY, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    return dict(w.split("=", 1) for w in out)


def tcp_congestion_control():
    """The kernel's TCP congestion control (new network namespaces start with it too). It moves
    the socket's figures most: on the 2-core VM, tornado's 1 MiB message over loopback took
    about 135 µs one way under cubic (Linux's default) and 330 µs under bbr. The same file as
    ucx-core's `doctor::tcp_congestion_control`, read here because importing ucp in this process
    would set its UCX_* defaults for every side it starts."""
    try:
        with open("/proc/sys/net/ipv4/tcp_congestion_control") as f:
            return f.read().strip()
    except OSError:
        return "?"


def commit():
    """The repository's commit (short), for a run's header; '?' outside a git checkout."""
    out = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return out.stdout.strip() or "?"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def iterations(size):
    if size <= 65536:
        return 2000, 200
    if size <= 4 << 20:
        return 300, 30
    return 40, 5


class Site:
    """Where the two processes run: `server(cmd)`/`client(cmd)` prefix a command line."""

    def __init__(self, name):
        self.name = name

    def server(self, cmd):
        return cmd

    def client(self, cmd):
        return cmd

    @property
    def address(self):
        return "127.0.0.1"

    def env(self):
        # Loopback only, as every test and benchmark here.
        return {"UCX_NET_DEVICES": "lo", "UCXPY_IFNAME": "lo"}

    def close(self):
        pass


class NetnsSite(Site):
    def __init__(self):
        super().__init__("netns")
        self.close()
        run = lambda *a: subprocess.run(a, check=True)  # noqa: E731
        run("ip", "netns", "add", NS_A)
        run("ip", "netns", "add", NS_B)
        run("ip", "link", "add", "ubench-a", "netns", NS_A, "type", "veth", "peer", "name", "ubench-b", "netns", NS_B)
        for ns, dev, addr in ((NS_A, "ubench-a", ADDR_A), (NS_B, "ubench-b", ADDR_B)):
            run("ip", "-n", ns, "addr", "add", f"{addr}/24", "dev", dev)
            run("ip", "-n", ns, "link", "set", dev, "up")
            run("ip", "-n", ns, "link", "set", "lo", "up")
        time.sleep(1)  # the veth's carrier

    # Each side also gets a pid and IPC namespace of its own: nothing but the network is
    # shared, as between two hosts (else UCX's shared memory, or the same-host single-copy
    # path, would carry what the benchmark means to send over TCP). --kill-child: killing
    # unshare (as a finished run does) ends the process it forked too.
    ALONE = ["unshare", "--pid", "--ipc", "--fork", "--kill-child", "--mount-proc"]

    def server(self, cmd):
        return ["ip", "netns", "exec", NS_A, *self.ALONE, *cmd]

    def client(self, cmd):
        return ["ip", "netns", "exec", NS_B, *self.ALONE, *cmd]

    @property
    def address(self):
        return ADDR_A

    def env(self):
        return {}

    def close(self):
        for ns in (NS_A, NS_B):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def parse_send_recv(out):
    """(one-way µs, MiB/s) from send_recv's report."""
    lat = re.search(r"Latency \(median\)\s*\|\s*([0-9.]+) ns", out)
    if not lat:
        raise RuntimeError("no result in send_recv's output:\n" + out[-2000:])
    return float(lat.group(1)) / 1000


def run_send_recv(site, backend, size, env_extra=None):
    n, w = iterations(size)
    port = free_port()
    common = [PY, "-m", "ucp.benchmarks.send_recv", "-l", backend, "--reuse-alloc", "-n", str(size),
              "--n-iter", str(n), "--n-warmup-iter", str(w), "--port", str(port), "--no-detailed-report"]
    env = {**os.environ, **site.env(), **(env_extra or {})}
    server = subprocess.Popen(site.server([*common, "--server-only"]), env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            p = subprocess.run(site.client([*common, "--client-only", "--server-address", site.address]),
                               env=env, capture_output=True, text=True, timeout=300)
            if p.returncode == 0:
                return parse_send_recv(p.stdout)
            if "Connection refused" not in p.stdout + p.stderr and "not listening" not in p.stdout + p.stderr:
                time.sleep(0.1)
            time.sleep(0.05)
        raise RuntimeError(f"{backend} {size}: {p.stdout[-1500:]}{p.stderr[-1500:]}")
    finally:
        server.kill()
        server.wait()


def run_perftest(site, test, size, extra, env_extra):
    n, w = iterations(size)
    if test == "tag_bw":
        n = max(n * 4, 200)
    bindir = os.path.join(libucx_dir(), "bin")
    env = {**os.environ, **site.env(), **env_extra, "LD_LIBRARY_PATH": os.path.join(libucx_dir(), "lib")}
    def start():
        args = [os.path.join(bindir, "ucx_perftest"), "-p", str(free_port()), *extra]
        return args, subprocess.Popen(site.server(args), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    args, server = start()
    try:
        for _ in range(200):
            if server.poll() is not None:
                # A perftest server serves one client and exits, also one that failed after
                # connecting: start another.
                args, server = start()
            p = subprocess.run(site.client([*args, site.address, "-t", test, "-s", str(size), "-n", str(n),
                                            "-w", str(w)]), env=env, capture_output=True, text=True, timeout=300)
            final = [line for line in p.stdout.splitlines() if line.startswith("Final:")]
            if final:
                f = final[0].split()
                if test == "tag_lat":
                    return float(f[2])  # typical one-way latency, µs
                # tag_bw: its overall bandwidth (MiB/s), as the time one message takes
                return size / (float(f[6]) * 2**20) * 1e6
            time.sleep(0.05)
        raise RuntimeError(f"perftest {test} {size}: {p.stdout[-1500:]}{p.stderr[-1500:]}")
    finally:
        server.kill()
        server.wait()


def measure(site, side, size, like):
    """One-way µs for `side` at `size` on `site`."""
    if side == "ucp":
        return run_send_recv(site, "ucp-async", size)
    if side == "tornado":
        return run_send_recv(site, "tornado", size)
    if side == "perftest -e":
        return run_perftest(site, "tag_lat", size, ["-e"], like)
    if side == "perftest bw":
        return run_perftest(site, "tag_bw", size, [], like)
    raise ValueError(side)


def fmt_size(n):
    for unit, k in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= k and n % k == 0:
            return f"{n // k} {unit}"
    return f"{n} B"


def cell(values, bw_of=None):
    vals = sorted(bw_of(v) for v in values) if bw_of else sorted(values)
    lo, med, hi = vals[0], statistics.median(vals), vals[-1]
    digits = 0 if med >= 100 else 1 if med >= 10 else 2
    return f"{lo:.{digits}f} / {med:.{digits}f} / {hi:.{digits}f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[8, 65536, 1 << 20, 16 << 20])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--sites", default="loopback,netns")
    ap.add_argument("--sides", default=",".join(SIDES))
    args = ap.parse_args()
    sides = args.sides.split(",")
    like = ucp_env()
    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, commit {commit()}, {os.cpu_count()} cores, "
          f"TCP congestion control {tcp_congestion_control()}, UCX from {libucx_dir()}")
    print(f"# UCX_* that import ucp sets (perftest runs with them too): {' '.join(f'{k}={v}' for k, v in like.items()) or 'none'}")
    print(f"# {args.rounds} rounds, sides alternating; cells: min / median / max")
    for name in args.sites.split(","):
        if name == "netns":
            if os.geteuid() != 0 or not shutil.which("ip"):
                print("\n## netns: skipped (needs root and iproute2)")
                continue
            site = NetnsSite()
        else:
            site = Site("loopback")
        try:
            results = {(s, n): [] for s in sides for n in args.sizes}
            for r in range(args.rounds):
                for size in args.sizes:
                    order = sides[r % len(sides):] + sides[: r % len(sides)]
                    for side in order:
                        results[(side, size)].append(measure(site, side, size, like))
            print(f"\n## {site.name}\n")
            print("| size | " + " | ".join(f"{s} µs" for s in sides) + " | " + " | ".join(f"{s} MiB/s" for s in sides)
                  + " | ucp / tornado |")
            print("|---" * (2 * len(sides) + 2) + "|")
            for size in args.sizes:
                bw = lambda us, size=size: size / 2**20 / (us / 1e6)  # noqa: E731
                lat = " | ".join(cell(results[(s, size)]) for s in sides)
                bws = " | ".join(cell(results[(s, size)], bw) for s in sides)
                ratio = "-"
                if "ucp" in sides and "tornado" in sides:
                    ratio = f"{statistics.median(results[('tornado', size)]) / statistics.median(results[('ucp', size)]):.2f}"
                print(f"| {fmt_size(size)} | {lat} | {bws} | {ratio} |")
        finally:
            site.close()


if __name__ == "__main__":
    main()
