#!/usr/bin/env bash
# Tests ucx-async's CUDA paths on a GPU machine from the bundle that scripts/gpu_prepare.sh
# built (.gpu/; this file is copied there as run.sh).
# Needs no network, no Rust and no UCX there: an NVIDIA driver and python3 with numpy and
# CuPy (numba for the benchmark). Run from the project root:
#
#     bash .gpu/run.sh                  # every section (about 5 minutes; stops itself by 9.5)
#     bash .gpu/run.sh rust echo        # only these (set-up always runs first)
#     bash .gpu/run.sh list             # the sections
#
# Sections: info rust echo pytest echocupy bench sanitizer (docs/cuda.md, "Testing on a GPU machine").
# Results in $OUT (default /tmp/gpu-out): summary.txt, one line per check (PASS/FAIL/SKIP and
# its key figure), and logs.tar.gz with every check's full log. Exit status 1 if a check failed.
#
# Settings (environment): OUT, PY (default python3), GPU_WORK (scratch, default
# /tmp/ucx-async-gpu), GPU_TIME_LIMIT_S (no check runs past this, default 570),
# GPU_BUDGET_S (no check starts after this, default 480), GPU_PYTEST_HOST (the host test files
# the pytest section runs after test_cuda.py), UCX_* (apply to every check, both sides of the
# benchmark included).
set -uo pipefail

G="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ALL_SECTIONS=(info rust echo pytest echocupy bench sanitizer)
usage() { awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "${BASH_SOURCE[0]}"; }
for s in "$@"; do
    case " ${ALL_SECTIONS[*]} " in
    *" $s "*) ;;
    *)
        case "$s" in
        list) echo "${ALL_SECTIONS[*]}" ;;
        -h | --help | help) usage ;;
        *)
            echo "run.sh: unknown section '$s' (sections: ${ALL_SECTIONS[*]})" >&2
            exit 2
            ;;
        esac
        exit 0
        ;;
    esac
done
SECTIONS=("${ALL_SECTIONS[@]}")
[ $# -eq 0 ] || SECTIONS=("$@")

OUT="${OUT:-/tmp/gpu-out}"
PY="${PY:-python3}"
W="${GPU_WORK:-/tmp/ucx-async-gpu}"
LIMIT_S="${GPU_TIME_LIMIT_S:-570}"
BUDGET_S="${GPU_BUDGET_S:-480}"
# Host-memory test files for the pytest section: all but the slow test_processes.py, the UCXX
# interop (needs UCXX), test_readme.py (reads the project's README) and test_cuda.py itself.
PYTEST_HOST="${GPU_PYTEST_HOST:-}"
if [ -z "$PYTEST_HOST" ]; then
    for f in "$G"/python/tests/test_*.py; do
        case "${f##*/}" in
        test_cuda.py | test_processes.py | test_interop_ucxx.py | test_readme.py | "test_*.py") ;;
        *) PYTEST_HOST+="${f##*/} " ;;
        esac
    done
fi
SITE="$W/site"
BIN="$W/bin"
LOGS="$W/logs"
SUMMARY="$OUT/summary.txt"
T0=$SECONDS
NFAIL=0
STEP_PID=

mkdir -p "$OUT" "$W"
rm -rf "$LOGS" "$SITE" "$BIN"
mkdir -p "$LOGS" "$SITE" "$BIN"
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1

