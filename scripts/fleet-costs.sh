#!/usr/bin/env bash
# Regenerates config/fleet/models.json, the model costs `lop fleet-sim` uses by default: every
# model is profiled on this machine as the server, and again dilated 20x as the robot (the
# project's reference robot), then summarised with `lop fleet-cost`.
#
# Usage: scripts/fleet-costs.sh [OUT.json]   (needs a release build: cargo build --release)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/env.sh
out="${1:-config/fleet/models.json}"
lop=target/release/lop
[ -x "$lop" ] || { echo "fleet-costs: build first (cargo build --release)" >&2; exit 1; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
echo "[]" > "$work/costs.json"
# name | model | extra model options
models=(
  "resnet18|zoo:resnet18|"
  "mobilenet_v2|zoo:mobilenet_v2|"
  "yolo_det|zoo:yolo_det|--task detect"
  "lidar_bev|zoo:lidar_bev|"
)
for entry in "${models[@]}"; do
  IFS='|' read -r name model opts <<< "$entry"
  echo "fleet-costs: $name" >&2
  # shellcheck disable=SC2086
  "$lop" profile "$model" $opts --role server --out "$work/$name.server.json" > /dev/null
  # shellcheck disable=SC2086
  "$lop" profile "$model" $opts --role robot --dilation 20 --out "$work/$name.robot.json" > /dev/null
  # shellcheck disable=SC2086
  "$lop" fleet-cost "$model" $opts --name "$name" --robot-profile "$work/$name.robot.json" \
    --server-profile "$work/$name.server.json" --out "$work/costs.json"
done
cp "$work/costs.json" "$out"
echo "fleet-costs: wrote $out" >&2
