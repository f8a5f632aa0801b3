"""The ``check`` step: what TensorRT 10.x/11.x will not accept in an ONNX model, before any GPU.

Reads a model and reports findings, each with a severity:

- ``error``: the TensorRT ONNX parser or builder rejects it (unsupported op,
  attribute or type, custom-domain op, asymmetric or uint8 Q/DQ, a parameter
  that must be a build-time constant and is not);
- ``warning``: it builds, but not as intended (runtime-computed pads that
  block Pad+Conv fusion and get in the way of Q/DQ placement, INT64 I/O,
  dynamic non-batch dims, Einsum forms older parsers reject);
- ``info``: worth knowing or cheap to clean up (no batch range declared yet,
  no-op nodes, foldable shape arithmetic).

Every finding names the ``fix`` pass that repairs it, when one does. The
rules come from :mod:`builders.tensorrt_onnx_ops` (the onnx-tensorrt support
table) plus the restrictions coded below; "shape subgraphs that constant
folding would remove" are found by folding a copy of the graph exactly as
``fix`` does and seeing which parameter inputs became constants.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnx_graphsurgeon as gs

from builders import batch_profile, qdq_rules
from builders import tensorrt_onnx_ops as table
from builders.fix_onnx import load_model, quiet_graphsurgeon
from builders.passes import batch, cleanup, custom_ops, einsum, onnx_io, registry
from builders.passes.graph import STANDARD_DOMAINS, constant_values, is_absent, onnx_type

SEVERITIES = ("error", "warning", "info")

_TYPE_NAMES: dict[int, str] = {
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
    _TYPE_NAMES[onnx.TensorProto.FLOAT4E2M1] = "FP4"

# Parameter inputs whose runtime computation is worth reporting: op -> input indices.
_PARAMETER_INPUTS: dict[str, tuple[int, ...]] = {
    "Pad": (1, 2, 3),
    "Reshape": (1,),
    "Resize": (1, 2, 3),
    "Upsample": (1,),
    "Slice": (1, 2, 3, 4),
    "Expand": (1,),
    "Tile": (1,),
    "ConstantOfShape": (0,),
    "Split": (1,),
}
# (op, input type) TensorRT refuses -> the fix pass that rewrites it (both in Ultralytics' nms=True exports: the
# selection mask NonZero reads, and the clamp of a dynamic batch's padding).
DTYPE_FIXES: dict[tuple[str, str], str] = {
    ("NonZero", "BOOL"): "cast_nonzero_input",
    ("Clip", "INT64"): "integer_clip_to_min_max",
    ("Clip", "INT32"): "integer_clip_to_min_max",
}
_QUANTIZED_OPERATOR_FORMAT = {"QLinearConv", "QLinearMatMul", "ConvInteger", "MatMulInteger", "DynamicQuantizeLinear"}


@dataclass(frozen=True)
class Finding:
    severity: str  # "error" | "warning" | "info"
    code: str
    message: str
    node: str = ""  # node name, or the tensor name for input/output findings
    op: str = ""  # op type, "input"/"output", or "model"
    fix: tuple[str, ...] = ()  # fix passes that repair it

    def to_dict(self) -> dict[str, Any]:
        record = asdict(self)
        record["fix"] = list(self.fix)
        return record


@dataclass
class Report:
    model: str
    opset: int | None
    node_count: int
    findings: list[Finding] = field(default_factory=list)
    batch_profile: dict[str, Any] | None = None

    @property
    def counts(self) -> dict[str, int]:
        return {severity: sum(1 for f in self.findings if f.severity == severity) for severity in SEVERITIES}

    @property
    def blocking(self) -> bool:
        """True when something blocks a TensorRT build (any error)."""
        return self.counts["error"] > 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "opset": self.opset,
            "nodes": self.node_count,
            "rules": table.SOURCE,
            "batch_profile": self.batch_profile,
            "counts": self.counts,
            "blocking": self.blocking,
            "findings": [finding.to_dict() for finding in self.findings],
        }

    def format_text(self) -> str:
        header = (
            f"{self.model}: opset {self.opset}, {self.node_count} nodes (rules: TensorRT {table.TENSORRT_VERSION} ONNX operator support)"
        )
        lines = [header]
        for finding in self.findings:
            where = f"{finding.node} ({finding.op})" if finding.node else finding.op
            fix = f" [fix: {', '.join(finding.fix)}]" if finding.fix else ""
            lines.append(f"{finding.severity:<7} {finding.code:<24} {where}: {finding.message}{fix}")
        counts = self.counts
        verdict = "blocks a TensorRT build" if self.blocking else "nothing blocks a TensorRT build"
        lines.append(f"{counts['error']} error(s), {counts['warning']} warning(s), {counts['info']} info: {verdict}")
        return "\n".join(lines)


# --------------------------------------------------------------------------- helpers


def _type_name(dtype: object) -> str | None:
    onnx_enum = onnx_type(dtype)
    if onnx_enum is None:
        return None
    return _TYPE_NAMES.get(onnx_enum, onnx.TensorProto.DataType.Name(onnx_enum))


def _default_opset(model: onnx.ModelProto) -> int | None:
    versions = [entry.version for entry in model.opset_import if entry.domain in STANDARD_DOMAINS]
    return max(versions) if versions else None


def _walk(graph: gs.Graph) -> Iterator[gs.Node]:
    """Every node, including those in If/Loop/Scan bodies."""
    for node in graph.nodes:
        yield node
        for value in node.attrs.values():
            if isinstance(value, gs.Graph):
                yield from _walk(value)


def _upstream(tensor: gs.Tensor, limit: int = 200) -> list[gs.Node]:
    """The nodes that compute ``tensor`` from constants and graph inputs (bounded)."""
    seen: list[gs.Node] = []
    stack = list(tensor.inputs)
    while stack and len(seen) < limit:
        node = stack.pop()
        if any(node is other for other in seen):
            continue
        seen.append(node)
        for source in node.inputs:
            stack.extend(source.inputs)
    return seen


def _describe(nodes: list[gs.Node]) -> str:
    ops = sorted({node.op for node in nodes if node.op != "Constant"})
    computed = [node for node in nodes if node.op != "Constant"]
    return f"{len(computed)} node(s) ({', '.join(ops)})" if computed else "Constant nodes"


def _attr(node: gs.Node, name: str, default: Any) -> Any:
    value = node.attrs.get(name, default)
    return value.decode() if isinstance(value, bytes) else value


class _Checker:
    """Collects findings for one model."""

    def __init__(self, model: onnx.ModelProto, max_batch: int | None) -> None:
        self.model = model
        self.max_batch = max_batch
        self.findings: list[Finding] = []
        self.opset = _default_opset(model)
        try:
            self.inferred = onnx.shape_inference.infer_shapes(model)
        except Exception as error:
            self.inferred = model
            self.add(
                "info",
                "shape-inference",
                f"shape inference failed ({str(error).splitlines()[0]}); type and shape checks are partial",
                op="model",
            )
        with quiet_graphsurgeon():
            self.graph = gs.import_onnx(self.inferred)
        for index, node in enumerate(self.graph.nodes):
            node.name = node.name or f"{node.op}_{index}"
        self.folded = self._fold()

    def add(
        self, severity: str, code: str, message: str, node: gs.Node | None = None, fix: tuple[str, ...] = (), name: str = "", op: str = ""
    ) -> None:
        registry.check_names(fix, "trt_compat fix hint")
        self.findings.append(
            Finding(severity, code, message, node=node.name if node is not None else name, op=node.op if node is not None else op, fix=fix)
        )

    def _fold(self) -> dict[str, gs.Node]:
        """Top-level nodes by name after ``fold_constants_and_cleanup`` and fresh shape inference (as ``fix`` runs them)."""
        try:
            with quiet_graphsurgeon():
                copy = self.graph.copy()
                cleanup.fold_constants_and_cleanup(copy)
                folded = gs.import_onnx(onnx_io.export_with_metadata(copy, self.inferred, reinfer=True, do_type_check=False))
        except Exception:
            return {}
        return {node.name: node for node in folded.nodes}

    # ------------------------------------------------------------------- model level

    def check_opset(self) -> None:
        if self.opset is None:
            self.add("error", "opset-range", "the model imports no default-domain opset", op="model")
        elif not table.MIN_OPSET <= self.opset <= table.MAX_OPSET:
            self.add(
                "error",
                "opset-range",
                f"opset {self.opset} is outside TensorRT {table.TENSORRT_VERSION}'s range "
                f"{table.MIN_OPSET}-{table.MAX_OPSET}: re-export at an opset in range",
                op="model",
            )

    def check_io(self) -> None:
        for kind, values in (("input", self.graph.inputs), ("output", self.graph.outputs)):
            for value in values:
                type_name = _type_name(value.dtype)
                if type_name == "INT64":
                    self.add(
                        "warning",
                        "int64-io",
                        f"{kind} is INT64: TensorRT 10 accepts INT64 I/O (older releases cast it down to INT32), "
                        "but the Triton config must then say TYPE_INT64 and clients must send int64; "
                        "prefer FP32/INT32 at the boundary",
                        name=value.name,
                        op=kind,
                    )
                elif type_name is not None and type_name not in table.IO_TYPES:
                    self.add(
                        "error",
                        "io-dtype",
                        f"{kind} type {type_name} cannot be a TensorRT network {kind} "
                        f"(allowed: {', '.join(sorted(table.IO_TYPES))}); cast at the boundary",
                        name=value.name,
                        op=kind,
                    )
        self._check_batch()

    def _check_pinned_batch(self, dynamic_batch: bool) -> None:
        """Batch-1 leftovers of a traced graph: outputs and constant Reshape targets that pin dim 0."""
        wants_batch = dynamic_batch or (self.max_batch is not None and self.max_batch > 1)
        if not wants_batch:
            return
        if dynamic_batch:
            for value in self.graph.outputs:
                first = value.shape[0] if value.shape else None
                if isinstance(first, int) and first > 0:
                    self.add(
                        "warning",
                        "batch-pinned-output",
                        f"dim 0 is {first} while the inputs' batch is dynamic: TensorRT and onnxruntime see "
                        "a batch-1 output (onnxruntime warns on every larger batch); make it the batch dim",
                        name=value.name,
                        op="output",
                        fix=("batch_dimension",),
                    )
        for node in self.graph.nodes:
            if node.op != "Reshape" or len(node.inputs) < 2:
                continue
            target = constant_values(node.inputs[1])
            if target is None or target.ndim != 1 or len(target) < 2 or int(target[0]) != 1:
                continue
            shape = node.inputs[0].shape
            carries_batch = bool(shape) and not (isinstance(shape[0], int) and shape[0] > 1)
            if carries_batch and int(node.attrs.get("allowzero", 0)) == 0:
                self.add(
                    "warning",
                    "batch-pinned-reshape",
                    f"constant target {target.tolist()} pins dim 0 to 1: with a batch above 1 the Reshape fails "
                    "(a converter traced a batch-1 graph); 0 copies the input's batch",
                    node,
                    fix=("batch_dimension", "batch_reshape_placeholder"),
                )

    def _check_batch(self) -> None:
        try:
            profile = batch_profile.read_profile(self.model)
        except batch_profile.ProfileError as error:
            self.add("error", "batch-profile", str(error), op="model", fix=("batch_dimension",))
            profile = None
        self.profile = profile
        dynamic_batch = False
        for value in self.graph.inputs:
            shape = value.shape
            if shape is None or len(shape) == 0:
                continue
            first = shape[0]
            if isinstance(first, int) and first > 0:
                if self.max_batch is not None and self.max_batch > first:
                    self.add(
                        "warning",
                        "static-batch",
                        f"dim 0 is fixed to {first} but a max batch of {self.max_batch} is wanted: "
                        "TensorRT will build exactly this shape; make dim 0 a symbolic batch dim",
                        name=value.name,
                        op="input",
                        fix=("batch_dimension",),
                    )
            else:
                dynamic_batch = True
            for position, dim in enumerate(shape[1:], start=1):
                if not (isinstance(dim, int) and dim > 0):
                    self.add(
                        "warning",
                        "dynamic-dim",
                        f"dim {position} ({dim or '?'}) is dynamic: every dynamic dim needs a min/opt/max in the "
                        "TensorRT optimization profile and Triton's config declares static dims; set it static",
                        name=value.name,
                        op="input",
                        fix=("batch_dimension",),
                    )
        self._check_pinned_batch(dynamic_batch)
        if dynamic_batch and profile is None and self.max_batch is None:
            self.add(
                "info",
                "batch-range-undeclared",
                "the batch dim is dynamic and the model declares no range: a TensorRT build needs min/opt/max "
                "(build-engine takes 1..max_batch_size from the core config; fix records it in the model)",
                op="model",
                fix=("batch_dimension",),
            )
        if profile is not None and self.max_batch is not None and profile.max < self.max_batch:
            self.add(
                "warning",
                "batch-range-mismatch",
                f"the model records max batch {profile.max}, {self.max_batch} was asked for",
                op="model",
                fix=("batch_dimension",),
            )

    # ------------------------------------------------------------------- nodes

    def check_nodes(self) -> None:
        top_level = {id(node) for node in self.graph.nodes}
        for node in _walk(self.graph):
            domain = node.domain or ""
            if domain not in STANDARD_DOMAINS or (domain, node.op) in custom_ops.CUSTOM_OP_REWRITES:
                self._custom_op(node, domain)
                continue
            if not self._supported(node):
                continue
            self._dtype(node)
            rule = _RULES.get(node.op)
            if rule is not None:
                rule(self, node)
            self._constant_inputs(node, id(node) in top_level)
            if id(node) in top_level:
                self._parameter_subgraphs(node)
                reason = cleanup.noop_reason(node, self.graph)
                if reason and (not self.folded or node.name in self.folded):  # not inside a subgraph that folds away
                    self.add("info", "noop-node", f"{reason}: computes nothing", node, fix=("remove_noops",))

    def _custom_op(self, node: gs.Node, domain: str) -> None:
        if (domain, node.op) in custom_ops.CUSTOM_OP_REWRITES:
            self.add(
                "error",
                "custom-domain-op",
                f"TensorRT has no importer for {domain + '.' if domain else ''}{node.op}; "
                "`python -m builders fix --passes custom_op_rewrites` rewrites it into standard ONNX ops",
                node,
                fix=("custom_op_rewrites",),
            )
            return
        hint = " (an onnxruntime contrib op: export or quantize without onnxruntime-specific fusions)" if domain == "com.microsoft" else ""
        self.add(
            "error",
            "custom-domain-op",
            f"TensorRT has no importer for {domain}.{node.op}{hint}: it needs a TensorRT plugin, or a rewrite "
            "into standard ops registered in builders.passes.custom_ops.CUSTOM_OP_REWRITES",
            node,
        )

    def _supported(self, node: gs.Node) -> bool:
        if node.op in table.OPERATORS:
            return True
        if node.op in _QUANTIZED_OPERATOR_FORMAT:
            message = (
                "QOperator-format quantization has no TensorRT importer: quantize in QDQ format "
                "(QuantizeLinear/DequantizeLinear pairs, int8, zero-point 0)"
            )
        elif node.op.endswith("_TRT"):
            message = "a TensorRT plugin op: the plugin library must be loaded at build time"
            if node.op.startswith("EfficientNMS"):
                message += "; EfficientNMS_TRT is deprecated since 10.12 and gone in 11: use ONNX NonMaxSuppression"
        elif node.op in table.UNSUPPORTED:
            message = f"TensorRT {table.TENSORRT_VERSION} has no importer for {node.op}: rewrite it or add a plugin"
        else:
            message = f"{node.op} is not in TensorRT {table.TENSORRT_VERSION}'s ONNX support table"
        self.add("error", "unsupported-op", message, node)
        return False

    def _dtype(self, node: gs.Node) -> None:
        if node.op in ("QuantizeLinear", "DequantizeLinear"):
            return  # the Q/DQ rule says more
        if node.op in table.TYPED_OUTPUT:
            tensor = node.outputs[0] if node.outputs else None
        else:
            index = table.TYPED_INPUT.get(node.op, 0)
            tensor = node.inputs[index] if len(node.inputs) > index and not is_absent(node.inputs[index]) else None
        type_name = _type_name(tensor.dtype) if tensor is not None else None
        if type_name is None:
            return
        if type_name == "DOUBLE":
            self.add("warning", "double-dtype", "DOUBLE is cast down to FP32 by TensorRT (values clamped to ±FLT_MAX)", node)
        elif type_name not in table.OPERATORS[node.op]:
            message = f"{node.op} on {type_name} is not supported (TensorRT lists {', '.join(sorted(table.OPERATORS[node.op]))})"
            fix = DTYPE_FIXES.get((node.op, type_name))
            self.add("error", "unsupported-dtype", message, node, fix=(fix,) if fix else ())

    def _constant_inputs(self, node: gs.Node, top_level: bool) -> None:
        for index, name in table.CONSTANT_INPUTS.get(node.op, {}).items():
            if len(node.inputs) <= index or is_absent(node.inputs[index]):
                continue
            if constant_values(node.inputs[index]) is not None:
                continue
            if top_level and self._folds(node, index):
                self.add(
                    "warning",
                    "foldable-parameter",
                    f"'{name}' must be a build-time constant; it is computed by "
                    f"{_describe(_upstream(node.inputs[index]))} that fold to a constant",
                    node,
                    fix=("fold_constants_and_cleanup",),
                )
            else:
                self.add("error", "dynamic-parameter", f"'{name}' must be a build-time constant; it is computed at run time", node)

    def _folds(self, node: gs.Node, index: int) -> bool:
        folded = self.folded.get(node.name)
        return folded is not None and len(folded.inputs) > index and constant_values(folded.inputs[index]) is not None

    def _parameter_subgraphs(self, node: gs.Node) -> None:
        runtime = [
            index
            for index in _PARAMETER_INPUTS.get(node.op, ())
            if len(node.inputs) > index and not is_absent(node.inputs[index]) and constant_values(node.inputs[index]) is None
        ]
        if not runtime:
            if node.op == "Pad" and cleanup.pad_fusable_into_conv(node, self.graph) is not None:
                self.add(
                    "info",
                    "pad-before-conv",
                    "a constant zero Pad feeds a Conv: merged into the Conv's pads, TensorRT and quantizers see one layer",
                    node,
                    fix=("fuse_pad_into_conv",),
                )
            return
        upstream = _describe([n for index in runtime for n in _upstream(node.inputs[index])])
        foldable = all(self._folds(node, index) for index in runtime)
        if node.op == "Pad":
            if foldable:
                self.add(
                    "warning",
                    "runtime-pads",
                    f"pads computed at run time by {upstream} that fold to constants: TensorRT builds a slice "
                    "with a computed size (no Pad+Conv fusion) and Q/DQ placement sees a Pad before the Conv",
                    node,
                    fix=("fold_constants_and_cleanup", "fuse_pad_into_conv"),
                )
            else:
                self.add(
                    "warning",
                    "runtime-pads",
                    f"pads depend on runtime shapes ({upstream}): TensorRT builds them as a slice with a "
                    "computed size (no Pad+Conv fusion); only static shapes would make them constant",
                    node,
                )
            return
        if foldable:
            self.add(
                "info",
                "foldable-subgraph",
                f"{node.op} parameters are computed at run time by {upstream} that fold to constants",
                node,
                fix=("fold_constants_and_cleanup",),
            )
        elif node.op == "Reshape":
            folded = self.folded.get(node.name)
            if folded is not None and batch.batch_reshape_target(folded) is not None:
                self.add(
                    "info",
                    "runtime-shape",
                    f"the target shape is computed from runtime shapes ({upstream}) only to copy the batch dim: "
                    "a constant with 0 (copy) says the same without shape arithmetic",
                    node,
                    fix=("fold_constants_and_cleanup", "batch_reshape_placeholder"),
                )

    # ------------------------------------------------------------------- op rules

    def qdq(self, node: gs.Node) -> None:
        """TensorRT's Q/DQ rules (:mod:`builders.qdq_rules`); the project's quantize policy is not reported here."""
        for violation in qdq_rules.node_violations(_qdq_facts(node)):
            if violation.severity in ("error", "warning") and violation.code not in _QDQ_REPORTED_ELSEWHERE:
                self.add(violation.severity, violation.code, violation.message, node)


# Runtime scales/zero-points are reported once, by the parameter-input rule ("dynamic-parameter").
_QDQ_REPORTED_ELSEWHERE = frozenset({"qdq-scale-runtime", "qdq-zero-point-runtime"})


def _constant_source(tensor: gs.Tensor) -> gs.Tensor | None:
    """The constant a tensor is, or that a Q/DQ quantizes (ModelOpt's weight pattern W -> QuantizeLinear -> DequantizeLinear)."""
    if constant_values(tensor) is not None:
        return tensor
    producer = tensor.inputs[0] if len(tensor.inputs) == 1 else None
    if producer is not None and producer.op in qdq_rules.QDQ_OPS and constant_values(producer.inputs[0]) is not None:
        return producer.inputs[0]
    return None


def _qdq_facts(node: gs.Node) -> qdq_rules.QdqNode:
    quantize = node.op == "QuantizeLinear"
    data = node.inputs[0] if node.inputs else None
    scale = node.inputs[1] if len(node.inputs) > 1 else None
    zero_point = node.inputs[2] if len(node.inputs) > 2 and not is_absent(node.inputs[2]) else None
    output_dtype = int(node.attrs.get("output_dtype", 0))
    if quantize:
        if zero_point is not None:
            quantized_type = _type_name(zero_point.dtype)
        elif output_dtype:
            quantized_type = _TYPE_NAMES.get(output_dtype, onnx.TensorProto.DataType.Name(output_dtype))
        else:
            quantized_type = None
    else:
        quantized_type = _type_name(data.dtype) if data is not None else None
    weight = _constant_source(data) if data is not None else None
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


def _resize(checker: _Checker, node: gs.Node) -> None:
    mode = _attr(node, "mode", "nearest")
    coordinate = _attr(node, "coordinate_transformation_mode", "half_pixel")
    nearest = _attr(node, "nearest_mode", "round_prefer_floor")
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
    if _attr(node, "keep_aspect_ratio_policy", "stretch") != "stretch":
        checker.add("error", "unsupported-attribute", "keep_aspect_ratio_policy must be 'stretch'", node)


def _pad(checker: _Checker, node: gs.Node) -> None:
    mode = _attr(node, "mode", "constant")
    if mode not in table.PAD_MODES:
        checker.add("error", "unsupported-attribute", f"Pad mode '{mode}' is not supported ({', '.join(sorted(table.PAD_MODES))})", node)


def _pool(checker: _Checker, node: gs.Node) -> None:
    dilations = node.attrs.get("dilations")
    if dilations is not None and any(int(d) != 1 for d in dilations):
        checker.add("error", "unsupported-attribute", f"{node.op} dilations {list(dilations)}: TensorRT pools without dilation", node)
    shape = node.inputs[0].shape if node.inputs else None
    if node.op in ("AveragePool", "MaxPool") and shape is not None and len(shape) not in (4, 5):
        checker.add("error", "unsupported-attribute", f"{node.op} on a rank-{len(shape)} input: TensorRT pools 2D or 3D only", node)
    if node.op == "MaxPool" and len(node.outputs) > 1 and (node.outputs[1].outputs or node.outputs[1] in checker.graph.outputs):
        checker.add("error", "unsupported-attribute", "MaxPool's Indices output is not supported", node)


def _dropout(checker: _Checker, node: gs.Node) -> None:
    if len(node.inputs) > 2 and not is_absent(node.inputs[2]):
        value = constant_values(node.inputs[2])
        if value is not None and bool(np.asarray(value).reshape(-1)[0]):
            checker.add("error", "unsupported-attribute", "Dropout in training mode: TensorRT only runs inference", node)


def _topk(checker: _Checker, node: gs.Node) -> None:
    if int(node.attrs.get("sorted", 1)) != 1:
        checker.add("error", "unsupported-attribute", "TopK with sorted=0 is not supported", node)
    k = constant_values(node.inputs[1]) if len(node.inputs) > 1 else None
    if k is not None and int(np.asarray(k).reshape(-1)[0]) >= table.TOPK_MAX_K:
        checker.add("error", "unsupported-attribute", f"TopK K must be below {table.TOPK_MAX_K}", node)


def _scatter_nd(checker: _Checker, node: gs.Node) -> None:
    if _attr(node, "reduction", "none") != "none":
        checker.add("error", "unsupported-attribute", "ScatterND reduction other than 'none' is not supported", node)


def _lstm(checker: _Checker, node: gs.Node) -> None:
    if int(node.attrs.get("input_forget", 0)) or int(node.attrs.get("layout", 0)):
        checker.add("error", "unsupported-attribute", "LSTM needs input_forget=0 and layout=0", node)


def _constant(checker: _Checker, node: gs.Node) -> None:
    for name in ("sparse_value", "value_string", "value_strings"):
        if name in node.attrs:
            checker.add("error", "unsupported-attribute", f"Constant with '{name}' is not supported", node)


def _layer_norm(checker: _Checker, node: gs.Node) -> None:
    if any(out.outputs or out in checker.graph.outputs for out in node.outputs[1:]):
        checker.add("error", "unsupported-attribute", "only LayerNormalization's first output (Y) is supported", node)


def _grid_sample(checker: _Checker, node: gs.Node) -> None:
    shape = node.inputs[0].shape if node.inputs else None
    if shape is not None and len(shape) != 4:
        checker.add("error", "unsupported-attribute", "GridSample needs a 4-D input", node)


def _eye_like(checker: _Checker, node: gs.Node) -> None:
    shape = node.inputs[0].shape if node.inputs else None
    if shape is not None and not all(isinstance(d, int) and d > 0 for d in shape):
        checker.add("error", "unsupported-attribute", "EyeLike needs an input with static dims", node)


def _nms(checker: _Checker, node: gs.Node) -> None:
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


def _einsum(checker: _Checker, node: gs.Node) -> None:
    equation = _attr(node, "equation", "")
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


_RULES: dict[str, Callable[[_Checker, gs.Node], None]] = {
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
    "QuantizeLinear": _Checker.qdq,
    "DequantizeLinear": _Checker.qdq,
}

_SEVERITY_ORDER = {severity: rank for rank, severity in enumerate(SEVERITIES)}


def check_model(model: onnx.ModelProto, max_batch: int | None = None, name: str = "<model>") -> Report:
    """All findings for ``model`` (errors first, then warnings, then info; graph order within each)."""
    checker = _Checker(model, max_batch)
    checker.check_opset()
    checker.check_io()
    checker.check_nodes()
    findings = sorted(checker.findings, key=lambda f: _SEVERITY_ORDER[f.severity])
    profile = checker.profile
    return Report(
        model=name,
        opset=checker.opset,
        node_count=len(model.graph.node),
        findings=findings,
        batch_profile=json.loads(profile.to_json()) if profile is not None else None,
    )


def check_file(path: Path, max_batch: int | None = None) -> Report:
    """``check_model`` on a file; a missing or unreadable file raises ``BuildError`` (exit 2)."""
    return check_model(load_model(Path(path)), max_batch=max_batch, name=str(path))
