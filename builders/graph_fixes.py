"""Graph-surgery passes that make an ONNX model TensorRT-ready (onnx-graphsurgeon).

Each pass has the :data:`builders.graph_passes.GraphPass` shape: it takes a
``gs.Graph``, rewrites it in place and returns how many rewrites it made.
The parameter-free ones are registered in ``graph_passes.PASSES``; the two
that need the core config (``stable_io_names``, ``batch_dimension``) are bound
by :mod:`builders.fix_onnx`. Passes never change what the model computes:
``fix_onnx`` runs the model on onnxruntime before and after every pass that
rewrote something and fails when the outputs differ.

The matchers (``noop_reason``, ``pad_fusable_into_conv``, ``batch_reshape_target``,
``einsum_plan``) are public so that ``python -m builders check`` reports
exactly what these passes would repair.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
import onnx_graphsurgeon as gs

from builders.passes import convolution_2d_transpose_bias as transpose_conv_pass

STANDARD_DOMAINS = ("", "ai.onnx")
BATCH_DIM = "batch"


class PassError(ValueError):
    """A pass was asked to do something the model does not allow (e.g. names or dims that contradict it)."""


# --------------------------------------------------------------------------- helpers


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


def _known_dim(dim: object) -> int | str | None:
    """A dim as an int, a symbolic name, or None when unknown."""
    if isinstance(dim, (int, np.integer)):
        return int(dim) if dim >= 0 else None
    if isinstance(dim, str) and dim and not dim.startswith("unk__"):
        return dim
    return None


def _static_dims(shape: Sequence[object] | None) -> list[int] | None:
    if shape is None:
        return None
    dims = [_known_dim(dim) for dim in shape]
    return [int(dim) for dim in dims] if all(isinstance(dim, int) for dim in dims) else None  # type: ignore[arg-type]


def _opset(graph: gs.Graph) -> int:
    return int(graph.opset) if graph.opset is not None else 1


class _Names:
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


def _bypass(graph: gs.Graph, node: gs.Node) -> bool:
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


# --------------------------------------------------------------------------- remove_noops


def _pads(node: gs.Node, opset: int) -> np.ndarray | None:
    """A Pad's constant pads (attribute before opset 11, input from 11)."""
    if opset < 11 or "pads" in node.attrs:
        return np.asarray(node.attrs.get("pads", []), dtype=np.int64)
    return constant_values(node.inputs[1]) if len(node.inputs) > 1 else None


def _reshape_is_noop(node: gs.Node) -> bool:
    data, values = node.inputs[0], constant_values(node.inputs[1]) if len(node.inputs) > 1 else None
    if values is None or data.shape is None:
        return False
    allow_zero = int(node.attrs.get("allowzero", 0)) == 1
    target = [int(value) for value in values.reshape(-1)]
    if len(target) != len(data.shape) or target.count(-1) > 1:
        return False
    for requested, dim in zip(target, data.shape):
        if requested == -1 or (requested == 0 and not allow_zero):
            continue  # -1 resolves to the one remaining dim; 0 copies the input dim
        if _known_dim(dim) != requested:
            return False
    return True


def noop_reason(node: gs.Node, graph: gs.Graph) -> str | None:
    """Why ``node`` computes the identity of its first input, or None if it does not (or cannot be told)."""
    if not node.inputs or not node.outputs or node.domain not in (None, *STANDARD_DOMAINS):
        return None
    data = node.inputs[0]
    if node.op == "Identity":
        return "Identity"
    if node.op == "Dropout":
        mask_used = len(node.outputs) > 1 and (node.outputs[1].outputs or node.outputs[1] in graph.outputs)
        training = node.inputs[2] if len(node.inputs) > 2 and not is_absent(node.inputs[2]) else None
        training_value = constant_values(training) if training is not None else np.array(False)
        if mask_used or training_value is None or bool(np.asarray(training_value).reshape(-1)[0]):
            return None
        return "Dropout in inference mode"
    if node.op == "Cast":
        source, target = onnx_type(data.dtype), int(node.attrs.get("to", -1))
        return "Cast to the type it already has" if source is not None and source == target else None
    if node.op == "Reshape":
        return "Reshape to the shape it already has" if _reshape_is_noop(node) else None
    if node.op == "Pad":
        pads = _pads(node, _opset(graph))
        return "Pad with all pads 0" if pads is not None and pads.size and not pads.any() else None
    if node.op == "Transpose":
        perm = node.attrs.get("perm")
        return "Transpose with the identity permutation" if perm is not None and list(perm) == list(range(len(perm))) else None
    if node.op == "Concat" and len(node.inputs) == 1:
        return "Concat of a single input"
    return None


