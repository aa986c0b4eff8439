#!/usr/bin/env python3
"""Interop test: the real `lop_edge` and `lop_robot` binaries against an independent ROS 2 peer.

The peer (peer.py: eclipse-zenoh + rosbags, no ROS install) plays the camera or LiDAR driver and
`ros2 topic echo`, in rmw_zenoh's wire format. The script

1. measures (or reuses) the robot profile with `lop profile`, writes temporary configurations and
   starts `lop_edge` (its own Zenoh router) and `lop_robot` (an embedded ROS router) as separate
   processes on free 127.0.0.1 ports, and waits for both to log that they are ready; nothing is
   copied to the edge: lop_robot sends its profile in Hello and the edge plans for it;
2. checks the ROS graph (liveliness tokens): lop_robot's publisher of /lop/inference and
   /diagnostics and its subscriptions carry the type names and the REP-2011 hashes that
   rep2011.py computes from the .msg files;
3. publishes frames and checks every answered frame: stamp and frame copied, no fallback, and every
   output equal to the unsplit model's (`lop run`, a separate process) on the same input converted
   in Python exactly as lop_robot converts it, within 1e-4 relative (and within 3e-6, the rounding
   of a split run, which catches a conversion that differs by one level in one pixel); a bad frame is counted on
   /diagnostics and the node keeps answering; at the end frames sent == received and received ==
   answered + dropped (busy) + bad + errors;
4. reports the ROS-layer time per frame (arrival to publication minus the inference, from
   lop_robot's per-frame log lines and /diagnostics).

Peers (--ros):
  zenoh   (default) the Zenoh peer above against the hiroz backend (rmw_zenoh's wire format).
  rclpy   a stock ROS 2 graph: the r2r backend (`lop_robot --backend r2r`, built and installed
          by `colcon build`, scripts/colcon.sh) on the default middleware (Fast DDS) against rclpy_peer.py, with
          typed lop_msgs as rosidl built them (scripts/ros.sh); run it with .ros/venv/bin/python
          after `. scripts/ros-env.sh`. Camera mode also runs lop_bandwidth and lop_power (r2r) and
          checks /lop/bandwidth, /lop/power and /lop/energy, and changes parameters at run time
          through the parameter services as `ros2 param set` does; load mode also reports the
          time from the rclpy publish to the rclpy receipt of /lop/inference minus the
          inference's own time (started..finished).

Modes:
  --mode camera  zoo:resnet18: 224x224 rgb8, bgr8 (padded rows) and mono8 frames, 640x480 rgb8
                 frames (letterboxed; also the ROS-layer latency sample), a frame with a bad step.
  --mode lidar   zoo:lidar_bev: PointCloud2 sweeps (x, y, z, intensity as float32; NaN and
                 out-of-range points; an organised cloud with padded rows), a cloud without z.
  --mode detect  ddddocr's trained detector (common_det.onnx, YOLOX head, 416x416, BGR 0..255
                 input: `preprocess: raw;bgr`, letterbox padding 114) with the detection stage
                 (`task`): frames of drawn characters, 640x480 rgb8 and 320x240 bgr8, and one with
                 no detection; every /lop/detections (vision_msgs/Detection2DArray, the real Jazzy
                 type hash in the ROS graph) equals the unsplit model's detection rows (`lop run
                 --task`) mapped back into the frame's pixels, class names from a file.
  --mode compressed
                 zoo:resnet18 on sensor_msgs/CompressedImage (`image.transport: compressed`, topic
                 <image>/compressed) with `table.frame_codec: passthrough`: real photographs
                 (scikit-image's) as a 640x480 PNG (exact; converted as Image frames are, then
                 lossless on the wire) and as 224x224 JPEGs in both image_transport format styles
                 (the camera's bytes go to the edge unchanged; reference: `lop run` on the JPEG,
                 decoded as lop_robot and lop_edge decode it); a truncated JPEG, a PNG labelled
                 jpeg and a compressedDepth frame, each counted on /diagnostics.
  --mode load    camera at --fps for --duration s (default 30 fps, 60 s) of 640x480 rgb8 frames:
                 RSS of lop_robot at start, middle and end, answered + dropped == sent, ROS-layer
                 latency percentiles. Not part of the CI test.
  --mode lifecycle
                 rclpy only: zoo:resnet18 on lop_robot (r2r) as a managed node, driven through the
                 lifecycle_msgs services (lifecycle.py): autostarted to active, transitions not
                 allowed refused (success=false) with no frame lost beside them, deactivate (the
                 edge session closed, frames not answered), activate again, shutdown to finalized.
  --mode cameras zoo:resnet18 on one lop_robot with two cameras (cameras.py): both topics on one
                 model, one edge session per camera, each camera's frames exact at its own fit
                 and named after it, frames of both sent together all answered, a bad frame
                 counted on its camera's /diagnostics status only, the front camera's debug
                 image under /front, a topic named twice refused at start.
  --mode flood   zoo:resnet18 at --size: a hostile Zenoh peer (flood.py) sends lop_edge 1,000
                 Hellos with made-up robot ids and profiles within 10 s while lop_robot, with a
                 profile the edge has never seen, starts and streams frames: it splits during
                 the flood and after it, every frame exact; lop_edge's RssAnon (heap and
                 stacks) grows by at most 64 MiB; the refusals are in /metrics.

Exit status 0 when every check passes, 1 on a failed check (the message says which), 2 for a
setup problem (missing binaries, a process that did not start).

    .venv/bin/python tests/interop/interop.py --mode camera
    .venv/bin/python tests/interop/interop.py --mode load --fps 30 --duration 60
"""

import argparse
import hashlib
import importlib.util
import io
import json
import math
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import types

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, HERE)
# The ROS peer: peer.py (Zenoh) or rclpy_peer.py, chosen by --ros in main().
rospeer = None

# Every output within 1e-4 relative of the unsplit model (max|a - r| / max|r|).
TOL = 1e-4
# And, tighter, within what split-versus-whole rounding explains (observed: 1-3e-7 for resnet18,
# under 1e-6 for lidar_bev): a conversion that differs from lop_robot's by one level in one pixel
# moves resnet18's logits by about 6e-6 relative, which 1e-4 alone would let through.
CONVERSION_TOL = 3e-6
# Detect mode: the model's stage, the vision_msgs package and the Jazzy hash real vision_msgs 4.1
# gives Detection2DArray (msgs/tests/ros.rs cites where it was read).
DET_TASK = "detect;score=0.25;iou=0.45;max=20"
VISION_MSG_DIR = os.path.join(ROOT, "msgs", "vision_msgs", "msg")
DETECTION2DARRAY_JAZZY_HASH = "RIHS01_214274120007f4a683866481336b70310268cfa107aebe9d594a6acf75bda968"
# Box corners and centres in frame pixels: the head's rounding (about 1e-4 model pixels) times the
# letterbox scale (4 here), far below a pixel.
DET_PIXEL_TOL = 1e-2
ANSI = re.compile(r"\x1b\[[0-9;]*m")
# The DDS domain of the nodes in rclpy mode (None: the Zenoh peer's nodes take it from their config).
ROS_DOMAIN = None


class CheckFailed(Exception):
    """A check of the test failed (exit 1)."""


class SetupFailed(Exception):
    """The test could not be set up (exit 2)."""


def check(cond, what):
    if not cond:
        raise CheckFailed(what)


def log(msg):
    print(f"[interop {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def ddddocr_detector():
    """ddddocr 1.6.1's bundled detector, found in the venv without importing ddddocr."""
    spec = importlib.util.find_spec("ddddocr")
    path = os.path.join(os.path.dirname(spec.origin), "common_det.onnx") if spec and spec.origin else None
    if path is None or not os.path.isfile(path):
        raise SetupFailed("ddddocr's common_det.onnx is missing: run scripts/setup.sh --test-deps")
    return path


def dilate_profile(path, k):
    """Rewrites the undilated profile at `path` as a robot k times slower: what `lop profile
    --dilation k` records, without the waits between runs (`dilation_waits` false)."""
    with open(path, encoding="utf-8") as f:
        prof = json.load(f)
    check(prof["dilation"] == 1.0, f"{path}: expected an undilated profile, got dilation {prof['dilation']}")
    prof["dilation"], prof["dilation_waits"] = float(k), False
    for op in prof["ops"]:
        for s in op["samples"]:
            s["median_s"] = s["raw_median_s"] * k
        for key in ("a_s", "b_s_per_row", "residual_s"):
            op["fit"][key] *= k
    with open(path, "w", encoding="utf-8") as f:
        json.dump(prof, f)


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def child_env(extra=None):
    """The environment of the Rust binaries: libtorch from the venv's torch wheel, no colours."""
    env = dict(os.environ)
    venv_lib = os.path.join(ROOT, ".venv", "lib")
    if os.path.isdir(venv_lib):
        for d in sorted(os.listdir(venv_lib)):
            torch_lib = os.path.join(venv_lib, d, "site-packages", "torch", "lib")
            if os.path.isdir(torch_lib) and torch_lib not in env.get("LD_LIBRARY_PATH", "").split(":"):
                env["LD_LIBRARY_PATH"] = torch_lib + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
    env["NO_COLOR"] = "1"
    env.pop("ROS_DOMAIN_ID", None)
    if ROS_DOMAIN is not None:
        env["ROS_DOMAIN_ID"] = str(ROS_DOMAIN)
    env.pop("LOP_LOG", None)
    env.pop("RUST_LOG", None)
    env.update(extra or {})
    return env


class Proc:
    """A child process whose output (stdout and stderr) is collected line by line."""

    def __init__(self, name, argv, log_path, env):
        self.name = name
        self.lines = []
        self.cond = threading.Condition()
        self.log_file = open(log_path, "w", encoding="utf-8")  # noqa: SIM115  (closed in stop)
        self.p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, cwd=ROOT)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for raw in self.p.stdout:
            line = ANSI.sub("", raw.decode("utf-8", "replace").rstrip("\n"))
            self.log_file.write(line + "\n")
            with self.cond:
                self.lines.append(line)
                self.cond.notify_all()

    def wait_for(self, pattern, timeout, start=0):
        """Index of the first line from `start` on matching `pattern`; None on timeout or exit."""
        rx = re.compile(pattern)
        deadline = time.monotonic() + timeout
        i = start
        with self.cond:
            while True:
                while i < len(self.lines):
                    if rx.search(self.lines[i]):
                        return i
                    i += 1
                left = deadline - time.monotonic()
                if left <= 0 or self.p.poll() is not None:
                    return None
                self.cond.wait(min(left, 0.2))

    def grep(self, pattern):
        rx = re.compile(pattern)
        with self.cond:
            return [m for m in (rx.search(line) for line in self.lines) if m]

    def tail(self, n=30):
        with self.cond:
            return "\n".join(f"  {self.name}| {line}" for line in self.lines[-n:])

    def rss_kib(self, field="VmRSS"):
        """The process's resident memory in KiB as /proc/PID/status counts it under `field`
        (VmRSS: all of it; RssAnon: its heap and stacks; RssFile: the pages of files it maps)."""
        try:
            with open(f"/proc/{self.p.pid}/status", encoding="ascii") as f:
                for line in f:
                    if line.startswith(field + ":"):
                        return int(line.split()[1])
        except OSError:
            return None
        return None

    def stop(self, grace=10.0):
        """SIGTERM, then SIGKILL after `grace` seconds; returns the exit status."""
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
            try:
                self.p.wait(grace)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait(10)
        self.reader.join(5)
        self.log_file.close()
        return self.p.returncode


