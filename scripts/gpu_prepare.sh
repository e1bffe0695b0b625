#!/usr/bin/env bash
# Builds .gpu/, the bundle that tests ucx-async's CUDA paths on a GPU machine that has no
# network, no Rust and no UCX. Runs on the (CPU-only) build machine, from the project root:
#
#     bash scripts/gpu_prepare.sh
#
# Then carry .gpu/ along with the working tree to the GPU machine and run `bash .gpu/run.sh`
# there (a copy of scripts/gpu_run.sh; docs/cuda.md, "Testing on a GPU machine"). Safe to
# re-run: the builds are incremental and .gpu/ is replaced only once a complete new bundle is
# ready.
#
# Settings (environment):
#   GPU_SKIP_SETUP=1          do not run scripts/setup.sh (.venv must already be set up)
#   GPU_PYTHON_VERSION=3.12   the GPU machine's Python, for the downloaded wheels
#   GPU_BUNDLE_LIMIT_MIB=60   fail when the bundle is larger than this
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)" # the project's scripts/
say() { printf '\033[1m[gpu-prepare]\033[0m %s\n' "$*" >&2; }
die() {
    say "ERROR: $*"
    exit 1
}

ROOT="$(cd "$HERE/.." && pwd)"
for f in Cargo.toml Cargo.lock scripts/setup.sh crates/ucx-core/Cargo.toml crates/ucx-async/Cargo.toml pyproject.toml; do
    [ -f "$ROOT/$f" ] || die "$ROOT is not the ucx-async project root (no $f)"
done
[ -f "$HERE/gpu_run.sh" ] || die "$HERE/gpu_run.sh is missing (it is copied into the bundle)"
cd "$ROOT"

PYVER="${GPU_PYTHON_VERSION:-3.12}"
LIMIT_MIB="${GPU_BUNDLE_LIMIT_MIB:-60}"
BUNDLE="$ROOT/.gpu"
STAGE="$ROOT/target/gpu-bundle.tmp" # target/ is ignored by git; renamed to .gpu/ at the end
SCRATCH="$(mktemp -d "${TMPDIR:-/tmp}/ucx-async-gpu-prepare.XXXXXX")"
trap 'rm -rf "$SCRATCH"' EXIT
T0=$SECONDS

