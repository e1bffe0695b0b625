#!/usr/bin/env bash
# Runs our `python -m ucp.benchmarks.send_recv`, UCXX's `python -m ucxx.benchmarks.send_recv`
# (PyPI `ucxx-cu12`, CPU-only, installed into .venv-ucxx on first use by scripts/ucxx-venv.sh)
# and `ucx_perftest -t tag_lat` on the same message sizes, one after the other on 127.0.0.1,
# and prints one-way median latency (half the round trip), round-trip bandwidth and the ratios.
# perftest runs twice: as it comes (no peer error handling: shared memory) and with `-e` and
# the UCX_* variables `import ucp` sets, the floor under the Python peers' small messages.
# ROUNDS (default 3) rounds, each running every side once, the order rotated round by round; a
# cell is min / median / max over the rounds, and a ratio is taken within each round (this
# machine's speed moves between minutes, so only sides measured side by side compare). A side
# that prints no report is tried once more, then counted as failed in that round and named so
# in the table; the other sides go on.
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
# One side's "latency bandwidth" at size $1 by runner $2, tried twice; "failed failed" if it
# printed no report either time (UCXX's benchmark in thread mode sometimes prints none). The
# table then counts only the rounds a side finished and says how many it did not.
measure() {
    local out
    # shellcheck disable=SC2086 # a runner and its flags, split into words
    out=$(SIZE=$1 ${RUNNERS[$2]} 2>/dev/null) || out=$(SIZE=$1 ${RUNNERS[$2]}) || out=""
    echo "${out:-failed failed}"
}
n=${#NAMES[@]}
for ((r = 0; r < ROUNDS; r++)); do
    for ((k = 0; k < n; k++)); do
        i=$(( (k + r) % n ))
        read -r l8 _ < <(measure 8 "$i")
        read -r _ b1 < <(measure 1048576 "$i")
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
def number(text):
    return None if text == "failed" else float(text)
for r, name, l8, b1 in rows:
    if name not in names:
        names.append(name)
    lat[name, int(r)], bw[name, int(r)] = number(l8), number(b1)
def mmm(xs, fmt):
    xs = [x for x in xs if x is not None]
    if not xs:
        return "failed"
    return " / ".join(fmt.format(x) for x in (min(xs), statistics.median(xs), max(xs)))
def failed(name):
    k = sum(lat[name, r] is None or bw[name, r] is None for r in range(rounds))
    return f" (no report in {k} of {rounds} rounds)" if k else ""
print(f"\n{rounds} rounds, min / median / max\n")
print(f"| run | 8 B one-way (us) | 1 MiB (MiB/s) |\n|---|---|---|")
for name in names:
    print(f"| {name}{failed(name)} | {mmm([lat[name, r] for r in range(rounds)], '{:.2f}')} "
          f"| {mmm([bw[name, r] for r in range(rounds)], '{:.0f}')} |")
ucxx = [n for n in names if n.startswith("ucxx")]
ours, perf, floor = "ucp (ours), blocking", "ucx_perftest tag_lat", "ucx_perftest tag_lat -e, ucp's UCX_*"
def per_round(f, table, sides, best=None):
    """f(the sides' figures of a round[, the best UCXX mode's]) for each round where all of
    them have one (`best`: min or max over the UCXX modes that reported)."""
    out = []
    for r in range(rounds):
        values = [table[s, r] for s in sides]
        if best is not None:
            modes = [table[n, r] for n in ucxx if table[n, r] is not None]
            values.append(best(modes) if modes else None)
        if None not in values:
            out.append(f(*values))
    return out
lat_ratio = per_round(lambda o, u: o / u, lat, [ours], min)
floor_ratio = per_round(lambda f, u: f / u, lat, [floor], min)
above_floor = per_round(lambda o, f: o - f, lat, [ours, floor])
bw_ratio = per_round(lambda o, u: o / u, bw, [ours], max)
perf_ratio = per_round(lambda o, p: o / p, bw, [ours, perf])
print(f"\nPer round, min / median / max:")
print(f"8 B one-way, ours blocking / best UCXX mode:   {mmm(lat_ratio, '{:.2f}')}  (target <= 0.5)")
print(f"8 B one-way, perftest -e / best UCXX mode:      {mmm(floor_ratio, '{:.2f}')}  (UCX's own, same settings)")
print(f"8 B one-way, ours blocking - perftest -e (us):  {mmm(above_floor, '{:.2f}')}  (Python, asyncio, ucp)")
print(f"1 MiB bandwidth, ours blocking / best UCXX:    {mmm(bw_ratio, '{:.2f}')}  (target >= 2)")
print(f"1 MiB bandwidth, ours blocking / ucx_perftest: {mmm(perf_ratio, '{:.2f}')}  (target >= 0.5)")
PYEOF
