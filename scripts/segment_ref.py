"""A numpy reference for lop's instance segmentation stage (`--task segment-instance`), written
from the task's definition, independently of lop's Rust code, to check lop against on real model
outputs, and the driver that prepares that check (tests/segment_instance.rs runs it).

    rows, ids, kept, margins, values = instances(head, protos, score=0.5, iou_thr=0.45, max_det=100,
                                                 mask_thr=0.5, input_hw=(160, 160))

The definition (ultralytics' YOLOv8-seg post-processing, `process_mask` in its sigmoid form):
- the detections are `postprocess_ref.detect` on the head's box and class channels (score
  threshold, class-wise NMS, at most `max_det`, best first): `rows` `[1, max_det, 6]`;
- kept detection i's mask is `sigmoid(coefficients_i @ protos.reshape(nm, -1))` at the
  prototypes' resolution, cropped to its box scaled to that resolution (column c is kept when
  `x1 * mw / W <= c < x2 * mw / W`, rows likewise, zero elsewhere), upsampled to the input's
  `H x W` by `torch.nn.functional.interpolate(mode="bilinear", align_corners=False)`, on where
  it is `> mask_thr`;
- `ids` `[1, 1, H, W]` uint8: 0 for background, i + 1 where detection i's mask is on and no
  better detection's is.

`margins` holds `postprocess_ref.detect`'s and two more: `mask`, the closest an upsampled value
of a kept mask came to `mask_thr`, and `crop`, the closest a scaled box edge (one within a
prototype pixel of the prototypes) came to a prototype index. `margin_problem` says when the decisions were too close to call.

The driver (`python scripts/segment_ref.py --out DIR`) exports `yolo_seg_style.seeded(nc=3)` at
160x160 to ONNX (opset 17, legacy exporter), runs onnxruntime (CPU, graph optimisations off) on
a photo-like input, picks the score threshold in the widest gap of the best scores (ranks 13 to
40) and the mask threshold in the widest gap of the kept masks' values in 0.3..0.7, runs the
reference, and writes the model, input, onnxruntime's outputs, the reference's rows and map and
`manifest.json` (spec, margins, a problem if any). Inputs of seeds 0, 1, ... are tried until the
margins are wide enough.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
import postprocess_ref  # noqa: E402

SIZE = 160
CLASSES = 3
COEFFICIENTS = 32
OPSET = 17
IOU = 0.45
MAX_DET = 100
# The score threshold lies in the widest gap between these ranks of the anchors' best scores.
LO_RANK, HI_RANK = 12, 40
# Smallest margins accepted besides postprocess_ref.MIN_MARGINS: mask probabilities (lop's head
# and prototypes differ from onnxruntime's by a few 1e-6 relative, so the masks' values by a few
# 1e-6) and box edges in prototype pixels (boxes of a few hundred pixels differ by up to 2e-3
# input pixels, 5e-4 prototype pixels).
MIN_SEG_MARGINS = {"mask": 5e-5, "crop": 5e-3}


def instances(head, protos, score: float, iou_thr: float, max_det: int, mask_thr: float, input_hw: tuple[int, int]):
    """The stage's rows and instance map, the kept count, the decisions' margins and the kept
    masks' upsampled values `[kept, H, W]` (see the module doc)."""
    import torch

    head = np.asarray(head, dtype=np.float32)
    protos = np.asarray(protos, dtype=np.float32)
    _, nm, mh, mw = protos.shape
    nc = head.shape[1] - 4 - nm
    if nc < 1:
        raise ValueError(f"a head of {head.shape[1]} channels with {nm} prototypes leaves {nc} classes")
    box_head = head[:, : 4 + nc]
    rows, kept, margins = postprocess_ref.detect(box_head, "yolov8", score, iou_thr, max_det, nc)
    boxes, scores, _ = postprocess_ref.decode(box_head, "yolov8", nc, None)
    best = scores.max(axis=1)
    anchors = []
    for r in rows[0, :kept]:
        match = np.nonzero((boxes == r[:4]).all(axis=1) & (best == r[4]))[0]
        if len(match) != 1:
            raise ValueError(f"row {r} matches anchors {match}")
        anchors.append(int(match[0]))
    coeffs = head[0, 4 + nc :][:, anchors].T.astype(np.float64)  # [kept, nm]
    logits = coeffs @ protos[0].reshape(nm, -1).astype(np.float64)
    prob = (1.0 / (1.0 + np.exp(-logits))).astype(np.float32).reshape(kept, mh, mw)
    h, w = input_hw
    ratio = np.array([mw / w, mh / h, mw / w, mh / h], dtype=np.float32)
    scaled = rows[0, :kept, :4] * ratio  # float32, prototype pixels
    cols = np.arange(mw, dtype=np.float32)[None, None, :]
    lines = np.arange(mh, dtype=np.float32)[None, :, None]
    inside = (
        (cols >= scaled[:, 0, None, None])
        & (cols < scaled[:, 2, None, None])
        & (lines >= scaled[:, 1, None, None])
        & (lines < scaled[:, 3, None, None])
    )
    cropped = np.where(inside, prob, np.float32(0))
    values = torch.nn.functional.interpolate(torch.from_numpy(cropped)[None], size=(h, w), mode="bilinear", align_corners=False)[0].numpy()
    thr = np.float32(mask_thr)
    on = values > thr
    ids = np.zeros((h, w), dtype=np.uint8)
    for i in range(kept):
        ids[(ids == 0) & on[i]] = i + 1
    margins["mask"] = float(np.min(np.abs(values - thr))) if kept else float("inf")
    # Only edges in -1..m + 1 decide which cells are kept: beyond, every cell is in or out.
    edges = scaled.astype(np.float64)
    limits = np.array([mw, mh, mw, mh], dtype=np.float64)
    near = (edges > -1) & (edges < limits + 1)
    margins["crop"] = float(np.min(np.abs(edges - np.round(edges))[near])) if near.any() else float("inf")
    return rows, ids[None, None], kept, margins, values


