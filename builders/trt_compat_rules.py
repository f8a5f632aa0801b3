"""``check``'s restrictions of one node: its attributes, its inputs' types and the Q/DQ facts, as TensorRT's ONNX
parser (onnx-tensorrt's importers, :mod:`builders.tensorrt_onnx_ops`) takes them. :mod:`builders.trt_compat` walks
the graph and runs the rule of each node's op (``RULES``), passing itself as the :class:`Reporter`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import numpy as np
import onnx
import onnx_graphsurgeon as gs

from builders import qdq_rules
from builders import tensorrt_onnx_ops as table
from builders.passes import einsum
from builders.passes.graph import constant_values, is_absent, onnx_type


class Reporter(Protocol):
    """What a rule needs of the checker: the graph, and a way to report."""

    graph: gs.Graph

    def add(
        self, severity: str, code: str, message: str, node: gs.Node | None = None, fix: tuple[str, ...] = (), name: str = "", op: str = ""
    ) -> None: ...


TYPE_NAMES: dict[int, str] = {
    onnx.TensorProto.FLOAT: "FP32",
    onnx.TensorProto.FLOAT16: "FP16",
    onnx.TensorProto.BFLOAT16: "BF16",
    onnx.TensorProto.DOUBLE: "DOUBLE",
    onnx.TensorProto.INT8: "INT8",
    onnx.TensorProto.UINT8: "UINT8",
    onnx.TensorProto.INT32: "INT32",
    onnx.TensorProto.INT64: "INT64",
    onnx.TensorProto.BOOL: "BOOL",
    onnx.TensorProto.FLOAT8E4M3FN: "FP8",
    onnx.TensorProto.INT4: "INT4",
}
if hasattr(onnx.TensorProto, "FLOAT4E2M1"):
    TYPE_NAMES[onnx.TensorProto.FLOAT4E2M1] = "FP4"


def type_of(dtype: object) -> str | None:
    onnx_enum = onnx_type(dtype)
    if onnx_enum is None:
        return None
    return TYPE_NAMES.get(onnx_enum, onnx.TensorProto.DataType.Name(onnx_enum))


def attribute(node: gs.Node, name: str, default: Any) -> Any:
    value = node.attrs.get(name, default)
    return value.decode() if isinstance(value, bytes) else value


def constant_source(tensor: gs.Tensor) -> gs.Tensor | None:
    """The constant a tensor is, or that a Q/DQ quantizes (ModelOpt's weight pattern W -> QuantizeLinear -> DequantizeLinear)."""
    if constant_values(tensor) is not None:
        return tensor
    producer = tensor.inputs[0] if len(tensor.inputs) == 1 else None
    if producer is not None and producer.op in qdq_rules.QDQ_OPS and constant_values(producer.inputs[0]) is not None:
        return producer.inputs[0]
    return None


def qdq_facts(node: gs.Node) -> qdq_rules.QdqNode:
    quantize = node.op == "QuantizeLinear"
    data = node.inputs[0] if node.inputs else None
    scale = node.inputs[1] if len(node.inputs) > 1 else None
    zero_point = node.inputs[2] if len(node.inputs) > 2 and not is_absent(node.inputs[2]) else None
    output_dtype = int(node.attrs.get("output_dtype", 0))
    if quantize:
        if zero_point is not None:
            quantized_type = type_of(zero_point.dtype)
        elif output_dtype:
            quantized_type = TYPE_NAMES.get(output_dtype, onnx.TensorProto.DataType.Name(output_dtype))
        else:
            quantized_type = None
    else:
        quantized_type = type_of(data.dtype) if data is not None else None
    weight = constant_source(data) if data is not None else None
    weight_values = constant_values(weight) if weight is not None else None
    dequantized = node.outputs[0] if node.outputs else None
    if quantize and dequantized is not None:
        readers = [reader for reader in dequantized.outputs if reader.op == "DequantizeLinear"]
        dequantized = readers[0].outputs[0] if readers and readers[0].outputs else None
    users = (
        tuple(
            qdq_rules.WeightUser(reader.op, index, int(reader.attrs.get("transB", 0)))
            for reader in dequantized.outputs
            for index, tensor in enumerate(reader.inputs)
            if tensor is dequantized
        )
        if dequantized is not None and weight is not None
        else ()
    )
    return qdq_rules.QdqNode(
        op=node.op,
        quantized_type=quantized_type,
        scale=constant_values(scale) if scale is not None else None,
        zero_point=constant_values(zero_point) if zero_point is not None else None,
        zero_point_given=zero_point is not None,
        output_dtype_given=bool(output_dtype),
        axis=int(node.attrs.get("axis", 1)),
        block_size=int(node.attrs.get("block_size", 0)),
        weight=weight.name if weight is not None else None,
        weight_shape=tuple(int(d) for d in weight_values.shape) if weight_values is not None else None,
        weight_users=users,
        quantize_feeds=tuple(reader.op for reader in node.outputs[0].outputs) if quantize and node.outputs else (),
    )


def _resize(checker: Reporter, node: gs.Node) -> None:
    mode = attribute(node, "mode", "nearest")
    coordinate = attribute(node, "coordinate_transformation_mode", "half_pixel")
    nearest = attribute(node, "nearest_mode", "round_prefer_floor")
    if mode == "cubic":
        checker.add(
            "warning",
            "unsupported-attribute",
            "mode 'cubic' is not among the modes the TensorRT ONNX table lists (nearest, linear); "
            "recent parsers map it to a cubic resize, older ones reject it: confirm with a build or use 'linear'",
            node,
        )
    elif mode not in table.RESIZE_MODES:
        checker.add("error", "unsupported-attribute", f"Resize mode '{mode}' is not supported (nearest, linear)", node)
    if coordinate not in table.RESIZE_COORDINATE_MODES:
        checker.add(
            "error",
            "unsupported-attribute",
            f"coordinate_transformation_mode '{coordinate}' is not supported ({', '.join(sorted(table.RESIZE_COORDINATE_MODES))})",
            node,
        )
    if mode == "nearest" and nearest not in table.RESIZE_NEAREST_MODES:
        checker.add("error", "unsupported-attribute", f"nearest_mode '{nearest}' is not supported", node)
    if int(node.attrs.get("antialias", 0)):
        checker.add("error", "unsupported-attribute", "antialias=1 is not supported by TensorRT's resize", node)
    if attribute(node, "keep_aspect_ratio_policy", "stretch") != "stretch":
        checker.add("error", "unsupported-attribute", "keep_aspect_ratio_policy must be 'stretch'", node)


def _pad(checker: Reporter, node: gs.Node) -> None:
    mode = attribute(node, "mode", "constant")
    if mode not in table.PAD_MODES:
        checker.add("error", "unsupported-attribute", f"Pad mode '{mode}' is not supported ({', '.join(sorted(table.PAD_MODES))})", node)


def _pool(checker: Reporter, node: gs.Node) -> None:
    dilations = node.attrs.get("dilations")
    if dilations is not None and any(int(d) != 1 for d in dilations):
        checker.add("error", "unsupported-attribute", f"{node.op} dilations {list(dilations)}: TensorRT pools without dilation", node)
    shape = node.inputs[0].shape if node.inputs else None
    if node.op in ("AveragePool", "MaxPool") and shape is not None and len(shape) not in (4, 5):
        checker.add("error", "unsupported-attribute", f"{node.op} on a rank-{len(shape)} input: TensorRT pools 2D or 3D only", node)
    if node.op == "MaxPool" and len(node.outputs) > 1 and (node.outputs[1].outputs or node.outputs[1] in checker.graph.outputs):
        checker.add("error", "unsupported-attribute", "MaxPool's Indices output is not supported", node)


def _dropout(checker: Reporter, node: gs.Node) -> None:
    if len(node.inputs) > 2 and not is_absent(node.inputs[2]):
        value = constant_values(node.inputs[2])
        if value is not None and bool(np.asarray(value).reshape(-1)[0]):
            checker.add("error", "unsupported-attribute", "Dropout in training mode: TensorRT only runs inference", node)


def _topk(checker: Reporter, node: gs.Node) -> None:
    if int(node.attrs.get("sorted", 1)) != 1:
        checker.add("error", "unsupported-attribute", "TopK with sorted=0 is not supported", node)
    k = constant_values(node.inputs[1]) if len(node.inputs) > 1 else None
    if k is not None and int(np.asarray(k).reshape(-1)[0]) >= table.TOPK_MAX_K:
        checker.add("error", "unsupported-attribute", f"TopK K must be below {table.TOPK_MAX_K}", node)


def _scatter_nd(checker: Reporter, node: gs.Node) -> None:
    if attribute(node, "reduction", "none") != "none":
        checker.add("error", "unsupported-attribute", "ScatterND reduction other than 'none' is not supported", node)


def _lstm(checker: Reporter, node: gs.Node) -> None:
    if int(node.attrs.get("input_forget", 0)) or int(node.attrs.get("layout", 0)):
        checker.add("error", "unsupported-attribute", "LSTM needs input_forget=0 and layout=0", node)


def _constant(checker: Reporter, node: gs.Node) -> None:
    for name in ("sparse_value", "value_string", "value_strings"):
        if name in node.attrs:
            checker.add("error", "unsupported-attribute", f"Constant with '{name}' is not supported", node)


def _layer_norm(checker: Reporter, node: gs.Node) -> None:
    if any(out.outputs or out in checker.graph.outputs for out in node.outputs[1:]):
        checker.add("error", "unsupported-attribute", "only LayerNormalization's first output (Y) is supported", node)


def _grid_sample(checker: Reporter, node: gs.Node) -> None:
    shape = node.inputs[0].shape if node.inputs else None
    if shape is not None and len(shape) != 4:
        checker.add("error", "unsupported-attribute", "GridSample needs a 4-D input", node)


def _eye_like(checker: Reporter, node: gs.Node) -> None:
    shape = node.inputs[0].shape if node.inputs else None
    if shape is not None and not all(isinstance(d, int) and d > 0 for d in shape):
        checker.add("error", "unsupported-attribute", "EyeLike needs an input with static dims", node)


def _nms(checker: Reporter, node: gs.Node) -> None:
    for index, name in ((0, "boxes"), (1, "scores")):
        shape = node.inputs[index].shape if len(node.inputs) > index else None
        if shape is not None and len(shape) != 3:
            checker.add("error", "unsupported-attribute", f"NonMaxSuppression '{name}' must be 3-D", node)
    checker.add(
        "info",
        "nms",
        "runs as TensorRT's NMS layer: the selected indices [num_selected, 3] (INT64) have a data-dependent "
        "shape, which the serving side must allocate at run time; NMS in the postprocess model avoids that",
        node,
    )


def _mod(checker: Reporter, node: gs.Node) -> None:
    type_name = type_of(node.inputs[0].dtype) if node.inputs else None
    if int(node.attrs.get("fmod", 0)) == 0 and type_name is not None and type_name not in table.MOD_INTEGER_TYPES:
        checker.add("error", "unsupported-dtype", f"Mod with fmod=0 on {type_name}: its importer takes INT32 or INT64 only", node)


def _einsum(checker: Reporter, node: gs.Node) -> None:
    equation = attribute(node, "equation", "")
    if any(c.isupper() for c in equation):
        checker.add(
            "error",
            "unsupported-attribute",
            f"Einsum '{equation}' uses upper-case labels: TensorRT's Einsum takes lower-case letters only",
            node,
        )
        return
    plan = einsum.einsum_plan(node)
    awkward = "..." in equation or len(node.inputs) > 2
    if isinstance(plan, einsum.EinsumPlan):
        severity = "warning" if awkward else "info"
        why = (
            "TensorRT 8.x rejected ellipsis and 3+ operands and 10.x parsers differ; "
            if awkward
            else "it builds as TensorRT's Einsum layer, but "
        )
        checker.add(
            severity,
            "einsum",
            f"Einsum '{equation}': {why}MatMul is what GEMM kernels and Q/DQ quantizers target",
            node,
            fix=("einsum_to_matmul",),
        )
    else:
        checker.add(
            "warning" if awkward or "diagonal" in plan else "info",
            "einsum",
            f"Einsum '{equation}' cannot be rewritten automatically ({plan}); TensorRT's Einsum layer may reject it",
            node,
        )


RULES: dict[str, Callable[[Reporter, gs.Node], None]] = {
    "Resize": _resize,
    "Pad": _pad,
    "AveragePool": _pool,
    "MaxPool": _pool,
    "LpPool": _pool,
    "Dropout": _dropout,
    "TopK": _topk,
    "ScatterND": _scatter_nd,
    "LSTM": _lstm,
    "Constant": _constant,
    "LayerNormalization": _layer_norm,
    "GridSample": _grid_sample,
    "EyeLike": _eye_like,
    "NonMaxSuppression": _nms,
    "Einsum": _einsum,
    "Mod": _mod,
}
