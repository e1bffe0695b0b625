"""The MSRV check that works without an old toolchain (only the current one can be installed
here): every package ucx-core and ucx-async build with (normal and build dependencies, all
features, as resolved by Cargo.lock) declares a `rust-version` no newer than ours. Our own
code is held to it by clippy's `incompatible_msrv` lint, which scripts/lint.sh runs with
`-D warnings`.

Usage: cargo metadata --format-version 1 --all-features | python3 scripts/ci/msrv-deps.py
"""
import json
import sys


def version(text):
    parts = [int(x) for x in text.split(".")]
    return tuple(parts + [0] * (3 - len(parts)))


meta = json.load(sys.stdin)
packages = {p["id"]: p for p in meta["packages"]}
nodes = {n["id"]: n for n in meta["resolve"]["nodes"]}
ours = [p for p in meta["packages"] if p["name"] in ("ucx-core", "ucx-async") and p["source"] is None]
msrv = {p["rust_version"] for p in ours}
if len(msrv) != 1 or None in msrv:
    sys.exit(f"msrv-deps: ucx-core and ucx-async must declare one rust-version, not {msrv}")
(msrv,) = msrv
seen, stack = set(), [p["id"] for p in ours]
while stack:
    node = stack.pop()
    if node in seen:
        continue
    seen.add(node)
    for dep in nodes[node]["deps"]:
        if any(kind["kind"] in (None, "build") for kind in dep["dep_kinds"]):
            stack.append(dep["pkg"])
newer = sorted(
    f"{packages[i]['name']} {packages[i]['version']} needs Rust {packages[i]['rust_version']}"
    for i in seen
    if packages[i]["rust_version"] and version(packages[i]["rust_version"]) > version(msrv)
)
if newer:
    sys.exit(f"msrv-deps: our rust-version is {msrv}, but:\n  " + "\n  ".join(newer))
print(f"msrv-deps: {len(seen)} packages, none needs a Rust newer than {msrv}")