def margin_problem(name: str, margins: dict) -> str | None:
    """Why a reference cannot be trusted (a decision too close to call), or None."""
    need = {**postprocess_ref.MIN_MARGINS, **MIN_SEG_MARGINS}
    close = {k: v for k, v in margins.items() if v < need[k]}
    if close:
        return f"{name}: decisions too close to call ({close}, need {need})"
    return None


def widest_gap(values, lo: float, hi: float) -> tuple[float, float]:
    """The midpoint (rounded to 6 decimals) and half-width of the widest gap between sorted
    `values` within `lo..hi`."""
    v = np.sort(np.asarray(values, dtype=np.float64).ravel())
    v = np.concatenate(([lo], v[(v > lo) & (v < hi)], [hi]))
    i = int(np.argmax(np.diff(v)))
    mid = round((v[i] + v[i + 1]) / 2, 6)
    return mid, min(mid - v[i], v[i + 1] - mid)


def photo_like(shape: list[int], seed: int):
    """A float32 NCHW input with the statistics of a normalised photo: smooth structure plus a
    little noise, about zero mean and unit variance per channel."""
    rng = np.random.default_rng(seed)
    _, c, h, w = shape
    y, x = np.meshgrid(np.linspace(0, 1, h), np.linspace(0, 1, w), indexing="ij")
    out = np.empty(shape, dtype=np.float32)
    for ch in range(c):
        f = np.zeros((h, w))
        for _ in range(6):
            fx, fy, phase = rng.uniform(0.5, 8.0), rng.uniform(0.5, 8.0), rng.uniform(0, 2 * np.pi)
            f += rng.uniform(0.3, 1.0) * np.sin(2 * np.pi * (fx * x + fy * y) + phase)
        f = (f - f.mean()) / (f.std() + 1e-6)
        out[0, ch] = f + 0.3 * rng.standard_normal((h, w))
    return out


def export(path: Path) -> None:
    import torch
    import yolo_seg_style

    tmp = path.with_name(path.name + ".tmp")
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.onnx.export(
            yolo_seg_style.seeded(nc=CLASSES, nm=COEFFICIENTS),
            (torch.zeros(1, 3, SIZE, SIZE),),
            str(tmp),
            dynamo=False,
            opset_version=OPSET,
            input_names=["images"],
            output_names=["output0", "output1"],
            do_constant_folding=True,
        )
    os.replace(tmp, path)


def run_ort(path: Path, x):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    opts.intra_op_num_threads = 2
    sess = ort.InferenceSession(str(path), sess_options=opts, providers=["CPUExecutionProvider"])
    return sess.run(None, {sess.get_inputs()[0].name: x})


def main() -> int:
    ap = argparse.ArgumentParser(description="prepares tests/segment_instance.rs: model, input, onnxruntime's outputs, reference")
    ap.add_argument("--out", required=True, type=Path)
    args = ap.parse_args()
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    model = out / "yolo_seg.onnx"
    export(model)
    shape = [1, 3, SIZE, SIZE]
    problem = None
    for seed in range(16):
        x = photo_like(shape, seed)
        head, protos = run_ort(model, x)
        nc = head.shape[1] - 4 - protos.shape[1]
        best = np.sort(head[0, 4 : 4 + nc].max(axis=0))[::-1]
        score, score_half = widest_gap(best[LO_RANK:HI_RANK], float(best[HI_RANK - 1]), float(best[LO_RANK]))
        _, _, kept, _, values = instances(head, protos, score, IOU, MAX_DET, 0.5, (SIZE, SIZE))
        mask, mask_half = widest_gap(values, 0.3, 0.7)
        rows, ids, kept, margins, _ = instances(head, protos, score, IOU, MAX_DET, mask, (SIZE, SIZE))
        problem = margin_problem(f"input seed {seed}", margins)
        print(
            f"segment_ref: seed {seed}: score={score} (gap +-{score_half:.2e}), mask={mask} (gap +-{mask_half:.2e}), "
            f"{kept} detections, {len(np.unique(ids)) - 1} with pixels, margins {margins}" + (f"; {problem}" if problem else ""),
            file=sys.stderr,
        )
        if problem is None and kept > 0 and ids.any():
            break
    for name, array in (("input", x), ("output0", head), ("output1", protos), ("rows", rows), ("ids", ids)):
        np.save(out / f"{name}.npy", np.ascontiguousarray(array))
    manifest = {
        "onnx": model.name,
        "input_shape": shape,
        "task": f"segment-instance;score={score};iou={IOU};max={MAX_DET};mask={mask}",
        "seed": seed,
        "detections": kept,
        "margins": {k: (v if np.isfinite(v) else None) for k, v in margins.items()},
        "problem": problem,
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