def remove_noops(graph: gs.Graph) -> int:
    """Remove nodes that return their input unchanged.

    Before::

        x --Identity--> a --Dropout(inference)--> b --Cast(to=float, x float)--> c
          --Reshape(to x's own shape)--> d --Pad(pads=0)--> e --Transpose(perm=identity)--> y

    After::

        x --> (whatever consumed y)

    A no-op whose output is a graph output is removed by letting the node
    before it write that output (the output name is kept); one between a
    graph input and a graph output is left.
    """
    removed = 0
    for node in list(graph.nodes):
        if noop_reason(node, graph) and _bypass(graph, node):
            removed += 1
    if removed:
        graph.cleanup().toposort()
    return removed


# --------------------------------------------------------------------------- fuse_pad_into_conv


def pad_fusable_into_conv(node: gs.Node, graph: gs.Graph) -> list[int] | None:
    """Spatial (begin..., end...) pads of a constant zero Pad whose only consumers are Convs' data inputs."""
    if node.op != "Pad" or not node.inputs or not node.outputs:
        return None
    opset = _opset(graph)
    if node.attrs.get("mode", "constant") not in ("constant", b"constant"):
        return None
    pads = _pads(node, opset)
    data, result = node.inputs[0], node.outputs[0]
    if pads is None or data.shape is None or result in graph.outputs or not result.outputs:
        return None
    rank = len(data.shape)
    if opset < 11:
        value = float(node.attrs.get("value", 0.0))
    else:
        value_tensor = node.inputs[2] if len(node.inputs) > 2 and not is_absent(node.inputs[2]) else None
        value_array = constant_values(value_tensor) if value_tensor is not None else np.zeros(1)
        if value_array is None:
            return None
        value = float(np.asarray(value_array).reshape(-1)[0]) if value_array.size else 0.0
        if len(node.inputs) > 3 and not is_absent(node.inputs[3]):  # opset 18 axes: expand to all axes
            axes = constant_values(node.inputs[3])
            if axes is None:
                return None
            full = np.zeros(2 * rank, dtype=np.int64)
            for index, axis in enumerate(int(a) % rank for a in axes.reshape(-1)):
                full[axis] = pads[index]
                full[rank + axis] = pads[len(axes.reshape(-1)) + index]
            pads = full
    pads = pads.reshape(-1)
    if value != 0.0 or rank < 3 or pads.size != 2 * rank or (pads < 0).any():
        return None
    if pads[0] or pads[1] or pads[rank] or pads[rank + 1]:  # batch or channel padding
        return None
    for consumer in result.outputs:
        if consumer.op != "Conv" or consumer.inputs[0] is not result or consumer.inputs.count(result) != 1:
            return None
        if consumer.attrs.get("auto_pad", "NOTSET") not in ("NOTSET", b"NOTSET"):
            return None
    return [int(p) for p in pads[2:rank]] + [int(p) for p in pads[rank + 2 :]]


