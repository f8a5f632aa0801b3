"""A pipeline's configs, loaded once: its ensemble, its three models (every core variant) and its task.

Everything that computes what a pipeline serves outside Triton (the in-process served pipeline,
the builders, the benchmarks) starts from one :class:`PipelineConfigs` instead of re-reading
files: the configs are the contract (tensor names, dims, preprocessing and postprocessing
parameters), and the task comes from the postprocess config's ``task`` parameter.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from . import image_codec, model_config, preprocessing
from .layout import Pipeline
from .model_config import ConfigError, ModelConfig
from .tasks import registry
from .tasks.base import Postprocessor, Task


@dataclass(frozen=True)
class PipelineConfigs:
    layout: Pipeline
    ensemble: ModelConfig
    preprocess: ModelConfig
    postprocess: ModelConfig
    cores: dict[str, ModelConfig]  # "" for config.pbtxt, else the configs/<name>.pbtxt variants
    task: Task

    @classmethod
    def load(cls, pipeline: Pipeline) -> PipelineConfigs:
        """Read every config of the pipeline's folder (``ConfigError`` naming the file)."""
        core_dir = pipeline.core_dir
        cores = {"": model_config.load_config(core_dir)}
        for path in sorted((core_dir / "configs").glob("*.pbtxt")):
            cores[path.stem] = model_config.load_config(core_dir, path.stem)
        postprocess = model_config.load_config(pipeline.model_dir("postprocess"))
        return cls(
            layout=pipeline,
            ensemble=model_config.load_config(pipeline.ensemble_dir),
            preprocess=model_config.load_config(pipeline.model_dir("preprocess")),
            postprocess=postprocess,
            cores=cores,
            task=registry.for_config(postprocess),
        )

    @classmethod
    def at(cls, repository: Path | str) -> PipelineConfigs:
        """The pipeline whose folder is ``repository``."""
        return cls.load(Pipeline.at(repository))

    @property
    def name(self) -> str:
        return self.layout.name

    def core(self, config_name: str | None = None) -> ModelConfig:
        """The core config tritonserver loads with ``--model-config-name=config_name`` (config.pbtxt when
        the variant does not exist or none is named)."""
        return self.cores.get(config_name or "", self.cores[""])

    def core_variant(self, config_name: str) -> ModelConfig:
        """A core variant that must exist (``ConfigError`` otherwise)."""
        if config_name not in self.cores:
            known = ", ".join(name for name in self.cores if name) or "none"
            raise ConfigError(f"{self.layout.core_dir}: no configs/{config_name}.pbtxt (variants: {known})")
        return self.cores[config_name]

    @property
    def spec(self) -> preprocessing.PreprocessSpec:
        return preprocessing.PreprocessSpec.from_config(self.preprocess)

    @property
    def limits(self) -> image_codec.ImageLimits:
        return preprocessing.limits_from_config(self.preprocess)

    def postprocessor(self) -> Postprocessor:
        return self.task.postprocessor(self.postprocess, self.layout.model_dir("postprocess"))
