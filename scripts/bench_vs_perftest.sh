#!/usr/bin/env bash
# Runs ucx-async's benchmark CLI (examples/bench.rs) and UCX's own ucx_perftest (from the same
# libucx wheel) on the same workloads, one after the other on 127.0.0.1, and prints the ratios.
# Expects scripts/setup.sh to have run. Quiet machine wanted: both sides busy-poll in poll mode.
# Two blocks: like for like (the same UCX settings on both sides, error handling on both or on
# neither), then each tool's defaults. ucx-core's examples/core_lat is the ladder under ours:
# UCX's calls alone (--raw, ucx_core::floor), then ucx-core's requests.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
export VIRTUAL_ENV="$ROOT/.venv" PATH="$ROOT/.venv/bin:$PATH"
UCX_PREFIX="$(python -c 'import libucx, os; print(os.path.dirname(libucx.__file__))')"
LAT_N=${LAT_N:-100000}
BW_N=${BW_N:-2000}
cargo build --quiet --release -p ucx-async --example bench
cargo build --quiet --release -p ucx-core --example core_lat
BENCH="$ROOT/target/release/examples/bench"
CORE_LAT="$ROOT/target/release/examples/core_lat"
# shellcheck source=scripts/perftest.sh
source "$ROOT/scripts/perftest.sh"

# field K of a RESULT line
field() { tr ' ' '\n' | sed -n "s/^$1=//p"; }

printf '%-66s %14s %14s %8s\n' "workload" "ucx_perftest" "ours" "ratio"
row() { printf '%-66s %14s %14s %8s\n' "$1" "$2" "$3" "$(python -c "print(f'{$4:.2f}x')")"; }

# Like for like: the same UCX settings on both sides. Ours sets UCX_MM_ERROR_HANDLING=y
# (examples/bench.rs), so perftest gets it too; "connected as perftest is": worker addresses
# swapped over a socket, no error handling on either side. Latency: perftest's 'typical'
# (median) one-way latency, column 3 of its Final line; ours one clock read per round trip.
same() { UCX_MM_ERROR_HANDLING=y perftest "$@"; }
echo "== like for like (UCX_MM_ERROR_HANDLING=y on both sides)"
p_lat=$(same tag_lat 8 "$LAT_N" | awk '{print $3}')
o_wa=$("$BENCH" -t tag_lat -s 8 -n "$LAT_N" --mode polling --no-error-handling --worker-address | field median_us)
row "tag_lat 8 B polling, connected as perftest (µs)" "$p_lat" "$o_wa" "$o_wa/$p_lat"
o_raw_s=$(UCX_MM_ERROR_HANDLING=y "$CORE_LAT" --iters "$LAT_N" --raw --single | field median_us)
row "  UCX's calls alone, thread mode SINGLE (core_lat --raw --single)" "$p_lat" "$o_raw_s" "$o_raw_s/$p_lat"
o_raw=$(UCX_MM_ERROR_HANDLING=y "$CORE_LAT" --iters "$LAT_N" --raw | field median_us)
row "  UCX's calls alone, thread mode MULTI (core_lat --raw)" "$p_lat" "$o_raw" "$o_raw/$p_lat"
o_core=$(UCX_MM_ERROR_HANDLING=y "$CORE_LAT" --iters "$LAT_N" | field median_us)
row "  ucx-core alone (examples/core_lat)" "$p_lat" "$o_core" "$o_core/$p_lat"
o_core_s=$(UCX_MM_ERROR_HANDLING=y "$CORE_LAT" --iters "$LAT_N" --single | field median_us)
row "  ucx-core alone, thread mode SINGLE as perftest" "$p_lat" "$o_core_s" "$o_core_s/$p_lat"
p_lat_e=$(same tag_lat 8 "$LAT_N" -e | awk '{print $3}')
o_eh=$("$BENCH" -t tag_lat -s 8 -n "$LAT_N" --mode polling | field median_us)
row "tag_lat 8 B polling, error handling (µs)" "$p_lat_e" "$o_eh" "$o_eh/$p_lat_e"
row "  ours over a listener vs perftest without" "$p_lat" "$o_eh" "$o_eh/$p_lat"
o_eh_wa=$("$BENCH" -t tag_lat -s 8 -n "$LAT_N" --mode polling --worker-address | field median_us)
row "  ours connected as perftest -e" "$p_lat_e" "$o_eh_wa" "$o_eh_wa/$p_lat_e"
# A listener's endpoint also gets a TCP lane (wireup, rma_bw) whose progress polls a socket on
# every round; without TCP put, UCX puts those lanes on shared memory (the setting's win).
o_eh_np=$(UCX_TCP_PUT_ENABLE=n "$BENCH" -t tag_lat -s 8 -n "$LAT_N" --mode polling | field median_us)
row "  ours over a listener, UCX_TCP_PUT_ENABLE=n" "$p_lat" "$o_eh_np" "$o_eh_np/$p_lat"
for t in stream_lat ucp_am_lat; do
    p=$(same "$t" 8 "$LAT_N" | awk '{print $3}')
    o=$("$BENCH" -t "$t" -s 8 -n "$LAT_N" --mode polling --no-error-handling --worker-address | field median_us)
    row "$t 8 B polling, connected as perftest (µs)" "$p" "$o" "$o/$p"
    if [ "$t" = ucp_am_lat ]; then p_am=$p; fi
