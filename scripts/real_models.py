#!/usr/bin/env python3
"""Prepares the real models the integration tests check lop against, with onnxruntime's outputs.

    .venv/bin/python scripts/real_models.py --out target/real_models

Run it with the venv made by `scripts/setup.sh --test-deps`. For every model it writes into the
output folder:

    NAME.onnx            the model
    NAME.input.npy       a deterministic float32 input (seeded)
    NAME.output<K>.npy   onnxruntime's K-th output on that input (CPU, graph optimisations off,
                         so the reference is the unfused graph)

    NAME.post.npy        for the detectors: the detection stage (`--task`) on onnxruntime's output,
                         computed by scripts/postprocess_ref.py (numpy), with the margins of its
                         decisions; the manifest names the task spec lop is run with

and finally manifest.json, listing every model with its input shape and output files and the
ONNX op types it uses. The models:

- resnet18, densenet121, convnext_tiny: torchvision 0.28 architectures with random weights
  (torch.manual_seed(0); weights=None, nothing is downloaded), eval mode, input [1,3,224,224],
  exported with the legacy TorchScript exporter (dynamo=False) at opset 17.
- yolo_det, yolo_pose: YOLOv8-style detector (80 classes, output [1,84,A]) and pose net (1 class,
  17 keypoints, output [1,56,A]) from scripts/yolo_style.py, seeded weights, input [1,3,320,320]
  (A = 2100 anchors), box (DFL) and keypoint decoding in the graph, legacy exporter, opset 17.
- yolo_det_640: yolo_det's architecture and seeded weights exported at [1,3,640,640] (A = 8400),
  the size YOLO detectors are deployed at.
- rtdetr_style: an RT-DETR-style detector from scripts/rtdetr_style.py (HGNetv2-style stem with a
  standalone Pad, AIFI encoder, CCFM neck, query selection by TopK, deformable attention by
  GridSample, the deployed post-processor), seeded weights, input [1,3,640,640], legacy exporter,
  opset 17; outputs boxes [1,100,4], scores [1,100] and labels [1,100].
- common_det_640: the same trained detector with its input height and width made dynamic
  (dim_param, stale inner shapes dropped) and run at 640x640, as a camera-resolution frame would
  be (output [1,8400,6] instead of [1,3549,6]).
- ppocr_det: rapidocr-onnxruntime 1.4.4's bundled PP-OCRv4 text detector (a trained DBNet-style
  segmenter, Apache-2.0; dynamic input, run at [1,3,640,640]; output a [1,1,640,640] probability
  map), fed a normalised natural-image input.
- common_det: ddddocr 1.6.1's bundled detector (a trained YOLOX-style net, MIT licence), input
  [1,3,416,416] fed the way ddddocr feeds it: BGR pixels as float32 in 0..255, letterboxed with
  the padding value 114.

Work already done is skipped: a file is rewritten only when it is missing, or when what it was made
from changed (recorded in a stamp per model). Progress goes to stderr.
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import importlib.util
import json
import os
import shutil
import sys
import time
import warnings
from pathlib import Path

# Bump to force every file to be regenerated.
FORMAT = 1
TORCHVISION_MODELS = ("resnet18", "densenet121", "convnext_tiny")
# name: (classes, keypoints, input size) of scripts/yolo_style.py's YoloStyle. yolo_det_640 is
# yolo_det's same seeded weights exported at the size YOLO detectors are deployed at.
YOLO_STYLE_MODELS = {"yolo_det": (80, 0, 320), "yolo_pose": (1, 17, 320), "yolo_det_640": (80, 0, 640)}
RTDETR_SIZE = 640
ALL_MODELS = (*TORCHVISION_MODELS, *YOLO_STYLE_MODELS, "rtdetr_style", "common_det", "common_det_640", "ppocr_det")
OPSET = 17
# name: (lop's --task spec, head format, classes, keypoints, input height and width). The
# thresholds sit in wide gaps of each model's scores on its input (postprocess_ref.margin_problem).
POST_TASKS = {
    "common_det": ("detect;score=0.1;iou=0.45;max=100", "yolox", 1, 0, (416, 416)),
    "common_det_640": ("detect;score=0.01;iou=0.45;max=100", "yolox", 1, 0, (640, 640)),
    "yolo_det": ("detect;score=0.54265;iou=0.45;max=100", "yolov8", 80, 0, None),
    "yolo_pose": ("pose;score=0.5116;iou=0.45;max=100;keypoints=17", "yolov8", 1, 17, None),
}


def log(msg: str) -> None:
    print(f"real_models: {msg}", file=sys.stderr, flush=True)


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def atomic_save_npy(path: Path, array) -> None:
    import numpy as np

    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        np.save(f, array)
    os.replace(tmp, path)


def export_torchvision(name: str, path: Path) -> None:
    """Exports torchvision's `name` with seeded random weights to `path` (opset 17, legacy)."""
    import torch
    import torchvision

    torch.manual_seed(0)
    model = getattr(torchvision.models, name)(weights=None).eval()
    export_module(model, [1, 3, 224, 224], path, "input", "output")


