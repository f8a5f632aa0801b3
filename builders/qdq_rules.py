"""What TensorRT (>= 10, explicit quantization) accepts in a Q/DQ graph, and what this project adds: one rule set.

Both consumers read these rules: ``python -m builders check`` (:mod:`builders.trt_compat`, which
reports TensorRT's rules by severity) and ``quantize`` (:mod:`builders.quantize`, which refuses
to write a model that breaks any rule, the project's included). A consumer describes each
QuantizeLinear/DequantizeLinear node as a :class:`QdqNode` from its own graph representation
(ONNX protos or onnx-graphsurgeon) and calls :func:`node_violations`.

TensorRT's facts (TensorRT developer guide, "Working with Quantized Types" / explicit quantization;
ModelOpt's TensorRT-guided settings in ``modelopt/onnx/quantization/ort_utils.py`` and
``qdq_utils.py``, which NVIDIA writes for TensorRT):

- quantized types: INT8, FP8 (E4M3), INT4 and FP4 (the last two weight-only); no UINT8, no INT32
  (a quantized bias); a QuantizeLinear without zero-point means uint8 in ONNX (onnxruntime
  follows it) while TensorRT builds int8;
- symmetric: the zero-point is 0; scales are build-time constants, positive and finite;
- activations are quantized per tensor; weights per tensor or per channel, and a per-channel
  scale runs along the weight's **output-channel axis**: Conv ``[M, C/g, kH, kW]`` axis 0;
  ConvTranspose ``[C, M/g, kH, kW]`` axis 1 (a deconvolution weight is stored input-channels
  first, so axis 0 would scale input channels, which TensorRT cannot fold into the kernel);
  Gemm axis 0 with ``transB=1`` (``[N, K]``) and axis 1 without (``[K, N]``); MatMul with a
  constant ``[K, N]`` weight axis 1.

The project's policy on top (``severity="policy"``): the quantize step serves INT8 only, with
an explicit int8 zero-point, weights of rank >= 2 per channel (per-tensor weights cost accuracy),
no blocked quantization, and every QuantizeLinear feeding only DequantizeLinear nodes.
ModelOpt 0.47 quantizes a ConvTranspose weight per tensor, which this policy refuses: that is
why person_segmenter's recipe keeps ConvTranspose in high precision (TensorRT itself would
build a per-tensor deconvolution weight, or a per-channel one on axis 1).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

STANDARD_DOMAINS = ("", "ai.onnx")
QDQ_OPS = ("QuantizeLinear", "DequantizeLinear")
# Types TensorRT quantizes to (names as ``trt_compat`` prints them).
TENSORRT_QDQ_TYPES = frozenset({"INT8", "FP8", "INT4", "FP4"})
# What the quantize step produces.
SERVED_QDQ_TYPE = "INT8"
# Ops whose input 1 is a weight that TensorRT quantizes per channel.
WEIGHT_OPS: dict[str, int] = {"Conv": 1, "ConvTranspose": 1, "Gemm": 1, "MatMul": 1}
# The weight's output-channel axis (Gemm: with transB=1; see weight_axis).
WEIGHT_AXIS: dict[str, int] = {"Conv": 0, "ConvTranspose": 1, "Gemm": 0, "MatMul": 1}
# Without a known consumer (a quantized constant that feeds none of WEIGHT_OPS), axis 0.
DEFAULT_WEIGHT_AXIS = 0

SEVERITIES = ("error", "warning", "policy")


@dataclass(frozen=True)
class WeightUser:
    """An op reading a dequantized weight: its type, which input, and its ``transB`` (Gemm)."""

    op: str
    input_index: int
    trans_b: int = 0


@dataclass(frozen=True)
class QdqNode:
    """The facts about one QuantizeLinear/DequantizeLinear that the rules need."""

    op: str  # "QuantizeLinear" | "DequantizeLinear"
    quantized_type: str | None  # "INT8", "UINT8", "INT32", "FP8" ...; None when unknown
    scale: np.ndarray | None  # None: computed at run time
    zero_point: np.ndarray | None  # None: absent, or computed at run time (see zero_point_given)
    zero_point_given: bool = False
    output_dtype_given: bool = False  # QuantizeLinear's output_dtype attribute (opset 21)
    axis: int = 1
    block_size: int = 0
    weight: str | None = None  # the quantized constant's name; None: an activation
    weight_shape: tuple[int, ...] | None = None
    weight_users: tuple[WeightUser, ...] = ()  # ops reading the dequantized weight
    quantize_feeds: tuple[str, ...] = ()  # QuantizeLinear: op types reading its output


@dataclass(frozen=True)
class Violation:
    severity: str  # "error": TensorRT rejects it; "warning": builds, not as meant; "policy": this project's rule
    code: str
    message: str


def weight_axis(user: WeightUser | None) -> int:
    """The output-channel axis of the weight ``user`` reads (module docstring)."""
    if user is None or user.input_index != WEIGHT_OPS.get(user.op):
        return DEFAULT_WEIGHT_AXIS
    if user.op == "Gemm":
        return 0 if user.trans_b else 1
    return WEIGHT_AXIS[user.op]


def _weight_user(node: QdqNode) -> WeightUser | None:
    known = [user for user in node.weight_users if WEIGHT_OPS.get(user.op) == user.input_index]
    return known[0] if known else None


def node_violations(node: QdqNode) -> list[Violation]:
    """Every rule ``node`` breaks (empty when it conforms): its type, its scale and zero-point, its weight's axis."""
    found = _type_violations(node)
    if node.scale is None:
        return [*found, Violation("error", "qdq-scale-runtime", "scale is not a constant: TensorRT needs build-time scales")]
    return [*found, *_scale_violations(node, node.scale), *_weight_violations(node, node.scale)]