done
# The active-message ladder: UCX's calls alone as perftest sends (no header), as UCX-Py's
# protocol sends (its header, the reply flag), then through ucx-core's handler and messages.
for rung in "--raw-am perftest" "--raw-am ucxpy" "--am"; do
    # shellcheck disable=SC2086 # the rung is two words
    o=$(UCX_MM_ERROR_HANDLING=y "$CORE_LAT" --iters "$LAT_N" $rung | field median_us)
    row "  ucp_am_lat ladder: core_lat $rung" "$p_am" "$o" "$o/$p_am"
done
# Bandwidth: perftest's overall bandwidth (MiB/s), column 7 of its Final line.
for t in tag_bw stream_bw ucp_am_bw; do
    p=$(same "$t" 1048576 "$BW_N" | awk '{print $7}')
    o=$("$BENCH" -t "$t" -s 1048576 -n "$BW_N" --mode polling --no-error-handling --worker-address | field MiBps)
    row "$t 1 MiB polling, connected as perftest (MiB/s)" "$p" "$o" "$o/$p"
done
p_bw_e=$(same tag_bw 1048576 "$BW_N" -e | awk '{print $7}')
o_bw_e=$("$BENCH" -t tag_bw -s 1048576 -n "$BW_N" --mode polling | field MiBps)
row "tag_bw 1 MiB polling, error handling (MiB/s)" "$p_bw_e" "$o_bw_e" "$o_bw_e/$p_bw_e"
o_bw_np=$(UCX_TCP_PUT_ENABLE=n "$BENCH" -t tag_bw -s 1048576 -n "$BW_N" --mode polling | field MiBps)
row "  ours over a listener, UCX_TCP_PUT_ENABLE=n" "$p_bw_e" "$o_bw_np" "$o_bw_np/$p_bw_e"

# Each side's defaults: perftest as it comes (no error handling, UCX's defaults), ours as the
# bench comes (error handling over a listener, UCX_MM_ERROR_HANDLING=y).
echo "== defaults (perftest's against ours)"
p_lat=$(perftest tag_lat 8 "$LAT_N" | awk '{print $3}')
o_poll=$("$BENCH" -t tag_lat -s 8 -n "$LAT_N" --mode polling | field median_us)
row "tag_lat 8 B, polling (µs)" "$p_lat" "$o_poll" "$o_poll/$p_lat"
p_sleep=$(perftest tag_lat 8 "$LAT_N" -E sleep | awk '{print $3}')
o_event=$("$BENCH" -t tag_lat -s 8 -n "$LAT_N" --mode event | field median_us)
row "tag_lat 8 B, event/sleep (µs)" "$p_sleep" "$o_event" "$o_event/$p_sleep"
o_adapt=$("$BENCH" -t tag_lat -s 8 -n "$LAT_N" --mode adaptive | field median_us)
row "tag_lat 8 B, ours adaptive vs ours polling" "$o_poll" "$o_adapt" "$o_adapt/$o_poll"
for t in stream_lat ucp_am_lat; do
    p=$(perftest "$t" 8 "$LAT_N" | awk '{print $3}')
    o=$("$BENCH" -t "$t" -s 8 -n "$LAT_N" --mode polling | field median_us)
    row "$t 8 B, polling (µs)" "$p" "$o" "$o/$p"
done
for t in tag_bw stream_bw ucp_am_bw; do
    p=$(perftest "$t" 1048576 "$BW_N" | awk '{print $7}')
    o=$("$BENCH" -t "$t" -s 1048576 -n "$BW_N" --mode polling | field MiBps)
    row "$t 1 MiB, polling (MiB/s)" "$p" "$o" "$o/$p"
done
p_bw_s=$(perftest tag_bw 1048576 "$BW_N" -E sleep | awk '{print $7}')
o_bw_ev=$("$BENCH" -t tag_bw -s 1048576 -n "$BW_N" --mode event | field MiBps)
row "tag_bw 1 MiB, event/sleep (MiB/s)" "$p_bw_s" "$o_bw_ev" "$o_bw_ev/$p_bw_s"
