"""A soak of `ucp` under failures: a server process echoes; client processes connect, send
messages of random sizes whose every byte is checked on both sides, and are SIGKILLed and
replaced at random. Runs for a bounded time, over 127.0.0.1 only, then reports the operations
done, the kills injected, the data lost or corrupted (must be 0), and the server's RSS and open
fds over the run. Exit status 1 if anything was lost or corrupted, a live client failed, or
the server's RSS or fds grew beyond the bounds given.

    python scripts/soak.py --duration 600          # the long form (10 minutes)
    python scripts/soak.py --duration 10           # what the tests run
"""
import argparse
import asyncio
import json
import multiprocessing
import os
import random
import signal
import sys
import time

import numpy as np

SIZES = [0, 1, 100, 8192, 65536, 1 << 20]


def pattern(seed, seq, n):
    """The bytes of message `seq` of client `seed`: reproducible on both sides."""
    return np.random.default_rng((seed << 32) | seq).integers(0, 256, n, dtype=np.uint8)


def resources():
    """(RSS, open fds, bytes of the single-copy path's huge-page staging pool) of this process.
    The pool grows to its limit (`UCXA_SINGLE_COPY_STAGING`, 64 MiB) as messages in flight
    need it and keeps what it made: a bounded cache, not a leak."""
    from ucp import _ucx_async as native

    with open("/proc/self/status") as f:
        rss = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) * 1024
    return rss, len(os.listdir("/proc/self/fd")), native.single_copy_staging_bytes()


def server(q, control):
    """Echoes every message after checking it; reports its counts and resources on request."""
    # Settings for the server alone, e.g. SOAK_SERVER_ENV='{"UCX_LOG_LEVEL": "debug",
    # "UCX_LOG_FILE": "/tmp/soak-server.log"}' to see what UCX did when a run fails.
    os.environ.update(json.loads(os.environ.get("SOAK_SERVER_ENV", "{}")))
    import ucp

    stats = {"echoed": 0, "corrupt": 0, "peer_failures": 0, "single_copy": [0, 0], "samples": []}

    async def handle(ep):
        try:
            while True:
                head = np.empty(3, dtype="u8")  # seed, seq, size
                await ep.recv(head)
                seed, seq, n = (int(x) for x in head)
                buf = np.empty(n, dtype="u1")
                await ep.recv(buf)
                if not np.array_equal(buf, pattern(seed, seq, n)):
                    stats["corrupt"] += 1
                await ep.send(buf)
                stats["echoed"] += 1
        except ucp.exceptions.UCXBaseException:
            stats["peer_failures"] += 1  # a killed client; its endpoint is closed below
        finally:
            # Messages the same-host single-copy path carried, received and sent.
            stats["single_copy"][0] += ep.single_copy[3]
            stats["single_copy"][1] += ep.single_copy[2]
            ep.abort()

    def dump_state():
        """On SIGUSR1 (sent when the server stops answering): what every task waits on."""
        tasks = asyncio.all_tasks()
        loop = asyncio.get_running_loop()
        soonest = min((h.when() for h in loop._scheduled), default=None)
        print(f"soak server: loop time {loop.time():.1f}, {len(loop._scheduled)} timers, soonest {soonest}", file=sys.stderr)
        print(f"soak server: {len(tasks)} tasks, {ucp.core._get_ctx().worker.inflight()} UCX requests in flight", file=sys.stderr)
        for t in tasks:
            chain, coro = [], t.get_coro()
            while coro is not None:  # the whole await chain, not just the task's outer frame
                frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
                if frame is not None:
                    chain.append(f"{frame.f_code.co_name}:{frame.f_lineno}")
                    if frame.f_code.co_name == "wait_for":
                        chain.append(repr({k: frame.f_locals.get(k) for k in ("fut", "waiter", "timeout_handle")}))
                coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
            print(f"  {t.get_name()}: {' -> '.join(chain)}", file=sys.stderr)
        sys.stderr.flush()

    async def main():
        asyncio.get_running_loop().add_signal_handler(signal.SIGUSR1, dump_state)
        lf = ucp.create_listener(handle, ip="127.0.0.1")
        q.put(lf.port)
        while True:
            stats["samples"].append(resources())
            cmd = await asyncio.get_running_loop().run_in_executor(None, control.get)
            if cmd == "stop":
                break
        q.put(json.dumps(stats))
        lf.close()

    asyncio.run(main())


