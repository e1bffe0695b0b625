#!/usr/bin/env bash
# Every test: set up (idempotent; also .venv-ucxx, UCXX for the interop tests), then the Rust
# tests (real UCX over loopback), a new crate built on ucx-async alone, and the Python tests
# against the installed extension.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/setup.sh"
cd "$ROOT"
# Real UCXX (PyPI ucxx-cu12) in .venv-ucxx, for python/tests/test_interop_ucxx.py.
source "$ROOT/scripts/ucxx-venv.sh"
ucxx_venv
cargo test --workspace
# A new user's crate (ucx-async and tokio only, no build.rs) runs the README's example.
bash "$ROOT/scripts/fresh_crate.sh"
cargo test -p ucx-async --features tracing --test tracing
python -m pytest -q python/tests
