"""Generic cleanups: constant folding, no-op removal, Pad->Conv fusion, ReduceMean->GlobalAveragePool.

The matchers (``noop_reason``, ``pad_fusable_into_conv``) are public so that
``python -m builders check`` reports exactly what these passes would repair.
"""

from __future__ import annotations

import numpy as np
import onnx_graphsurgeon as gs

from builders.passes.graph import STANDARD_DOMAINS, bypass, constant_values, graph_opset, is_absent, known_dim, onnx_type

# --------------------------------------------------------------------------- fold_constants_and_cleanup


def fold_constants_and_cleanup(graph: gs.Graph) -> int:
    """Fold constant subgraphs, drop unused nodes/tensors, sort topologically.

    Before::

        Shape(x) -> Gather -> ... -> Pad(pads=<computed>)   (x has static dims)
        dangling nodes whose outputs nothing reads

    After::

        Pad(pads=<constant>), dangling nodes removed

    Returns the number of nodes removed.
    """
    before = len(graph.nodes)
    graph.fold_constants().cleanup().toposort()
    return before - len(graph.nodes)


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
        if known_dim(dim) != requested:
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
        pads = _pads(node, graph_opset(graph))
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
        if noop_reason(node, graph) and bypass(graph, node):
            removed += 1
    if removed:
        graph.cleanup().toposort()
    return removed


# --------------------------------------------------------------------------- fuse_pad_into_conv


def pad_fusable_into_conv(node: gs.Node, graph: gs.Graph) -> list[int] | None:
    """Spatial (begin..., end...) pads of a constant zero Pad whose only consumers are Convs' data inputs."""
    if node.op != "Pad" or not node.inputs or not node.outputs:
        return None
    opset = graph_opset(graph)
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


# --------------------------------------------------------------------------- reduce_mean_to_global_average_pool


_GLOBAL_AVERAGE_POOL_DTYPES = (np.float16, np.float32, np.float64)


def _is_float(dtype: object) -> bool:
    """A dtype GlobalAveragePool accepts (graphsurgeon may also give ``None`` or an ONNX type)."""
    try:
        return dtype is not None and np.dtype(dtype) in _GLOBAL_AVERAGE_POOL_DTYPES  # type: ignore[call-overload]
    except TypeError:
        return False


def _reduce_mean_axes(node: gs.Node) -> list[int] | None:
    """Constant axes of a ReduceMean: attribute (opset < 18) or second input (opset >= 18)."""
    if "axes" in node.attrs:
        return [int(axis) for axis in node.attrs["axes"]]
    if len(node.inputs) > 1 and isinstance(node.inputs[1], gs.Constant):
        return [int(axis) for axis in np.asarray(node.inputs[1].values).reshape(-1)]
    return None  # no axes (reduce all) or computed at run time


def reduce_mean_to_global_average_pool(graph: gs.Graph) -> int:
    """Replace a spatial ``ReduceMean`` (all axes after N, C, keepdims=1) by ``GlobalAveragePool``.

    Before::

        x [N, C, H, W] --ReduceMean(axes=[2, 3] or [-1, -2], keepdims=1)--> y [N, C, 1, 1]
        (opset 18: axes is a constant second input instead of an attribute)

    After::

        x [N, C, H, W] --GlobalAveragePool--> y [N, C, 1, 1]

    The same arithmetic, expressed as the op TensorRT and quantizers treat as
    a pooling layer. Skipped: keepdims=0, axes that are not exactly the
    spatial ones, axes computed at run time, input rank or dtype unknown, or
    a non-float dtype.
    """
    rewrites = 0
    for node in graph.nodes:
        if node.op != "ReduceMean" or not node.inputs or len(node.outputs) != 1:
            continue
        data = node.inputs[0]
        if int(node.attrs.get("keepdims", 1)) != 1 or data.shape is None or len(data.shape) < 3:
            continue
        if not _is_float(data.dtype):
            continue
        axes = _reduce_mean_axes(node)
        rank = len(data.shape)
        if axes is None or sorted(axis % rank for axis in axes) != list(range(2, rank)):
            continue
        node.op = "GlobalAveragePool"
        node.attrs.clear()
        node.inputs = [data]  # an axes input left unused is removed by cleanup
        rewrites += 1
    if rewrites:
        graph.cleanup()
    return rewrites


