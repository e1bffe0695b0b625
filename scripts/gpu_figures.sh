#!/usr/bin/env bash
# The GPU figures in one call on a GPU machine: the harness (scripts/gpu_run.sh, as .gpu/run.sh), then
#   rust_tests.txt       the Rust tests that move device memory (ucx-core's cuda, ucx-async's
#                        multirail and alltoallv with device buffers), which the trimmed
#                        harness leaves out;
#   like_for_like.txt    scripts/bench_ucp_vs_perftest.sh with CuPy against `ucx_perftest -m
#                        cuda`: the same UCX_* and the same error handling on both sides (the
#                        harness's own benchmark gives ucp error handling and perftest none),
#                        ucp blocking and polling;
#   rust_cuda.txt        examples/bench_cuda (ucx-async, device buffers, no error handling) in
#                        event and polling mode, under the same UCX_*: the Rust core's share;
#   stream_sync.txt      scripts/bench_cuda_stream_sync.py (what a CAI v3 stream's wait costs);
#   like_for_like_cache_y.txt  the first again with UCX_MEMTYPE_CACHE=y on both sides (UCX's
#                        own default, so its perftest rows are perftest as it comes);
#   spin.txt             8 B and 1 MiB with ucp's blocking mode spinning up to 1 ms
#                        (UCXPY_SPIN_US=1000; the default 100 µs is shorter than a GPU round
#                        trip) before it sleeps on the wakeup fd;
#   device_spin.txt      scripts/gpu_device_spin.sh: what the inline spin on device memory
#                        (ucx_core::DEVICE_SPIN) buys in Rust and ucp, against perftest;
#   py_overhead.txt      scripts/bench_py_overhead.py on CuPy arrays: per side, the time a ucp
#                        round trip spends outside the native calls (Python, asyncio);
#   intake.txt           scripts/bench_cuda_intake.py: per call, what taking a CuPy array costs
#                        (its interface dict, the stream wait's driver calls);
#   alltoall_cores.txt   scripts/gpu_alltoall_cores.sh (not a default step; needs .gpu-extra/
#                        carried too): alltoallv against Open MPI on the machine's CPUs.
# Run from the project root on the GPU machine, after `bash scripts/gpu_prepare.sh` built
# .gpu/ on the build machine: OUT=/some/dir bash scripts/gpu_figures.sh. Stops itself by DEADLINE_S (560 s); a
# step that would not fit is skipped and says so in $OUT/steps.txt. About 7 minutes in all.
#
# HARNESS_SECTIONS (default: all but rust, which took 130 s of a 540-s full run on a 16-core
# H200 and passed there on 2026-11-26, and bench, which like_for_like supersedes),
# HARNESS_BUDGET_S (160: no harness check starts later) and GPU_PYTEST_HOST (default: the host
# files about cancellation, transfers and CAI intake) trim the first step. STEPS names the steps
# to run (default: all but device-spin, which alone takes about 6 minutes with its defaults),
# e.g. STEPS="harness device-spin like-for-like".
set -u
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT" || exit 1
OUT="${OUT:-/tmp/gpu-out}"
DEADLINE_S="${DEADLINE_S:-560}"
W="${GPU_WORK:-/tmp/ucx-async-gpu}"
mkdir -p "$OUT"
T0=$SECONDS
step() { # NAME NEEDS_S CMD... : runs CMD if NEEDS_S seconds are left, under a timeout of what is left
    local name=$1 need=$2 left
    shift 2
    case " ${STEPS:-harness rust-tests like-for-like py-overhead intake rust-cuda stream-sync like-for-like-cache-y spin} " in
    *" $name "*) ;;
    *) return ;;
    esac
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
    bash .gpu/run.sh ${HARNESS_SECTIONS:-info echo pytest echocupy sanitizer} >"$OUT/harness.txt" 2>&1

# What the harness's set-up installed under $W (ucp, the UCX wheel, the Rust binaries): the
# later steps use that copy, as its own checks do.
export PYTHONPATH="$W/site${PYTHONPATH:+:$PYTHONPATH}" LD_LIBRARY_PATH="$W/site/libucx/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PY=python3 UCX_NET_DEVICES=lo
step rust-tests 30 bash -c 'for t in ucx-core.test.cuda ucx-async.test.multirail "ucx-async.test.collective device"; do
    set -- $t; echo "== $*"; timeout -k 5 120 "'"$W"'/bin/$1" ${2:-} --nocapture --test-threads=1 2>&1 |
        grep -E "^test |test result|skipped|panicked"
done' >"$OUT/rust_tests.txt" 2>&1
step device-spin 60 bash scripts/gpu_device_spin.sh >"$OUT/device_spin.txt" 2>&1
step like-for-like 60 env MEM=cuda bash scripts/bench_ucp_vs_perftest.sh >"$OUT/like_for_like.txt" 2>&1
step py-overhead 30 python3 scripts/bench_py_overhead.py --memory cuda --sizes 8,1048576,67108864 --rounds 1000 \
    --no-error-handling >"$OUT/py_overhead.txt" 2>&1
step intake 15 python3 scripts/bench_cuda_intake.py >"$OUT/intake.txt" 2>&1
step alltoall-cores 60 bash scripts/gpu_alltoall_cores.sh >"$OUT/alltoall_cores.txt" 2>&1

# shellcheck source=scripts/perftest.sh
source scripts/perftest.sh
UCP_ENV=$(ucp_env python3 2>/dev/null)
# shellcheck disable=SC2016 # expanded by the inner bash
RUST_CUDA='
echo "UCX_* as import ucp sets them: ${UCP_ENV:-(none found: UCX defaults)}"
for mode in event polling; do
    timeout -k 5 60 env $UCP_ENV "$W/bin/ucx-async.example.bench_cuda" --full --mode "$mode"
    echo "(exit status $?)"
done'
export UCP_ENV W
step rust-cuda 40 bash -c "$RUST_CUDA" >"$OUT/rust_cuda.txt" 2>&1
step stream-sync 30 python3 scripts/bench_cuda_stream_sync.py --rounds 1000 >"$OUT/stream_sync.txt" 2>&1
step like-for-like-cache-y 60 env MEM=cuda UCX_MEMTYPE_CACHE=y bash scripts/bench_ucp_vs_perftest.sh \
    >"$OUT/like_for_like_cache_y.txt" 2>&1
step spin 40 env MEM=cuda SIZES="8 1048576" UCXPY_SPIN_US=1000 bash scripts/bench_ucp_vs_perftest.sh \
    >"$OUT/spin.txt" 2>&1
# A step's output file is made by its redirection even when the step does not run: drop the
# empty ones, since a GPU machine may hand back only a few files (summary.txt must not be
# crowded out by empty ones).
find "$OUT" -maxdepth 1 -type f -empty ! -name steps.txt -delete
cat "$OUT/steps.txt"
for f in summary.txt rust_tests.txt device_spin.txt like_for_like.txt py_overhead.txt intake.txt alltoall_cores.txt rust_cuda.txt stream_sync.txt like_for_like_cache_y.txt spin.txt; do
    if [ -f "$OUT/$f" ]; then echo "== $f"; cat "$OUT/$f"; fi
done
