"""builders.normalization: the preprocessing's normalization folded into a core that takes uint8 pixels."""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from builders import CheckFailed, normalization
from tests.support.onnx_graphs import const, model, value
from vision_serving import preprocessing

SPEC = preprocessing.PreprocessSpec(
    height=8, width=6, resize_shorter_side=8, interpolation="bilinear", mean=(123.675, 116.28, 103.53), std=(58.395, 57.12, 57.375),
    pixel_dtype="uint8",
)  # fmt: skip


def conv_model(layout: str, batch: int | str = "n") -> onnx.ModelProto:
    """A float image [N, 3, 8, 6] (NCHW) or [N, 8, 6, 3] (NHWC) -> Conv 3->4: a core whose input is normalized floats."""
    nodes = []
    source = "images"
    if layout == "NHWC":
        nodes.append(helper.make_node("Transpose", ["images"], ["nchw"], perm=[0, 3, 1, 2]))
        source = "nchw"
    nodes.append(helper.make_node("Conv", [source, "w"], ["features"], pads=[1, 1, 1, 1]))
    shape = [batch, 3, 8, 6] if layout == "NCHW" else [batch, 8, 6, 3]
    weights = np.random.default_rng(0).normal(size=(4, 3, 3, 3)).astype(np.float32)
    return model(nodes, [value("images", shape)], [value("features", [batch, 4, 8, 6])], [const("w", weights)])


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_the_folded_core_on_uint8_equals_the_float_core_on_the_preprocessings_floats(layout):
    spec = dataclasses.replace(SPEC, layout=layout, scale=1 / 255 if layout == "NHWC" else 1.0)
    float_model = conv_model(layout)
    pixel_normalization = preprocessing.PixelNormalization.of_spec(spec)
    assert normalization.needed(float_model, pixel_normalization) and not normalization.needed(float_model, None)
    folded = normalization.fold(float_model, pixel_normalization)
    assert folded.graph.input[0].type.tensor_type.elem_type == TensorProto.UINT8
    assert [node.op_type for node in folded.graph.node[:3]] == ["Cast", "Sub", "Div"]
    assert not normalization.needed(folded, pixel_normalization)  # folded once
    pixels = np.random.default_rng(1).integers(0, 256, (3, *spec.output_shape)).astype(np.uint8)
    assert normalization.check_fold(float_model, folded, pixels, pixel_normalization, log=lambda _: None) == 0.0  # the same float32 ops
    np.testing.assert_array_equal(pixel_normalization.apply(pixels), preprocessing.normalize_pixels(pixels, spec))


def test_a_fold_with_other_constants_is_refused():
    float_model = conv_model("NCHW")
    wrong = normalization.fold(float_model, preprocessing.PixelNormalization.of_spec(dataclasses.replace(SPEC, std=(1.0, 1.0, 1.0))))
    pixels = np.random.default_rng(2).integers(0, 256, (2, *SPEC.output_shape)).astype(np.uint8)
    with pytest.raises(CheckFailed, match="the graph's normalization differs from the preprocessing's"):
        normalization.check_fold(float_model, wrong, pixels, preprocessing.PixelNormalization.of_spec(SPEC), log=lambda _: None)


def test_a_core_exported_with_batch_1_is_checked_one_photo_at_a_time():
    float_model = conv_model("NCHW", batch=1)
    pixel_normalization = preprocessing.PixelNormalization.of_spec(SPEC)
    folded = normalization.fold(float_model, pixel_normalization)
    pixels = np.random.default_rng(3).integers(0, 256, (4, *SPEC.output_shape)).astype(np.uint8)
    assert normalization.check_fold(float_model, folded, pixels, pixel_normalization, log=lambda _: None) == 0.0