# --------------------------------------------------------------------------- cast_nonzero_input


def _is_bool(dtype: object) -> bool:
    try:
        return dtype is not None and np.dtype(dtype) == np.bool_  # type: ignore[call-overload]
    except TypeError:
        return False


def cast_nonzero_input(graph: gs.Graph) -> int:
    """Give ``NonZero`` a float input where it has a BOOL one (an optional clean-up: TensorRT's parser takes BOOL).

    Before::

        mask [...] (BOOL) --NonZero--> indices

    After::

        mask [...] (BOOL) --Where(mask, 1.0, 0.0)--> [...] (FLOAT) --NonZero--> indices

    The same indices: a true element is 1.0, a false one 0.0. (A ``Where`` of constants, not a
    ``Cast``: the FP16 rung's converter turns the constants and the tensor into FP16 together.)
    Ultralytics' ``export(nms=True)`` graphs select their detections this way. TensorRT's ONNX parser
    imports NonZero on BOOL as it is (its importer lists kBOOL, and ``INonZeroLayer`` takes it):
    this is for a runtime or tool that wants a float mask; it is not in the default passes.
    """
    rewrites = 0
    as_floats: dict[str, gs.Variable] = {}  # one Where per mask, however many NonZero read it
    for node in list(graph.nodes):
        if node.op != "NonZero" or not node.inputs or not _is_bool(node.inputs[0].dtype):
            continue
        source = node.inputs[0]
        if source.name not in as_floats:
            as_float = gs.Variable(f"{source.name}_as_float", dtype=np.float32, shape=source.shape)
            one = gs.Constant(f"{node.name}_one", np.array(1.0, dtype=np.float32))
            zero = gs.Constant(f"{node.name}_zero", np.array(0.0, dtype=np.float32))
            graph.nodes.append(gs.Node("Where", name=f"{node.name}_as_float", inputs=[source, one, zero], outputs=[as_float]))
            as_floats[source.name] = as_float
        node.inputs[0] = as_floats[source.name]
        rewrites += 1
    if rewrites:
        graph.toposort()
    return rewrites


def _is_integer(dtype: object) -> bool:
    try:
        return dtype is not None and np.issubdtype(np.dtype(dtype), np.integer)  # type: ignore[call-overload]
    except TypeError:
        return False


def integer_clip_to_min_max(graph: gs.Graph) -> int:
    """Write ``Clip`` on integers as ``Max`` then ``Min`` (an optional clean-up: TensorRT's parser does that itself).

    Before::

        x (INT64) --Clip(x, low, high)--> y

    After::

        x (INT64) --Max(x, low)--> --Min(., high)--> y

    The same values (Clip is defined as exactly that); an absent bound is left out. Ultralytics'
    ``export(nms=True, dynamic=True, batch=B)`` graphs clamp the padding of a smaller batch this way.
    TensorRT's Clip importer builds an INT32/INT64 Clip as elementwise max and min already: this is
    for a runtime or tool without an integer Clip; it is not in the default passes.
    """
    rewrites = 0
    for node in list(graph.nodes):
        if node.op != "Clip" or not node.inputs or not _is_integer(node.inputs[0].dtype):
            continue
        value, output = node.inputs[0], node.outputs[0]
        bounds = [
            (op, node.inputs[index])
            for op, index in (("Max", 1), ("Min", 2))
            if len(node.inputs) > index and not is_absent(node.inputs[index])
        ]
        node.outputs = []
        if not bounds:  # Clip without bounds: the input itself
            graph.nodes.append(gs.Node("Identity", name=f"{node.name}_identity", inputs=[value], outputs=[output]))
        for step, (op, bound) in enumerate(bounds):
            last = step == len(bounds) - 1
            result = output if last else gs.Variable(f"{node.name}_{op.lower()}", dtype=value.dtype, shape=value.shape)
            graph.nodes.append(gs.Node(op, name=f"{node.name}_{op.lower()}", inputs=[value, bound], outputs=[result]))
            value = result
        rewrites += 1
    if rewrites:
        graph.cleanup().toposort()
    return rewrites
