#!/usr/bin/env bash
# Prints the path of a real trained detector: ddddocr 1.6.1's `common_det.onnx` (YOLOX-style,
# 416x416, BGR 0..255 input, one class: characters), installed into .venv by
# `scripts/setup.sh --test-deps` (done here when it is missing). For the detector demo and the
# real-model tests.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
find_model() {
  "$root/.venv/bin/python" -c 'import importlib.util, os; s = importlib.util.find_spec("ddddocr"); p = s and os.path.join(os.path.dirname(s.origin), "common_det.onnx"); print(p if p and os.path.isfile(p) else "")' 2>/dev/null || true
}
model=$(find_model)
if [ -z "$model" ]; then
  "$root/scripts/setup.sh" --test-deps >&2
  model=$(find_model)
fi
if [ -z "$model" ]; then
  echo "ddddocr: common_det.onnx is still missing after scripts/setup.sh --test-deps" >&2
  exit 1
fi
echo "$model"
