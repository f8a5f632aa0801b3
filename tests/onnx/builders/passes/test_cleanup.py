"""Cleanup passes (``builders/passes/cleanup.py``) on tiny hand-built graphs, checked with onnxruntime before/after:
fold_constants_and_cleanup, fuse_pad_into_conv, remove_noops, reduce_mean_to_global_average_pool."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_graphsurgeon as gs
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

from builders.passes import cleanup, registry
from tests.support.onnx_graphs import (
    assert_same_outputs,
    attribute,
    const,
    fix,
    model,
    op_types,
    rng_array,
    tf_same_constant_chain_model,
    value,
)

SHAPE = [2, 8, 5, 7]


def reduced_shape(axes: list[int], keepdims: int, unknown_axes: bool) -> list[int | str]:
    """ReduceMean's output shape for an input of ``["n", *SHAPE[1:]]``."""
    shape: list[int | str] = ["n", *SHAPE[1:]]
    if unknown_axes:  # only used with keepdims=1: the rank is kept, the dims are unknown
        return [f"d{i}" for i in range(len(shape))]
    reduced = {axis % len(shape) for axis in axes}
    if keepdims:
        return [1 if i in reduced else dim for i, dim in enumerate(shape)]
    return [dim for i, dim in enumerate(shape) if i not in reduced]