def fuse_pad_into_conv(graph: gs.Graph) -> int:
    """Merge a constant zero ``Pad`` on spatial axes into the ``pads`` of the ``Conv`` it feeds.

    Before::

        x --Pad(mode=constant, value=0, pads=[0,0,t,l, 0,0,b,r])--> p --Conv(pads=[0,0,0,0])--> y

    After::

        x --Conv(pads=[t,l,b,r])--> y

    This is TF-"SAME" padding after folding (:func:`fold_constants_and_cleanup`):
    TensorRT and quantizers then see one convolution with static padding
    instead of a separate padding layer between the activation's Q/DQ and the
    Conv. Skipped: non-zero or non-constant pad values, other modes, negative
    pads, batch/channel padding, ``auto_pad`` Convs, and a Pad whose output
    also feeds anything other than a Conv's data input.
    """
    fused = 0
    for node in list(graph.nodes):
        spatial = pad_fusable_into_conv(node, graph)
        if spatial is None:
            continue
        data, result = node.inputs[0], node.outputs[0]
        for conv in list(result.outputs):
            conv_pads = [int(p) for p in conv.attrs.get("pads", [0] * len(spatial))]
            conv.attrs["pads"] = [conv_pads[i] + spatial[i] for i in range(len(spatial))]
            conv.inputs[0] = data
        node.inputs.clear()
        node.outputs.clear()
        fused += 1
    if fused:
        graph.cleanup().toposort()
    return fused


# --------------------------------------------------------------------------- batch_reshape_placeholder


def _shape_dim(tensor: gs.Tensor) -> tuple[gs.Tensor, int] | None:
    """``(x, i)`` when ``tensor`` is the 1-element ``Shape(x)[i]`` (via Gather/Slice, optional Unsqueeze/Cast)."""
    node = tensor.inputs[0] if len(tensor.inputs) == 1 else None
    while node is not None and node.op in ("Unsqueeze", "Cast", "Squeeze"):
        node = node.inputs[0].inputs[0] if len(node.inputs[0].inputs) == 1 else None
    if node is None or node.op not in ("Gather", "Slice"):
        return None
    shape_node = node.inputs[0].inputs[0] if len(node.inputs[0].inputs) == 1 else None
    if shape_node is None or shape_node.op != "Shape":
        return None
    start = int(shape_node.attrs.get("start", 0))
    if node.op == "Gather":
        index = constant_values(node.inputs[1])
        if index is None or index.size != 1 or int(node.attrs.get("axis", 0)) != 0:
            return None
        position = int(index.reshape(-1)[0])
    else:
        starts = constant_values(node.inputs[1])
        ends = constant_values(node.inputs[2])
        if starts is None or ends is None or starts.size != 1 or ends.size != 1:
            return None
        if len(node.inputs) > 3 and not is_absent(node.inputs[3]):
            axes = constant_values(node.inputs[3])
            if axes is None or axes.reshape(-1).tolist() != [0]:
                return None
        if len(node.inputs) > 4 and not is_absent(node.inputs[4]):
            steps = constant_values(node.inputs[4])
            if steps is None or steps.reshape(-1).tolist() != [1]:
                return None
        position = int(starts.reshape(-1)[0])
        if int(ends.reshape(-1)[0]) != position + 1 or position < 0:
            return None
    source = shape_node.inputs[0]
    if source.shape is None or position < 0:
        return None
    return source, start + position


def batch_reshape_target(node: gs.Node) -> np.ndarray | None:
    """A constant target for a Reshape whose runtime shape only copies dims of its own input.

    ``x.view(x.size(0), -1)`` exports as ``Reshape(x, Concat(Unsqueeze(Gather(Shape(y), 0)), [-1]))``;
    when ``y``'s dim 0 and ``x``'s dim 0 are the same (symbolic) dim, the target is ``[0, -1]``
    (0 = copy the input dim).
    """
    if node.op != "Reshape" or len(node.inputs) < 2 or int(node.attrs.get("allowzero", 0)) == 1:
        return None
    data, shape = node.inputs[0], node.inputs[1]
    if constant_values(shape) is not None or len(shape.inputs) != 1 or data.shape is None:
        return None
    concat = shape.inputs[0]
    if concat.op != "Concat" or int(concat.attrs.get("axis", 0)) not in (0, -1):
        return None
    entries: list[int] = []
    copied = 0
    for part in concat.inputs:
        values = constant_values(part)
        if values is not None:
            entries.extend(int(v) for v in values.reshape(-1))
            continue
        dim = _shape_dim(part)
        position = len(entries)
        if dim is None or position >= len(data.shape):
            return None
        source, index = dim
        if index >= len(source.shape):
            return None
        wanted, have = _known_dim(source.shape[index]), _known_dim(data.shape[position])
        if wanted is None or wanted != have:
            return None
        entries.append(0)
        copied += 1
    return np.array(entries, dtype=np.int64) if copied else None


