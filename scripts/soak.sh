#!/usr/bin/env bash
# The soak benchmark (issue 20, part 5): eight robots at 30 fps against one lop_edge process for
# SECONDS (default 600), through edge_server/tests/soak.rs; prints per robot the frames answered,
# served by the edge and replaced by newer ones, latency percentiles, the resident memory of both
# processes (after loading, after the warm-up, peak, end, and in how many once-a-second readings
# it set a new high by more than 1 MiB) and the served ratio max/min, and fails when memory kept
# rising (more than 5 new highs), grew more than 10%, or the ratio passed 1.2. The test command
# runs the same test for 60 seconds.
#
#   scripts/soak.sh [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/env.sh
seconds=${1:-600}
case "$seconds" in '' | *[!0-9]* | 0) echo "soak: SECONDS must be a positive whole number, not '$seconds'" >&2; exit 2 ;; esac
# --workspace: the same features as the test command's build, so its artifacts are reused.
cargo build --release --locked --workspace --bins
LOP_SOAK_SECONDS=$seconds cargo test --release --locked --workspace --test edge_server_e2e soak:: -- --nocapture
