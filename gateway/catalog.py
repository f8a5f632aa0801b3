"""The pipelines the gateway serves, found on the Triton server: every ensemble one of whose steps names a task.

A pipeline is read from the server alone (no model repository on disk): the list of loaded models, each model's
config, and, for an ensemble, its steps' configs. The ensemble is a pipeline when a step has a ``task`` parameter
(the postprocess model, :mod:`vision_serving.tasks.registry`); its tensors are found by the task's roles
(``output_roles``, ``request_roles``) as the command-line clients find them, so a renamed tensor is a config change
only and a pipeline added to the server later is served once the catalogue is next refreshed.

The list of models comes from the repository index where the server grants it. The Deployment restricts that API
to the admin key, which the gateway never holds: there the inference statistics (an open API that lists every
loaded model) give the same names.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from google.protobuf import json_format

from vision_serving import model_config
from vision_serving.model_config import ConfigError, ModelConfig
from vision_serving.tasks import registry
from vision_serving.tasks.base import Role, resolve_roles

LOG = logging.getLogger("gateway.catalog")
IMAGE_ROLE = Role("image", "BYTES", (1,))
# The preprocess parameters that bound an upload, and their defaults where a config has none (vision_serving's own).
DEFAULT_MAX_IMAGE_BYTES = 20 * 1024 * 1024
DEFAULT_FORMATS = ("jpeg", "png", "webp", "heic", "avif")


@dataclass(frozen=True)
class Option:
    """One optional request input of a pipeline, as the API takes it: a JSON field or query parameter ``name``."""

    name: str  # the role's name: top_k, score_threshold, ...
    tensor: str  # the ensemble's input
    datatype: str  # INT32, FP32


@dataclass(frozen=True)
class Pipeline:
    """A served pipeline as the gateway calls and describes it."""

    name: str
    version: str
    task: str
    image_input: str
    options: dict[str, Option]  # by option name, in the task's order
    outputs: dict[str, str]  # role -> the ensemble's output (the roles this pipeline has)
    output_dims: dict[str, tuple[int, ...]]  # role -> the output's dims per photo (-1: any size)
    batched: bool  # the ensemble has a batch dim (max_batch_size > 0)
    max_image_bytes: int
    formats: tuple[str, ...]
    postprocess: ModelConfig = field(repr=False, compare=False)  # the task step's config (labels count, keypoint names, ...)

    def parameter(self, key: str, default: str = "") -> str:
        """A parameter of the task step's config (``default`` where it has none)."""
        return model_config.parameter(self.postprocess, key, default)


def step_names(ensemble: ModelConfig) -> list[str]:
    return [step.model_name for step in ensemble.ensemble_scheduling.step]


def pipeline_from_configs(ensemble: ModelConfig, steps: Mapping[str, ModelConfig], version: str = "1") -> Pipeline | None:
    """The pipeline an ensemble is (None: it is not one: no step names a task); ``steps``: its steps' configs by name.
    A step naming an unknown task, or tensors that fit no role, are ``ConfigError``."""
    task_step = next((steps[name] for name in reversed(step_names(ensemble)) if "task" in steps[name].parameters), None)
    if task_step is None:
        return None
    task = registry.task(model_config.parameter(task_step, "task"))
    request_roles = tuple(task.request_roles())
    inputs = resolve_roles(ensemble, "input", (IMAGE_ROLE, *request_roles))
    outputs = resolve_roles(ensemble, "output", task.output_roles())
    image = inputs.pop("image")
    assert image is not None
    options = {role.role: Option(role.role, name, role.datatype) for role in request_roles if (name := inputs.get(role.role)) is not None}
    preprocess = next((steps[name] for name in step_names(ensemble) if "max_image_bytes" in steps[name].parameters), None)
    max_bytes = model_config.int_parameter(preprocess, "max_image_bytes") if preprocess is not None else DEFAULT_MAX_IMAGE_BYTES
    formats = (
        tuple(f.strip() for f in model_config.parameter(preprocess, "accepted_formats").split(",") if f.strip())
        if preprocess is not None and "accepted_formats" in preprocess.parameters
        else DEFAULT_FORMATS
    )
    return Pipeline(
        name=ensemble.name,
        version=version,
        task=task.name,
        image_input=image,
        options=options,
        outputs={role: name for role, name in outputs.items() if name is not None},
        output_dims={
            role: tuple(int(d) for d in model_config.tensor(ensemble, name, "output").dims) for role, name in outputs.items() if name
        },
        batched=ensemble.max_batch_size > 0,
        max_image_bytes=max_bytes,
        formats=formats,
        postprocess=task_step,
    )


