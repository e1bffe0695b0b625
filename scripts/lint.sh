#!/usr/bin/env bash
# Formatting, clippy with warnings as errors, and a check build of the `cuda` feature (which
# needs no GPU: see ci-support/cuda-check.sh). Expects scripts/setup.sh to have run.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
export VIRTUAL_ENV="$ROOT/.venv" PATH="$ROOT/.venv/bin:$PATH"
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --quiet -- -D warnings
cargo clippy -p ucx-async --features tracing --all-targets --quiet -- -D warnings
bash ci-support/cuda-check.sh
