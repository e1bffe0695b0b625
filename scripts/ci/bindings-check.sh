#!/usr/bin/env bash
# Checks that ucx-core's shipped UCX bindings (crates/ucx-core/bindings/ucx-1.18.rs, used by every
# build without feature `bindgen`) are exactly what feature `bindgen` generates from UCX 1.18's
# headers, so that they cannot drift from build.rs's settings or from the headers unnoticed.
# With --write, replaces the shipped file with the generated one instead (after changing
# build.rs's bindgen settings, or to move to another UCX version's headers).
#
# Needs libclang (installed with apt-get when missing, as scripts/setup.sh installs packages)
# and UCX 1.18's headers: the libucx-cu12 1.18.1 wheel from PyPI, downloaded once into
# target/ucx-1.18 (pip download; nothing is installed). Run from anywhere.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
say() { printf '[bindings-check] %s\n' "$*"; }

SHIPPED=crates/ucx-core/bindings/ucx-1.18.rs
WHEEL_VERSION=1.18.1
UCX118="$ROOT/target/ucx-1.18"
TARGET="$ROOT/target/bindings-check"

if ! dpkg -s libclang-dev >/dev/null 2>&1; then
    say "installing libclang-dev (bindgen's libclang)"
    SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq libclang-dev >/dev/null
fi

PY="$ROOT/.venv/bin/python"
[ -x "$PY" ] || PY=python3
if [ ! -f "$UCX118/libucx/include/ucp/api/ucp_version.h" ]; then
    say "downloading libucx-cu12==$WHEEL_VERSION (for its headers) into $UCX118"
    rm -rf "$UCX118" && mkdir -p "$UCX118"
    "$PY" -m pip download -q --no-deps --only-binary=:all: -d "$UCX118" "libucx-cu12==$WHEEL_VERSION"
    "$PY" -m zipfile -e "$UCX118"/libucx_cu12-*.whl "$UCX118"
fi
grep -q 'define UCP_API_MINOR *18$' "$UCX118/libucx/include/ucp/api/ucp_version.h" ||
    { say "FAIL $UCX118 does not hold UCX 1.18's headers"; exit 1; }

# UCX_DIR: build.rs reads these headers and nothing else. The build script's OUT_DIR holds
# the generated file; cargo names it in its JSON messages.
say "generating the bindings from UCX $WHEEL_VERSION's headers (cargo build -p ucx-core --features bindgen)"
out_dir="$(UCX_DIR="$UCX118/libucx" CARGO_TARGET_DIR="$TARGET" \
    cargo build -p ucx-core --features bindgen --quiet --message-format=json |
    "$PY" -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "build-script-executed" and m["package_id"].split("#")[0].endswith("ucx-core"):
        print(m["out_dir"])
')"
generated="$out_dir/bindings.rs"
[ -f "$generated" ] || { say "FAIL no bindings.rs in the build script's output ($out_dir)"; exit 1; }

if [ "${1:-}" = "--write" ]; then
    cp "$generated" "$SHIPPED"
    say "wrote $SHIPPED"
elif diff -u "$SHIPPED" "$generated" >"$TARGET/bindings.diff"; then
    say "PASS $SHIPPED is what bindgen generates from UCX $WHEEL_VERSION's headers"
else
    head -60 "$TARGET/bindings.diff"
    say "FAIL $SHIPPED differs from what bindgen generates (full diff: $TARGET/bindings.diff);"
    say "     run scripts/ci/bindings-check.sh --write if the change is meant"
    exit 1
fi
