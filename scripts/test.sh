#!/usr/bin/env bash
# Every test: set up (idempotent), then the Rust tests (real UCX over loopback) and the Python
# tests against the installed extension.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/setup.sh"
cd "$ROOT"
cargo test --workspace
cargo test -p ucx-async --features tracing --test tracing
python -m pytest -q python/tests
