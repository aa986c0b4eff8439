# Source this file (`. scripts/env.sh`) to build and run against the project-local libtorch.
# It points tch at the torch==2.13.0 wheel in .venv (created by scripts/setup.sh).
_lop_root=$(cd "$(dirname "${BASH_SOURCE[0]:-$0}")/.." && pwd)
export LIBTORCH_USE_PYTORCH=1
# torch-sys refuses a torch other than 2.13 at build time, naming both versions; it skips that
# check when LIBTORCH_BYPASS_VERSION_CHECK is set to anything (even 0), so it is not set here. At
# start the binaries refuse a libtorch of another version on their own (lop::libtorch).
if [ -x "$_lop_root/.venv/bin/python" ]; then
  case ":$PATH:" in *":$_lop_root/.venv/bin:"*) ;; *) export PATH="$_lop_root/.venv/bin:$PATH" ;; esac
  _lop_torch_lib="$_lop_root/.venv/lib/python3.11/site-packages/torch/lib"
  [ -d "$_lop_torch_lib" ] || _lop_torch_lib=$("$_lop_root/.venv/bin/python" -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib"))')
  case ":${LD_LIBRARY_PATH:-}:" in *":$_lop_torch_lib:"*) ;; *) export LD_LIBRARY_PATH="$_lop_torch_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" ;; esac
else
  echo "scripts/env.sh: $_lop_root/.venv is missing; run scripts/setup.sh first" >&2
fi
# hiroz's build scripts run again, and hiroz and every crate above it compile again, whenever
# AMENT_PREFIX_PATH or CMAKE_PREFIX_PATH differ from the last build (hiroz generates from its
# bundled message files either way). The r2r build sets both (scripts/ros-env.sh); where the
# project-local ROS 2 exists and no ROS is sourced, every other build gets the same two values.
if [ -z "${AMENT_PREFIX_PATH:-}" ] && [ -x "$_lop_root/.ros/venv/bin/python" ]; then
  export AMENT_PREFIX_PATH="$_lop_root/.ros/install:$_lop_root/.ros/venv"
  export CMAKE_PREFIX_PATH="$AMENT_PREFIX_PATH"
fi
unset _lop_root _lop_torch_lib
