#!/usr/bin/env bash
# Creates the project-local Python venv (.venv) with the libtorch that tch links against
# (torch==2.13.0 from PyPI) when it is missing. Idempotent: a venv that already has the right
# torch is left alone. Installs oneDNN (x86_64: the engine calls its convolutions straight) and the
# JPEG codec's build tools (cmake, NASM) when they are missing.
#
# Pass --test-deps to also install the Python peers the real-model tests use into the same venv:
# torchvision==0.28.0 (the release built for torch 2.13; torch stays pinned so pip never swaps
# it), onnx and onnxruntime (reference outputs), numpy, pillow, and ddddocr==1.6.1 without its
# dependencies (only its bundled common_det.onnx is used), rapidocr-onnxruntime==1.4.4 without its
# dependencies (only its bundled PP-OCRv4 text detector, a trained segmenter, is used), and the
# independent ROS 2 peer of the
# interop tests: eclipse-zenoh==1.10.2 (the Zenoh protocol of the Rust zenoh 1.10.2 the nodes
# use) and rosbags==0.11.9 (CDR and .msg parsing, no ROS install). When they are already there
# at the pinned versions, nothing is downloaded (a fraction of a second). Concurrent runs
# serialise on a lock file in the venv.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv="$root/.venv"
py=${PYTHON:-python3}
torch_version=2.13.0
torchvision_version=0.28.0
onnx_version=1.23.2
onnxruntime_version=1.31.1
numpy_version=2.4.6
ddddocr_version=1.6.1
rapidocr_version=1.4.4
zenoh_version=1.10.2
rosbags_version=0.11.9
# An independent libjpeg-turbo build that decodes with merged upsampling, as lop does
# (tests/jpeg/cases.py: the reference for tests/jpeg_decoding.rs).
simplejpeg_version=1.9.0
skimage_version=0.26.0
# oneDNN for the engine's convolutions, called straight (lop/src/ops/direct.rs): Intel's wheel
# built on GNU OpenMP, the runtime the torch wheel loads too, and its headers (x86_64 only).
onednn_version=2023.2.0

test_deps=0
for arg in "$@"; do
  case "$arg" in
    --test-deps) test_deps=1 ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) echo "setup: unknown argument '$arg' (expected --test-deps)" >&2; exit 2 ;;
  esac
done

# The build tools of the bundled libjpeg-turbo (lop's JPEG codec, built from source by
# turbojpeg-sys): cmake, and NASM for its x86 SIMD (the build refuses to go without it).
missing_tools=""
command -v cmake >/dev/null 2>&1 || missing_tools="$missing_tools cmake"
case "$(uname -m)" in x86_64|i?86) command -v nasm >/dev/null 2>&1 || missing_tools="$missing_tools nasm" ;; esac
if [ -n "$missing_tools" ]; then
  echo "setup: installing the JPEG codec's build tools:$missing_tools (Debian's packages)" >&2
  # shellcheck disable=SC2086
  "$root/scripts/apt-install.sh" $missing_tools \
    || { echo "setup: missing build tools:$missing_tools (libjpeg-turbo's build needs them)" >&2; exit 1; }
fi

if [ ! -x "$venv/bin/python" ]; then
  echo "setup: creating venv at $venv" >&2
  "$py" -m venv "$venv"
fi

# Serialise installs (parallel test binaries may call this at the same time).
if command -v flock >/dev/null 2>&1; then
  exec 9>"$venv/.setup.lock"
  flock 9
fi

torch_installed() {
  "$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("torch").split("+")[0])' 2>/dev/null || true
}
have=$(torch_installed)
if [ "$have" != "$torch_version" ]; then
  echo "setup: installing torch==$torch_version into $venv (about 1 minute)" >&2
  "$venv/bin/pip" install --quiet --upgrade pip >&2
  "$venv/bin/pip" install --quiet "torch==$torch_version" >&2
fi

