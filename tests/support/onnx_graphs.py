"""Tiny ONNX graphs for the check/fix tests, built with ``onnx.helper``."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from builders import fix_onnx

FLOAT = TensorProto.FLOAT


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