# ---------------------------------------------------------------------------------------------
# Conversions, reproduced from robot_node/src/convert (image.rs, cloud.rs) operation by operation.


def _taps(n_in, n_out):
    scale = n_in / n_out
    last = float(n_in - 1)
    i0s, i1s, ws = [], [], []
    for o in range(n_out):
        s = min(max((o + 0.5) * scale - 0.5, 0.0), last)
        i0 = math.floor(s)
        i1 = min(i0 + 1.0, last)
        i0s.append(int(i0))
        i1s.append(int(i1))
        ws.append(s - i0)
    return np.array(i0s), np.array(i1s), np.array(ws, dtype=np.float64).astype(np.float32)


def _round_half_away(x):
    return math.floor(x + 0.5)


def image_to_chw(width, height, encoding, step, data, th, tw, order="rgb", letterbox=True, pad=0):
    """lop_robot's conversion of an Image to a 3 x th x tw uint8 tensor (bilinear, half-pixel
    centres, f32 arithmetic, rounded to nearest; letterbox centred with `pad`)."""
    layouts = {"rgb8": (3, [0, 1, 2]), "bgr8": (3, [2, 1, 0]), "rgba8": (4, [0, 1, 2]), "bgra8": (4, [2, 1, 0]), "mono8": (1, None)}
    bpp, offs = layouts[encoding]
    buf = np.frombuffer(bytes(data), dtype=np.uint8)[: step * height].reshape(height, step)[:, : width * bpp]
    px = buf.reshape(height, width, bpp).astype(np.float32)
    if letterbox:
        s = min(tw / width, th / height)
        rw = min(max(_round_half_away(width * s), 1), tw)
        rh = min(max(_round_half_away(height * s), 1), th)
        left, top = (tw - rw) // 2, (th - rh) // 2
    else:
        rw, rh, left, top = tw, th, 0, 0
    out = np.full((3, th, tw), pad, dtype=np.uint8)
    x0, x1, fx = _taps(width, rw)
    y0, y1, fy = _taps(height, rh)
    if offs is None:
        sources = [0, 0, 0]
    else:
        ro, go, bo = offs
        sources = [ro, go, bo] if order == "rgb" else [bo, go, ro]
    fxr = fx[None, :]
    fyc = fy[:, None]
    for c, k in enumerate(sources):
        ch = px[:, :, k]
        r0a, r0b = ch[y0][:, x0], ch[y0][:, x1]
        r1a, r1b = ch[y1][:, x0], ch[y1][:, x1]
        top_v = r0a + (r0b - r0a) * fxr
        bot_v = r1a + (r1b - r1a) * fxr
        v = top_v + (bot_v - top_v) * fyc
        out[c, top : top + rh, left : left + rw] = (v + np.float32(0.5)).astype(np.uint8)
    return out[None]


BEV_X, BEV_Y, BEV_Z = (0.0, 102.4), (-51.2, 51.2), (-3.0, 1.0)


def _axis(rng, n):
    lo, hi = (float(np.float32(v)) for v in rng)
    return lo, hi, n / (hi - lo), n


def _index(ax, v):
    lo, hi, per, n = ax
    if v < lo or v >= hi:
        return None
    return min(int((v - lo) * per), n - 1)


def cloud_to_bev(points, rows, cols):
    """lop_robot's BEV grid (4 x rows x cols float32) of finite points [(x, y, z, i)] given as
    float32 values (NaN points skipped, out-of-range points left out)."""
    ax, ay, az = _axis(BEV_X, rows), _axis(BEV_Y, cols), _axis(BEV_Z, 1)
    count = np.zeros(rows * cols, dtype=np.int64)
    max_z = np.full(rows * cols, -np.inf)
    sum_i = np.zeros(rows * cols)
    used = 0
    for x, y, z, i in points:
        x, y, z, i = float(x), float(y), float(z), float(i)
        if not (math.isfinite(x) and math.isfinite(y) and math.isfinite(z)):
            continue
        r, c, k = _index(ax, x), _index(ay, y), _index(az, z)
        if r is None or c is None or k is None:
            continue
        cell = r * cols + c
        count[cell] += 1
        max_z[cell] = max(max_z[cell], z)
        sum_i[cell] += i if math.isfinite(i) else 0.0
        used += 1
    z_span = az[1] - az[0]
    occ = (count > 0).astype(np.float32)
    height = np.zeros(rows * cols, dtype=np.float32)
    mean_i = np.zeros(rows * cols, dtype=np.float32)
    dens = np.zeros(rows * cols, dtype=np.float32)
    ln64 = math.log(64.0)
    for cell in np.nonzero(count)[0]:
        n = int(count[cell])
        height[cell] = np.float32((max_z[cell] - az[0]) / z_span)
        mean_i[cell] = np.float32(sum_i[cell] / n)
    for cell in range(rows * cols):
        dens[cell] = np.float32(min(math.log(count[cell] + 1.0) / ln64, 1.0))
    grid = np.stack([occ, height, mean_i, dens]).reshape(1, 4, rows, cols)
    return grid, used


# ---------------------------------------------------------------------------------------------
# Frames (deterministic).


def pattern(n, seed):
    """n pseudo-random bytes from a fixed generator (deterministic across runs and machines)."""
    return np.random.default_rng(seed).integers(0, 256, size=n, dtype=np.uint8)


