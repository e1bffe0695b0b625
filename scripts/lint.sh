#!/usr/bin/env bash
# Formatting, clippy with warnings as errors, a check build of the `cuda` feature (which
# needs no GPU: see ci-support/cuda-check.sh), `cargo publish --dry-run` of ucx-core and
# ucx-async (packaged, then built from the packages), and their docs built as docs.rs builds
# them, with no UCX. Expects scripts/setup.sh to have run.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
export VIRTUAL_ENV="$ROOT/.venv" PATH="$ROOT/.venv/bin:$PATH"
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --quiet -- -D warnings
cargo clippy -p ucx-async --features tracing --all-targets --quiet -- -D warnings
bash ci-support/cuda-check.sh
# The workspace's examples and benches live outside the crates and are left out of the
# packages (cargo warns that it ignores them).
# Cargo keeps what it extracts from the dry run's temporary registry by crate name and version
# (under a directory named after the registry's path), so a later dry run from the same path
# verified ucx-async against the earlier run's stale ucx-core and failed. Those copies go first
# (cargo extracts them again from its cache when something else needs them).
rm -rf "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/ucx-core-[0-9]* "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/ucx-async-[0-9]*
cargo publish --dry-run --workspace --exclude ucx-py-bindings --allow-dirty --quiet
# docs.rs has no UCX: DOCS_RS makes ucx-core's build script use the bindings in
# crates/ucx-core/docs-rs/ and look for no UCX (UCX_DIR=/nonexistent would fail any search).
# Its own target dir, since DOCS_RS changes ucx-core's build output.
env -u VIRTUAL_ENV DOCS_RS=1 UCX_DIR=/nonexistent RUSTDOCFLAGS="-D warnings" CARGO_TARGET_DIR="$ROOT/target/docs-rs" \
    cargo doc -p ucx-core -p ucx-async --no-deps --quiet
