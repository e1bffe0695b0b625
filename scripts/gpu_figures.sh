#!/usr/bin/env bash
# Issue 12's GPU figures in one device call: the harness (../shared/gpu/run.sh, ucp's UCX
# environment on both sides of its benchmark), then what it does not run:
#   rust_cuda.txt     examples/bench_cuda (ucx-async, device buffers) in event and polling mode
#                     under the same UCX environment as the harness's perftest rows: whether the
#                     Rust core or the Python layer pays where ucp trails ucx_perftest;
#   polling/          the harness benchmark with ucp polling (UCXPY_NON_BLOCKING_MODE) instead
#                     of sleeping on the wakeup fd;
#   spin/             the same with ucp's blocking mode spinning up to 1 ms (UCXPY_SPIN_US=1000,
#                     default 100 µs, shorter than a GPU round trip) before it sleeps;
#   stream_sync.txt   scripts/bench_cuda_stream_sync.py (what a CAI v3 stream's wait costs);
#   cache-y/          the harness benchmark with UCX_MEMTYPE_CACHE=y on both sides (UCX's own
#                     default: its perftest rows are "perftest as it comes").
# Run from the project root on the GPU machine, after `bash ../shared/gpu/prepare.sh` built
# .gpu/ here: OUT=/some/dir bash scripts/gpu_figures.sh. Stops itself by DEADLINE_S (560 s); a
# step that would not fit is skipped and says so in $OUT/steps.txt.
#
# HARNESS_SECTIONS (default: all but rust, which took 130 s of a 540-s full run on a 16-core
# H200 and passed there on 2026-11-26), HARNESS_BUDGET_S (160: no harness check starts later)
# and GPU_PYTEST_HOST (default: the host files about cancellation, transfers and CAI intake)
# trim the first step.
set -u
OUT="${OUT:-/tmp/gpu-out}"
DEADLINE_S="${DEADLINE_S:-560}"
W="${GPU_WORK:-/tmp/ucx-async-gpu}"
mkdir -p "$OUT"
T0=$SECONDS
step() { # NAME NEEDS_S CMD... : runs CMD if NEEDS_S seconds are left, under a timeout of what is left
    local name=$1 need=$2 left
    shift 2
    left=$((DEADLINE_S - (SECONDS - T0)))
    if ((left < need)); then
        echo "$name: skipped, $left s left of $DEADLINE_S" >>"$OUT/steps.txt"
        return
    fi
    timeout -k 5 "$left" "$@"
    echo "$name: exit status $? at $((SECONDS - T0)) s" >>"$OUT/steps.txt"
}
: >"$OUT/steps.txt"
budget=${HARNESS_BUDGET_S:-160}
export GPU_PYTEST_HOST="${GPU_PYTEST_HOST:-test_reliability.py test_cuda_standins.py test_send_recv.py test_am_worker.py}"
# shellcheck disable=SC2086 # a list of section names
step harness 60 env GPU_TIME_LIMIT_S=$((budget + 40)) GPU_BUDGET_S="$budget" \
    bash .gpu/run.sh ${HARNESS_SECTIONS:-info echo pytest echocupy bench sanitizer} >"$OUT/harness.txt" 2>&1

# The UCX_* that `import ucp` sets, as the harness read them for its perftest rows.
UCP_ENV=$(sed -n 's/^UCX_\* for both sides (set by import ucp): //p' "$W/logs/bench.txt" 2>/dev/null)
rust_cuda() {
    local mode
    echo "UCX_* as for the harness's perftest rows: ${UCP_ENV:-(none found: UCX defaults)}"
    for mode in event polling; do
        # shellcheck disable=SC2086 # a list of NAME=VALUE words
        timeout -k 5 60 env $UCP_ENV LD_LIBRARY_PATH="$W/site/libucx/lib" \
            "$W/bin/ucx-async.example.bench_cuda" --full --mode "$mode"
        echo "(exit status $?)"
    done
}
step rust-cuda 40 rust_cuda >"$OUT/rust_cuda.txt" 2>&1
step polling 130 env OUT="$OUT/polling" UCXPY_NON_BLOCKING_MODE=1 GPU_TIME_LIMIT_S=140 GPU_BUDGET_S=110 \
    bash .gpu/run.sh bench >"$OUT/polling.txt" 2>&1
step spin 130 env OUT="$OUT/spin" UCXPY_SPIN_US=1000 GPU_TIME_LIMIT_S=140 GPU_BUDGET_S=110 \
    bash .gpu/run.sh bench >"$OUT/spin.txt" 2>&1
# run.sh's set-up left ucp and UCX installed under $W; the stream benchmark uses that copy.
step stream-sync 30 env PYTHONPATH="$W/site" LD_LIBRARY_PATH="$W/site/libucx/lib" UCX_NET_DEVICES=lo \
    python3 scripts/bench_cuda_stream_sync.py --rounds 1000 >"$OUT/stream_sync.txt" 2>&1
step cache-y 130 env OUT="$OUT/cache-y" UCX_MEMTYPE_CACHE=y GPU_TIME_LIMIT_S=140 GPU_BUDGET_S=110 \
    bash .gpu/run.sh bench >"$OUT/cache-y.txt" 2>&1
cat "$OUT/steps.txt"
for f in summary.txt rust_cuda.txt polling/summary.txt spin/summary.txt stream_sync.txt cache-y/summary.txt; do
    [ -f "$OUT/$f" ] && { echo "== $f"; cat "$OUT/$f"; }
done
