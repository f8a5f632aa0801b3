"""Every graph pass by name: the one registry, the one name check, and the default order.

Parameter-free passes are in :data:`PASSES`; the two that need the pipeline's core config
(``stable_io_names``, ``batch_dimension``) are in :data:`CONFIG_PASSES` and are bound to the
config's names and dims by :func:`bound_passes` (``builders.fix_onnx.FixOptions``). Every
name a user or the code gives — ``fix --passes``, a recipe's ``[fix] passes`` (checked by
``builders.export``), the ``fix`` hints of
``builders.trt_compat`` — goes through :func:`check_names`.

Passes run here (:func:`apply_passes`) are not verified; ``builders.fix_onnx.fix_model``
runs the same passes and compares onnxruntime's outputs before and after each one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Protocol

import onnx
import onnx_graphsurgeon as gs

from builders import BuildError
from builders.passes import batch, cleanup, custom_ops, einsum, onnx_io
from builders.passes.graph import GraphPass, PassError


class PassOptions(Protocol):
    """What the config-bound passes read (``builders.fix_onnx.FixOptions`` has it)."""

    @property
    def input_names(self) -> tuple[str, ...] | None: ...
    @property
    def output_names(self) -> tuple[str, ...] | None: ...
    @property
    def input_dims(self) -> tuple[tuple[int, ...], ...] | None: ...  # without the batch dim
    @property
    def output_dims(self) -> tuple[tuple[int, ...], ...] | None: ...


def _stable_io_names(graph: gs.Graph, options: PassOptions) -> int:
    if options.input_names is None or options.output_names is None:
        raise PassError("stable_io_names needs the core config's input/output names")
    return batch.stable_io_names(graph, options.input_names, options.output_names)


def _batch_dimension(graph: gs.Graph, options: PassOptions) -> int:
    return batch.set_batch_dimension(graph, options.input_dims, options.output_dims)


PASSES: dict[str, GraphPass] = {
    "custom_op_rewrites": custom_ops.custom_op_rewrites,
    "fold_constants_and_cleanup": cleanup.fold_constants_and_cleanup,
    "remove_noops": cleanup.remove_noops,
    "fuse_pad_into_conv": cleanup.fuse_pad_into_conv,
    "reduce_mean_to_global_average_pool": cleanup.reduce_mean_to_global_average_pool,
    "einsum_to_matmul": einsum.einsum_to_matmul,
    "batch_reshape_placeholder": batch.batch_reshape_placeholder,
    "cast_nonzero_input": cleanup.cast_nonzero_input,
    "integer_clip_to_min_max": cleanup.integer_clip_to_min_max,
}

# name -> the pass with the core config as its second argument.
CONFIG_PASSES: dict[str, Callable[[gs.Graph, PassOptions], int]] = {
    "stable_io_names": _stable_io_names,
    "batch_dimension": _batch_dimension,
}

DEFAULT_PASSES: tuple[str, ...] = (
    "custom_op_rewrites",
    "fold_constants_and_cleanup",
    "remove_noops",
    "fuse_pad_into_conv",
    "reduce_mean_to_global_average_pool",
    "einsum_to_matmul",
    "stable_io_names",
    "batch_dimension",
    # After batch_dimension: it needs the symbolic batch on the inputs to tell batch-pinned Reshapes.
    "batch_reshape_placeholder",
)

# Registered, run only when named (fix --passes, a recipe's [fix] passes): rewrites TensorRT's ONNX parser does not
# need (it takes NonZero on BOOL and Clip on INT32/INT64: builders/tensorrt_onnx_ops.py), for a runtime or tool that does.
OPTIONAL_PASSES: tuple[str, ...] = ("cast_nonzero_input", "integer_clip_to_min_max")


class UnknownPassError(BuildError):
    """A pass name that is not registered (a user error: exit 2)."""


def names() -> list[str]:
    """Every registered pass name, sorted."""
    return sorted({*PASSES, *CONFIG_PASSES})


def check_names(requested: Iterable[str], where: str = "") -> list[str]:
    """``requested`` as a list when every name is registered; else :class:`UnknownPassError`.

    ``where`` (e.g. ``"pipeline.toml [fix] passes"``) prefixes the message.
    """
    requested = list(requested)
    known = names()
    unknown = [name for name in requested if name not in known]
    if unknown:
        prefix = f"{where}: " if where else ""
        raise UnknownPassError(f"{prefix}unknown pass(es) {', '.join(unknown)}; known: {', '.join(known)}")
    return requested


def bound_passes(options: PassOptions | None) -> dict[str, GraphPass]:
    """Every pass by name, the config-bound ones with ``options`` filled in.

    Without ``options`` a config-bound pass raises :class:`PassError` when it runs.
    """
    passes = dict(PASSES)
    for name, function in CONFIG_PASSES.items():
        passes[name] = _bind(name, function, options)
    return passes


def _bind(name: str, function: Callable[[gs.Graph, PassOptions], int], options: PassOptions | None) -> GraphPass:
    def bound(graph: gs.Graph) -> int:
        if options is None:
            raise PassError(f"{name} needs the core config's names and dims: run it with `python -m builders fix`")
        return function(graph, options)

    bound.__name__ = bound.__qualname__ = name
    return bound


def apply_passes(
    model: onnx.ModelProto, requested: Sequence[str], options: PassOptions | None = None
) -> tuple[onnx.ModelProto, dict[str, int]]:
    """Run the named passes in order, unverified; returns the new model and each pass's rewrite count.

    Shapes are inferred first so that passes can read ranks and dtypes.
    """
    requested = check_names(requested)
    passes = bound_passes(options)
    graph = gs.import_onnx(onnx.shape_inference.infer_shapes(model))
    counts = {name: passes[name](graph) for name in requested}
    return onnx_io.export_with_metadata(graph, model), counts