def client(port, seed, counts):
    """Sends messages and checks each echo, until killed; counts each echo in its own slots of
    `counts` (verified at 2 * seed, bad at 2 * seed + 1). Each client has slots of its own, in
    shared memory without a lock: a client killed mid-report can only lose its own count,
    where a shared multiprocessing.Queue would be left locked for every other client."""
    import ucp

    async def main():
        ep = await ucp.create_endpoint("127.0.0.1", port)
        rng = random.Random(seed)
        seq = 0
        while True:
            n = rng.choice(SIZES)
            out = pattern(seed, seq, n)
            back = np.empty(n, dtype="u1")
            await ep.send(np.array([seed, seq, n], dtype="u8"))
            await asyncio.gather(ep.send(out), ep.recv(back))
            counts[2 * seed + (not np.array_equal(back, out))] += 1
            seq += 1

    asyncio.run(main())


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=600, help="seconds to run")
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--kill-every", type=float, default=0.5, help="mean seconds between kills")
    parser.add_argument("--max-rss-growth", type=float, default=0.25, help="allowed growth of the server's RSS")
    parser.add_argument("--max-fd-growth", type=int, default=16, help="allowed growth of the server's open fds")
    parser.add_argument(
        "--allow-client-failures",
        action="store_true",
        help="report clients that failed without being killed, but do not fail for them",
    )
    args = parser.parse_args()
    os.environ.setdefault("UCX_NET_DEVICES", "lo")

    spawn = multiprocessing.get_context("spawn")
    q, control = spawn.Queue(), spawn.Queue()
    max_clients = 1_000_000
    counts = spawn.RawArray("q", 2 * max_clients)
    srv = spawn.Process(target=server, args=(q, control), daemon=True)
    srv.start()
    port = q.get(timeout=60)
    rng = random.Random(1)
    next_seed = 1
    clients = {}

    def start_client():
        nonlocal next_seed
        if next_seed >= max_clients:
            sys.exit(f"soak: more than {max_clients} clients; raise max_clients")
        p = spawn.Process(target=client, args=(port, next_seed, counts), daemon=True)
        p.start()
        clients[next_seed] = p
        next_seed += 1

    for _ in range(args.clients):
        start_client()
    kills = 0
    failed_clients = []
    tallies = np.frombuffer(counts, dtype=np.int64)

    def tally():
        """Echoes verified and bad, over every client so far."""
        used = tallies[: 2 * next_seed]
        return int(used[0::2].sum()), int(used[1::2].sum())

    start = time.monotonic()
    next_kill = start + rng.expovariate(1 / args.kill_every)
    next_sample = start + 1
    while time.monotonic() - start < args.duration:
        now = time.monotonic()
        if now >= next_kill:
            seed = rng.choice(sorted(clients))
            os.kill(clients[seed].pid, signal.SIGKILL)
            clients.pop(seed).join()
            kills += 1
            start_client()
            next_kill = now + rng.expovariate(1 / args.kill_every)
        if now >= next_sample:
            control.put("sample")
            next_sample = now + max(1.0, args.duration / 20)
            verified, bad = tally()
            print(
                f"soak: {now - start:5.0f} s: {verified} echoes verified, {bad} bad, {kills} kills, "
                f"{len(failed_clients)} unprompted client failures",
                flush=True,
            )
        for seed, p in list(clients.items()):
            if not p.is_alive():  # a client that was not killed died: a failure to report
                failed_clients.append((seed, p.exitcode))
                clients.pop(seed)
                start_client()
        time.sleep(0.01)
    for p in clients.values():
        os.kill(p.pid, signal.SIGKILL)
        p.join()
    verified, bad = tally()
    time.sleep(0.5)  # the server notices the last kills
    control.put("stop")
    try:
        stats = json.loads(q.get(timeout=60))
    except Exception:  # the server died or hangs: report what the clients saw
        if srv.is_alive():
            os.kill(srv.pid, signal.SIGUSR1)  # the server prints what its tasks wait on
            time.sleep(2)
        state = f"exited with {srv.exitcode}" if not srv.is_alive() else "still running but not answering"
        srv.kill()
        print(f"soak: {args.duration:.0f} s, {kills} clients killed; {verified} echoes verified, {bad} bad")
        print(f"soak: clients that failed without being killed: {len(failed_clients)}")
        print(f"soak: FAILED: the server {state}")
        sys.exit(1)
    srv.join(10)
    if srv.is_alive():
        srv.kill()

    samples = stats["samples"]
    # The baseline is the second quarter of the run (UCX's and NumPy's pools fill up first),
    # set against the last quarter, by their peaks: two single samples could catch one low and
    # one high (garbage that only the cycle collector frees comes and goes; a failed
    # transfer's reference cycle once made a sawtooth of 15-30 MiB). A leak raises the peaks.
    # The RSS compared leaves out the staging pool (a cache bounded by its limit; see
    # resources()), which the line after the comparison reports.
    q = max(1, len(samples) // 4)
    before, after = samples[q:2 * q] or samples[-1:], samples[-q:]
    (rss0, fd0), (rss1, fd1) = ((max(r - p for r, _, p in w), max(f for _, f, _ in w)) for w in (before, after))
    lost = bad + stats["corrupt"]
    print(f"soak: {args.duration:.0f} s, {args.clients} clients, {kills} clients killed and replaced")
    print(f"soak: {verified} echoes verified by clients, {stats['echoed']} messages checked and echoed by the server")
    print(f"soak: data lost or corrupted: {lost}; clients that failed without being killed: {len(failed_clients)}")
    sc_in, sc_out = stats["single_copy"]
    print(f"soak: by same-host single copy (64 KiB and 1 MiB messages): {sc_in} received, {sc_out} sent by the server")
    print(f"soak: server RSS without the staging pool {rss0 / 2**20:.1f} -> {rss1 / 2**20:.1f} MiB, open fds "
          f"{fd0} -> {fd1} (peaks of the second and of the last quarter)")
    print("soak: RSS MiB over the run: " + " ".join(f"{r / 2**20:.0f}" for r, _, _ in samples))
    print("soak: of which the staging pool: " + " ".join(f"{p / 2**20:.0f}" for _, _, p in samples))
    problems = []
    if lost:
        problems.append(f"{lost} messages lost or corrupted")
    if failed_clients and not args.allow_client_failures:
        problems.append(f"clients failed unprompted: {failed_clients[:5]}")
    if verified == 0:
        problems.append("no echo was verified: the soak tested nothing")
    if rss1 > rss0 * (1 + args.max_rss_growth):
        problems.append(f"server RSS grew by more than {args.max_rss_growth:.0%}")
    if fd1 > fd0 + args.max_fd_growth:
        problems.append(f"server fds grew by more than {args.max_fd_growth}")
    if problems:
        print("soak: FAILED: " + "; ".join(problems))
        sys.exit(1)
    print("soak: passed")


if __name__ == "__main__":
    main()
