#!/usr/bin/env bash
# The long forms of the reliability tests, one command: 1 000 000 fuzzed inputs per
# decoder of peer input (worker addresses, handshakes, control messages, AM headers, send_obj
# lengths, the UCXX multi-frame header), 100 rounds of killing each side of every bench
# workload in every progress mode (3 600 kills), a 10-minute soak, a flood-and-close of
# 5 x 32 MiB and 1 GiB floods of an open endpoint's tag and stream against a 64 MiB cap. CI
# runs the short forms (20 000 cases per decoder, 1 round, a 10 s soak, 4 x 8 MiB, 256 MiB
# against 16 MiB) through scripts/test.sh.
# Expects scripts/setup.sh to have run.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
export VIRTUAL_ENV="$ROOT/.venv" PATH="$ROOT/.venv/bin:$PATH"
UCXA_TEST_FUZZ_CASES="${UCXA_TEST_FUZZ_CASES:-1000000}" \
    cargo test --release -p ucx-core --test address_fuzz --test wire_fuzz -- --nocapture
UCXA_TEST_FUZZ_CASES="${UCXA_TEST_FUZZ_CASES:-1000000}" \
    python -m pytest -q python/tests/test_multi_header_fuzz.py
cargo build --release -p ucx-async --examples --quiet
UCXA_TEST_KILL_ROUNDS="${UCXA_TEST_KILL_ROUNDS:-100}" \
    cargo test --release -p ucx-async --test peer_kill -- --nocapture
python scripts/soak.py --duration 600
python scripts/flood.py
python scripts/flood.py --cap 67108864 --messages 262144
python scripts/flood.py --cap 67108864 --stream --messages 16384 --size 65536
