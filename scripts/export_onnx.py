#!/usr/bin/env python3
"""Exports a PyTorch model to an ONNX file lop imports, then checks lop against onnxruntime.

    .venv/bin/python scripts/export_onnx.py resnet18 --out resnet18.onnx
    .venv/bin/python scripts/export_onnx.py my_pkg.models:build_detector --input-shape 1,3,640,640 \\
        --out detector.onnx --preprocess unit

MODEL is a torchvision model name (`torchvision.models.<name>(weights=None)`, random weights:
nothing is downloaded) or `module:callable`, a function of no arguments returning a
`torch.nn.Module` (your trained detector, with its weights loaded). The module must be importable:
run from its project, or add it to PYTHONPATH.

Steps, each reported on stderr:
1. export with the legacy TorchScript exporter (`dynamo=False`), opset 17, static input shape
   (`--input-shape`; `--dynamic` marks height and width dynamic instead, as many detectors ship);
2. `lop verify`: random row-band layouts split between robot and server against the whole run
   (exactness, within --tol);
3. `lop run` on a seeded input against onnxruntime (CPU, graph optimisations off).
With `--preprocess SPEC`, steps 2 and 3 run the model behind lop's preprocess stage on a uint8
frame (onnxruntime gets the same frame prepared in numpy), as lop_robot and lop_edge will.

Exit status 0 when both checks pass, 1 when one fails, 2 on bad arguments or a failed export.
"""

from __future__ import annotations

import argparse
import importlib
import os
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def log(msg: str) -> None:
    print(f"export_onnx: {msg}", file=sys.stderr, flush=True)


def build_module(spec: str):
    import torch

    if ":" in spec:
        mod_name, fn_name = spec.split(":", 1)
        try:
            fn = getattr(importlib.import_module(mod_name), fn_name)
        except (ImportError, AttributeError) as e:
            raise ValueError(f"cannot load '{spec}': {e}") from e
        model = fn()
    else:
        import torchvision

        if not hasattr(torchvision.models, spec):
            raise ValueError(f"torchvision has no model '{spec}' (or give module:callable)")
        torch.manual_seed(0)
        model = getattr(torchvision.models, spec)(weights=None)
    if not isinstance(model, torch.nn.Module):
        raise ValueError(f"'{spec}' gave a {type(model).__name__}, not a torch.nn.Module")
    return model.eval()


def export(model, shape: list[int], out: Path, dynamic: bool, opset: int) -> None:
    import torch

    axes = {"images": {2: "height", 3: "width"}} if dynamic else None
    tmp = out.with_name(out.name + ".tmp")
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.onnx.export(
            model,
            (torch.zeros(*shape),),
            str(tmp),
            dynamo=False,
            opset_version=opset,
            input_names=["images"],
            dynamic_axes=axes,
            do_constant_folding=True,
        )
    os.replace(tmp, out)