def batch_reshape_placeholder(graph: gs.Graph) -> int:
    """Replace a Reshape's runtime-computed target that copies input dims by a constant with 0s.

    Before::

        y --Shape--> Gather(0) --Unsqueeze--+
                                 [-1] ------+--Concat--> s
        x [batch, 1280, 1, 1] --Reshape(s)--> z        (y's dim 0 is x's dim 0: "batch")

    After::

        x --Reshape([0, -1])--> z                       (0 copies the batch dim)

    Folding cannot remove this shape subgraph because the batch is dynamic;
    the Reshape's own "copy this dim" placeholder says the same thing without
    Shape/Gather ops. Needs shapes inferred (run after folding, so that the
    batch name reaches ``x``).
    """
    rewritten = 0
    for node in graph.nodes:
        target = batch_reshape_target(node)
        if target is None:
            continue
        node.inputs[1] = gs.Constant(_Names(graph)(f"{node.name or 'reshape'}_shape"), target)
        rewritten += 1
    if rewritten:
        graph.cleanup().toposort()
    return rewritten + pinned_batch_reshapes(graph)


def pinned_batch_target(node: gs.Node, input_shape: Sequence[object] | None) -> np.ndarray | None:
    """A constant Reshape target that pins dim 0 to 1 while its input's dim 0 is the symbolic batch.

    Converters that trace a batch-1 graph (tf2onnx from TFLite) write ``[1, C, 1, 1]``; with
    a dynamic batch it must be ``[0, C, 1, 1]`` (0 copies the input's dim 0, ``allowzero`` 0).
    """
    if node.op != "Reshape" or len(node.inputs) < 2 or int(node.attrs.get("allowzero", 0)) == 1:
        return None
    target = constant_values(node.inputs[1])
    if target is None or target.ndim != 1 or len(target) == 0 or int(target[0]) != 1:
        return None
    # Only the batch is dynamic (the config makes every other dim static), so a dim 0 that is
    # not a static integer ("batch", or "unk__N" where inference lost the name) is the batch.
    if not input_shape or (isinstance(input_shape[0], (int, np.integer)) and int(input_shape[0]) > 0):
        return None
    fixed = target.astype(np.int64).copy()
    fixed[0] = 0
    return fixed


def pinned_batch_reshapes(graph: gs.Graph, max_rounds: int = 64) -> int:
    """Unpin batch-1 constant Reshape targets on the batch path (see :func:`pinned_batch_target`).

    Before::

        x ["batch", 96, 1, 1] --Reshape([1, 1, 1, 96])--> y      (fails for batch > 1)

    After::

        x ["batch", 96, 1, 1] --Reshape([0, 1, 1, 96])--> y

    Needs a symbolic batch on the graph inputs (run after ``batch_dimension``).
    Shapes are re-inferred after each round, so a Reshape fed by an unpinned one
    is found in the next round.
    """
    rewritten = 0
    io_names = {tensor.name for tensor in [*graph.inputs, *graph.outputs]}
    for _ in range(max_rounds):
        for tensor in graph.tensors().values():  # stale batch-1 shapes would win over inference
            if isinstance(tensor, gs.Variable) and tensor.name not in io_names:
                tensor.shape = None
        model = gs.export_onnx(graph)
        try:
            model = onnx.shape_inference.infer_shapes(model)
        except Exception:
            return rewritten
        shapes: dict[str, list[object]] = {}
        for value in [*model.graph.value_info, *model.graph.input]:
            dims = value.type.tensor_type.shape.dim
            shapes[value.name] = [d.dim_param if d.dim_param else (d.dim_value if d.HasField("dim_value") else None) for d in dims]
        changed = 0
        for node in graph.nodes:
            target = pinned_batch_target(node, shapes.get(node.inputs[0].name) if node.inputs else None)
            if target is None:
                continue
            node.inputs[1] = gs.Constant(_Names(graph)(f"{node.name or 'reshape'}_batch_shape"), target)
            changed += 1
        if not changed:
            break
        rewritten += changed
    if rewritten:
        graph.cleanup().toposort()
    return rewritten


