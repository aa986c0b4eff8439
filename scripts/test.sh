#!/usr/bin/env bash
# The project's test command (README, .ci/run): prepares the Python venv (libtorch from the
# torch==2.13.0 wheel plus the test peers onnxruntime/onnx/torchvision/ddddocr) and the ROS 2
# environment (scripts/ros.sh: Jazzy wheels and colcon, the interface packages built by `colcon
# build`), builds and installs the ROS package robot_node (r2r backend) with `colcon build` in
# that workspace (scripts/colcon.sh, into .ros/install/lib/robot_node), then
# builds everything once in release mode (scripts/feature-drift.sh checks that these builds share
# their dependencies) and runs every test of the workspace with that build
# (the r2r nodes against rclpy among them), with --no-fail-fast so that one failing test binary
# hides no other, and clippy (warnings denied) beside them. A test that cannot run here (no
# network namespaces, no TCP retransmission cap) fails, unless LOP_ALLOW_SKIP
# names what it lacks (for example LOP_ALLOW_SKIP=netns; runtime/src/skips.rs); the summary at
# the end lists every test skipped that way.
#
#   scripts/test.sh [--build-fuzz] [CARGO TEST ARGS...]
#
# The tests leave about half of the 2 cores idle (most of them wait on processes, links and
# clocks), so work that has no clock in what it checks runs beside them at idle priority: with no
# arguments, the real-model and export tests (the main run skips them by exact name) and the doc
# tests; with --build-fuzz (CI), the fuzz targets' build (scripts/fuzz.sh --build), which CI's
# fuzz step then finds done. With arguments, they go to one `cargo test --release --workspace`
# as they are.
set -euo pipefail
# Each phase says when it starts, in seconds since the command started (where the time goes).
phase() { echo "test: $* (at ${SECONDS} s)" >&2; }
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
build_fuzz=0
if [ "${1:-}" = --build-fuzz ]; then
  build_fuzz=1
  shift
