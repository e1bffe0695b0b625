#!/usr/bin/env bash
# Multi-rail over separate links: two network namespaces joined by one veth pair per rail, each
# link shaped to RATE with tc's token bucket (default 4gbit) to stand in for a NIC's line rate.
# The peer runs in one namespace and the client in the other, so every rail's bytes cross its
# own link (UCX_TLS=tcp on both sides; loopback cannot short-cut between namespaces). Runs the
# multirail example's sweep there, then ucx_perftest over one link and over all of them with
# UCX's own multi-rail (UCX_MAX_RNDV_RAILS / UCX_MAX_EAGER_RAILS), same settings.
#
# Needs root (ip netns, tc). RAILS (default 2), RATE (a tc rate, or "none" for unshaped veth),
# MODES, SIZES, ITERS, STAGES and RATIOS (default: an even share) shape the sweep; PERFTEST=0
# skips ucx_perftest; MULTIRAIL=path uses that multirail binary instead of building the release
# one. Expects scripts/setup.sh to have run.
# Writes the plot to docs/multirail-netns.svg (PLOT= elsewhere).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
RAILS=${RAILS:-2}
RATE=${RATE:-4gbit}
SIZES=${SIZES:-1048576,8388608,67108864}
ITERS=${ITERS:-40}
STAGES=${STAGES:-1,2,4}
A=ucxa-rails-a
B=ucxa-rails-b
if [ "$(id -u)" != 0 ]; then
    echo "bench_multirail_netns: needs root (network namespaces and tc)" >&2
    exit 2
fi
if [ -n "${MULTIRAIL:-}" ]; then
    MR=$MULTIRAIL
else
    cargo build -q --release -p ucx-async --example multirail
    MR="$ROOT/target/release/examples/multirail"
fi
LIBUCX="$("$ROOT/.venv/bin/python" -c 'import libucx, os; print(os.path.dirname(libucx.__file__))')"
PERFTEST_BIN="$LIBUCX/bin/ucx_perftest"
export LD_LIBRARY_PATH="$LIBUCX/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export UCX_TLS=tcp

cleanup() {
    [ -n "${SERVER:-}" ] && kill "$SERVER" 2>/dev/null || true
    ip netns del "$A" 2>/dev/null || true
    ip netns del "$B" 2>/dev/null || true
    rm -rf "${TMP:-}"
}
trap cleanup EXIT
cleanup
TMP="$(mktemp -d)"
ip netns add "$A"
ip netns add "$B"
ip -n "$A" link set lo up
ip -n "$B" link set lo up
DEV_A=() DEV_B=() IP_B=()
for i in $(seq 0 $((RAILS - 1))); do
    ip link add "ra$i" netns "$A" type veth peer name "rb$i" netns "$B"
    ip -n "$A" addr add "10.77.$i.1/24" dev "ra$i"
    ip -n "$B" addr add "10.77.$i.2/24" dev "rb$i"
    ip -n "$A" link set "ra$i" up
    ip -n "$B" link set "rb$i" up
    if [ "$RATE" != none ]; then
        tc -n "$A" qdisc add dev "ra$i" root tbf rate "$RATE" burst 1mb latency 100ms
        tc -n "$B" qdisc add dev "rb$i" root tbf rate "$RATE" burst 1mb latency 100ms
    fi
    DEV_A+=("ra$i") DEV_B+=("rb$i") IP_B+=("10.77.$i.2")
done
# UCX lists a link only once it is up on both ends (it is not, for a moment, after `link set up`).
for _ in $(seq 50); do
    down=0
    for i in $(seq 0 $((RAILS - 1))); do
        [ "$(ip netns exec "$A" cat "/sys/class/net/ra$i/operstate")" = up ] || down=1
        [ "$(ip netns exec "$B" cat "/sys/class/net/rb$i/operstate")" = up ] || down=1
    done
    [ "$down" = 0 ] && break
    sleep 0.1
done
join_by() { local IFS="$1"; shift; echo "$*"; }
RAIL_COUNTS=$(seq -s, 1 "$RAILS")
SWEEP=(--modes "${MODES:-SINGLE,MR,SPLIT}" --rails "$RAIL_COUNTS" --stages "$STAGES" --ratios "${RATIOS:-$(awk -v n="$RAILS" 'BEGIN { printf "%.4g", (n - 1) / n }')}" --sizes "$SIZES" --iters "$ITERS")
echo "# $RAILS rails, each a veth pair between two namespaces, shaped to $RATE; UCX_TLS=tcp; UCX $("$ROOT/.venv/bin/python" -c 'from importlib.metadata import version; print(version("libucx-cu12"))')"

# The multirail sweep: the peer in B listening on each rail's address, the client in A.
ip netns exec "$B" "$MR" --serve --listen "$(join_by , "${IP_B[@]}")" --devices "$(join_by , "${DEV_B[@]}")" "${SWEEP[@]}" >"$TMP/server.out" &
SERVER=$!
for _ in $(seq 100); do
    grep -q '^PORT ' "$TMP/server.out" && break
    sleep 0.1
done
PORTS=$(sed -n 's/^PORT //p' "$TMP/server.out")
[ -n "$PORTS" ] || { echo "bench_multirail_netns: the peer reported no port" >&2; exit 1; }
IFS=, read -r -a PORT_LIST <<<"$PORTS"
PEERS=()
for i in $(seq 0 $((RAILS - 1))); do PEERS+=("${IP_B[$i]}:${PORT_LIST[$i]}"); done
ip netns exec "$A" "$MR" --connect "$(join_by , "${PEERS[@]}")" --devices "$(join_by , "${DEV_A[@]}")" \
    "${SWEEP[@]}" --plot "${PLOT:-$ROOT/docs/multirail-netns.svg}"
wait "$SERVER"
SERVER=

# ucx_perftest, tag_bw, over one link and over all links (UCX's own multi-rail).
perftest() { # label, server devices, client devices, extra env...
    local label=$1 sdev=$2 cdev=$3
    shift 3
    for size in ${SIZES//,/ }; do
        env "$@" UCX_NET_DEVICES="$sdev" ip netns exec "$B" "$PERFTEST_BIN" -p 13377 >/dev/null 2>&1 &
        local s=$!
        sleep 0.5
        local out
        out=$(env "$@" UCX_NET_DEVICES="$cdev" ip netns exec "$A" "$PERFTEST_BIN" "${IP_B[0]}" -p 13377 -t tag_bw -s "$size" -n "$ITERS" -w 1 2>&1 | awk '/Final:/ {print $(NF-2)}')
        wait "$s" || true
        # perftest reports MB/s as 2^20 B/s; print 10^6 B/s as the multirail example does.
        echo "PERFTEST $label $size $(awk -v m="$out" 'BEGIN { printf "%.0f", m * 1048576 / 1e6 }')"
    done
}
[ "${PERFTEST:-1}" = 0 ] && exit 0
perftest "1-link" rb0 ra0
perftest "$RAILS-links(UCX_MAX_RNDV_RAILS=$RAILS)" "$(join_by , "${DEV_B[@]}")" "$(join_by , "${DEV_A[@]}")" UCX_MAX_RNDV_RAILS="$RAILS" UCX_MAX_EAGER_RAILS="$RAILS"
