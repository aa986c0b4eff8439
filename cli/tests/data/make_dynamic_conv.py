"""Writes dynamic_conv.onnx: a two-convolution model whose input height and width are dynamic
(dim_param H, W), for the CLI tests of --input-shape. Run with the project venv:
    .venv/bin/python cli/tests/data/make_dynamic_conv.py
"""
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

rng = np.random.default_rng(7)
w1 = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32) * 0.3, "w1")
b1 = numpy_helper.from_array(rng.standard_normal(4).astype(np.float32) * 0.1, "b1")
w2 = numpy_helper.from_array(rng.standard_normal((4, 4, 3, 3)).astype(np.float32) * 0.3, "w2")
nodes = [
    helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
    helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
    helper.make_node("Conv", ["r1", "w2"], ["c2"], name="conv2", pads=[1, 1, 1, 1], strides=[2, 2]),
    helper.make_node("Relu", ["c2"], ["y"], name="relu2"),
]
graph = helper.make_graph(
    nodes,
    "dynamic_conv",
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, "H", "W"])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, "H2", "W2"])],
    initializer=[w1, b1, w2],
)
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
model.ir_version = 8
onnx.checker.check_model(model)
onnx.save(model, os.path.join(os.path.dirname(os.path.abspath(__file__)), "dynamic_conv.onnx"))
