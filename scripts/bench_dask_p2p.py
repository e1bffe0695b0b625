#!/usr/bin/env python3
"""Dask's peer-to-peer merge and shuffle on a 2-worker cluster, `ucxa` against `tcp`, in
alternating rounds: wall clock per workload and protocol, the ratio (tcp's time / ucxa's; above
1, ucxa is faster), the bandwidth of the transfers the workers logged, and what the p2p
comms' messages took (distributed's own metrics: messages, their size, and the time from each
send to the receiver's reply).

Two shapes of cluster:
- `local` (default): a `LocalCluster` of 2 worker processes with 1 thread each, on 127.0.0.1.
- `netns`: the scheduler and each worker in a network namespace of its own, joined through a
  bridge in a fourth (`ucxa-dask-br`, addresses 10.79.0.1 to .3): no shared memory between
  them that UCX or the same-host single-copy path could use (each also runs in its own pid and
  IPC namespace), a real TCP stack on every link, the shape of a cluster of three hosts. Needs
  root and iproute2; namespaces made here are removed on exit.

The tables are the same size for both protocols: `--rows` rows of (key, a) merged with
`--rows // 4` rows of (key, b) on `key` (`shuffle_method="p2p"`), and the left table shuffled
on `key` (`dask.dataframe.shuffle`, p2p). Each workload's result is checked (its length, and
a checksum of a column) against the same computed with `tcp`.

    python scripts/bench_dask_p2p.py --rows 8000000 --rounds 3 [--runs 3] [--metrics]
    python scripts/bench_dask_p2p.py --cluster netns --rows 2000000 --rounds 3
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NS_BR = "ucxa-dask-br"
NS = {"scheduler": ("ucxa-dask-s", "10.79.0.1"), "w0": ("ucxa-dask-w0", "10.79.0.2"), "w1": ("ucxa-dask-w1", "10.79.0.3")}


def workloads(client, rows, parts, runs=3):
    """Runs the merge and the shuffle `runs` times on `client`; returns {name: (median
    seconds, check)}."""
    import statistics

    times, checks = {}, {}
    for _ in range(runs):
        for name, (t, check) in workloads_once(client, rows, parts).items():
            times.setdefault(name, []).append(t)
            checks[name] = check
    return {name: (statistics.median(times[name]), checks[name]) for name in times}


def cpu_seconds(client):
    """CPU seconds (user + system) the workers and the scheduler have used so far."""
    def used(dask_worker=None, dask_scheduler=None):
        import resource

        r = resource.getrusage(resource.RUSAGE_SELF)
        return r.ru_utime + r.ru_stime

    return sum(client.run(used).values()) + client.run_on_scheduler(used)


def metrics(client):
    """Seconds the workers spent per (context, activity) in the workloads, the largest first
    (distributed's fine performance metrics)."""
    def collect(dask_scheduler):
        out = {}
        for key, v in dask_scheduler.cumulative_worker_metrics.items():
            if isinstance(key, tuple) and key[-1] == "seconds":
                name = " / ".join(str(k) for k in key[:-1] if not str(k).startswith("execute-"))
                out[name] = out.get(name, 0) + v
        return out

    return client.run_on_scheduler(collect)


def p2p_messages(client):
    """What the workers' p2p comms sent (distributed's fine metrics, cumulative over the
    cluster's life): messages, bytes, and the seconds the sends took from posting to the
    receiver's reply, summed over the concurrent sends."""
    def collect(dask_scheduler):
        m = dask_scheduler.cumulative_worker_metrics
        return {
            "count": m.get(("p2p", "background-comms", "process", "count"), 0),
            "bytes": m.get(("p2p", "background-comms", "process", "bytes"), 0),
            "send_s": m.get(("p2p", "background-comms", "send", "seconds"), 0.0),
        }

    return client.run_on_scheduler(collect)


def workloads_once(client, rows, parts):
    """Runs the merge and the shuffle once on `client`; returns {name: (seconds, check)}."""
    import dask
    import dask.dataframe as dd
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(0)
    left = dd.from_pandas(pd.DataFrame({"key": rng.integers(0, rows // 4, rows), "a": rng.random(rows)}), npartitions=parts)
    right = dd.from_pandas(
        pd.DataFrame({"key": np.arange(rows // 4), "b": rng.random(rows // 4)}), npartitions=max(1, parts // 4)
    )
    left, right = client.persist([left, right])
    from distributed import wait

    wait([left, right])
    out = {}
    with dask.config.set({"dataframe.shuffle.method": "p2p"}):
        t0 = time.perf_counter()
        merged = left.merge(right, on="key", shuffle_method="p2p")
        n, s = client.compute([merged.shape[0], merged.b.sum()], sync=True)
        out["merge"] = (time.perf_counter() - t0, (int(n), float(s)))
        t0 = time.perf_counter()
        shuffled = left.shuffle("key")
        n, s = client.compute([shuffled.shape[0], shuffled.a.sum()], sync=True)
        out["shuffle"] = (time.perf_counter() - t0, (int(n), float(s)))
    return out


def transfers(client):
    """MiB/s of every logged incoming transfer over 1 MiB, all workers."""
    def logged(dask_worker):
        return [(t["total"], t["bandwidth"]) for t in dask_worker.transfer_incoming_log]

    rates = []
    for log in client.run(logged).values():
        rates += [bw / 2**20 for total, bw in log if total > 1 << 20]
    return rates


def run_local(protocol, rows, parts, runs):
    """One cluster, one run of the workloads: a child process prints JSON."""
    code = f"""
import json, sys
sys.path.insert(0, {os.path.join(ROOT, 'scripts')!r})
from bench_dask_p2p import workloads, transfers, metrics, cpu_seconds, p2p_messages
from distributed import Client, LocalCluster
if {protocol!r} == "ucxa":
    import ucp.dask_comm  # registers ucxa://
with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, protocol={protocol!r},
                  host="127.0.0.1", dashboard_address=None) as cluster, Client(cluster) as client:
    cpu = cpu_seconds(client)
    out = workloads(client, {rows}, {parts}, {runs})
    cpu = cpu_seconds(client) - cpu
    print(json.dumps({{"times": out, "transfers": transfers(client), "metrics": metrics(client), "cpu": cpu,
                      "p2p": p2p_messages(client)}}))
"""
    env = {**os.environ, "UCX_NET_DEVICES": "lo", "UCXPY_IFNAME": "lo"}
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=1800)
    if p.returncode != 0:
        raise RuntimeError(f"{protocol} cluster failed:\n{p.stderr[-3000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


class Netns:
    """Scheduler and workers in namespaces of their own, bridged."""

    def __init__(self):
        self.close()
        run = lambda *a: subprocess.run(a, check=True, capture_output=True)  # noqa: E731
        run("ip", "netns", "add", NS_BR)
        run("ip", "-n", NS_BR, "link", "add", "br0", "type", "bridge")
        run("ip", "-n", NS_BR, "link", "set", "br0", "up")
        for i, (name, (ns, addr)) in enumerate(NS.items()):
            run("ip", "netns", "add", ns)
            run("ip", "link", "add", f"ud{i}", "netns", ns, "type", "veth", "peer", "name", f"ub{i}", "netns", NS_BR)
            run("ip", "-n", NS_BR, "link", "set", f"ub{i}", "master", "br0")
            run("ip", "-n", NS_BR, "link", "set", f"ub{i}", "up")
            run("ip", "-n", ns, "addr", "add", f"{addr}/24", "dev", f"ud{i}")
            run("ip", "-n", ns, "link", "set", f"ud{i}", "up")
            run("ip", "-n", ns, "link", "set", "lo", "up")
        time.sleep(1)

    @staticmethod
    def exec(name, cmd):
        # A pid and IPC namespace of its own too: nothing on the machine is shared but the
        # network between the namespaces. --kill-child: killing unshare ends what it forked.
        return ["ip", "netns", "exec", NS[name][0], "unshare", "--pid", "--ipc", "--fork", "--kill-child", "--mount-proc", *cmd]

    def close(self):
        for ns, _ in NS.values():
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        subprocess.run(["ip", "netns", "del", NS_BR], capture_output=True)


def run_netns(net, protocol, rows, parts, runs, port=8786):
    """Scheduler and two workers in their namespaces, the client beside the scheduler."""
    s_addr = f"{protocol}://{NS['scheduler'][1]}:{port}"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("UCX_NET_DEVICES", "UCXPY_IFNAME"))}
    pre = [sys.executable, "-c", "import ucp.dask_comm, sys; from distributed.cli.{0} import main; sys.argv[0] = '{0}'; main()"]
    procs = []
    try:
        procs.append(subprocess.Popen(
            Netns.exec("scheduler", [pre[0], pre[1], pre[2].format("dask_scheduler"), "--protocol", protocol,
                                     "--host", NS["scheduler"][1], "--port", str(port), "--no-dashboard"]),
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        time.sleep(3)
        for w in ("w0", "w1"):
            procs.append(subprocess.Popen(
                Netns.exec(w, [pre[0], pre[1], pre[2].format("dask_worker"), s_addr, "--nthreads", "1", "--nworkers", "1",
                               "--host", NS[w][1], "--no-dashboard", "--memory-limit", "0"]),
                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        code = f"""
import json, sys
sys.path.insert(0, {os.path.join(ROOT, 'scripts')!r})
import ucp.dask_comm
from bench_dask_p2p import workloads, transfers, metrics, cpu_seconds, p2p_messages
from distributed import Client
with Client({s_addr!r}, timeout=60) as client:
    client.wait_for_workers(2, timeout=120)
    cpu = cpu_seconds(client)
    out = workloads(client, {rows}, {parts}, {runs})
    cpu = cpu_seconds(client) - cpu
    print(json.dumps({{"times": out, "transfers": transfers(client), "metrics": metrics(client), "cpu": cpu,
                      "p2p": p2p_messages(client)}}))
    client.shutdown()
"""
        p = subprocess.run(Netns.exec("scheduler", [sys.executable, "-c", code]), capture_output=True, text=True,
                           env=env, timeout=1800)
        if p.returncode != 0:
            raise RuntimeError(f"{protocol} netns cluster failed:\n{p.stderr[-3000:]}")
        return json.loads(p.stdout.strip().splitlines()[-1])
    finally:
        for p in procs:
            p.kill()
            p.wait()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=8_000_000)
    ap.add_argument("--parts", type=int, default=16, help="partitions of the left table")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--runs", type=int, default=3, help="runs of each workload per cluster (its median counts)")
    ap.add_argument("--metrics", action="store_true", help="print where the workers' time went, per protocol")
    ap.add_argument("--cluster", choices=("local", "netns"), default="local")
    ap.add_argument("--protocols", default="tcp,ucxa")
    args = ap.parse_args()
    protocols = args.protocols.split(",")
    net = Netns() if args.cluster == "netns" else None
    try:
        results = {p: [] for p in protocols}
        for r in range(args.rounds):
            for proto in protocols[r % len(protocols):] + protocols[: r % len(protocols)]:
                res = (run_netns(net, proto, args.rows, args.parts, args.runs) if net
                       else run_local(proto, args.rows, args.parts, args.runs))
                results[proto].append(res)
                print(f"round {r}: {proto}: " + ", ".join(f"{k} {v[0]:.2f} s" for k, v in res["times"].items()),
                      flush=True)
    finally:
        if net:
            net.close()
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    print(f"\n# {time.strftime('%Y-%m-%d', time.gmtime())}, commit {commit}, {os.cpu_count()} cores, cluster {args.cluster}, "
          f"{args.rows} x {args.rows // 4} rows, {args.rounds} rounds alternating, each the median of {args.runs} runs")
    base = protocols[0]
    for w in ("merge", "shuffle"):
        checks = [tuple(x["times"][w][1]) for p in protocols for x in results[p]]
        n0, s0 = checks[0]
        # The same rows, and the same column sum up to the order floats were added in.
        same = all(n == n0 and abs(s - s0) <= 1e-9 * abs(s0) for n, s in checks)
        print(f"\n## {w} (results {'identical' if same else 'DIFFER: ' + str(checks)})\n")
        print("| protocol | wall clock s (min / median / max) | " + f"{base} / it, per round | transfers > 1 MiB, MiB/s median |")
        print("|---|---|---|---|")
        for p in protocols:
            t = [x["times"][w][0] for x in results[p]]
            ratios = ", ".join(f"{a['times'][w][0] / b['times'][w][0]:.2f}" for a, b in zip(results[base], results[p]))
            rates = [bw for x in results[p] for bw in x["transfers"]]
            rate = f"{statistics.median(rates):.0f}" if rates else "-"
            print(f"| {p} | {min(t):.2f} / {statistics.median(t):.2f} / {max(t):.2f} | {ratios} | {rate} |")
        if not same:
            sys.exit(1)
    print("\n## The p2p comms' messages per round (both workloads, all runs; distributed's metrics)\n")
    print("Per message: from the send to the receiver's reply, which includes the receiver taking the "
          "shards in; MiB/s: bytes over the sends' summed time.\n")
    print("| protocol | messages | mean size KiB | ms per message | MiB/s per message |")
    print("|---|---|---|---|---|")
    for p in protocols:
        m = [x["p2p"] for x in results[p]]
        count = ", ".join(str(x["count"]) for x in m)
        size = ", ".join(f"{x['bytes'] / max(x['count'], 1) / 1024:.0f}" for x in m)
        ms = ", ".join(f"{1000 * x['send_s'] / max(x['count'], 1):.1f}" for x in m)
        rate = ", ".join(f"{x['bytes'] / 2**20 / x['send_s'] if x['send_s'] else 0:.0f}" for x in m)
        print(f"| {p} | {count} | {size} | {ms} | {rate} |")
    print("\n## CPU seconds the cluster used per round (workers and scheduler, all runs of both workloads)\n")
    for p in protocols:
        print(f"- {p}: " + ", ".join(f"{x['cpu']:.1f}" for x in results[p]))
    if args.metrics:
        print("\n## Where the workers' time went (seconds, all runs of the last round, largest first)\n")
        for p in protocols:
            top = sorted(results[p][-1]["metrics"].items(), key=lambda kv: -kv[1])[:12]
            print(f"- {p}: " + "; ".join(f"{k} {v:.2f}" for k, v in top))


if __name__ == "__main__":
    main()