def _type_violations(node: QdqNode) -> list[Violation]:
    found: list[Violation] = []
    quantize = node.op == "QuantizeLinear"
    kind = node.quantized_type
    if quantize and not node.zero_point_given and not node.output_dtype_given:
        found.append(
            Violation(
                "warning",
                "qdq-implicit-uint8",
                "no zero-point, so the output is uint8 per the ONNX spec (onnxruntime follows it) while TensorRT builds int8: "
                "give an explicit int8 zero-point 0",
            )
        )
        kind = None  # reported; not also a uint8 error
    if kind == "UINT8":
        found.append(
            Violation(
                "error",
                "qdq-uint8",
                "uint8 Q/DQ is not int8: TensorRT quantizes to int8 only (signed, symmetric); re-quantize with int8 and zero-point 0",
            )
        )
    elif kind == "INT32" and not quantize:
        found.append(
            Violation(
                "error",
                "qdq-dtype",
                "DequantizeLinear of INT32 (a quantized bias): TensorRT takes INT8/FP8/INT4/FP4; keep biases "
                "float (onnxruntime quantize_static: extra_options QuantizeBias=False)",
            )
        )
    elif kind is not None and kind not in TENSORRT_QDQ_TYPES:
        found.append(Violation("error", "qdq-dtype", f"{kind} Q/DQ: TensorRT quantizes to {', '.join(sorted(TENSORRT_QDQ_TYPES))}"))
    elif kind is not None and kind != SERVED_QDQ_TYPE:
        found.append(Violation("policy", "qdq-not-int8", f"{kind} Q/DQ is not {SERVED_QDQ_TYPE}, the only type the quantize step serves"))
    if node.block_size:
        found.append(Violation("policy", "qdq-blocked", "blocked quantization (block_size) is not per-channel/per-tensor"))
    return found


def _scale_violations(node: QdqNode, scale: np.ndarray) -> list[Violation]:
    found: list[Violation] = []
    if not (np.all(np.isfinite(scale.astype(np.float64))) and np.all(scale > 0)):
        found.append(Violation("error", "qdq-scale", "scale has non-positive or non-finite values"))
    zero_point = node.zero_point
    if zero_point is None and node.zero_point_given:
        found.append(Violation("error", "qdq-zero-point-runtime", "zero-point is not a constant"))
    if zero_point is not None:
        if np.asarray(zero_point).astype(np.float64).any():
            found.append(
                Violation(
                    "error",
                    "qdq-asymmetric",
                    "zero-point is not 0 (asymmetric quantization): TensorRT requires zero-point 0; "
                    "re-quantize symmetrically (onnxruntime: ActivationSymmetric=True; ModelOpt is symmetric)",
                )
            )
        if zero_point.shape != scale.shape:
            found.append(
                Violation("error", "qdq-zero-point-shape", f"zero-point shape {zero_point.shape} differs from scale shape {scale.shape}")
            )
    if node.op == "QuantizeLinear":
        others = sorted({op for op in node.quantize_feeds if op != "DequantizeLinear"})
        if others:
            found.append(Violation("policy", "qdq-unpaired", f"feeds {', '.join(others)}, not only DequantizeLinear"))
    return found


