"""The Q/DQ rule set (builders/qdq_rules.py) read from a real ONNX proto (the unit tier's tests use its plain nodes)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from builders import qdq_rules as rules


def test_proto_convtranspose_weight_per_channel_axis_1_conforms():
    weight = np.random.default_rng(0).normal(size=(4, 8, 2, 2)).astype(np.float32)
    scale = (np.abs(weight).max(axis=(0, 2, 3)) / 127).astype(np.float32)
    initializers = [
        numpy_helper.from_array(weight, "W"),
        numpy_helper.from_array(scale, "w_scale"),
        numpy_helper.from_array(np.zeros(8, np.int8), "w_zp"),
        numpy_helper.from_array(np.array(0.05, np.float32), "x_scale"),
        numpy_helper.from_array(np.int8(0), "x_zp"),
    ]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "x_scale", "x_zp"], ["xq"], name="xq"),
        helper.make_node("DequantizeLinear", ["xq", "x_scale", "x_zp"], ["xdq"], name="xdq"),
        helper.make_node("QuantizeLinear", ["W", "w_scale", "w_zp"], ["wq"], name="wq", axis=1),
        helper.make_node("DequantizeLinear", ["wq", "w_scale", "w_zp"], ["wdq"], name="wdq", axis=1),
        helper.make_node("ConvTranspose", ["xdq", "wdq"], ["y"], name="deconv", strides=[2, 2]),
    ]
    graph = helper.make_graph(
        nodes,
        "deconv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 8, 8])],
        initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    onnx.checker.check_model(model, full_check=True)
    assert rules.model_violations(model) == []
    for init in model.graph.initializer:  # per-tensor: TensorRT builds it, the project's policy refuses it
        if init.name == "w_scale":
            init.CopyFrom(numpy_helper.from_array(np.float32(0.01), "w_scale"))
        if init.name == "w_zp":
            init.CopyFrom(numpy_helper.from_array(np.int8(0), "w_zp"))
    assert rules.model_violations(model, severities=("error", "warning")) == []
    assert any("quantized per-tensor, not per-channel" in p for p in rules.model_violations(model))
