#!/usr/bin/env bash
# The multi-rail sweep (examples/multirail.rs: SINGLE, MR and SPLIT over rails x stages x
# ratio x size) against a peer process on 127.0.0.1, then, in the same run, ucx_perftest's
# tag_bw at the same sizes on the same transport (UCX_TLS=tcp, like the rails, whose
# endpoints handle peer failure and so use TCP) and on its default transports, and UCX's own
# multi-rail setting (UCX_MAX_RNDV_RAILS) on the single-endpoint path. Writes the plot to
# $PLOT (default docs/multirail.svg). Expects scripts/setup.sh to have run.
# All rails here share one loopback device and the machine's cores: expect no gain from
# more rails; the sweep shows the split path's cost, not a NIC's bandwidth.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
export VIRTUAL_ENV="$ROOT/.venv" PATH="$ROOT/.venv/bin:$PATH"
UCX_PREFIX="$(python -c 'import libucx, os; print(os.path.dirname(libucx.__file__))')"
SIZES=${SIZES:-1048576,8388608,67108864}
BW_N=${BW_N:-200}
cargo build --quiet --release -p ucx-async --example multirail
MR="$ROOT/target/release/examples/multirail"
# shellcheck source=scripts/perftest.sh
source "$ROOT/scripts/perftest.sh"

echo "## ucx-async multirail (MB/s = 10^6 B/s)"
"$MR" --sizes "$SIZES" --plot "${PLOT:-docs/multirail.svg}" "$@" 2>/dev/null | grep -v '^#'
echo "## SINGLE with UCX's own multi-rail: UCX_MAX_RNDV_RAILS=1, then 2"
for rails in 1 2; do
    UCX_MAX_RNDV_RAILS=$rails "$MR" --modes SINGLE --rails 1 --sizes "$SIZES" 2>/dev/null | grep RESULT |
        sed "s/^RESULT/RESULT MAX_RNDV_RAILS=$rails/"
done
# ucx_perftest prints MB/s as 2^20 B/s (column 7 of its Final line); converted to 10^6 here.
echo "## ucx_perftest tag_bw (MB/s = 10^6 B/s): UCX_TLS=tcp (like-for-like), then its defaults"
for size in ${SIZES//,/ }; do
    tcp=$(UCX_TLS=tcp perftest tag_bw "$size" "$BW_N" | awk '{printf "%.0f", $7 * 1.048576}')
    def=$(perftest tag_bw "$size" "$BW_N" | awk '{printf "%.0f", $7 * 1.048576}')
    echo "PERFTEST $size tcp=$tcp default=$def"
done
