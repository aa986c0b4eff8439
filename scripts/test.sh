#!/usr/bin/env bash
# The project's test command (README, .ci/run): prepares the Python venv (libtorch from the
# torch==2.13.0 wheel plus the test peers onnxruntime/onnx/torchvision/ddddocr) and the ROS 2
# environment (scripts/ros.sh: Jazzy wheels, rosidl-built interface packages), builds the r2r
# backend of the robot nodes against it (scripts/build-r2r.sh, into target/release/r2r), then
# builds everything once in release mode (scripts/feature-drift.sh checks that these builds share
# their dependencies) and runs every test of the workspace with that build
# (the r2r nodes against rclpy among them).
set -euo pipefail
# Each phase says when it starts, in seconds since the command started (where the time goes).
phase() { echo "test: $* (at ${SECONDS} s)" >&2; }
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
# The Python venv and a real ROS 2 Jazzy from PyPI wheels (lop_msgs and vision_msgs built by
# rosidl, .ros/) side by side: the first mostly downloads and unpacks (about 100 s on a fresh
# machine), the second mostly compiles (about 110 s); they share no file.
phase "Python venv (scripts/setup.sh --test-deps) beside ROS 2 Jazzy (scripts/ros.sh)"
scripts/setup.sh --test-deps &
setup_pid=$!
scripts/ros.sh &
ros_pid=$!
setup_rc=0 ros_rc=0
wait "$setup_pid" || setup_rc=$?
wait "$ros_pid" || ros_rc=$?
[ "$setup_rc" = 0 ] || { echo "test: scripts/setup.sh --test-deps failed (exit $setup_rc)" >&2; exit 1; }
[ "$ros_rc" = 0 ] || { echo "test: scripts/ros.sh failed (exit $ros_rc)" >&2; exit 1; }
# nftables for the chaos test's faults in network namespaces (the kernel here has no netem).
if ! command -v nft >/dev/null && command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
  echo "test: installing nftables (apt-get)" >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends nftables >&2 \
    || { apt-get update >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends nftables >&2; } \
    || echo "test: nftables could not be installed; the chaos netns test will say so" >&2
fi
# shellcheck source=env.sh
. scripts/env.sh
phase cargo fmt --check
cargo fmt --all -- --check
# The builds below must share every dependency they have in common, or cargo compiles zenoh and
# the engine again for each (scripts/feature-drift.sh; seconds, resolution only).
phase "every build shares its dependencies (scripts/feature-drift.sh)"
scripts/feature-drift.sh
# The r2r nodes first: the workspace build below then puts the hiroz-only nodes back in
# target/release (both share every other artifact).
phase "the r2r nodes against ROS (scripts/build-r2r.sh; the first build: about 20 minutes on 2 cores)"
scripts/build-r2r.sh
phase "cargo build --release --workspace --bins (robot_node without r2r; the rest is built)"
# The interop tests run lop_edge and lop_robot as separate processes; build every binary first.
cargo build --release --workspace --bins
phase cargo test --release --workspace
cargo test --release --workspace "$@"
phase done
