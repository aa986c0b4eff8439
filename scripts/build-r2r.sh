#!/usr/bin/env bash
# Builds the r2r backend of the robot nodes (lop_robot, lop_bandwidth, lop_power with
# `--features ros2`) against the project-local ROS 2 Jazzy of scripts/ros.sh, and puts the three
# binaries in target/release/r2r/. They run on the default middleware (Fast DDS) with no
# environment set: the ROS library folders are their run path (robot_node/build.rs).
#
#     scripts/setup.sh && scripts/ros.sh && scripts/build-r2r.sh
#     target/release/r2r/lop_robot --backend r2r --config config/robot.yaml
#
# The build shares target/release with the workspace build: it builds every binary with the
# workspace's features plus robot_node/ros2, so only robot_node and r2r compile anew; a later
# `cargo build --release --workspace --bins` puts the hiroz-only nodes back in target/release.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
# shellcheck source=ros-env.sh
. scripts/ros-env.sh
# shellcheck source=env.sh
. scripts/env.sh
# torch-sys asks `python3` where libtorch is: the venv with torch first, not ROS' venv.
export PATH="$root/.venv/bin:$PATH"
echo "build-r2r: cargo build --release --workspace --bins --features robot_node/ros2 (r2r generates its message types: a few minutes the first time)" >&2
cargo build --release --workspace --bins --features robot_node/ros2
mkdir -p target/release/r2r
for bin in lop_robot lop_bandwidth lop_power; do
  cp -f "target/release/$bin" "target/release/r2r/$bin"
done
echo "build-r2r: target/release/r2r/{lop_robot,lop_bandwidth,lop_power}" >&2
