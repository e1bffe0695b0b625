#!/usr/bin/env bash
# Checks the release wheel: the one `maturin build --release` makes, installed where no Rust is.
#
# Why: maturin's default, auditwheel's repair, grafted a copy of UCX (libucp/libucs/libuct/libucm)
# into the wheel. The extension linked that copy, which finds none of UCX's transport modules
# (no CMA, no cuda_copy/cuda_ipc), and `import ucp` loaded the libucx wheel's UCX beside it: two
# UCX in one process. pyproject.toml now skips auditwheel; this script proves the result works.
#
# What it asserts (one line each):
#  (a) the wheel holds no libuc* file; the extension's rpath is $ORIGIN/../libucx/lib (no path of
#      the build machine); a manylinux tag, if the wheel has one, is not older than the glibc
#      symbol versions the extension needs.
#  (b) in a fresh virtualenv (pip, binary wheels only, no cargo on PATH): the extension alone
#      (no `import ucp`, so no libucx.load_library()) finds libucp in site-packages/libucx/lib;
#      after `import ucp` every UCX library mapped is the libucx wheel's; ucp.get_config()
#      works; the context's transports are the ones the wheel's `ucx_info -d` lists.
#  (c) two processes move 4 MiB over CMA (rendezvous, zero-copy read from the peer): counted by
#      UCX_PROTO_INFO=used on both sides. The endpoints have no peer-error handling, because
#      UCX uses CMA only without it (docs/troubleshooting.md, "Slow between processes on one host").
#
# Usage: scripts/check_wheel.sh                  builds the wheel with .venv's maturin, checks it
#        WHEEL=dist/x.whl scripts/check_wheel.sh  checks a wheel built elsewhere
# Needs: scripts/setup.sh's .venv (maturin, libucx-cu12), readelf, and PyPI (libucx-cu12 and
# numpy, the wheel's dependencies, are installed into the fresh virtualenv).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

START=$SECONDS
TMP="$(mktemp -d "${TMPDIR:-/tmp}/check_wheel.XXXXXX")"
SERVER_PID=""
cleanup() {
    if [ -n "$SERVER_PID" ]; then kill "$SERVER_PID" 2>/dev/null || true; fi
    rm -rf "$TMP"
}
trap cleanup EXIT
say() { printf '[check_wheel] %s\n' "$*"; }
fail() { say "FAIL $*"; exit 1; }

# 1. The wheel, built the release way: no flags beyond --release, so pyproject.toml decides.
if [ -z "${WHEEL:-}" ]; then
    say "building: maturin build --release"
    # .venv as for `maturin develop`: crates/ucx-core/build.rs finds its libucx wheel. A
    # target directory of its own: `maturin develop` patches an rpath to .venv into the
    # extension it leaves in target/, and a release build there would reuse that file as is.
    if ! CARGO_TARGET_DIR="$ROOT/target/wheel-check" VIRTUAL_ENV="$ROOT/.venv" PATH="$ROOT/.venv/bin:$PATH" timeout 1800 \
        "$ROOT/.venv/bin/maturin" build --release --out "$TMP/dist" >"$TMP/build.log" 2>&1; then
        cat "$TMP/build.log"
        fail "maturin build --release"
    fi
    WHEEL="$(ls "$TMP"/dist/*.whl)"
    say "built in $((SECONDS - START)) s"
fi
WHEEL="$(cd "$(dirname "$WHEEL")" && pwd)/$(basename "$WHEEL")"
say "wheel: $(basename "$WHEEL")"

# (a) Nothing of UCX inside; the extension's rpath; the platform tag.
"$ROOT/.venv/bin/python" -m zipfile -l "$WHEEL" >"$TMP/listing"
if grep -E '(^|/)libuc[^/ ]*|\.libs/' "$TMP/listing"; then
    fail "(a) the wheel bundles UCX libraries (above)"
fi
say "PASS (a) no libuc* file and no .libs/ in the wheel; its shared objects: $(grep -oE '[^/ ]+\.so[.0-9]*' "$TMP/listing" | paste -sd' ')"

mkdir "$TMP/unpacked"
"$ROOT/.venv/bin/python" -m zipfile -e "$WHEEL" "$TMP/unpacked"
EXTS=("$TMP"/unpacked/ucp/_ucx_async*.so)
[ -f "${EXTS[0]}" ] || fail "(a) no extension ucp/_ucx_async*.so in the wheel"
EXT="${EXTS[0]}"
RUNPATH="$(readelf -d "$EXT" | sed -n 's/.*(R\(UN\)\{0,1\}PATH).*\[\(.*\)\]/\2/p' | paste -sd:)"
case ":$RUNPATH:" in
    *':$ORIGIN/../libucx/lib:'*) ;;
    *) fail "(a) the extension's rpath is '$RUNPATH', not \$ORIGIN/../libucx/lib" ;;
esac
if tr ':' '\n' <<<"$RUNPATH" | grep -q '^/'; then
    fail "(a) the extension's rpath '$RUNPATH' holds an absolute path of the build machine"