# oneDNN (x86_64): libdnnl.so.3 into $venv/lib and its headers into $venv/include, where lop's
# build finds them (lop/build.rs). Elsewhere lop builds without it and convolutions take
# libtorch's route.
onednn_installed() {
  "$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("onednn-cpu-gomp"), m.version("onednn-devel-cpu-gomp"))' 2>/dev/null || true
}
if [ "$(uname -m)" = x86_64 ] && [ "$(onednn_installed)" != "$onednn_version $onednn_version" ]; then
  echo "setup: installing onednn-cpu-gomp==$onednn_version (and its headers) into $venv" >&2
  "$venv/bin/pip" install --quiet --no-deps "onednn-cpu-gomp==$onednn_version" "onednn-devel-cpu-gomp==$onednn_version" >&2
fi

# Real photographs for benchmarks and the demo (scripts/photos.sh): scikit-image's sample data,
# without its dependencies (only the pictures are read, by lop itself).
skimage_installed() {
  "$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("scikit-image"))' 2>/dev/null || true
}
if [ "$(skimage_installed)" != "$skimage_version" ]; then
  echo "setup: installing scikit-image==$skimage_version (its photographs) into $venv" >&2
  "$venv/bin/pip" install --quiet --no-deps "scikit-image==$skimage_version" >&2
fi

if [ "$test_deps" = 1 ]; then
  # Checked from package metadata, without importing anything (fast, and ddddocr's own
  # dependencies are deliberately absent).
  check_test_deps() {
    "$venv/bin/python" - "$torch_version" "$torchvision_version" "$onnx_version" "$onnxruntime_version" "$numpy_version" "$ddddocr_version" \
      "$zenoh_version" "$rosbags_version" "$rapidocr_version" "$simplejpeg_version" <<'PY'
import importlib.metadata as md, importlib.util, os, sys
names = ["torch", "torchvision", "onnx", "onnxruntime", "numpy", "ddddocr", "eclipse-zenoh", "rosbags", "rapidocr-onnxruntime",
         "simplejpeg"]
want = dict(zip(names, sys.argv[1:]))
want["pillow"] = None
bad = []
for name, version in want.items():
    try:
        have = md.version(name).split("+")[0]
    except md.PackageNotFoundError:
        bad.append(f"{name} missing")
        continue
    if version is not None and have != version:
        bad.append(f"{name} {have} != {version}")
spec = importlib.util.find_spec("ddddocr")
if spec is None or not os.path.isfile(os.path.join(os.path.dirname(spec.origin), "common_det.onnx")):
    bad.append("ddddocr/common_det.onnx missing")
spec = importlib.util.find_spec("rapidocr_onnxruntime")
if spec is None or not os.path.isfile(os.path.join(os.path.dirname(spec.origin), "models", "ch_PP-OCRv4_det_infer.onnx")):
    bad.append("rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx missing")
if bad:
    print("; ".join(bad), file=sys.stderr)
    sys.exit(1)
PY
  }
  if ! check_test_deps 2>/dev/null; then
    echo "setup: installing test peers (torchvision, onnx, onnxruntime, numpy, ddddocr, eclipse-zenoh, rosbags, simplejpeg) into $venv" >&2
    # torch is named with its pin so that resolving torchvision can never replace it.
    "$venv/bin/pip" install --quiet \
      "torch==$torch_version" "torchvision==$torchvision_version" \
      "onnx==$onnx_version" "onnxruntime==$onnxruntime_version" "numpy==$numpy_version" pillow \
      "eclipse-zenoh==$zenoh_version" "rosbags==$rosbags_version" "simplejpeg==$simplejpeg_version" >&2
    "$venv/bin/pip" install --quiet --no-deps "ddddocr==$ddddocr_version" "rapidocr-onnxruntime==$rapidocr_version" >&2
    if ! check_test_deps; then
      echo "setup: test peers still incomplete after installing (see above)" >&2
      exit 1
    fi
  fi
  # A real Prometheus server and promtool for the metrics test (Debian's package).
  if ! command -v prometheus >/dev/null 2>&1 || ! command -v promtool >/dev/null 2>&1; then
    echo "setup: installing prometheus (Debian's package: the server and promtool)" >&2
    "$root/scripts/apt-install.sh" prometheus \
      || { echo "setup: prometheus is missing: install Debian's prometheus package" >&2; exit 1; }
  fi
fi
extra=""
[ "$test_deps" = 1 ] && extra=", test peers"
[ "$(uname -m)" = x86_64 ] && extra="$extra, oneDNN $onednn_version"
echo "setup: ok (torch $(torch_installed)$extra)" >&2
