#!/usr/bin/env bash
# Type-checks and lints ucx-core's `cuda` feature on a machine with no CUDA toolkit and no GPU.
#
# Why the stub: the feature depends on `cust`, whose build scripts (cust and cust_raw, through
# find_cuda_helper) panic with "Could not find a cuda installation" unless some directory
# `<dir>/lib64` exists, looked for in $CUDA_LIBRARY_PATH, /opt/cuda and /usr/local/cuda*. They
# only print link-search paths and `-lcuda`; the FFI bindings ship pre-generated. Linking needs
# a real libcuda, but `cargo check` and `cargo clippy` (tests and examples included) never link,
# so an empty scripts/ci/cuda-stub/lib64 satisfies them. Nothing binary is involved.
#
# The stub is appended to any CUDA_LIBRARY_PATH already set, and an empty directory on the link
# search path changes nothing where a real CUDA exists. Run from anywhere; safe to re-run.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"

STUB="$ROOT/scripts/ci/cuda-stub"
mkdir -p "$STUB/lib64"
export CUDA_LIBRARY_PATH="${CUDA_LIBRARY_PATH:+$CUDA_LIBRARY_PATH:}$STUB"

cargo check -p ucx-core -p ucx-async --features cuda --all-targets --quiet
cargo clippy -p ucx-core -p ucx-async --features cuda --all-targets --quiet -- -D warnings
echo "cuda feature: check and clippy clean (CUDA_LIBRARY_PATH=$CUDA_LIBRARY_PATH)"
