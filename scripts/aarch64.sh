#!/usr/bin/env bash
# Cross-compiles the robot side for aarch64 (a Jetson's CPU) and runs it under qemu-user.
#
#   scripts/aarch64.sh [--build-only]
#
# 1. Installs what is missing: Debian's gcc/g++-aarch64-linux-gnu and qemu-user (apt-get, as
#    root), the Rust target aarch64-unknown-linux-gnu (rustup).
# 2. Downloads PyPI's aarch64 torch==2.13.0 wheel (the version the x86 build uses from .venv)
#    and the two CUDA runtime wheels its libtorch_cpu.so names as NEEDED (nvidia-cuda-runtime,
#    nvidia-cuda-cupti: PyPI's aarch64 torch is a CUDA 13 build, there is no +cpu wheel on PyPI),
#    into target/aarch64/wheel/, and unpacks their libraries into target/aarch64/libtorch/.
#    Skipped when already there.
# 3. Builds, with CARGO_TARGET_DIR=target/aarch64 (the x86 build in target/ is not touched),
#    `lop`, `lop_robot`, `lop_bandwidth` and `lop_power` (default features: hiroz) in release
#    mode for aarch64-unknown-linux-gnu, and the robot node's unit tests. tch links
#    libtorch_cpu and libc10 only (a link folder without libtorch_cuda.so, and an empty
#    libtorch.so that --as-needed drops), so no CUDA library but libcudart/libcupti is loaded.
# 4. Under qemu-aarch64 (-L target/aarch64/qemu-root: /usr/aarch64-linux-gnu's libc and a faked
#    aarch64 /proc/cpuinfo, without which libtorch crashes under qemu): the robot node's unit tests,
#    `lop verify zoo:resnet18 --plans 2`, and `lop run zoo:resnet18` on a seeded uint8 .npy image,
#    compared with the x86 target/release/lop on the same input (max|a-b|/max|b| <= 1e-5, numpy
#    of .venv). The x86 binary is used as it is when present (LOP_X86=PATH to choose another);
#    when missing it is built (`. scripts/env.sh; cargo build --release -p lop_cli --bin lop`).
#
# Prints each phase on stderr as `aarch64: PHASE (at N s)` and a table of times at the end
# (also written to target/aarch64/times.txt). Exits non-zero on the first failure, naming it.
# Needs .venv (scripts/setup.sh; numpy from scripts/setup.sh --test-deps). See docs/jetson.md.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

build_only=0
for arg in "$@"; do
  case "$arg" in
    --build-only) build_only=1 ;;
    -h|--help) sed -n '2,30p' "$0"; exit 0 ;;
    *) echo "aarch64: unknown argument '$arg' (expected --build-only)" >&2; exit 2 ;;
  esac
done

triple=aarch64-unknown-linux-gnu
torch_version=2.13.0
cudart_version=13.0.96   # the versions torch 2.13.0's cu130 wheel pins (cuda-toolkit 13.0.3)
cupti_version=13.0.85
dir=$root/target/aarch64
wheels=$dir/wheel
lt=$dir/libtorch            # unpacked wheels: torch/{lib,include}, nvidia/cu13/lib
sysroot=/usr/aarch64-linux-gnu
venv=$root/.venv
t0=$(date +%s.%N)
times=()

now() { awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.0f", b - a }'; }
phase() { echo "aarch64: $* (at $(now) s)" >&2; }
died=0
die() { died=1; echo "aarch64: FAILED: $*" >&2; exit 1; }
trap 'rc=$?; rm -f "${cpu_file:-}"; [ $rc = 0 ] || [ $died = 1 ] || echo "aarch64: FAILED (exit $rc): $BASH_COMMAND" >&2' EXIT
# timed NAME CMD...: runs CMD, records its wall and CPU time under NAME.
# CPU time: bash's `times` (its children's user and system time), written to a file because a
# command substitution would run it in a subshell that has no children.
cpu_file=$(mktemp)
cpu_read() { awk 'END { n = 0; for (i = 1; i <= 2; i++) { split($i, a, "m"); sub("s", "", a[2]); n += a[1] * 60 + a[2] } printf "%.1f", n }' "$cpu_file"; }
timed() {
  local name=$1; shift
  local s e c0 c1
  s=$(date +%s.%N); times >"$cpu_file"; c0=$(cpu_read)
  "$@" || die "$name (exit $?): $*"
  e=$(date +%s.%N); times >"$cpu_file"; c1=$(cpu_read)
  local secs cpu
  secs=$(awk -v a="$s" -v b="$e" 'BEGIN { printf "%.1f", b - a }')
  cpu=$(awk -v a="$c0" -v b="$c1" 'BEGIN { printf "%.1f", b - a }')
  times+=("$(printf '%-48s %8s s wall %8s s CPU' "$name" "$secs" "$cpu")")
  echo "aarch64: $name took $secs s wall, $cpu s CPU (user + system)" >&2
}

# ---- 1. tools -------------------------------------------------------------------------------
phase "checking the cross toolchain, qemu-user and the Rust target"
missing=()
command -v aarch64-linux-gnu-gcc >/dev/null 2>&1 || missing+=(gcc-aarch64-linux-gnu)
command -v aarch64-linux-gnu-g++ >/dev/null 2>&1 || missing+=(g++-aarch64-linux-gnu)
qemu=$(command -v qemu-aarch64 || command -v qemu-aarch64-static || true)
[ -n "$qemu" ] || missing+=(qemu-user)
if [ ${#missing[@]} -gt 0 ]; then
  phase "installing ${missing[*]} (apt-get)"
  "$root/scripts/apt-install.sh" "${missing[@]}" || die "could not install ${missing[*]}"
  qemu=$(command -v qemu-aarch64 || command -v qemu-aarch64-static || true)
fi
[ -n "$qemu" ] || die "qemu-aarch64 not found after installing qemu-user"
[ -e "$sysroot/lib/ld-linux-aarch64.so.1" ] || die "$sysroot/lib/ld-linux-aarch64.so.1 missing (libc6-arm64-cross, pulled in by gcc-aarch64-linux-gnu)"
if ! rustup target list --installed 2>/dev/null | grep -qx "$triple"; then
  phase "rustup target add $triple"
  rustup target add "$triple" >&2 || die "rustup target add $triple"
fi
echo "aarch64: $(aarch64-linux-gnu-gcc --version | head -1); $("$qemu" --version | head -1); $(rustc -V)" >&2

# ---- 2. libtorch for aarch64 ----------------------------------------------------------------
[ -x "$venv/bin/pip" ] || die "$venv is missing: run scripts/setup.sh first (its pip downloads the wheels)"
mkdir -p "$wheels" "$lt"
# pip's --platform takes exact tags; the wheels carry different manylinux tags.
plat=(--platform manylinux_2_28_aarch64 --platform manylinux_2_25_aarch64 --platform manylinux_2_17_aarch64 --platform manylinux2014_aarch64)
fetch() { # fetch GLOB SPEC [pip args...]: downloads SPEC unless a file matching GLOB is there
  local glob=$1 spec=$2; shift 2
  if compgen -G "$wheels/$glob" >/dev/null; then
    echo "aarch64: have $(basename "$(compgen -G "$wheels/$glob" | head -1)")" >&2
  else
    phase "downloading $spec for aarch64 from PyPI"
    timed "download $spec" "$venv/bin/pip" download --quiet --no-deps --only-binary=:all: "${plat[@]}" "$@" -d "$wheels" "$spec"
  fi
}
fetch "torch-$torch_version-cp311-cp311-manylinux*aarch64.whl" "torch==$torch_version" --python-version 3.11 --implementation cp --abi cp311
fetch "nvidia_cuda_runtime-$cudart_version-*aarch64*.whl" "nvidia-cuda-runtime==$cudart_version"
fetch "nvidia_cuda_cupti-$cupti_version-*aarch64*.whl" "nvidia-cuda-cupti==$cupti_version"

stamp=$lt/.unpacked-$torch_version-$cudart_version-$cupti_version
if [ ! -e "$stamp" ]; then
  phase "unpacking the wheels' libraries and headers into $lt"
  rm -rf "$lt/torch" "$lt/nvidia" "$lt/link"
  unpack() {
    "$venv/bin/python" - "$lt" "$wheels"/torch-"$torch_version"-*aarch64.whl "$wheels"/nvidia_cuda_runtime-"$cudart_version"-*aarch64*.whl "$wheels"/nvidia_cuda_cupti-"$cupti_version"-*aarch64*.whl <<'PY'
import os, stat, sys, zipfile
dest, wheels = sys.argv[1], sys.argv[2:]
keep = ("torch/lib/", "torch/include/", "torch/version.py", "nvidia/cu13/lib/")
for w in wheels:
    with zipfile.ZipFile(w) as z:
        for info in z.infolist():
            if info.filename.startswith(keep):
                path = z.extract(info, dest)
                mode = (info.external_attr >> 16) & 0o777
                if mode:
                    os.chmod(path, mode | stat.S_IRUSR)
PY
  }
  timed "unpack wheels" unpack
  touch "$stamp"
fi
grep -q "__version__ = '$torch_version" "$lt/torch/version.py" || die "$lt/torch/version.py is not torch $torch_version"
# The folder tch links against: libtorch_cpu and libc10 of the wheel, no libtorch_cuda.so (so
# torch-sys does not link it, nor cuDNN, cuBLAS, NCCL... behind it), and an empty libtorch.so
# for torch-sys's -ltorch (the real one only pulls in libtorch_cuda.so; --as-needed drops this).
if [ ! -e "$lt/link/lib/libtorch.so" ]; then
  mkdir -p "$lt/link/lib"
  ln -sf ../../torch/lib/libtorch_cpu.so "$lt/link/lib/libtorch_cpu.so"
  ln -sf ../../torch/lib/libc10.so "$lt/link/lib/libc10.so"
  aarch64-linux-gnu-gcc -shared -o "$lt/link/lib/libtorch.so" -x c /dev/null -Wl,-soname,libtorch.so \
    || die "building the empty libtorch.so"
fi
runtime_libs=$lt/torch/lib:$lt/nvidia/cu13/lib
# qemu's root for the guest (-L): the cross libc of $sysroot, plus an aarch64 /proc/cpuinfo and
# MIDR_EL1 registers (a Jetson Orin's Cortex-A78AE). qemu-user 7.2 shows the guest the host's
# x86 /proc/cpuinfo, on which libtorch's CPU detection (cpuinfo, oneDNN's xbyak_aarch64) crashes
# with a segmentation fault at the first tensor operation. qemu opens PATH as ROOT/PATH where
# that exists, else PATH.
qroot=$dir/qemu-root
if [ ! -e "$qroot/proc/cpuinfo" ]; then
  mkdir -p "$qroot/proc"
  for d in "$sysroot"/*; do ln -sfn "$d" "$qroot/$(basename "$d")"; done
  ncpu=$(nproc)
  : >"$qroot/proc/cpuinfo.tmp"
  for ((i = 0; i < ncpu; i++)); do
    mkdir -p "$qroot/sys/devices/system/cpu/cpu$i/regs/identification"
    echo 0x00000000411fd421 >"$qroot/sys/devices/system/cpu/cpu$i/regs/identification/midr_el1"
    printf 'processor\t: %d\nBogoMIPS\t: 62.50\nFeatures\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm lrcpc dcpop asimddp uscat ilrcpc flagm paca pacg\nCPU implementer\t: 0x41\nCPU architecture: 8\nCPU variant\t: 0x1\nCPU part\t: 0xd42\nCPU revision\t: 1\n\n' "$i" >>"$qroot/proc/cpuinfo.tmp"
  done
  mv "$qroot/proc/cpuinfo.tmp" "$qroot/proc/cpuinfo"
fi

# ---- 3. cross-build ------------------------------------------------------------------------
# What torch-sys reads (its build.rs): LIBTORCH_USE_PYTORCH must be unset (any value turns it on,
# and it would ask .venv's x86 python); includes from $LIBTORCH_INCLUDE/include, libraries from
# $LIBTORCH_LIB/lib; the wheels are built with the C++11 ABI.
unset LIBTORCH_USE_PYTORCH LIBTORCH_BYPASS_VERSION_CHECK LIBTORCH_STATIC RUSTFLAGS CARGO_ENCODED_RUSTFLAGS
unset AMENT_PREFIX_PATH CMAKE_PREFIX_PATH   # no ROS install in this build (hiroz uses its bundled messages)
export CARGO_TARGET_DIR=$dir
export LIBTORCH=$lt/torch LIBTORCH_INCLUDE=$lt/torch LIBTORCH_LIB=$lt/link LIBTORCH_CXX11_ABI=1
export CC_aarch64_unknown_linux_gnu=aarch64-linux-gnu-gcc CXX_aarch64_unknown_linux_gnu=aarch64-linux-gnu-g++
export AR_aarch64_unknown_linux_gnu=aarch64-linux-gnu-ar
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
# A cross ld does not follow the libraries' own RPATH ($ORIGIN/...) to their dependencies.
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUSTFLAGS="-C link-arg=-Wl,-rpath-link,$runtime_libs"
# `cargo test/run --target $triple` run through qemu, with the aarch64 libtorch in the guest's
# library path only (-E), not in qemu's own.
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="$qemu -L $qroot -E LD_LIBRARY_PATH=$runtime_libs"

cold=cold
[ -e "$dir/$triple/release/lop" ] && cold=warm
phase "cargo build --release --target $triple -p lop_cli --bin lop -p robot_node --bins ($cold)"
timed "cross-build lop + robot nodes ($cold)" nice -n 19 cargo build --release --locked --target "$triple" \
  -p lop_cli --bin lop -p robot_node --bin lop_robot --bin lop_bandwidth --bin lop_power
phase "cargo test --release --no-run --target $triple -p robot_node --lib"
timed "cross-build robot_node unit tests" nice -n 19 cargo test --release --locked --target "$triple" -p robot_node --lib --no-run

bin=$dir/$triple/release
for b in lop lop_robot lop_bandwidth lop_power; do
  f=$bin/$b
  [ -x "$f" ] || die "$f was not built"
  readelf -h "$f" | grep -q 'Machine:.*AArch64' || die "$f is not an aarch64 executable"
  needed=$(readelf -d "$f" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' ')
  case " $needed " in *" libtorch.so "*|*cuda*) die "$f needs [$needed]: libtorch.so or a CUDA library would drag in all of CUDA" ;; esac
  echo "aarch64: $b: aarch64, $(du -h "$f" | cut -f1), needs $needed" >&2
done

if [ "$build_only" = 1 ]; then
  phase "done (--build-only)"
  printf '%s\n' "${times[@]}" | tee "$dir/times.txt" >&2
  exit 0
fi

# ---- 4. under qemu --------------------------------------------------------------------------
phase "robot_node unit tests under qemu ($CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER)"
timed "robot_node unit tests under qemu" nice -n 19 cargo test --release --locked --target "$triple" -p robot_node --lib
run_qemu() { nice -n 19 "$qemu" -L "$qroot" -E LD_LIBRARY_PATH="$runtime_libs" "$@"; }

phase "lop verify zoo:resnet18 --plans 2 under qemu"
timed "lop verify zoo:resnet18 --plans 2 (qemu)" run_qemu "$bin/lop" verify zoo:resnet18 --plans 2

phase "lop run zoo:resnet18: aarch64 under qemu against x86"
cmp=$dir/compare
mkdir -p "$cmp"
"$venv/bin/python" -c 'import numpy' 2>/dev/null || die "numpy is missing from .venv: run scripts/setup.sh --test-deps"
"$venv/bin/python" -c '
import numpy as np, sys
np.save(sys.argv[1], np.random.default_rng(2026).integers(0, 256, (1, 3, 224, 224), dtype=np.uint8))
' "$cmp/input.npy"
x86=${LOP_X86:-$root/target/release/lop}
if [ ! -x "$x86" ]; then
  phase "building the x86 reference: cargo build --release -p lop_cli --bin lop (target/)"
  ( unset CARGO_TARGET_DIR; . "$root/scripts/env.sh"; nice -n 19 cargo build --release --locked -p lop_cli --bin lop ) \
    || die "building the x86 lop"
fi
echo "aarch64: x86 reference $x86 (built $(date -u -r "$x86" '+%F %T UTC'))" >&2
rm -f "$cmp/aarch64.npy" "$cmp/x86.npy"
timed "lop run zoo:resnet18 (qemu)" run_qemu "$bin/lop" run zoo:resnet18 --input "$cmp/input.npy" --output "$cmp/aarch64.npy"
( . "$root/scripts/env.sh"; "$x86" run zoo:resnet18 --input "$cmp/input.npy" --output "$cmp/x86.npy" ) || die "x86 lop run"
"$venv/bin/python" - "$cmp/aarch64.npy" "$cmp/x86.npy" <<'PY' || die "aarch64 and x86 outputs differ by more than 1e-5 relative"
import sys
import numpy as np
a, b = np.load(sys.argv[1]), np.load(sys.argv[2])
assert a.shape == b.shape and a.dtype == b.dtype, (a.shape, a.dtype, b.shape, b.dtype)
rel = float(np.abs(a.astype(np.float64) - b).max() / np.abs(b).max())
same = int((a == b).sum())
print(f"aarch64: lop run zoo:resnet18 output {a.shape} {a.dtype}: max|a-b|/max|b| = {rel:.3e} "
      f"(max|a-b| = {float(np.abs(a.astype(np.float64) - b).max()):.3e}, {same}/{a.size} equal bitwise)", file=sys.stderr)
sys.exit(0 if rel <= 1e-5 else 1)
PY

phase "done"
printf '%s\n' "${times[@]}" | tee "$dir/times.txt" >&2