def prepare(frame, spec: str | None):
    """What lop's preprocess stage computes from a uint8 frame, in numpy float32 (None: the
    frame is already the float input)."""
    import numpy as np

    if spec is None:
        return frame
    x = frame.astype(np.float32)
    parts = [p.strip() for p in spec.split(";") if p.strip()]
    unit, mean, std = True, None, None
    for p in parts:
        if p == "raw":
            unit = False
        elif p == "imagenet":
            mean, std = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
        elif p.startswith("mean="):
            mean = [float(v) for v in p[5:].split(",")]
        elif p.startswith("std="):
            std = [float(v) for v in p[4:].split(",")]
    if "bgr" in parts:
        x = x[:, ::-1].copy()
    if unit:
        x = x / np.float32(255.0)
    c = x.shape[1]
    if mean is not None:
        x = x - np.asarray(mean, dtype=np.float32).reshape(1, c, 1, 1)
    if std is not None:
        x = x / np.asarray(std, dtype=np.float32).reshape(1, c, 1, 1)
    return x.astype(np.float32)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model", help="torchvision model name, or module:callable returning a torch.nn.Module")
    ap.add_argument("--out", required=True, type=Path, help="the .onnx file to write")
    ap.add_argument("--input-shape", default="1,3,224,224", help="N,C,H,W of the export (default 1,3,224,224)")
    ap.add_argument("--dynamic", action="store_true", help="export height and width as dynamic axes")
    ap.add_argument("--opset", type=int, default=17)
    ap.add_argument("--preprocess", help="check behind lop's preprocess stage (unit, raw, imagenet, mean=..;std=.., ;bgr)")
    ap.add_argument("--plans", type=int, default=8, help="band layouts lop verify tries")
    ap.add_argument("--tol", type=float, default=1e-4, help="largest relative error accepted against onnxruntime")
    ap.add_argument("--lop", type=Path, default=ROOT / "target/release/lop", help="the lop binary")
    args = ap.parse_args()

    try:
        shape = [int(d) for d in args.input_shape.split(",")]
        assert len(shape) == 4 and all(d > 0 for d in shape)
    except (ValueError, AssertionError):
        print(f"export_onnx: --input-shape '{args.input_shape}' is not N,C,H,W", file=sys.stderr)
        return 2
    if not args.lop.is_file():
        print(f"export_onnx: {args.lop} is missing; build it: cargo build --release -p lop_cli", file=sys.stderr)
        return 2

    import numpy as np
    import onnxruntime as ort

    log(f"building {args.model}")
    try:
        model = build_module(args.model)
    except ValueError as e:
        print(f"export_onnx: {e}", file=sys.stderr)
        return 2
    log(f"exporting to {args.out} (opset {args.opset}, shape {shape}{', dynamic H and W' if args.dynamic else ''})")
    try:
        export(model, shape, args.out, args.dynamic, args.opset)
    except Exception as e:  # the exporter raises many kinds
        print(f"export_onnx: the export failed: {e}", file=sys.stderr)
        return 2

    lop_model = [str(args.out), "--input-shape", ",".join(map(str, shape))]
    if args.preprocess:
        lop_model += ["--preprocess", args.preprocess]
    log(f"lop verify ({args.plans} band layouts)")
    verify = subprocess.run([str(args.lop), "verify", *lop_model, "--plans", str(args.plans)], capture_output=True, text=True)
    sys.stderr.write(verify.stdout + verify.stderr)
    if verify.returncode == 2:
        print("export_onnx: lop cannot import or run the model (above)", file=sys.stderr)
        return 2

    rng = np.random.default_rng(0)
    frame = rng.integers(0, 256, size=shape, dtype=np.uint8)
    feed = frame if args.preprocess else (frame.astype(np.float32) / 255.0 - 0.45) / 0.225
    reference_input = prepare(frame, args.preprocess) if args.preprocess else feed
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(str(args.out), sess_options=opts, providers=["CPUExecutionProvider"])
    expected = sess.run(None, {sess.get_inputs()[0].name: reference_input})
    worst = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        x = Path(tmp) / "x.npy"
        y = Path(tmp) / "y.npy"
        np.save(x, feed)
        run = subprocess.run([str(args.lop), "run", *lop_model, "--input", str(x), "--output", str(y)], capture_output=True, text=True)
        if run.returncode != 0:
            sys.stderr.write(run.stderr)
            print("export_onnx: lop run failed (above)", file=sys.stderr)
            return 1
        for k, ref in enumerate(expected):
            path = y if len(expected) == 1 else Path(tmp) / f"y.{k}.npy"
            got = np.load(path)
            if got.shape != ref.shape:
                print(f"export_onnx: output {k} has shape {got.shape} in lop, {ref.shape} in onnxruntime", file=sys.stderr)
                return 1
            err = float(np.abs(got - ref).max() / max(np.abs(ref).max(), 1e-12))
            worst = max(worst, err)
            log(f"output {k} {list(ref.shape)}: relative error against onnxruntime {err:.2e}")
    ok = verify.returncode == 0 and worst <= args.tol
    log(f"{'ok' if ok else 'FAILED'}: split layouts {'exact' if verify.returncode == 0 else 'NOT exact'}, onnxruntime error {worst:.2e} (tolerance {args.tol:g})")
    if ok:
        wire = "u8" if args.preprocess else "native"
        pre = f'\n    preprocess: "{args.preprocess}"' if args.preprocess else ""
        print(
            f"# config/edge.yaml (the file in model_store)\nmodels:\n  - id: {args.out.stem}\n    source: {args.out.name}\n"
            f"    input_shape: {shape}{pre}\ntable:\n  input_wire: {wire}\n"
            f"# config/robot.yaml, under lop_robot's ros__parameters\nmodel:\n  source: \"{args.out}\"\n  id: \"{args.out.stem}\"\n"
            f"  input_shape: {shape}\n  preprocess: \"{args.preprocess or ''}\"\ntable:\n  input_wire: \"{wire}\""
        )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
