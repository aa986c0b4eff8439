#!/usr/bin/env bash
# The project's test command (README, .ci/run): prepares the Python venv (libtorch from the
# torch==2.13.0 wheel plus the test peers onnxruntime/onnx/torchvision/ddddocr), then builds
# everything once in release mode and runs every test of the workspace with that build.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
scripts/setup.sh --test-deps
# shellcheck source=env.sh
. scripts/env.sh
echo "test: cargo fmt --check" >&2
cargo fmt --all -- --check
echo "test: cargo test --release --workspace (first build takes ~10 minutes on 2 cores)" >&2
cargo test --release --workspace "$@"
