"""Tiny ONNX graphs for the check/fix tests, built with ``onnx.helper``, and the ``fix`` harness they run through."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from builders import fix_onnx

FLOAT = TensorProto.FLOAT
INT64 = TensorProto.INT64
QUIET = fix_onnx.FixOptions()


def value(name: str, shape: Sequence[int | str | None] | None, elem_type: int = FLOAT) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem_type, shape)


def const(name: str, array: object, dtype: object = None) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(array, dtype=dtype), name)


def model(
    nodes: Sequence[onnx.NodeProto],
    inputs: Sequence[onnx.ValueInfoProto],
    outputs: Sequence[onnx.ValueInfoProto],
    initializers: Sequence[onnx.TensorProto] = (),
    opset: int = 17,
    domains: Sequence[str] = (),
    ir_version: int = 8,
) -> onnx.ModelProto:
    graph = helper.make_graph(list(nodes), "test", list(inputs), list(outputs), initializer=list(initializers))
    imports = [helper.make_opsetid("", opset)] + [helper.make_opsetid(domain, 1) for domain in domains]
    built = helper.make_model(graph, opset_imports=imports)
    built.ir_version = ir_version
    return built


def run(built: onnx.ModelProto, *feeds: np.ndarray) -> list[np.ndarray]:
    """onnxruntime (CPU, optimizations off), positional feeds."""
    return fix_onnx.run_session(fix_onnx.open_session(built), list(feeds))


def op_types(built: onnx.ModelProto) -> list[str]:
    return [node.op_type for node in built.graph.node]


def rng_array(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def attribute(node: onnx.NodeProto, name: str) -> object:
    found = [a for a in node.attribute if a.name == name]
    assert found, f"{node.op_type} has no attribute {name}"
    value = helper.get_attribute_value(found[0])
    return (
        list(value) if isinstance(value, (list, tuple)) or (hasattr(value, "__iter__") and not isinstance(value, (str, bytes))) else value
    )


def assert_same_outputs(before: onnx.ModelProto, after: onnx.ModelProto, *feeds: np.ndarray, atol: float = 1e-5) -> None:
    """An independent before/after comparison on onnxruntime."""
    expected, actual = run(before, *feeds), run(after, *feeds)
    assert len(expected) == len(actual)
    for want, got in zip(expected, actual):
        assert want.shape == got.shape
        np.testing.assert_allclose(got, want, rtol=0, atol=atol)


def tf_same_constant_chain_model() -> onnx.ModelProto:
    """What the legacy exporter emits for F.pad(x, [0, 1, 0, 1]) before a stride-2 3x3 Conv."""
    nodes = [
        helper.make_node("ConstantOfShape", ["four"], ["zeros"], value=helper.make_tensor("v", INT64, [1], [0])),
        helper.make_node("Concat", ["torch_pads", "zeros"], ["cat"], axis=0),
        helper.make_node("Reshape", ["cat", "pairs"], ["pairs2"]),
        helper.make_node("Slice", ["pairs2", "start", "end", "axis0", "step"], ["reversed"]),
        helper.make_node("Transpose", ["reversed"], ["transposed"], perm=[1, 0]),
        helper.make_node("Reshape", ["transposed", "flat"], ["onnx_pads"]),
        helper.make_node("Cast", ["onnx_pads"], ["pads"], to=INT64),
        helper.make_node("Pad", ["x", "pads", "zero"], ["padded"], mode="constant"),
        helper.make_node("Conv", ["padded", "w", "b"], ["y"], kernel_shape=[3, 3], strides=[2, 2], pads=[0, 0, 0, 0]),
    ]
    initializers = [
        const("four", [4], np.int64),
        const("torch_pads", [0, 1, 0, 1], np.int64),
        const("pairs", [-1, 2], np.int64),
        const("start", [-1], np.int64),
        const("end", [-(2**62)], np.int64),
        const("axis0", [0], np.int64),
        const("step", [-1], np.int64),
        const("flat", [-1], np.int64),
        const("zero", 0.0, np.float32),
        const("w", rng_array(4, 3, 3, 3, seed=1)),
        const("b", rng_array(4, seed=2)),
    ]
    return model(nodes, [value("x", ["n", 3, 8, 8])], [value("y", ["n", 4, 4, 4])], initializers)


def relu_model(shape: list[int | str], output_name: str = "y", intermediate: str = "t") -> onnx.ModelProto:
    nodes = [helper.make_node("Relu", ["x"], [intermediate]), helper.make_node("Neg", [intermediate], [output_name])]
    return model(nodes, [value("x", shape)], [value(output_name, shape)])


def fix(built: onnx.ModelProto, names: list[str], options: fix_onnx.FixOptions = QUIET) -> fix_onnx.FixResult:
    """``fix_model`` (which itself compares onnxruntime before/after each rewriting pass)."""
    return fix_onnx.fix_model(built, names, options, log=lambda _: None)
