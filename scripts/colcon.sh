#!/usr/bin/env bash
# Builds the robot nodes the ROS way: `colcon build` of the package robot_node (build type
# ament_cargo: colcon-ros-cargo runs cargo-ament-build) with the r2r backend (feature ros2), in the
# colcon workspace of scripts/ros.sh (.ros, whose src/lop is this repository). colcon installs
#
#     .ros/install/lib/robot_node/{lop_robot,lop_bandwidth,lop_power}   the executables
#     .ros/install/share/robot_node/{launch,config,package.xml}         launch files, parameters
#
# as it would in a team's workspace (README, "On a Jetson"), where the same command is
#
#     colcon build --packages-select robot_node --cargo-args --release --features ros2
#
# The nodes run on the default middleware (Fast DDS) with no environment set: the ROS library
# folders are their run path (robot_node/build.rs).
#
#     scripts/setup.sh && scripts/ros.sh && scripts/colcon.sh
#     .ros/install/lib/robot_node/lop_robot --backend r2r --config config/robot.yaml
#
# The build shares target/ with the workspace's cargo builds: .ros/build/robot_node (colcon's
# build folder for the package, which it hands cargo as --target-dir) is a link to target/, so
# only robot_node and r2r compile anew (scripts/feature-drift.sh checks that this build resolves
# every shared dependency as the others do). A later `cargo build --release --workspace --bins`
# puts the hiroz-only nodes back in target/release; the installed ones stay.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
ws="$root/.ros"
[ -x "$ws/venv/bin/colcon" ] || { echo "colcon: $ws/venv/bin/colcon is missing; run scripts/ros.sh first" >&2; exit 1; }
[ -L "$ws/src/lop" ] || { echo "colcon: the workspace $ws/src/lop is missing; run scripts/ros.sh first" >&2; exit 1; }
# shellcheck source=ros-env.sh
. scripts/ros-env.sh
# shellcheck source=env.sh
. scripts/env.sh
# torch-sys asks `python3` where libtorch is: the venv with torch first, not ROS' venv.
export PATH="$root/.venv/bin:$PATH"
mkdir -p "$ws/build" target
if [ ! -L "$ws/build/robot_node" ]; then
  rm -rf "$ws/build/robot_node"
  ln -s ../../target "$ws/build/robot_node"
fi
echo "colcon: colcon build --packages-select robot_node --cargo-args --release --features ros2 (r2r generates its message types: a few minutes the first time; log in $ws/log/latest_build)" >&2
t0=$SECONDS
# colcon's cargo task prints `cargo metadata` to stdout: the log keeps it, the console does not.
(cd "$ws" && "$ws/venv/bin/colcon" --log-base log build --base-paths src --build-base build --install-base install \
    --merge-install --packages-select robot_node --event-handlers console_direct- \
    --cargo-args --release --features ros2 >/dev/null) \
  || { echo "colcon: building robot_node failed; log in $ws/log/latest_build/robot_node:" >&2; tail -40 "$ws/log/latest_build/robot_node/stderr.log" >&2; exit 1; }
for bin in lop_robot lop_bandwidth lop_power; do
  [ -x "$ws/install/lib/robot_node/$bin" ] || { echo "colcon: $ws/install/lib/robot_node/$bin was not installed" >&2; exit 1; }
done
echo "colcon: robot_node built and installed in $((SECONDS - t0)) s: $ws/install/lib/robot_node/{lop_robot,lop_bandwidth,lop_power}, $ws/install/share/robot_node/{launch,config}" >&2
