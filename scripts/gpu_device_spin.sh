#!/usr/bin/env bash
# What the inline spin on device memory (ucx_core::DEVICE_SPIN, `UCXA_DEVICE_SPIN_US`) buys,
# on a GPU machine: 1-MiB, 8-B and 64-MiB tag ping-pong of device memory between two
# processes over 127.0.0.1 (cuda_ipc), as one-way median µs, for
#   ucx_perftest -t tag_lat -m cuda   (busy-polls; the reference)
#   ucx-async's bench_cuda            polling, then event mode with the device spin at 0, the
#                                     old byte rule's figure (1 MiB: 131 µs), candidates and
#                                     its default
#   ucp with CuPy (send_recv)         blocking mode with the device spin off and at its
#                                     default, polling mode, and blocking mode with CuPy
#                                     exporting no stream (no stream wait)
# each ROUNDS times, interleaved (drift on the machine hits all alike). All under the UCX_*
# that `import ucp` sets and without peer-error handling on either side (as perftest's
# default). It also prints which protocol UCX chose for 1 MiB in perftest, in bench_cuda
# (listener and worker-address connections) and in ucp (send_recv), from UCX_PROTO_INFO.
#
# Run from the project root on the GPU machine after the harness's set-up unpacked the
# bundle (`bash .gpu/run.sh info`, or scripts/gpu_figures.sh): bash scripts/gpu_device_spin.sh
# Settings: ROUNDS (2), SIZES ("1048576 8 67108864"), SPINS (bench_cuda's event-mode device
# spins, `UCXA_DEVICE_SPIN_US` values or `default`; "0 131 500 1000 default"), UCP_SPINS (the
# same for ucp's blocking mode; "0 default"), PROTO (1: print the protocol tables; 0: skip),
# NO_STREAM (1: the row without a stream wait; 0: skip), WORKER_ADDRESS (1: bench_cuda polling
# over a worker address too; 0: over the listener only),
# GPU_WORK (the unpacked bundle, /tmp/ucx-async-gpu).
set -u
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT" || exit 1
W="${GPU_WORK:-/tmp/ucx-async-gpu}"
BIN="$W/bin/ucx-async.example.bench_cuda"
PY=${PY:-python3}
ROUNDS=${ROUNDS:-2}
SIZES=${SIZES:-1048576 8 67108864}
SPINS=${SPINS:-0 131 500 1000 default}
UCP_SPINS=${UCP_SPINS:-0 default}
export PYTHONPATH="$W/site${PYTHONPATH:+:$PYTHONPATH}" LD_LIBRARY_PATH="$W/site/libucx/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export UCX_NET_DEVICES=lo UCXPY_IFNAME=lo
[ -x "$BIN" ] || { echo "gpu_device_spin: no $BIN (run the harness's set-up first)" >&2; exit 2; }
# shellcheck source=scripts/perftest.sh
source scripts/perftest.sh
UCX_PREFIX="$("$PY" -c 'import libucx, os; print(os.path.dirname(libucx.__file__))')" || exit 2
UCP_ENV=$(ucp_env "$PY") || exit 2
# shellcheck disable=SC2086 # NAME=VALUE words
export $UCP_ENV
echo "# UCX_* on every side: $UCP_ENV; no peer-error handling; $(date -u +%FT%TZ)"

iters() { if (($1 <= 65536)); then echo 2000; elif (($1 <= 4194304)); then echo 1000; else echo 100; fi; }
perftest_us() { perftest tag_lat "$1" "$(iters "$1")" -m cuda -w $(($(iters "$1") / 10)) | awk '{ printf "%.1f", $3 }'; }
rust_us() { # SIZE ARGS... (bench_cuda's)
    local size=$1
    shift
    timeout -k 5 90 "$BIN" --sizes "$size" -n "$(iters "$size")" "$@" 2>&1 | sed -nE 's/.*median_us=([0-9.]+).*/\1/p' | head -1
}
ucp_us() { # SIZE FLAGS... (send_recv's)
    local size=$1 n
    shift
    n=$(iters "$size")
    timeout -k 5 120 "$PY" -m ucp.benchmarks.send_recv -o cupy --reuse-alloc -n "$size" --n-iter "$n" \
        --n-warmup-iter $((n / 10)) -s 127.0.0.1 --no-detailed-report --no-error-handling "$@" 2>&1 |
        send_recv_median_us
}

