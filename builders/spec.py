"""A pipeline's spec: ``model_repository/<pipeline>/pipeline.toml``, the one file of a pipeline a person edits.

It says what is served and how it is built. Every Triton config of the pipeline folder is generated from it
(``python -m builders configs``, :mod:`builders.configs`); the build sections are the recipe
(:mod:`builders.recipe`). The serving part:

``task``, ``max_batch_size``
    the task (:mod:`vision_serving.tasks.registry`: it decides the postprocess's and the ensemble's tensors, from
    the postprocess's parameters) and the largest batch of every model of the ensemble (a step may set its own).
``[preprocess]``, ``[postprocess]``
    the Python steps: their Triton settings (:data:`STEP_SETTINGS`: ``instances``, ``max_batch_size``,
    ``max_queue_delay_microseconds``, ``max_queue_size``, ``queue_timeout_microseconds``) and, every other key,
    their parameters (strings, numbers, booleans or lists of them, written as the config's string parameters:
    ``mean = [127.0, 127.0, 127.0]`` is ``"127.0,127.0,127.0"``). What a step states by default (its decode limits,
    CPU sizing and drift settings) comes from the serving library's defaults: a spec carries only what differs.
``[tiling]``
    tiled inference (:mod:`vision_serving.tiling`: the keys, their defaults and a request's ``TILING``): its
    preprocess cuts each photo's views (its task's tiling preprocessor), its postprocess reaches the core by BLS and
    merges them. Its task must tile (:attr:`vision_serving.tasks.base.Task.tiled_preprocessor`).
``[core]``, and each ``[stages.<role>]``
    a model the ensemble (or the postprocess, by BLS) runs on TensorRT in production: its tensors (``inputs`` and
    ``outputs``, each ``{ name, datatype, dims }`` per image, the batch left out), its Triton settings as a step's
    (``instances`` are GPU instances), and ``[core.cpu]``: what its CPU variants (``configs/<variant>.pbtxt``)
    set differently from the CPU runtimes' defaults (:class:`builders.configs.variants.CoreSettings`).

Errors are one line naming the file and the key.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from builders import recipe as recipes
from builders.configs.variants import CoreSettings
from builders.sources.base import RecipeError
from vision_serving import layout, model_config, tiling
from vision_serving.tasks import registry
from vision_serving.tasks.base import Task

# The Triton settings of a step (every other key of its table is a parameter), and a core's keys.
STEP_SETTINGS = recipes.STEP_SETTINGS
CORE_KEYS = recipes.STAGE_SERVING_KEYS
DATATYPES = ("BOOL", "UINT8", "INT8", "INT32", "INT64", "FP16", "FP32", "FP64", "BYTES")


@dataclass(frozen=True)
class TensorSpec:
    """One tensor of a core: its name, KServe datatype and per-image dims (-1: any size)."""

    name: str
    datatype: str
    dims: tuple[int, ...]

    @property
    def data_type(self) -> int:
        """The config's enum value (``TYPE_FP32``; BYTES is ``TYPE_STRING``)."""
        name = "STRING" if self.datatype == "BYTES" else self.datatype
        return model_config.model_config_pb2.DataType.Value(f"TYPE_{name}")


@dataclass(frozen=True)
class StepSettings:
    """A model's Triton settings, each None where the spec leaves it to the code's default."""

    instances: int | None = None
    max_batch_size: int | None = None
    max_queue_delay_microseconds: int | None = None
    max_queue_size: int | None = None
    queue_timeout_microseconds: int | None = None


@dataclass(frozen=True)
class StepSpec:
    """A Python step (``[preprocess]``, ``[postprocess]``): its settings and its parameters, as strings."""

    settings: StepSettings = field(default_factory=StepSettings)
    parameters: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class CoreSpec:
    """A model served by TensorRT in production (the core, a second stage): tensors, settings, CPU variants."""

    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    settings: StepSettings = field(default_factory=StepSettings)
    cpu: CoreSettings = field(default_factory=CoreSettings)


@dataclass(frozen=True)
class PipelineSpec:
    path: Path
    layout: layout.Pipeline
    task: Task
    max_batch_size: int
    preprocess: StepSpec
    core: CoreSpec
    postprocess: StepSpec
    stages: Mapping[str, CoreSpec]
    recipe: recipes.Recipe
    # [tiling]: the parameters both Python steps state (vision_serving.tiling.config_parameters); None: not tiled.
    tiling: Mapping[str, str] | None = None

    @property
    def name(self) -> str:
        return self.layout.name


