"""Named groups of a graph's layers that the INT8 quantization may keep in high precision (a recipe's
``[quantize] exclude``), resolved to the node names of a graph."""

from __future__ import annotations

from typing import Any

from builders import qdq_rules

# Named groups of layers that can be kept in high precision (resolved to node names on the graph):
# stem: the Conv reading the image; early: the first EARLY_CONVS Convs in graph order (for
# EfficientNet-Lite0 the stem and MBConv blocks 0-1: the 112x112 stage and the first 56x56
# projection); depthwise: grouped Convs with one input channel per group; head: the last Conv;
# classifier: the Gemm/MatMul producing the output.
GROUPS = ("stem", "early", "depthwise", "head", "classifier")
EARLY_CONVS = 6


def of(model: Any) -> dict[str, list[str]]:
    """Node names of each group (:data:`GROUPS`) on this graph."""
    constants = qdq_rules.constants(model)
    graph_inputs = {v.name for v in model.graph.input}
    graph_outputs = {v.name for v in model.graph.output}
    convs = [node for node in model.graph.node if node.op_type == "Conv"]
    groups: dict[str, list[str]] = {name: [] for name in GROUPS}
    # The stem reads the image, directly or through layout and per-channel ops (an NHWC model's Transpose to NCHW;
    # the normalization folded in front of a uint8 input: Cast, Sub, Div).
    producer = {output: node for node in model.graph.node for output in node.output}
    layout_ops = {"Transpose", "Cast", "Reshape", "Identity", "Sub", "Div", "Mul", "Add"}

    def from_input(tensor: str, depth: int = 0) -> bool:
        if tensor in graph_inputs:
            return True
        node = producer.get(tensor)
        return depth < 6 and node is not None and node.op_type in layout_ops and from_input(node.input[0], depth + 1)

    groups["stem"] = [node.name for node in convs if from_input(node.input[0])]
    groups["depthwise"] = [
        node.name
        for node in convs
        if qdq_rules.attribute(node, "group", 1) > 1 and node.input[1] in constants and constants[node.input[1]].shape[1] == 1
    ]
    groups["early"] = [node.name for node in convs[:EARLY_CONVS]]
    groups["head"] = [convs[-1].name] if convs else []
    # Gemm/MatMul whose result reaches a graph output through shape-only or bias ops.
    passthrough = {"Add", "Reshape", "Flatten", "Identity", "Squeeze"}
    consumers: dict[str, list[Any]] = {}
    for node in model.graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)

    def reaches_output(tensor: str, depth: int = 0) -> bool:
        if tensor in graph_outputs:
            return True
        return depth < 4 and any(
            c.op_type in passthrough and any(reaches_output(o, depth + 1) for o in c.output) for c in consumers.get(tensor, [])
        )

    groups["classifier"] = [node.name for node in model.graph.node if node.op_type in ("Gemm", "MatMul") and reaches_output(node.output[0])]
    return groups
