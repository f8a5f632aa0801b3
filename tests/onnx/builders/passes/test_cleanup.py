"""Graph passes on tiny hand-built ONNX graphs, checked with onnxruntime before/after."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

from builders import graph_passes

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


def run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> np.ndarray:
    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)[0]


def op_types(model: onnx.ModelProto) -> list[str]:
    return [node.op_type for node in model.graph.node]


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
    before = run(model, {"x": x})

    rewritten, counts = graph_passes.apply_passes(model, ["reduce_mean_to_global_average_pool"])

    onnx.checker.check_model(rewritten, full_check=True)
    assert counts == {"reduce_mean_to_global_average_pool": 1}
    assert op_types(rewritten) == ["GlobalAveragePool"]
    assert not [init.name for init in rewritten.graph.initializer]  # the axes constant is gone
    after = run(rewritten, {"x": x})
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
    rewritten, counts = graph_passes.apply_passes(model, ["reduce_mean_to_global_average_pool"])
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

    folded, counts = graph_passes.apply_passes(model, ["fold_constants_and_cleanup"])

    assert op_types(folded) == ["Mul"]
    assert counts == {"fold_constants_and_cleanup": 2}
    np.testing.assert_array_equal(run(folded, {"x": x}), run(model, {"x": x}))


def test_registry_names_its_passes() -> None:
    assert graph_passes.PASSES["reduce_mean_to_global_average_pool"] is graph_passes.reduce_mean_to_global_average_pool
    assert graph_passes.PASSES["fold_constants_and_cleanup"] is graph_passes.fold_constants_and_cleanup
    with pytest.raises(KeyError, match="unknown graph pass"):
        graph_passes.apply_passes(reduce_mean_model(17, [2, 3]), ["no_such_pass"])
