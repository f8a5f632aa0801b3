"""``custom_op_rewrites`` (``builders/passes/custom_ops.py``): MediaPipe's Convolution2DTransposeBias against a
numpy reference, unknown ops left alone, and the ``check`` error it clears."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_graphsurgeon as gs
import pytest
from onnx import helper

from builders import trt_compat
from builders.passes import custom_ops
from builders.passes.graph import PassError
from tests.support.onnx_graphs import const, fix, model, op_types, rng_array, run, value


def transpose_conv_bias_reference(x: np.ndarray, w: np.ndarray, bias: np.ndarray, stride: tuple[int, int], padding: str) -> np.ndarray:
    """MediaPipe Convolution2DTransposeBias (TFLite transposed conv, NHWC, OHWI weights) in plain numpy."""
    n, height, width, _ = x.shape
    c_out, k_h, k_w, _ = w.shape
    s_h, s_w = stride
    if padding == "SAME":
        out_h, out_w = height * s_h, width * s_w
    else:
        out_h, out_w = (height - 1) * s_h + k_h, (width - 1) * s_w + k_w
    full = np.zeros((n, (height - 1) * s_h + k_h, (width - 1) * s_w + k_w, c_out), dtype=np.float64)
    for iy in range(height):
        for ix in range(width):
            for ky in range(k_h):
                for kx in range(k_w):
                    full[:, iy * s_h + ky, ix * s_w + kx, :] += x[:, iy, ix, :] @ w[:, ky, kx, :].T
    top = max((height - 1) * s_h + k_h - out_h, 0) // 2
    left = max((width - 1) * s_w + k_w - out_w, 0) // 2
    return (full[:, top : top + out_h, left : left + out_w, :] + bias).astype(np.float32)


def mediapipe_model(kernel: int, stride: int, padding: object) -> tuple[onnx.ModelProto, np.ndarray, np.ndarray]:
    weights = rng_array(3, kernel, kernel, 4, seed=5)
    bias = rng_array(3, seed=6)
    node = helper.make_node(
        "Convolution2DTransposeBias", ["x", "w", "b"], ["y"], domain="mediapipe", padding=padding, stride_h=stride, stride_w=stride
    )
    built = model([node], [value("x", [1, 5, 6, 4])], [value("y", None)], [const("w", weights), const("b", bias)], domains=["mediapipe"])
    return built, weights, bias


@pytest.mark.parametrize(
    "kernel, stride, padding",
    [(4, 2, "SAME"), (3, 2, "SAME"), (3, 1, "SAME"), (2, 2, "VALID"), (3, 2, 1), (3, 2, 2)],  # 1/2: TfLitePadding SAME/VALID
)
def test_convolution_2d_transpose_bias_becomes_conv_transpose(kernel: int, stride: int, padding: object) -> None:
    before, weights, bias = mediapipe_model(kernel, stride, padding)
    x = rng_array(1, 5, 6, 4, seed=7)

    result = fix(before, ["custom_op_rewrites"])

    assert op_types(result.model) == ["Transpose", "ConvTranspose", "Transpose"]
    assert [entry.domain for entry in result.model.opset_import] == [""]
    # onnxruntime cannot run the original alone: it is compared with the op run by its reference
    # implementation (builders/passes/reference_ops.py, onnxruntime-extensions).
    assert result.unverified == []
    (rewrite,) = result.passes
    assert rewrite.name == "custom_op_rewrites" and rewrite.rewrites == 1
    assert rewrite.max_abs_diff is not None and rewrite.max_abs_diff <= 1e-4
    mode = padding if isinstance(padding, str) else ("SAME" if padding == 1 else "VALID")
    expected = transpose_conv_bias_reference(x, weights, bias, (stride, stride), mode)
    actual = run(result.model, x)[0]
    assert actual.shape == expected.shape
    np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-4)


def test_custom_op_rewrites_leaves_unknown_ops_and_refuses_runtime_weights() -> None:
    unknown = model(
        [helper.make_node("FusedConv", ["x"], ["y"], domain="com.microsoft")],
        [value("x", [1, 3, 4, 4])],
        [value("y", None)],
        domains=["com.microsoft"],
    )
    graph = gs.import_onnx(unknown)
    assert custom_ops.custom_op_rewrites(graph) == 0

    runtime_weights = model(
        [helper.make_node("Convolution2DTransposeBias", ["x", "w", "b"], ["y"], domain="mediapipe", padding="SAME")],
        [value("x", [1, 5, 6, 4]), value("w", [3, 2, 2, 4]), value("b", [3])],
        [value("y", None)],
        domains=["mediapipe"],
    )
    # A known custom op it cannot rewrite is an error, not a silent leftover TensorRT would reject.
    with pytest.raises(PassError, match="weights must be a constant OHWI tensor"):
        custom_ops.custom_op_rewrites(gs.import_onnx(runtime_weights))


def test_custom_op_rewrite_clears_the_check_error() -> None:
    before, _, _ = mediapipe_model(4, 2, "SAME")
    assert [f.code for f in trt_compat.check_model(before).findings if f.severity == "error"] == ["custom-domain-op"]
    after = fix(before, ["custom_op_rewrites"]).model
    assert not trt_compat.check_model(after).blocking
