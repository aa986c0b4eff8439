#!/usr/bin/env bash
# The main job on the embedded default: builds `lop` and, on the zoo's ResNet-50 (seeded weights,
# synthetic 224x224 camera frame), shows its locality, proves random robot/server band layouts
# reproduce the unsplit output, and measures the band executor's overhead.
# Usage: scripts/demo.sh [zoo:MODEL | path/to/model.onnx]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
model=${1:-zoo:resnet50}
scripts/setup.sh
# shellcheck source=env.sh
. scripts/env.sh
cargo build --release -p lop_cli
lop=target/release/lop
echo "== lop inspect $model"
"$lop" inspect "$model"
echo "== lop verify $model --plans 4"
"$lop" verify "$model" --plans 4
echo "== lop bench-exec $model --runs 10"
"$lop" bench-exec "$model" --runs 10 --warmup 2