# ---------------------------------------------------------------- 1. keep .gpu/ out of git
if EXCLUDE="$(git rev-parse --git-path info/exclude 2>/dev/null)"; then
    case "$EXCLUDE" in /*) ;; *) EXCLUDE="$ROOT/$EXCLUDE" ;; esac
    mkdir -p "$(dirname "$EXCLUDE")"
    if ! grep -qxF '/.gpu/' "$EXCLUDE" 2>/dev/null; then
        echo '/.gpu/' >>"$EXCLUDE"
        say "added /.gpu/ to $EXCLUDE"
    fi
else
    say "not a git checkout: .gpu/ is not added to any exclude file"
fi

# ---------------------------------------------------------------- 2. the project's own set-up
if [ "${GPU_SKIP_SETUP:-0}" = 1 ]; then
    say "GPU_SKIP_SETUP=1: using .venv as it is"
else
    say "running scripts/setup.sh (the project's set-up: .venv with the UCX wheel, the workspace)"
    bash scripts/setup.sh
fi
[ -x .venv/bin/python ] || die ".venv/bin/python is missing: run scripts/setup.sh"
export VIRTUAL_ENV="$ROOT/.venv"
export PATH="$VIRTUAL_ENV/bin:$PATH"
VPY="$VIRTUAL_ENV/bin/python"
command -v maturin >/dev/null || die "maturin is not in .venv: run scripts/setup.sh"
for tool in cargo gcc readelf tar xz; do
    command -v "$tool" >/dev/null || die "$tool is needed and not found"
done

# The UCX wheel in .venv: its distribution, version, files and the lib dir the binaries link.
"$VPY" - >"$SCRATCH/libucx.env" <<'EOF' || die "the UCX wheel (libucx) is not importable from .venv"
import importlib.metadata as md, os, shlex
import libucx
dist = md.packages_distributions()["libucx"][0]
d = md.distribution(dist)
tags = [l.split(":", 1)[1].strip() for l in (d.read_text("WHEEL") or "").splitlines() if l.startswith("Tag:")]
prefix = os.path.dirname(libucx.__file__)
print(f"UCX_DIST={shlex.quote(d.metadata['Name'])}")
print(f"UCX_DIST_VERSION={shlex.quote(d.version)}")
print(f"UCX_WHEEL_TAGS={shlex.quote(' '.join(tags))}")
print(f"UCX_SITE={shlex.quote(os.path.dirname(prefix))}")
print(f"UCX_PREFIX={shlex.quote(prefix)}")
print(f"UCX_BUILD_LIBDIR={shlex.quote(os.path.join(prefix, 'lib'))}")
EOF
# shellcheck disable=SC1091
. "$SCRATCH/libucx.env"
say "UCX wheel in .venv: $UCX_DIST $UCX_DIST_VERSION ($UCX_WHEEL_TAGS)"
# Its installed files go into the bundle as they are; that only works on the GPU machine's
# Python if the wheel is not tied to one CPython version (the libucx wheels are py3-none-*).
for tag in $UCX_WHEEL_TAGS; do
    case "$tag" in py3-none-*) ;; *) die "the UCX wheel's tag $tag is specific to a Python version; carry the cp${PYVER/./} wheel instead" ;; esac
done

# ---------------------------------------------------------------- 3. link-only libcuda stub
# cust_raw links libcuda; the build machine has no driver. The stub has the soname
# libcuda.so.1 and every cu* function cust_raw binds (each returns 34, CUDA_ERROR_STUB_LIBRARY);
# it is on the link path only, so the binaries load the real driver's libcuda.so.1. Its
# directory is stable on purpose: cust_raw's build script re-runs (and everything above it is
# rebuilt) whenever CUDA_LIBRARY_PATH changes.
CUST_RAW_VERSION="$(awk '/^\[\[package\]\]/{n=""} /^name = "cust_raw"$/{n=1} n && /^version = /{gsub(/"/,"",$3); print $3; exit}' Cargo.lock)"
[ -n "$CUST_RAW_VERSION" ] || die "cust_raw is not in Cargo.lock (did the cuda feature change?)"
find_cust_raw() {
    local d
    for d in "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/"cust_raw-$CUST_RAW_VERSION"; do
        [ -d "$d" ] && {
            echo "$d"
            return 0
        }
    done
    return 1
}
CUST_RAW_SRC="$(find_cust_raw)" || {
    say "fetching crates (cust_raw $CUST_RAW_VERSION is not in the cargo registry yet)"
    cargo fetch
    CUST_RAW_SRC="$(find_cust_raw)" || die "cust_raw-$CUST_RAW_VERSION not found under ${CARGO_HOME:-$HOME/.cargo}/registry/src"
}
STUB="${TMPDIR:-/tmp}/ucx-async-cudastub-$(id -u)/cust_raw-$CUST_RAW_VERSION"
mkdir -p "$STUB/lib64"
grep -rhoE 'pub fn cu[A-Za-z0-9_]+' "$CUST_RAW_SRC/src" | sed 's/^pub fn //' | sort -u >"$SCRATCH/cu_syms.txt"
NSYMS=$(wc -l <"$SCRATCH/cu_syms.txt")
[ "$NSYMS" -gt 50 ] || die "found only $NSYMS cu* functions in $CUST_RAW_SRC/src"
sed 's/.*/int &(void) { return 34; }/' "$SCRATCH/cu_syms.txt" >"$SCRATCH/stub.c"
if ! cmp -s "$SCRATCH/stub.c" "$STUB/stub.c" || [ ! -f "$STUB/lib64/libcuda.so" ]; then
    cp "$SCRATCH/stub.c" "$STUB/stub.c"
    gcc -shared -fPIC -O1 -Wl,-soname,libcuda.so.1 -o "$STUB/lib64/libcuda.so" "$STUB/stub.c"
    say "libcuda stub: $NSYMS functions of cust_raw $CUST_RAW_VERSION -> $STUB/lib64/libcuda.so"
