#!/usr/bin/env bash
# Runs our `python -m ucp.benchmarks.send_recv`, UCXX's `python -m ucxx.benchmarks.send_recv`
# (PyPI `ucxx-cu12`, CPU-only, installed into .venv-ucxx on first use by scripts/ucxx-venv.sh)
# and `ucx_perftest -t tag_lat` on the same message sizes, one after the other on 127.0.0.1,
# and prints one-way median latency (half the round trip), round-trip bandwidth and the ratios.
# perftest runs twice: as it comes (no peer error handling: shared memory) and with `-e` and
# the UCX_* variables `import ucp` sets, the floor under the Python peers' small messages.
# ROUNDS (default 3) rounds, each running every side once, the order rotated round by round; a
# cell is min / median / max over the rounds, and a ratio is taken within each round (this
# machine's speed moves between minutes, so only sides measured side by side compare).
# Expects scripts/setup.sh to have run. A quiet machine is wanted (polling modes spin).
# All three use the same UCX, .venv's (.venv-ucxx pins its libucx-cu12 to it).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PY="$ROOT/.venv/bin/python"
ITERS=${ITERS:-2000}
ROUNDS=${ROUNDS:-3}
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
    perftest tag_lat "$SIZE" "$ITERS" "$@" | awk -v s="$SIZE" '{printf "%.2f %.1f\n", $3, s / ($3 * 1e-6) / 1048576}'
}
# The same with peer error handling (-e) and the UCX_* variables `import ucp` sets: UCX's own
# ping-pong on the transport the Python peers' small messages take (TCP), the floor under them.
UCP_ENV="$(ucp_env "$PY")"
# shellcheck disable=SC2086 # a list of NAME=VALUE words
perftest_lat_e() { (if [ -n "$UCP_ENV" ]; then export $UCP_ENV; fi; perftest_lat -e); }

# Both Python peers see the same UCX settings. UCX_MM_ERROR_HANDLING (unset: UCX's default, off)
# decides whether their endpoints, which handle peer failure, may use shared memory:
# `UCX_MM_ERROR_HANDLING=y scripts/bench_python.sh` gives the shared-memory rows.
echo "UCX_MM_ERROR_HANDLING=${UCX_MM_ERROR_HANDLING:-unset (off)} for both Python peers"
ours_polling() { UCXPY_NON_BLOCKING_MODE=1 ours "$@"; }
NAMES=("ucp (ours), blocking" "ucp (ours), non-blocking" "ucxx-async, blocking" "ucxx-async, polling"
       "ucxx-async, thread" "ucx_perftest tag_lat" "ucx_perftest tag_lat -e, ucp's UCX_*")
RUNNERS=("ours" "ours_polling" "ucxx --progress-mode blocking" "ucxx --progress-mode polling"
         "ucxx --progress-mode thread" "perftest_lat" "perftest_lat_e")
RESULTS=$(mktemp)
trap 'rm -f "$RESULTS"' EXIT
n=${#NAMES[@]}
for ((r = 0; r < ROUNDS; r++)); do
    for ((k = 0; k < n; k++)); do
        i=$(( (k + r) % n ))
        read -r l8 _ < <(SIZE=8 ${RUNNERS[$i]})
        read -r _ b1 < <(SIZE=1048576 ${RUNNERS[$i]})
        printf '%s\t%s\t%s\t%s\n' "$r" "${NAMES[$i]}" "$l8" "$b1" >>"$RESULTS"
        printf 'round %d: %-28s 8 B %8s us  1 MiB %10s MiB/s\n' "$((r + 1))" "${NAMES[$i]}" "$l8" "$b1"
    done
done

# The table (min / median / max over rounds) and the ratios, each taken within its round.
"$PY" - "$RESULTS" "$ROUNDS" <<'PYEOF'
import statistics, sys
rows = [line.rstrip("\n").split("\t") for line in open(sys.argv[1])]
rounds = int(sys.argv[2])
lat, bw, names = {}, {}, []
for r, name, l8, b1 in rows:
    if name not in names:
        names.append(name)
    lat[name, int(r)], bw[name, int(r)] = float(l8), float(b1)
def mmm(xs, fmt):
    return " / ".join(fmt.format(x) for x in (min(xs), statistics.median(xs), max(xs)))
print(f"\n{rounds} rounds, min / median / max\n")
print(f"| run | 8 B one-way (us) | 1 MiB (MiB/s) |\n|---|---|---|")
for name in names:
    print(f"| {name} | {mmm([lat[name, r] for r in range(rounds)], '{:.2f}')} "
          f"| {mmm([bw[name, r] for r in range(rounds)], '{:.0f}')} |")
ucxx = [n for n in names if n.startswith("ucxx")]
ours, perf, floor = "ucp (ours), blocking", "ucx_perftest tag_lat", "ucx_perftest tag_lat -e, ucp's UCX_*"
lat_ratio = [lat[ours, r] / min(lat[n, r] for n in ucxx) for r in range(rounds)]
floor_ratio = [lat[floor, r] / min(lat[n, r] for n in ucxx) for r in range(rounds)]
above_floor = [lat[ours, r] - lat[floor, r] for r in range(rounds)]
bw_ratio = [bw[ours, r] / max(bw[n, r] for n in ucxx) for r in range(rounds)]
perf_ratio = [bw[ours, r] / bw[perf, r] for r in range(rounds)]
print(f"\nPer round, min / median / max:")
print(f"8 B one-way, ours blocking / best UCXX mode:   {mmm(lat_ratio, '{:.2f}')}  (target <= 0.5)")
print(f"8 B one-way, perftest -e / best UCXX mode:      {mmm(floor_ratio, '{:.2f}')}  (UCX's own, same settings)")
print(f"8 B one-way, ours blocking - perftest -e (us):  {mmm(above_floor, '{:.2f}')}  (Python, asyncio, ucp)")
print(f"1 MiB bandwidth, ours blocking / best UCXX:    {mmm(bw_ratio, '{:.2f}')}  (target >= 2)")
print(f"1 MiB bandwidth, ours blocking / ucx_perftest: {mmm(perf_ratio, '{:.2f}')}  (target >= 0.5)")
PYEOF