fi
say "PASS (a) extension rpath: $RUNPATH; NEEDED: $(readelf -d "$EXT" | sed -n 's/.*(NEEDED).*\[\(libuc[^]]*\)\]/\1/p' | paste -sd' ')"

TAG="$(sed -n 's/^Tag: //p' "$TMP"/unpacked/*.dist-info/WHEEL | paste -sd' ')"
GLIBC_MAX="$(readelf -V --wide "$EXT" | grep -o 'GLIBC_2\.[0-9]*' | sort -t. -k2,2n -u | tail -1)"
if [[ "$TAG" =~ manylinux_2_([0-9]+)_ ]]; then
    [ "${GLIBC_MAX#GLIBC_2.}" -le "${BASH_REMATCH[1]}" ] ||
        fail "(a) tag $TAG, but the extension needs $GLIBC_MAX (build in a manylinux container)"
fi
say "PASS (a) tag $TAG; the extension needs $GLIBC_MAX"

# (b) A fresh virtualenv with the wheel, from binaries only and with no cargo on PATH.
unset VIRTUAL_ENV
NOCARGO_PATH=""
IFS=: read -r -a dirs <<<"$PATH"
for d in "${dirs[@]}"; do
    [ -n "$d" ] && [ ! -x "$d/cargo" ] && [ ! -x "$d/rustc" ] && NOCARGO_PATH="$NOCARGO_PATH${NOCARGO_PATH:+:}$d"
done
"$ROOT/.venv/bin/python" -m venv "$TMP/venv"
PY="$TMP/venv/bin/python"
if ! PATH="$TMP/venv/bin:$NOCARGO_PATH" timeout 600 \
    "$PY" -m pip install -q --disable-pip-version-check --only-binary :all: "$WHEEL" >"$TMP/pip.log" 2>&1; then
    cat "$TMP/pip.log"
    fail "(b) pip install of the wheel (binaries only, no cargo)"
fi
say "PASS (b) installed into a fresh venv without cargo: $("$PY" -m pip list --disable-pip-version-check 2>/dev/null | grep -Ei '^(ucx-async|libucx-cu12|numpy) ' | tr -s ' ' | paste -sd, | sed 's/,/, /g')"

cat >"$TMP/probe.py" <<'EOF'
"""Run in the fresh venv: `probe.py rpath` loads only the extension; `probe.py ucp` imports ucp."""
import ctypes
import glob
import os
import re
import subprocess
import sys
import sysconfig

site = sysconfig.get_paths()["platlib"]
libucx_lib = os.path.realpath(os.path.join(site, "libucx", "lib"))


def ucx_mapped():
    """The UCX libraries (libucp/libucs/libuct/libucm and UCX's modules) mapped in this process."""
    paths = set()
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 6 and re.search(r"/libuc[mpst][a-z_]*(-[0-9a-f]+)?\.so", parts[5]):
                paths.add(os.path.realpath(parts[5]))
    return sorted(paths)


def only_the_wheels(paths):
    strays = [p for p in paths if not p.startswith(libucx_lib + os.sep)]
    if strays or not any(os.path.basename(p).startswith("libucp.so") for p in paths):
        sys.exit(f"UCX libraries not (only) from {libucx_lib}: {paths}")


if sys.argv[1] == "rpath":
    ext = glob.glob(os.path.join(site, "ucp", "_ucx_async*.so"))[0]
    ctypes.CDLL(ext)  # the dynamic loader alone: no libucx.load_library(), no LD_LIBRARY_PATH
    mapped = ucx_mapped()
    only_the_wheels(mapped)
    print(f"the extension alone loads {', '.join(os.path.basename(p) for p in mapped)} from {libucx_lib}")
    sys.exit(0)

import libucx  # noqa: E402
import ucp  # noqa: E402

config = ucp.get_config()
if not isinstance(config, dict) or "TLS" not in config:
    sys.exit(f"ucp.get_config() gave {config!r}")
ours = ucp.get_active_transports()  # creates the context
ctx = ucp.core._get_ctx().context
mapped = ucx_mapped()
only_the_wheels(mapped)
if len([p for p in mapped if os.path.basename(p).startswith("libucp.so")]) != 1:
    sys.exit(f"more than one libucp mapped: {mapped}")
print(f"PASS (b) import ucp: UCX {ucp.__ucx_version__}, get_config() has {len(ucp.get_config())} options; "
      f"all {len(mapped)} UCX libraries mapped are the libucx wheel's (modules: "
      f"{', '.join(os.path.basename(p) for p in mapped if '/ucx/' in p) or 'none'})")

root = os.path.dirname(libucx.__file__)
out = subprocess.run(
    [os.path.join(root, "bin", "ucx_info"), "-d"],
    env={**os.environ, "LD_LIBRARY_PATH": os.path.join(root, "lib")},  # its RUNPATH is the wheel builder's
    capture_output=True, text=True, timeout=60, check=True,
).stdout
theirs = set(re.findall(r"^#\s+Transport:\s+(\S+)", out, re.MULTILINE))
if ours != theirs:
    sys.exit(f"transports differ: ucp's context {sorted(ours)}, ucx_info -d {sorted(theirs)}")
