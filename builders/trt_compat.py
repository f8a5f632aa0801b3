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
rules come from :mod:`builders.tensorrt_onnx_ops` (onnx-tensorrt's importers:
the ops and the types the parser accepts) plus the restrictions coded below; "shape subgraphs that constant
folding would remove" are found by folding a copy of the graph exactly as
``fix`` does and seeing which parameter inputs became constants.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import onnx
import onnx_graphsurgeon as gs

from builders import batch_profile, qdq_rules
from builders import tensorrt_onnx_ops as table
from builders import trt_compat_rules as rules
from builders.fix_onnx import load_model, quiet_graphsurgeon
from builders.passes import batch, cleanup, custom_ops, onnx_io, registry
from builders.passes.graph import STANDARD_DOMAINS, constant_values, is_absent

SEVERITIES = ("error", "warning", "info")

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
        header = f"{self.model}: opset {self.opset}, {self.node_count} nodes (rules: {table.RULES})"
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
                "warning",
                "opset-range",
                f"opset {self.opset} is outside the range onnx-tensorrt documents ({table.MIN_OPSET}-{table.MAX_OPSET}); the parser "
                "refuses no opset, but an op whose meaning changed since may not import as meant: re-export at an opset in range",
                op="model",
            )

    def check_io(self) -> None:
        for kind, values in (("input", self.graph.inputs), ("output", self.graph.outputs)):
            for value in values:
                type_name = rules.type_of(value.dtype)
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
        """Whether the parser has an importer for the node's op (its types are checked then)."""
        if node.op in table.LATER_OPERATORS:
            since = table.LATER_OPERATORS[node.op]
            self.add(
                "warning",
                "later-op",
                f"the ONNX parser imports {node.op} from TensorRT {since} (its changelog); older releases refuse it",
                node,
            )
            return node.op in table.OPERATORS
        if node.op in table.OPERATORS:
            return True
        if node.op in _QUANTIZED_OPERATOR_FORMAT:
            message = (
                "QOperator-format quantization has no TensorRT importer: quantize in QDQ format "
                "(QuantizeLinear/DequantizeLinear pairs, int8, zero-point 0)"
            )
        elif node.op.endswith("_TRT"):
            message = "a TensorRT plugin op: the parser imports it only from a loaded plugin library, and build-engine loads none"
            note = table.PLUGIN_NOTES.get(node.op)
            message += f"; {node.op} is {note}" if note else ""
        else:
            known = "its operators table lists it as unsupported" if node.op in table.UNSUPPORTED else "not in its operators table either"
            message = f"the ONNX parser has no importer for {node.op} ({table.RULES}; {known}): rewrite it or add a plugin"
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
        type_name = rules.type_of(tensor.dtype) if tensor is not None else None
        if type_name is None:
            return
        if type_name == "DOUBLE":
            self.add("warning", "double-dtype", "DOUBLE is cast down to FP32 by TensorRT (values clamped to ±FLT_MAX)", node)
            return
        accepted = table.PARSER_ACCEPTS.get(node.op)
        if type_name in table.PARSER_REJECTS.get(node.op, ()) or (accepted is not None and type_name not in accepted):
            self.add("error", "unsupported-dtype", f"the ONNX parser's {node.op} importer refuses {type_name} ({table.RULES})", node)
        elif accepted is None and type_name not in table.OPERATORS[node.op]:
            listed = ", ".join(sorted(table.OPERATORS[node.op]))
            self.add(
                "error",
                "unsupported-dtype",
                f"{node.op} on {type_name}: its importer checks no type, and onnx-tensorrt's operators table lists {listed} for its layer",
                node,
            )

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
        for violation in qdq_rules.node_violations(rules.qdq_facts(node)):
            if violation.severity in ("error", "warning") and violation.code not in _QDQ_REPORTED_ELSEWHERE:
                self.add(violation.severity, violation.code, violation.message, node)


# Runtime scales/zero-points are reported once, by the parameter-input rule ("dynamic-parameter").
_QDQ_REPORTED_ELSEWHERE = frozenset({"qdq-scale-runtime", "qdq-zero-point-runtime"})


_RULES: dict[str, Callable[[_Checker, gs.Node], None]] = {
    **rules.RULES,
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


def run_from_args(args: argparse.Namespace) -> int:
    """The report of ``args.model`` (default: the chosen pipeline's export); exit 1 when a build is blocked."""
    report = check_file(args.model or args.loaded.layout.onnx("fp32"), max_batch=args.max_batch)
    print(json.dumps(report.to_dict(), indent=2) if args.json else report.format_text())
    return 1 if report.blocking else 0
