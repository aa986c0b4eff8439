# Source this file (`. scripts/ros-env.sh`) after scripts/ros.sh, as one sources a ROS 2
# workspace's install/setup.bash: the project-local ROS 2 Jazzy (.ros/venv, from PyPI wheels)
# underlays this repository's interface packages (.ros/install: lop_msgs, vision_msgs).
# Afterwards `python3 -c 'import rclpy, lop_msgs.msg'` works, on the default middleware. Its
# python3 comes first in PATH: to build tch crates afterwards, put .venv/bin (libtorch's Python)
# back in front, as torch-sys asks `python3` where libtorch is.
_lop_ros=$(cd "$(dirname "${BASH_SOURCE[0]:-$0}")/.." && pwd)/.ros
if [ -x "$_lop_ros/venv/bin/python" ]; then
  export ROS_DISTRO=jazzy
  export ROS_VERSION=2
  export ROS_PYTHON_VERSION=3
  export AMENT_PREFIX_PATH="$_lop_ros/install:$_lop_ros/venv"
  export CMAKE_PREFIX_PATH="$_lop_ros/install:$_lop_ros/venv"
  _lop_libs="$_lop_ros/install/lib:$_lop_ros/venv/lib"
  for _d in "$_lop_ros"/venv/lib/python3.11/site-packages/ros_*.libs; do
    [ -d "$_d" ] && _lop_libs="$_lop_libs:$_d"
  done
  case ":${LD_LIBRARY_PATH:-}:" in *":$_lop_ros/install/lib:"*) ;; *) export LD_LIBRARY_PATH="$_lop_libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" ;; esac
  # For `cargo build -p robot_node --features ros2` (robot_node/build.rs): the library folders,
  # written into the r2r nodes as their run path, and the shared libpython the wheels' rosidl
  # Python libraries need.
  export LOP_ROS_LINK_DIRS="$_lop_libs"
  export LOP_ROS_LIBPYTHON=$("$_lop_ros/venv/bin/python" -c 'import sysconfig as s; print(s.get_config_var("LIBDIR") + ":" + s.get_config_var("LDLIBRARY")[3:].split(".so")[0])')
  # Fast DDS with a 32 MB shared-memory segment, so camera-sized best-effort messages arrive
  # (config/fastdds.xml says why); a profile already chosen is kept.
  export FASTRTPS_DEFAULT_PROFILES_FILE="${FASTRTPS_DEFAULT_PROFILES_FILE:-$(dirname "$_lop_ros")/config/fastdds.xml}"
  # r2r generates Rust types for these packages only (nested ones included).
  export IDL_PACKAGE_FILTER="std_msgs;sensor_msgs;geometry_msgs;builtin_interfaces;service_msgs;rcl_interfaces;unique_identifier_msgs;action_msgs;type_description_interfaces;rosgraph_msgs;diagnostic_msgs;lifecycle_msgs;lop_msgs;vision_msgs"
  case ":${PYTHONPATH:-}:" in
    *":$_lop_ros/install/lib/python3.11/site-packages:"*) ;;
    *) export PYTHONPATH="$_lop_ros/install/lib/python3.11/site-packages${PYTHONPATH:+:$PYTHONPATH}" ;;
  esac
  case ":$PATH:" in *":$_lop_ros/venv/bin:"*) ;; *) export PATH="$_lop_ros/venv/bin:$PATH" ;; esac
else
  echo "scripts/ros-env.sh: $_lop_ros/venv is missing; run scripts/ros.sh first" >&2
fi
unset _lop_ros _lop_libs _d
