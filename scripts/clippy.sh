#!/usr/bin/env bash
# Lints every crate and target of the workspace as CI requires:
#   cargo clippy --release --workspace --all-targets -- -D warnings
# in target/clippy, a hard-linked copy of target/release (as scripts/fuzz.sh makes), so that the
# build scripts' outputs (torch-sys's C++ wrapper, hiroz's generated messages) are reused and
# the test command can run it beside its tests without either build waiting on the other's lock.
# Run after a release build (scripts/test.sh does); without one it builds everything itself.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=env.sh
. scripts/env.sh
dir=target/clippy
if [ -d target/release ] && [ ! -d "$dir/release" ]; then
  mkdir -p "$dir"
  cp -al target/release "$dir/release"
  rm -f "$dir/release/.cargo-lock"
  # The project's own crates are linted, not reused: remove their files from the copy, so that
  # nothing written for them (a build script's output) reaches target/release through a shared
  # inode.
  for c in lop lop_core lop_codec lop_fleet lop_msgs lop_runtime lop_power robot_node edge_server lop_fuzz cli lop_cli tests; do
    rm -rf "$dir/release/.fingerprint/$c-"* "$dir/release/build/$c-"* "$dir/release/deps/$c-"* "$dir/release/deps/lib$c-"*
  done
fi
# A lock file hard-linked from the release build would make the two builds wait for each other.
if [ -e "$dir/release/.cargo-lock" ] && [ "$dir/release/.cargo-lock" -ef target/release/.cargo-lock ]; then
  rm -f "$dir/release/.cargo-lock"
fi
t0=$(date +%s)
CARGO_TARGET_DIR=$dir cargo clippy --release --locked --workspace --all-targets -- -D warnings
echo "clippy: clean in $(( $(date +%s) - t0 )) s"
