#!/usr/bin/env python3
"""The sweep behind the library's UCX TCP defaults (ucx-core's `LIBRARY_DEFAULTS`): each
setting of UCX's tcp transport against UCX's own defaults, by `ucx_perftest -t tag_lat -e`
(ping-pong, peer error handling on, the `UCX_*` that `import ucp` sets otherwise), on
loopback and across a pair of network namespaces; then the memory per endpoint of a `ucp`
client with 1, 100 and 1 000 endpoints to one server, each endpoint having moved a 1 MiB
message both ways, under each setting.

Settings alternate within each round (the machine's speed drifts between minutes); cells are
min / median / max of the one-way time, and the bandwidth one message gets at the median.

    python scripts/sweep_tcp.py                               # both sites, 3 rounds, memory
    python scripts/sweep_tcp.py --sites loopback --rounds 5 --no-memory

The namespace site needs root (it is skipped without it); see scripts/bench_defaults.py.
"""
import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_defaults as bd  # noqa: E402

# What UCX does without us (the library's defaults taken out), and each candidate.
UCX_DEFAULTS = {"UCX_TCP_TX_SEG_SIZE": "8k", "UCX_TCP_RX_SEG_SIZE": "64k"}
CONFIGS = {
    "UCX's (8k/64k)": {},
    "64k/64k": {"UCX_TCP_TX_SEG_SIZE": "64k", "UCX_TCP_RX_SEG_SIZE": "64k"},
    "256k/256k": {"UCX_TCP_TX_SEG_SIZE": "256k", "UCX_TCP_RX_SEG_SIZE": "256k"},
    "1m/1m": {"UCX_TCP_TX_SEG_SIZE": "1m", "UCX_TCP_RX_SEG_SIZE": "1m"},
    "256k + 4 MiB socket buffers": {"UCX_TCP_TX_SEG_SIZE": "256k", "UCX_TCP_RX_SEG_SIZE": "256k",
                                    "UCX_TCP_SNDBUF": "4m", "UCX_TCP_RCVBUF": "4m"},
}


def client_memory(n, size, env):
    """KiB of RSS per endpoint of a client with `n` endpoints (and of its server), each having
    moved `size` bytes both ways, and the client's RSS before the first (KiB)."""
    code = f"""
import asyncio, os, subprocess, sys
import numpy as np
import ucp
def rss(pid="self"):
    return next(int(l.split()[1]) for l in open(f"/proc/{{pid}}/status") if l.startswith("VmRSS"))
N, SIZE = {n}, {size}
server = '''
import asyncio, sys, numpy as np, ucp
async def main():
    async def h(ep):
        buf = np.empty(SIZE, "u1"); await ep.recv(buf); await ep.send(buf); del buf
        await asyncio.sleep(3600)
    lf = ucp.create_listener(h)
    print(lf.port, flush=True)
    await asyncio.sleep(3600)
asyncio.run(main())
'''.replace("SIZE", str(SIZE))
srv = subprocess.Popen([sys.executable, "-c", server], stdout=subprocess.PIPE, text=True)
port = int(srv.stdout.readline())
async def main():
    ucp.init()
    await asyncio.sleep(0.2)
    base, sbase = rss(), rss(srv.pid)
    eps, msg, back = [], np.ones(SIZE, "u1"), np.empty(SIZE, "u1")
    for _ in range(N):
        ep = await ucp.create_endpoint("127.0.0.1", port)
        await ep.send(msg); await ep.recv(back)
        eps.append(ep)
    await asyncio.sleep(0.5)
    print((rss() - base) / N, (rss(srv.pid) - sbase) / N, base)
    for ep in eps:
        ep.abort()
try:
    asyncio.run(main())
finally:
    srv.kill()
"""
    full = {**os.environ, "UCX_NET_DEVICES": "lo", "UCXPY_IFNAME": "lo", **env}
    out = subprocess.run([sys.executable, "-c", code], env=full, capture_output=True, text=True, timeout=900)
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-2000:])
    c, s, base = out.stdout.split()
    return float(c), float(s), int(base)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sites", default="loopback,netns")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--sizes", type=int, nargs="+", default=[8, 65536, 1 << 20, 16 << 20])
    ap.add_argument("--no-memory", action="store_true")
    args = ap.parse_args()
    like = bd.ucp_env()
    # The candidates are compared with UCX's own behaviour, not with ours.
    base = {k: v for k, v in like.items() if not k.startswith("UCX_TCP_")} | UCX_DEFAULTS
    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, commit {bd.commit()}, {os.cpu_count()} cores, "
          f"TCP congestion control {bd.tcp_congestion_control()}; "
          f"ucx_perftest -t tag_lat -e with {' '.join(f'{k}={v}' for k, v in base.items())} plus each setting")
    names = list(CONFIGS)
    for site_name in args.sites.split(","):
        if site_name == "netns" and os.geteuid() != 0:
            print("\n## netns: skipped (needs root)")
            continue
        site = bd.NetnsSite() if site_name == "netns" else bd.Site("loopback")
        try:
            res = {(c, s): [] for c in names for s in args.sizes}
            for r in range(args.rounds):
                for s in args.sizes:
                    for c in names[r % len(names):] + names[: r % len(names)]:
                        res[(c, s)].append(bd.run_perftest(site, "tag_lat", s, ["-e"], {**base, **CONFIGS[c]}))
        finally:
            site.close()
        print(f"\n## {site_name}: one-way µs (min / median / max), and MiB/s at the median\n")
        print("| size | " + " | ".join(names) + " |")
        print("|---" * (len(names) + 1) + "|")
        for s in args.sizes:
            cells = []
            for c in names:
                v = sorted(res[(c, s)])
                med = statistics.median(v)
                cells.append(f"{v[0]:.1f} / {med:.1f} / {v[-1]:.1f} ({s / 2**20 / (med / 1e6):.0f})")
            print(f"| {bd.fmt_size(s)} | " + " | ".join(cells) + " |")
    if not args.no_memory:
        print("\n## Memory per endpoint (KiB of RSS, client / server), 1 MiB moved both ways on each\n")
        print("| endpoints | " + " | ".join(names) + " |")
        print("|---" * (len(names) + 1) + "|")
        for n in (1, 100, 1000):
            cells = []
            for c in names:
                cm, sm, _ = client_memory(n, 1 << 20, {**UCX_DEFAULTS, **CONFIGS[c]})
                cells.append(f"{cm:.1f} / {sm:.1f}")
            print(f"| {n} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