def export_module(model, shape: list[int], path: Path, input_name: str = "images", output_name: str | list[str] = "output0") -> None:
    """Exports a torch module to `path` (opset 17, legacy exporter, static shape)."""
    import torch

    example = torch.zeros(*shape)
    tmp = path.with_name(path.name + ".tmp")
    with torch.no_grad(), warnings.catch_warnings():
        # The legacy exporter is chosen on purpose; silence its deprecation notice.
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.onnx.export(
            model,
            (example,),
            str(tmp),
            dynamo=False,
            opset_version=OPSET,
            input_names=[input_name],
            output_names=[output_name] if isinstance(output_name, str) else output_name,
            do_constant_folding=True,
        )
    os.replace(tmp, path)


def yolo_style_source() -> str:
    return sha256(Path(__file__).with_name("yolo_style.py"))


def copy_model(name: str, src: Path, out: Path) -> None:
    log(f"{name}: copying {src}")
    tmp = out.with_name(out.name + ".tmp")
    shutil.copyfile(src, tmp)
    os.replace(tmp, out)


def make_dynamic(src: Path, out: Path) -> None:
    """Copies an image model with its input height and width turned into named dynamic
    dimensions, dropping the inferred shapes of inner values and outputs that the export froze."""
    import onnx

    model = onnx.load(str(src))
    dims = model.graph.input[0].type.tensor_type.shape.dim
    for axis, name in ((2, "height"), (3, "width")):
        dims[axis].Clear()
        dims[axis].dim_param = name
    del model.graph.value_info[:]
    for o in model.graph.output:
        o.type.tensor_type.shape.Clear()
    tmp = out.with_name(out.name + ".tmp")
    onnx.save(model, str(tmp))
    os.replace(tmp, out)


def packaged_model(package: str, relative: str) -> Path:
    """A model file shipped inside an installed package (found without importing it)."""
    spec = importlib.util.find_spec(package)
    if spec is None or spec.origin is None:
        raise SystemExit(f"real_models: {package} is not installed (run scripts/setup.sh --test-deps)")
    path = Path(spec.origin).parent / relative
    if not path.is_file():
        raise SystemExit(f"real_models: {path} is missing from the {package} package")
    return path


def ddddocr_det_path() -> Path:
    return packaged_model("ddddocr", "common_det.onnx")


def static_input_shape(model_path: Path, fallback: list[int]) -> list[int]:
    """The first graph input's shape, with `fallback` standing in for dynamic dimensions."""
    import onnx

    model = onnx.load(str(model_path), load_external_data=False)
    initializers = {i.name for i in model.graph.initializer}
    inputs = [i for i in model.graph.input if i.name not in initializers]
    if len(inputs) != 1:
        raise SystemExit(f"real_models: {model_path} has {len(inputs)} inputs, expected 1")
    t = inputs[0].type.tensor_type
    if t.elem_type != onnx.TensorProto.FLOAT:
        raise SystemExit(f"real_models: {model_path} input is not float32 (elem_type {t.elem_type})")
    dims = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None for d in t.shape.dim]
    if len(dims) != len(fallback):
        raise SystemExit(f"real_models: {model_path} input has rank {len(dims)}, expected {len(fallback)}")
    return [d if d is not None else f for d, f in zip(dims, fallback)]


