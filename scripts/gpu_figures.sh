#!/usr/bin/env bash
# Issue 12's GPU figures in one device call: the harness (../shared/gpu/run.sh, every section,
# ucp's UCX environment on both sides of its benchmark), then the pairings it does not run:
#   cache-y/   the benchmark with UCX_MEMTYPE_CACHE=y on both sides (UCX's own default, so its
#              perftest rows are "perftest as it comes", to set against ucp's defaults above);
#   polling/   the benchmark with ucp polling (UCXPY_NON_BLOCKING_MODE) instead of sleeping on
#              the wakeup fd, to tell wake-up cost from per-message cost;
#   stream_sync.txt   scripts/bench_cuda_stream_sync.py (what a CAI v3 stream's wait costs).
# Run from the project root on the GPU machine, after `bash ../shared/gpu/prepare.sh` built
# .gpu/ here: OUT=/some/dir bash scripts/gpu_figures.sh. Stops itself by DEADLINE_S (540 s);
# a step that would not fit is skipped and says so in $OUT/steps.txt. HARNESS_SECTIONS (default
# all) and HARNESS_BUDGET_S (320: no harness check starts later) trim the first step for a
# shorter call; GPU_PYTEST_HOST passes through to it. On a 16-core H200 the whole harness took
# 540 s, its rust section 130 s and its host pytest files 160 s.
set -u
OUT="${OUT:-/tmp/gpu-out}"
DEADLINE_S="${DEADLINE_S:-540}"
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
budget=${HARNESS_BUDGET_S:-320}
# shellcheck disable=SC2086 # a list of section names
step harness 60 env GPU_TIME_LIMIT_S=$((budget + 40)) GPU_BUDGET_S="$budget" bash .gpu/run.sh ${HARNESS_SECTIONS:-} \
    >"$OUT/harness.txt" 2>&1
# run.sh's set-up left ucp and UCX installed under $W; the stream benchmark uses that copy.
step stream-sync 30 env PYTHONPATH="$W/site" LD_LIBRARY_PATH="$W/site/libucx/lib" UCX_NET_DEVICES=lo \
    python3 scripts/bench_cuda_stream_sync.py --rounds 1000 >"$OUT/stream_sync.txt" 2>&1
step cache-y 60 env OUT="$OUT/cache-y" UCX_MEMTYPE_CACHE=y GPU_TIME_LIMIT_S=85 GPU_BUDGET_S=70 \
    bash .gpu/run.sh bench >"$OUT/cache-y.txt" 2>&1
step polling 60 env OUT="$OUT/polling" UCXPY_NON_BLOCKING_MODE=1 GPU_TIME_LIMIT_S=85 GPU_BUDGET_S=70 \
    bash .gpu/run.sh bench >"$OUT/polling.txt" 2>&1
cat "$OUT/steps.txt"
for f in "$OUT/summary.txt" "$OUT/cache-y/summary.txt" "$OUT/polling/summary.txt" "$OUT/stream_sync.txt"; do
    [ -f "$f" ] && { echo "== ${f#"$OUT"/}"; cat "$f"; }
done
