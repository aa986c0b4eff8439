#!/usr/bin/env bash
# Creates the project-local Python venv (.venv) with the libtorch that tch links against
# (torch==2.13.0 from PyPI, CPU wheel) when it is missing. Idempotent: a venv that already has
# the right torch is left alone. Pass --test-deps to also install the Python peers the tests use
# (onnxruntime, onnx, torchvision, ddddocr) into the same venv.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv="$root/.venv"
py=${PYTHON:-python3}
torch_version=2.13.0

if [ ! -x "$venv/bin/python" ]; then
  echo "setup: creating venv at $venv" >&2
  "$py" -m venv "$venv"
fi
have=$("$venv/bin/python" -c 'import torch; print(torch.__version__.split("+")[0])' 2>/dev/null || true)
if [ "$have" != "$torch_version" ]; then
  echo "setup: installing torch==$torch_version into $venv (about 1 minute)" >&2
  "$venv/bin/pip" install --quiet --upgrade pip >&2
  "$venv/bin/pip" install --quiet "torch==$torch_version" >&2
fi
if [ "${1:-}" = "--test-deps" ]; then
  if ! "$venv/bin/python" -c 'import onnxruntime, onnx, torchvision, ddddocr, numpy' 2>/dev/null; then
    echo "setup: installing test peers (onnxruntime, onnx, torchvision, ddddocr) into $venv" >&2
    "$venv/bin/pip" install --quiet "torchvision==0.28.0" --no-deps >&2 || "$venv/bin/pip" install --quiet "torchvision==0.28.0" >&2
    "$venv/bin/pip" install --quiet onnxruntime onnx numpy pillow "ddddocr==1.6.1" --no-deps >&2
    "$venv/bin/pip" install --quiet onnxruntime onnx numpy pillow >&2
  fi
fi
echo "setup: ok ($("$venv/bin/python" -c 'import torch; print("torch", torch.__version__)'))" >&2