# ------------------------------------------------------------------------------- helpers
now() { echo "${EPOCHREALTIME:-$(date +%s.%N)}"; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

# record STATUS NAME FIGURE... : one line of summary.txt (and of stdout). A check whose step was
# not started for lack of time is a SKIP, whatever STATUS says.
record() {
    local st=$1 name=$2
    shift 2
    if [ "${KILLED:-}" = budget ] || [[ "$*" == "not run: time budget spent"* ]]; then
        st=SKIP
        set -- "not run: time budget spent"
    fi
    KILLED=
    [ "$st" = FAIL ] && NFAIL=$((NFAIL + 1))
    printf '%-4s  %-46s %s\n' "$st" "$name" "$*" | tee -a "$SUMMARY"
}

# finish: pack the logs into $OUT (done after each section, so a cut-off run still has them).
finish() {
    cp "$SUMMARY" "$LOGS/summary.txt" 2>/dev/null
    tar -czf "$OUT/logs.tar.gz" -C "$W" logs 2>/dev/null
}
on_signal() {
    [ -n "$STEP_PID" ] && kill -TERM "$STEP_PID" 2>/dev/null
    record FAIL run "interrupted by a signal after $((SECONDS - T0)) s"
    finish
    exit 130
}
trap on_signal TERM INT HUP

# run_step NAME TIMEOUT CMD... : runs CMD (in $STEP_CWD, default $W) with its output in
# $LOGS/NAME.log, under `timeout`, which ends its whole process group. With FAILFAST (a regex)
# set, the command is also ended once that text has shown up in its output and it has not
# exited $FAILFAST_GRACE s later (a failed client whose server then waits for ever).
# Sets RC, SECS, LOG, KILLED (timeout, failfast, budget or empty).
run_step() {
    local name=$1 t=$2
    shift 2
    LOG="$LOGS/${name//\//-}.log"
    KILLED=
    SECS=0
    local used=$((SECONDS - T0)) left
    left=$((LIMIT_S - used))
    if ((used > BUDGET_S || left < 10)); then
        echo "not run: the run's time budget is spent ($used s)" >"$LOG"
        RC=125
        KILLED=budget
        return
    fi
    ((t > left)) && t=$left
    { printf '$ cd %q &&' "${STEP_CWD:-$W}" && printf ' %q' "$@" && printf '\n'; } >"$LOG"
    local t0 seen=0
    t0=$(now)
    (cd "${STEP_CWD:-$W}" && exec timeout -k 10 "$t" "$@") >>"$LOG" 2>&1 </dev/null &
    STEP_PID=$!
    if [ -n "${FAILFAST:-}" ]; then
        while kill -0 "$STEP_PID" 2>/dev/null; do
            sleep 0.5
            if ((seen == 0)) && grep -qE "$FAILFAST" "$LOG"; then seen=$SECONDS; fi
            if ((seen > 0 && SECONDS - seen >= ${FAILFAST_GRACE:-10})); then
                kill -TERM "$STEP_PID" 2>/dev/null
                KILLED=failfast
                break
            fi
        done
    fi
    wait "$STEP_PID"
    RC=$?
    STEP_PID=
    SECS=$(elapsed "$t0")
    if [ -z "$KILLED" ] && { [ "$RC" = 124 ] || [ "$RC" = 137 ]; }; then KILLED=timeout; fi
    echo "[exit status $RC${KILLED:+, ended: $KILLED} after $SECS s]" >>"$LOG"
}

# Why a step did not pass, in a few words: how it was ended, and its error line.
why() {
    case "$KILLED" in
    timeout) echo "timed out after $SECS s ($(error_line))" ;;
    failfast) echo "failed, then did not exit: killed ($(error_line))" ;;
    budget) echo "not run: time budget spent" ;;
    *) echo "exit status $RC: $(error_line)" ;;
    esac
}
# error_line: the first Python exception line of the log (the cause, usually), else its last
# line that mentions an error or a panic.
error_line() {
    local l
    l=$(grep -m1 -E '^[A-Za-z_][A-Za-z0-9_.]*(Error|Exception)(: |$)' "$LOG" | cut -c1-140)
    [ -n "$l" ] || l=$(grep -E '(Error|Exception|error|panicked|FAILED|ERROR)' "$LOG" | grep -v '^\$ ' | tail -1 | cut -c1-140)
    echo "${l:-see $(basename "$LOG")}"
}
want() { [[ " ${SECTIONS[*]} " == *" $1 "* ]]; }
section() { printf '\n== %s (%s s into the run)\n' "$1" "$((SECONDS - T0))"; }

# ------------------------------------------------------------------------------- set-up
section setup
{
    echo "# ucx-async GPU run, $(date -u +%Y-%m-%dT%H:%M:%SZ), host $(hostname), sections: ${SECTIONS[*]}"
} >"$SUMMARY"
for f in build.env rust-bin.tar.xz libucx-site.tar.xz; do
    if [ ! -f "$G/$f" ]; then
        record FAIL setup "$G/$f is missing: build the bundle with scripts/gpu_prepare.sh"
        finish
        exit 1
    fi
