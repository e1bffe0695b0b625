# Sourced by the benchmark scripts: `perftest TEST SIZE N [EXTRA...]` runs UCX's ucx_perftest
# (server and client, from the libucx wheel at $UCX_PREFIX) on 127.0.0.1 over lo and prints
# the client's "Final:" line. Each call takes the next port after $PORT. The client is retried
# (for up to 10 s) until the server listens, rather than started after a fixed sleep.
# `ucp_env PY` prints the UCX_* variables `import ucp` sets (where unset) under Python PY, as
# NAME=VALUE words, for running perftest with ucp's UCX settings. `send_recv_median_us` reads
# the output of `python -m ucp.benchmarks.send_recv` and prints its median one-way latency (µs).
PORT=${PORT:-$((20000 + RANDOM % 20000))}

perftest() {
    local test=$1 size=$2 n=$3; shift 3
    local bin="$UCX_PREFIX/bin/ucx_perftest" final="" tries=0
    PORT=$((PORT + 1))
    LD_LIBRARY_PATH="$UCX_PREFIX/lib" UCX_NET_DEVICES=lo "$bin" -p $PORT "$@" >/dev/null 2>&1 &
    local server=$!
    while [ -z "$final" ] && [ $tries -lt 200 ] && kill -0 $server 2>/dev/null; do
        final=$(LD_LIBRARY_PATH="$UCX_PREFIX/lib" UCX_NET_DEVICES=lo "$bin" 127.0.0.1 -p $PORT -t "$test" \
            -s "$size" -n "$n" "$@" 2>/dev/null | grep Final || true)
        [ -n "$final" ] || sleep 0.05
        tries=$((tries + 1))
    done
    wait "$server" 2>/dev/null || true
    [ -n "$final" ] || { echo "perftest: no result for $test $size" >&2; return 1; }
    echo "$final"
}

ucp_env() {
    "$1" -c '
import os
before = dict(os.environ)
import ucp
print(" ".join(f"{k}={v}" for k, v in sorted(os.environ.items()) if k.startswith("UCX_") and before.get(k) != v))
'
}

send_recv_median_us() {
    sed -nE 's/^Latency \(median\) *\| *([0-9.]+) ns.*/\1/p' | awk '{ printf "%.2f\n", $1 / 1000 }'
}