# --------------------------------------------------------------------------- einsum_to_matmul


@dataclass(frozen=True)
class EinsumPlan:
    """An Einsum as Transpose/Reshape -> MatMul -> Reshape/Transpose (labels after ellipsis expansion)."""

    terms: tuple[tuple[str, ...], ...]
    output: tuple[str, ...]
    batch: tuple[str, ...] = ()
    left_free: tuple[str, ...] = ()
    contracted: tuple[str, ...] = ()
    right_free: tuple[str, ...] = ()
    sizes: Mapping[str, int] | None = None  # static sizes of grouped labels, when a Reshape is needed

    @property
    def needs_reshape(self) -> bool:
        return len(self.terms) == 2 and not (len(self.left_free) == 1 and len(self.contracted) == 1 and len(self.right_free) == 1)


def _expand_einsum(equation: str, ranks: Sequence[int | None]) -> tuple[list[list[str]], list[str]] | str:
    """Labels per operand and for the output, with ``...`` expanded into named labels."""
    equation = equation.replace(" ", "")
    lhs, arrow, rhs = equation.partition("->")
    raw_terms = lhs.split(",")
    if len(raw_terms) != len(ranks):
        return f"the equation has {len(raw_terms)} operands, the node {len(ranks)}"
    ellipsis_counts: list[int] = []
    for raw, rank in zip(raw_terms, ranks):
        if raw.count("...") > 1 or "." in raw.replace("...", ""):
            return f"malformed term {raw!r}"
        if "..." in raw:
            if rank is None:
                return "an operand with '...' has unknown rank"
            ellipsis_counts.append(rank - (len(raw) - 3))
            if ellipsis_counts[-1] < 0:
                return f"term {raw!r} has more labels than its operand's rank {rank}"
        elif rank is not None and rank != len(raw):
            return f"term {raw!r} does not match its operand's rank {rank}"
    width = max(ellipsis_counts, default=0)
    ellipsis = [f"…{k}" for k in range(width)]
    terms = []
    for raw, rank in zip(raw_terms, ranks):
        if "..." in raw:
            before, after = raw.split("...")
            count = (rank or 0) - len(before) - len(after)
            terms.append(list(before) + ellipsis[width - count :] + list(after))
        else:
            terms.append(list(raw))
    if arrow:
        if rhs.count("...") > 1:
            return f"malformed output {rhs!r}"
        before, _, after = rhs.partition("...")
        output = list(before) + (ellipsis if "..." in rhs else []) + list(after)
    else:
        counts: dict[str, int] = {}
        for term in terms:
            for label in term:
                counts[label] = counts.get(label, 0) + 1
        output = ellipsis + sorted(label for label, n in counts.items() if n == 1 and not label.startswith("…"))
    return terms, output


