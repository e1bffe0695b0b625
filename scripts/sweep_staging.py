#!/usr/bin/env python3
"""The measurement behind `UCXA_SINGLE_COPY_STAGING` (the bytes of huge-page staging blocks a
process may hold for same-host single-copy sends), for each limit in alternating rounds (the
order reversed every round), on two workloads whose messages sit on 4 KiB pages (a plain `Vec`,
which staging copies onto huge pages), both with peer error handling (the library's default):
- `alltoallv` (examples/alltoall.rs --small-pages) on 2 and 4 ranks at 1 MiB and 16 MiB per
  pair: the time of one call;
- a stream of 16 MiB messages, 4 in flight (examples/bench.rs -t tag_bw -w 4, with UCX's
  shared-memory transports left out as peer error handling leaves them out by default, since
  the example turns UCX_MM_ERROR_HANDLING on): the time per message.
Prints per workload and limit the time (min / median / max of the rounds), the per-round ratio
of the run without staging (limit 0) to this one (above 1: faster), and the largest process's
peak resident memory (median of the rounds).

Run from the repository root after scripts/setup.sh:

    cargo build --release -p ucx-async --example alltoall --example bench
    python scripts/sweep_staging.py --rounds 7
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULT = re.compile(r"RESULT impl=ucx-async .*?size=(\d+) median_us=([0-9.]+)")
STREAM = re.compile(r"RESULT test=tag_bw .*?MiBps=([0-9.]+)")
MIB = 1 << 20


def measure(cmd, env, pattern):
    """Runs `cmd`: the first group of `pattern` in its output, and the peak RSS (MiB) of the
    largest process among it and the children it waited for."""
    with tempfile.TemporaryFile() as err:
        p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=err, text=True)
        out = p.stdout.read()
        # wait4: a launcher's usage includes the processes it waited for; ru_maxrss is the
        # largest of them (KiB).
        _, status, usage = os.wait4(p.pid, 0)
        code = os.waitstatus_to_exitcode(status)
        m = pattern.search(out)
        if code != 0 or not m:
            err.seek(0)
            sys.exit(f"no result (exit {code}): {' '.join(cmd)}\n{err.read().decode()[-2000:]}")
    return float(m[m.re.groups]), usage.ru_maxrss / 1024


def run(a, workload, limit):
    """One run of `workload` ((ranks, size) or ("stream", size)): µs per call or message, and
    the peak RSS in MiB."""
    env = dict(os.environ, UCXA_ERROR_HANDLING="peer", UCXA_SINGLE_COPY_STAGING=str(limit),
               UCX_NET_DEVICES=os.environ.get("UCX_NET_DEVICES", "lo"))
    kind, size = workload
    if kind == "stream":
        env["UCX_TLS"] = "^sysv,posix,cma"
        cmd = [a.bench_bin, "-t", "tag_bw", "-w", "4", "-n", str(a.stream_iters), "-s", str(size)]
        mibps, rss = measure(cmd, env, STREAM)
        return size / MIB / mibps * 1e6, rss
    cmd = [a.rust_bin, "--ranks", str(kind), "--min-size", str(size), "--max-size", str(size),
           "--iters", str(a.iters if size <= 4 * MIB else 4 * a.big_iters), "--small-pages"]
    return measure(cmd, env, RESULT)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--limits", type=int, nargs="+", default=[0, 8, 16, 32, 64, 128], help="MiB")
    ap.add_argument("--ranks", type=int, nargs="*", default=[2, 4])
    ap.add_argument("--sizes", type=int, nargs="*", default=[MIB, 16 * MIB], help="bytes per pair")
    ap.add_argument("--iters", type=int, default=200, help="timed calls per run up to 4 MiB")
    ap.add_argument("--big-iters", type=int, default=20, help="timed calls per run above 4 MiB")
    ap.add_argument("--stream-sizes", type=int, nargs="*", default=[16 * MIB], help="bytes per message")
    ap.add_argument("--stream-iters", type=int, default=60, help="messages per stream run")
    ap.add_argument("--rust-bin", default=str(ROOT / "target/release/examples/alltoall"))
    ap.add_argument("--bench-bin", default=str(ROOT / "target/release/examples/bench"))
    a = ap.parse_args()
    if a.rounds < 1 or 0 not in a.limits or any(x < 0 for x in a.limits):
        ap.error("--rounds at least 1; --limits must include 0 (the baseline) and be non-negative")
    print(f"--small-pages / Vec buffers, UCXA_ERROR_HANDLING=peer, {a.rounds} rounds; limit in MiB; "
          "ratio: the time without staging / this limit's, per round")
    print("| workload | size | limit | µs min / median / max | ratio min / median / max | peak RSS MiB |")
    print("|---|---|---|---|---|---|")
    workloads = [(r, s) for r in a.ranks for s in a.sizes] + [("stream", s) for s in a.stream_sizes]
    for w in workloads:
        name = "stream, 4 in flight" if w[0] == "stream" else f"alltoallv, {w[0]} ranks"
        us = {x: [] for x in a.limits}
        rss = {x: [] for x in a.limits}
        for k in range(a.rounds):
            for x in a.limits if k % 2 == 0 else a.limits[::-1]:
                t, r = run(a, w, x * MIB)
                us[x].append(t)
                rss[x].append(r)
            print(f"[sweep_staging] {name} {w[1]} B round {k + 1}: "
                  + ", ".join(f"{x} MiB {us[x][-1]:.0f} µs" for x in a.limits), file=sys.stderr, flush=True)
        for x in a.limits:
            t = sorted(us[x])
            ratios = sorted(b / o for b, o in zip(us[0], us[x]))
            print(f"| {name} | {w[1] / MIB:g} MiB | {x} | {t[0]:.0f} / {statistics.median(t):.0f} / {t[-1]:.0f} | "
                  f"{ratios[0]:.2f} / {statistics.median(ratios):.2f} / {ratios[-1]:.2f} | "
                  f"{statistics.median(rss[x]):.0f} |", flush=True)


if __name__ == "__main__":
    main()
