#!/usr/bin/env bash
# The main job on the embedded default: builds `lop` and, on the zoo's ResNet-18 (seeded weights),
# shows its locality, proves random robot/server band layouts reproduce the unsplit output, then
# starts an edge service and a robot client in one process, joined by an in-process link
# replaying the bundled indoor Wi-Fi trace, and runs every method (robot-only, server-only, best
# layer partition, LOP) through the real runtime on real photographs (scripts/photos.sh): a line
# per inference, then a side-by-side table; then the same with the frame crossing as JPEG at
# quality 90, as a plain offload would ship it. The robot stands in for a 20x slower device
# (dilation). FRAMES=none runs on a synthetic frame instead (models without a camera input do).
#
# A detector or other task model runs with its post-processing stage as the plan's last op
# (`--task`), and each inference's line shows what the frame's result holds (the detections,
# as class, score and box in input pixels): zoo:yolo_det and zoo:pose_hr get `detect` and
# `pose`, zoo:occupancy3d gets `occupancy`; TASK=... overrides it (TASK=raw: the raw head).
# The zoo's detectors have seeded weights (their boxes mean nothing), so the detector demo ends
# with a trained one: ddddocr's character detector (scripts/ddddocr.sh) on a photographed page
# of text (scikit-image's page.png), through the same runtime, printing its real detections.
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
case "$model" in
  zoo:occupancy3d*|zoo:lidar*|*.onnx) default_frames=none ;;
  *) default_frames=photos ;;
esac
frames=${FRAMES:-$default_frames}
scripts/setup.sh
# shellcheck source=env.sh
. scripts/env.sh
cargo build --release -p lop_cli
lop=target/release/lop
echo "== lop inspect $model --task $task"
"$lop" inspect "$model" --task "$task"
echo "== lop verify $model --task $task --plans 2"
"$lop" verify "$model" --task "$task" --plans 2
bench=(bench "$model" --task "$task" --trace data/traces/indoor.csv --dilation 20 --requests 8)
if [ "$frames" = none ]; then
  echo "== lop ${bench[*]}"
  "$lop" "${bench[@]}" --verbose
  exit 0
fi
photos=$(scripts/photos.sh)
echo "== lop ${bench[*]} --frames target/photos (raw frames on the wire)"
"$lop" "${bench[@]}" --frames "$photos" --verbose
echo "== lop ${bench[*]} --frames target/photos --frame-codec jpeg:90 (each band a JPEG)"
"$lop" "${bench[@]}" --frames "$photos" --frame-codec jpeg:90 --verbose
if [ "$model" = zoo:yolo_det ] && [ "${DETECTOR:-ddddocr}" = ddddocr ]; then
  detector=$(scripts/ddddocr.sh)
  page=$(dirname "$(readlink -f "$photos/astronaut.png")")/page.png
  echo "== a trained detector on a photograph: ddddocr's common_det.onnx (characters) on $page"
  "$lop" bench "$detector" --task "detect;score=0.25;iou=0.45;max=20" --preprocess "raw;bgr" --frames "$page" \
    --methods server-only,lop --trace data/traces/indoor.csv --dilation 20 --requests 2 --verbose
fi