def natural_image_input(shape: list[int], seed: int):
    """A float32 NCHW tensor with the statistics of a normalised photo: smooth structure plus a
    little noise, roughly zero mean and unit variance per channel."""
    import numpy as np

    rng = np.random.default_rng(seed)
    n, c, h, w = shape
    y, x = np.meshgrid(np.linspace(0, 1, h), np.linspace(0, 1, w), indexing="ij")
    out = np.empty(shape, dtype=np.float32)
    for b in range(n):
        for ch in range(c):
            f = np.zeros((h, w))
            for _ in range(6):
                fx, fy, phase = rng.uniform(0.5, 8.0), rng.uniform(0.5, 8.0), rng.uniform(0, 2 * np.pi)
                f += rng.uniform(0.3, 1.0) * np.sin(2 * np.pi * (fx * x + fy * y) + phase)
            f = (f - f.mean()) / (f.std() + 1e-6)
            f += 0.3 * rng.standard_normal((h, w))
            out[b, ch] = f
    return out


def captcha_like_input(shape: list[int], seed: int):
    """What ddddocr's detector is fed: a letterboxed BGR image as float32 pixels in 0..255, here a
    seeded synthetic scene (textured background, a few dark blobs and bars) occupying the top
    part of the frame, the rest padded with 114 as ddddocr's preprocessing does."""
    import numpy as np

    rng = np.random.default_rng(seed)
    n, c, h, w = shape
    img = np.full((n, c, h, w), 114.0, dtype=np.float64)
    used_h = int(h * 0.4)  # a wide captcha, resized to the full width
    y, x = np.meshgrid(np.arange(used_h), np.arange(w), indexing="ij")
    for b in range(n):
        scene = np.empty((c, used_h, w))
        base = rng.uniform(170, 240, size=c)
        for ch in range(c):
            scene[ch] = base[ch] + 12 * np.sin(x / rng.uniform(20, 60) + rng.uniform(0, 6)) + 6 * rng.standard_normal((used_h, w))
        for _ in range(6):
            cy, cx = rng.uniform(0.2, 0.8) * used_h, rng.uniform(0.05, 0.95) * w
            ry, rx = rng.uniform(12, 30), rng.uniform(8, 20)
            mask = ((y - cy) / ry) ** 2 + ((x - cx) / rx) ** 2 <= 1.0
            colour = rng.uniform(0, 120, size=c)
            for ch in range(c):
                scene[ch][mask] = colour[ch] + 10 * rng.standard_normal(mask.sum())
        for _ in range(3):
            x0, x1 = sorted(rng.integers(0, w, size=2))
            yy = rng.integers(0, used_h)
            scene[:, max(0, yy - 1) : yy + 2, x0:x1] = rng.uniform(30, 90)
        img[b, :, :used_h, :] = scene
    # ddddocr casts the resized image to uint8 before converting to float32.
    return np.clip(np.rint(img), 0, 255).astype(np.float32)


def op_counts(model_path: Path) -> dict[str, int]:
    import onnx

    model = onnx.load(str(model_path), load_external_data=False)
    counts = collections.Counter()

    def walk(graph):
        for node in graph.node:
            key = node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}.{node.op_type}"
            counts[key] += 1
            for attr in node.attribute:
                if attr.type == onnx.AttributeProto.GRAPH:
                    walk(attr.g)
                for g in attr.graphs:
                    walk(g)

    walk(model.graph)
    return dict(sorted(counts.items()))


def opset_of(model_path: Path) -> int:
    import onnx

    model = onnx.load(str(model_path), load_external_data=False)
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)


def run_ort(model_path: Path, x):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    opts.intra_op_num_threads = 2
    sess = ort.InferenceSession(str(model_path), sess_options=opts, providers=["CPUExecutionProvider"])
    name = sess.get_inputs()[0].name
    return sess.run(None, {name: x})


