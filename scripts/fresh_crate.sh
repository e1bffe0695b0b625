#!/usr/bin/env bash
# A new user's crate, built and run the way `cargo add ucx-async tokio` leaves it: it depends on
# ucx-async (by path, as a published version would be) and tokio only, has no build.rs, and its
# main.rs is the README's ucx-async example, extracted from README.md. `cargo run` must build and
# run it with no LD_LIBRARY_PATH, no virtualenv active and nothing else set (ucx-core opens UCX at
# run time: crates/ucx-core/src/library.rs). Then the same binary with UCX_DIR pointing at
# nothing must fail with the error naming it, not with the dynamic loader's.
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
