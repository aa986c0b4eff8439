#!/usr/bin/env bash
# Measures the guide's figures and rewrites its tables: runs the named benchmarks with the release
# build, stores each result under docs/results/NAME.json with the command and the machine it ran
# on (CPU, cores, date, commit), then renders every table of docs/ from the stored results
# (scripts/render_results.py). The test command checks that the guide's tables equal that
# rendering, so a figure in the guide is never typed by hand.
#
#   scripts/bench_report.sh [NAME ...]      # default: every name below
#
# Names:
#   demo            the demo's `lop bench` of zoo:resnet18 (robot 20x, indoor trace), the robot
#                   and server profiles measured first and kept in target/bench-report/
#   demo-detector   the same for zoo:yolo_det with its detection stage
#   planner         31-bucket tables for both models' profiles against their bounds
#                   (scripts/bench_planner.py; runs after demo and demo-detector, or measures
#                   their profiles)
#   fleet           `lop fleet-sim` at 1000 robots and 50 servers, 90% load
#   fleet-site      `lop fleet-sim` at 10,000 robots and 500 servers, 90% load, each robot
#                   hearing one shard's site digest (edges reporting at 50 Hz, digests at 20 Hz)
#   codecs          `lop codecs`: every frame codec on real photographs (scripts/photos.sh),
#                   640x480, bytes against raw and encode/decode time
#   engine          lop's engine against onnxruntime on the exported real models (resnet18,
#                   yolo_det at 320 and 640, common_det, convnext_tiny from scripts/real_models.py), one thread
#                   and two, each layout (scripts/against_onnxruntime.py)
#   frames-raw, frames-jpeg90, frames-lossless
#                   zoo:yolo_det with its detection stage on those photographs (fitted to
#                   640x640), the frame crossing raw, as JPEG at quality 90, or lossless (QOI)
#   realistic-20x, realistic-5x
#                   frames-jpeg90 in the realistic scenario (`--server-real-ms 4`: a server GPU
#                   taking 4 ms for the detector, the indoor trace read as real Wi-Fi), the robot
#                   20x slower than the server (a Jetson on PyTorch) or 5x (TensorRT on both)
#   camera-20x, camera-5x
#                   the same with the camera's own JPEGs crossing unchanged: the photographs
#                   as a 640x480 camera's 4:2:0 JPEGs at quality 90 (`lop camera-jpegs`), the
#                   detector letterboxing them itself (`--camera-fit letterbox:114@640x480`),
#                   `--frame-codec passthrough`
#
# Every bench run says which scenario it ran (`auto`: the link scaled to this CPU's compute, or
# `realistic`) in its result's `scenario`, rendered under its table.
#
# Run it on a quiet machine: anything else on the cores shows in the figures.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
all=(demo demo-detector planner fleet fleet-site codecs engine frames-raw frames-jpeg90 frames-lossless realistic-20x realistic-5x camera-20x camera-5x)
names=("$@")
[ ${#names[@]} -gt 0 ] || names=("${all[@]}")
for n in "${names[@]}"; do
  case " ${all[*]} " in *" $n "*) ;; *) echo "bench_report: unknown name '$n' (${all[*]})" >&2; exit 2 ;; esac
done
scripts/setup.sh
# shellcheck source=env.sh
. scripts/env.sh
cargo build --release -p lop_cli >&2
lop=target/release/lop
work=target/bench-report
mkdir -p "$work" docs/results
trace=data/traces/indoor.csv

# The machine and the code, recorded with every result.
machine() {
  local cpu commit isa
  cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
  # The widest vector instructions: oneDNN's and onnxruntime's kernels (and which of them is
  # faster) differ between AVX2 and AVX-512 machines that report the same model name.
  isa=$(grep -m1 -ow -e avx512f -e avx2 -e asimd /proc/cpuinfo | head -1 | tr a-z A-Z)
  commit=$(git rev-parse --short=12 HEAD)
  git diff --quiet HEAD -- . ':!docs' 2>/dev/null || commit="$commit+changes"
  printf '{"cpu": "%s", "isa": "%s", "cores": %s, "date": "%s", "commit": "%s"}' \
    "${cpu:-unknown}" "${isa:-unknown}" "$(nproc)" "$(date -u +%Y-%m-%dT%H:%MZ)" "$commit"
}

# store NAME KIND COMMAND...: runs COMMAND (its stdout is one JSON value) and writes
# docs/results/NAME.json.
store() {
  local name=$1 kind=$2
  shift 2
  echo "bench_report: $name: $*" >&2
  local out="$work/$name.out"
  "$@" >"$out"
  python3 - "$name" "$kind" "$(machine)" "$out" "$*" <<'EOF'
import json, sys
name, kind, machine, out, command = sys.argv[1:]
result = json.load(open(out))
import os
command = command.replace(os.getcwd() + "/", "").replace("target/release/", "")
doc = {"name": name, "kind": kind, "command": command, "machine": json.loads(machine), "result": result}
open(f"docs/results/{name}.json", "w").write(json.dumps(doc, indent=1, sort_keys=True) + "\n")
EOF
}

