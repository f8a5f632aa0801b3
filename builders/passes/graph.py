"""What every graph pass shares: the pass shape, its error, and small onnx-graphsurgeon helpers.

A pass (:data:`GraphPass`) takes a ``gs.Graph``, rewrites it in place and returns how many
rewrites it made (0 = nothing to do). Passes never change what the model computes:
:mod:`builders.fix_onnx` runs the model on onnxruntime before and after every pass that
rewrote something and fails when the outputs differ. Passes are registered by name in
:mod:`builders.passes.registry`.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx
import onnx_graphsurgeon as gs

GraphPass = Callable[[gs.Graph], int]

STANDARD_DOMAINS = ("", "ai.onnx")
BATCH_DIM = "batch"


class PassError(ValueError):
    """A pass was asked to do something the model does not allow (e.g. names or dims that contradict it)."""


def onnx_type(dtype: object) -> int | None:
    """A gs tensor dtype (numpy dtype, ONNX enum or None) as an ONNX ``TensorProto`` enum."""
    if dtype is None:
        return None
    if isinstance(dtype, int):
        return dtype
    try:
        return int(onnx.helper.np_dtype_to_tensor_dtype(np.dtype(dtype)))  # type: ignore[call-overload]
    except (TypeError, KeyError, ValueError):
        return None


def constant_values(tensor: gs.Tensor | None) -> np.ndarray | None:
    """The values of a constant (initializer or ``Constant`` node output); None if computed at run time."""
    if tensor is None:
        return None
    if isinstance(tensor, gs.Constant):
        return np.asarray(tensor.values)
    if len(tensor.inputs) == 1 and tensor.inputs[0].op == "Constant":
        value = tensor.inputs[0].attrs.get("value")
        if isinstance(value, gs.Constant):
            return np.asarray(value.values)
    return None


def is_absent(tensor: gs.Tensor | None) -> bool:
    """An optional input left out (``""`` in ONNX)."""
    return tensor is None or (isinstance(tensor, gs.Variable) and tensor.name == "")


def known_dim(dim: object) -> int | str | None:
    """A dim as an int, a symbolic name, or None when unknown."""
    if isinstance(dim, (int, np.integer)):
        return int(dim) if dim >= 0 else None
    if isinstance(dim, str) and dim and not dim.startswith("unk__"):
        return dim
    return None


def graph_opset(graph: gs.Graph) -> int:
    return int(graph.opset) if graph.opset is not None else 1


class Names:
    """Fresh tensor/node names that do not collide with the graph's."""

    def __init__(self, graph: gs.Graph) -> None:
        self._used = set(graph.tensors().keys()) | {node.name for node in graph.nodes if node.name}

    def __call__(self, base: str) -> str:
        name, index = base, 0
        while name in self._used:
            index += 1
            name = f"{base}_{index}"
        self._used.add(name)
        return name


def bypass(graph: gs.Graph, node: gs.Node) -> bool:
    """Remove a node whose first output equals its first input; False if it cannot be removed.

    Consumers of the output read the input instead. When the output is a
    graph output, the producer of the input writes the output tensor directly
    (the graph keeps its output name); that needs the input to be produced by
    a node and not to be a graph input or output itself.
    """
    source, result = node.inputs[0], node.outputs[0]
    if result in graph.outputs:
        if source in graph.inputs or source in graph.outputs or len(source.inputs) != 1:
            return False
        for consumer in list(source.outputs):
            if consumer is node:
                continue
            for index, tensor in enumerate(consumer.inputs):
                if tensor is source:
                    consumer.inputs[index] = result
        producer = source.inputs[0]
        node.outputs.clear()
        producer.outputs[producer.outputs.index(source)] = result
    else:
        for consumer in list(result.outputs):
            for index, tensor in enumerate(consumer.inputs):
                if tensor is result:
                    consumer.inputs[index] = source
        node.outputs.clear()
    node.inputs.clear()
    return True
