"""The one Q/DQ rule set (builders/qdq_rules.py): TensorRT's facts and the project's policy."""

from __future__ import annotations

import numpy as np
import pytest

from builders import qdq_rules as rules
from builders.qdq_rules import QdqNode, WeightUser

INT8_ZERO = np.int8(0)


def weight_dq(op: str, shape: tuple[int, ...], axis: int, channels: int, trans_b: int = 0) -> QdqNode:
    return QdqNode(
        op="DequantizeLinear",
        quantized_type="INT8",
        scale=np.full(channels, 0.01, np.float32),
        zero_point=np.zeros(channels, np.int8),
        zero_point_given=True,
        axis=axis,
        weight="W",
        weight_shape=shape,
        weight_users=(WeightUser(op, 1, trans_b),),
    )


def codes(node: QdqNode) -> dict[str, str]:
    return {v.code: v.severity for v in rules.node_violations(node)}


@pytest.mark.parametrize(
    "op, shape, axis, channels, trans_b",
    [
        ("Conv", (8, 4, 3, 3), 0, 8, 0),
        ("ConvTranspose", (4, 8, 2, 2), 1, 8, 0),  # [C_in, C_out/g, kH, kW]: output channels on axis 1
        ("Gemm", (10, 16), 0, 10, 1),  # transB=1: [N, K]
        ("Gemm", (16, 10), 1, 10, 0),  # transB=0: [K, N]
        ("MatMul", (16, 10), 1, 10, 0),
    ],
)
def test_per_channel_weights_on_the_output_channel_axis_conform(op, shape, axis, channels, trans_b):
    assert rules.node_violations(weight_dq(op, shape, axis, channels, trans_b)) == []


@pytest.mark.parametrize(
    "op, shape, axis, channels, expected",
    [
        ("Conv", (8, 4, 3, 3), 1, 4, 0),
        ("ConvTranspose", (4, 8, 2, 2), 0, 4, 1),  # ModelOpt's pytorch default (axis 0) is the input channels here
        ("MatMul", (16, 10), 0, 16, 1),
    ],
)
def test_per_channel_weights_on_another_axis_are_a_tensorrt_error(op, shape, axis, channels, expected):
    (violation,) = rules.node_violations(weight_dq(op, shape, axis, channels))
    assert violation.severity == "error" and violation.code == "qdq-weight-axis"
    assert f"expected per-channel on axis {expected}" in violation.message


def test_weight_axis_table():
    assert rules.weight_axis(WeightUser("ConvTranspose", 1)) == 1
    assert rules.weight_axis(WeightUser("Conv", 1)) == 0
    assert rules.weight_axis(WeightUser("Gemm", 1, trans_b=1)) == 0
    assert rules.weight_axis(WeightUser("Gemm", 1, trans_b=0)) == 1
    assert rules.weight_axis(WeightUser("Conv", 0)) == rules.DEFAULT_WEIGHT_AXIS  # an activation input
    assert rules.weight_axis(None) == rules.DEFAULT_WEIGHT_AXIS


def test_per_tensor_weight_is_policy_not_a_tensorrt_error():
    node = QdqNode("DequantizeLinear", "INT8", np.float32(0.01), INT8_ZERO, True, weight="W", weight_shape=(4, 8, 2, 2))
    assert codes(node) == {"qdq-weight-per-tensor": "policy"}


def activation(**overrides: object) -> QdqNode:
    values: dict = {
        "op": "QuantizeLinear",
        "quantized_type": "INT8",
        "scale": np.float32(0.05),
        "zero_point": INT8_ZERO,
        "zero_point_given": True,
    }
    values.update(overrides)
    return QdqNode(**values, quantize_feeds=("DequantizeLinear",))


def test_activation_rules():
    assert rules.node_violations(activation()) == []
    assert codes(activation(zero_point=np.int8(3))) == {"qdq-asymmetric": "error"}
    assert codes(activation(quantized_type="UINT8", zero_point=np.uint8(0))) == {"qdq-uint8": "error"}
    assert codes(activation(quantized_type=None, zero_point=None, zero_point_given=False)) == {"qdq-implicit-uint8": "warning"}
    per_channel = activation(scale=np.full(3, 0.05, np.float32), zero_point=np.zeros(3, np.int8))
    assert codes(per_channel) == {"qdq-per-channel-activation": "warning"}
    assert codes(activation(scale=None)) == {"qdq-scale-runtime": "error"}
    assert codes(activation(scale=np.float32(-1))) == {"qdq-scale": "error"}
    assert codes(activation(quantized_type="FP8")) == {"qdq-not-int8": "policy"}
    assert codes(activation(quantized_type="INT16")) == {"qdq-dtype": "error"}
    assert codes(QdqNode("DequantizeLinear", "INT32", np.float32(0.1), None)) == {"qdq-dtype": "error"}


def test_quantize_feeding_something_else_is_policy():
    node = QdqNode("QuantizeLinear", "INT8", np.float32(0.05), INT8_ZERO, True, quantize_feeds=("DequantizeLinear", "Relu"))
    assert codes(node) == {"qdq-unpaired": "policy"}


def test_proto_convtranspose_weight_per_channel_axis_1_conforms():
    import onnx
    from onnx import TensorProto, helper, numpy_helper

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