# The robot's slowdown in bench runs (and its profile's): 20 unless a name sets it.
robot_dilation=20

# Extra model options for profiles and benches (a camera fit), and the tag their profiles get.
model_args=()
tag_suffix=""

# The robot profile's file for MODEL's TAG at $robot_dilation.
robot_profile() {
  if [ "$robot_dilation" = 20 ]; then echo "$work/$1-robot.json"; else echo "$work/$1-robot-${robot_dilation}x.json"; fi
}

# profiles MODEL TASK: the robot's ($robot_dilation x) and the server's profile of MODEL with
# TASK, measured once.
profiles() {
  local model=$1 task=$2 tag=${1#zoo:}$tag_suffix
  for role in robot server; do
    local p="$work/$tag-$role.json"
    [ "$role" = robot ] && p=$(robot_profile "$tag")
    [ -s "$p" ] && continue
    local dil=1
    [ "$role" = robot ] && dil=$robot_dilation
    echo "bench_report: profiling $model as $role (dilation $dil)" >&2
    # One libtorch thread, as `lop bench` runs both sides.
    "$lop" --threads 1 profile "$model" --task "$task" "${model_args[@]}" --role "$role" --dilation "$dil" --out "$p" >&2
  done
}

bench() {
  local name=$1 model=$2 task=$3 tag=${2#zoo:}$tag_suffix
  shift 3
  profiles "$model" "$task"
  store "$name" bench "$lop" bench "$model" --task "$task" "${model_args[@]}" --trace "$trace" --dilation "$robot_dilation" --requests 8 \
    --robot-profile "$(robot_profile "$tag")" --server-profile "$work/$tag-server.json" "$@" --json
}

for n in "${names[@]}"; do
  case "$n" in
    demo) bench demo zoo:resnet18 raw ;;
    demo-detector) bench demo-detector zoo:yolo_det detect ;;
    planner)
      profiles zoo:resnet18 raw
      profiles zoo:yolo_det detect
      store planner planner python3 scripts/bench_planner.py --lop "$lop" --wires native --json --task zoo:yolo_det=detect \
        "zoo:resnet18:$work/resnet18-robot.json:$work/resnet18-server.json" \
        "zoo:yolo_det:$work/yolo_det-robot.json:$work/yolo_det-server.json" ;;
    fleet) store fleet fleet "$lop" fleet-sim --robots 1000 --servers 50 --load 0.9 --seconds 60 --json ;;
    fleet-site) store fleet-site fleet "$lop" fleet-sim --robots 10000 --servers 500 --load 0.9 --seconds 60 --hear site \
      --shard-size 50 --shards-heard 1 --report-period-s 0.02 --digest-period-s 0.05 --json ;;
    codecs) store codecs codecs "$lop" codecs --frames "$(scripts/photos.sh)" --json ;;
    engine)
      scripts/setup.sh --test-deps
      .venv/bin/python scripts/real_models.py --out target/real_models --models resnet18,yolo_det,yolo_det_640,common_det,convnext_tiny >&2
      store engine engine .venv/bin/python scripts/against_onnxruntime.py --threads 1,2 --runs 10 --json - \
        target/real_models/resnet18.onnx target/real_models/yolo_det.onnx target/real_models/yolo_det_640.onnx \
        target/real_models/common_det.onnx target/real_models/convnext_tiny.onnx ;;
    frames-raw) bench frames-raw zoo:yolo_det detect --frames "$(scripts/photos.sh)" --frame-codec raw ;;
    frames-jpeg90) bench frames-jpeg90 zoo:yolo_det detect --frames "$(scripts/photos.sh)" --frame-codec jpeg:90 ;;
    frames-lossless) bench frames-lossless zoo:yolo_det detect --frames "$(scripts/photos.sh)" --frame-codec lossless ;;
    realistic-20x|realistic-5x)
      robot_dilation=${n#realistic-}
      robot_dilation=${robot_dilation%x}
      bench "$n" zoo:yolo_det detect --frames "$(scripts/photos.sh)" --frame-codec jpeg:90 --server-real-ms 4
      robot_dilation=20 ;;
    camera-20x|camera-5x)
      robot_dilation=${n#camera-}
      robot_dilation=${robot_dilation%x}
      model_args=(--camera-fit letterbox:114@640x480)
      tag_suffix=-camera640x480
      cameras=$("$lop" camera-jpegs --frames "$(scripts/photos.sh)" --size 640x480 --quality 90 --out "$work/camera-jpegs")
      bench "$n" zoo:yolo_det detect --frames "$cameras" --frame-codec passthrough --server-real-ms 4
      model_args=()
      tag_suffix=""
      robot_dilation=20 ;;
  esac
done
python3 scripts/render_results.py
