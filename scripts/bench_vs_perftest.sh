#!/usr/bin/env bash
# Runs ucx-async's benchmark CLI (examples/bench.rs) and UCX's own ucx_perftest (from the same
# libucx wheel) on the same workloads, one after the other on 127.0.0.1, and prints the ratios.
# Expects scripts/setup.sh to have run. Quiet machine wanted: both sides busy-poll in poll mode.
# ucx_perftest's endpoints have no peer-failure handling; ours do unless the row says otherwise.
# "connected as perftest is": worker addresses swapped over a socket instead of a listener's
# connection, which keeps UCX's TCP transport in the progress loop (a system call per round).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
export VIRTUAL_ENV="$ROOT/.venv" PATH="$ROOT/.venv/bin:$PATH"
UCX_PREFIX="$(python -c 'import libucx, os; print(os.path.dirname(libucx.__file__))')"
LAT_N=${LAT_N:-100000}
BW_N=${BW_N:-2000}
cargo build --quiet --release -p ucx-async --example bench
BENCH="$ROOT/target/release/examples/bench"
# shellcheck source=scripts/perftest.sh
source "$ROOT/scripts/perftest.sh"

# field K of a RESULT line
field() { tr ' ' '\n' | sed -n "s/^$1=//p"; }

printf '%-34s %14s %14s %8s\n' "workload" "ucx_perftest" "ucx-async" "ratio"
row() { printf '%-34s %14s %14s %8s\n' "$1" "$2" "$3" "$(python -c "print(f'{$4:.2f}x')")"; }

# Latency: perftest's 'typical' (median) one-way latency, column 3 of its Final line.
p_poll=$(perftest tag_lat 8 "$LAT_N" | awk '{print $3}')
o_poll=$("$BENCH" -t tag_lat -s 8 -n "$LAT_N" --mode polling | field median_us)
row "tag_lat 8 B, polling (µs)" "$p_poll" "$o_poll" "$o_poll/$p_poll"
o_poll_ne=$("$BENCH" -t tag_lat -s 8 -n "$LAT_N" --mode polling --no-error-handling | field median_us)
row "  same, both without error handling" "$p_poll" "$o_poll_ne" "$o_poll_ne/$p_poll"
o_poll_wa=$("$BENCH" -t tag_lat -s 8 -n "$LAT_N" --mode polling --no-error-handling --worker-address | field median_us)
row "  same, connected as perftest is" "$p_poll" "$o_poll_wa" "$o_poll_wa/$p_poll"
p_sleep=$(perftest tag_lat 8 "$LAT_N" -E sleep | awk '{print $3}')
o_event=$("$BENCH" -t tag_lat -s 8 -n "$LAT_N" --mode event | field median_us)
row "tag_lat 8 B, event/sleep (µs)" "$p_sleep" "$o_event" "$o_event/$p_sleep"
o_adapt=$("$BENCH" -t tag_lat -s 8 -n "$LAT_N" --mode adaptive | field median_us)
row "tag_lat 8 B, adaptive vs polling" "$o_poll" "$o_adapt" "$o_adapt/$o_poll"

# Bandwidth: perftest's overall bandwidth (MiB/s), column 7 of its Final line.
p_bw=$(perftest tag_bw 1048576 "$BW_N" | awk '{print $7}')
o_bw=$("$BENCH" -t tag_bw -s 1048576 -n "$BW_N" --mode polling | field MiBps)
row "tag_bw 1 MiB, polling (MiB/s)" "$p_bw" "$o_bw" "$o_bw/$p_bw"
o_bw_ne=$("$BENCH" -t tag_bw -s 1048576 -n "$BW_N" --mode polling --no-error-handling | field MiBps)
row "  same, both without error handling" "$p_bw" "$o_bw_ne" "$o_bw_ne/$p_bw"
o_bw_wa=$("$BENCH" -t tag_bw -s 1048576 -n "$BW_N" --mode polling --no-error-handling --worker-address | field MiBps)
row "  same, connected as perftest is" "$p_bw" "$o_bw_wa" "$o_bw_wa/$p_bw"
p_bw_s=$(perftest tag_bw 1048576 "$BW_N" -E sleep | awk '{print $7}')
o_bw_e=$("$BENCH" -t tag_bw -s 1048576 -n "$BW_N" --mode event | field MiBps)
row "tag_bw 1 MiB, event/sleep (MiB/s)" "$p_bw_s" "$o_bw_e" "$o_bw_e/$p_bw_s"

# Stream and active-message workloads (polling), ours through Endpoint::stream_send/recv and
# UCX-Py-style am_send/am_recv (memory-type header, one allocated buffer per message).
for t in stream_lat ucp_am_lat; do
    p=$(perftest "$t" 8 "$LAT_N" | awk '{print $3}')
    o=$("$BENCH" -t "$t" -s 8 -n "$LAT_N" --mode polling | field median_us)
    row "$t 8 B, polling (µs)" "$p" "$o" "$o/$p"
done
for t in stream_bw ucp_am_bw; do
    p=$(perftest "$t" 1048576 "$BW_N" | awk '{print $7}')
    o=$("$BENCH" -t "$t" -s 1048576 -n "$BW_N" --mode polling | field MiBps)
    row "$t 1 MiB, polling (MiB/s)" "$p" "$o" "$o/$p"
done
