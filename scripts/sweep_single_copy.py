#!/usr/bin/env python3
"""The measurement behind `UCXA_SINGLE_COPY_MIN` (the smallest message sent by same-host
single copy): `ucp`'s ping-pong (`python -m ucp.benchmarks.send_recv`, defaults otherwise)
between two processes on 127.0.0.1 at sizes around it, with the path off for every size
(`UCXA_SINGLE_COPY_MIN` = 2^40: UCX's TCP with the library's segment sizes) and on for every
size (4096), in alternating rounds. Prints min / median / max one-way µs and the ratio of the
medians (above 1: single copy is faster).

    python scripts/sweep_single_copy.py --rounds 4
"""
import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_defaults as bd  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--sizes", type=int, nargs="+", default=[16384, 32768, 65536, 131072, 262144])
    args = ap.parse_args()
    site = bd.Site("loopback")
    ways = {"TCP": str(1 << 40), "single copy": "4096"}
    res = {(w, s): [] for w in ways for s in args.sizes}
    for r in range(args.rounds):
        for s in args.sizes:
            for w in list(ways) if r % 2 == 0 else list(ways)[::-1]:
                os.environ["UCXA_SINGLE_COPY_MIN"] = ways[w]
                res[(w, s)].append(bd.run_send_recv(site, "ucp-async", s))
    print("| size | TCP µs | single copy µs | TCP / single copy |")
    print("|---|---|---|---|")
    for s in args.sizes:
        t, c = sorted(res[("TCP", s)]), sorted(res[("single copy", s)])
        print(f"| {bd.fmt_size(s)} | {t[0]:.1f} / {statistics.median(t):.1f} / {t[-1]:.1f} | "
              f"{c[0]:.1f} / {statistics.median(c):.1f} / {c[-1]:.1f} | {statistics.median(t) / statistics.median(c):.2f} |")


if __name__ == "__main__":
    main()