def reduce_mean_model(opset: int, axes: list[int], keepdims: int = 1, axes_as_graph_input: bool = False) -> onnx.ModelProto:
    """x -> ReduceMean -> y, with axes as an attribute (opset < 18) or an input (opset >= 18)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", *SHAPE[1:]])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, reduced_shape(axes, keepdims, axes_as_graph_input))
    inputs, initializers = [x], []
    if opset < 18:
        node = helper.make_node("ReduceMean", ["x"], ["y"], axes=axes, keepdims=keepdims)
    else:
        node = helper.make_node("ReduceMean", ["x", "axes"], ["y"], keepdims=keepdims)
        if axes_as_graph_input:
            inputs.append(helper.make_tensor_value_info("axes", TensorProto.INT64, [len(axes)]))
        else:
            initializers.append(numpy_helper.from_array(np.array(axes, dtype=np.int64), "axes"))
    graph = helper.make_graph([node], "reduce_mean", inputs, [y], initializer=initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


def run_named(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> np.ndarray:
    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)[0]


@pytest.mark.parametrize(
    "opset, axes",
    [
        (17, [2, 3]),  # axes attribute
        (18, [2, 3]),  # axes input (constant initializer)
        (18, [-1, -2]),  # what torch's dynamo exporter emits for AdaptiveAvgPool2d(1)
    ],
)
def test_reduce_mean_becomes_global_average_pool(opset: int, axes: list[int]) -> None:
    model = reduce_mean_model(opset, axes)
    x = np.random.default_rng(0).standard_normal(SHAPE).astype(np.float32)
    before = run_named(model, {"x": x})

    rewritten, counts = registry.apply_passes(model, ["reduce_mean_to_global_average_pool"])

    onnx.checker.check_model(rewritten, full_check=True)
    assert counts == {"reduce_mean_to_global_average_pool": 1}
    assert op_types(rewritten) == ["GlobalAveragePool"]
    assert not [init.name for init in rewritten.graph.initializer]  # the axes constant is gone
    after = run_named(rewritten, {"x": x})
    assert after.shape == before.shape == (SHAPE[0], SHAPE[1], 1, 1)
    np.testing.assert_allclose(after, before, rtol=0, atol=1e-6)


@pytest.mark.parametrize(
    "opset, axes, keepdims, axes_as_graph_input",
    [
        (17, [2, 3], 0, False),  # keepdims=0: output rank differs from GlobalAveragePool's
        (17, [1, 2], 1, False),  # not the spatial axes
        (18, [3], 1, False),  # only one spatial axis
        (18, [2, 3], 1, True),  # axes only known at run time
    ],
)
def test_reduce_mean_left_alone_when_not_spatial(opset: int, axes: list[int], keepdims: int, axes_as_graph_input: bool) -> None:
    model = reduce_mean_model(opset, axes, keepdims, axes_as_graph_input)
    rewritten, counts = registry.apply_passes(model, ["reduce_mean_to_global_average_pool"])
    assert counts == {"reduce_mean_to_global_average_pool": 0}
    assert op_types(rewritten) == ["ReduceMean"]


def test_fold_constants_and_cleanup() -> None:
    # y = x * (a + b), plus a dangling Neg whose output nothing reads.
    a = numpy_helper.from_array(np.full([1], 2.0, dtype=np.float32), "a")
    b = numpy_helper.from_array(np.full([1], 3.0, dtype=np.float32), "b")
    nodes = [
        helper.make_node("Add", ["a", "b"], ["c"]),
        helper.make_node("Mul", ["x", "c"], ["y"]),
        helper.make_node("Neg", ["x"], ["unused"]),
    ]
    graph = helper.make_graph(
        nodes,
        "fold",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])],
        initializer=[a, b],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    x = np.array([1.0, -2.0, 0.5], dtype=np.float32)

    folded, counts = registry.apply_passes(model, ["fold_constants_and_cleanup"])

    assert op_types(folded) == ["Mul"]
    assert counts == {"fold_constants_and_cleanup": 2}
    np.testing.assert_array_equal(run_named(folded, {"x": x}), run_named(model, {"x": x}))


# --------------------------------------------------------------------------- TF-"SAME" padding, no-ops (through fix)


def tf_same_shape_model() -> onnx.ModelProto:
    """TF-"SAME" pads computed from Shape(x) at run time: foldable, since only the batch dim is dynamic.

    For H = W = 7, stride 2, kernel 3: total = (ceil(7/2) - 1) * 2 + 3 - 7 = 2, i.e. 1 before and 1 after.
    """
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Gather", ["shape", "two"], ["height"], axis=0),
        helper.make_node("Sub", ["nine", "height"], ["total"]),
        helper.make_node("Div", ["total", "two"], ["before"]),
        helper.make_node("Sub", ["total", "before"], ["after"]),
        helper.make_node("Unsqueeze", ["before", "axes"], ["before1"]),
        helper.make_node("Unsqueeze", ["after", "axes"], ["after1"]),
        helper.make_node("Concat", ["two_zeros", "before1", "before1", "two_zeros", "after1", "after1"], ["pads"], axis=0),
        helper.make_node("Pad", ["x", "pads"], ["padded"]),
        helper.make_node("Conv", ["padded", "w"], ["y"], kernel_shape=[3, 3], strides=[2, 2]),
    ]
    initializers = [
        const("two", 2, np.int64),
        const("nine", 9, np.int64),
        const("axes", [0], np.int64),
        const("two_zeros", [0, 0], np.int64),
        const("w", rng_array(2, 3, 3, 3, seed=3)),
    ]
    return model(nodes, [value("x", ["n", 3, 7, 7])], [value("y", ["n", 2, 4, 4])], initializers)


@pytest.mark.parametrize("build, pads", [(tf_same_constant_chain_model, [0, 0, 1, 1]), (tf_same_shape_model, [1, 1, 1, 1])])
def test_fold_then_fuse_turns_tf_same_padding_into_static_conv_pads(build, pads) -> None:
    before = build()
    result = fix(before, ["fold_constants_and_cleanup", "fuse_pad_into_conv"])

    assert op_types(result.model) == ["Conv"]
    conv = result.model.graph.node[0]
    assert attribute(conv, "pads") == pads
    assert [p.rewrites > 0 for p in result.passes] == [True, True]
    assert all(p.max_abs_diff is not None and p.max_abs_diff <= 1e-5 for p in result.passes)
    x = rng_array(2, *[d.dim_value for d in before.graph.input[0].type.tensor_type.shape.dim[1:]])
    assert_same_outputs(before, result.model, x)


@pytest.mark.parametrize(
    "pad_attrs, pad_value, second_consumer",
    [
        ({"mode": "constant"}, 1.0, False),  # padding with 1, not 0
        ({"mode": "reflect"}, 0.0, False),  # not zero padding
        ({"mode": "constant"}, 0.0, True),  # the padded tensor also feeds a Relu
    ],
)
def test_fuse_pad_into_conv_leaves_other_pads(pad_attrs, pad_value, second_consumer) -> None:
    nodes = [
        helper.make_node("Pad", ["x", "pads", "value"], ["padded"], **pad_attrs),
        helper.make_node("Conv", ["padded", "w"], ["y"], kernel_shape=[3, 3]),
    ]
    outputs = [value("y", None)]
    if second_consumer:
        nodes.append(helper.make_node("Relu", ["padded"], ["z"]))
        outputs.append(value("z", None))
    initializers = [
        const("pads", [0, 0, 1, 1, 0, 0, 1, 1], np.int64),
        const("value", pad_value, np.float32),
        const("w", rng_array(2, 3, 3, 3)),
    ]
    before = model(nodes, [value("x", [1, 3, 6, 6])], outputs, initializers)

    result = fix(before, ["fuse_pad_into_conv"])

    assert result.passes[0].rewrites == 0
    assert "Pad" in op_types(result.model)


def test_fuse_pad_into_conv_adds_to_existing_conv_pads_and_skips_channel_padding() -> None:
    initializers = [const("w", rng_array(2, 3, 3, 3))]
    spatial = model(
        [
            helper.make_node("Pad", ["x", "pads"], ["padded"]),
            helper.make_node("Conv", ["padded", "w"], ["y"], kernel_shape=[3, 3], pads=[1, 0, 0, 1]),
        ],
        [value("x", [1, 3, 6, 6])],
        [value("y", None)],
        [*initializers, const("pads", [0, 0, 2, 1, 0, 0, 0, 3], np.int64)],
    )
    fused = fix(spatial, ["fuse_pad_into_conv"]).model
    conv = fused.graph.node[0]
    assert op_types(fused) == ["Conv"]
    assert attribute(conv, "pads") == [3, 1, 0, 4]

    channel = model(
        [helper.make_node("Pad", ["x", "pads"], ["padded"]), helper.make_node("Relu", ["padded"], ["y"])],
        [value("x", [1, 3, 6, 6])],
        [value("y", None)],
        [const("pads", [0, 1, 0, 0, 0, 0, 0, 0], np.int64)],
    )
    assert fix(channel, ["fuse_pad_into_conv"]).passes[0].rewrites == 0


def test_remove_noops_removes_every_kind() -> None:
    nodes = [
        helper.make_node("Identity", ["x"], ["a"]),
        helper.make_node("Dropout", ["a", "ratio"], ["b"]),
        helper.make_node("Cast", ["b"], ["c"], to=TensorProto.FLOAT),
        helper.make_node("Reshape", ["c", "same_shape"], ["d"]),
        helper.make_node("Pad", ["d", "zero_pads"], ["e"]),
        helper.make_node("Transpose", ["e"], ["f"], perm=[0, 1, 2]),
        helper.make_node("Concat", ["f"], ["g"], axis=0),
        helper.make_node("Relu", ["g"], ["h"]),
        helper.make_node("Identity", ["h"], ["y"]),  # a no-op that writes the graph output
    ]
    initializers = [const("ratio", 0.5, np.float32), const("same_shape", [0, 3, 5], np.int64), const("zero_pads", [0] * 6, np.int64)]
    before = model(nodes, [value("x", ["n", 3, 5])], [value("y", ["n", 3, 5])], initializers)

    result = fix(before, ["remove_noops"])

    assert op_types(result.model) == ["Relu"]
    assert result.passes[0].rewrites == 8
    assert result.model.graph.output[0].name == "y"  # the output keeps its name
    assert_same_outputs(before, result.model, rng_array(2, 3, 5))


@pytest.mark.parametrize(
    "node, initializers",
    [
        (helper.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT16), []),  # changes the type
        (helper.make_node("Reshape", ["x", "s"], ["y"]), [const("s", [0, 15], np.int64)]),  # changes the shape
        (helper.make_node("Pad", ["x", "p"], ["y"]), [const("p", [0, 0, 1, 0, 0, 0], np.int64)]),  # pads something
        (helper.make_node("Transpose", ["x"], ["y"], perm=[0, 2, 1]), []),
        (helper.make_node("Dropout", ["x", "r", "t"], ["y"]), [const("r", 0.0, np.float32), const("t", True, np.bool_)]),
    ],
)
def test_remove_noops_keeps_nodes_that_compute(node, initializers) -> None:
    before = model(
        [node],
        [value("x", ["n", 3, 5])],
        [value("y", None, TensorProto.FLOAT16 if node.op_type == "Cast" else TensorProto.FLOAT)],
        initializers,
    )
    graph = gs.import_onnx(onnx.shape_inference.infer_shapes(before))
    assert cleanup.noop_reason(graph.nodes[0], graph) is None
    assert cleanup.remove_noops(graph) == 0


def test_remove_noops_keeps_an_identity_from_input_to_output() -> None:
    before = model([helper.make_node("Identity", ["x"], ["y"])], [value("x", [2])], [value("y", [2])])
    result = fix(before, ["remove_noops"])
    assert op_types(result.model) == ["Identity"]


def test_fix_keeps_qdq_pairs() -> None:
    """Folding must not fold DequantizeLinear(int8 weights) back into float weights."""
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "zp"], ["xq"]),
        helper.make_node("DequantizeLinear", ["xq", "s", "zp"], ["xd"]),
        helper.make_node("DequantizeLinear", ["wq", "ws", "wzp"], ["w"], axis=0),
        helper.make_node("Conv", ["xd", "w"], ["y"], kernel_shape=[1, 1]),
    ]
    initializers = [
        const("s", 0.05, np.float32),
        const("zp", 0, np.int8),
        const("wq", np.arange(-6, 6, dtype=np.int8).reshape(4, 3, 1, 1)),
        const("ws", [0.1, 0.2, 0.3, 0.4], np.float32),
        const("wzp", [0, 0, 0, 0], np.int8),
    ]
    before = model(nodes, [value("x", [1, 3, 4, 4])], [value("y", None)], initializers, opset=19, ir_version=9)
    result = fix(before, ["fold_constants_and_cleanup", "remove_noops", "fuse_pad_into_conv"])
    assert sorted(op_types(result.model)) == sorted(op_types(before))


def nonzero_model(readers: int) -> onnx.ModelProto:
    """x -> Greater(x, 0) -> BOOL mask, read by ``readers`` NonZero nodes (Ultralytics' nms=True exports share one mask)."""
    nodes = [helper.make_node("Greater", ["x", "zero"], ["mask"])]
    nodes += [helper.make_node("NonZero", ["mask"], [f"indices_{i}"], name=f"nonzero_{i}") for i in range(readers)]
    outputs = [value(f"indices_{i}", [1, None], TensorProto.INT64) for i in range(readers)]
    return model(nodes, [value("x", [6])], outputs, [const("zero", 0.0, np.float32)])


@pytest.mark.parametrize("readers", [1, 4])
def test_cast_nonzero_input_gives_each_bool_mask_one_float_copy(readers):
    before = nonzero_model(readers)
    result = fix(before, ["cast_nonzero_input"])
    after = result.model
    assert result.passes[0].rewrites == readers
    assert op_types(after).count("Where") == 1 and op_types(after).count("NonZero") == readers
    assert all(node.input[0] == "mask_as_float" for node in after.graph.node if node.op_type == "NonZero")
    feed = np.array([0.5, -1.0, 0.0, 2.0, -0.1, 3.0], np.float32)
    assert_same_outputs(before, after, feed, atol=0)


@pytest.mark.parametrize("bounds", [("low", "high"), ("low", ""), ("", "high"), ()])
def test_integer_clip_becomes_max_then_min(bounds):
    """Ultralytics' nms=True, dynamic=True, batch=B exports clamp an INT64 count with Clip (TensorRT's parser takes it as is)."""
    nodes = [helper.make_node("Clip", ["x", *bounds], ["y"], name="clamp")]
    initializers = [const("low", 0, np.int64), const("high", 4, np.int64)]
    before = model(nodes, [value("x", [5], TensorProto.INT64)], [value("y", [5], TensorProto.INT64)], initializers)
    result = fix(before, ["integer_clip_to_min_max"])
    assert result.passes[0].rewrites == 1
    assert "Clip" not in op_types(result.model)
    expected = [op for op, bound in (("Max", "low"), ("Min", "high")) if bound in bounds] or ["Identity"]
    assert op_types(result.model) == expected
    assert_same_outputs(before, result.model, np.array([-3, 0, 2, 4, 9], np.int64), atol=0)


def test_float_clip_is_left_to_tensorrt():
    built = model([helper.make_node("Clip", ["x", "low", "high"], ["y"])], [value("x", [3])], [value("y", [3])],
                  [const("low", 0.0, np.float32), const("high", 1.0, np.float32)])  # fmt: skip
    assert fix(built, ["integer_clip_to_min_max"]).passes[0].rewrites == 0


def test_check_reports_neither_type_the_parser_takes_and_the_rewrites_stay_optional():
    """TensorRT's ONNX parser takes NonZero on BOOL and Clip on INT64 (onnx-tensorrt's importers): check finds nothing,
    fix's defaults leave them, and the two optional passes still rewrite them to the same values."""
    from builders import trt_compat
    from builders.passes import registry

    built = model(
        [helper.make_node("Clip", ["count", "low"], ["clamped"]), helper.make_node("NonZero", ["mask"], ["indices"])],
        [value("count", [1], TensorProto.INT64), value("mask", [4], TensorProto.BOOL)],
        [value("clamped", [1], TensorProto.INT64), value("indices", [1, None], TensorProto.INT64)],
        [const("low", 0, np.int64)],
    )
    assert not [finding for finding in trt_compat.check_model(built).findings if finding.code == "unsupported-dtype"]
    assert not {"cast_nonzero_input", "integer_clip_to_min_max"} & set(registry.DEFAULT_PASSES)
    fixed = fix(built, list(registry.OPTIONAL_PASSES)).model
    assert "Clip" not in op_types(fixed) and "Where" in op_types(fixed)
