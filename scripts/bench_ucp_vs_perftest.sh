#!/usr/bin/env bash
# ucp's round trips (`python -m ucp.benchmarks.send_recv`) against `ucx_perftest -t tag_lat`,
# like for like: the UCX_* variables `import ucp` sets are given to ucx_perftest too, and
# peer-failure handling is the same on both sides (send_recv's default is on, as UCX-Py's;
# perftest's is off, `-e` turns it on). One line per size and pairing: one-way median (µs,
# ucp: half the median round trip) and ucp's speed relative to perftest's (above 1: faster).
#
#   MEM=cuda bash scripts/bench_ucp_vs_perftest.sh     # CuPy against -m cuda (a GPU machine)
#   bash scripts/bench_ucp_vs_perftest.sh              # NumPy against -m host (anywhere)
#
# Settings: MEM (host|cuda), SIZES (default "8 1048576 67108864"), PY (default: .venv's python,
# else python3), UCX_* (both sides). ucx_perftest comes from the libucx wheel PY imports. Over
# 127.0.0.1/lo only.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
MEM=${MEM:-host}
SIZES=${SIZES:-8 1048576 67108864}
PY=${PY:-$([ -x "$ROOT/.venv/bin/python" ] && echo "$ROOT/.venv/bin/python" || echo python3)}
case "$MEM" in
host) OBJ=numpy ;;
cuda) OBJ=cupy ;;
*)
    echo "bench_ucp_vs_perftest: MEM must be host or cuda, got '$MEM'" >&2
    exit 2
    ;;
esac
export UCX_NET_DEVICES=lo UCXPY_IFNAME=lo
# shellcheck source=scripts/perftest.sh
source "$ROOT/scripts/perftest.sh"
# The UCX_* variables `import ucp` sets where unset: perftest gets them too.
UCP_ENV=$(ucp_env "$PY") || {
    echo "bench_ucp_vs_perftest: $PY cannot import ucp" >&2
    exit 1
}
UCX_PREFIX="$("$PY" -c 'import libucx, os; print(os.path.dirname(libucx.__file__))')"

iters() { # SIZE -> "timed warm-up" round trips, as the GPU harness runs them
    if (($1 <= 65536)); then echo "5000 200"; elif (($1 <= 4194304)); then echo "1000 100"; else echo "100 10"; fi
}
ucp_us() { # SIZE FLAGS... -> one-way median µs
    local size=$1 n w
    shift
    read -r n w <<<"$(iters "$size")"
    "$PY" -m ucp.benchmarks.send_recv -o "$OBJ" --reuse-alloc -n "$size" --n-iter "$n" --n-warmup-iter "$w" \
        -s 127.0.0.1 --no-detailed-report "$@" 2>&1 |
        send_recv_median_us
}
perftest_us() { # SIZE FLAGS... -> one-way median µs (its "typical" latency)
    local size=$1 n w
    shift
    read -r n w <<<"$(iters "$size")"
    (
        # shellcheck disable=SC2086 # a list of NAME=VALUE words
        [ -z "$UCP_ENV" ] || export $UCP_ENV
        perftest tag_lat "$size" "$n" -m "$MEM" -w "$w" "$@"
    ) | awk '{ printf "%.2f\n", $3 }'
    PORT=$((PORT + 1)) # perftest took the next port in the subshell
}

echo "# UCX_* on both sides (set by import ucp): ${UCP_ENV:-none}; memory: $MEM ($OBJ); $(date -u +%FT%TZ)"
printf '%-10s %-44s %10s %10s %8s\n' size pairing "perftest" "ucp" "speed"
row() { # SIZE NAME PERFTEST_US UCP_US
    awk -v s="$1" -v n="$2" -v p="$3" -v u="$4" 'BEGIN {
        printf "%-10s %-44s %10s %10s %8s\n", s, n, (p == "" ? "-" : p), (u == "" ? "-" : u),
            (p == "" || u == "" ? "-" : sprintf("%.2fx", p / u)) }'
}
for size in $SIZES; do
    p=$(perftest_us "$size")
    row "$size" "no error handling, ucp blocking" "$p" "$(ucp_us "$size" --no-error-handling)"
    row "$size" "no error handling, ucp polling" "$p" "$(UCXPY_NON_BLOCKING_MODE=1 ucp_us "$size" --no-error-handling)"
    row "$size" "error handling (perftest -e), ucp blocking" "$(perftest_us "$size" -e)" "$(ucp_us "$size")"
done
