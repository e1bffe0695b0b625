#!/usr/bin/env bash
# Sets up .venv-ucxx, the venv in which scripts/bench_dask.py compares our `ucxa` Dask comm with
# distributed-ucxx's `ucxx` (and tcp). CPU-only works. Idempotent; builds nothing (our extension
# must have been built into python/ucp already, by scripts/setup.sh).
#   bash scripts/setup_bench_ucxx.sh && .venv-ucxx/bin/python scripts/bench_dask.py
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${VENV:-.venv-ucxx}
# The same distributed as the project venv (distributed-ucxx 0.52 pins 2026.7.1 through
# rapids-dask-dependency 26.10, hence --no-deps below).
DISTRIBUTED_VERSION=$(.venv/bin/python -c 'from importlib.metadata import version; print(version("distributed"))' 2>/dev/null || echo 2026.8.0)

# UCXX with our UCX (scripts/ucxx-venv.sh, which also pins UCXX_VERSION), then Dask and
# distributed-ucxx on top.
# shellcheck source=scripts/ucxx-venv.sh
source scripts/ucxx-venv.sh
ucxx_venv "$PWD/$VENV"
pip=("$VENV/bin/python" -m pip)
"${pip[@]}" install -q "dask==$DISTRIBUTED_VERSION" "distributed==$DISTRIBUTED_VERSION" pandas pyarrow pyyaml
"${pip[@]}" install -q --no-deps "distributed-ucxx-cu12==$UCXX_VERSION"

# Our ucp from this checkout, installed into the venv by maturin as into .venv (an editable
# install with our entry points: spawned Dask workers find the `ucxa` scheme through them).
# UCX_PYTHON makes the build find UCX through .venv, as scripts/setup.sh's did, so cargo reuses
# that build instead of compiling again (its dependencies are there already, libucx pinned).
UCX_PYTHON="$PWD/.venv/bin/python" VIRTUAL_ENV="$PWD/$VENV" \
    .venv/bin/maturin develop --release >"$VENV/maturin.log" 2>&1 ||
    { cat "$VENV/maturin.log" >&2; exit 1; }

"$VENV/bin/python" - <<'EOF'
from importlib.metadata import version

import distributed_ucxx  # noqa: F401
import ucp
from distributed.comm.registry import get_backend

get_backend("ucxa"), get_backend("ucxx")
print("ok:", ", ".join(f"{d} {version(d)}" for d in ("distributed", "distributed-ucxx-cu12", "ucxx-cu12", "libucx-cu12")))
EOF
