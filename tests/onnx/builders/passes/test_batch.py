"""Batch passes (``builders/passes/batch.py``) on tiny graphs, through ``fix`` (onnxruntime before/after):
batch_reshape_placeholder, stable_io_names, batch_dimension."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

from builders import BuildError, batch_profile, fix_onnx, trt_compat
from tests.support.onnx_graphs import assert_same_outputs, const, fix, model, op_types, relu_model, rng_array, value


def flatten_model(other_input: bool = False) -> onnx.ModelProto:
    """``x.view(x.size(0), -1)`` as the legacy exporter writes it (or with the size of another input)."""
    source = "other" if other_input else "x"
    nodes = [
        helper.make_node("Shape", [source], ["shape"]),
        helper.make_node("Gather", ["shape", "zero"], ["n"], axis=0),
        helper.make_node("Unsqueeze", ["n", "axes"], ["n1"]),
        helper.make_node("Concat", ["n1", "minus_one"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["y"]),
    ]
    inputs = [value("x", ["batch", 4, 2, 2])] + ([value("other", ["m", 3])] if other_input else [])
    initializers = [const("zero", 0, np.int64), const("axes", [0], np.int64), const("minus_one", [-1], np.int64)]
    return model(nodes, inputs, [value("y", ["batch", 16])], initializers)


def test_batch_reshape_placeholder_replaces_the_shape_subgraph() -> None:
    before = flatten_model()
    result = fix(before, ["batch_reshape_placeholder"])

    assert op_types(result.model) == ["Reshape"]
    target = onnx.numpy_helper.to_array(result.model.graph.initializer[0])
    assert target.tolist() == [0, -1]
    assert_same_outputs(before, result.model, rng_array(3, 4, 2, 2))


def test_batch_reshape_placeholder_needs_the_same_dim() -> None:
    result = fix(flatten_model(other_input=True), ["batch_reshape_placeholder"], fix_onnx.FixOptions(input_dims=((4, 2, 2), (3,))))
    assert result.passes[0].rewrites == 0
    assert "Shape" in op_types(result.model)


def test_stable_io_names_renames_to_the_config() -> None:
    before = relu_model(["n", 3, 4, 4], intermediate="logits")  # a tensor already called "logits"
    options = fix_onnx.FixOptions(input_names=("images",), output_names=("logits",))

    result = fix(before, ["stable_io_names"], options)

    assert [v.name for v in result.model.graph.input] == ["images"]
    assert [v.name for v in result.model.graph.output] == ["logits"]
    assert result.passes[0].rewrites == 2
    assert_same_outputs(before, result.model, rng_array(2, 3, 4, 4))


def test_stable_io_names_refuses_a_model_with_other_io() -> None:
    options = fix_onnx.FixOptions(input_names=("images", "mask"), output_names=("logits",))
    with pytest.raises(BuildError, match="has 1 inputs, the core config 2"):
        fix(relu_model(["n", 3]), ["stable_io_names"], options)


def test_batch_dimension_makes_the_batch_symbolic_and_records_the_range() -> None:
    before = relu_model([1, 3, "h", "w"])
    options = fix_onnx.FixOptions(input_dims=((3, 4, 4),), output_dims=((3, 4, 4),), max_batch=8, opt_batch=4)

    result = fix(before, ["batch_dimension"], options)  # compared at batch 2 with per-sample runs of the batch-1 model

    dims = [d.dim_param or d.dim_value for d in result.model.graph.input[0].type.tensor_type.shape.dim]
    assert dims == ["batch", 3, 4, 4]
    out_dims = [d.dim_param or d.dim_value for d in result.model.graph.output[0].type.tensor_type.shape.dim]
    assert out_dims == ["batch", 3, 4, 4]
    profile = batch_profile.read_profile(result.model)
    assert (profile.min, profile.opt, profile.max) == (1, 4, 8)
    assert profile.inputs["x"] == {"min": [1, 3, 4, 4], "opt": [4, 3, 4, 4], "max": [8, 3, 4, 4]}
    assert result.passes[0].max_abs_diff == 0.0
    assert not trt_compat.check_model(result.model).findings


def test_batch_dimension_refuses_dims_that_contradict_the_config() -> None:
    options = fix_onnx.FixOptions(input_dims=((3, 4, 4),), output_dims=((3, 4, 4),), max_batch=8)
    with pytest.raises(BuildError, match="dim 2 is 5, the config says 4"):
        fix(relu_model(["n", 3, 5, 4]), ["batch_dimension"], options)
