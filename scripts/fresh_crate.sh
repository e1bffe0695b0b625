#!/usr/bin/env bash
# A new user's crate, built and run the way `cargo add ucx-async tokio` leaves it: it depends on
# ucx-async (by path, as a published version would be) and tokio only, has no build.rs, and its
# main.rs is the README's ucx-async example, extracted from README.md. `cargo run` must build and
# run it with no LD_LIBRARY_PATH, no virtualenv active and nothing else set (ucx-core opens UCX at
# run time: crates/ucx-core/src/library.rs). Then the same binary with UCX_DIR pointing at
# nothing must fail with the error naming it, not with the dynamic loader's.
#
# Then the build with neither libclang nor UCX (ucx-core ships its UCX bindings): UCX_DIR
# pointing at nothing (ucx-core's build script then looks nowhere else) and LIBCLANG_PATH at an
# empty directory (bindgen's clang-sys then looks nowhere else). That must build, with no bindgen
# in the crate's graph and no UCX directory noted in the binary, and the binary must run against
# the libucx wheel found at run time through the active virtualenv. Two controls prove that this
# environment hides each: a crate needing bindgen (ucx-core's feature `bindgen`) must fail to
# build in it, once for the headers (UCX_DIR at nothing) and once for libclang (UCX_DIR at the
# wheel, whose headers are there).
#
# Usage: scripts/fresh_crate.sh   (scripts/test.sh runs it; needs scripts/setup.sh's .venv)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TMP="$(mktemp -d "${TMPDIR:-/tmp}/fresh_crate.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT
say() { printf '[fresh_crate] %s\n' "$*"; }
fail() { say "FAIL $*"; exit 1; }

mkdir -p "$TMP/hello/src"
cat >"$TMP/hello/Cargo.toml" <<EOF
[package]
name = "hello-ucx"
version = "0.1.0"
edition = "2021"

[dependencies]
ucx-async = { path = "$ROOT/crates/ucx-async" }
tokio = { version = "1", features = ["macros", "rt"] }

[workspace]
EOF
# The README's first Rust block that runs on tokio: its ucx-async example.
python3 - "$ROOT/README.md" >"$TMP/hello/src/main.rs" <<'EOF'
import re, sys
blocks = re.findall(r"```rust\n(.*?)```", open(sys.argv[1]).read(), flags=re.S)
print(next((b for b in blocks if "tokio::main" in b), ""), end="")
EOF
grep -q 'tokio::main' "$TMP/hello/src/main.rs" || fail "README.md's ucx-async example was not found"
# The workspace's lock: the same versions, nothing new to download, compiled dependencies reused.
cp "$ROOT/Cargo.lock" "$TMP/hello/"

# As a user's shell would be: no virtualenv, no library path; cargo and the C tools only.
clean_env=(env -u VIRTUAL_ENV -u CONDA_PREFIX -u LD_LIBRARY_PATH -u UCX_DIR -u PYO3_PYTHON
    "PATH=$(dirname "$(command -v cargo)"):/usr/local/bin:/usr/bin:/bin" "CARGO_TARGET_DIR=$ROOT/target/fresh-crate")
say "cargo run in a new crate (ucx-async and tokio only, no build.rs)"
(cd "$TMP/hello" && "${clean_env[@]}" cargo run --quiet) || fail "cargo run of the README's example"
BIN="$ROOT/target/fresh-crate/debug/hello-ucx"
if readelf -d "$BIN" | grep -q 'NEEDED.*libuc'; then
    fail "the binary links UCX by NEEDED: $(readelf -d "$BIN" | grep NEEDED | paste -sd' ')"
fi
say "PASS the README's example ran (its binary NEEDs no UCX library; ucx-core opened it at run time)"

set +e
out="$("${clean_env[@]}" UCX_DIR="$TMP/no-ucx-here" "$BIN" 2>&1)"
rc=$?
set -e
[ "$rc" -ne 0 ] || fail "UCX_DIR pointing at nothing, and the example still exited 0"
grep -q "UCX_DIR=$TMP/no-ucx-here is set but holds no usable UCX library" <<<"$out" ||
    fail "UCX_DIR pointing at nothing: the error does not name it: $out"
say "PASS UCX_DIR pointing at nothing: exit $rc, $(head -c 160 <<<"$out" | tr '\n' ' ')"

# --- Built with neither libclang nor UCX headers -------------------------------------------
WHEEL="$("$ROOT/.venv/bin/python" -c 'import libucx, os; print(os.path.dirname(libucx.__file__))')"
[ -f "$WHEEL/include/ucp/api/ucp.h" ] ||
    fail "the wheel at $WHEEL has no headers, so the libclang control below would not reach bindgen"
mkdir -p "$TMP/no-libclang"
bare_env=("${clean_env[@]}" "UCX_DIR=$TMP/no-ucx-here" "LIBCLANG_PATH=$TMP/no-libclang")
say "cargo build of the same crate with UCX_DIR=<nothing> and LIBCLANG_PATH=<empty dir>"
(cd "$TMP/hello" && "${bare_env[@]}" cargo build --quiet) || fail "the build without libclang and UCX headers"
graph="$(cd "$TMP/hello" && "${bare_env[@]}" cargo tree --quiet -e normal,build --prefix none)"
if grep -Eq '^(bindgen|clang-sys) ' <<<"$graph"; then
    fail "the crate's dependency graph holds bindgen: $(grep -E '^(bindgen|clang-sys) ' <<<"$graph" | sort -u | paste -sd' ')"
fi
if grep -aqF "$WHEEL/lib" "$BIN"; then
    fail "the binary names the wheel's UCX directory ($WHEEL/lib), which the build was not to find"
fi
out="$("${clean_env[@]}" VIRTUAL_ENV="$ROOT/.venv" "$BIN" 2>&1)" ||
    fail "the binary built without UCX, run with the wheel's UCX: $out"
say "PASS built with no UCX, no UCX headers and no libclang (no bindgen in its graph); ran against the wheel's UCX"

# The controls: the same environment stops a build that needs bindgen.
mkdir -p "$TMP/needs-bindgen/src"
cat >"$TMP/needs-bindgen/Cargo.toml" <<EOF
[package]
name = "needs-bindgen"
version = "0.1.0"
edition = "2021"

[dependencies]
ucx-core = { path = "$ROOT/crates/ucx-core", features = ["bindgen"] }

[workspace]
EOF
echo 'fn main() { println!("{:?}", ucx_core::version::HEADERS); }' >"$TMP/needs-bindgen/src/main.rs"
cp "$ROOT/Cargo.lock" "$TMP/needs-bindgen/"
control() { # $1: what it shows, $2: the error it must stop with, then the environment
    local what="$1" want="$2" out
    shift 2
    if out="$(cd "$TMP/needs-bindgen" && "$@" cargo build --quiet 2>&1)"; then
        fail "control ($what): a build that needs bindgen succeeded"
    fi
    grep -q "$want" <<<"$out" || fail "control ($what): it failed, but not with \"$want\": $(tail -c 600 <<<"$out")"
    say "PASS control: $what (the build that needs bindgen stopped with \"$want\")"
}
control "the UCX headers are hidden" "UCX_DIR is set but unusable" "${bare_env[@]}"
control "libclang is hidden" "Unable to find libclang" "${bare_env[@]}" "UCX_DIR=$WHEEL"
