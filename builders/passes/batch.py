"""The batch dimension: a symbolic batch on the graph's inputs and outputs, and Reshapes that follow it.

``batch_reshape_placeholder`` (with ``pinned_batch_reshapes``) replaces Reshape targets that
compute or pin the batch; ``set_batch_dimension`` (registered as ``batch_dimension``) and
``stable_io_names`` take the core config's names and dims and are bound by
:mod:`builders.passes.registry`. ``batch_reshape_target`` is public so that
``python -m builders check`` reports exactly what the pass would repair.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx
import onnx_graphsurgeon as gs

from builders.passes.graph import BATCH_DIM, Names, PassError, constant_values, is_absent, known_dim

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
        wanted, have = known_dim(source.shape[index]), known_dim(data.shape[position])
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
        node.inputs[1] = gs.Constant(Names(graph)(f"{node.name or 'reshape'}_shape"), target)
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
            node.inputs[1] = gs.Constant(Names(graph)(f"{node.name or 'reshape'}_batch_shape"), target)
            changed += 1
        if not changed:
            break
        rewritten += changed
    if rewritten:
        graph.cleanup().toposort()
    return rewritten


# --------------------------------------------------------------------------- config-bound passes (bound in builders.passes.registry)


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
                other.name = Names(graph)(f"{name}_renamed")
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
                known = known_dim(dim)
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
