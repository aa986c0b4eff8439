#!/usr/bin/env bash
# The main job on the embedded default: builds `lop` and, on the zoo's ResNet-18 (seeded weights,
# synthetic 224x224 camera frame), shows its locality, proves random robot/server band layouts
# reproduce the unsplit output, then starts an edge service and a robot client in one process,
# joined by an in-process link replaying the bundled indoor Wi-Fi trace, and runs every method
# (robot-only, server-only, best layer partition, LOP) through the real runtime: a line per
# inference, then a side-by-side table. The robot stands in for a 20x slower device (dilation).
# Usage: scripts/demo.sh [zoo:MODEL | path/to/model.onnx]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
model=${1:-zoo:resnet18}
scripts/setup.sh
# shellcheck source=env.sh
. scripts/env.sh
cargo build --release -p lop_cli
lop=target/release/lop
echo "== lop inspect $model"
"$lop" inspect "$model"
echo "== lop verify $model --plans 2"
"$lop" verify "$model" --plans 2
echo "== lop bench $model --trace data/traces/indoor.csv --dilation 20 --requests 8"
"$lop" bench "$model" --trace data/traces/indoor.csv --dilation 20 --requests 8 --verbose