done
# shellcheck disable=SC1091
. "$G/build.env"
echo "# bundle built $BUILT_AT from $BUILT_FROM; UCX $UCX_DIST $UCX_DIST_VERSION" >>"$SUMMARY"
SETUP_LOG="$LOGS/setup.log"
SETUP_NOTES=()
{
    set -x
    tar -xJf "$G/libucx-site.tar.xz" -C "$SITE"
    tar -xJf "$G/rust-bin.tar.xz" -C "$BIN"
    set +x
} >"$SETUP_LOG" 2>&1 || SETUP_NOTES+=("unpacking failed")
cd "$W" || exit 1
# The Python wheels this machine lacks (by distribution name), and ucx-async's own, always.
mapfile -t NEED < <(env -u PYTHONPATH timeout 60 "$PY" - "$G/pydeps" 2>>"$SETUP_LOG" <<'EOF'
import glob, importlib.metadata as md, os, sys
for w in sorted(glob.glob(os.path.join(sys.argv[1], "*.whl"))):
    name = os.path.basename(w).split("-")[0]
    try:
        md.distribution(name)
    except md.PackageNotFoundError:
        print(w)
EOF
)
for w in "$G"/wheels/*.whl; do [ -f "$w" ] && NEED+=("$w"); done
pip_install() {
    timeout 300 "$PY" -m pip install -q --no-index --no-deps --no-compile --disable-pip-version-check \
        --upgrade --target "$SITE" "$@" >>"$SETUP_LOG" 2>&1
}
echo "installing into $SITE: ${NEED[*]##*/}" >>"$SETUP_LOG"
if ! pip_install "${NEED[@]}"; then
    BAD=()
    for w in "${NEED[@]}"; do pip_install "$w" || BAD+=("${w##*/}"); done
    SETUP_NOTES+=("pip could not install: ${BAD[*]}")
fi
export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
export LD_LIBRARY_PATH="$SITE/libucx/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PATH="$SITE/bin:$SITE/libucx/bin:$PATH"
# The binaries look for UCX where it was on the build machine (their run path, and the C example
# interop test's UCX prefix): point that path at the unpacked copy if nothing is there.
if [ -n "${UCX_BUILD_LIBDIR:-}" ] && [ ! -e "$UCX_BUILD_LIBDIR" ]; then
    link="$(dirname "$UCX_BUILD_LIBDIR")"
    if mkdir -p "$(dirname "$link")" 2>>"$SETUP_LOG" && ln -sfn "$SITE/libucx" "$link" 2>>"$SETUP_LOG"; then
        echo "linked $link -> $SITE/libucx (the build machine's UCX path)" >>"$SETUP_LOG"
    else
        SETUP_NOTES+=("could not recreate $link (LD_LIBRARY_PATH is used)")
    fi
fi
HAVE_GPU=0
if command -v nvidia-smi >/dev/null && timeout 30 nvidia-smi -L >"$LOGS/nvidia-smi-L.log" 2>&1 &&
    grep -q '^GPU ' "$LOGS/nvidia-smi-L.log"; then
    HAVE_GPU=1