def einsum_plan(node: gs.Node) -> EinsumPlan | str:
    """How ``einsum_to_matmul`` rewrites this Einsum, or the reason it cannot."""
    if node.op != "Einsum" or "equation" not in node.attrs:
        return "not an Einsum"
    equation = node.attrs["equation"]
    equation = equation.decode() if isinstance(equation, bytes) else str(equation)
    ranks = [len(t.shape) if t.shape is not None else None for t in node.inputs]
    expanded = _expand_einsum(equation, ranks)
    if isinstance(expanded, str):
        return expanded
    terms, output = expanded
    for term in terms:
        if len(set(term)) != len(term):
            return "a label repeats within one operand (diagonal)"
    if len(set(output)) != len(output) or any(all(label not in t for t in terms) for label in output):
        return "the output has repeated labels or labels no operand has"
    if len(terms) == 1:
        if sorted(terms[0]) != sorted(output):
            return "a one-operand Einsum that sums over labels (ReduceSum), not a permutation"
        return EinsumPlan(terms=(tuple(terms[0]),), output=tuple(output))
    if len(terms) != 2:
        return f"{len(terms)} operands (only one or two are rewritten)"
    left, right = terms
    for label in (*left, *right):
        if label not in output and (label in left) != (label in right):
            return f"label {label!r} is summed within one operand (needs a ReduceSum first)"
    plan = EinsumPlan(
        terms=(tuple(left), tuple(right)),
        output=tuple(output),
        batch=tuple(label for label in output if label in left and label in right),
        left_free=tuple(label for label in left if label not in right),
        contracted=tuple(label for label in left if label in right and label not in output),
        right_free=tuple(label for label in right if label not in left),
    )
    if not plan.needs_reshape:
        return plan
    sizes: dict[str, int] = {}
    for term, tensor in zip(terms, node.inputs):
        for label, dim in zip(term, tensor.shape or []):
            if label in (*plan.left_free, *plan.contracted, *plan.right_free):
                value = _known_dim(dim)
                if not isinstance(value, int):
                    return f"label {label!r} is grouped by a Reshape and needs a static size"
                sizes[label] = value
    return dataclasses.replace(plan, sizes=sizes)


def _chain(graph: gs.Graph, names: _Names, base: str, op: str, inputs: list[gs.Tensor], attrs: Mapping[str, Any]) -> gs.Variable:
    output = gs.Variable(names(f"{base}/{op.lower()}_out"))
    graph.nodes.append(gs.Node(op=op, name=names(f"{base}/{op}"), attrs=dict(attrs), inputs=inputs, outputs=[output]))
    return output


def _rewrite_einsum(graph: gs.Graph, node: gs.Node, plan: EinsumPlan, names: _Names) -> None:
    base, result = node.name or "einsum", node.outputs[0]
    inputs = list(node.inputs)
    node.inputs.clear()
    node.outputs.clear()
    if len(plan.terms) == 1:
        perm = [plan.terms[0].index(label) for label in plan.output]
        graph.nodes.append(gs.Node("Transpose", names(f"{base}/Transpose"), {"perm": perm}, inputs, [result]))
        return
    left, right = inputs
    batch = list(plan.batch)
    left_order = batch + list(plan.left_free) + list(plan.contracted)
    right_order = batch + list(plan.contracted) + list(plan.right_free)
    operands = []
    for tensor, term, order in ((left, plan.terms[0], left_order), (right, plan.terms[1], right_order)):
        perm = [term.index(label) for label in order]
        if perm != list(range(len(perm))):
            tensor = _chain(graph, names, base, "Transpose", [tensor], {"perm": perm})
        operands.append(tensor)
    sizes = plan.sizes or {}
    if plan.needs_reshape:
        rows = math.prod(sizes[label] for label in plan.left_free)
        inner = math.prod(sizes[label] for label in plan.contracted)
        columns = math.prod(sizes[label] for label in plan.right_free)
        zeros = [0] * len(batch)
        for index, target in ((0, [*zeros, rows, inner]), (1, [*zeros, inner, columns])):
            shape = gs.Constant(names(f"{base}/shape{index}"), np.array(target, dtype=np.int64))
            operands[index] = _chain(graph, names, base, "Reshape", [operands[index], shape], {})
    product = _chain(graph, names, base, "MatMul", operands, {})
    current = batch + list(plan.left_free) + list(plan.right_free)
    if plan.needs_reshape:
        target = [0] * len(batch) + [sizes[label] for label in (*plan.left_free, *plan.right_free)]
        shape = gs.Constant(names(f"{base}/shape_out"), np.array(target, dtype=np.int64))
        product = _chain(graph, names, base, "Reshape", [product, shape], {})
    perm = [current.index(label) for label in plan.output]
    if perm != list(range(len(perm))):
        product = _chain(graph, names, base, "Transpose", [product], {"perm": perm})
    last = product.inputs[0]
    last.outputs[0] = result


