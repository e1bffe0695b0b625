# Sourced by the benchmark scripts: `perftest TEST SIZE N [EXTRA...]` runs UCX's ucx_perftest
# (server and client, from the libucx wheel at $UCX_PREFIX) on 127.0.0.1 over lo and prints
# the client's "Final:" line. Each call takes the next port after $PORT.
PORT=${PORT:-$((20000 + RANDOM % 20000))}

perftest() {
    local test=$1 size=$2 n=$3; shift 3
    local bin="$UCX_PREFIX/bin/ucx_perftest"
    PORT=$((PORT + 1))
    LD_LIBRARY_PATH="$UCX_PREFIX/lib" UCX_NET_DEVICES=lo "$bin" -p $PORT "$@" >/dev/null 2>&1 &
    local server=$!
    sleep 1
    LD_LIBRARY_PATH="$UCX_PREFIX/lib" UCX_NET_DEVICES=lo "$bin" 127.0.0.1 -p $PORT -t "$test" -s "$size" -n "$n" "$@" \
        2>/dev/null | grep Final
    wait $server 2>/dev/null || true
}