fi
HAVE_LIBCUDA=0
timeout 30 "$PY" -c 'import ctypes; ctypes.CDLL("libcuda.so.1")' >>"$SETUP_LOG" 2>&1 && HAVE_LIBCUDA=1
# The UCX_* variables `import ucp` sets (where unset), for running ucx_perftest like ucp.
UCP_ENV=$(timeout 120 "$PY" -c '
import os
before = dict(os.environ)
import ucp
print(" ".join(f"{k}={v}" for k, v in sorted(os.environ.items()) if k.startswith("UCX_") and before.get(k) != v))
' 2>>"$SETUP_LOG")
UCP_OK=$?
{
    echo "python: $(command -v "$PY") ($("$PY" -V 2>&1)); bundle wheels for Python $PYTHON_VERSION"
    echo "GPU visible: $HAVE_GPU; libcuda.so.1 loads: $HAVE_LIBCUDA; import ucp: exit status $UCP_OK"
    echo "UCX_* set by import ucp: $UCP_ENV"
    echo "PYTHONPATH=$PYTHONPATH"
    echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
} >>"$SETUP_LOG"
case "$("$PY" -V 2>&1)" in "Python $PYTHON_VERSION".*) ;; *) SETUP_NOTES+=("python is $("$PY" -V 2>&1), the bundle's wheels are for $PYTHON_VERSION") ;; esac
[ "$UCP_OK" = 0 ] || SETUP_NOTES+=("import ucp failed (see setup.log)")
if [ ${#SETUP_NOTES[@]} -eq 0 ]; then
    record PASS setup "${#NEED[@]} wheels installed, GPU: $([ $HAVE_GPU = 1 ] && echo yes || echo none) ($((SECONDS - T0)) s)"
else
    notes=$(printf '%s; ' "${SETUP_NOTES[@]}")
    record FAIL setup "${notes%; }"
fi
finish

# Rust executables: file, package, kind (lib/test/example), target.
MANIFEST=()
[ -f "$BIN/manifest.tsv" ] && mapfile -t MANIFEST < <(grep -v '^#' "$BIN/manifest.tsv")
no_libcuda="no libcuda.so.1 here (no NVIDIA driver): the binaries cannot start"

# ------------------------------------------------------------------------------- info
if want info; then
    section info
    if command -v nvidia-smi >/dev/null; then
        run_step info/nvidia-smi 60 bash -c 'nvidia-smi; nvidia-smi -q | grep -E -A3 "BAR1 Memory|MIG Mode"'
        if [ "$RC" = 0 ]; then
            gpu=$(timeout 30 nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | head -1)
            cuda=$(grep -o 'CUDA Version: [0-9.]*' "$LOG" | head -1)
            record PASS info/nvidia-smi "$gpu, $cuda"
        else
            record FAIL info/nvidia-smi "$(why)"
        fi
    else
        record SKIP info/nvidia-smi "no nvidia-smi (no NVIDIA driver)"
    fi
    run_step info/host 60 bash -c 'uname -sr; nproc; free -g | head -2; df -h /tmp /dev/shm; env | grep -E "^(UCX|CUDA|NVIDIA)" || true;
        ldconfig -p | grep -E "libcuda\.so|libnvidia-ml" || true; command -v nvcc compute-sanitizer cc stdbuf || true'
    record "$([ "$RC" = 0 ] && echo PASS || echo FAIL)" info/host "$(uname -r), $(nproc) CPUs"
    run_step info/ucx_info-v 60 ucx_info -v
    if [ "$RC" = 0 ]; then
        record PASS info/ucx_info-v "UCX $(sed -nE 's/^# Library version: *//p' "$LOG" | head -1), $(grep -m1 -oE 'revision [0-9a-f]+' "$LOG")"
    else
        record FAIL info/ucx_info-v "$(why)"
    fi
    run_step info/ucx_info-d 60 ucx_info -d
    tls=$(grep -oE 'Transport: *(cuda|gdr)[a-z_]*' "$LOG" | awk '{print $2}' | sort -u | tr '\n' ' ')
    if [ "$RC" != 0 ]; then
        record FAIL info/ucx-cuda-transports "$(why)"
    elif [ -n "$tls" ]; then
        record PASS info/ucx-cuda-transports "$tls"
    elif [ $HAVE_GPU = 1 ]; then
        record FAIL info/ucx-cuda-transports "UCX lists no CUDA transport on a machine with a GPU"
    else
        record SKIP info/ucx-cuda-transports "none listed (no GPU here)"
    fi
    grep -iE 'cuda|gdr' "$LOG" >"$LOGS/info-ucx_info-d-cuda.log"
    run_step info/python 120 "$PY" -c '
import importlib, sys
print("Python", sys.version.split()[0])
for m in ("numpy", "cupy", "numba", "pytest", "distributed", "pynvml"):
    try:
        print(m, importlib.import_module(m).__version__)
    except Exception as e:
        print(m, "-", type(e).__name__, e)
import ucp
print("ucp", ucp.__version__, "UCX", ucp.__ucx_version__, ucp.__file__)
import cupy
print("GPUs", cupy.cuda.runtime.getDeviceCount(), cupy.cuda.runtime.getDeviceProperties(0)["name"].decode(),
      "runtime", cupy.cuda.runtime.runtimeGetVersion(), "driver", cupy.cuda.runtime.driverGetVersion())
'
    fig=$(grep -E '^(Python|cupy|numpy|numba|ucp) ' "$LOG" | awk '{print $1, $2}' | tr '\n' ' ')
    if [ "$RC" = 0 ]; then
        record PASS info/python "$fig"
    elif grep -q '^ucp ' "$LOG"; then
        record "$([ $HAVE_GPU = 1 ] && echo FAIL || echo SKIP)" info/python "$fig(CuPy cannot use a GPU: $(error_line))"
    else
        record FAIL info/python "$(why)"
    fi
    finish
fi

# ------------------------------------------------------------------------------- rust
# rust_result: "N passed, M failed, K ignored" summed over the log's `test result:` lines.
rust_result() {
    grep -oE 'test result: [A-Za-z]+\. [0-9]+ passed; [0-9]+ failed; [0-9]+ ignored' "$LOG" |
        awk '{p += $4; f += $6; i += $8} END { printf "%d passed, %d failed, %d ignored", p, f, i }'
}
if want rust; then
    section rust
    if [ $HAVE_LIBCUDA = 0 ]; then
        record SKIP rust "$no_libcuda"
    elif [ ${#MANIFEST[@]} -eq 0 ]; then
        record FAIL rust "no Rust executables in the bundle (manifest.tsv)"
    fi
    for row in "${MANIFEST[@]}"; do
        [ $HAVE_LIBCUDA = 1 ] || break
        IFS=$'\t' read -r file _pkg kind _target <<<"$row"
        [ "$kind" = example ] && continue
        for mode in parallel 1thread; do
            args=(--nocapture) # the tests' own notes (e.g. "skipped: no CUDA device") reach the log
            [ $mode = 1thread ] && args+=(--test-threads=1)
            run_step "rust/$file/$mode" 180 "$BIN/$file" "${args[@]}"
            res="$(rust_result) ($SECS s)"
            if [ "$RC" != 0 ]; then
                record FAIL "rust/$file/$mode" "$(why); $res"
            elif grep -q 'skipped: no CUDA device' "$LOG"; then
                record SKIP "rust/$file/$mode" "$res, but the CUDA tests skipped: no CUDA device"
            else
                record PASS "rust/$file/$mode" "$res"
            fi
        done
    done
    finish
fi

# ------------------------------------------------------------------------------- echo
if want echo; then
    section echo
    found=0
    for row in "${MANIFEST[@]}"; do
        IFS=$'\t' read -r file _pkg kind target <<<"$row"
        [ "$kind" = example ] || continue
        found=1
        if [ $HAVE_LIBCUDA = 0 ]; then
            record SKIP "echo/$target" "$no_libcuda"
            continue
        fi
        run_step "echo/$target" 60 "$BIN/$file"
        case "$RC" in
        0) record PASS "echo/$target" "$(grep -E "^$target:" "$LOG" | tail -1 | cut -c1-120) ($SECS s)" ;;
        2) record SKIP "echo/$target" "$(grep -E "^$target:" "$LOG" | tail -1 | cut -c1-120)" ;;
        *) record FAIL "echo/$target" "$(why)" ;;
        esac
    done
    [ $found = 1 ] || record FAIL echo "no CUDA example in the bundle (manifest.tsv)"
    finish
fi

# ------------------------------------------------------------------------------- pytest
# pytest_line: pytest's last "N passed, M failed ... in T s" line, without its '=' rules.
pytest_line() { grep -E '^(=+ )?(([0-9]+ [a-z]+(, )?)+|no tests ran) in [0-9.]+s' "$LOG" | tail -1 | sed -E 's/^=+ //; s/ =+$//'; }
pytest_record() { # NAME
    local line
    line=$(pytest_line)
    if [ -n "$KILLED" ]; then
        record FAIL "$1" "$(why)"
    elif [ "$RC" = 0 ] && [[ "$line" == *passed* ]]; then
        record PASS "$1" "$line"
    elif [ "$RC" = 0 ] || [ "$RC" = 5 ]; then
        record SKIP "$1" "${line:-no tests ran}: $(grep -m1 -E '^SKIPPED' "$LOG" | sed -E 's/^SKIPPED \[[0-9]+\] //' | cut -c1-90)"
    else
        record FAIL "$1" "${line:-exit status $RC}; $({ grep -E '^FAILED [^ ]+::' "$LOG"; grep -E '^ERROR [^ ]+::' "$LOG"; } | head -1 | cut -c1-160)"
    fi
}
if want pytest; then
    section pytest
    STEP_CWD="$G/python/tests" run_step pytest/test_cuda 180 env COLUMNS=200 "$PY" -m pytest -v -rA -p no:cacheprovider test_cuda.py
    pytest_record pytest/test_cuda
    read -r -a host_files <<<"$PYTEST_HOST"
    # Left out: a test that starts Python with an empty environment, which cannot see the
    # packages installed with --target (PYTHONPATH) above; nothing to do with the GPU.
    STEP_CWD="$G/python/tests" run_step pytest/host 240 env COLUMNS=200 "$PY" -m pytest -q -rfE -p no:cacheprovider \
        -k "not test_import_does_not_override_a_users_memtype_cache_choice" "${host_files[@]}"
    pytest_record pytest/host
    finish
fi

# ------------------------------------------------------------------------------- echo_cupy
if want echocupy; then
    section echocupy
    FAILFAST='Traceback \(most recent call last\)' run_step echocupy/echo_cupy 90 "$PY" "$G/examples/python/echo_cupy.py"
    case "$RC" in
    0) record PASS echocupy/echo_cupy "$(grep -E '^echo_cupy:' "$LOG" | tail -1 | cut -c1-110) ($SECS s)" ;;
    2) record SKIP echocupy/echo_cupy "$(grep -E '^echo_cupy:' "$LOG" | tail -1 | cut -c1-110)" ;;
    *) record FAIL echocupy/echo_cupy "$(why)" ;;
    esac
    finish
