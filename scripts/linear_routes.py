#!/usr/bin/env python3
"""Op-level proof for the engine's matrix products: convnext_tiny's MLP layers (every block's
first layer, [tokens, C] x [4C, C] with its bias) timed through every route libtorch offers and
through onnxruntime's MatMul + Add, on one thread, on the same shapes.

    .venv/bin/python scripts/linear_routes.py [--runs 20] [--threads 1]

The routes: libtorch's eager `linear` (its BLAS, MKL), oneDNN's `_linear_pointwise` on the plain
weight (the engine's route), the same on a weight prepacked by `_reorder_linear_weight`, and
MKL's packed GEMM (`_mkl_linear`). Then the exact-GELU as oneDNN's post-op against libtorch's
own GELU kernel after the product (the engine measures this choice itself at run time,
lop/src/ops/linear.rs). Prints ms per forward pass of all 18 layers, each route beside
onnxruntime's as a ratio. Values are random: the kernels' time does not depend on them.
"""
import argparse
import time

import numpy as np
import onnx
import onnxruntime as ort
import torch
from onnx import TensorProto, helper, numpy_helper

# (tokens = H*W, channels, blocks) of convnext_tiny's four stages at 224 px.
STAGES = [(3136, 96, 3), (784, 192, 3), (196, 384, 9), (49, 768, 3)]


def timed(f, runs):
    """Median ms of `runs` calls after 3 warm-up calls."""
    for _ in range(3):
        f()
    ms = []
    for _ in range(runs):
        t = time.perf_counter()
        f()
        ms.append((time.perf_counter() - t) * 1e3)
    return float(np.median(ms))


def ort_layer(x, w, b, threads):
    """onnxruntime's session for x @ w.T + b (MatMul then Add, as PyTorch exports nn.Linear)."""
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "wt"], ["y0"]), helper.make_node("Add", ["y0", "b"], ["y"])],
        "linear",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [x.shape[0], w.shape[0]])],
        [numpy_helper.from_array(w.T.copy(), "wt"), numpy_helper.from_array(b, "b")],
    )
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    s = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return lambda: s.run(None, {"x": x})


def routes(m, c, runs, threads):
    """ms of one [m, c] x [4c, c] layer per route."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((m, c), dtype=np.float32)
    w = (rng.standard_normal((4 * c, c), dtype=np.float32) * 0.1).astype(np.float32)
    b = rng.standard_normal(4 * c, dtype=np.float32)
    tx, tw, tb = torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(b)
    dnn = torch.ops.mkldnn._linear_pointwise
    packed = torch.ops.mkldnn._reorder_linear_weight(tw, m)
    mkl = torch.ops.mkl._mkl_reorder_linear_weight(tw, m)
    with torch.no_grad():
        return {
            "libtorch linear (MKL)": timed(lambda: torch.nn.functional.linear(tx, tw, tb), runs),
            "oneDNN, plain weight (lop)": timed(lambda: dnn(tx, tw, tb, "none", [], ""), runs),
            "oneDNN, prepacked weight": timed(lambda: dnn(tx, packed, tb, "none", [], ""), runs),
            "MKL packed GEMM": timed(lambda: torch.ops.mkl._mkl_linear(tx, mkl, tw, tb, m), runs),
            "onnxruntime MatMul+Add": timed(ort_layer(x, w, b, threads), runs),
            "oneDNN + GELU post-op": timed(lambda: dnn(tx, tw, tb, "gelu", [], "none"), runs),
            "oneDNN, then GELU kernel": timed(lambda: torch.nn.functional.gelu(dnn(tx, tw, tb, "none", [], "")), runs),
        }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    total = {}
    for m, c, blocks in STAGES:
        for k, v in routes(m, c, a.runs, a.threads).items():
            total[k] = total.get(k, 0.0) + blocks * v
    base = total["onnxruntime MatMul+Add"]
    print(f"convnext_tiny's 18 first MLP layers, {a.threads} thread(s), ms per pass (median of {a.runs}):")
    for k, v in total.items():
        print(f"  {k:28s} {v:8.2f} ms   {v / base:5.2f}x onnxruntime")


if __name__ == "__main__":
    main()
