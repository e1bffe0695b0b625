# Sourced, not run: defines `ucxx_venv [DIR]`, which creates or updates DIR (default
# <repo>/.venv-ucxx), a virtualenv with real UCXX (PyPI ucxx-cu12, CPU-only is fine) for
# python/tests/test_interop_ucxx.py and scripts/bench_python.sh. It pins libucx-cu12 to the
# version in .venv (scripts/setup.sh must have made .venv): UCXX and our ucp must load the
# same UCX, or UCX fails to connect them ("Destination is unreachable"). libucxx-cu12 0.52
# asks for libucx-cu12<1.22, hence the --no-deps pin after the install.
# Idempotent and cheap to re-run (a stamp records what was installed); it never uninstalls
# anything else found in DIR. UCXX_PIP_VERSION picks the ucxx-cu12 release (default
# UCXX_VERSION below).
#     source scripts/ucxx-venv.sh && ucxx_venv

_UCXX_VENV_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

# The UCXX release every script uses (ucxx-cu12 here, distributed-ucxx-cu12 in
# setup_bench_ucxx.sh): its one pin.
UCXX_VERSION=0.52.0

# _ucxx_venv_has PYTHON DIST VERSION: whether PYTHON has DIST installed at exactly VERSION.
_ucxx_venv_has() {
    "$1" -c 'import sys; from importlib.metadata import version; sys.exit(version(sys.argv[1]) != sys.argv[2])' \
        "$2" "$3" 2>/dev/null
}

ucxx_venv() {
    local venv="${1:-$_UCXX_VENV_ROOT/.venv-ucxx}"
    local ucxx_version="${UCXX_PIP_VERSION:-$UCXX_VERSION}"
    local ucx_version
    if ! ucx_version="$("$_UCXX_VENV_ROOT/.venv/bin/python" -c \
        'from importlib.metadata import version; print(version("libucx-cu12"))')"; then
        echo "[ucxx-venv] no libucx-cu12 in $_UCXX_VENV_ROOT/.venv: run scripts/setup.sh first" >&2
        return 1
    fi
    local want="ucxx-cu12==$ucxx_version numpy libucx-cu12==$ucx_version"
    local stamp="$venv/.ucx-async-ucxx"
    # The libucx check too: installing something else into DIR may have moved it (anything
    # asking pip for libucxx-cu12's dependencies downgrades it).
    if [ -x "$venv/bin/python" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ] &&
        _ucxx_venv_has "$venv/bin/python" libucx-cu12 "$ucx_version"; then
        return 0
    fi
    echo "[ucxx-venv] setting up $venv: $want (downloads about 350 MB the first time)" >&2
    [ -x "$venv/bin/python" ] || "${PYTHON:-python3}" -m venv "$venv" || return 1
    local py="$venv/bin/python"
    # Installed already at that version? (Re-asking pip for ucxx-cu12 would first downgrade
    # libucx-cu12 to satisfy libucxx's pin, breaking the venv for anyone using it meanwhile.)
    if ! _ucxx_venv_has "$py" ucxx-cu12 "$ucxx_version" || ! "$py" -c 'import numpy' 2>/dev/null; then
        "$py" -m pip install -q "ucxx-cu12==$ucxx_version" numpy || return 1
    fi
    if ! _ucxx_venv_has "$py" libucx-cu12 "$ucx_version"; then
        "$py" -m pip install -q --no-deps "libucx-cu12==$ucx_version" || return 1
    fi
    # The UCX that UCXX really loads must be ours.
    "$py" - "$ucx_version" <<'EOF' || return 1
import sys

import ucxx

want = tuple(int(x) for x in sys.argv[1].split(".")[:3])
got = ucxx.get_ucx_version()
if got != want:
    sys.exit(f"[ucxx-venv] UCXX loads UCX {got}, .venv has {want}")
EOF
    echo "$want" >"$stamp"
}
