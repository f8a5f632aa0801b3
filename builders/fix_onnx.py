"""The ``fix`` step: named graph-surgery passes (:mod:`builders.passes.registry`), each verified on onnxruntime.

``fix_model`` runs passes in order on an ``onnx.ModelProto``. After every
pass that rewrote something, the model before and the model after run on
onnxruntime (CPU, graph optimizations off) with the same seeded random input
(batch 2); outputs must agree within ``atol + rtol * |expected|`` or the step
fails and nothing is written. Between passes the model is exported and its
shapes re-inferred from scratch, so every pass sees fresh shapes.

A model that onnxruntime cannot run (a custom-domain op before
``custom_op_rewrites``) is not compared; the comparison starts from the first
model that runs, and the result is compared once more with that model.

The written model keeps the input's metadata and gains two
``metadata_props``: ``builders.fix`` (input sha256, passes and rewrite
counts) and, with ``batch_dimension``, the batch range
(:mod:`builders.batch_profile`).
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnx_graphsurgeon as gs

from builders import (
    BuildError,
    CheckFailed,
    Log,
    batch_profile,
    stderr_logger,
)
from builders.artifacts import atomic_write_bytes, sha256_bytes
from builders.passes import onnx_io, registry
from builders.passes.graph import STANDARD_DOMAINS, GraphPass, PassError
from vision_serving import model_config
from vision_serving.core_model import PROBE_SIZE
from vision_serving.model_config import ModelConfig

DEFAULT_ATOL = 1e-4
DEFAULT_RTOL = 1e-4
VERIFY_BATCH = 2
FIX_METADATA_KEY = "builders.fix"


class FixVerificationError(CheckFailed):
    """A pass changed what the model computes, or produced a model that does not load."""


log_to_stderr = stderr_logger("fix")


@dataclass(frozen=True)
class FixOptions:
    """What the config-bound passes and the verification need."""

    input_names: tuple[str, ...] | None = None
    output_names: tuple[str, ...] | None = None
    input_dims: tuple[tuple[int, ...], ...] | None = None  # without the batch dim
    output_dims: tuple[tuple[int, ...], ...] | None = None
    max_batch: int | None = None
    opt_batch: int | None = None
    atol: float = DEFAULT_ATOL
    rtol: float = DEFAULT_RTOL
    seed: int = 0

    @classmethod
    def from_config(cls, core: ModelConfig, max_batch: int | None = None, **overrides: Any) -> FixOptions:
        """Names and dims from the core config; max batch from ``max_batch`` or its ``max_batch_size``."""
        return cls(
            input_names=tuple(t.name for t in core.input),
            output_names=tuple(t.name for t in core.output),
            input_dims=tuple(tuple(int(d) for d in t.dims) for t in core.input),
            output_dims=tuple(tuple(int(d) for d in t.dims) for t in core.output),
            max_batch=max_batch if max_batch is not None else (core.max_batch_size or None),
            **overrides,
        )


@dataclass(frozen=True)
class PassResult:
    name: str
    rewrites: int
    nodes_before: int
    nodes_after: int
    max_abs_diff: float | None  # None: not compared (see note)
    note: str = ""


@dataclass
class FixResult:
    model: onnx.ModelProto
    passes: list[PassResult]
    op_counts_before: dict[str, int]
    op_counts_after: dict[str, int]
    max_abs_diff: float | None  # final model vs the first model onnxruntime could run
    unverified: list[str] = field(default_factory=list)

    @property
    def nodes_before(self) -> int:
        return sum(self.op_counts_before.values())

    @property
    def nodes_after(self) -> int:
        return sum(self.op_counts_after.values())


# --------------------------------------------------------------------------- passes


def parse_pass_list(text: str | None) -> list[str]:
    """``"a,b"`` -> ``["a", "b"]``; None -> ``registry.DEFAULT_PASSES``. Unknown names are a user error."""
    if text is None:
        return list(registry.DEFAULT_PASSES)
    names = [name.strip() for name in text.split(",") if name.strip()]
    if not names:
        raise BuildError("--passes is empty")
    return registry.check_names(names)


# --------------------------------------------------------------------------- onnxruntime


def _dims(value: onnx.ValueInfoProto) -> list[int | str | None]:
    return [d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in value.type.tensor_type.shape.dim]


def graph_inputs(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    initializers = {init.name for init in model.graph.initializer}
    return [value for value in model.graph.input if value.name not in initializers]


def random_feeds(model: onnx.ModelProto, options: FixOptions, batch: int = VERIFY_BATCH) -> list[np.ndarray]:
    """One seeded random array per graph input: dynamic dim 0 -> ``batch``, other dynamic dims from the config
    (``PROBE_SIZE`` where the config's is dynamic too)."""
    rng = np.random.default_rng(options.seed)
    feeds = []
    for index, value in enumerate(graph_inputs(model)):
        dims = _dims(value)
        shape = []
        for position, dim in enumerate(dims):
            if isinstance(dim, int) and dim > 0:
                shape.append(dim)
            elif position == 0:
                shape.append(batch)
            elif options.input_dims is not None and index < len(options.input_dims) and len(options.input_dims[index]) == len(dims) - 1:
                size = options.input_dims[index][position - 1]
                shape.append(size if size > 0 else PROBE_SIZE)  # dynamic in the config too: the CPU core's load-time probe size
            else:
                raise BuildError(f"cannot verify: input '{value.name}' dim {position} is dynamic and the core config gives no size for it")
        dtype = onnx.helper.tensor_dtype_to_np_dtype(value.type.tensor_type.elem_type)
        if np.issubdtype(dtype, np.floating):
            feeds.append(rng.standard_normal(shape).astype(dtype))
        elif dtype == np.bool_:
            feeds.append(rng.random(shape) > 0.5)
        else:
            feeds.append(rng.integers(0, 4, size=shape).astype(dtype))
    return feeds


def open_session(model: onnx.ModelProto) -> Any:
    """An onnxruntime CPU session with graph optimizations off (literal evaluation, Q/DQ emulated)."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.intra_op_num_threads = 2
    options.log_severity_level = 3
    return onnxruntime.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def session_or_reason(model: onnx.ModelProto) -> tuple[Any, str]:
    try:
        return open_session(model), ""
    except Exception as error:
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        return None, first


def run_session(session: Any, feeds: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Run with positional feeds; a model with a static batch of 1 is run one sample at a time."""
    inputs = session.get_inputs()
    if len(inputs) != len(feeds):
        raise FixVerificationError(f"the model has {len(inputs)} inputs, {len(feeds)} feeds were given")
    static_one = all(isinstance(i.shape[0], int) and i.shape[0] == 1 for i in inputs if i.shape)
    batch = feeds[0].shape[0] if feeds and feeds[0].ndim else 1
    if static_one and batch > 1:
        parts = [run_session(session, [feed[k : k + 1] for feed in feeds]) for k in range(batch)]
        return [np.concatenate([part[i] for part in parts]) for i in range(len(parts[0]))]
    return list(session.run(None, {i.name: feed for i, feed in zip(inputs, feeds)}))


def max_abs_difference(expected: Sequence[np.ndarray], actual: Sequence[np.ndarray], atol: float, rtol: float) -> tuple[float, str]:
    """Largest |Δ| over all outputs, and a description of the first output out of tolerance ("" if none)."""
    if len(expected) != len(actual):
        return float("inf"), f"{len(expected)} outputs became {len(actual)}"
    worst, problem = 0.0, ""
    for index, (want, got) in enumerate(zip(expected, actual)):
        if want.shape != got.shape or want.dtype != got.dtype:
            return float("inf"), f"output {index}: {want.dtype}{list(want.shape)} became {got.dtype}{list(got.shape)}"
        if want.size == 0:
            continue
        if np.issubdtype(want.dtype, np.floating):
            diff = np.abs(got.astype(np.float64) - want.astype(np.float64))
            diff[np.isnan(want) & np.isnan(got)] = 0.0
            bad = ~(diff <= atol + rtol * np.abs(want.astype(np.float64)))
        else:
            diff = (got != want).astype(np.float64)
            bad = diff > 0
        worst = max(worst, float(np.nanmax(diff)) if not np.isnan(diff).all() else float("inf"))
        if bad.any() and not problem:
            problem = f"output {index}: {int(bad.sum())} of {want.size} values differ (max |Δ| {float(np.nanmax(diff)):.3g})"
    return worst, problem


# --------------------------------------------------------------------------- the step


def op_counts(model: onnx.ModelProto) -> dict[str, int]:
    return dict(Counter(node.op_type for node in model.graph.node))


def _export(graph: gs.Graph, source: onnx.ModelProto) -> onnx.ModelProto:
    """gs -> ONNX with the source model's header, value_info dropped and shapes re-inferred."""
    return onnx_io.export_with_metadata(graph, source, reinfer=True, do_type_check=False)


_infer = onnx_io.infer_shapes


def _import(model: onnx.ModelProto) -> gs.Graph:
    with quiet_graphsurgeon():
        return gs.import_onnx(model)


class quiet_graphsurgeon:
    """onnx-graphsurgeon's logger at ERROR for the duration (folding warns about every op it cannot run)."""

    def __enter__(self) -> None:
        self._severity = gs.logger.G_LOGGER.severity
        gs.logger.G_LOGGER.severity = gs.logger.G_LOGGER.ERROR

    def __exit__(self, *_: object) -> None:
        gs.logger.G_LOGGER.severity = self._severity


def reference_outputs(model: onnx.ModelProto, feeds: Sequence[np.ndarray]) -> list[np.ndarray] | None:
    """Outputs of a model onnxruntime cannot run alone, with its custom ops run by their reference
    implementation (builders/passes/reference_ops.py); None when it has other unknown ops."""
    from builders.passes import reference_ops

    custom = {n.op_type for n in model.graph.node if n.domain not in STANDARD_DOMAINS or n.op_type in reference_ops.CUSTOM_OP_TYPES}
    if not custom or not custom <= set(reference_ops.CUSTOM_OP_TYPES):
        return None
    names = [value.name for value in graph_inputs(model)]
    try:
        return reference_ops.run_unfixed_with_reference(model, dict(zip(names, feeds)))
    except Exception:
        return None


def fix_model(
    model: onnx.ModelProto,
    names: Sequence[str],
    options: FixOptions,
    log: Log = log_to_stderr,
) -> FixResult:
    """Run ``names`` in order on ``model``, verifying each rewrite on onnxruntime; returns the fixed model."""
    registry.check_names(names)
    passes = registry.bound_passes(options)
    if "batch_dimension" in names and options.max_batch is None:
        raise BuildError("batch_dimension needs a max batch: --max-batch or the core config's max_batch_size")

    source_bytes = model.SerializeToString()
    current = _infer(onnx.load_from_string(source_bytes))
    comparison = _Comparison.of_input(current, random_feeds(current, options))
    results: list[PassResult] = []
    for name in names:
        result, current = _apply_pass(name, passes[name], current, comparison, options, log)
        results.append(result)
    unverified = [result.name for result in results if result.rewrites and result.max_abs_diff is None]
    overall = _verify_fixed(current, comparison, options)

    record = {
        "source_sha256": sha256_bytes(source_bytes),
        "passes": {result.name: result.rewrites for result in results},
        "max_abs_diff": overall,
        "unverified": unverified,
    }
    batch_profile.set_metadata(current, FIX_METADATA_KEY, json.dumps(record, sort_keys=True))
    if "batch_dimension" in names:
        _write_batch_profile(current, options)
    return FixResult(
        model=current,
        passes=results,
        op_counts_before=op_counts(model),
        op_counts_after=op_counts(current),
        max_abs_diff=overall,
        unverified=unverified,
    )


@dataclass
class _Comparison:
    """What each rewrite is compared with: the outputs, on the seeded ``feeds``, of the last model
    onnxruntime ran (``expected``; None until one runs), and the first model that ran with its
    outputs (``reference``: what the fixed model is compared with at the end)."""

    feeds: list[np.ndarray]
    not_run: str  # why the models before the first that runs are not compared
    expected: list[np.ndarray] | None = None
    reference: tuple[onnx.ModelProto, list[np.ndarray]] | None = None

    @classmethod
    def of_input(cls, model: onnx.ModelProto, feeds: list[np.ndarray]) -> _Comparison:
        """The input model's outputs on onnxruntime, else with its custom ops' reference implementation."""
        session, reason = session_or_reason(model)
        expected = run_session(session, feeds) if session is not None else None
        if expected is None:
            expected = reference_outputs(model, feeds)
            if expected is not None:
                reason = "compared with the custom ops' reference implementation"
        return cls(feeds, reason, expected, (model, expected) if expected is not None else None)

    def advance(self, model: onnx.ModelProto, session: Any, outputs: list[np.ndarray] | None) -> None:
        """The next rewrite is compared with ``model``: its ``outputs``; the first model onnxruntime
        runs (``session``) is run now and becomes the reference."""
        if self.expected is None and session is not None:
            self.expected = run_session(session, self.feeds)
            self.reference = (model, self.expected)
        elif self.expected is not None:
            self.expected = outputs


def _apply_pass(
    name: str, rewrite: GraphPass, current: onnx.ModelProto, comparison: _Comparison, options: FixOptions, log: Log
) -> tuple[PassResult, onnx.ModelProto]:
    """One pass on ``current``: what it did and the model after it, whose outputs must equal the
    model's before it within the tolerance (when onnxruntime runs that one)."""
    graph = _import(current)
    nodes_before = len(current.graph.node)
    try:
        with quiet_graphsurgeon():
            rewrites = int(rewrite(graph))
    except PassError as error:
        raise BuildError(str(error)) from None
    if rewrites == 0:
        log(f"{name}: nothing to do")
        return PassResult(name, 0, nodes_before, nodes_before, None, "nothing to do"), current
    after = _export(graph, current)
    after_session, after_reason = session_or_reason(after)
    diff: float | None = None
    note = ""
    actual: list[np.ndarray] | None = None
    if comparison.expected is None:
        note = f"not compared: onnxruntime cannot run the model before this pass ({comparison.not_run})"
    else:
        if after_session is None:
            raise FixVerificationError(f"{name}: onnxruntime cannot load the rewritten model: {after_reason}")
        actual = run_session(after_session, comparison.feeds)
        diff, problem = max_abs_difference(comparison.expected, actual, options.atol, options.rtol)
        if problem:
            raise FixVerificationError(
                f"{name} changed the model's outputs ({problem}; tolerance {options.atol:g} + {options.rtol:g}·|x|); nothing written"
            )
    log(
        f"{name}: {rewrites} rewrite(s), {nodes_before} -> {len(after.graph.node)} nodes"
        + (f", max |Δ| {diff:.1e}" if diff is not None else f" ({note})")
    )
    comparison.advance(after, after_session, actual)
    return PassResult(name, rewrites, nodes_before, len(after.graph.node), diff, note), after


def _verify_fixed(model: onnx.ModelProto, comparison: _Comparison, options: FixOptions) -> float | None:
    """The fixed model loads, equals the reference within the tolerance and passes onnx.checker;
    returns its max |Δ| from the reference (None: nothing to compare with, or custom ops left)."""
    overall: float | None = None
    final_session, final_reason = session_or_reason(model)
    custom = sorted({f"{n.domain}.{n.op_type}" for n in model.graph.node if n.domain not in STANDARD_DOMAINS})
    if final_session is None and not custom:
        raise FixVerificationError(f"onnxruntime cannot load the fixed model: {final_reason}")
    if comparison.reference is not None and final_session is not None:
        overall, problem = max_abs_difference(
            comparison.reference[1], run_session(final_session, comparison.feeds), options.atol, options.rtol
        )
        if problem:
            raise FixVerificationError(f"the fixed model differs from the input: {problem}; nothing written")
    try:
        onnx.checker.check_model(model, full_check=not custom)
    except onnx.checker.ValidationError as error:
        first = str(error).strip().splitlines()[0]
        raise FixVerificationError(f"onnx.checker rejects the fixed model: {first}") from None
    return overall


def _write_batch_profile(model: onnx.ModelProto, options: FixOptions) -> None:
    """``batch_dimension``'s batch range (max, opt, the static per-image dims) into the model's metadata."""
    assert options.max_batch is not None
    static_inputs = {
        value.name: [d for d in _dims(value)[1:] if isinstance(d, int)]
        for value in graph_inputs(model)
        if all(isinstance(d, int) and d > 0 for d in _dims(value)[1:])
    }
    try:
        profile = batch_profile.make_profile(options.max_batch, options.opt_batch, static_inputs)
    except batch_profile.ProfileError as error:
        raise BuildError(str(error)) from None
    batch_profile.write_profile(model, profile)


load_model = onnx_io.load_onnx


def fix_file(
    source: Path,
    destination: Path,
    names: Sequence[str],
    options: FixOptions,
    log: Log = log_to_stderr,
    force: bool = False,
) -> FixResult:
    """``fix_model`` on a file; writes ``destination`` atomically, only when every check passed.

    In place (``destination`` is ``source``) and with no pass rewriting anything, the file is left
    as it is unless ``force``: rewriting only the metadata would change its hash for the steps
    that follow (export's provenance, quantize's input record) and make them rebuild.
    """
    model = load_model(source)
    result = fix_model(model, names, options, log)
    in_place = Path(destination).resolve() == Path(source).resolve()
    if in_place and not force and not any(p.rewrites for p in result.passes):
        log(f"nothing to fix: {source} left unchanged")
        return result
    data = result.model.SerializeToString()
    atomic_write_bytes(destination, data)
    before = ", ".join(f"{op} {n}" for op, n in sorted(result.op_counts_before.items()))
    after = ", ".join(f"{op} {n}" for op, n in sorted(result.op_counts_after.items()))
    log(f"nodes {result.nodes_before} -> {result.nodes_after}")
    log(f"  before: {before}")
    log(f"  after:  {after}")
    if result.max_abs_diff is not None:
        log(f"fixed model vs input on onnxruntime: max |Δ| {result.max_abs_diff:.1e} (atol {options.atol:g}, rtol {options.rtol:g})")
    if result.unverified:
        log(f"not compared on onnxruntime (the input does not run there): {', '.join(result.unverified)}")
    log(f"wrote {destination} ({len(data) / 1e6:.1f} MB)")
    return result


def options_for_core(core: model_config.ModelConfig, max_batch: int | None, opt_batch: int | None, atol: float, rtol: float) -> FixOptions:
    """Options from the pipeline core's config.pbtxt (names, dims, max_batch_size)."""
    return FixOptions.from_config(core, max_batch=max_batch, opt_batch=opt_batch, atol=atol, rtol=rtol)


def run_from_args(args: argparse.Namespace) -> int:
    """The named passes on ``args.input`` (default: the chosen pipeline's export), each verified."""
    names = parse_pass_list(args.passes)
    atol = DEFAULT_ATOL if args.atol is None else args.atol
    rtol = DEFAULT_RTOL if args.rtol is None else args.rtol
    options = options_for_core(args.loaded.configs.core(), args.max_batch, args.opt_batch, atol, rtol)
    source = args.input or args.loaded.layout.onnx("fp32")
    fix_file(source, args.output or source, names, options, force=args.force)
    return 0
