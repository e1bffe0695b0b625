#!/usr/bin/env bash
# Formatting, clippy with warnings as errors, a check build of the `cuda` feature (which
# needs no GPU: see scripts/ci/cuda-check.sh), the MSRV check of the dependencies
# (scripts/ci/msrv-deps.py), `cargo publish --dry-run` of ucx-core,
# ucx-async and ucx-topology (packaged, then built from the packages), their docs built as
# docs.rs builds them, with no UCX (ucx-topology needs no hwloc to build: it opens it at run
# time), and the check of ucx-core's shipped bindings (scripts/ci/bindings-check.sh). Expects
# scripts/setup.sh to have run.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
export VIRTUAL_ENV="$ROOT/.venv" PATH="$ROOT/.venv/bin:$PATH"
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --quiet -- -D warnings
cargo clippy -p ucx-async --features tracing --all-targets --quiet -- -D warnings
bash scripts/ci/cuda-check.sh
# MSRV: the dependencies' declared rust-version (clippy's incompatible_msrv covers our code).
cargo metadata --format-version 1 --all-features | python3 scripts/ci/msrv-deps.py
# The workspace's examples and benches live outside the crates and are left out of the
# packages (cargo warns that it ignores them).
# The dry run verifies ucx-async against ucx-core as a registry crate, and cargo takes a
# registry crate's name and version as proof that nothing changed: it reused both its
# extracted sources and its compiled artifacts from an earlier dry run, and verified ucx-async
# against a stale ucx-core. So the dry run gets its own target directory, and our crates'
# extracted copies and build fingerprints there are dropped first (their dependencies stay
# built).
PUBLISH_TARGET="$ROOT/target/publish-check"
rm -rf "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/ucx-core-[0-9]* "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/ucx-async-[0-9]* \
    "$PUBLISH_TARGET"/debug/.fingerprint/ucx-core-* "$PUBLISH_TARGET"/debug/.fingerprint/ucx-async-* \
    "$PUBLISH_TARGET"/debug/build/ucx-core-* "$PUBLISH_TARGET"/debug/deps/*ucx_core* "$PUBLISH_TARGET"/debug/deps/*ucx_async*
CARGO_TARGET_DIR="$PUBLISH_TARGET" cargo publish --dry-run --workspace --exclude ucx-py-bindings --allow-dirty --quiet
# docs.rs has no UCX, and the build needs none (ucx-core ships its bindings): UCX_DIR pointing
# at nothing keeps its build script from finding one. Its own target dir, since that changes
# ucx-core's build output.
env -u VIRTUAL_ENV UCX_DIR=/nonexistent RUSTDOCFLAGS="-D warnings" CARGO_TARGET_DIR="$ROOT/target/docs-rs" \
    cargo doc -p ucx-core -p ucx-async -p ucx-topology --no-deps --quiet
# The shipped UCX bindings are what feature `bindgen` generates from UCX 1.18's headers (needs
# libclang, which the default build does not: the script installs it).
bash scripts/ci/bindings-check.sh