def _weight_violations(node: QdqNode, scale: np.ndarray) -> list[Violation]:
    if node.weight is None or node.weight_shape is None:
        if scale.size > 1:
            return [
                Violation(
                    "warning",
                    "qdq-per-channel-activation",
                    f"activation scale has {scale.size} values; activations must be per-tensor "
                    "(TensorRT quantizes constant weights per channel, computed tensors per tensor)",
                )
            ]
        return []
    shape = list(node.weight_shape)
    user = _weight_user(node)
    expected = weight_axis(user)
    if scale.size == 1:
        # One output channel (e.g. YOLOv8's DFL conv, [1, 16, 1, 1]): per-tensor is per-channel.
        if len(shape) >= 2 and shape[expected % len(shape)] != 1:
            return [
                Violation("policy", "qdq-weight-per-tensor", f"weight {node.weight!r} {shape} is quantized per-tensor, not per-channel")
            ]
        return []
    axis = node.axis % len(shape) if shape else node.axis
    if scale.ndim != 1 or axis != expected or scale.shape[0] != shape[expected]:
        reader = f" (the output-channel axis of a {user.op} weight)" if user is not None else ""
        return [
            Violation(
                "error",
                "qdq-weight-axis",
                f"weight {node.weight!r} {shape} has scale {list(scale.shape)} on axis {node.axis}; expected per-channel on axis {expected}{reader}",
            )
        ]
    return []


# --------------------------------------------------------------------------- ONNX protos


def attribute(node: Any, name: str, default: Any) -> Any:
    """An attribute of a ``NodeProto`` (``default`` when it has none)."""
    import onnx

    for attribute in node.attribute:
        if attribute.name == name:
            return onnx.helper.get_attribute_value(attribute)
    return default


