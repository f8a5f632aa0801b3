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

from . import core_model, cpu_core, drift, image_codec, model_config, preprocessing
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
    """The ensemble's step of each role (preprocess, core, postprocess), by the layout's model names."""
    roles = {configs.layout.model_name(role): role for role in ("preprocess", "core", "postprocess")}
    steps: dict[str, Step] = {}
    for step in configs.ensemble.ensemble_scheduling.step:
        role = roles.get(step.model_name)
        if role is None or role in steps:
            raise ConfigError(f"ensemble '{configs.ensemble.name}': step model '{step.model_name}' is not one of {sorted(roles)} once each")
        steps[role] = Step(dict(step.input_map), dict(step.output_map))
    missing = sorted(set(roles.values()) - set(steps))
    if missing:
        raise ConfigError(f"ensemble '{configs.ensemble.name}': no step for the {', '.join(missing)} model")
    return steps


def core_config(configs: PipelineConfigs, variant: str = SERVED_CORE_CONFIG, parameters: Mapping[str, str] | None = None) -> ModelConfig:
    """A copy of a core config variant with parameters overridden (``onnx_file`` and ``precision``
    replace each other: a config names the model one way)."""
    config = ModelConfig()
    config.CopyFrom(configs.core_variant(variant))
    for key, value in (parameters or {}).items():
        other = {"onnx_file": "precision", "precision": "onnx_file"}.get(key)
        if other is not None and other in config.parameters:
            del config.parameters[other]
        config.parameters[key].string_value = value
    return config


class ServedInputs:
    """The served decode and preprocessing, up to the core's inputs (no core needed: the export
    verifies a model it is still building with them)."""

    def __init__(self, configs: PipelineConfigs) -> None:
        self.configs = configs
        self.spec = configs.spec
        self.limits = configs.limits
        self.minimum = preprocessing.decode_minimum(self.spec)
        self.outputs = preprocessing.PreprocessOutputs.from_config(configs.preprocess)
        self.steps = ensemble_steps(configs)

    def use_served_threads(self) -> None:
        """OpenCV's thread pool as the preprocess model sets it (process-wide)."""
        preprocessing.set_threads(model_config.int_parameter(self.configs.preprocess, "opencv_threads", 0))

    def decode(self, data: bytes) -> image_codec.Decoded:
        """One upload through the served decoder (``ImageError`` for what the server refuses)."""
        return image_codec.decode(data, self.limits, self.minimum)

    def preprocess(self, decoded: Sequence[image_codec.Decoded]) -> dict[str, np.ndarray]:
        """Decoded images -> the preprocess model's outputs, by its tensor names."""
        sizes = preprocessing.original_sizes(decoded)
        tensors = {self.outputs.pixels: preprocessing.preprocess_batch([item.image for item in decoded], self.spec)}
        if self.outputs.image_size is not None:
            tensors[self.outputs.image_size] = sizes
        if self.outputs.transform is not None:
            tensors[self.outputs.transform] = preprocessing.tensor_transforms(sizes, self.spec)
        return tensors

    def preprocessed(
        self, decoded: Sequence[image_codec.Decoded], request: Mapping[str, np.ndarray] | None = None
    ) -> dict[str, np.ndarray]:
        """The ensemble tensors after the preprocess step, by ensemble name (with the request's optional
        inputs, ``request``: ensemble input name -> array)."""
        tensors = dict(request or {})
        step = self.steps["preprocess"]
        for name, value in self.preprocess(decoded).items():
            tensors[step.outputs[name]] = value
        return tensors

    def core_feeds(self, tensors: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The core's inputs (by its names) among ensemble tensors."""
        return {name: tensors[source] for name, source in self.steps["core"].inputs.items()}

    def image_features(self, payloads: Sequence[bytes], decoded: Sequence[image_codec.Decoded]) -> drift.Features:
        """The preprocess model's drift features of these uploads."""
        return drift.image_features(
            [item.image for item in decoded], preprocessing.original_sizes(decoded), *drift.payload_facts(list(payloads))
        )


class ServedPipeline(ServedInputs):
    def __init__(self, configs: PipelineConfigs, core: core_model.Core, core_config: ModelConfig) -> None:
        super().__init__(configs)
        self.core = core
        self.core_config = core_config
        self.postprocessor = configs.postprocessor()
        if core_config.max_batch_size < 1:
            raise ConfigError(f"model '{core_config.name}': a core without a batch dimension (max_batch_size 0) is not supported")

    @classmethod
    def load(
        cls,
        configs: PipelineConfigs,
        variant: str = SERVED_CORE_CONFIG,
        parameters: Mapping[str, str] | None = None,
        version_dir: Path | None = None,
    ) -> ServedPipeline:
        """The pipeline with the core of ``configs/<variant>.pbtxt``, its parameters overridden
        (e.g. ``{"onnx_file": "model_int8_qdq.onnx", "graph_optimization": "disable_all"}``), from the
        core's ``version_dir`` (default: version 1)."""
        config = core_config(configs, variant, parameters)
        return cls(configs, cpu_core.load(config, version_dir or configs.layout.core_version_dir), config)

    # ---- the steps

    def run_core(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The core's inputs (by its names) -> its outputs, in batches of at most its max_batch_size."""
        count = len(next(iter(feeds.values())))
        if count == 0:
            raise ValueError("no images to run")
        chunk = self.core_config.max_batch_size
        parts = [self.core.run({name: value[start : start + chunk] for name, value in feeds.items()}) for start in range(0, count, chunk)]
        return {name: np.concatenate([part[index] for part in parts]) for index, name in enumerate(self.core.output_names)}

    def with_core(self, tensors: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """``tensors`` and the core step's outputs."""
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
        return self.run_decoded([self.decode(data) for data in payloads], request)