def einsum_to_matmul(graph: gs.Graph) -> int:
    """Rewrite one- and two-operand ``Einsum`` into ``Transpose``/``Reshape``/``MatMul``.

    Before::

        q [b,h,i,d], k [b,h,j,d] --Einsum("bhid,bhjd->bhij")--> s

    After::

        k --Transpose(0,1,3,2)--> kT;  q, kT --MatMul--> s [b,h,i,j]

    Labels in both operands and the output are batch dims (MatMul broadcasts
    them), labels in both operands only are contracted, the rest are free;
    ``...`` is expanded from the operands' ranks. More than one free or
    contracted label per side is grouped with a Reshape (needs static sizes).
    A one-operand permutation becomes a Transpose. Left as Einsum (and
    reported by ``check``): diagonals, sums within one operand, 3+ operands.
    """
    names = _Names(graph)
    rewritten = 0
    for node in list(graph.nodes):
        if node.op != "Einsum" or node.domain not in (None, *STANDARD_DOMAINS):
            continue
        plan = einsum_plan(node)
        if isinstance(plan, EinsumPlan):
            _rewrite_einsum(graph, node, plan, names)
            rewritten += 1
    if rewritten:
        graph.cleanup().toposort()
    return rewritten


# --------------------------------------------------------------------------- custom_op_rewrites

MEDIAPIPE_DOMAIN = "mediapipe"

# (domain, op_type) -> a whole-graph pass that rewrites every such node into standard ONNX ops.
# MediaPipe's transposed convolution appears as mediapipe.Convolution2DTransposeBias (with
# attributes) or, from tf2onnx 1.17, as TFL_Convolution2DTransposeBias in the default domain with
# none: builders/passes/convolution_2d_transpose_bias.py handles both. Add entries for more ops.
CUSTOM_OP_REWRITES: dict[tuple[str, str], Callable[[gs.Graph], int]] = {
    (MEDIAPIPE_DOMAIN, "Convolution2DTransposeBias"): transpose_conv_pass.convolution_2d_transpose_bias,
    ("", "Convolution2DTransposeBias"): transpose_conv_pass.convolution_2d_transpose_bias,
    ("", "TFL_Convolution2DTransposeBias"): transpose_conv_pass.convolution_2d_transpose_bias,
}


def custom_op_rewrites(graph: gs.Graph) -> int:
    """Replace custom ops with standard ops through :data:`CUSTOM_OP_REWRITES`.

    Before::

        x --<domain>.<Op>--> y        (TensorRT has no importer for it: needs a plugin)

    After::

        x --(standard ONNX ops)--> y  (see each rewrite's docstring)

    Domains no node uses any more are dropped from the model's opset imports.
    onnxruntime cannot run the model before this pass, so ``fix`` cannot
    compare outputs for it; ``export`` instead compares the rewritten graph
    with the unfixed one run with a reference implementation of the op
    (``builders/passes/reference_ops.py``, onnxruntime-extensions).
    """
    passes = list(
        dict.fromkeys(rewrite for node in graph.nodes if (rewrite := CUSTOM_OP_REWRITES.get((node.domain or "", node.op))) is not None)
    )
    rewritten = 0
    for rewrite in passes:
        try:
            rewritten += rewrite(graph)
        except ValueError as error:
            raise PassError(f"custom_op_rewrites: {error}") from None
    if rewritten:
        graph.cleanup().toposort()
        used = {node.domain or "" for node in graph.nodes}
        graph.import_domains = [entry for entry in (graph.import_domains or []) if entry.domain in STANDARD_DOMAINS or entry.domain in used]
    return rewritten


# --------------------------------------------------------------------------- config-bound passes