device_tables() { # UCX_PROTO_INFO's tables for device memory, and the lanes bench_cuda prints
    sed -E 's/^\[[^]]*\] \[[^]]*\] +//' | awk '/ from / { keep = ($0 ~ /cuda|GPU/) } (/^\| / && keep) || /lane\[/'
}
with_spin() { # SPIN CMD... : CMD with UCXA_DEVICE_SPIN_US=SPIN ("default": unset)
    local spin=$1
    shift
    if [ "$spin" = default ]; then (unset UCXA_DEVICE_SPIN_US && "$@"); else UCXA_DEVICE_SPIN_US=$spin "$@"; fi
}
[ "${PROTO:-1}" = 1 ] && echo "== protocols UCX chose for 1 MiB of device memory (UCX_PROTO_INFO=y)"
[ "${PROTO:-1}" = 1 ] && PORT=$((PORT + 1)) && (
    export LD_LIBRARY_PATH="$UCX_PREFIX/lib" UCX_PROTO_INFO=y
    timeout 30 "$UCX_PREFIX/bin/ucx_perftest" -p $PORT -m cuda >/dev/null 2>&1 &
    sleep 1
    timeout 30 "$UCX_PREFIX/bin/ucx_perftest" 127.0.0.1 -p $PORT -t tag_lat -s 1048576 -n 20 -m cuda 2>&1 |
        device_tables | sed 's/^/perftest: /' | head -40
    wait
)
proto_rows() { # NAME CMD... : CMD under UCX_PROTO_INFO=y, its device-memory tables prefixed with NAME
    local name=$1 log
    shift
    log=$(mktemp)
    UCX_PROTO_INFO=y "$@" >"$log" 2>&1
    echo "$name: exit status $?"
    # (A run on an H200 printed no table here; the output's end says why, if it happens again.)
    device_tables <"$log" | sed "s/^/$name: /" | head -40 | grep . ||
        tail -5 "$log" | sed "s/^/$name (no table; its output ends): /"
    rm -f "$log"
}
[ "${PROTO:-1}" = 1 ] && for connect in "" --worker-address; do
    proto_rows "bench_cuda ${connect:---listener}" timeout 60 "$BIN" --sizes 1048576 -n 20 --mode polling $connect
done
# ucp's endpoints (listener, UCX-Py's features) against perftest's: the same protocol for 1 MiB?
[ "${PROTO:-1}" = 1 ] && proto_rows ucp timeout -k 5 60 "$PY" -m ucp.benchmarks.send_recv -o cupy --reuse-alloc \
    -n 1048576 --n-iter 20 --n-warmup-iter 2 -s 127.0.0.1 --no-detailed-report --no-error-handling

for size in $SIZES; do
    echo "== $size B: one-way median µs per round"
    for round in $(seq "$ROUNDS"); do
        printf '%-52s %s\n' "perftest (polling)" "$(perftest_us "$size")"
        printf '%-52s %s\n' "bench_cuda polling, listener" "$(rust_us "$size" --mode polling)"
        [ "${WORKER_ADDRESS:-1}" = 1 ] && printf '%-52s %s\n' "bench_cuda polling, worker address" \
            "$(rust_us "$size" --mode polling --worker-address)"
        for spin in $SPINS; do
            printf '%-52s %s\n' "bench_cuda event, device spin $spin" "$(with_spin "$spin" rust_us "$size" --mode event)"
        done
        for spin in $UCP_SPINS; do
            printf '%-52s %s\n' "ucp blocking, device spin $spin" "$(with_spin "$spin" ucp_us "$size")"
        done
        printf '%-52s %s\n' "ucp polling" "$(UCXPY_NON_BLOCKING_MODE=1 ucp_us "$size")"
        # CuPy then exports no `stream`, so ucp waits for none: the stream wait's share.
        [ "${NO_STREAM:-1}" = 1 ] && printf '%-52s %s\n' "ucp blocking, CUPY_CUDA_ARRAY_INTERFACE_SYNC=0" \
            "$(CUPY_CUDA_ARRAY_INTERFACE_SYNC=0 ucp_us "$size")"
        echo "-- (round $round done at ${SECONDS} s)"
    done
done
