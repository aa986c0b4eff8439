#!/usr/bin/env python3
"""Small ONNX graphs, one per op and attribute set exports use, with onnxruntime's outputs.

    .venv/bin/python scripts/op_cases.py --out target/op_cases

Each case is a graph of an image-shaped input [1, C, H, W] through a convolution (so the op
reads computed, row-split values) into the op under test, written as onnx.helper builds it
(opset 17). For every case it writes CASE.onnx, CASE.input.npy (seeded) and CASE.output<K>.npy
(onnxruntime, CPU, graph optimisations off), and finally manifest.json listing the cases.
tests/op_cases.rs runs each whole and split and compares. Work already done is skipped when the
script and onnxruntime are unchanged.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
C, H, W = 3, 20, 16


def const(name: str, array) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(array), name)


def stem(nodes: list, inits: list, channels: int = 4) -> str:
    """x -> 3x3 convolution (seeded weights) -> 'feat' [1, channels, H, W]."""
    rng = np.random.default_rng(7)
    inits.append(const("stem_w", rng.normal(0, 0.3, (channels, C, 3, 3)).astype(np.float32)))
    inits.append(const("stem_b", rng.normal(0, 0.1, (channels,)).astype(np.float32)))
    nodes.append(helper.make_node("Conv", ["x", "stem_w", "stem_b"], ["feat"], pads=[1, 1, 1, 1]))
    return "feat"


def graph(name: str, nodes: list, inits: list, outputs: list[str]) -> onnx.ModelProto:
    g = helper.make_graph(
        nodes,
        name,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, C, H, W])],
        [helper.make_empty_tensor_value_info(o) for o in outputs],
        inits,
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)])
    m.ir_version = 8
    # The outputs' types and shapes, as an exporter writes them.
    inferred = onnx.shape_inference.infer_shapes(m, strict_mode=True)
    m.graph.ClearField("output")
    m.graph.output.extend(v for o in outputs for v in inferred.graph.value_info if v.name == o)
    return m


def pad_case(name: str, mode: str, pads: list[int], value: float | None = None) -> onnx.ModelProto:
    """Pad after the stem, read by two consumers (so it cannot fold into one), then a Conv."""
    nodes, inits = [], []
    f = stem(nodes, inits)
    inits.append(const(f"{name}_pads", np.array(pads, dtype=np.int64)))
    ins = [f, f"{name}_pads"]
    if value is not None:
        inits.append(const(f"{name}_value", np.array(value, dtype=np.float32)))
        ins.append(f"{name}_value")
    nodes.append(helper.make_node("Pad", ins, ["padded"], mode=mode))
    rng = np.random.default_rng(11)
    channels = 4 + pads[1] + pads[5]
    inits.append(const("post_w", rng.normal(0, 0.3, (2, channels, 3, 3)).astype(np.float32)))
    nodes.append(helper.make_node("Conv", ["padded", "post_w"], ["conv"], pads=[1, 1, 1, 1]))
    nodes.append(helper.make_node("Relu", ["padded"], ["relu"]))
    return graph(name, nodes, inits, ["conv", "relu"])


def grid_case(name: str, mode: str, padding: str, align: int) -> onnx.ModelProto:
    """Grid sampling of the stem's map at points computed from it (some outside [-1, 1])."""
    nodes, inits = [], []
    f = stem(nodes, inits, channels=6)
    inits.append(const("split", np.array([4, 2], dtype=np.int64)))
    nodes.append(helper.make_node("Split", [f, "split"], ["value", "offsets"], axis=1))
    nodes.append(helper.make_node("Tanh", ["offsets"], ["unit"]))
    inits.append(const("reach", np.array(1.3, dtype=np.float32)))
    nodes.append(helper.make_node("Mul", ["unit", "reach"], ["scaled"]))
    nodes.append(helper.make_node("Transpose", ["scaled"], ["grid"], perm=[0, 2, 3, 1]))
    nodes.append(helper.make_node("GridSample", ["value", "grid"], ["y"], mode=mode, padding_mode=padding, align_corners=align))
    return graph(name, nodes, inits, ["y"])


