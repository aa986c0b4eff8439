"""A numpy reference for lop's detection stage (`--task detect|pose`), written from the task's
definition, independently of lop's Rust code, to check lop against on real model outputs.

    rows, margins = detect(head, fmt="yolox", score=0.3, iou=0.45, max_det=100, input_hw=(416, 416))

The definition: every anchor's box and its best class (the lowest class index among equal
scores); YOLOX scores are objectness times class score and its boxes are grid offsets and log
sizes at strides 8, 16 and 32; anchors scoring above `score` are visited by score (highest
first), equal scores by anchor index; a visited box is dropped when its IoU with a box already
kept of the same class is above `iou`; at most `max_det` are kept. The result is `[1, max_det,
6 + 3 K]` float32 rows `x1, y1, x2, y2, score, class, keypoints...`, unused rows zero with class -1.

`margins` says how far the decisions were from flipping: the closest any anchor's score came to
the threshold, the smallest gap between visited scores (their order), between an anchor's best and
second-best class, and the closest an IoU test came to `iou`. A second implementation whose
values differ from these by less than the margins must give the same rows; `margin_problem`
says when a reference's decisions were too close to call.
"""

from __future__ import annotations

import numpy as np

YOLOX_STRIDES = (8, 16, 32)


def yolox_grid(input_hw: tuple[int, int]):
    """Per-anchor grid column, row and stride of a YOLOX head, in anchor order."""
    h, w = input_hw
    if h % 32 or w % 32:
        raise ValueError(f"a YOLOX input's height and width are multiples of 32, not {h}x{w}")
    xs, ys, ss = [], [], []
    for s in YOLOX_STRIDES:
        rows, cols = h // s, w // s
        gy, gx = np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")
        xs.append(gx.ravel())
        ys.append(gy.ravel())
        ss.append(np.full(rows * cols, s))
    return (np.concatenate(xs).astype(np.float32), np.concatenate(ys).astype(np.float32), np.concatenate(ss).astype(np.float32))


def decode(head: np.ndarray, fmt: str, classes: int, input_hw: tuple[int, int] | None):
    """Boxes `[N, 4]` (x1 y1 x2 y2), class scores `[N, C]` and extra channels `[N, E]`."""
    head = np.asarray(head, dtype=np.float32)
    if fmt == "yolox":
        a = head[0]  # [N, 5 + C]
        gx, gy, s = yolox_grid(input_hw)
        if len(gx) != a.shape[0]:
            raise ValueError(f"a YOLOX head of {a.shape[0]} anchors does not fit input {input_hw}")
        cx, cy = (a[:, 0] + gx) * s, (a[:, 1] + gy) * s
        w, h = np.exp(a[:, 2]) * s, np.exp(a[:, 3]) * s
        scores = a[:, 4:5] * a[:, 5 : 5 + classes]
        extra = a[:, 5 + classes :]
    elif fmt == "yolov8":
        a = head[0].T  # [N, 4 + C + 3K]
        cx, cy, w, h = a[:, 0], a[:, 1], a[:, 2], a[:, 3]
        scores = a[:, 4 : 4 + classes]
        extra = a[:, 4 + classes :]
    else:
        raise ValueError(f"unknown head format {fmt}")
    boxes = np.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], axis=1).astype(np.float32)
    return boxes, scores.astype(np.float32), extra.astype(np.float32)


def iou(a: np.ndarray, b: np.ndarray) -> np.float32:
    w = max(np.float32(0), min(a[2], b[2]) - max(a[0], b[0]))
    h = max(np.float32(0), min(a[3], b[3]) - max(a[1], b[1]))
    inter = np.float32(w * h)
    union = np.float32((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter)
    return np.float32(inter / union) if union > 0 else np.float32(0)


def detect(head, fmt: str, score: float, iou_thr: float, max_det: int, classes: int, input_hw=None, keypoints: int = 0):
    """The stage's rows and the decisions' margins (see the module doc)."""
    boxes, scores, extra = decode(head, fmt, classes, input_hw)
    if extra.shape[1] != 3 * keypoints:
        raise ValueError(f"{extra.shape[1]} channels after the classes, expected {3 * keypoints} for {keypoints} keypoints")
    best_class = np.argmax(scores, axis=1)  # first index among ties
    best = scores[np.arange(len(scores)), best_class]
    thr = np.float32(score)
    margins = {"score": float(np.min(np.abs(best - thr)))}
    if classes > 1:
        second = np.sort(scores, axis=1)[:, -2]
        cand = best > thr
        margins["class"] = float(np.min(best[cand] - second[cand])) if cand.any() else float("inf")
    candidates = np.nonzero(best > thr)[0]
    order = candidates[np.lexsort((candidates, -best[candidates]))]
    width = 6 + 3 * keypoints
    rows = np.zeros((max_det, width), dtype=np.float32)
    kept: list[int] = []
    iou_margin, visited = float("inf"), []
    for anchor in order:
        if len(kept) == max_det:
            break
        visited.append(best[anchor])
        suppressed = False
        for k in kept:
            if best_class[k] != best_class[anchor]:
                continue
            v = iou(boxes[k], boxes[anchor])
            iou_margin = min(iou_margin, abs(float(v) - iou_thr))
            if v > np.float32(iou_thr):
                suppressed = True
                break
        if suppressed:
            continue
        row = rows[len(kept)]
        row[:4] = boxes[anchor]
        row[4] = best[anchor]
        row[5] = best_class[anchor]
        row[6:] = extra[anchor]
        kept.append(anchor)
    rows[len(kept) :, 5] = -1
    margins["iou"] = iou_margin
    gaps = -np.diff(np.asarray(visited, dtype=np.float32))
    margins["order"] = float(gaps.min()) if len(gaps) else float("inf")
    return rows[None], len(kept), margins


# Smallest margins accepted: lop's heads differ from onnxruntime's by about 1e-6 in scores and
# 1e-4 pixels in boxes (float32 summation order), far below these.
MIN_MARGINS = {"score": 1e-5, "class": 1e-5, "order": 1e-5, "iou": 1e-3}


def margin_problem(name: str, margins: dict) -> str | None:
    """Why a reference cannot be trusted (its decisions were too close to call: a threshold to
    move), or None."""
    close = {k: v for k, v in margins.items() if v < MIN_MARGINS[k]}
    if close:
        return f"{name}: decisions too close to call ({close}, need {MIN_MARGINS}); choose other thresholds in POST_TASKS"
    return None
