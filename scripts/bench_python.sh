#!/usr/bin/env bash
# Runs our `python -m ucp.benchmarks.send_recv`, UCXX's `python -m ucxx.benchmarks.send_recv`
# (PyPI `ucxx-cu12`, CPU-only, installed into .venv-ucxx on first use by scripts/ucxx-venv.sh)
# and `ucx_perftest -t tag_lat` on the same message sizes, one after the other on 127.0.0.1,
# and prints one-way median latency (half the round trip), round-trip bandwidth and the ratios.
# Expects scripts/setup.sh to have run. A quiet machine is wanted (polling modes spin).
# All three use the same UCX, .venv's (.venv-ucxx pins its libucx-cu12 to it).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PY="$ROOT/.venv/bin/python"
ITERS=${ITERS:-2000}
WARMUP=${WARMUP:-200}
export UCX_NET_DEVICES=lo UCXPY_IFNAME=lo

# .venv-ucxx: UCXX's benchmark, with the same UCX as .venv (created on first use).
# shellcheck source=scripts/ucxx-venv.sh
source "$ROOT/scripts/ucxx-venv.sh"
ucxx_venv

# median latency (µs) and bandwidth (MiB/s) from a send_recv report on stdin
parse() {
    "$PY" -c '
import re, sys
text = sys.stdin.read()
lat = re.search(r"Latency \(median\)\s*\|\s*([\d.]+) ns", text)
bw = re.search(r"Bandwidth \(median\)\s*\|\s*([\d.]+) (\w+)/s", text)
if not lat or not bw:
    sys.exit("no median in report:\n" + text[-2000:])
scale = {"B": 2**-20, "KiB": 2**-10, "kiB": 2**-10, "MiB": 1, "GiB": 2**10}[bw.group(2)]
print(f"{float(lat.group(1)) / 1000:.2f} {float(bw.group(1)) * scale:.1f}")'
}

# Each runner takes extra flags as arguments and the message size from $SIZE.
ours() { "$PY" -m ucp.benchmarks.send_recv -n "$SIZE" --n-iter "$ITERS" --n-warmup-iter "$WARMUP" \
    -s 127.0.0.1 --reuse-alloc --no-detailed-report "$@" 2>/dev/null | parse; }
ucxx() { .venv-ucxx/bin/python -m ucxx.benchmarks.send_recv -l ucxx-async -n "$SIZE" --n-iter "$ITERS" \
    --n-warmup-iter "$WARMUP" -s 127.0.0.1 --reuse-alloc --no-detailed-report "$@" 2>/dev/null | parse; }

UCX_PREFIX="$("$PY" -c 'import libucx, os; print(os.path.dirname(libucx.__file__))')"
# shellcheck source=scripts/perftest.sh
source "$ROOT/scripts/perftest.sh"
# ucx_perftest tag_lat: one-way median (µs) and the bandwidth of its round trips (MiB/s)
perftest_lat() {
    perftest tag_lat "$SIZE" "$ITERS" | awk -v s="$SIZE" '{printf "%.2f %.1f\n", $3, s / ($3 * 1e-6) / 1048576}'
}

# Both Python peers see the same UCX settings. UCX_MM_ERROR_HANDLING (unset: UCX's default, off)
# decides whether their endpoints, which handle peer failure, may use shared memory:
# `UCX_MM_ERROR_HANDLING=y scripts/bench_python.sh` gives the shared-memory rows.
echo "UCX_MM_ERROR_HANDLING=${UCX_MM_ERROR_HANDLING:-unset (off)} for both Python peers"
printf '%-44s %12s %12s\n' "run" "8 B µs" "1 MiB MiB/s"
declare -A LAT BW
run() {
    local name=$1; shift
    read -r l8 _ < <(SIZE=8 "$@")
    read -r _ b1 < <(SIZE=1048576 "$@")
    LAT[$name]=$l8 BW[$name]=$b1
    printf '%-44s %12s %12s\n' "$name" "$l8" "$b1"
}
run "ucp (ours), blocking" ours
ours_polling() { UCXPY_NON_BLOCKING_MODE=1 ours "$@"; }
run "ucp (ours), non-blocking" ours_polling
run "ucxx-async, blocking" ucxx --progress-mode blocking
run "ucxx-async, polling" ucxx --progress-mode polling
run "ucxx-async, thread" ucxx --progress-mode thread
run "ucx_perftest tag_lat" perftest_lat

best_ucxx_lat=$("$PY" -c "print(min(${LAT["ucxx-async, blocking"]}, ${LAT["ucxx-async, polling"]}, ${LAT["ucxx-async, thread"]}))")
best_ucxx_bw=$("$PY" -c "print(max(${BW["ucxx-async, blocking"]}, ${BW["ucxx-async, polling"]}, ${BW["ucxx-async, thread"]}))")
ratio() { "$PY" -c "print(f'{$1:.2f}x')"; }
echo
echo "8 B one-way, ours blocking / best UCXX:        $(ratio "${LAT["ucp (ours), blocking"]}/$best_ucxx_lat")  (target <= 0.5x)"
echo "1 MiB bandwidth, ours blocking / best UCXX:    $(ratio "${BW["ucp (ours), blocking"]}/$best_ucxx_bw")  (target >= 2x)"
echo "1 MiB bandwidth, ours blocking / ucx_perftest: $(ratio "${BW["ucp (ours), blocking"]}/${BW["ucx_perftest tag_lat"]}")  (target >= 0.5x)"
