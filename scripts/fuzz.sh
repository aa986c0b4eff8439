#!/usr/bin/env bash
# Coverage-guided fuzzing of every reader of outside data (fuzz/src/lib.rs names the targets):
# builds the libFuzzer binaries, runs each for SECONDS (default 60) from the committed seed
# corpus, and prints executions, coverage and crashes per target. Exit status 1 when a target
# crashed: the input is under target/fuzz-artifacts/<target>/; fix the bug, then add the input to
# fuzz/corpus/<target>/ so that the test run replays it from then on.
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]
#   scripts/fuzz.sh --build [TARGET...]     (builds only: CI builds them while the tests run)
#
# FUZZ_JOBS=N runs N targets at once (default: one per core). CI runs all nine at once for 30 s
# each: 30 s of wall time instead of 150 on 2 cores one at a time per core, each target getting
# about 2/9 of a core.
#
# Stable Rust: libfuzzer-sys links libFuzzer, scripts/sancov-rustc instruments the project's
# crates. The build reuses the release build's dependencies (a hard-linked copy of
# target/release, the project's own crates removed from it), so run it after a release build.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/env.sh
build_only=0
if [ "${1:-}" = --build ]; then
  build_only=1
  shift
  seconds=0
else
  seconds=${1:-60}
  shift || true
  case "$seconds" in '' | *[!0-9]* | 0) echo "fuzz: SECONDS must be a positive whole number, not '$seconds'" >&2; exit 2 ;; esac
fi
targets=("$@")
all=(frame onnx table config ros picture band site hello)
[ ${#targets[@]} -gt 0 ] || targets=("${all[@]}")
for t in "${targets[@]}"; do
  case " ${all[*]} " in *" $t "*) ;; *) echo "fuzz: unknown target '$t' (targets: ${all[*]})" >&2; exit 2 ;; esac
done

dir=target/fuzz
if [ -d target/release/.fingerprint ] && [ ! -d "$dir/release" ]; then
  echo "fuzz: reusing target/release's dependencies (hard links)"
  mkdir -p "$dir"
  cp -al target/release "$dir/release"
  # The project's crates are rebuilt instrumented: remove their files from the copy, so that
  # nothing written for them reaches target/release through a shared inode.
  for c in lop lop_core lop_codec lop_fleet lop_msgs lop_runtime lop_power robot_node edge_server lop_fuzz cli lop_cli tests; do
    rm -rf "$dir/release/.fingerprint/$c-"* "$dir/release/build/$c-"* "$dir/release/deps/$c-"* "$dir/release/deps/lib$c-"*
  done
  rm -f "$dir/release/"{lop,lop_edge,lop_robot,lop_bandwidth,lop_power,lop_fuzz_seeds,fuzz_*} "$dir/release/"*.d
fi
# cargo's lock file must not be the release build's own (a hard link of an older copy): the two
# builds would wait for each other, and the test command runs them side by side.
if [ -e "$dir/release/.cargo-lock" ] && [ "$dir/release/.cargo-lock" -ef target/release/.cargo-lock ]; then
  rm -f "$dir/release/.cargo-lock"
fi
t0=$(date +%s)
bins=()
for t in "${targets[@]}"; do bins+=(--bin "fuzz_$t"); done
# --workspace: the release build's feature set, so that its dependencies are reused as built.
RUSTC_WRAPPER="$PWD/scripts/sancov-rustc" CARGO_TARGET_DIR=$dir \
  cargo build --release --locked --workspace --features lop_fuzz/libfuzzer "${bins[@]}"
echo "fuzz: built in $(( $(date +%s) - t0 )) s"
[ "$build_only" = 0 ] || exit 0

# One target: runs it, then writes its summary line to target/fuzz-<target>.result.
run_one() {
  local t=$1 work=target/fuzz-corpus/$1 art=target/fuzz-artifacts/$1/ log=target/fuzz-$1.log rc result
  mkdir -p "$work" "$art"
  set +e
  # -rss_limit_mb: a reader that allocates without bound is a crash; -timeout: so is a hang.
  "$dir/release/fuzz_$t" "$work" "fuzz/corpus/$t" -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 \
    -artifact_prefix="$art" -print_final_stats=1 >"$log" 2>&1
  rc=$?
  set -e
  local execs rate cov corp
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
  corp=$(grep -o 'corp: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
  result=ok
  [ $rc -eq 0 ] || result="CRASH (exit $rc): $(ls "$art" | head -3 | tr '\n' ' ')see $log"
  printf '%-8s %10s %9s %8s %7s %s\n' "$t" "${execs:-?}" "${rate:-?}" "${cov:-?}" "${corp:-?}" "$result" >"target/fuzz-$t.result"
}

# As many targets at once as there are cores (each libFuzzer process uses one), or FUZZ_JOBS.
jobs_max=${FUZZ_JOBS:-$(nproc)}
case "$jobs_max" in '' | *[!0-9]* | 0) echo "fuzz: FUZZ_JOBS must be a positive whole number, not '$jobs_max'" >&2; exit 2 ;; esac
for t in "${targets[@]}"; do
  rm -f "target/fuzz-$t.result"
  while [ "$(jobs -rp | wc -l)" -ge "$jobs_max" ]; do wait -n || true; done
  echo "fuzz: $t for $seconds s"
  run_one "$t" &
done
wait
failed=0
printf '%-8s %10s %9s %8s %7s %s\n' target executions exec/s coverage corpus result
for t in "${targets[@]}"; do
  line=$(cat "target/fuzz-$t.result" 2>/dev/null || echo "$t ? ? ? ? NO RESULT")
  echo "$line"
  case "$line" in *" ok") ;; *) failed=1; grep -E "panicked|ERROR: libFuzzer|SUMMARY" "target/fuzz-$t.log" | head -5 >&2 || true ;; esac
done
exit $failed
