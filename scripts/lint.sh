#!/usr/bin/env bash
# Formatting, clippy with warnings as errors, a check build of the `cuda` feature (which
# needs no GPU: see ci-support/cuda-check.sh), and `cargo publish --dry-run` of ucx-core and
# ucx-async (packaged, then built from the packages). Expects scripts/setup.sh to have run.
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
cargo publish --dry-run --workspace --exclude ucx-py-bindings --allow-dirty --quiet
