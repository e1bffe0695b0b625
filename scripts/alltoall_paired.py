"""alltoallv, ours against Open MPI, in alternating rounds: a verdict that holds on a noisy VM.

One run of each side (scripts/bench_alltoall.sh) compares two moments of a machine whose speed
moves by a third from minute to minute here. This script runs the sides one after another,
--rounds times, in the order A B / B A / A B ..., so that each round's ratio compares runs a few
seconds apart, and reports per size and side the median time over rounds, and the per-round
ratio (MPI's time / ours: above 1.0, ours is faster) as min / median / max with the rounds won.

Sides (ours without peer error handling unless --error-handling peer, the library's default;
Open MPI's never have it, so UCX may use shared memory and CMA):
  rust    examples/alltoall.rs (--mode, default event: sleeping on the wakeup fd; with --bare it
          also times a bare exchange of the same parts on alternate calls, a last column)
  window  examples/alltoall.rs --window-only: SharedWindow::alltoallv, the all-to-all
          through shared-memory windows (slots of the part size)
  python  examples/python/alltoall.py under python -m ucp.launch
  python-window  the same with --window (ucp.collective.SharedWindow)
  mpi-ucx the same under Open MPI's UCX layer (`--mca pml ucx`) on the UCX library ucp loads
          (--ucx-lib): Open MPI's Alltoallv on our transport, the like-for-like peer, which
          tells what UCX itself costs against Open MPI's own shared memory
  mpi     scripts/alltoallv_mpi.py (mpi4py, Open MPI's defaults: shared memory, polling), the
          side every other is compared with, unless --against mpi-ucx

Run from the repository root after scripts/setup.sh, with .venv-mpi made as
scripts/bench_alltoall.sh makes it:
  .venv/bin/python scripts/alltoall_paired.py --ranks 4 --sizes 1024 1048576 --rounds 5
Elsewhere (scripts/gpu_alltoall_cores.sh: the GPU machine, where nothing is built), --rust-bin,
--python, --mpirun and --mpi-python name what to run instead.
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULT = re.compile(r"RESULT impl=(\S+) .*?ranks=(\d+) size=(\d+) median_us=([0-9.]+)")


def commands(a, side, size):
    """The command line of one side's run at one size."""
    sizes = ["--min-size", str(size), "--max-size", str(size), "--iters", str(a.iters)]
    if side in ("rust", "window"):
        extra = ["--window-only"] if side == "window" else ["--bare"] if a.bare else []
        return [a.rust_bin, "--ranks", str(a.ranks), "--mode", a.mode, *sizes, *extra]
    if side in ("python", "python-window"):
        launch = [a.python, "-m", "ucp.launch", "-n", str(a.ranks)]
        return [*launch, str(ROOT / "examples/python/alltoall.py"), *sizes, *(["--window"] if side == "python-window" else [])]
    mpi = [a.mpirun, "--allow-run-as-root", "--oversubscribe", "-n", str(a.ranks)]
    if side == "mpi-ucx":
        # Open MPI's UCX layer accepts only network devices unless told otherwise; the library
        # path puts ucp's UCX before the one Open MPI's wheel carries (its RUNPATH yields to it).
        mpi += ["--mca", "pml", "ucx", "--mca", "pml_ucx_tls", "any", "--mca", "pml_ucx_devices", "any",
                "-x", "LD_LIBRARY_PATH"]
    return [*mpi, a.mpi_python, str(ROOT / "scripts/alltoallv_mpi.py"), str(size), str(a.iters), str(size)]


def ucx_lib(a):
    """The directory of the UCX libraries ucp loads (--ucx-lib, else the libucx wheel's)."""
    if not a.ucx_lib:
        where = "import libucx, os; print(os.path.join(os.path.dirname(libucx.__file__), 'lib'))"
        a.ucx_lib = subprocess.run([a.python, "-c", where], capture_output=True, text=True, check=True).stdout.strip()
    return a.ucx_lib