def image_frame(width, height, encoding, seed, row_pad=0):
    bpp = {"rgb8": 3, "bgr8": 3, "mono8": 1, "rgba8": 4, "bgra8": 4}[encoding]
    step = width * bpp + row_pad
    # Smooth structure plus noise, so resizing and the model see something image-like.
    yy, xx = np.mgrid[0:height, 0:width]
    base = ((xx * 255 // max(width - 1, 1) + yy * 127 // max(height - 1, 1)) % 256).astype(np.uint8)
    noise = pattern(height * width * bpp, seed).reshape(height, width, bpp)
    px = (base[:, :, None].astype(np.uint16) + noise // 4).astype(np.uint8)
    rows = np.full((height, step), 0xEE, dtype=np.uint8)
    rows[:, : width * bpp] = px.reshape(height, width * bpp)
    return {"width": width, "height": height, "encoding": encoding, "step": step, "data": rows.tobytes()}


def text_frame(width, height, encoding, seed, text):
    """Dark characters drawn on a light background (what ddddocr's detector finds), in `encoding`
    (rgb8 or bgr8)."""
    from PIL import Image as PilImage, ImageDraw, ImageFont

    rng = np.random.default_rng(seed)
    img = PilImage.new("RGB", (width, height), tuple(int(v) for v in rng.uniform(190, 240, 3)))
    draw = ImageDraw.Draw(img)
    font = ImageFont.load_default(size=int(height * 0.3))
    for i, ch in enumerate(text):
        at = (width * (0.08 + 0.22 * i), height * (0.3 + 0.1 * rng.uniform(-1, 1)))
        draw.text(at, ch, fill=tuple(int(v) for v in rng.uniform(0, 90, 3)), font=font)
    px = np.asarray(img, dtype=np.uint8)
    if encoding == "bgr8":
        px = px[:, :, ::-1]
    return {"width": width, "height": height, "encoding": encoding, "step": width * 3, "data": np.ascontiguousarray(px).tobytes()}


POINT_FIELDS = [("x", 0, 7, 1), ("y", 4, 7, 1), ("z", 8, 7, 1), ("intensity", 12, 7, 1)]


def cloud_frame(seed, n_cells=600, height=1, row_pad=0, nan_points=5, out_points=5, without_z=False):
    """Points at cell centres of the default 256x256 BEV grid (0.4 m cells), 1-3 per cell."""
    rng = np.random.default_rng(seed)
    pts = []
    cells = rng.choice(256 * 256, size=n_cells, replace=False)
    for cell in cells:
        r, c = divmod(int(cell), 256)
        for _ in range(int(rng.integers(1, 4))):
            x = 0.4 * r + 0.2 + float(rng.uniform(-0.15, 0.15))
            y = -51.2 + 0.4 * c + 0.2 + float(rng.uniform(-0.15, 0.15))
            z = float(rng.uniform(-2.9, 0.9))
            i = float(rng.integers(0, 256))
            pts.append((x, y, z, i))
    for _ in range(nan_points):
        pts.append((float("nan"), 1.0, 0.0, 1.0))
    for _ in range(out_points):
        pts.append((200.0, 0.0, 0.0, 1.0))
    while len(pts) % height:
        pts.append((float("nan"), 0.0, 0.0, 0.0))
    arr = np.array(pts, dtype=np.float32)
    width = len(pts) // height
    point_step = 16
    row_step = width * point_step + row_pad
    rows = np.full((height, row_step), 0xAB, dtype=np.uint8)
    rows[:, : width * point_step] = arr.reshape(height, width * 4).view(np.uint8)
    fields = [f for f in POINT_FIELDS if not (without_z and f[0] == "z")]
    return {
        "fields": fields,
        "width": width,
        "height": height,
        "point_step": point_step,
        "row_step": row_step,
        "data": rows.tobytes(),
        "points": [tuple(p) for p in arr],
    }


# ---------------------------------------------------------------------------------------------
# The harness.


class Harness:
    def __init__(self, args):
        self.args = args
        self.bin = os.path.abspath(args.bin_dir)
        self.rclpy = args.ros == "rclpy"
        # The robot nodes: the hiroz build beside lop, or the r2r build colcon installed
        # (scripts/colcon.sh).
        self.node_bin = os.path.abspath(args.node_bin_dir or args.bin_dir)
        needed = [(self.bin, "lop"), (self.bin, "lop_edge"), (self.node_bin, "lop_robot")]
        if self.rclpy:
            needed += [(self.node_bin, "lop_bandwidth"), (self.node_bin, "lop_power")]
        for d, b in needed:
            path = os.path.join(d, b)
            if not os.access(path, os.X_OK):
                hint = "scripts/colcon.sh" if self.rclpy and b not in ("lop", "lop_edge") else "cargo build --release --workspace --bins"
                raise SetupFailed(f"{path} is missing: build it first ({hint})")
        self.work = tempfile.mkdtemp(prefix=f"lop-interop-{args.mode}-")
        self.cache = os.path.abspath(args.cache_dir) if args.cache_dir else os.path.join(self.work, "cache")
        os.makedirs(self.cache, exist_ok=True)
        self.procs = []
        self.sent_at = {}  # stamp sec -> monotonic time just before publishing
        self.image_topic = "/front/image_raw" if args.ros == "rclpy" else "/camera/image_raw"
        self.compressed = args.mode == "compressed"
        # image_transport's convention: compressed frames on <image topic>/compressed.
        self.input_topic = self.image_topic + "/compressed" if self.compressed else self.image_topic
        self.input_type = "sensor_msgs/msg/CompressedImage" if self.compressed else "sensor_msgs/msg/Image"
        self.namespace = "/robot1"
        self.robot_node = f"{self.namespace.strip('/')}/lop_robot"
        self.peer = None
        self.types = rospeer.MsgTypes()
        self.refs = {}
        self.domain = args.domain
        self.ros_port, self.edge_port, self.metrics_port = free_port(), free_port(), free_port()
        # The edge's schedule tables, kept between runs; flood mode plans every table anew.
        self.edge_table_cache = os.path.join(self.work if args.mode == "flood" else self.cache, "edge-tables")
        self.lidar = args.mode == "lidar"
        self.detect = args.mode == "detect"
        # (source, id, task, preprocess, letterbox padding, model input size)
        self.model, self.model_id, self.task, self.preprocess, self.pad, self.size = {
            "lidar": lambda: ("zoo:lidar_bev", "lidar_bev", None, None, 0, 256),
            "detect": lambda: (ddddocr_detector(), "common_det", DET_TASK, "raw;bgr", 114, 416),
        }.get(args.mode, lambda: (f"zoo:resnet18@{args.size}x{args.size}" if args.size != 224 else "zoo:resnet18", "resnet18", None, None, 0, args.size))()
        if self.detect:
            self.types = rospeer.MsgTypes(msg_dirs=((rospeer.LOP_MSG_DIR, "lop_msgs"), (VISION_MSG_DIR, "vision_msgs")))
            self.class_names = ["character"]
        # Detect mode: a robot 20x slower than this machine (profile and kernels), so that the plan
        # sends the frame up and only the detections come back. Its profile is this machine's
        # times x 20 (robot_profile): measured with the dilation waits it took 100 s of sleeping.
        # Flood mode too: a robot as fast as this machine would plan robot-only and never ask
        # the edge again.
        self.dilation = 20.0 if self.detect or args.mode == "flood" else 1.0

    # -- set-up --------------------------------------------------------------------------------

    def robot_profile(self):
        """The robot profile (measured once by `lop profile`, cached per binary build).

        A dilated robot's profile is the undilated measurement with every time multiplied by the
        dilation (`dilation_waits` false): what is checked here is the split's exactness and the
        messages, not the plan's timing, and `lop profile --dilation 20` sleeps 19x each kernel's
        time after it (about 100 s for this detector, on the test command's critical path)."""
        lop = os.path.join(self.bin, "lop")
        st = os.stat(lop)
        key = hashlib.sha256(f"{self.model}|{self.task}|{self.dilation}x|{st.st_size}|{st.st_mtime_ns}".encode()).hexdigest()[:16]
        path = os.path.join(self.cache, "profiles", f"{self.model_id}-robot-{key}.json")
        if not os.path.isfile(path):
            os.makedirs(os.path.dirname(path), exist_ok=True)
            log(f"measuring the robot profile of {self.model} (lop profile)")
            tmp = path + f".{os.getpid()}.tmp"
            r = subprocess.run(
                [lop, "profile", self.model, *self.task_args(), "--role", "robot", "--out", tmp],
                env=child_env(),
                capture_output=True,
                text=True,
                timeout=300,
                check=False,
            )
            if r.returncode != 0:
                raise SetupFailed(f"lop profile failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
            if self.dilation != 1.0:
                dilate_profile(tmp, self.dilation)
            os.replace(tmp, path)
            for old in os.listdir(os.path.dirname(path)):  # profiles of earlier builds
                if old.startswith(f"{self.model_id}-robot-") and old != os.path.basename(path):
                    os.remove(os.path.join(os.path.dirname(path), old))
        return path

    def class_names_file(self):
        path = os.path.join(self.work, "classes.txt")
        with open(path, "w", encoding="utf-8") as f:
            f.write("".join(f"{n}\n" for n in self.class_names))
        return path

    def edge_source(self):
        """The edge's `source`: a zoo name, or an ONNX file copied into its model store."""
        if self.model.startswith("zoo:"):
            return self.model
        store = os.path.join(self.work, "models")
        os.makedirs(store, exist_ok=True)
        shutil.copy(self.model, store)
        return os.path.basename(self.model)

    def task_args(self):
        """The model's stages, as `lop` commands take them."""
        return (["--task", self.task] if self.task else []) + (["--preprocess", self.preprocess] if self.preprocess else [])

    def start(self):
        self.start_edge()
        self.start_robot()

    def start_edge(self):
        """Writes both configurations and starts lop_edge; returns once it is ready."""
        profile = self.robot_profile()
        # First contact with nothing copied: the edge's robot profiles folder stays empty;
        # lop_robot sends its profile in Hello and the edge plans for it.
        robots = os.path.join(self.work, "robots")
        os.makedirs(robots)
        buckets = "[0, 2, 8, 30]"
        edge_yaml = os.path.join(self.work, "edge.yaml")
        with open(edge_yaml, "w", encoding="utf-8") as f:
            f.write(
                (f"id: site-gpu-1\nserve_unaddressed: false\n" if self.args.fleet else "")
                + f'zenoh:\n  mode: router\n  listen: ["tcp/127.0.0.1:{self.edge_port}"]\n'
                f"models:\n  - id: {self.model_id}\n    source: {self.edge_source()}\n    server_profile: synthetic\n"
                + (f'    task: "{self.task}"\n    preprocess: "{self.preprocess}"\n' if self.task else "")
                + f"model_store: {os.path.join(self.work, 'models')}\n"
                f"robot_profiles: {robots}\n"
                f"table_cache: {self.edge_table_cache}\n"
                f"profile_cache: {os.path.join(self.cache, 'edge-profiles')}\n"
                f"table:\n  buckets: {buckets}\n"
                + ("  frame_codec: passthrough\n" if self.compressed else "")
                +
                "hello_timeout_s: 60\ntable_wait_s: 60\nshutdown_grace_s: 2\nlog: info\ngpu_energy:\n  enabled: false\n"
                f"metrics:\n  listen: 127.0.0.1:{self.metrics_port}\n"
            )
        self.robot_yaml = robot_yaml = os.path.join(self.work, "robot.yaml")
        input_kind = "lidar" if self.lidar else "camera"
        # rclpy mode: the RMW (Fast DDS) finds the nodes; the domain comes from ROS_DOMAIN_ID.
        self.ros_session = ros_session = (
            ""
            if self.rclpy
            else f'    domain_id: {self.domain}\n    router_endpoint: "tcp/127.0.0.1:{self.ros_port}"\n    embedded_router: true\n'
        )
        with open(robot_yaml, "w", encoding="utf-8") as f:
            f.write(
                "lop_robot:\n  ros__parameters:\n"
                + ros_session
                + f'    edge:\n      endpoint: "tcp/127.0.0.1:{self.edge_port}"\n'
                + ("      mode: fleet\n      deadline_ms: 20000.0\n" if self.args.fleet else "      mode: client\n")
                + '    robot_id: "interop-robot"\n'
                f'    model:\n      source: "{self.model}"\n      id: "{self.model_id}"\n'
                f'      robot_profile: "{profile}"\n      server_profile: "synthetic"\n'
                + (
                    f'      task: "{self.task}"\n      class_names: "{self.class_names_file()}"\n      preprocess: "{self.preprocess}"\n'
                    if self.task
                    else ""
                )
                + f'    table:\n      buckets: "0,2,8,30"\n'
                # Compressed mode: the whole frame to the edge, as the camera's own JPEG.
                + ('      frame_codec: "passthrough"\n    method: "server-only"\n' if self.compressed else "")
                +
                f'    cache_dir: "{os.path.join(self.work if self.args.mode == "flood" else self.cache, "robot-tables")}"\n'
                f'    input: "{input_kind}"\n'
                f'    image:\n      fit: "letterbox"\n      pad: {self.pad}\n'
                + ('      transport: "compressed"\n' if self.compressed else "")
                +
                "    diagnostics_period_s: 0.2\n"
                "    hello_timeout_ms: 30000.0\n"
                # The synthetic server profile predicts a GPU-fast edge; on this CPU the edge is
                # slower, so a generous deadline keeps the frames on the edge (no fallbacks).
                "    deadline_slack_ms: 10000.0\n"
                + f"    dilation: {self.dilation}\n"
            )
        log(f"work dir {self.work}; ROS router tcp/127.0.0.1:{self.ros_port}, edge tcp/127.0.0.1:{self.edge_port}")
        edge = Proc(
            "lop_edge", [os.path.join(self.bin, "lop_edge"), "--config", edge_yaml], os.path.join(self.work, "lop_edge.log"), child_env()
        )
        self.procs.append(edge)
        if edge.wait_for(r"lop_edge ready", self.args.start_timeout) is None:
            raise SetupFailed(f"lop_edge did not become ready within {self.args.start_timeout} s:\n{edge.tail()}")
        log("lop_edge ready")
        self.edge = edge

    def start_robot(self, connected=True, on_start=None):
        """Starts lop_robot (and its side nodes, and the ROS peer); returns once it is ready and,
        with `connected`, has its edge session up. `on_start` is called once lop_robot's ROS
        router is up, before it plans its table and says Hello to the edge."""
        robot_yaml = self.robot_yaml
        # rclpy mode: the camera topic remapped as a launch file would (`--ros-args -r`).
        backend = ["--backend", "r2r"] if self.rclpy else []
        # And in a namespace of its own (`-r __ns:=`): topics stay absolute, services move.
        base = "/camera/image_raw/compressed" if self.compressed else "/camera/image_raw"
        remap = ["--ros-args", "-r", f"{base}:={self.input_topic}", "-r", f"__ns:={self.namespace}"] if self.rclpy else []
        robot = Proc(
            "lop_robot",
            [os.path.join(self.node_bin, "lop_robot"), *backend, "--config", robot_yaml, *remap],
            os.path.join(self.work, "lop_robot.log"),
            child_env({"RUST_LOG": "info,robot_node=debug"}),
        )
        self.procs.append(robot)
        self.robot = robot
        if on_start is not None:
            if robot.wait_for(r"embedded Zenoh router started", self.args.start_timeout) is None:
                raise SetupFailed(f"lop_robot did not start its ROS router within {self.args.start_timeout} s:\n{robot.tail()}")
            on_start()
        if robot.wait_for(r"robot_node::robot: ready\b", self.args.start_timeout) is None:
            raise SetupFailed(f"lop_robot did not become ready within {self.args.start_timeout} s:\n{robot.tail()}")
        if self.args.fleet:
            # No edge address: the robot finds the edge by its load reports and opens a session
            # with its first frame (frames before the first report would run on the robot).
            if robot.wait_for(r'fleet: edge reporting its load edge="site-gpu-1"', self.args.start_timeout) is None:
                raise SetupFailed(f"lop_robot did not hear the edge's load reports within {self.args.start_timeout} s:\n{robot.tail()}")
            log("lop_robot ready (fleet mode: site-gpu-1 found by its load reports)")
        elif connected:
            up = robot.grep(r"robot_node::robot: ready\b.*connected=true")
            check(up, f"lop_robot is ready but not connected to the edge:\n{robot.tail()}")
            log("lop_robot ready (connected to the edge)")
        else:
            log("lop_robot ready")
        if self.rclpy and self.args.mode == "camera":
            self.start_side_nodes(self.ros_session)
        if self.rclpy:
            self.peer = rospeer.RosPeer(None, "interop_peer", self.domain, self.types)
        else:
            # As an rmw_zenoh node: a peer that finds lop_robot through the router and then
            # exchanges data with it directly.
            self.peer = rospeer.RosPeer(f"tcp/127.0.0.1:{self.ros_port}", "interop_peer", self.domain, self.types, mode=self.args.zenoh_mode)
        self.results = self.peer.subscribe("/lop/inference", "lop_msgs/msg/InferenceResult")
        self.diags = self.peer.subscribe("/diagnostics", "diagnostic_msgs/msg/DiagnosticArray")
        if self.detect:
            self.detections = self.peer.subscribe("/lop/detections", "vision_msgs/msg/Detection2DArray")
        if self.lidar:
            self.input = self.peer.publisher("/lidar/points", "sensor_msgs/msg/PointCloud2", sensor_data=True)
        else:
            # Load mode: a reliable publisher (congestion control "block"), so that no frame is lost
            # on the way and lop_robot must account for every one; else sensor-data QoS (best effort).
            reliable = self.args.mode == "load"
            self.input = self.peer.publisher(self.input_topic, self.input_type, sensor_data=not reliable)
        if self.rclpy:
            # DDS discovery takes up to a few seconds: frames published before lop_robot's
            # subscription matches are lost by design, not by lop_robot.
            check(self.input.wait_matched(30.0), "lop_robot's input subscription did not match the rclpy publisher within 30 s")
            subs = [("/lop/inference", self.results), ("/diagnostics", self.diags)]
            if self.detect:
                subs.append(("/lop/detections", self.detections))
            if self.args.mode == "camera":
                self.bandwidth = self.peer.subscribe("/lop/bandwidth", "lop_msgs/msg/Bandwidth")
                self.power = self.peer.subscribe("/lop/power", "lop_msgs/msg/PowerSample")
                self.energy = self.peer.subscribe("/lop/energy", "lop_msgs/msg/InferenceEnergy")
                subs += [("/lop/bandwidth", self.bandwidth), ("/lop/power", self.power), ("/lop/energy", self.energy)]
            # lop_power publishes only around inferences: a subscription that matches late
            # would miss all of it.
            for topic, sub in subs:
                check(sub.wait_matched(30.0), f"no publisher of {topic} matched the rclpy subscription within 30 s")
            if self.args.mode == "camera":
                # lop_power and lop_bandwidth learn of inferences from /lop/inference: their
                # subscriptions must be discovered before the first frame (DDS discovery under
                # load can take seconds; lop_power samples only around inferences). The graph
                # shows them once discovered; lop_robot's writer matches them about then.
                for node in ("lop_power", "lop_bandwidth"):
                    found = self.peer.wait_for_entity("MS", "/lop/inference", node, 30.0)
                    check(found is not None, f"{node}'s /lop/inference subscription was not discovered within 30 s")
                time.sleep(1.0)

    def start_side_nodes(self, ros_session):
        """lop_bandwidth (probing the edge) and lop_power (the power model), r2r, as a robot runs them."""
        for node, body in (
            (
                "lop_bandwidth",
                f'    edge:\n      endpoint: "tcp/127.0.0.1:{self.edge_port}"\n      mode: client\n'
                "    rate_hz: 5.0\n    probe_idle_ms: 300.0\n    probe_interval_ms: 500.0\n",
            ),
            ("lop_power", '    source: "model"\n    rate_hz: 200.0\n    publish_hz: 10.0\n'),
        ):
            path = os.path.join(self.work, f"{node}.yaml")
            with open(path, "w", encoding="utf-8") as f:
                f.write(f"{node}:\n  ros__parameters:\n" + ros_session + body)
            p = Proc(node, [os.path.join(self.node_bin, node), "--backend", "r2r", "--config", path], os.path.join(self.work, f"{node}.log"), child_env())
            self.procs.append(p)
            # lop_power must be sampling before the first inference starts, or that one has no energy.
            if p.wait_for(rf"robot_node::{node.removeprefix('lop_')}_node: ready\b", self.args.start_timeout) is None:
                raise SetupFailed(f"{node} did not become ready within {self.args.start_timeout} s:\n{p.tail()}")
        log("lop_bandwidth and lop_power (r2r) ready")

    def stop(self):
        echo = getattr(self, "echo_proc", None)
        if echo is not None and echo.poll() is None:
            echo.kill()
            echo.wait(10)
        if self.peer is not None:
            try:
                self.peer.close()
            except Exception as e:  # noqa: BLE001
                log(f"closing the peer: {e}")
        for p in reversed(self.procs):
            rc = p.stop()
            log(f"{p.name} exited with {rc}")
        if not self.args.keep:
            shutil.rmtree(self.work, ignore_errors=True)
        else:
            log(f"kept {self.work}")

    # -- checks --------------------------------------------------------------------------------

    def check_graph(self):
        """lop_robot's endpoints in the ROS graph carry the hashes computed from the .msg files."""
        checked = self.types.check_known_hashes()
        log(f"Jazzy hashes reproduced from the .msg files: {', '.join(checked)}")
        want = [
            ("MP", "/lop/inference", "lop_msgs/msg/InferenceResult"),
            ("MP", "/diagnostics", "diagnostic_msgs/msg/DiagnosticArray"),
            ("MS", "/lop/bandwidth", "lop_msgs/msg/Bandwidth"),
            *([("MP", "/lop/detections", "vision_msgs/msg/Detection2DArray")] if self.detect else []),
            ("MS", "/lidar/points", "sensor_msgs/msg/PointCloud2") if self.lidar else ("MS", self.input_topic, self.input_type),
        ]
        for kind, topic, type_name in want:
            e = self.peer.wait_for_entity(kind, topic, "lop_robot", 30.0)
            check(e is not None, f"lop_robot's {kind} on {topic} is not in the ROS graph: {self.peer.graph()}")
            if self.rclpy:
                check(e["namespace"] == self.namespace, f"lop_robot's namespace is '{e['namespace']}', started with __ns:={self.namespace}")
            check(
                e["type"] == rospeer.dds_type_name(type_name),
                f"{topic}: liveliness type {e['type']}, expected {rospeer.dds_type_name(type_name)}",
            )
            h = self.types.type_hash(type_name)
            check(e["hash"] == h, f"{topic} ({type_name}): liveliness hash {e['hash']}, REP-2011 from the .msg files gives {h}")
            if type_name == "vision_msgs/msg/Detection2DArray":
                check(h == DETECTION2DARRAY_JAZZY_HASH, f"{type_name}: {h}, real vision_msgs on Jazzy has {DETECTION2DARRAY_JAZZY_HASH}")
            log(f"graph: lop_robot {kind} {topic} {e['type']} {e['hash']} qos {e['qos']}")

    def diag_values(self, msg):
        return {kv.key: kv.value for st in msg.status for kv in st.values}

    def wait_diag(self, predicate, timeout, after=None):
        """The first /diagnostics values (received after monotonic time `after`) satisfying predicate."""
        found = []

        def pred(msgs):
            for t, _k, _a, m in msgs:
                if after is not None and t < after:
                    continue
                v = self.diag_values(m)
                if predicate(v):
                    found.append(v)
                    return True
            return False

        self.diags.wait_for(pred, timeout)
        return found[0] if found else None

    def reference(self, tensor):
        """The unsplit model's outputs on `tensor` (lop run, whole), cached by content; a `bytes`
        tensor is a JPEG or PNG file at the model's size, which `lop run` decodes as lop_robot and
        lop_edge do."""
        if isinstance(tensor, bytes):
            key = hashlib.sha256(tensor).hexdigest()
            x = os.path.join(self.work, f"ref-{key[:12]}.picture")
            with open(x, "wb") as f:
                f.write(tensor)
        else:
            key = hashlib.sha256(tensor.tobytes() + str(tensor.dtype).encode() + str(tensor.shape).encode()).hexdigest()
            x = os.path.join(self.work, f"ref-{key[:12]}.npy")
        if key not in self.refs:
            y = os.path.join(self.work, f"ref-{key[:12]}-out.npy")
            if not isinstance(tensor, bytes):
                np.save(x, tensor)
            r = subprocess.run(
                [os.path.join(self.bin, "lop"), "run", self.model, *self.task_args(), "--input", x, "--output", y],
                env=child_env(),
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
            if r.returncode != 0:
                raise SetupFailed(f"lop run failed ({r.returncode}): {r.stdout}\n{r.stderr}")
            # One output: Y.npy; several: Y.0.npy, Y.1.npy, ...
            outs = [y] if os.path.isfile(y) else []
            for i in range(0 if outs else 1000):
                nxt = f"{y[: -len('.npy')]}.{i}.npy"
                if not os.path.isfile(nxt):
                    break
                outs.append(nxt)
            check(outs, f"lop run wrote no output next to {y}")
            self.refs[key] = [np.load(p) for p in outs]
        return self.refs[key]

    def check_outputs(self, msg, ref, what):
        check(len(msg.outputs) == len(ref), f"{what}: {len(msg.outputs)} outputs, the model has {len(ref)}")
        worst = 0.0
        for o, r in zip(msg.outputs, ref):
            shape = tuple(int(d) for d in o.shape)
            check(shape == tuple(r.shape), f"{what}: output {o.name} shape {shape}, reference {r.shape}")
            got = np.asarray(o.data, dtype=np.float32).reshape(shape)
            scale = float(np.max(np.abs(r)))
            err = float(np.max(np.abs(got.astype(np.float64) - r.astype(np.float64)))) / (scale if scale > 0 else 1.0)
            check(err <= TOL, f"{what}: output {o.name} differs from the unsplit model by {err:.3g} relative (> {TOL})")
            check(
                err <= CONVERSION_TOL,
                f"{what}: output {o.name} is {err:.3g} relative from the unsplit model on the input converted here: within "
                f"{TOL}, but more than rounding explains ({CONVERSION_TOL}); the Python conversion and lop_robot's differ",
            )
            worst = max(worst, err)
        return worst

    def send(self, frame, sec, frame_id):
        if self.lidar:
            msg = self.types.point_cloud2(
                sec, 7, frame_id, frame["fields"], frame["width"], frame["height"], frame["point_step"], frame["row_step"], frame["data"]
            )
        elif "format" in frame:
            msg = self.types.compressed_image(sec, 7, frame_id, frame["format"], frame["data"])
        else:
            msg = self.types.image(sec, 7, frame_id, frame["width"], frame["height"], frame["encoding"], frame["step"], frame["data"])
        self.sent_at[sec] = time.monotonic()
        self.input.publish(msg)
        return self.sent_at[sec]

    def wait_result(self, sec, timeout):
        found = []

        def pred(msgs):
            for t, _k, att, m in msgs:
                if m.header.stamp.sec == sec:
                    found.append((t, att, m))
                    return True
            return False

        self.results.wait_for(pred, timeout)
        _, errors = self.results.snapshot()
        check(not errors, f"/lop/inference samples a ROS 2 node would reject: {errors}")
        return found[0] if found else None

    def start_echo(self):
        """`peer.py echo /lop/inference --count 1` in its own process, subscribed before returning."""
        p = subprocess.Popen(
            [sys.executable, os.path.join(HERE, "peer.py"), "echo", "/lop/inference", "--router", f"tcp/127.0.0.1:{self.ros_port}",
             "--domain", str(self.domain), "--count", "1", "--timeout", "60"],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
        )
        self.echo_proc = p
        if self.peer.wait_for_entity("MS", "/lop/inference", "lop_echo", 20.0) is None:
            p.kill()
            raise CheckFailed("peer.py echo did not subscribe to /lop/inference within 20 s")
        return p

    def finish_echo(self, p, frame_id):
        try:
            out, _ = p.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            out, _ = p.communicate()
            raise CheckFailed(f"peer.py echo did not finish:\n{out}") from None
        check(p.returncode == 0, f"peer.py echo failed ({p.returncode}):\n{out}")
        check(f"frame_id: '{frame_id}'" in out, f"peer.py echo printed another message:\n{out}")
        log(f"peer.py echo (a separate process) decoded {frame_id}'s result ({len(out.splitlines())} lines)")
        self.echo_text = out

    def ros_ms_lines(self):
        return [float(m.group(1)) for m in self.robot.grep(r"inference published.*\bros_ms=([0-9.eE+-]+)")]

    def check_result(self, m, sec, frame_id, input_kind):
        check(m.header.stamp.sec == sec and m.header.stamp.nanosec == 7, f"stamp {m.header.stamp} not copied from the input ({sec}.7)")
        check(m.header.frame_id == frame_id, f"frame_id '{m.header.frame_id}', sent '{frame_id}'")
        check(m.input_kind == input_kind, f"input_kind {m.input_kind}, expected {input_kind}")
        check(m.model_name == self.model, f"model_name '{m.model_name}'")
        check(re.fullmatch(r"[0-9a-f]{64}", m.model_sha256) is not None, f"model_sha256 '{m.model_sha256}'")
        check(not m.fallback, f"frame {frame_id} fell back: {m.fallback_reason}")
        check(m.latency_s > 0, f"latency_s {m.latency_s}")
        if self.args.fleet:
            # Every frame so far was routed to the edge found by its load reports (the robot's
            # debug line precedes the result's publication).
            routed = len(self.robot.grep(r'fleet: frame routed routed=Edge\("site-gpu-1"\)'))
            published = len(self.robot.grep(r"inference published"))
            check(routed >= published > 0, f"frame {frame_id}: {routed} frames routed to site-gpu-1 of {published} published")
        if not self.lidar and not self.detect:
            check(len(m.top_k) > 0, "a classifier's top_k is decoded")
            scores = [t.score for t in m.top_k]
            check(scores == sorted(scores, reverse=True), f"top_k not sorted: {scores}")

    # -- scenarios -----------------------------------------------------------------------------

    def exact_frames(self, frames, input_kind):
        """Sends each (frame, reference input, sec, frame_id) and waits for its exact result."""
        summary = []
        for frame, tensor, sec, frame_id in frames:
            t0 = self.send(frame, sec, frame_id)
            r = self.wait_result(sec, self.args.frame_timeout)
            timeout = self.args.frame_timeout
            check(r is not None, f"no /lop/inference for frame {frame_id} (stamp {sec}) within {timeout} s:\n{self.robot.tail()}")
            t1, att, m = r
            self.check_result(m, sec, frame_id, input_kind)
            err = self.check_outputs(m, self.reference(tensor), frame_id)
            summary.append((frame_id, m, err, t1 - t0, att))
            log(
                f"frame {frame_id}: answered in {1e3 * (t1 - t0):.1f} ms (node latency {1e3 * m.latency_s:.1f} ms), method {m.method}, "
                f"bucket {m.bandwidth_bucket}, {m.bytes_up} B up / {m.bytes_down} B down, max rel err {err:.2e}, seq {att[0]}"
            )
        return summary

    def bad_frame(self, frame, sec, frame_id, diag_before):
        """Sends a frame lop_robot must refuse and count. The input topic is best effort: on a
        loaded machine a message can be lost on the way, and then the robot's frames_received
        stays where it was; such a frame is sent again (at most twice more). A frame the robot
        received and did not count as bad fails at once."""
        bad_before, received_before = int(diag_before["frames_bad"]), int(diag_before["frames_received"])
        for attempt in range(3):
            self.send(frame, sec, frame_id)
            v = self.wait_diag(lambda d: int(d["frames_bad"]) > bad_before, 10.0)
            if v is not None:
                break
            last = self.wait_diag(lambda d: True, 2.0, after=time.monotonic())
            received = None if last is None else int(last["frames_received"])
            check(
                received == received_before,
                f"the bad frame {frame_id} is not counted on /diagnostics (frames_bad stays {bad_before}; "
                f"frames_received {received_before} -> {received})",
            )
            log(f"bad frame {frame_id}: not received (frames_received stays {received}, attempt {attempt + 1}); sent again")
        check(v is not None, f"the bad frame {frame_id} never reached lop_robot in 3 sends (frames_received stays {received_before})")
        log(f"bad frame {frame_id}: counted (frames_bad {v['frames_bad']})")
        return v

    def final_counts(self, sent, answered, timeout=30.0):
        def settled(d):
            total = int(d["frames_answered"]) + int(d["frames_dropped_busy"]) + int(d["frames_bad"]) + int(d["inference_errors"])
            total += int(d.get("frames_skipped_disabled", 0)) + int(d.get("frames_skipped_inactive", 0))
            return int(d["frames_received"]) == sent and total == sent

        v = self.wait_diag(settled, timeout, after=time.monotonic())
        last = self.wait_diag(lambda d: True, 2.0, after=time.monotonic())
        check(v is not None, f"frames do not add up within {timeout} s: sent {sent}, last /diagnostics {last}")
        check(int(v["frames_answered"]) == answered, f"the peer received {answered} results, lop_robot answered {v['frames_answered']}")
        check(int(v["inference_errors"]) == 0, f"inference errors: {v['inference_errors']}")
        check(int(v["task_message_errors"]) == 0, f"task message errors: {v['task_message_errors']}")
        check(int(v["fallbacks"]) == 0, f"fallbacks: {v['fallbacks']}")
        check(v["edge_connected"] == "true", "the edge session is down")
        if self.args.fleet:
            check(v["fleet_edges_up"] == "1", f"/diagnostics fleet_edges_up {v['fleet_edges_up']}, one edge is up")
            check(v["fleet_frames_on_robot"] == "0", f"{v['fleet_frames_on_robot']} frames kept on the robot with the edge up")
            log(f"fleet diagnostics: {v['fleet_edges_up']} edge up, {v['fleet_frames_on_robot']} frames on the robot")
        log(
            f"counts: sent {sent}, received {v['frames_received']}, answered {v['frames_answered']}, dropped (busy) "
            f"{v['frames_dropped_busy']}, bad {v['frames_bad']}, errors {v['inference_errors']}"
        )
        return v

    def run_camera(self):
        c1 = image_frame(224, 224, "rgb8", 1)
        c2 = image_frame(640, 480, "bgr8", 2, row_pad=4)
        c3 = image_frame(640, 480, "rgb8", 3)
        c4 = image_frame(640, 480, "mono8", 4, row_pad=3)

        def conv(f):
            return image_to_chw(f["width"], f["height"], f["encoding"], f["step"], f["data"], 224, 224)

        chw = np.frombuffer(c1["data"], np.uint8).reshape(224, 224, 3).transpose(2, 0, 1)
        check(np.array_equal(conv(c1)[0], chw), "a same-size conversion is a copy")
        frames = [(c1, conv(c1), 101, "cam_rgb8"), (c2, conv(c2), 102, "cam_bgr8_padded"), (c3, conv(c3), 103, "cam_640x480")]
        done = self.exact_frames(frames, 0)
        sent = 3
        d = self.wait_diag(lambda v: int(v["frames_answered"]) == 3, 10.0)
        check(d is not None, "no /diagnostics with 3 answered frames")
        bad = dict(image_frame(64, 48, "rgb8", 5))
        bad["step"] = 10
        self.bad_frame(bad, 104, "cam_bad_step", d)
        sent += 1
        # `ros2 topic echo` as a separate process (peer.py echo) sees the next result.
        echo = None if self.rclpy else self.start_echo()
        done += self.exact_frames([(c4, conv(c4), 105, "cam_mono8_after_bad")], 0)
        sent += 1
        if echo is not None:
            self.finish_echo(echo, "cam_mono8_after_bad")
        # The ROS-layer latency at 640x480 rgb8, one frame at a time (same image, new stamps).
        ros_before = len(self.ros_ms_lines())
        lat_frames = [(c3, conv(c3), 200 + k, f"cam_640x480_{k}") for k in range(self.args.latency_frames)]
        lat = self.exact_frames(lat_frames, 0)
        sent += len(lat_frames)
        done += lat
        # lop_robot logs a frame's line just after publishing its result: the last line may
        # still be on its way when the result is here.
        deadline = time.monotonic() + 5.0
        ros = self.ros_ms_lines()[ros_before:]
        while len(ros) < len(lat_frames) and time.monotonic() < deadline:
            time.sleep(0.05)
            ros = self.ros_ms_lines()[ros_before:]
        check(len(ros) == len(lat_frames), f"{len(ros)} per-frame ROS-layer times logged for {len(lat_frames)} frames")
        self.report_latency(ros, "640x480 rgb8, one frame at a time")
        self.final_counts(sent, len(done))
        if self.rclpy:
            self.check_side_topics(done, (c3, conv(c3)))
            self.run_parameters(c3, conv(c3))
        return done

    def run_compressed(self):
        """CompressedImage frames from real photographs under `passthrough` (see --mode compressed)."""
        from PIL import Image as PILImage  # noqa: PLC0415 (the test venv's; rclpy mode appends it)

        spec = importlib.util.find_spec("skimage")
        check(spec is not None, "scikit-image (its photographs) is not installed: run scripts/setup.sh")
        data = os.path.join(os.path.dirname(spec.origin), "data")

        def coded(name, size, kind, quality=90):
            img = PILImage.open(os.path.join(data, name)).convert("RGB").resize(size, PILImage.BILINEAR)
            buf = io.BytesIO()
            img.save(buf, format=kind, **({"quality": quality} if kind == "JPEG" else {}))
            return img, buf.getvalue()

        cat, cat_png = coded("chelsea.png", (640, 480), "PNG")
        rgb = np.asarray(cat, dtype=np.uint8)
        png_ref = image_to_chw(640, 480, "rgb8", 640 * 3, rgb.tobytes(), 224, 224)
        _, coffee_jpeg = coded("coffee.png", (224, 224), "JPEG")
        _, astro_jpeg = coded("astronaut.png", (224, 224), "JPEG", quality=75)
        frames = [
            ({"format": "bgr8; png compressed bgr8", "data": cat_png}, png_ref, 501, "cmp_png_640x480"),
            ({"format": "rgb8; jpeg compressed bgr8", "data": coffee_jpeg}, coffee_jpeg, 502, "cmp_jpeg_224"),
            ({"format": "jpeg", "data": astro_jpeg}, astro_jpeg, 503, "cmp_jpeg_224_plain_format"),
        ]
        done = self.exact_frames(frames, 0)
        raw = 3 * 224 * 224
        for (frame, _ref, _sec, frame_id), (_, m, _e, _t, _a) in zip(frames, done):
            size = len(frame["data"])
            if frame_id.startswith("cmp_jpeg") and m.bytes_up > 0:
                # The camera's JPEG crossed unchanged: its bytes plus band headers, not raw pixels.
                check(m.bytes_up < size + 2048, f"{frame_id}: {m.bytes_up} B up for a {size} B JPEG (raw frame {raw} B)")
            log(f"{frame_id}: {size} B {frame['format'].split(';')[-1].strip()} -> {m.bytes_up} B up (method {m.method})")
        check(any(m.bytes_up > 0 for _f, m, _e, _t, _a in done[1:]), "no JPEG frame went to the edge; this test needs the link")
        sent = len(frames)
        d = self.wait_diag(lambda v: int(v["frames_answered"]) == sent, 10.0)
        check(d is not None, f"no /diagnostics with {sent} answered frames")
        for k, (fmt, payload, frame_id) in enumerate([
            ("jpeg", coffee_jpeg[: len(coffee_jpeg) // 2], "cmp_truncated_jpeg"),
            ("jpeg", cat_png, "cmp_png_labelled_jpeg"),
            ("16UC1; compressedDepth png", cat_png, "cmp_compressed_depth"),
        ]):
            d = self.bad_frame({"format": fmt, "data": payload}, 510 + k, frame_id, d)
            sent += 1
        done += self.exact_frames([({"format": "jpeg", "data": coffee_jpeg}, coffee_jpeg, 520, "cmp_jpeg_after_bad")], 0)
        sent += 1
        self.final_counts(sent, len(done))
        return done

    def check_side_topics(self, done, spare):
        """lop_bandwidth's estimates, lop_power's samples and one energy figure per answered frame;
        `spare` (a frame and its reference input) gives lop_power inferences to sample around
        should its reader have matched lop_robot's writer only after the frames above."""
        ok = self.bandwidth.wait_for(lambda msgs: len(msgs) >= 2, 15.0)
        msgs, _ = self.bandwidth.snapshot()
        check(ok, f"{len(msgs)} /lop/bandwidth messages from lop_bandwidth (r2r) within 15 s")
        b = msgs[-1][3]
        check(b.prediction_mbps >= 0 and math.isfinite(b.prediction_mbps), f"/lop/bandwidth prediction {b.prediction_mbps}")
        if not self.power.wait_for(lambda msgs: len(msgs) >= 3, 10.0):
            # lop_power samples only around the inferences it hears of on /lop/inference. Under
            # Fast DDS, lop_robot's writer may match its reader after rclpy has seen that reader
            # (discovery is pairwise), and then it hears of none of the frames above (seen in two
            # full test runs; the test passed alone). More inferences must then bring samples.
            # lop_power publishes at most one sample per 1 / publish_hz (10 Hz) of readings, and
            # the power model reads only while inferences run: three frames back to back span
            # one window (one sample, seen in a full run), so four go 0.3 s apart (forced down
            # this path, they brought 3 samples at 0.25 s apart, 4 at 0.3 s).
            log(f"{len(self.power.snapshot()[0])} /lop/power samples after the frames above: 4 more frames, 0.3 s apart")
            frame, tensor = spare
            for k in range(4):
                done = done + self.exact_frames([(frame, tensor, 300 + k, f"cam_power_{k}")], 0)
                time.sleep(0.3)
            check(self.power.wait_for(lambda msgs: len(msgs) >= 3, 10.0), "no /lop/power samples from lop_power (r2r)")
        p = self.power.snapshot()[0][-1][3]
        check(p.modelled and p.total_w > 0, f"/lop/power sample {p.total_w} W, modelled {p.modelled}")
        # The spare frames, when sent, count too: they came after lop_power's reader matched.
        ids = {m.inference_id for _f, m, _e, _t, _a in done}
        # lop_power integrates each inference once its interval is covered by readings.
        self.energy.wait_for(lambda msgs: ids <= {m.inference_id for _t, _w, _a, m in msgs}, 15.0)
        got = {m.inference_id: m for _t, _w, _a, m in self.energy.snapshot()[0]}
        missing = sorted(ids - set(got))
        # Over Fast DDS, lop_robot's writer may match lop_power's reader a moment after rclpy has
        # seen that reader (discovery is pairwise): the first inferences can then never reach
        # lop_power. Seen in one CI-like run (inferences 1-4 of 9), and in a full run here with all
        # 9 missed (the spare frames above then had their figures). Only such a start-up prefix
        # is forgiven, and only with at least 3 figures after it; any later gap fails.
        answered_after = [i for i in ids if i in got]
        prefix = bool(missing) and bool(answered_after) and max(missing) < min(answered_after)
        if prefix and len(answered_after) >= 3:
            log(f"/lop/energy: no figure for the first inferences {missing} (lop_power's subscription matched after them)")
            ids = set(answered_after)
            missing = []
        check(not missing, f"/lop/energy has no figure for inferences {missing}")
        bad = [(i, got[i].energy_j) for i in ids if not got[i].energy_j > 0]
        check(not bad, f"/lop/energy figures that are not positive: {bad}")
        log(
            f"side nodes (r2r): /lop/bandwidth {len(self.bandwidth.snapshot()[0])} estimates (last {b.prediction_mbps:.1f} Mbit/s), "
            f"/lop/power {len(self.power.snapshot()[0])} samples (last {p.total_w:.2f} W), /lop/energy for all {len(ids)} inferences "
            f"({min(got[i].energy_j for i in ids):.3f}..{max(got[i].energy_j for i in ids):.3f} J)"
        )

    def run_parameters(self, frame, tensor):
        """Parameters through the parameter services, as `ros2 param list/get/set` use them."""
        names = self.peer.list_parameters(self.robot_node)
        for n in ("enabled", "method", "drop_policy", "dilation", "model.source"):
            check(n in names, f"parameter {n} not listed by /lop_robot/list_parameters ({len(names)} listed)")
        got = self.peer.get_parameters(self.robot_node, ["enabled", "method", "model.source"])
        check(got == {"enabled": True, "method": "lop", "model.source": self.model}, f"get_parameters gave {got}")
        # Refused, with the reason; the node keeps running with the old value.
        for name, value, why in (
            ("enabled", "no", "true or false"),
            ("method", "fastest", "lop, robot-only, server-only, layer-partition"),
            ("drop_policy", "random", "newest or oldest"),
            ("dilation", 4.0, "read at start-up"),
        ):
            ok, reason = self.peer.set_parameter(self.robot_node, name, value)
            check(not ok and why in reason, f"set {name}={value!r}: successful={ok}, reason '{reason}' (expected a refusal naming '{why}')")
            log(f"parameter {name}={value!r} refused: {reason}")
        check(self.peer.get_parameters(self.robot_node, ["method"]) == {"method": "lop"}, "a refused value was stored")
        # enabled false: frames are counted and dropped, no result.
        d0 = self.wait_diag(lambda v: True, 5.0, after=time.monotonic())
        ok, reason = self.peer.set_parameter(self.robot_node, "enabled", False)
        check(ok, f"set enabled=false refused: {reason}")
        self.send(frame, 600, "paused")
        v = self.wait_diag(lambda d: int(d["frames_skipped_disabled"]) > int(d0["frames_skipped_disabled"]) and d["enabled"] == "false", 10.0)
        check(v is not None, "a frame sent while enabled=false is not counted in frames_skipped_disabled")
        check(self.wait_result(600, 1.0) is None, "a frame sent while enabled=false was answered")
        # enabled true and method server-only: the next frame runs the server-only plan.
        for name, value in (("enabled", True), ("method", "server-only")):
            ok, reason = self.peer.set_parameter(self.robot_node, name, value)
            check(ok, f"set {name}={value!r} refused: {reason}")
        r = self.exact_frames([(frame, tensor, 601, "after_param_set")], 0)
        check(r[0][1].method == "server-only", f"method after set: {r[0][1].method}")
        check(r[0][1].bytes_up > 0 and not r[0][1].fallback, f"the server-only frame did not go through the edge: {r[0][1].bytes_up} B up")
        v = self.wait_diag(lambda d: d["method"] == "server-only" and d["enabled"] == "true", 5.0, after=time.monotonic())
        check(v is not None, "/diagnostics does not show the parameters in force")
        ok, reason = self.peer.set_parameter(self.robot_node, "method", "lop")
        check(ok, f"set method=lop refused: {reason}")
        log(
            f"parameters: {len(names)} listed; enabled=false paused the node (frame counted as skipped), method=server-only "
            f"took effect on the next frame; diagnostics latency p50/p95/p99 {v['latency_ms_p50']}/{v['latency_ms_p95']}/"
            f"{v['latency_ms_p99']} ms, {v['results_out_hz']} results/s"
        )

    def run_lidar(self):
        l1 = cloud_frame(11)
        l2 = cloud_frame(12, height=4, row_pad=8)
        bad = cloud_frame(13, without_z=True)

        def conv(f):
            grid, used = cloud_to_bev(f["points"], 256, 256)
            check(used > 0, "the cloud has usable points")
            return grid

        frames = [(l1, conv(l1), 301, "lidar_sweep"), (l2, conv(l2), 302, "lidar_organised_padded")]
        done = self.exact_frames(frames, 1)
        d = self.wait_diag(lambda v: int(v["frames_answered"]) == 2, 10.0)
        check(d is not None, "no /diagnostics with 2 answered frames")
        self.bad_frame(bad, 303, "lidar_without_z", d)
        l3 = cloud_frame(14, n_cells=2000)
        done += self.exact_frames([(l3, conv(l3), 304, "lidar_after_bad")], 1)
        ros = self.ros_ms_lines()
        self.report_latency(ros, "PointCloud2 sweeps, one at a time")
        self.final_counts(4, len(done))  # 4 clouds sent: 3 answered, 1 bad
        return done

    def run_detect(self):
        frames = [
            text_frame(640, 480, "rgb8", 1, "x9Q"),
            text_frame(320, 240, "bgr8", 2, "HB4m"),
            text_frame(640, 480, "rgb8", 0, "A7K3"),  # nothing this detector scores above 0.25
        ]

        def conv(f):
            return image_to_chw(f["width"], f["height"], f["encoding"], f["step"], f["data"], self.size, self.size, pad=self.pad)

        sent = [(f, conv(f), 401 + k, f"det_{f['width']}x{f['height']}_{f['encoding']}_{k}") for k, f in enumerate(frames)]
        done = self.exact_frames(sent, 0)
        for frame_id, m, _err, _rt, _att in done:
            # Where the detection stage runs is the planner's choice; the edge must take part.
            check(m.bytes_up > 0, f"{frame_id}: nothing went to the edge (method {m.method}); this test needs a split inference")
        counts = [self.check_detections(f, tensor, sec, frame_id) for f, tensor, sec, frame_id in sent]
        check(counts[0] > 0 and counts[1] > 0, f"the character frames gave {counts[:2]} detections; this test needs some")
        check(counts[2] == 0, f"the frame without a detection gave {counts[2]}")
        self.final_counts(len(sent), len(done))
        return done

    def check_detections(self, frame, tensor, sec, frame_id):
        """The frame's /lop/detections against the unsplit model's rows mapped into the frame."""
        found = []

        def pred(msgs):
            found[:] = [m for _t, _k, _a, m in msgs if m.header.stamp.sec == sec]
            return bool(found)

        self.detections.wait_for(pred, self.args.frame_timeout)
        _, errors = self.detections.snapshot()
        check(not errors, f"/lop/detections samples a ROS 2 node would reject: {errors}")
        check(len(found) == 1, f"{len(found)} /lop/detections for frame {frame_id} (stamp {sec}), expected 1")
        m = found[0]
        check(m.header.frame_id == frame_id and m.header.stamp.nanosec == 7, f"/lop/detections header {m.header}")
        (rows,) = self.reference(tensor)
        rows = rows.reshape(-1, rows.shape[-1])
        kept = rows[rows[:, 5] >= 0]
        check(len(m.detections) == len(kept), f"{frame_id}: {len(m.detections)} detections, the unsplit model keeps {len(kept)}")
        w, h = frame["width"], frame["height"]
        s = min(self.size / w, self.size / h)
        rw, rh = min(max(_round_half_away(w * s), 1), self.size), min(max(_round_half_away(h * s), 1), self.size)
        left, top = (self.size - rw) // 2, (self.size - rh) // 2
        fx = lambda x: min(max((float(x) - left) * w / rw, 0.0), w)  # noqa: E731
        fy = lambda y: min(max((float(y) - top) * h / rh, 0.0), h)  # noqa: E731
        for i, (d, r) in enumerate(zip(m.detections, kept)):
            x1, y1, x2, y2 = fx(r[0]), fy(r[1]), fx(r[2]), fy(r[3])
            want = ((x1 + x2) / 2, (y1 + y2) / 2, x2 - x1, y2 - y1)
            got = (d.bbox.center.position.x, d.bbox.center.position.y, d.bbox.size_x, d.bbox.size_y)
            err = max(abs(a - b) for a, b in zip(got, want))
            check(err <= DET_PIXEL_TOL, f"{frame_id} detection {i}: box {got}, the unsplit model's in frame pixels {want}")
            check(len(d.results) == 1, f"{frame_id} detection {i}: {len(d.results)} hypotheses")
            hyp = d.results[0].hypothesis
            check(hyp.class_id == self.class_names[int(r[5])], f"{frame_id} detection {i}: class_id '{hyp.class_id}'")
            check(abs(hyp.score - float(r[4])) <= 1e-5, f"{frame_id} detection {i}: score {hyp.score}, unsplit {r[4]}")
            check(d.header.stamp.sec == sec and d.header.frame_id == frame_id, f"{frame_id} detection {i}: header {d.header}")
        log(
            f"{frame_id}: /lop/detections has {len(m.detections)} boxes as the unsplit model's, in {w}x{h} frame pixels: "
            + ", ".join(f"{d.results[0].hypothesis.class_id} {d.results[0].hypothesis.score:.3f} "
                        f"({d.bbox.center.position.x:.1f}, {d.bbox.center.position.y:.1f}) {d.bbox.size_x:.1f}x{d.bbox.size_y:.1f}"
                        for d in m.detections)
        )
        self.first_detections = getattr(self, "first_detections", None) or (m if m.detections else None)
        return len(m.detections)

    def run_load(self):
        frames = [image_frame(640, 480, "rgb8", 40 + k) for k in range(4)]
        tensors = [image_to_chw(f["width"], f["height"], f["encoding"], f["step"], f["data"], self.size, self.size) for f in frames]
        # Warm-up: one frame answered before the clock starts.
        self.exact_frames([(frames[0], tensors[0], 1, "warmup")], 0)
        sent, answered = 1, 1
        for t in tensors:
            self.reference(t)
        ros_before = len(self.ros_ms_lines())
        rss = [(0.0, self.robot.rss_kib())]
        fps, duration = self.args.fps, self.args.duration
        n = int(round(fps * duration))
        log(f"load: {n} frames of 640x480 rgb8 at {fps} fps ({duration} s); lop_robot RSS {rss[0][1]} KiB")
        t0 = time.monotonic()
        next_rss = 5.0
        for k in range(n):
            due = t0 + k / fps
            now = time.monotonic()
            if due > now:
                time.sleep(due - now)
            self.send(frames[k % len(frames)], 1000 + k, f"load_{k}")
            sent += 1
            el = time.monotonic() - t0
            if el >= next_rss:
                rss.append((el, self.robot.rss_kib()))
                next_rss += 5.0
        send_s = time.monotonic() - t0
        msgs_deadline = time.monotonic() + 30.0
        counts = self._load_counts(sent, msgs_deadline)
        rss.append((time.monotonic() - t0, self.robot.rss_kib()))
        msgs, errors = self.results.snapshot()
        check(not errors, f"/lop/inference samples a ROS 2 node would reject: {errors}")
        load_msgs = [(t, m) for t, _k, _a, m in msgs if m.header.stamp.sec >= 1000]

        answered += len(load_msgs)
        worst = 0.0
        for _t, m in load_msgs:
            k = m.header.stamp.sec - 1000
            self.check_result(m, 1000 + k, f"load_{k}", 0)
            worst = max(worst, self.check_outputs(m, self.reference(tensors[k % len(tensors)]), f"load_{k}"))
        node_answered = int(counts["frames_answered"])
        check(node_answered == answered, f"the peer received {answered} results, lop_robot answered {node_answered}")
        ros = self.ros_ms_lines()[ros_before:]
        rate = n / send_s
        log(f"load: sent {n} frames in {send_s:.1f} s ({rate:.1f} fps); answered {len(load_msgs)}, all exact (max rel err {worst:.2e})")
        log("load: lop_robot RSS (KiB) " + ", ".join(f"{t:.0f}s={v}" for t, v in rss))
        start_kib, end_kib = rss[0][1], rss[-1][1]
        mid_kib = rss[len(rss) // 2][1]
        log(f"load: RSS start {start_kib / 1024:.1f} MiB, middle {mid_kib / 1024:.1f} MiB, end {end_kib / 1024:.1f} MiB")
        self.report_latency(ros, f"640x480 rgb8 at {fps} fps")
        self.report_end_to_end(load_msgs, fps)
        check(end_kib - mid_kib <= max(32 * 1024, mid_kib // 10), f"RSS still growing in the second half: {mid_kib} -> {end_kib} KiB")
        check(int(counts["frames_bad"]) == 0, f"bad frames under load: {counts['frames_bad']}")
        return []

    def report_end_to_end(self, msgs, fps):
        """The peer's publish to the peer's receipt of /lop/inference minus the inference's own
        time (started..finished: conversion and inference), per frame; and the part of it outside
        lop_robot (both middleware hops: publish to receipt minus the node's latency_s)."""
        added, outside = [], []
        for t_recv, m in msgs:
            sent = self.sent_at.get(m.header.stamp.sec)
            if sent is None:
                continue
            own = (m.finished.sec + m.finished.nanosec * 1e-9) - (m.started.sec + m.started.nanosec * 1e-9)
            added.append(1e3 * ((t_recv - sent) - own))
            outside.append(1e3 * ((t_recv - sent) - m.latency_s))
        check(added, "no load frame to time end to end")

        def pct(v, q):
            s = sorted(v)
            return s[min(len(s) - 1, max(0, math.ceil(q * len(s)) - 1))]

        self.end_to_end = {
            "frames": len(added),
            "added_p50_ms": pct(added, 0.5),
            "added_p99_ms": pct(added, 0.99),
            "middleware_p50_ms": pct(outside, 0.5),
            "middleware_p99_ms": pct(outside, 0.99),
        }
        e = self.end_to_end
        log(
            f"{self.args.ros} publish -> {self.args.ros} receipt minus the inference (started..finished), {e['frames']} frames at "
            f"{fps} fps: p50 {e['added_p50_ms']:.3f} ms, p99 {e['added_p99_ms']:.3f} ms; of which outside lop_robot (both middleware hops): "
            f"p50 {e['middleware_p50_ms']:.3f} ms, p99 {e['middleware_p99_ms']:.3f} ms"
        )

    def _load_counts(self, sent, deadline):
        def settled(d):
            total = int(d["frames_answered"]) + int(d["frames_dropped_busy"]) + int(d["frames_bad"]) + int(d["inference_errors"])
            return int(d["frames_received"]) == sent and total == sent

        v = self.wait_diag(settled, max(1.0, deadline - time.monotonic()), after=time.monotonic())
        last = self.wait_diag(lambda d: True, 2.0, after=time.monotonic())
        check(v is not None, f"frames do not add up: sent {sent}, last /diagnostics {last}")
        check(int(v["inference_errors"]) == 0 and int(v["fallbacks"]) == 0, f"errors or fallbacks under load: {v}")
        log(
            f"counts: sent {sent}, received {v['frames_received']}, answered {v['frames_answered']}, dropped (busy) "
            f"{v['frames_dropped_busy']}, bad {v['frames_bad']}, errors {v['inference_errors']}"
        )
        return v

    def ros_parts(self, first):
        """Per-frame parts of the ROS-layer time from lop_robot's log lines (from line `first` on,
        when it logs them): conversion, reading the outputs, publishing."""
        parts = []
        num = r"=([0-9.eE+-]+)"
        rx = rf"inference published.*\bros_ms{num}.*\bconvert_ms{num}.*\boutputs_ms{num}.*\bpublish_ms{num}"
        for m in self.robot.grep(rx)[first:]:
            parts.append(tuple(float(g) for g in m.groups()))
        return parts

    def report_latency(self, ros, what):
        check(len(ros) > 0, "no per-frame ROS-layer time logged")
        s = sorted(ros)
        p = lambda q: s[min(len(s) - 1, int(q * (len(s) - 1) + 0.5))]  # noqa: E731
        log(
            f"ROS-layer time ({what}; frame received to result published, minus the inference), {len(s)} frames: "
            f"median {statistics.median(s):.3f} ms, p90 {p(0.9):.3f} ms, max {s[-1]:.3f} ms"
        )
        check(
            statistics.median(s) <= self.args.max_ros_ms,
            f"median ROS-layer time {statistics.median(s):.3f} ms > {self.args.max_ros_ms} ms",
        )
        self.latency = {"frames": len(s), "median_ms": statistics.median(s), "p90_ms": p(0.9), "max_ms": s[-1]}
        parts = self.ros_parts(len(self.ros_ms_lines()) - len(ros))
        if len(parts) == len(ros):
            med = [statistics.median(col) for col in zip(*parts)]
            queued = statistics.median(r - c - o - q for r, c, o, q in parts)
            log(
                f"  of which (medians): conversion {med[1]:.3f} ms, reading the outputs {med[2]:.3f} ms, publishing {med[3]:.3f} ms; "
                f"the rest (waiting in the one-slot mailbox for the model, task hand-offs) {queued:.3f} ms"
            )
            self.latency.update({"convert_ms": med[1], "outputs_ms": med[2], "publish_ms": med[3], "rest_ms": queued})


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--mode", choices=["camera", "compressed", "lidar", "detect", "load", "flood", "lifecycle", "cameras"], required=True)
    ap.add_argument("--bin-dir", default=os.path.join(ROOT, "target", "release"), help="where lop, lop_edge and lop_robot are")
    ap.add_argument("--ros", choices=["zenoh", "rclpy"], default="zenoh", help="the ROS peer (see Peers above)")
    ap.add_argument("--zenoh-mode", choices=["peer", "client"], default="peer", help="the Zenoh peer's session mode (peer: as rmw_zenoh nodes)")
    ap.add_argument("--node-bin-dir", help="where lop_robot (and in rclpy mode lop_bandwidth, lop_power) are (default: --bin-dir; rclpy: the colcon install, .ros/install/lib/robot_node)")
    ap.add_argument("--cache-dir", help="profiles and schedule tables kept between runs (default: inside the temporary work dir)")
    ap.add_argument("--domain", type=int, default=0, help="ROS domain id")
    ap.add_argument("--start-timeout", type=float, default=120.0, help="seconds each process may take to become ready")
    ap.add_argument("--frame-timeout", type=float, default=20.0, help="seconds to wait for each frame's result")
    ap.add_argument("--latency-frames", type=int, default=10, help="640x480 frames timed one at a time (camera mode)")
    ap.add_argument(
        "--max-ros-ms",
        type=float,
        help="largest accepted median ROS-layer time, ms (default 10; load mode: 10 plus one frame period, since a frame "
        "that arrives while the model is busy waits in lop_robot's one-slot mailbox and that wait is counted)",
    )
    ap.add_argument("--fps", type=float, default=30.0, help="load mode: frames per second")
    ap.add_argument("--size", type=int, default=224, help="camera and load modes: the classifier's input size (zoo:resnet18@SIZExSIZE)")
    ap.add_argument("--duration", type=float, default=60.0, help="load mode: seconds")
    ap.add_argument("--show-message", action="store_true", help="print the first /lop/inference message as decoded")
    ap.add_argument("--json-out", help="write a JSON summary here")
    ap.add_argument("--fleet", action="store_true", help="lop_robot in fleet mode (edge.mode: fleet): it finds the edge by its load reports")
    ap.add_argument("--keep", action="store_true", help="keep the work dir (configs, logs)")
    args = ap.parse_args(argv)
    global rospeer, ROS_DOMAIN
    if args.ros == "rclpy":
        import rclpy_peer as rospeer  # noqa: PLC0415

        # The test venv's packages after ROS' own (detect mode: pillow draws the frames and
        # ddddocr ships the detector; both venvs run the same Python 3.11).
        test_site = os.path.join(ROOT, ".venv", "lib", f"python{sys.version_info[0]}.{sys.version_info[1]}", "site-packages")
        if os.path.isdir(test_site):
            sys.path.append(test_site)

        if args.node_bin_dir is None:
            args.node_bin_dir = os.path.join(ROOT, ".ros", "install", "lib", "robot_node")
        # A domain of its own, so that concurrent DDS tests on this machine stay apart.
        if args.domain == 0:
            args.domain = 10 + os.getpid() % 90
        ROS_DOMAIN = args.domain
    else:
        import peer as rospeer  # noqa: PLC0415
    if args.max_ros_ms is None:
        args.max_ros_ms = 10.0 + (1e3 / args.fps if args.mode == "load" else 0.0)

    def on_signal(signum, _frame):
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, on_signal)
    t0 = time.monotonic()
    h = None
    status = 0
    try:
        h = Harness(args)
        if args.mode == "flood":
            import flood  # noqa: PLC0415 (the hostile peer, flood.py beside this file)

            done = flood.run(h, image_frame, image_to_chw, check, log)
        elif args.mode == "lifecycle":
            import lifecycle  # noqa: PLC0415 (the managed node's checks, lifecycle.py beside this file)

            if not h.rclpy:
                raise SetupFailed("--mode lifecycle needs --ros rclpy (the hiroz backend serves no lifecycle services)")
            h.start()
            done = lifecycle.run(h, image_frame, check, log)
        elif args.mode == "cameras":
            import cameras  # noqa: PLC0415 (two cameras on one lop_robot, cameras.py beside this file)

            tools = types.SimpleNamespace(image_frame=image_frame, image_to_chw=image_to_chw, child_env=child_env)
            done = cameras.run(h, tools, check, log)
        else:
            h.start()
            h.check_graph()
            done = {"camera": h.run_camera, "compressed": h.run_compressed, "lidar": h.run_lidar, "detect": h.run_detect, "load": h.run_load}[args.mode]()
        if done and args.show_message:
            _fid, m, _err, _rt, att = done[0]
            print(f"--- /lop/inference as decoded by the Python peer (key {h.results.expected_key}, seq {att[0]}):")
            print(rospeer.format_msg(m))
            print("---")
            if getattr(h, "first_detections", None) is not None:
                print("--- /lop/detections as decoded by the Python peer:")
                print(rospeer.format_msg(h.first_detections))
                print("---")
        if args.json_out:
            with open(args.json_out, "w", encoding="utf-8") as f:
                json.dump(
                    {"mode": args.mode, "ros": args.ros, "latency": getattr(h, "latency", None), "end_to_end": getattr(h, "end_to_end", None), "frames": len(done)},
                    f,
                    indent=2,
                )
        log(f"PASS ({args.mode}, {time.monotonic() - t0:.1f} s)")
    except CheckFailed as e:
        log(f"FAIL: {e}")
        status = 1
    except SetupFailed as e:
        log(f"SETUP FAILED: {e}")
        status = 2
    finally:
        if h is not None:
            if status != 0:
                for p in h.procs:
                    print(p.tail(40), flush=True)
                args.keep = True
            h.stop()
    return status


if __name__ == "__main__":
    sys.exit(main())