def cases() -> dict[str, onnx.ModelProto]:
    out = {}
    out["pad_reflect"] = pad_case("pad_reflect", "reflect", [0, 0, 2, 3, 0, 0, 1, 2])
    out["pad_edge"] = pad_case("pad_edge", "edge", [0, 0, 3, 0, 0, 0, 4, 1])
    out["pad_constant_channels"] = pad_case("pad_constant_channels", "constant", [0, 1, 2, 0, 0, 2, 1, 1], 0.5)
    out["pad_crop"] = pad_case("pad_crop", "constant", [0, 0, -2, 1, 0, 0, 1, -3], -1.0)
    out["grid_bilinear_zeros"] = grid_case("grid_bilinear_zeros", "bilinear", "zeros", 0)
    out["grid_nearest_border"] = grid_case("grid_nearest_border", "nearest", "border", 1)
    out["grid_bicubic_reflection"] = grid_case("grid_bicubic_reflection", "bicubic", "reflection", 0)

    # TopK (smallest, then largest) of per-position channel means, indices used for gathers.
    nodes, inits = [], []
    f = stem(nodes, inits)
    nodes.append(helper.make_node("ReduceMax", [f], ["peak"], axes=[1], keepdims=0))
    nodes.append(helper.make_node("Flatten", ["peak"], ["flat"], axis=1))
    inits.append(const("k", np.array([7], dtype=np.int64)))
    nodes.append(helper.make_node("TopK", ["flat", "k"], ["small", "small_i"], axis=-1, largest=0))
    nodes.append(helper.make_node("TopK", ["flat", "k"], ["big", "big_i"], axis=1, largest=1))
    inits.append(const("five", np.array(5, dtype=np.int64)))
    nodes.append(helper.make_node("Mod", ["big_i", "five"], ["big_mod"]))
    nodes.append(helper.make_node("Div", ["big_i", "five"], ["big_div"]))
    nodes.append(helper.make_node("Cast", ["big_mod"], ["big_mod_f"], to=TensorProto.FLOAT))
    nodes.append(helper.make_node("Cast", ["big_div"], ["big_div_f"], to=TensorProto.FLOAT))
    nodes.append(helper.make_node("Cast", ["small_i"], ["small_i_f"], to=TensorProto.FLOAT))
    nodes.append(helper.make_node("Gather", ["flat", "big_i"], ["picked"], axis=1))
    out["topk_mod_gather"] = graph("topk_mod_gather", nodes, inits, ["small", "big", "big_mod_f", "big_div_f", "small_i_f", "picked"])

    # GatherElements with negative indices, and with computed indices.
    nodes, inits = [], []
    f = stem(nodes, inits)
    inits.append(const("rows_shape", np.array([1, 4, H * W], dtype=np.int64)))
    nodes.append(helper.make_node("Reshape", [f, "rows_shape"], ["rows"]))
    rng = np.random.default_rng(5)
    idx = rng.integers(-H * W, H * W, (1, 4, 9)).astype(np.int64)
    inits.append(const("idx", idx))
    nodes.append(helper.make_node("GatherElements", ["rows", "idx"], ["picked"], axis=2))
    inits.append(const("k2", np.array([9], dtype=np.int64)))
    nodes.append(helper.make_node("TopK", ["rows", "k2"], ["top", "top_i"], axis=2))
    nodes.append(helper.make_node("GatherElements", ["rows", "top_i"], ["again"], axis=2))
    out["gather_elements"] = graph("gather_elements", nodes, inits, ["picked", "again"])

    # Comparisons, logic, Where and Mod element-wise on the split rows.
    nodes, inits = [], []
    f = stem(nodes, inits)
    inits += [const("hi", np.array(0.2, dtype=np.float32)), const("lo", np.array(-0.5, dtype=np.float32))]
    inits += [const("tenth", np.array(0.1, dtype=np.float32)), const("step", np.array(0.7, dtype=np.float32))]
    nodes.append(helper.make_node("Greater", [f, "hi"], ["above"]))
    nodes.append(helper.make_node("Less", [f, "lo"], ["below"]))
    nodes.append(helper.make_node("Not", ["below"], ["not_below"]))
    nodes.append(helper.make_node("And", ["above", "not_below"], ["keep"]))
    nodes.append(helper.make_node("Equal", ["above", "below"], ["same"]))
    nodes.append(helper.make_node("Xor", ["keep", "same"], ["odd"]))
    nodes.append(helper.make_node("Or", ["odd", "below"], ["any"]))
    nodes.append(helper.make_node("Mul", [f, "tenth"], ["small"]))
    nodes.append(helper.make_node("Where", ["any", f, "small"], ["chosen"]))
    nodes.append(helper.make_node("Mod", ["chosen", "step"], ["wrapped"], fmod=1))
    nodes.append(helper.make_node("LessOrEqual", ["wrapped", "tenth"], ["le"]))
    nodes.append(helper.make_node("GreaterOrEqual", ["wrapped", "lo"], ["ge"]))
    nodes.append(helper.make_node("And", ["le", "ge"], ["band"]))
    nodes.append(helper.make_node("Cast", ["band"], ["band_f"], to=TensorProto.FLOAT))
    nodes.append(helper.make_node("Sin", ["wrapped"], ["s"]))
    nodes.append(helper.make_node("Cos", ["wrapped"], ["c"]))
    nodes.append(helper.make_node("Add", ["s", "c"], ["sc"]))
    inits.append(const("axes_c", np.array([1], dtype=np.int64)))
    nodes.append(helper.make_node("ReduceSum", ["sc", "axes_c"], ["sum_c"], keepdims=1))
    nodes.append(helper.make_node("ReduceMin", ["sc"], ["min_h"], axes=[2], keepdims=1))
    out["logic_where_mod"] = graph("logic_where_mod", nodes, inits, ["wrapped", "band_f", "sum_c", "min_h"])
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, type=Path)
    args = ap.parse_args()
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    script = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()
    key = {"script": script, "onnxruntime": ort.__version__, "onnx": onnx.__version__}
    stamp = out / "stamp.json"
    if stamp.is_file() and json.loads(stamp.read_text()) == key and (out / "manifest.json").is_file():
        print("op_cases: up to date", file=sys.stderr)
        return 0
    manifest = {"cases": []}
    rng = np.random.default_rng(3)
    for name, model in cases().items():
        onnx.checker.check_model(model)
        path = out / f"{name}.onnx"
        onnx.save(model, path)
        x = rng.normal(0, 1, (1, C, H, W)).astype(np.float32)
        np.save(out / f"{name}.input.npy", x)
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
        ys = sess.run(None, {"x": x})
        files = []
        for k, y in enumerate(ys):
            fname = f"{name}.output{k}.npy"
            np.save(out / fname, np.ascontiguousarray(np.asarray(y, dtype=np.float32)))
            files.append(fname)
        ops = sorted({n.op_type for n in model.graph.node})
        manifest["cases"].append({"name": name, "onnx": path.name, "input": f"{name}.input.npy", "outputs": files, "ops": ops})
        print(f"op_cases: {name}: {', '.join(ops)} -> {[list(np.shape(y)) for y in ys]}", file=sys.stderr)
    tmp = out / "manifest.json.tmp"
    tmp.write_text(json.dumps(manifest, indent=2) + "\n")
    os.replace(tmp, out / "manifest.json")
    stamp.write_text(json.dumps(key) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