fi

# ------------------------------------------------------------------------------- bench
# ucp's round-trip benchmark with CuPy buffers (two processes, one GPU) against UCX's
# ucx_perftest tag_lat on CUDA memory, both with the UCX_* variables `import ucp` sets and
# over 127.0.0.1/lo. Compared: median one-way latency (ucp: half the median round trip).
perftest_step() { # NAME TIMEOUT ARGS... : ucx_perftest server, then client against 127.0.0.1
    local name=$1 t=$2 port=$((20000 + RANDOM % 20000)) slog="$LOGS/${1//\//-}.server.log" i
    shift 2
    # shellcheck disable=SC2086 # UCP_ENV is a list of NAME=VALUE words
    timeout -k 5 $((t + 15)) env $UCP_ENV UCX_NET_DEVICES=lo ucx_perftest -p $port "$@" >"$slog" 2>&1 </dev/null &
    local spid=$!
    for ((i = 0; i < 30; i++)); do
        grep -q 'Waiting for connection' "$slog" && break
        kill -0 $spid 2>/dev/null || break
        sleep 0.5
    done
    # shellcheck disable=SC2086
    run_step "$name" "$t" env $UCP_ENV UCX_NET_DEVICES=lo ucx_perftest 127.0.0.1 -p $port "$@"
    wait $spid
    { echo "--- server (exit status $?):" && cat "$slog"; } >>"$LOG"
    rm -f "$slog"
}
if want bench; then
    section bench
    if [ $HAVE_GPU = 0 ]; then
        record SKIP bench "no GPU here"
    else
        echo "UCX_* for both sides (set by import ucp): $UCP_ENV UCX_NET_DEVICES=lo" | tee "$LOGS/bench.txt"
        printf '%-7s %16s %16s %14s\n' size "ucp one-way" "perftest" "ucp/perftest" | tee -a "$LOGS/bench.txt"
        for spec in "8B 8 5000 200" "1MiB 1048576 1000 100" "64MiB 67108864 100 10"; do
            read -r label bytes iters warm <<<"$spec"
            # shellcheck disable=SC2086
            FAILFAST='Traceback \(most recent call last\)' run_step "bench/ucp-cupy-$label" 150 \
                env $UCP_ENV UCX_NET_DEVICES=lo "$PY" -m ucp.benchmarks.send_recv -o cupy --reuse-alloc \
                -n "$bytes" --n-iter "$iters" --n-warmup-iter "$warm" -s 127.0.0.1 --no-detailed-report
            ucp_ns=$(sed -nE 's/^Latency \(median\) *\| *([0-9]+) ns.*/\1/p' "$LOG" | tail -1)
            [ "$RC" = 0 ] && [ -n "$ucp_ns" ] || ucp_ns=
            ucp_fail=$(why)
            perftest_step "bench/perftest-cuda-$label" 90 -t tag_lat -m cuda -s "$bytes" -n "$iters" -w "$warm"
            pt_us=$(awk '$1 == "Final:" { print $3 }' "$LOG" | tail -1)
            [ "$RC" = 0 ] && [ -n "$pt_us" ] || pt_us=
            if [ -n "$pt_us" ]; then
                record PASS "bench/perftest-cuda-$label" "$(awk -v u="$pt_us" -v b="$bytes" 'BEGIN { printf "%.1f µs one-way, %.2f GiB/s", u, b / (u * 1e-6) / 2^30 }')"
            else
                record FAIL "bench/perftest-cuda-$label" "$(why)"
            fi
            if [ -n "$ucp_ns" ]; then
                fig=$(awk -v n="$ucp_ns" -v b="$bytes" -v p="$pt_us" 'BEGIN {
                    printf "%.1f µs one-way, %.2f GiB/s", n / 1000, b / (n * 1e-9) / 2^30
                    if (p != "") printf "; ucp/perftest speed %.2fx", p * 1000 / n }')
                record PASS "bench/ucp-cupy-$label" "$fig"
            else
                record FAIL "bench/ucp-cupy-$label" "$ucp_fail"
            fi
            awk -v l="$label" -v n="$ucp_ns" -v p="$pt_us" 'BEGIN {
                printf "%-7s %16s %16s %14s\n", l, (n == "" ? "-" : sprintf("%.1f µs", n / 1000)),
                    (p == "" ? "-" : sprintf("%.1f µs", p)), (n == "" || p == "" ? "-" : sprintf("%.2fx", p * 1000 / n)) }' |
                tee -a "$LOGS/bench.txt"
        done
    fi
    finish