# --------------------------------------------------------------------------- reading the server


class ModelSource:
    """What the catalogue reads from a server: the loaded models and their configs (a ``tritonclient.grpc.aio`` client)."""

    def __init__(self, client: Any, timeout_s: float = 10.0) -> None:
        self.client, self.timeout_s = client, timeout_s

    async def models(self) -> dict[str, str]:
        """Loaded model name -> its newest ready version: the repository index, else (restricted) the statistics."""
        try:
            index = await self.client.get_model_repository_index(as_json=True, client_timeout=self.timeout_s)
            return {m["name"]: m.get("version", "") for m in index.get("models", []) if m.get("state") == "READY"}
        except Exception as error:
            if "restricted" not in str(error).lower():
                raise
        statistics = await self.client.get_inference_statistics("", as_json=True, client_timeout=self.timeout_s)
        found: dict[str, str] = {}
        for entry in statistics.get("model_stats", []):
            version = entry.get("version", "")
            if version.isdigit() and (entry["name"] not in found or int(version) > int(found[entry["name"]] or 0)):
                found[entry["name"]] = version
        return found

    async def config(self, name: str) -> ModelConfig:
        raw = await self.client.get_model_config(name, as_json=True, client_timeout=self.timeout_s)
        config = ModelConfig()
        json_format.ParseDict(raw["config"], config, ignore_unknown_fields=True)
        return config


@dataclass
class Catalog:
    """The pipelines of one server, refreshed every ``refresh_s`` seconds (and when asked for one it does not know, at
    most every ``miss_refresh_s``): a pipeline loaded later appears, one unloaded goes."""

    source: ModelSource
    refresh_s: float = 30.0
    miss_refresh_s: float = 2.0
    clock: Callable[[], float] = time.monotonic
    pipelines: dict[str, Pipeline] = field(default_factory=dict)
    problems: dict[str, str] = field(default_factory=dict)  # ensembles that are not servable, and why
    refreshed_at: float | None = None
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    async def refresh(self) -> None:
        async with self._lock:
            models = await self.source.models()
            configs: dict[str, ModelConfig] = {}
            pipelines: dict[str, Pipeline] = {}
            problems: dict[str, str] = {}
            for name in sorted(models):
                config = configs.get(name) or await self.source.config(name)
                if config.platform != "ensemble":
                    continue
                try:
                    for step in step_names(config):
                        if step not in configs:
                            configs[step] = await self.source.config(step)
                    pipeline = pipeline_from_configs(config, configs, models[name])
                except (ConfigError, KeyError) as error:
                    problems[name] = str(error)
                    continue
                if pipeline is not None:
                    pipelines[name] = pipeline
            for name, problem in problems.items():
                if self.problems.get(name) != problem:
                    LOG.warning("ensemble %s is not served: %s", name, problem)
            self.pipelines, self.problems, self.refreshed_at = pipelines, problems, self.clock()

    async def current(self) -> dict[str, Pipeline]:
        """The pipelines (read now when they never were; :meth:`keep_fresh` refreshes them in the background)."""
        if self.refreshed_at is None:
            await self.refresh()
        return self.pipelines

    async def get(self, name: str) -> Pipeline | None:
        """The pipeline ``name``; one the catalogue does not know makes it look again (at most every ``miss_refresh_s``)."""
        pipelines = await self.current()
        if name not in pipelines and self.refreshed_at is not None and self.clock() - self.refreshed_at >= self.miss_refresh_s:
            await self.refresh()
        return self.pipelines.get(name)

    async def keep_fresh(self) -> None:
        """Refresh every ``refresh_s`` seconds, for ever (a failed refresh keeps the last catalogue and is logged)."""
        while True:
            try:
                await self.refresh()
            except Exception as error:  # the server restarting, unreachable: try again next time
                LOG.warning("could not read the server's pipelines: %s", " ".join(str(error).split()))
            await asyncio.sleep(self.refresh_s)


__all__ = ["Catalog", "ConfigError", "ModelSource", "Option", "Pipeline", "pipeline_from_configs"]
