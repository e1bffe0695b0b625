#!/usr/bin/env bash
# The long forms of the reliability tests (issue 15), one command: 1 000 000 fuzzed inputs per
# decoder of peer input (worker addresses, handshakes, control messages, AM headers, send_obj
# lengths), and 100 rounds of killing each side of every bench workload in every progress
# mode (3 600 kills). CI runs the short forms (20 000 addresses, 1 round) in scripts/test.sh.
# Expects scripts/setup.sh to have run.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
export VIRTUAL_ENV="$ROOT/.venv" PATH="$ROOT/.venv/bin:$PATH"
UCX_FUZZ_CASES="${UCX_FUZZ_CASES:-1000000}" \
    cargo test --release -p ucx-core --test address_fuzz --test wire_fuzz -- --nocapture
cargo build --release -p ucx-async --examples --quiet
UCX_ASYNC_KILL_ROUNDS="${UCX_ASYNC_KILL_ROUNDS:-100}" \
    cargo test --release -p ucx-async --test peer_kill -- --nocapture