missing = [t for t in ("cma", "tcp") if t not in ours] + ([] if {"sysv", "posix"} & ours else ["sysv/posix"])
if missing:
    sys.exit(f"transports {missing} missing from {sorted(ours)}")
if "cuda_copy" in theirs and not ctx.cuda_support:
    sys.exit("ucx_info lists cuda_copy, but the context reports no CUDA support")
print(f"PASS (b) transports: context == ucx_info -d == {sorted(ours)}; cuda_support={ctx.cuda_support} "
      f"(cuda_copy {'listed' if 'cuda_copy' in theirs else 'not listed: no CUDA here'})")
EOF

cd "$TMP"  # so that nothing imports ucp from the source tree
PATH="$TMP/venv/bin:$NOCARGO_PATH" timeout 60 "$PY" probe.py rpath >"$TMP/rpath.out" 2>&1 ||
    { cat "$TMP/rpath.out"; fail "(b) the extension alone does not load the libucx wheel's UCX"; }
say "PASS (b) $(cat "$TMP/rpath.out")"
PATH="$TMP/venv/bin:$NOCARGO_PATH" timeout 120 "$PY" probe.py ucp >"$TMP/ucp.out" 2>&1 ||
    { cat "$TMP/ucp.out"; fail "(b) import ucp in the fresh venv"; }
sed 's/^/[check_wheel] /' "$TMP/ucp.out"

# (c) CMA between two processes: 4 MiB client -> server, rendezvous; a one-byte reply.
cat >"$TMP/xfer.py" <<'EOF'
import asyncio
import sys

import numpy as np

import ucp

N = 4 << 20


async def server():
    done = asyncio.Event()

    async def handler(ep):
        buf = np.empty(N, dtype="u1")
        await ep.recv(buf)
        await ep.send(np.array([(buf == np.arange(N, dtype="u1")).all()], dtype="u1"))
        while not ep.closed():  # the client closes first
            await asyncio.sleep(0.01)
        done.set()

    listener = ucp.create_listener(handler, ip="127.0.0.1", endpoint_error_handling=False)
    print("PORT", listener.port, flush=True)
    await asyncio.wait_for(done.wait(), 60)
    listener.close()


async def client(port):
    ep = await ucp.create_endpoint("127.0.0.1", port, endpoint_error_handling=False)
    await ep.send(np.arange(N, dtype="u1"))
    ok = np.empty(1, dtype="u1")
    await ep.recv(ok)
    print("RECEIVED_INTACT", int(ok[0]), flush=True)
    await ep.close()
    await asyncio.sleep(0.5)  # stay reachable while the server closes its side (a flush)


asyncio.run(server() if sys.argv[1] == "server" else client(int(sys.argv[2])))
EOF
export UCX_PROTO_INFO=used UCX_NET_DEVICES=lo
PATH="$TMP/venv/bin:$NOCARGO_PATH" timeout 90 "$PY" xfer.py server >"$TMP/server.out" 2>&1 &
SERVER_PID=$!
PORT=""
for _ in $(seq 300); do
    PORT="$(sed -n 's/^PORT //p' "$TMP/server.out")"
    [ -n "$PORT" ] && break
    kill -0 "$SERVER_PID" 2>/dev/null || break
    sleep 0.1
done
[ -n "$PORT" ] || { cat "$TMP/server.out"; fail "(c) the server did not start listening"; }
if ! PATH="$TMP/venv/bin:$NOCARGO_PATH" timeout 60 "$PY" xfer.py client "$PORT" >"$TMP/client.out" 2>&1; then
    cat "$TMP/client.out" "$TMP/server.out"
    fail "(c) the client failed"
fi
wait "$SERVER_PID" || { cat "$TMP/server.out"; fail "(c) the server failed"; }
SERVER_PID=""
unset UCX_PROTO_INFO UCX_NET_DEVICES
grep -q '^RECEIVED_INTACT 1' "$TMP/client.out" || { cat "$TMP/client.out"; fail "(c) the 4 MiB arrived damaged"; }
# UCX_PROTO_INFO=used: "| Count | Range | Description | Config |" rows; a used CMA row has Count > 0.
cma_used() { grep -E '\|[[:space:]]*[1-9][0-9]*[[:space:]]*\|.*\|[[:space:]]*cma/' "$1"; }
SEND_ROW="$(cma_used "$TMP/client.out" | head -1)" ||
    { cat "$TMP/client.out"; fail "(c) the sender did not use cma"; }
RECV_ROW="$(cma_used "$TMP/server.out" | head -1)" ||
    { cat "$TMP/server.out"; fail "(c) the receiver did not use cma"; }
say "PASS (c) 4 MiB between two processes over CMA, data intact:"
say "     sender:   $(sed 's/.*\] *//' <<<"$SEND_ROW" | tr -s ' ')"
say "     receiver: $(sed 's/.*\] *//' <<<"$RECV_ROW" | tr -s ' ')"

say "all checks passed in $((SECONDS - START)) s"