fi

# ------------------------------------------------------------------------------- sanitizer
# compute-sanitizer memcheck on the ucx-core CUDA tests and the CUDA examples. API errors are
# not reported: UCX's own probes (cuMemCreate, cuMemRetainAllocationHandle) return errors by
# design and would fill the report.
if want sanitizer; then
    section sanitizer
    CS=$(command -v compute-sanitizer) || for CS in /usr/local/cuda*/bin/compute-sanitizer ""; do
        [ -x "$CS" ] && break
    done
    if [ -z "$CS" ]; then
        record SKIP sanitizer "no compute-sanitizer here"
    elif [ $HAVE_LIBCUDA = 0 ] || [ $HAVE_GPU = 0 ]; then
        record SKIP sanitizer "no GPU here"
    else
        for row in "${MANIFEST[@]}"; do
            IFS=$'\t' read -r file pkg kind target <<<"$row"
            args=()
            case "$pkg/$kind/$target" in
            ucx-core/test/*cuda*) args=(--nocapture --test-threads=1) ;;
            */example/*) ;;
            *) continue ;;
            esac
            run_step "sanitizer/$file" 240 "$CS" --tool memcheck --report-api-errors no --error-exitcode 9 "$BIN/$file" "${args[@]}"
            errs=$(grep -m1 -oE 'ERROR SUMMARY: [0-9]+ errors?' "$LOG")
            res=$(rust_result)
            [ "$kind" = example ] && res=$(grep -E "^$target:" "$LOG" | tail -1 | cut -c1-60)
            if [ "$RC" = 0 ]; then
                record PASS "sanitizer/$file" "${errs:-no summary}; $res ($SECS s)"
            else
                record FAIL "sanitizer/$file" "${errs:+$errs; }$(why)"
            fi
        done
    fi
    finish
fi

# ------------------------------------------------------------------------------- end
section end
echo "total $((SECONDS - T0)) s; $NFAIL failed; summary: $SUMMARY, logs: $OUT/logs.tar.gz"
echo
cat "$SUMMARY"
finish
[ "$NFAIL" = 0 ]