def _integer(value: object, where: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise RecipeError(f"{where} must be an integer >= {minimum}, got {value!r}")
    return value


def _table(data: Mapping[str, Any], key: str, where: str, required: bool = False) -> dict[str, Any]:
    value = data.get(key)
    if value is None and not required:
        return {}
    if not isinstance(value, dict):
        raise RecipeError(f"{where}: [{key}] must be a table" + ("" if value is not None else " (it is missing)"))
    return value


def parameter_text(value: object, where: str) -> str:
    """A spec value as a config's string parameter: booleans as ``true``/``false``, lists joined by commas."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | int | float):
        return str(value)
    if isinstance(value, list) and value and all(isinstance(item, str | int | float) and not isinstance(item, bool) for item in value):
        return ",".join(str(item) for item in value)
    raise RecipeError(f"{where} must be a string, a number, a boolean or a list of strings or numbers, got {value!r}")


def _settings(values: Mapping[str, Any], where: str) -> StepSettings:
    minimums = {"max_queue_delay_microseconds": 0}
    return StepSettings(**{key: _integer(values[key], f"{where}: {key}", minimums.get(key, 1)) for key in STEP_SETTINGS if key in values})


def _step(values: Mapping[str, Any], where: str) -> StepSpec:
    parameters = {key: parameter_text(value, f"{where}: {key}") for key, value in values.items() if key not in STEP_SETTINGS}
    return StepSpec(_settings(values, where), parameters)


def _tensors(value: object, where: str) -> tuple[TensorSpec, ...]:
    if not isinstance(value, list) or not value:
        raise RecipeError(f"{where} must be a list of {{ name, datatype, dims }} tables, got {value!r}")
    tensors = []
    for item in value:
        if not isinstance(item, dict) or set(item) != {"name", "datatype", "dims"}:
            raise RecipeError(f"{where}: each tensor is {{ name = ..., datatype = ..., dims = [...] }}, got {item!r}")
        name, datatype, dims = item["name"], item["datatype"], item["dims"]
        if not isinstance(name, str) or not name:
            raise RecipeError(f"{where}: a tensor's name must be a non-empty string, got {name!r}")
        if datatype not in DATATYPES:
            raise RecipeError(f"{where}: tensor '{name}': datatype {datatype!r} is not one of {', '.join(DATATYPES)}")
        if not isinstance(dims, list) or any(isinstance(d, bool) or not isinstance(d, int) or (d < 1 and d != -1) for d in dims):
            raise RecipeError(f"{where}: tensor '{name}': dims must be a list of sizes (-1: any), got {dims!r}")
        tensors.append(TensorSpec(name, datatype, tuple(dims)))
    names = [tensor.name for tensor in tensors]
    if len(set(names)) < len(names):
        raise RecipeError(f"{where}: tensor names repeat: {names}")
    return tuple(tensors)


def _core(values: Mapping[str, Any], where: str) -> CoreSpec:
    unknown = sorted(set(values) - set(CORE_KEYS))
    if unknown:
        raise RecipeError(f"{where}: unknown key(s) {', '.join(unknown)}; expected some of {', '.join(CORE_KEYS)}")
    for key in ("inputs", "outputs"):
        if key not in values:
            raise RecipeError(f"{where}: {key} is missing (the model's tensors: [{{ name, datatype, dims }}, ...])")
    cpu = values.get("cpu", {})
    if not isinstance(cpu, dict):
        raise RecipeError(f"{where}: cpu must be a table (what the CPU variants set differently)")
    try:
        settings = CoreSettings.parse(cpu, f"{where} cpu")
    except model_config.ConfigError as error:
        raise RecipeError(str(error)) from None
    return CoreSpec(
        _tensors(values["inputs"], f"{where}: inputs"), _tensors(values["outputs"], f"{where}: outputs"), _settings(values, where), settings
    )


def read(path: Path) -> dict[str, Any]:
    """The spec file's TOML (``RecipeError`` naming the file when it is missing or unparsable)."""
    if not path.is_file():
        raise RecipeError(f"{path}: no such pipeline spec")
    try:
        return tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as error:
        raise RecipeError(f"{path}: {error}") from None


def task_of(data: Mapping[str, Any], where: str) -> Task:
    name = data.get("task")
    if not isinstance(name, str):
        raise RecipeError(f"{where}: task is missing (one of {', '.join(sorted(registry.TASKS))})")
    if name not in registry.TASKS:
        raise RecipeError(f"{where}: task {name!r} is not one of {', '.join(sorted(registry.TASKS))}")
    return registry.TASKS[name]


def load(pipeline: layout.Pipeline) -> PipelineSpec:
    """The pipeline's spec, parsed and checked (``RecipeError``: one line naming the file and the key)."""
    return parse(read(pipeline.recipe), pipeline)


def from_text(text: str, pipeline: layout.Pipeline) -> PipelineSpec:
    """A spec not yet written to ``pipeline``'s folder (a new pipeline's)."""
    try:
        return parse(tomllib.loads(text), pipeline)
    except tomllib.TOMLDecodeError as error:
        raise RecipeError(f"{pipeline.recipe}: {error}") from None


def parse(data: Mapping[str, Any], pipeline: layout.Pipeline) -> PipelineSpec:
    """The parsed TOML ``data`` of ``pipeline``'s spec, checked."""
    path = pipeline.recipe
    where = str(path)
    known = (*recipes.SERVING_KEYS, *recipes.RECIPE_KEYS)
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise RecipeError(f"{where}: unknown key(s) {', '.join(unknown)}; expected some of {', '.join(known)}")
    task = task_of(data, where)
    stages_data = _table(data, "stages", where)
    stages = {
        role: _core({key: value for key, value in values.items() if key in CORE_KEYS}, f"{where} [stages.{role}]")
        for role, values in stages_data.items()
        if isinstance(values, dict)
    }
    return PipelineSpec(
        path=path,
        layout=pipeline,
        task=task,
        max_batch_size=_integer(data.get("max_batch_size"), f"{where}: max_batch_size", 1),
        preprocess=_step(_table(data, "preprocess", where), f"{where} [preprocess]"),
        core=_core(_table(data, "core", where, required=True), f"{where} [core]"),
        postprocess=_step(_table(data, "postprocess", where), f"{where} [postprocess]"),
        stages=stages,
        recipe=recipes.from_data(dict(data), task, where, path),
        tiling=_tiling(data, task, where),
    )


def _tiling(data: Mapping[str, Any], task: Task, where: str) -> dict[str, str] | None:
    """The ``[tiling]`` table as both Python steps' parameters; None without one."""
    if "tiling" not in data:
        return None
    if task.tiled_preprocessor is None:
        raise RecipeError(f"{where}: [tiling]: task {task.name} does not tile (only a task with a tiling preprocessor does)")
    try:
        return tiling.config_parameters(_table(data, "tiling", where, required=True))
    except ValueError as error:
        raise RecipeError(f"{where}: [tiling]: {error}") from None