def constants(model: Any) -> dict[str, np.ndarray]:
    """Initializers and ``Constant`` node outputs of a ``ModelProto``'s main graph, by name."""
    from onnx import numpy_helper

    values = {init.name: numpy_helper.to_array(init) for init in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type == "Constant" and node.domain in STANDARD_DOMAINS:
            for attribute in node.attribute:
                if attribute.name == "value":
                    values[node.output[0]] = numpy_helper.to_array(attribute.t)
    return values


def type_name(numpy_dtype: Any) -> str | None:
    """A numpy dtype as a Q/DQ type name ("INT8", "UINT8" ...)."""
    try:
        name = np.dtype(numpy_dtype).name
    except TypeError:
        return None
    return _SHORT_TYPE_NAMES.get(name, name.upper())


_SHORT_TYPE_NAMES = {"float8_e4m3fn": "FP8", "float4_e2m1fn": "FP4", "float16": "FP16", "float32": "FP32"}


# One function: the facts of every Q/DQ node in one pass over the graph (constants, readers, weights).
def describe_proto_nodes(model: Any) -> list[tuple[Any, QdqNode]]:
    """``(node, facts)`` for every standard-domain Q/DQ node of a ``ModelProto``."""
    import onnx

    values = constants(model)
    producer = {output: node for node in model.graph.node for output in node.output}
    consumers: dict[str, list[tuple[Any, int]]] = {}
    for node in model.graph.node:
        for index, name in enumerate(node.input):
            consumers.setdefault(name, []).append((node, index))
    described = []
    for node in model.graph.node:
        if node.domain not in STANDARD_DOMAINS or node.op_type not in QDQ_OPS:
            continue
        quantize = node.op_type == "QuantizeLinear"
        zero_point_given = len(node.input) > 2 and bool(node.input[2])
        zero_point = values.get(node.input[2]) if zero_point_given else None
        output_dtype = int(attribute(node, "output_dtype", 0))
        if quantize:
            if zero_point is not None:
                kind = type_name(zero_point.dtype)
            elif output_dtype:
                kind = type_name(onnx.helper.tensor_dtype_to_np_dtype(output_dtype))
            else:
                kind = None
        else:
            data = values.get(node.input[0])
            kind = type_name(data.dtype) if data is not None else (type_name(zero_point.dtype) if zero_point is not None else None)
        # Weight or activation? A weight Q/DQ quantizes a constant (directly, or through its Q).
        source = node.input[0]
        dequantize = node
        if not quantize and source in producer and producer[source].op_type == "QuantizeLinear":
            source = producer[source].input[0]
        if quantize:
            readers = [reader for reader, _ in consumers.get(node.output[0], []) if reader.op_type == "DequantizeLinear"]
            dequantize = readers[0] if readers else node
        weight = values.get(source)
        users = tuple(
            WeightUser(reader.op_type, index, int(attribute(reader, "transB", 0)))
            for reader, index in consumers.get(dequantize.output[0], [])
        )
        described.append(
            (
                node,
                QdqNode(
                    op=node.op_type,
                    quantized_type=kind,
                    scale=values.get(node.input[1]) if len(node.input) > 1 else None,
                    zero_point=zero_point,
                    zero_point_given=zero_point_given,
                    output_dtype_given=bool(output_dtype),
                    axis=int(attribute(node, "axis", 1)),
                    block_size=int(attribute(node, "block_size", 0)),
                    weight=source if weight is not None else None,
                    weight_shape=tuple(int(d) for d in weight.shape) if weight is not None else None,
                    weight_users=users if weight is not None else (),
                    quantize_feeds=tuple(reader.op_type for reader, _ in consumers.get(node.output[0], [])) if quantize else (),
                ),
            )
        )
    return described


def model_violations(model: Any, severities: Sequence[str] = SEVERITIES) -> list[str]:
    """Every way a ``ModelProto`` departs from the rules of ``severities`` (default: all, the quantize step's bar).

    Besides the per-node rules: only standard ONNX domains, no local functions, at least one Q/DQ.
    """
    problems: list[str] = []
    for opset in model.opset_import:
        if opset.domain not in STANDARD_DOMAINS:
            problems.append(f"imports the non-standard opset domain {opset.domain!r}")
    for function in model.functions:
        problems.append(f"defines the local function {function.domain}:{function.name}")
    for node in model.graph.node:
        if node.domain not in STANDARD_DOMAINS:
            problems.append(f"{node.op_type} {node.name or node.output[0]!r} is in the non-standard domain {node.domain!r}")
    described = describe_proto_nodes(model)
    for node, facts in described:
        where = f"{node.op_type} {node.name or node.output[0]!r}"
        problems += [f"{where}: {v.message}" for v in node_violations(facts) if v.severity in severities]
    if not described:
        problems.append("the graph has no QuantizeLinear/DequantizeLinear nodes")
    return problems


def summary(model: Any) -> dict[str, Any]:
    """What is quantized: Q/DQ counts and the ops whose inputs come from a DQ (by type)."""
    producer = {output: node for node in model.graph.node for output in node.output}
    quantized_ops: Counter[str] = Counter()
    float_ops: Counter[str] = Counter()
    for node in model.graph.node:
        if node.op_type in QDQ_OPS:
            continue
        fed = [producer[name].op_type == "DequantizeLinear" for name in node.input if name in producer]
        (quantized_ops if any(fed) else float_ops)[node.op_type] += 1
    counts = Counter(node.op_type for node in model.graph.node)
    return {
        "quantize_linear": counts["QuantizeLinear"],
        "dequantize_linear": counts["DequantizeLinear"],
        "quantized_ops": dict(sorted(quantized_ops.items())),
        "float_ops": dict(sorted(float_ops.items())),
    }


def checks_description() -> str:
    """One line for the provenance: what :func:`model_violations` enforced."""
    return (
        f"onnx.checker full; standard domains only; Q/DQ {SERVED_QDQ_TYPE.lower()}, zero-point 0, constant positive scales; "
        "weights per-channel on the output-channel axis ("
        + ", ".join(f"{op} {axis}" for op, axis in WEIGHT_AXIS.items())
        + ", Gemm transB=0 1); activations per-tensor"
    )


__all__ = [
    "DEFAULT_WEIGHT_AXIS",
    "QDQ_OPS",
    "SERVED_QDQ_TYPE",
    "STANDARD_DOMAINS",
    "TENSORRT_QDQ_TYPES",
    "WEIGHT_AXIS",
    "WEIGHT_OPS",
    "QdqNode",
    "Violation",
    "WeightUser",
    "attribute",
    "constants",
    "describe_proto_nodes",
    "model_violations",
    "node_violations",
    "summary",
    "weight_axis",
]
