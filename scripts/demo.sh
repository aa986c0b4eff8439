#!/usr/bin/env bash
# The main job on the embedded default: builds `lop` and, on the zoo's ResNet-18 (seeded weights,
# synthetic 224x224 camera frame), shows its locality, proves random robot/server band layouts
# reproduce the unsplit output, then starts an edge service and a robot client in one process,
# joined by an in-process link replaying the bundled indoor Wi-Fi trace, and runs every method
# (robot-only, server-only, best layer partition, LOP) through the real runtime: a line per
# inference, then a side-by-side table. The robot stands in for a 20x slower device (dilation).
#
# A detector or other task model runs with its post-processing stage as the plan's last op
# (`--task`), and each inference's line shows what the frame's result holds (the detections,
# as class, score and box in input pixels): zoo:yolo_det and zoo:pose_hr get `detect` and
# `pose`, zoo:occupancy3d gets `occupancy`; TASK=... overrides it (TASK=raw: the raw head).
# Usage: scripts/demo.sh [zoo:MODEL | path/to/model.onnx]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
model=${1:-zoo:resnet18}
case "$model" in
  zoo:yolo_det*) default_task=detect ;;
  zoo:pose_hr*) default_task=pose ;;
  zoo:occupancy3d*) default_task=occupancy ;;
  *) default_task=raw ;;
esac
task=${TASK:-$default_task}
scripts/setup.sh
# shellcheck source=env.sh
. scripts/env.sh
cargo build --release -p lop_cli
lop=target/release/lop
echo "== lop inspect $model --task $task"
"$lop" inspect "$model" --task "$task"
echo "== lop verify $model --task $task --plans 2"
"$lop" verify "$model" --task "$task" --plans 2
echo "== lop bench $model --task $task --trace data/traces/indoor.csv --dilation 20 --requests 8"
"$lop" bench "$model" --task "$task" --trace data/traces/indoor.csv --dilation 20 --requests 8 --verbose
