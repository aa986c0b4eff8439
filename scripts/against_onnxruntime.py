#!/usr/bin/env python3
"""lop's engine against onnxruntime on the same ONNX files, side by side, as ratios.

    .venv/bin/python scripts/against_onnxruntime.py MODEL.onnx [MODEL.onnx ...]
        [--threads 1,2] [--runs 10] [--warmup 3] [--layouts nchw,channels_last] [--lop target/release/lop]
        [--json OUT.json | --json -]

For each model and thread count it times onnxruntime's CPU provider (all graph optimisations,
`intra_op_num_threads` = the count, median of `--runs` after `--warmup`), then `lop bench-exec
--json --kinds` in each layout with the same counts (`--threads` there). It prints one line per
(model, threads, layout): lop's whole run, its run with every op in 8 row bands, onnxruntime's
run, and the ratios; then where the time goes, op family by op family, lop's per-op times beside
onnxruntime's profiler (its per-node times, summed by op type). The two are measured one after
the other, so a load that drifts hits both alike only roughly: run it on an idle machine.
`--json -` prints the rows as one JSON value on stdout and the tables on stderr
(`scripts/bench_report.sh engine` stores that as docs/results/engine.json).

Op families: conv (Conv, FusedConv, ConvTranspose), activation (Relu, Sigmoid, Silu, ...),
elementwise (Add, Mul, Sub, Div, ...), pool (MaxPool, AveragePool, GlobalAveragePool,
ReduceMean), resize, concat, layout (Reorder*, Transpose, Reshape, Slice, Split, ...), and other.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort

FAMILIES = {
    "conv": {"Conv", "FusedConv", "ConvTranspose", "NhwcFusedConv", "NhwcConv", "QLinearConv"},
    "activation": {
        "Relu", "Sigmoid", "Silu", "SiLU", "Clip", "LeakyRelu", "HardSwish", "HardSigmoid", "Gelu", "Erf", "Tanh", "Exp", "Mish",
        "Softplus", "Elu", "Abs", "Neg", "QuickGelu", "BiasGelu", "FastGelu",
    },
    "elementwise": {"Add", "Mul", "Sub", "Div", "Pow", "Sqrt", "Max", "Min", "Where", "BatchNorm", "BatchNormalization", "NormalizeU8"},
    "pool": {"MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "ReduceMean", "ReduceMax", "ReduceSum"},
    "resize": {"Resize", "Upsample"},
    "concat": {"Concat"},
    "layout": {"ReorderInput", "ReorderOutput", "Transpose", "Reshape", "Slice", "Split", "Flatten", "Squeeze", "Unsqueeze", "Pad", "Gather"},
    "matmul": {"MatMul", "Gemm", "Linear", "FusedMatMul", "LayerNormalization", "Softmax"},
}


def family(op_type: str) -> str:
    # lop's convolutions with a folded activation ("Conv+SiLU") count as convolutions, as
    # onnxruntime's FusedConv does.
    op_type = op_type.split("+", 1)[0]
    for name, members in FAMILIES.items():
        if op_type in members:
            return name
    return "other"


def log(msg: str) -> None:
    print(f"against_onnxruntime: {msg}", file=sys.stderr, flush=True)


def ort_inputs(sess: ort.InferenceSession) -> dict:
    feeds = {}
    rng = np.random.default_rng(0)
    for i in sess.get_inputs():
        shape = [d if isinstance(d, int) and d > 0 else 1 for d in i.shape]
        if "uint8" in i.type:
            feeds[i.name] = rng.integers(0, 256, size=shape, dtype=np.uint8)
        else:
            feeds[i.name] = rng.standard_normal(shape).astype(np.float32)
    return feeds


def time_ort(model: Path, threads: int, runs: int, warmup: int) -> tuple[float, dict]:
    """onnxruntime's median ms, and its profiler's median ms per op family over the runs."""
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    sess = ort.InferenceSession(str(model), so, providers=["CPUExecutionProvider"])
    feeds = ort_inputs(sess)
    for _ in range(warmup):
        sess.run(None, feeds)
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        sess.run(None, feeds)
        times.append((time.perf_counter() - t) * 1e3)
    # A second session with the profiler on, for the breakdown only (profiling costs time).
    with tempfile.TemporaryDirectory() as tmp:
        so.enable_profiling = True
        so.profile_file_prefix = os.path.join(tmp, "ort")
        prof = ort.InferenceSession(str(model), so, providers=["CPUExecutionProvider"])
        for _ in range(warmup):
            prof.run(None, feeds)
        prof.end_profiling()
        prof = ort.InferenceSession(str(model), so, providers=["CPUExecutionProvider"])
        for _ in range(runs):
            prof.run(None, feeds)
        events = json.loads(Path(prof.end_profiling()).read_text(encoding="utf-8"))
    per_family: dict[str, float] = {}
    for e in events:
        if e.get("cat") == "Node" and e.get("name", "").endswith("_kernel_time"):
            fam = family(e.get("args", {}).get("op_name", "?"))
            per_family[fam] = per_family.get(fam, 0.0) + e["dur"] / 1e3 / runs
    return float(np.median(times)), per_family


def time_lop(lop: Path, model: Path, threads: int, runs: int, warmup: int, layout: str) -> dict:
    cmd = [str(lop), "--threads", str(threads), "bench-exec", str(model), "--json", "--kinds"]
    cmd += ["--runs", str(runs), "--warmup", str(warmup), "--layout", layout]
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"against_onnxruntime: {' '.join(cmd)} failed (exit {out.returncode}):\n{out.stderr}")
    v = json.loads(out.stdout.strip().splitlines()[-1])
    fams: dict[str, float] = {}
    for k in v["kinds"]:
        fams[family(k["kind"])] = fams.get(family(k["kind"]), 0.0) + k["ms"]
    v["families"] = fams
    return v


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="+", type=Path)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--layouts", default="nchw,channels_last")
    ap.add_argument("--lop", type=Path, default=Path(__file__).resolve().parent.parent / "target/release/lop")
    ap.add_argument("--json", help="also write every row as JSON to this file; '-': to stdout, the tables to stderr")
    args = ap.parse_args()
    if not args.lop.is_file():
        raise SystemExit(f"against_onnxruntime: {args.lop} is missing: build it (cargo build --release -p lop_cli)")
    rows = []
    for model in args.models:
        if not model.is_file():
            raise SystemExit(f"against_onnxruntime: {model} is not a file")
        for threads in [int(t) for t in args.threads.split(",")]:
            log(f"{model.name}, {threads} thread(s): onnxruntime")
            ort_ms, ort_fams = time_ort(model, threads, args.runs, args.warmup)
            for layout in args.layouts.split(","):
                log(f"{model.name}, {threads} thread(s): lop bench-exec --layout {layout}")
                v = time_lop(args.lop, model, threads, args.runs, args.warmup, layout)
                rows.append({
                    "model": model.stem, "threads": threads, "layout": v["layout"], "lop_whole_ms": v["whole_ms"],
                    "lop_banded_ms": v["chunked_ms"], "bands": v["bands"], "ort_ms": ort_ms,
                    "whole_over_ort": v["whole_ms"] / ort_ms, "banded_over_whole": v["chunked_ratio"],
                    "lop_families_ms": v["families"], "ort_families_ms": ort_fams,
                    "banded_floor": v["chunked_floor_ratio"],
                })
    out = sys.stderr if args.json == "-" else sys.stdout
    print(f"{'model':<16}{'thr':>4} {'layout':<14}{'lop ms':>9}{'banded ms':>11}{'ort ms':>9}{'lop/ort':>9}{'band/whole':>11}", file=out)
    for r in rows:
        print(
            f"{r['model']:<16}{r['threads']:>4} {r['layout']:<14}{r['lop_whole_ms']:>9.2f}{r['lop_banded_ms']:>11.2f}"
            f"{r['ort_ms']:>9.2f}{r['whole_over_ort']:>9.3f}{r['banded_over_whole']:>11.3f}",
            file=out,
        )
    print("\nwhere the time goes, ms per run (lop's per-op times; onnxruntime's profiler, kernel times):", file=out)
    for r in rows:
        fams = sorted(set(r["lop_families_ms"]) | set(r["ort_families_ms"]), key=lambda f: -r["lop_families_ms"].get(f, 0.0))
        cells = ", ".join(f"{f} {r['lop_families_ms'].get(f, 0.0):.2f}/{r['ort_families_ms'].get(f, 0.0):.2f}" for f in fams)
        print(f"{r['model']} {r['threads']}t {r['layout']}: lop/ort {cells}", file=out)
    doc = {"runs": args.runs, "warmup": args.warmup, "onnxruntime": ort.__version__, "rows": rows}
    if args.json == "-":
        print(json.dumps(doc))
    elif args.json:
        Path(args.json).write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