fi
# Idle priority for the work done beside other work (SCHED_IDLE, idle I/O class where available):
# it takes only the CPU time the other work leaves.
idle=(nice -n 19)
! command -v chrt >/dev/null || ! chrt --idle 0 true 2>/dev/null || idle+=(chrt --idle 0)
! command -v ionice >/dev/null || ! ionice -c 3 true 2>/dev/null || idle+=(ionice -c 3)
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
# iproute2 (`ip netns`, `tc`) for the network-namespace tests, which fail rather than skip
# where namespaces cannot be made (unless LOP_ALLOW_SKIP names netns); nftables for the chaos test's faults in
# network namespaces (the kernel here has no netem qdisc).
missing=()
command -v ip >/dev/null && command -v tc >/dev/null || missing+=(iproute2)
command -v nft >/dev/null || missing+=(nftables)
if [ ${#missing[@]} -gt 0 ]; then
  echo "test: installing ${missing[*]} (apt-get)" >&2
  scripts/apt-install.sh "${missing[@]}" || echo "test: ${missing[*]} could not be installed; the netns tests will say so" >&2
fi
# shellcheck source=env.sh
. scripts/env.sh
# Every test skipped by the allow-list appends a line here (runtime/src/skips.rs).
export LOP_SKIP_LOG="$root/target/test-skips.log"
mkdir -p "$root/target"
: >"$LOP_SKIP_LOG"
# Prints the skipped tests on every exit (a failing run's summary too).
skips_summary() {
  if [ -s "$LOP_SKIP_LOG" ]; then
    echo "test: $(wc -l <"$LOP_SKIP_LOG") test(s) skipped, allowed by LOP_ALLOW_SKIP=${LOP_ALLOW_SKIP:-}:" >&2
    sed 's/^/test:   skipped: /' "$LOP_SKIP_LOG" >&2
  else
    echo "test: no test skipped (LOP_ALLOW_SKIP=${LOP_ALLOW_SKIP:-})" >&2
  fi
}
trap skips_summary EXIT
phase cargo fmt --check
cargo fmt --all -- --check
# The builds below must share every dependency they have in common, or cargo compiles zenoh and
# the engine again for each (scripts/feature-drift.sh; seconds, resolution only).
phase "every build shares its dependencies (scripts/feature-drift.sh)"
scripts/feature-drift.sh
# The r2r nodes first, built and installed by colcon: the workspace build below then puts the
# hiroz-only nodes back in target/release (both share every other artifact).
phase "colcon build of robot_node, the r2r nodes against ROS (scripts/colcon.sh; the first build: about 20 minutes on 2 cores)"
scripts/colcon.sh
phase "cargo build --release --workspace --bins (robot_node without r2r; the rest is built)"
# The interop tests run lop_edge and lop_robot as separate processes; build every binary first.
cargo build --release --workspace --bins
# What the whole run tests: every library, binary and integration test, and the doc tests.
# Examples are left out of `cargo test`'s build (about 2 minutes of a core: they are benchmark
# programs, run by hand); clippy's --all-targets still compiles them, so they cannot rot.
targets=(--lib --bins --tests)
if [ $# -eq 0 ]; then
  phase "cargo test --release --workspace ${targets[*]} --no-run"
  cargo test --release --workspace "${targets[@]}" --no-run
fi
pids=() names=() logs=()
# Work beside the tests at idle priority: it takes the CPU time they leave (about half of the 2
# cores: most of them wait on processes, links and clocks).
beside() {
  local name=$1 log=$2
  shift 2
  "${idle[@]}" "$@" >"$log" 2>&1 &
  pids+=($!) names+=("$name") logs+=("$log")
}
# Lints (the whole run only): clippy on every crate and target, warnings denied
# (scripts/clippy.sh: its own copy of the release build, so neither waits on the other's lock).
if [ $# -eq 0 ]; then
  phase "cargo clippy --all-targets -- -D warnings at idle priority beside the tests (scripts/clippy.sh, target/clippy.log)"
  beside "scripts/clippy.sh" target/clippy.log scripts/clippy.sh
fi
if [ "$build_fuzz" = 1 ]; then
  phase "the fuzz targets at idle priority beside the tests (scripts/fuzz.sh --build, target/fuzz-build.log)"
  beside "scripts/fuzz.sh --build" target/fuzz-build.log scripts/fuzz.sh --build
fi
test_rc=0
if [ $# -eq 0 ]; then
  # The real-model and export tests are pure computation against Python peers (onnxruntime,
  # torch.onnx), with no clock in what they check: they run beside the others, which are skipped
  # by exact name in the main run.
  lane=(--test export --test real_models)
  mapfile -t lane_tests < <(cargo test --release --workspace "${lane[@]}" -q -- --list 2>/dev/null | sed -n 's/: test$//p')
  [ ${#lane_tests[@]} -gt 0 ] || { echo "test: cargo test ${lane[*]} -- --list named no test" >&2; exit 1; }
  skip=(--exact)
  for t in "${lane_tests[@]}"; do skip+=(--skip "$t"); done
  phase "cargo test --release --workspace ${lane[*]} at idle priority beside the others (target/test-beside.log)"
  beside "cargo test ${lane[*]}" target/test-beside.log cargo test --release --workspace --no-fail-fast "${lane[@]}"
  # The doc tests have no clock either: rustdoc reads every crate to find them, about a minute
  # of the main lane in CI for a second of tests.
  phase "cargo test --release --workspace --doc at idle priority beside the others (target/test-doc.log)"
  beside "cargo test --doc" target/test-doc.log cargo test --release --workspace --doc
  phase "cargo test --release --workspace ${targets[*]} --no-fail-fast, but for those ${#lane_tests[@]}"
  cargo test --release --workspace "${targets[@]}" --no-fail-fast -- "${skip[@]}" || test_rc=$?
else
  phase cargo test --release --workspace --no-fail-fast "$@"
  cargo test --release --workspace --no-fail-fast "$@" || test_rc=$?
fi
failed=0
for i in "${!pids[@]}"; do
  rc=0
  wait "${pids[$i]}" || rc=$?
  phase "${names[$i]} ended (exit $rc; ${logs[$i]})"
  case "${names[$i]}" in cargo\ test*) cat "${logs[$i]}" >&2 ;; *) [ "$rc" = 0 ] || tail -30 "${logs[$i]}" >&2 ;; esac
  [ "$rc" = 0 ] || { echo "test: ${names[$i]} failed (exit $rc)" >&2; failed=1; }
done
[ "$test_rc" = 0 ] || exit "$test_rc"
[ "$failed" = 0 ] || exit 1
phase done
