#!/usr/bin/env bash
# Sets up .venv-ucxx, the venv in which scripts/bench_dask.py compares our `ucxa` Dask comm with
# distributed-ucxx's `ucxx` (and tcp). CPU-only works. Idempotent; builds nothing (our extension
# must have been built into python/ucp already, by scripts/setup.sh).
#   bash scripts/setup_bench_ucxx.sh && .venv-ucxx/bin/python scripts/bench_dask.py
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${VENV:-.venv-ucxx}
UCXX_VERSION=0.52.0
# The same distributed as the project venv (distributed-ucxx 0.52 pins 2026.7.1 through
# rapids-dask-dependency 26.10, hence --no-deps below).
DISTRIBUTED_VERSION=$(.venv/bin/python -c 'from importlib.metadata import version; print(version("distributed"))' 2>/dev/null || echo 2026.8.0)

# UCXX with our UCX (scripts/ucxx-venv.sh), then Dask and distributed-ucxx on top.
# shellcheck source=scripts/ucxx-venv.sh
source scripts/ucxx-venv.sh
UCXX_PIP_VERSION=$UCXX_VERSION ucxx_venv "$PWD/$VENV"
pip=("$VENV/bin/python" -m pip)
"${pip[@]}" install -q "dask==$DISTRIBUTED_VERSION" "distributed==$DISTRIBUTED_VERSION" pandas pyarrow pyyaml
"${pip[@]}" install -q --no-deps "distributed-ucxx-cu12==$UCXX_VERSION"

# Our ucp from this checkout, as `maturin develop` registers it in .venv: a .pth file and a
# dist-info carrying the `ucxa` entry point (spawned workers find the scheme through it).
site=$("$VENV/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
echo "$PWD/python" > "$site/ucx_async.pth"
info="$site/ucx_async-0.1.0.dist-info"
mkdir -p "$info"
printf 'Metadata-Version: 2.1\nName: ucx-async\nVersion: 0.1.0\nSummary: ucp from %s (registered by scripts/setup_bench_ucxx.sh)\n' "$PWD/python" > "$info/METADATA"
printf '[distributed.comm.backends]\nucxa=ucp.dask_comm:UCXABackend\n' > "$info/entry_points.txt"
printf 'manual\n' > "$info/INSTALLER"
printf '%s\n' ucx_async.pth,, ucx_async-0.1.0.dist-info/METADATA,, ucx_async-0.1.0.dist-info/entry_points.txt,, \
    ucx_async-0.1.0.dist-info/INSTALLER,, ucx_async-0.1.0.dist-info/RECORD,, > "$info/RECORD"

"$VENV/bin/python" - <<'EOF'
from importlib.metadata import version

import distributed_ucxx  # noqa: F401
import ucp
from distributed.comm.registry import get_backend

get_backend("ucxa"), get_backend("ucxx")
print("ok:", ", ".join(f"{d} {version(d)}" for d in ("distributed", "distributed-ucxx-cu12", "ucxx-cu12", "libucx-cu12")))
EOF
