#!/usr/bin/env bash
# Builds the documentation site from docs/ into site/ with MkDocs, as CI does: `mkdocs build
# --strict`, so a warning (a broken link or anchor, a page left out of the nav, an API name
# mkdocstrings cannot find) fails the build. Sets itself up: a virtualenv .venv-docs with the
# `docs` extra's tools from PyPI (pinned in pyproject.toml), reinstalled only when the pins
# change. Needs no Rust build and no UCX: the Python API reference is read from the sources
# and the extension's stub (python/ucp/_ucx_async.pyi) without importing them.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
say() { printf '\033[1m[docs]\033[0m %s\n' "$*" >&2; }
PY="${PYTHON:-python3}"
VENV=.venv-docs
if [ ! -x "$VENV/bin/python" ]; then
    say "creating $VENV"
    "$PY" -m venv "$VENV"
fi
REQS="$("$VENV/bin/python" -c '
import tomllib
print(" ".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["docs"]))
')"
STAMP="$VENV/.docs-requirements"
if [ "$(cat "$STAMP" 2>/dev/null)" != "$REQS" ]; then
    say "installing into $VENV: $REQS"
    "$VENV/bin/python" -m pip install -q --upgrade pip
    # shellcheck disable=SC2086 # a list of requirements
    "$VENV/bin/python" -m pip install -q $REQS
    echo "$REQS" >"$STAMP"
fi
say "mkdocs build --strict"
"$VENV/bin/mkdocs" build --strict --site-dir site "$@"
say "site/index.html is ready"
