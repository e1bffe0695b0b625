#!/usr/bin/env bash
# Runs ucx-core's loopback, leak and two-process tests and ucx-async's loopback tests under
# valgrind memcheck (errors fail the run). Slow (minutes); not part of scripts/test.sh.
# Expects scripts/setup.sh to have run.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
export VIRTUAL_ENV="$ROOT/.venv" PATH="$ROOT/.venv/bin:$PATH"
command -v valgrind >/dev/null || { echo "valgrind not found (apt-get install valgrind)"; exit 1; }
for target in ucx-core:loopback ucx-core:leaks ucx-core:two_process ucx-async:loopback; do
    pkg=${target%%:*} t=${target##*:}
    bin=$(cargo test -p "$pkg" --test "$t" --no-run --message-format=json 2>/dev/null |
        python3 -c 'import json,sys; print([j["executable"] for j in map(json.loads, sys.stdin) if j.get("executable")][-1])')
    echo "== valgrind: $pkg $t"
    valgrind --error-exitcode=99 --leak-check=no -q --suppressions="$ROOT/scripts/valgrind-ucx.supp" "$bin" --test-threads=1
done