def reference_post(name: str, out: Path, outputs: list[str]) -> dict:
    """Runs the numpy detection stage on onnxruntime's output (milliseconds; always redone)."""
    import numpy as np

    sys.path.insert(0, str(Path(__file__).parent))
    import postprocess_ref

    spec, fmt, classes, keypoints, input_hw = POST_TASKS[name]
    opts = dict(kv.split("=", 1) for kv in spec.split(";")[1:])
    head = np.load(out / outputs[0])
    rows, kept, margins = postprocess_ref.detect(
        head, fmt, float(opts["score"]), float(opts["iou"]), int(opts["max"]), classes, input_hw, keypoints
    )
    problem = postprocess_ref.margin_problem(name, margins)
    margins = {k: (v if np.isfinite(v) else None) for k, v in margins.items()}  # None: no such decision
    fname = f"{name}.post.npy"
    atomic_save_npy(out / fname, rows)
    log(f"{name}: {spec}: {kept} detections (numpy reference), margins {margins}" + (f"; UNUSABLE: {problem}" if problem else ""))
    # A reference too close to call fails this model's test (with the reason), not the others'.
    return {"task": spec, "output": fname, "detections": kept, "margins": margins, "problem": problem}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, type=Path, help="output folder (created)")
    ap.add_argument("--models", default=",".join(ALL_MODELS), help="comma-separated subset")
    ap.add_argument("--force", action="store_true", help="regenerate everything")
    args = ap.parse_args()

    import importlib.metadata

    import numpy as np

    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    wanted = [m for m in args.models.split(",") if m]
    # From package metadata: importing torch is slow and only needed when exporting.
    versions = {p: importlib.metadata.version(p) for p in ("torch", "torchvision", "onnx", "onnxruntime", "numpy")}
    manifest = {"format": FORMAT, "versions": versions, "models": []}

    for name in wanted:
        t0 = time.monotonic()
        seed = int(hashlib.sha256(name.encode()).hexdigest()[:8], 16)  # fixed per model
        onnx_path = out / f"{name}.onnx"
        stamp_path = out / f"{name}.stamp.json"
        stamp = json.loads(stamp_path.read_text()) if stamp_path.is_file() and not args.force else {}

        # 1. The model file.
        if name in TORCHVISION_MODELS:
            source = {"kind": "torchvision", "format": FORMAT, "torch": versions["torch"], "torchvision": versions["torchvision"], "opset": OPSET}
            if stamp.get("source") != source or not onnx_path.is_file():
                log(f"{name}: exporting torchvision.models.{name}(weights=None), seed 0, opset {OPSET}")
                export_torchvision(name, onnx_path)
                stamp = {}
            shape = [1, 3, 224, 224]
            make_input = natural_image_input
            source_note = f"torchvision {versions['torchvision']} {name}, random weights (torch.manual_seed(0)), legacy exporter, opset {OPSET}"
        elif name in YOLO_STYLE_MODELS:
            nc, kpts, size = YOLO_STYLE_MODELS[name]
            shape = [1, 3, size, size]
            source = {"kind": "yolo_style", "format": FORMAT, "torch": versions["torch"], "script": yolo_style_source(), "opset": OPSET, "shape": shape}
            if stamp.get("source") != source or not onnx_path.is_file():
                sys.path.insert(0, str(Path(__file__).parent))
                import yolo_style

                log(f"{name}: exporting scripts/yolo_style.py YoloStyle(nc={nc}, keypoints={kpts}), seed 0, opset {OPSET}")
                export_module(yolo_style.seeded(nc=nc, keypoints=kpts), shape, onnx_path)
                stamp = {}
            make_input = natural_image_input
            source_note = f"YOLOv8-style {'pose' if kpts else 'detector'} (scripts/yolo_style.py), seeded weights, legacy exporter, opset {OPSET}"
        elif name == "rtdetr_style":
            shape = [1, 3, RTDETR_SIZE, RTDETR_SIZE]
            script = sha256(Path(__file__).with_name("rtdetr_style.py"))
            source = {"kind": "rtdetr_style", "format": FORMAT, "torch": versions["torch"], "script": script, "opset": OPSET, "shape": shape}
            if stamp.get("source") != source or not onnx_path.is_file():
                sys.path.insert(0, str(Path(__file__).parent))
                import rtdetr_style

                log(f"{name}: exporting scripts/rtdetr_style.py RtdetrStyle(nc=80), seed 0, opset {OPSET}")
                export_module(rtdetr_style.seeded(), shape, onnx_path, output_name=["boxes", "scores", "labels"])
                stamp = {}
            make_input = natural_image_input
            source_note = f"RT-DETR-style detector (scripts/rtdetr_style.py), seeded weights, legacy exporter, opset {OPSET}"
        elif name == "common_det_640":
            src = ddddocr_det_path()
            source = {"kind": "ddddocr-dynamic", "format": FORMAT, "sha256": sha256(src)}
            if stamp.get("source") != source or not onnx_path.is_file():
                log(f"{name}: {src} with dynamic height and width")
                make_dynamic(src, onnx_path)
                stamp = {}
            shape = [1, 3, 640, 640]
            make_input = captcha_like_input
            source_note = "ddddocr 1.6.1 common_det.onnx with dynamic H and W, run at 640x640; BGR pixels 0..255, padding 114"
        elif name == "ppocr_det":
            src = packaged_model("rapidocr_onnxruntime", "models/ch_PP-OCRv4_det_infer.onnx")
            source = {"kind": "rapidocr", "format": FORMAT, "sha256": sha256(src)}
            if stamp.get("source") != source or not onnx_path.is_file():
                copy_model(name, src, onnx_path)
                stamp = {}
            shape = [1, 3, 640, 640]
            make_input = natural_image_input
            source_note = "rapidocr-onnxruntime 1.4.4 ch_PP-OCRv4_det_infer.onnx (PP-OCRv4 text detector, Apache-2.0) at 640x640"
        elif name == "common_det":
            src = ddddocr_det_path()
            source = {"kind": "ddddocr", "format": FORMAT, "sha256": sha256(src)}
            if stamp.get("source") != source or not onnx_path.is_file():
                copy_model(name, src, onnx_path)
                stamp = {}
            shape = static_input_shape(onnx_path, [1, 3, 416, 416])
            make_input = captcha_like_input
            source_note = "ddddocr 1.6.1 common_det.onnx (YOLOX-style detector, MIT); BGR pixels 0..255 as float32, padding 114"
        else:
            raise SystemExit(f"real_models: unknown model '{name}' (known: {', '.join(ALL_MODELS)})")

        model_sha = sha256(onnx_path)
        ops = op_counts(onnx_path)
        log(f"{name}: opset {opset_of(onnx_path)}, {sum(ops.values())} nodes, op types: " + ", ".join(f"{k}x{v}" for k, v in ops.items()))

        # 2. Input and onnxruntime's outputs.
        input_path = out / f"{name}.input.npy"
        ref_key = {"model_sha256": model_sha, "shape": shape, "seed": seed, "format": FORMAT, "onnxruntime": versions["onnxruntime"]}
        outputs = stamp.get("outputs")
        have_all = outputs and input_path.is_file() and all((out / f).is_file() for f in outputs)
        if stamp.get("reference") != ref_key or not have_all:
            x = make_input(shape, seed)
            atomic_save_npy(input_path, x)
            log(f"{name}: running onnxruntime {versions['onnxruntime']} (CPU, optimisations off) on input {shape}")
            results = run_ort(onnx_path, x)
            outputs = []
            for k, y in enumerate(results):
                fname = f"{name}.output{k}.npy"
                atomic_save_npy(out / fname, np.ascontiguousarray(y))
                outputs.append(fname)
            for stale in out.glob(f"{name}.output*.npy"):
                if stale.name not in outputs:
                    stale.unlink()
            stamp = {"source": source, "reference": ref_key, "outputs": outputs}
            stamp_path.write_text(json.dumps(stamp, indent=2) + "\n")
        else:
            log(f"{name}: up to date")

        output_shapes = [list(np.load(out / f, mmap_mode="r").shape) for f in outputs]
        post = reference_post(name, out, outputs) if name in POST_TASKS else None
        manifest["models"].append(
            {
                "name": name,
                "onnx": onnx_path.name,
                "sha256": model_sha,
                "source": source_note,
                "input": input_path.name,
                "input_shape": shape,
                "input_dtype": "float32",
                "outputs": outputs,
                "output_shapes": output_shapes,
                "ops": ops,
                **({"post": post} if post else {}),
            }
        )
        log(f"{name}: done in {time.monotonic() - t0:.1f}s, outputs {output_shapes}")

    tmp = out / "manifest.json.tmp"
    tmp.write_text(json.dumps(manifest, indent=2) + "\n")
    os.replace(tmp, out / "manifest.json")
    log(f"wrote {out / 'manifest.json'} ({len(manifest['models'])} models)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