def run(a, side, size):
    """One run: the median µs per call it reports for `size`, and the bare exchange's (the Rust
    side under --bare; else None)."""
    env = dict(os.environ, UCXA_ERROR_HANDLING=a.error_handling, UCX_NET_DEVICES=os.environ.get("UCX_NET_DEVICES", "lo"))
    if side == "mpi-ucx":
        env["LD_LIBRARY_PATH"] = os.pathsep.join(filter(None, [ucx_lib(a), env.get("LD_LIBRARY_PATH")]))
    cmd = commands(a, side, size)
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    found = {m[1]: float(m[4]) for m in map(RESULT.search, p.stdout.splitlines()) if m and int(m[3]) == size}
    bare = found.pop("bare", None)
    window = found.pop("window", None)
    if side == "window":
        found = {"window": window} if window is not None else {}
    if found:
        return next(iter(found.values())), bare
    sys.exit(f"{side}: no result for {size} bytes (exit {p.returncode}): {' '.join(cmd)}\n{p.stderr[-2000:]}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--sizes", type=int, nargs="+", default=[1024, 1 << 20], help="bytes per pair")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--iters", type=int, default=200, help="timed calls per run (a quarter above 4 MiB)")
    ap.add_argument("--sides", nargs="+", default=["rust", "python"], choices=["rust", "window", "python", "python-window", "mpi-ucx"])
    ap.add_argument("--mode", default="event", choices=["event", "polling", "adaptive"], help="the Rust side's")
    ap.add_argument("--rust-bin", default=str(ROOT / "target/release/examples/alltoall"))
    ap.add_argument("--python", default=str(ROOT / ".venv/bin/python"), help="the Python that imports ucp")
    ap.add_argument("--mpirun", default=str(ROOT / ".venv-mpi/bin/mpirun"))
    ap.add_argument("--mpi-python", default=str(ROOT / ".venv-mpi/bin/python"), help="the Python with mpi4py")
    ap.add_argument("--bare", action="store_true",
                    help="the Rust side also times a bare exchange on alternate calls (examples/alltoall.rs --bare)")
    ap.add_argument("--against", default="mpi", choices=["mpi", "mpi-ucx"],
                    help="the side each is compared with (mpi-ucx: the like-for-like row)")
    ap.add_argument("--error-handling", default="none", choices=["none", "peer"],
                    help="our sides' UCXA_ERROR_HANDLING (peer: the library's default, which keeps UCX's "
                         "shared-memory transports off; Open MPI's sides never have it)")
    ap.add_argument("--ucx-lib", help="the UCX libraries for mpi-ucx (default: those of --python's libucx)")
    a = ap.parse_args()
    if a.rounds < 1 or a.ranks < 1 or a.iters < 1 or any(s < 1 for s in a.sizes):
        ap.error("--rounds, --ranks, --iters and every size must be at least 1")
    if a.against in a.sides:
        ap.error(f"--sides names {a.against}, the side the others are compared with")
    ref = "MPI" if a.against == "mpi" else "MPI over UCX"
    bare_col = " bare µs (Rust's run) |" if a.bare else ""
    print(f"{a.ranks} ranks, {a.rounds} rounds of {a.iters} calls, UCXA_ERROR_HANDLING={a.error_handling}, "
          f"Rust --mode {a.mode}; {ref}'s time / ours per round (> 1: ours faster)")
    print(f"| size per pair | side | ours µs (median of rounds) | {ref} µs | ratio min / median / max | rounds won |"
          + bare_col)
    print("|---|---|---|---|---|---|" + ("---|" if a.bare else ""))
    for size in a.sizes:
        for side in a.sides:
            ours, theirs, bare_us = [], [], []
            for k in range(a.rounds):
                order = [side, a.against] if k % 2 == 0 else [a.against, side]
                for s in order:
                    us, bare_run = run(a, s, size)
                    (ours if s == side else theirs).append(us)
                    if bare_run is not None:
                        bare_us.append(bare_run)
                bare = f", bare {bare_us[-1]} µs" if bare_us else ""
                print(f"[alltoall_paired] {size} B {side} round {k + 1}: ours {ours[-1]} µs, {ref} {theirs[-1]} µs{bare}",
                      file=sys.stderr, flush=True)
            ratios = sorted(m / o for o, m in zip(ours, theirs))
            won = sum(r >= 1.0 for r in ratios)
            bare_cell = (f" {statistics.median(bare_us):.1f} |" if bare_us else " |") if a.bare else ""
            print(f"| {size} | {side} | {statistics.median(ours):.1f} | {statistics.median(theirs):.1f} | "
                  f"{ratios[0]:.2f} / {statistics.median(ratios):.2f} / {ratios[-1]:.2f} | {won} of {a.rounds} |"
                  + bare_cell, flush=True)


if __name__ == "__main__":
    main()
