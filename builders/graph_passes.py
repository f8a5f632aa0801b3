"""ONNX graph rewrites with onnx-graphsurgeon, as small named passes.

A pass takes a ``gs.Graph``, rewrites it in place and returns how many
rewrites it made (0 = nothing to do). ``PASSES`` maps names to passes so
later steps can add their own; ``apply_passes`` runs a list of them on an
``onnx.ModelProto``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np
import onnx
import onnx_graphsurgeon as gs

from builders import graph_fixes
from builders.passes import onnx_io

GraphPass = Callable[[gs.Graph], int]

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


PASSES: dict[str, GraphPass] = {
    "reduce_mean_to_global_average_pool": reduce_mean_to_global_average_pool,
    "fold_constants_and_cleanup": fold_constants_and_cleanup,
    # TensorRT-readiness passes (builders/graph_fixes.py); the config-bound
    # stable_io_names and batch_dimension are bound by builders/fix_onnx.py.
    "custom_op_rewrites": graph_fixes.custom_op_rewrites,
    "batch_reshape_placeholder": graph_fixes.batch_reshape_placeholder,
    "remove_noops": graph_fixes.remove_noops,
    "fuse_pad_into_conv": graph_fixes.fuse_pad_into_conv,
    "einsum_to_matmul": graph_fixes.einsum_to_matmul,
}


def apply_passes(model: onnx.ModelProto, names: Iterable[str]) -> tuple[onnx.ModelProto, dict[str, int]]:
    """Run the named passes in order; returns the new model and each pass's rewrite count.

    Shapes are inferred first so that passes can read ranks and dtypes.
    """
    names = list(names)
    unknown = [name for name in names if name not in PASSES]
    if unknown:
        raise KeyError(f"unknown graph pass(es) {unknown}; known: {sorted(PASSES)}")
    graph = gs.import_onnx(onnx.shape_inference.infer_shapes(model))
    counts = {name: PASSES[name](graph) for name in names}
    return onnx_io.export_with_metadata(graph, model), counts
