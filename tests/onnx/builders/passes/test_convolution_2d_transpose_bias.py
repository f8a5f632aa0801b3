"""The Convolution2DTransposeBias rewrite on small synthetic graphs, against the numpy reference."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import onnx_graphsurgeon as gs
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from builders.passes.convolution_2d_transpose_bias import (
    check_against_tflite,
    convolution_2d_transpose_bias,
    derive_config,
)
from builders.passes.reference_ops import run_unfixed_with_reference, transpose_conv_bias
from builders.tflite import TransposeConvParams, parse_transpose_conv_options

ATOL = 1e-4


def _model(
    height: int,
    width: int,
    c_in: int,
    c_out: int,
    kernel: int,
    out_hw: tuple[int, int] | None,
    *,
    op_type: str = "TFL_Convolution2DTransposeBias",
    domain: str = "",
    attrs: dict[str, Any] | None = None,
    seed: int = 0,
    sigmoid: bool = False,
    declare_input_shape: bool = True,
) -> tuple[onnx.ModelProto, np.ndarray, np.ndarray]:
    """x [1,H,W,C_in] -> Relu -> custom op [-> Sigmoid] -> y; weights OHWI, bias [C_out] as initializers."""
    rng = np.random.default_rng(seed)
    weights = rng.standard_normal((c_out, kernel, kernel, c_in)).astype(np.float32)
    bias = rng.standard_normal(c_out).astype(np.float32)
    x_shape: list[int | str] = [1, height, width, c_in] if declare_input_shape else [1, "h", "w", c_in]
    y_shape: list[int | str] = [1, out_hw[0], out_hw[1], c_out] if out_hw is not None else [1, "h_out", "w_out", c_out]
    nodes = [
        helper.make_node("Relu", ["x"], ["x_relu"], name="relu"),
        helper.make_node(
            op_type, ["x_relu", "weights", "bias"], ["deconv" if sigmoid else "y"], name="deconv_node",
            domain=domain, **(attrs or {}),
        ),
    ]  # fmt: skip
    if sigmoid:
        nodes.append(helper.make_node("Sigmoid", ["deconv"], ["y"], name="sigmoid"))
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, y_shape)],
        [numpy_helper.from_array(weights, "weights"), numpy_helper.from_array(bias, "bias")],
    )
    opsets = [helper.make_opsetid("", 17)]
    if domain:
        opsets.append(helper.make_opsetid(domain, 1))
    return helper.make_model(graph, opset_imports=opsets), weights, bias


def _fix(model: onnx.ModelProto) -> tuple[onnx.ModelProto, int]:
    graph = gs.import_onnx(model)
    count = convolution_2d_transpose_bias(graph)
    graph.cleanup().toposort()
    fixed = gs.export_onnx(graph)
    onnx.checker.check_model(fixed)
    return fixed, count


def _run(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return np.asarray(session.run(None, {"x": x})[0])


def _expected(x: np.ndarray, weights: np.ndarray, bias: np.ndarray, stride: int, padding: str, sigmoid: bool) -> np.ndarray:
    y = transpose_conv_bias(np.maximum(x, 0), weights, bias, stride, stride, padding)
    return 1 / (1 + np.exp(-y)) if sigmoid else y


CASES = [
    # (name, H, W, kernel, stride, padding, out_hw)
    ("k2s2", 5, 7, 2, 2, "SAME", (10, 14)),
    ("k3s2_same", 5, 6, 3, 2, "SAME", (10, 12)),
    ("k3s2_valid", 5, 6, 3, 2, "VALID", (11, 13)),
    ("k4s2_same", 4, 4, 4, 2, "SAME", (8, 8)),
    ("k1s2_same_output_padding", 3, 4, 1, 2, "SAME", (6, 8)),
]


@pytest.mark.parametrize(("name", "height", "width", "kernel", "stride", "padding", "out_hw"), CASES)
def test_default_domain_without_attributes_derives_from_shapes(name, height, width, kernel, stride, padding, out_hw):
    model, weights, bias = _model(height, width, 3, 4, kernel, out_hw, seed=len(name))
    fixed, count = _fix(model)
    assert count == 1
    assert {node.op_type for node in fixed.graph.node} == {"Relu", "Transpose", "ConvTranspose"}
    x = np.random.default_rng(1).standard_normal((1, height, width, 3)).astype(np.float32)
    actual = _run(fixed, x)
    expected = _expected(x, weights, bias, stride, padding, sigmoid=False)
    assert actual.shape == (1, *out_hw, 4)
    np.testing.assert_allclose(actual, expected, atol=ATOL, rtol=0)


@pytest.mark.parametrize(("name", "height", "width", "kernel", "stride", "padding", "out_hw"), CASES[:3])
def test_with_attributes_in_a_custom_domain(name, height, width, kernel, stride, padding, out_hw):
    attrs = {"padding": padding, "stride_h": stride, "stride_w": stride}
    model, weights, bias = _model(height, width, 2, 3, kernel, None, op_type="Convolution2DTransposeBias", domain="mediapipe", attrs=attrs)
    fixed, count = _fix(model)
    assert count == 1
    assert all(node.domain in ("", "ai.onnx") for node in fixed.graph.node)
    assert "mediapipe" not in {entry.domain for entry in fixed.opset_import}
    x = np.random.default_rng(2).standard_normal((1, height, width, 2)).astype(np.float32)
    np.testing.assert_allclose(_run(fixed, x), _expected(x, weights, bias, stride, padding, False), atol=ATOL, rtol=0)


def test_tflite_enum_padding_attribute():
    model, weights, bias = _model(4, 4, 2, 2, 3, None, attrs={"padding": 2, "stride_h": 2, "stride_w": 2})
    fixed, _ = _fix(model)
    x = np.random.default_rng(3).standard_normal((1, 4, 4, 2)).astype(np.float32)
    np.testing.assert_allclose(_run(fixed, x), _expected(x, weights, bias, 2, "VALID", False), atol=ATOL, rtol=0)


def test_output_shape_read_back_through_a_unary_op():
    """tf2onnx's selfie model: the custom op's output feeds a Sigmoid whose output is the graph output."""
    model, weights, bias = _model(6, 6, 3, 1, 2, (12, 12), sigmoid=True)
    model.graph.output[0].type.tensor_type.shape.CopyFrom(
        helper.make_tensor_type_proto(TensorProto.FLOAT, [1, 12, 12, 1]).tensor_type.shape
    )
    fixed, count = _fix(model)
    assert count == 1
    x = np.random.default_rng(4).standard_normal((1, 6, 6, 3)).astype(np.float32)
    np.testing.assert_allclose(_run(fixed, x), _expected(x, weights, bias, 2, "SAME", True), atol=ATOL, rtol=0)


def test_missing_output_shape_raises_naming_the_node():
    model, _, _ = _model(5, 5, 2, 2, 3, None)
    graph = gs.import_onnx(model)
    with pytest.raises(ValueError, match=r"deconv_node.*shape"):
        convolution_2d_transpose_bias(graph)
    assert any(node.op == "TFL_Convolution2DTransposeBias" for node in graph.nodes)  # unchanged


def test_missing_input_shape_raises():
    model, _, _ = _model(5, 5, 2, 2, 3, (10, 10), declare_input_shape=False)
    with pytest.raises(ValueError, match="deconv_node"):
        convolution_2d_transpose_bias(gs.import_onnx(model))


def test_output_shape_that_fits_neither_padding_raises():
    model, _, _ = _model(5, 5, 2, 2, 3, (12, 12))
    with pytest.raises(ValueError, match="fits neither SAME"):
        convolution_2d_transpose_bias(gs.import_onnx(model))


def test_attributes_that_contradict_the_shapes_raise():
    model, _, _ = _model(5, 5, 2, 2, 3, (10, 10), attrs={"padding": "VALID", "stride_h": 2, "stride_w": 2})
    with pytest.raises(ValueError, match="attributes"):
        convolution_2d_transpose_bias(gs.import_onnx(model))


def test_derivation_kernel_equal_to_stride_is_one_rewrite():
    configs = derive_config([128, 128], [256, 256], [2, 2])
    assert len(configs) == 1
    assert (configs[0].stride_h, configs[0].stride_w, configs[0].pads) == (2, 2, (0, 0, 0, 0))


def test_check_against_tflite():
    model, _, _ = _model(5, 6, 2, 2, 3, (10, 12))
    graph = gs.import_onnx(model)
    assert check_against_tflite(graph, [TransposeConvParams("y", "SAME", 2, 2)]) == []
    problems = check_against_tflite(graph, [TransposeConvParams("y", "VALID", 3, 2)])
    assert any("strides" in problem for problem in problems)
    assert any("padding" in problem for problem in problems)
    assert check_against_tflite(graph, []) != []


def test_custom_options_bytes():
    assert parse_transpose_conv_options(bytes.fromhex("010000000200000002000000")) == ("SAME", 2, 2)
    assert parse_transpose_conv_options(bytes.fromhex("020000000300000001000000")) == ("VALID", 1, 3)


def test_reference_matches_a_direct_scatter():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((1, 3, 2, 2))
    weights = rng.standard_normal((2, 3, 3, 2))
    bias = rng.standard_normal(2)
    stride, pad = 2, (3 - 2) // 2
    expected = np.zeros((1, 6, 4, 2)) + bias
    for y in range(3):
        for x_ in range(2):
            for fy in range(3):
                for fx in range(3):
                    oy, ox = y * stride - pad + fy, x_ * stride - pad + fx
                    if 0 <= oy < 6 and 0 <= ox < 4:
                        expected[0, oy, ox] += weights[:, fy, fx, :] @ x[0, y, x_]
    np.testing.assert_allclose(transpose_conv_bias(x, weights, bias, 2, 2, "SAME"), expected, atol=1e-12)


@pytest.mark.parametrize(("name", "height", "width", "kernel", "stride", "padding", "out_hw"), CASES[:3])
def test_unfixed_graph_on_the_pyop_matches_the_rewrite(name, height, width, kernel, stride, padding, out_hw):
    pytest.importorskip("onnxruntime_extensions")
    model, _, _ = _model(height, width, 3, 2, kernel, out_hw, sigmoid=True)
    x = np.random.default_rng(6).standard_normal((1, height, width, 3)).astype(np.float32)
    params = [TransposeConvParams("deconv", padding, stride, stride)]  # type: ignore[arg-type]
    (with_params,) = run_unfixed_with_reference(model, {"x": x}, params)
    (derived,) = run_unfixed_with_reference(model, {"x": x})
    fixed, _ = _fix(model)
    np.testing.assert_allclose(_run(fixed, x), with_params, atol=ATOL, rtol=0)
    np.testing.assert_array_equal(with_params, derived)