else
    say "libcuda stub: $STUB/lib64/libcuda.so is up to date ($NSYMS functions of cust_raw $CUST_RAW_VERSION)"
fi
export CUDA_LIBRARY_PATH="$STUB"

# ---------------------------------------------------------------- 4. Rust binaries
rm -rf "$STAGE"
mkdir -p "$STAGE/wheels" "$STAGE/pydeps" "$SCRATCH/rust"
cargo metadata --no-deps --format-version 1 >"$SCRATCH/metadata.json"
for pkg in ucx-core ucx-async; do
    say "cargo test --release --no-run -p $pkg --features cuda"
    cargo test --release --no-run -p "$pkg" --features cuda \
        --message-format=json-render-diagnostics >"$SCRATCH/cargo-test-$pkg.json" ||
        die "building $pkg's tests with --features cuda failed"
done
# Examples of the workspace that need the cuda feature (required-features), per package.
mapfile -t CUDA_EXAMPLES < <("$VPY" - "$SCRATCH/metadata.json" <<'EOF'
import json, sys
meta = json.load(open(sys.argv[1]))
for p in meta["packages"]:
    for t in p["targets"]:
        if "example" in t["kind"] and "cuda" in t.get("required-features", []):
            print(p["name"], t["name"])
EOF
)
[ "${#CUDA_EXAMPLES[@]}" -gt 0 ] || die "no example of the workspace requires the cuda feature (echo_cuda expected)"
: >"$SCRATCH/cargo-examples.json"
for pe in "${CUDA_EXAMPLES[@]}"; do
    read -r pkg ex <<<"$pe"
    say "cargo build --release -p $pkg --features cuda --example $ex"
    cargo build --release -p "$pkg" --features cuda --example "$ex" \
        --message-format=json-render-diagnostics >>"$SCRATCH/cargo-examples.json" ||
        die "building example $ex failed"
done
# The executables cargo reported: test binaries (profile.test) and the examples asked for.
"$VPY" - "$SCRATCH/metadata.json" "$SCRATCH/rust" "$SCRATCH/cargo-examples.json" "$SCRATCH"/cargo-test-*.json <<'EOF' || die "collecting the Rust executables failed"
import json, os, shutil, sys
meta = json.load(open(sys.argv[1]))
dest, examples_json = sys.argv[2], sys.argv[3]
pkg_of = {p["manifest_path"]: p["name"] for p in meta["packages"]}
rows, seen = [], set()
for path in sys.argv[3:]:
    for line in open(path):
        if not line.startswith("{"):
            continue
        m = json.loads(line)
        if m.get("reason") != "compiler-artifact" or not m.get("executable"):
            continue
        t = m["target"]
        if path == examples_json:  # `cargo build --example`: the cuda examples asked for
            if "example" not in t["kind"]:
                continue
            kind = "example"
        elif m["profile"]["test"]:  # `cargo test --no-run`: test harness binaries
            kind = "lib" if "lib" in t["kind"] else t["kind"][0]
        else:  # examples, bins that `cargo test` also builds
            continue
        pkg = pkg_of.get(m["manifest_path"], os.path.basename(os.path.dirname(m["manifest_path"])))
        name = f"{pkg}.{kind}.{t['name']}"
        if name in seen:
            continue
        seen.add(name)
        shutil.copy2(m["executable"], os.path.join(dest, name))
        rows.append((name, pkg, kind, t["name"]))
if not rows:
    sys.exit("cargo reported no executables")
