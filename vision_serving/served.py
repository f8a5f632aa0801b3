"""The served computation in one process, no server: decode -> preprocess -> core -> postprocess.

:class:`ServedPipeline` computes exactly what a pipeline's ensemble serves, from the same
library and the same configs (:class:`vision_serving.pipeline_configs.PipelineConfigs`): the
preprocess model's decoder, limits and resize; a CPU core as a core config names it
(onnxruntime or OpenVINO, at a given precision: a config variant plus parameter overrides);
the postprocess model's task computation. Tensors flow as the ensemble's ``input_map`` and
``output_map`` route them, and the core runs in batches of at most its ``max_batch_size``.

The builders (calibration, the precision ladder's gates, the drift reference, ``evaluate``)
and the benchmarks' in-process limits all run through it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from . import core_model, cpu_core, drift, image_codec, model_config, preprocessing, preprocessors, tiling
from .model_config import ConfigError, ModelConfig
from .pipeline_configs import PipelineConfigs
from .tasks.base import TaskResult

# The core config the local server serves by default (./scripts/serve, the drift reference).
SERVED_CORE_CONFIG = "cpu"


@dataclass(frozen=True)
class Step:
    """One ensemble step: model input -> ensemble tensor, model output -> ensemble tensor."""

    inputs: dict[str, str]
    outputs: dict[str, str]


def ensemble_steps(configs: PipelineConfigs) -> dict[str, Step]:
    """The ensemble's step of each role (preprocess, core, postprocess), by the layout's model names; a tiled pipeline's
    has no core step (its postprocess reaches the core: :mod:`vision_serving.tiling`)."""
    roles = {configs.layout.model_name(role): role for role in ("preprocess", "core", "postprocess")}
    steps: dict[str, Step] = {}
    for step in configs.ensemble.ensemble_scheduling.step:
        role = roles.get(step.model_name)
        if role is None or role in steps:
            raise ConfigError(f"ensemble '{configs.ensemble.name}': step model '{step.model_name}' is not one of {sorted(roles)} once each")
        steps[role] = Step(dict(step.input_map), dict(step.output_map))
    missing = sorted(set(roles.values()) - set(steps) - ({"core"} if tiling.is_tiled(configs.preprocess) else set()))
    if missing:
        raise ConfigError(f"ensemble '{configs.ensemble.name}': no step for the {', '.join(missing)} model")
    return steps


def core_config(configs: PipelineConfigs, variant: str = SERVED_CORE_CONFIG, parameters: Mapping[str, str] | None = None) -> ModelConfig:
    """A copy of a core config variant with parameters overridden (``onnx_file`` and ``precision``
    replace each other: a config names the model one way)."""
    return with_parameters(configs.core_variant(variant), parameters)


def with_parameters(source: ModelConfig, parameters: Mapping[str, str] | None) -> ModelConfig:
    """A copy of a model config with parameters overridden, as :func:`core_config` does."""
    config = ModelConfig()
    config.CopyFrom(source)
    for key, value in (parameters or {}).items():
        other = {"onnx_file": "precision", "precision": "onnx_file"}.get(key)
        if other is not None and other in config.parameters:
            del config.parameters[other]
        config.parameters[key].string_value = value
    return config


class StageCore:
    """A second-stage model of a pipeline (one its postprocess calls) as a CPU core in this process: its
    outputs ``output_names`` (all of them, by default), in that order."""

    def __init__(self, config: ModelConfig, core: core_model.Core, output_names: Sequence[str] | None = None) -> None:
        self.config, self.core = config, core
        names = list(output_names or core.output_names)
        unknown = [name for name in names if name not in core.output_names]
        if unknown:
            raise ConfigError(f"model '{config.name}' has no output {', '.join(unknown)}")
        self.positions = [core.output_names.index(name) for name in names]

    def run(self, batch: np.ndarray) -> tuple[np.ndarray, ...]:
        if len(batch) > self.config.max_batch_size:
            raise ValueError(f"model '{self.config.name}': {len(batch)} inputs, more than its max_batch_size {self.config.max_batch_size}")
        outputs = self.core.run({self.core.input_names[0]: batch})
        return tuple(outputs[position] for position in self.positions)

    async def infer(self, batch: np.ndarray) -> tuple[np.ndarray, ...]:
        """:meth:`run` as the postprocess awaits a BLS request (in this process it never suspends)."""
        return self.run(batch)


def stage_core(
    configs: PipelineConfigs,
    name: str,
    variant: str = SERVED_CORE_CONFIG,
    parameters: Mapping[str, str] | None = None,
    output_names: Sequence[str] | None = None,
) -> StageCore:
    """The model ``name`` of the pipeline's folder with its ``configs/<variant>.pbtxt`` (config.pbtxt when it has
    none), its parameters overridden as :func:`core_config` overrides the core's; ``output_names``: the outputs
    it gives (all, by default)."""
    folder = configs.layout.repository / name
    if not (folder / "config.pbtxt").is_file():
        raise ConfigError(f"model '{configs.postprocess.name}' calls '{name}', which is not a model of {configs.layout.repository}")
    variant_config = model_config.load_config(folder, variant if (folder / "configs" / f"{variant}.pbtxt").is_file() else None)
    config = with_parameters(variant_config, parameters)
    return StageCore(config, cpu_core.load(config, folder / str(configs.layout.core_version_dir.name)), output_names)


class ServedInputs:
    """The served decode and preprocessing, up to the core's inputs (no core needed: the export
    verifies a model it is still building with them)."""

    def __init__(self, configs: PipelineConfigs) -> None:
        self.configs = configs
        self.limits = configs.limits
        self.steps = ensemble_steps(configs)
        # A preprocessor of its own (vision_serving.preprocessors), or the image-to-tensor resize of the spec; one that
        # reads request options (a tiled pipeline's views) plans each request's decode and computation from them.
        self.custom = preprocessors.custom(configs.preprocess)
        self.planner = preprocessors.planner(configs.preprocess)
        self.tiled = tiling.is_tiled(configs.preprocess)
        self._spec = None if self.custom is not None and not self.tiled else configs.spec
        self.minimum = None if self._spec is None else preprocessing.decode_minimum(self._spec)
        if self.planner is not None:
            self.minimum = self.planner({}, 1).minimums[0]  # a photo sent without options
        self.outputs = None if self.custom is not None else preprocessing.PreprocessOutputs.from_config(configs.preprocess)

    @property
    def spec(self) -> preprocessing.PreprocessSpec:
        """The image-to-tensor resize (``ConfigError`` for a preprocessor of its own)."""
        if self._spec is None:
            raise ConfigError(
                f"model '{self.configs.preprocess.name}': its preprocessor {preprocessors.kind(self.configs.preprocess)!r} has no image-to-tensor spec"
            )
        return self._spec

    @spec.setter
    def spec(self, value: preprocessing.PreprocessSpec) -> None:
        self._spec = value

    def use_served_threads(self) -> None:
        """OpenCV's thread pool as the preprocess model sets it (process-wide)."""
        preprocessing.set_threads(preprocessing.configured_threads(self.configs.preprocess))

    def decode(self, data: bytes) -> image_codec.Decoded:
        """One upload through the served decoder (``ImageError`` for what the server refuses)."""
        return image_codec.decode(data, self.limits, self.minimum)

    def options(self, request: Mapping[str, np.ndarray] | None, count: int) -> dict[str, np.ndarray | None]:
        """The request's optional inputs the preprocess reads (ensemble input name -> array), by its preprocessor's roles."""
        sent = {name: (request or {}).get(source) for name, source in self.steps["preprocess"].inputs.items()}
        return {role.role: sent.get(role.name) for role in preprocessors.options(preprocessors.kind(self.configs.preprocess))}

    def decode_request(self, payloads: Sequence[bytes], request: Mapping[str, np.ndarray] | None = None) -> list[image_codec.Decoded]:
        """A request's uploads through the served decoder, each at the size its options need (``ImageError``)."""
        if self.planner is None:
            return [self.decode(data) for data in payloads]
        plan = self.planner(self.options(request, len(payloads)), len(payloads))
        return [image_codec.decode(data, self.limits, minimum) for data, minimum in zip(payloads, plan.minimums, strict=True)]

    def preprocess(self, decoded: Sequence[image_codec.Decoded], request: Mapping[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
        """Decoded images -> the preprocess model's outputs, by its tensor names (ragged where a preprocessor
        of its own gives the photos different shapes: :func:`vision_serving.preprocessing.ragged`)."""
        if self.planner is not None:
            return self.planner(self.options(request, len(decoded)), len(decoded)).compute(decoded)
        if self.custom is not None:
            return self.custom(decoded)
        assert self.outputs is not None
        return preprocessing.preprocess_outputs(decoded, self.spec, self.outputs)

    def offline_request(self, count: int) -> dict[str, np.ndarray] | None:
        """The request the builders' offline steps (calibration, the precision gate, evaluation) send with ``count``
        photos: for a tiled pipeline, each photo untiled (``TILING`` false: the whole photo at the model's input, as
        the untiled pipeline calibrates and is gated, whatever its size; its tiles are crops at the same scale), else
        none."""
        if not self.tiled:
            return None
        return {tiling.REQUEST_INPUT: np.full((count, 1), b"false", dtype=object)}

    def preprocessed(
        self, decoded: Sequence[image_codec.Decoded], request: Mapping[str, np.ndarray] | None = None
    ) -> dict[str, np.ndarray]:
        """The ensemble tensors after the preprocess step, by ensemble name (with the request's optional
        inputs, ``request``: ensemble input name -> array)."""
        tensors = dict(request or {})
        step = self.steps["preprocess"]
        for name, value in self.preprocess(decoded, request).items():
            tensors[step.outputs[name]] = value
        return tensors

    def core_feeds(self, tensors: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The core's inputs (by its names) among ensemble tensors (a tiled pipeline's: every photo's views)."""
        if "core" not in self.steps:
            outputs = self.steps["preprocess"].outputs
            views = tiling.real_tiles(tensors[outputs[tiling.TILES]], tensors[outputs[tiling.TILE_BOXES]])
            return {self.configs.core().input[0].name: views}
        return {name: tensors[source] for name, source in self.steps["core"].inputs.items()}

    def image_features(self, payloads: Sequence[bytes], decoded: Sequence[image_codec.Decoded]) -> drift.Features:
        """The preprocess model's drift features of these uploads."""
        return drift.image_features(
            [item.image for item in decoded], preprocessing.original_sizes(decoded), *drift.payload_facts(list(payloads))
        )


class ServedPipeline(ServedInputs):
    def __init__(
        self,
        configs: PipelineConfigs,
        core: core_model.Core,
        core_config: ModelConfig,
        variant: str = SERVED_CORE_CONFIG,
        stage_parameters: Mapping[str, Mapping[str, str]] | None = None,
    ) -> None:
        super().__init__(configs)
        self.core = core
        self.core_config = core_config
        self.postprocessor = configs.postprocessor()
        if core_config.max_batch_size < 1:
            raise ConfigError(f"model '{core_config.name}': a core without a batch dimension (max_batch_size 0) is not supported")
        # Second-stage models the postprocess calls (by BLS when served): their CPU cores, in this process.
        overrides = stage_parameters or {}
        unknown = sorted(set(overrides) - set(self.postprocessor.stage_models))
        if unknown:
            raise ConfigError(f"model '{configs.postprocess.name}' calls no {', '.join(unknown)} model")
        tensors = self.postprocessor.stage_tensors
        self.stage_cores = {
            role: StageCore(core_config, core, tensors[role][1])  # a tiled pipeline's core, which its postprocess calls
            if name == core_config.name
            else stage_core(configs, name, variant, overrides.get(role), tensors[role][1] if role in tensors else None)
            for role, name in self.postprocessor.stage_models.items()
        }
        if self.stage_cores:
            self.postprocessor.use_stages({role: stage.infer for role, stage in self.stage_cores.items()})

    @classmethod
    def load(
        cls,
        configs: PipelineConfigs,
        variant: str = SERVED_CORE_CONFIG,
        parameters: Mapping[str, str] | None = None,
        version_dir: Path | None = None,
        stage_parameters: Mapping[str, Mapping[str, str]] | None = None,
    ) -> ServedPipeline:
        """The pipeline with the core of ``configs/<variant>.pbtxt``, its parameters overridden
        (e.g. ``{"onnx_file": "model_int8_qdq.onnx", "graph_optimization": "disable_all"}``), from the
        core's ``version_dir`` (default: version 1); ``stage_parameters``: a second stage's overrides, by role."""
        config = core_config(configs, variant, parameters)
        return cls(configs, cpu_core.load(config, version_dir or configs.layout.core_version_dir), config, variant, stage_parameters)

    # ---- the steps

    def run_core(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The core's inputs (by its names) -> its outputs, in batches of at most its max_batch_size."""
        count = len(next(iter(feeds.values())))
        if count == 0:
            raise ValueError("no images to run")
        if any(preprocessing.is_ragged(value) for value in feeds.values()):  # one photo a run: the shapes differ
            runs = [self.core.run({name: np.asarray(value[index])[np.newaxis] for name, value in feeds.items()}) for index in range(count)]
            return {name: preprocessing.ragged([run[k][0] for run in runs]) for k, name in enumerate(self.core.output_names)}
        chunk = self.core_config.max_batch_size
        parts = [self.core.run({name: value[start : start + chunk] for name, value in feeds.items()}) for start in range(0, count, chunk)]
        return {name: np.concatenate([part[index] for part in parts]) for index, name in enumerate(self.core.output_names)}

    def with_core(self, tensors: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """``tensors`` and the core step's outputs (a tiled pipeline's postprocess runs the core itself)."""
        if "core" not in self.steps:
            return dict(tensors)
        step = self.steps["core"]
        out = dict(tensors)
        for name, value in self.run_core(self.core_feeds(tensors)).items():
            if name in step.outputs:
                out[step.outputs[name]] = value
        return out

    def postprocess_inputs(self, tensors: Mapping[str, np.ndarray]) -> dict[str, np.ndarray | None]:
        """The postprocess model's inputs (by its names) among ensemble tensors; None for an optional one not sent."""
        return {name: tensors.get(source) for name, source in self.steps["postprocess"].inputs.items()}

    def postprocess(self, tensors: Mapping[str, np.ndarray]) -> TaskResult:
        """Ensemble tensors -> the postprocess model's result (its inputs as the ensemble maps them)."""
        return self.postprocessor.run(self.postprocessor.parse(self.postprocess_inputs(tensors)))

    def run_decoded(self, decoded: Sequence[image_codec.Decoded], request: Mapping[str, np.ndarray] | None = None) -> TaskResult:
        return self.postprocess(self.with_core(self.preprocessed(decoded, request)))

    def run(self, payloads: Sequence[bytes], request: Mapping[str, np.ndarray] | None = None) -> TaskResult:
        """Uploads -> their answers, as one request of the ensemble (``ImageError`` if one is refused)."""
        return self.run_decoded(self.decode_request(payloads, request), request)
