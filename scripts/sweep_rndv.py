#!/usr/bin/env python3
"""The sweep behind `import ucp`'s `UCX_RNDV_THRESH`: from what size a message between hosts
goes by UCX's rendezvous (an announcement, the receiver's answer, then the data) instead of
eagerly (the data at once), over UCX's tcp transport with peer error handling, against
UCX-Py's `8192` for every endpoint.

UCX keeps two thresholds: `intra` for endpoints within a host and `inter` for those between
hosts (an endpoint over TCP counts as within the host when the peer's address is one of this
host's; across a pair of network namespaces it is between hosts). Each candidate keeps
`intra:8192` and sets `inter`; `auto` is UCX's own choice from its cost model (about 23 MiB
over TCP on this project's VM, `UCX_PROTO_INFO=y`).

Two patterns, across a pair of network namespaces (scripts/bench_defaults.py's), candidates
alternating within each round:

- ping-pong: `python -m ucp.benchmarks.send_recv` (the receive is posted before the message
  comes), one-way µs;
- header then frame: the sender posts an 8-byte header and the frame together, the receiver
  receives the header and only then posts the frame's receive (as a Dask comm does, so an
  eager frame arrives unexpected and UCX holds a copy of it until then), then answers 1
  byte; round-trip µs.

    python scripts/sweep_rndv.py                 # 3 rounds
    python scripts/sweep_rndv.py --rounds 5 --sizes 65536 1048576

Needs root (`ip netns`). Cells are min / median / max over the rounds.
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

CANDIDATES = ["8192", "intra:8192,inter:64k", "intra:8192,inter:256k", "intra:8192,inter:1m",
              "intra:8192,inter:auto"]


def peer(role, address, port, size, iters):
    """One side of the header-then-frame pattern; the client prints the median round trip (µs)."""
    import numpy as np
    import ucp

    async def serve():
        done = asyncio.get_running_loop().create_future()

        async def handler(ep):
            header, ack = np.empty(8, "u1"), np.ones(1, "u1")
            for _ in range(iters):
                await ep.recv(header)
                frame = np.empty(int(header.view("u8")[0]), "u1")  # a fresh buffer, as Dask's
                await ep.recv(frame)
                await ep.send(ack)
            await ep.close()
            done.set_result(None)

        lf = ucp.create_listener(handler, port=port)
        print("listening", flush=True)
        await done
        lf.close()

    async def client():
        ep = await ucp.create_endpoint(address, port)
        header = np.array([size], dtype="u8").view("u1")
        frame, ack = np.ones(size, "u1"), np.empty(1, "u1")
        times = []
        for _ in range(iters):
            t = time.perf_counter()
            await asyncio.gather(ep.send(header), ep.send(frame))
            await ep.recv(ack)
            times.append(time.perf_counter() - t)
        await ep.close()
        warm = max(1, iters // 10)
        print(f"RESULT {statistics.median(times[warm:]) * 1e6:.2f}", flush=True)

    asyncio.run(serve() if role == "server" else client())


def run_header_frame(site, size, env_extra):
    n, _ = bd.iterations(size)
    n = max(20, n // 2)
    port = bd.free_port()
    env = {**os.environ, **site.env(), **env_extra}
    me = [bd.PY, os.path.abspath(__file__), "--peer"]
    server = subprocess.Popen(site.server([*me, "server", site.address, str(port), str(size), str(n)]), env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        if server.stdout.readline().strip() != "listening":
            raise RuntimeError("the header-then-frame server did not start")
        p = subprocess.run(site.client([*me, "client", site.address, str(port), str(size), str(n)]), env=env,
                           capture_output=True, text=True, timeout=300)
        for line in p.stdout.splitlines():
            if line.startswith("RESULT "):
                return float(line.split()[1])
        raise RuntimeError(f"header-then-frame client: {p.stdout[-1500:]}{p.stderr[-1500:]}")
    finally:
        server.kill()
        server.wait()


def attempt(run, *args, tries=3):
    """`run(*args)`, started again (a new pair of processes on a new port) where a pair failed
    to meet; the failure is printed to stderr."""
    for k in range(tries):
        try:
            return run(*args)
        except RuntimeError as e:
            if k == tries - 1:
                raise
            print(f"sweep_rndv: a pair failed, starting it again: {str(e)[-300:]}", file=sys.stderr)


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--peer":
        role, address, port, size, iters = sys.argv[2:7]
        return peer(role, address, int(port), int(size), int(iters))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--sizes", type=int, nargs="+", default=[16384, 32768, 65536, 262144, 1 << 20])
    ap.add_argument("--candidates", nargs="+", default=CANDIDATES, help="UCX_RNDV_THRESH values")
    args = ap.parse_args()
    candidates = args.candidates
    if os.geteuid() != 0:
        sys.exit("sweep_rndv: needs root (ip netns)")
    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, commit {bd.commit()}, {os.cpu_count()} cores, "
          f"TCP congestion control {bd.tcp_congestion_control()}; ucp's defaults but UCX_RNDV_THRESH")
    patterns = {"ping-pong, one-way µs": lambda site, s, env: bd.run_send_recv(site, "ucp-async", s, env),
                "header then frame, round trip µs": run_header_frame}
    res = {}
    site = bd.NetnsSite()
    try:
        for r in range(args.rounds):
            order = candidates[r % len(candidates):] + candidates[: r % len(candidates)]
            for s in args.sizes:
                for pattern, run in patterns.items():
                    for c in order:
                        res.setdefault((pattern, s, c), []).append(attempt(run, site, s, {"UCX_RNDV_THRESH": c}))
    finally:
        site.close()
    for pattern in patterns:
        print(f"\n## namespaces, {pattern} (min / median / max)\n")
        print("| size | " + " | ".join(f"`{c}`" for c in candidates) + " |")
        print("|---" * (len(candidates) + 1) + "|")
        for s in args.sizes:
            print(f"| {bd.fmt_size(s)} | " + " | ".join(bd.cell(res[(pattern, s, c)]) for c in candidates) + " |")


if __name__ == "__main__":
    main()