with open(os.path.join(dest, "manifest.tsv"), "w") as f:
    f.write("# file\tpackage\tkind\ttarget  (built with --features cuda; kind: lib = unit tests, test, example)\n")
    for r in sorted(rows):
        f.write("\t".join(r) + "\n")
for r in sorted(rows):
    print("   ", r[0], file=sys.stderr)
EOF
# The stub must not be what the binaries load: no RPATH/RUNPATH may point at it.
for b in "$SCRATCH"/rust/*.*.*; do
    if readelf -d "$b" | grep -E 'R(UN)?PATH' | grep -qF "$STUB"; then
        die "$(basename "$b") has the libcuda stub's directory in its run path"
    fi
done
say "packing $(grep -vc '^#' "$SCRATCH/rust/manifest.tsv") Rust executables"
XZ_OPT="${XZ_OPT:--6}" tar -cJf "$STAGE/rust-bin.tar.xz" -C "$SCRATCH/rust" .

# ---------------------------------------------------------------- 5. the Python wheel
# --auditwheel skip: the extension links the UCX wheel's libraries, as `maturin develop` and
# `pip install .` do. (The default repair copies UCX into the wheel, and that copy finds no
# CUDA transports.)
build_wheel() {
    rm -rf "$SCRATCH/dist"
    maturin build --release --auditwheel skip -o "$SCRATCH/dist" >"$SCRATCH/maturin.log" 2>&1 || {
        cat "$SCRATCH/maturin.log" >&2
        die "maturin build failed"
    }
}
wheel_needed() { # prints the extension's NEEDED entries
    "$VPY" - "$1" "$SCRATCH/ext.so" <<'EOF'
import sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
so = [n for n in z.namelist() if n.startswith("ucp/_ucx_async") and n.endswith(".so")]
open(sys.argv[2], "wb").write(z.read(so[0]))
EOF
    readelf -d "$SCRATCH/ext.so" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'
}
say "maturin build --release --auditwheel skip"
build_wheel
WHEEL="$(ls "$SCRATCH"/dist/*.whl)"
if ! wheel_needed "$WHEEL" | grep -qx 'libucp.so.0'; then
    # An earlier default (repairing) `maturin build` patches target/maturin's extension in place.
    say "the extension links a renamed UCX (left by an earlier auditwheel repair): rebuilding target/maturin"
    rm -rf target/maturin
    build_wheel
    WHEEL="$(ls "$SCRATCH"/dist/*.whl)"
    wheel_needed "$WHEEL" | grep -qx 'libucp.so.0' || die "the wheel's extension does not link libucp.so.0: $(wheel_needed "$WHEEL" | tr '\n' ' ')"
fi
cp "$WHEEL" "$STAGE/wheels/"
say "wheel: $(basename "$WHEEL")"

# ---------------------------------------------------------------- 6. the UCX wheel's files
# libucx/, <dist>.libs/ and the dist-info as installed in .venv, without static libraries;
# identical files (libucp.so, .so.0, .so.0.0.0, ...) become hard links before packing.
say "packing $UCX_DIST $UCX_DIST_VERSION's installed files (no .a/.la)"
"$VPY" - "$UCX_SITE" "$SCRATCH/libucx-site" <<'EOF' || die "copying the UCX wheel's files failed"
import hashlib, importlib.metadata as md, os, shutil, sys
site, dest = sys.argv[1], sys.argv[2]
dist = md.distribution(md.packages_distributions()["libucx"][0])
tops = sorted({str(f).split("/")[0] for f in dist.files if not str(f).startswith("..")})
os.makedirs(dest)
ignore = shutil.ignore_patterns("*.a", "*.la", "__pycache__")
for top in tops:
    src = os.path.join(site, top)
    if os.path.isdir(src):
        shutil.copytree(src, os.path.join(dest, top), symlinks=True, ignore=ignore)
    elif os.path.isfile(src) and not src.endswith((".a", ".la")):
        shutil.copy2(src, os.path.join(dest, top))
first, linked = {}, 0
for d, _, files in os.walk(dest):
    for f in sorted(files):
        p = os.path.join(d, f)
        if os.path.islink(p) or os.path.getsize(p) < 65536:
            continue
        h = hashlib.sha256(open(p, "rb").read()).hexdigest()
        if h in first:
            os.unlink(p)
            os.link(first[h], p)
            linked += 1
        else:
            first[h] = p
print(f"    {' '.join(tops)}; {linked} duplicate files hard-linked", file=sys.stderr)
EOF
XZ_OPT="${XZ_OPT:--6}" tar -cJf "$STAGE/libucx-site.tar.xz" -C "$SCRATCH/libucx-site" .

# ---------------------------------------------------------------- 7. wheels for the GPU machine
# Python $PYVER manylinux wheels of what the tests need beyond the GPU machine's own Python
# (numpy, CuPy and numba are there): distributed/dask and their dependencies for the Dask
# device-frame test, pytest in case it is missing. run.sh installs only the ones that machine
# lacks. UCX itself travels as libucx-site.tar.xz (same files as the wheel, a fifth the size).
DASK_REQ="distributed>=2026.1"
DV="$("$VPY" -c 'import importlib.metadata as m; print(m.version("distributed"))' 2>/dev/null || true)"
[ -n "$DV" ] && DASK_REQ="distributed==$DV"
say "pip download (Python $PYVER manylinux wheels): $DASK_REQ pytest"
"$VPY" -m pip download -q -d "$STAGE/pydeps" --only-binary=:all: \
    --python-version "$PYVER" --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    "$DASK_REQ" pytest || die "pip download failed (the package index must be reachable from here)"

# ---------------------------------------------------------------- 8. tests, examples, run.sh
mkdir -p "$STAGE/python" "$STAGE/examples"
cp -r python/tests "$STAGE/python/tests"
cp -r examples/python "$STAGE/examples/python"
find "$STAGE/python" "$STAGE/examples" -name __pycache__ -prune -exec rm -rf {} +
cp "$HERE/gpu_run.sh" "$STAGE/run.sh"
{
    echo "# Written by prepare.sh; read by run.sh."
    printf 'BUILT_AT=%q\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    printf 'BUILT_FROM=%q\n' "$(git describe --always --dirty 2>/dev/null || echo unknown)"
    printf 'BUILD_ROOT=%q\n' "$ROOT"
    printf 'UCX_DIST=%q\n' "$UCX_DIST"
    printf 'UCX_DIST_VERSION=%q\n' "$UCX_DIST_VERSION"
    printf 'UCX_BUILD_LIBDIR=%q\n' "$UCX_BUILD_LIBDIR"
    printf 'CUST_RAW_VERSION=%q\n' "$CUST_RAW_VERSION"
    printf 'PYTHON_VERSION=%q\n' "$PYVER"
} >"$STAGE/build.env"

# ---------------------------------------------------------------- 9. size, then swap in
BYTES=$(du -sb "$STAGE" | cut -f1)
MIB=$(awk -v b="$BYTES" 'BEGIN { printf "%.1f", b / 1048576 }')
(cd "$STAGE" && du -ah --max-depth=1 . | sort -k2 | sed 's/^/    /') >&2
if [ "$BYTES" -gt $((LIMIT_MIB * 1048576)) ]; then
    die "the bundle is $MIB MiB, over the $LIMIT_MIB MiB limit (left in $STAGE; .gpu/ unchanged)"
fi
rm -rf "$BUNDLE"
mv "$STAGE" "$BUNDLE"
say "bundle ready: $BUNDLE, $MIB MiB in all (limit $LIMIT_MIB MiB), $((SECONDS - T0)) s"
say "next: carry .gpu/ to the GPU machine with the working tree and run: bash .gpu/run.sh"
