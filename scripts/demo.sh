#!/usr/bin/env bash
# The main job: set up (idempotent), then two processes exchange tag messages over 127.0.0.1
# with ucx-core and the client prints the latency and bandwidth it measured.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/setup.sh"
cd "$ROOT"
cargo run --quiet --release -p ucx-core --example core_pingpong -- "$@"