def stable_io_names(graph: gs.Graph, input_names: Sequence[str], output_names: Sequence[str]) -> int:
    """Rename the graph's inputs and outputs, by position, to the core config's names.

    Before::

        input --...--> output

    After::

        images --...--> logits          (names from model_repository/core/config.pbtxt)

    A different tensor that already has one of the new names is renamed
    first (``<name>_renamed``). Raises :class:`PassError` when the counts differ.
    """
    renamed = 0
    for kind, tensors, names in (("inputs", graph.inputs, input_names), ("outputs", graph.outputs, output_names)):
        if len(tensors) != len(names):
            raise PassError(
                f"stable_io_names: the model has {len(tensors)} {kind}, the core config {len(names)} "
                f"({', '.join(names)}); leave this pass out (--passes) for a model that is not the core"
            )
        existing = graph.tensors()
        for tensor, name in zip(tensors, names):
            if tensor.name == name:
                continue
            other = existing.get(name)
            if other is not None and other is not tensor:
                other.name = _Names(graph)(f"{name}_renamed")
            tensor.name = name
            existing = graph.tensors()
            renamed += 1
    return renamed


def set_batch_dimension(
    graph: gs.Graph,
    input_dims: Sequence[Sequence[int]] | None = None,
    output_dims: Sequence[Sequence[int]] | None = None,
    batch_name: str = BATCH_DIM,
) -> int:
    """Give every graph input and output a symbolic batch dim 0, and static other dims.

    Before::

        input [1 | "N" | "unk__0", 3, "H", "W"] --...--> output ["s0", 1000]

    After::

        input ["batch", 3, 224, 224] --...--> output ["batch", 1000]

    Non-batch dims come from ``input_dims``/``output_dims`` (the core config's
    ``dims``, without the batch) where the model has them dynamic; a static
    dim that contradicts the config raises :class:`PassError`. Intermediate
    shapes are cleared (``fix`` re-infers them). The batch range
    (min/opt/max) is not a graph property: ``fix`` records it in the model's
    metadata (:mod:`builders.batch_profile`).
    """
    changed = 0
    for kind, tensors, all_dims in (("input", graph.inputs, input_dims), ("output", graph.outputs, output_dims)):
        for index, tensor in enumerate(tensors):
            if tensor.shape is None or len(tensor.shape) == 0:
                raise PassError(f"batch_dimension: {kind} '{tensor.name}' has no known rank")
            dims = list(all_dims[index]) if all_dims is not None and index < len(all_dims) else None
            if dims is not None and len(dims) != len(tensor.shape) - 1:
                raise PassError(
                    f"batch_dimension: {kind} '{tensor.name}' has rank {len(tensor.shape)}, the config gives dims {dims} (+ batch)"
                )
            shape = list(tensor.shape)
            new_shape: list[int | str] = [batch_name]
            for position, dim in enumerate(shape[1:]):
                known = _known_dim(dim)
                wanted = dims[position] if dims is not None else None
                if isinstance(known, int) and wanted is not None and known != wanted:
                    raise PassError(f"batch_dimension: {kind} '{tensor.name}' dim {position + 1} is {known}, the config says {wanted}")
                new_shape.append(wanted if wanted is not None and not isinstance(known, int) else dim)
            if new_shape != shape:
                tensor.shape = new_shape
                changed += 1
    if changed:
        boundary = {id(t) for t in (*graph.inputs, *graph.outputs)}
        for tensor in graph.tensors().values():
            if isinstance(tensor, gs.Variable) and id(tensor) not in boundary:
                tensor.shape = None
    return changed


__all__ = [
    "CUSTOM_OP_REWRITES",
    "EinsumPlan",
    "PassError",
    "batch_reshape_placeholder",
    "batch_reshape_target",
    "constant_values",
    "custom_op_rewrites",
    "einsum_plan",
    "einsum_to_matmul",
    "fuse_pad_into_conv",
    "noop_reason",
    "onnx_type",
    "pad_fusable_into_conv",
    "remove_noops",
    "set_batch_dimension",
    "stable_io_names",
]
