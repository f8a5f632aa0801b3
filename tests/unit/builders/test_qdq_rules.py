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
