"""Preprocess computations other than the image-to-tensor resize, by the preprocess config's ``preprocessor`` parameter.

Every pipeline's preprocess decodes uploads with the same limits (:mod:`vision_serving.image_codec`).
Most then resize each photo to the core's fixed input (:class:`vision_serving.preprocessing.PreprocessSpec`:
``preprocessor`` absent or ``"image_to_tensor"``). A task may declare preprocessors of its own
(:attr:`vision_serving.tasks.base.Task.preprocessors`, e.g. the text reader's ``text_detection``), which compute
their outputs otherwise; they may differ in shape from photo to photo.

In process (:class:`vision_serving.served.ServedInputs`) a batch of photos whose outputs differ in shape
holds them as a **ragged** array (:func:`vision_serving.preprocessing.ragged`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from . import cpu_sizing, drift, preprocessing
from .gpu_pixels import settings as gpu_pixels
from .model_config import ConfigError, ModelConfig, parameter
from .tasks import registry
from .tasks.base import EngineProfile, Preprocessor, RequestPlan, Role

IMAGE_TO_TENSOR = "image_to_tensor"
# Every task's own preprocessors, by name.
PREPROCESSORS: dict[str, Preprocessor] = {p.name: p for task in registry.TASKS.values() for p in task.preprocessors}


def kind(config: ModelConfig) -> str:
    """The preprocess config's ``preprocessor`` (``ConfigError`` for an unknown one)."""
    name = parameter(config, "preprocessor", IMAGE_TO_TENSOR)
    if name != IMAGE_TO_TENSOR and name not in PREPROCESSORS:
        known = ", ".join([IMAGE_TO_TENSOR, *sorted(PREPROCESSORS)])
        raise ConfigError(f"model '{config.name}': preprocessor {name!r} is not one of {known}")
    return name


def pixels_output(name: str) -> str:
    """The output through which the preprocessor ``name`` hands the core its input."""
    return preprocessing.PIXELS_OUTPUT if name == IMAGE_TO_TENSOR else PREPROCESSORS[name].pixels


def stated_defaults(name: str) -> dict[str, str]:
    """The parameters of its own a config of the preprocessor ``name`` states where its spec does not say."""
    return dict(preprocessing.IMAGE_TO_TENSOR_DEFAULTS) if name == IMAGE_TO_TENSOR else dict(PREPROCESSORS[name].defaults)


def options(name: str) -> tuple[Role, ...]:
    """The request's optional inputs the preprocessor ``name`` reads besides the upload."""
    return () if name == IMAGE_TO_TENSOR else PREPROCESSORS[name].options


def planner(config: ModelConfig) -> Callable[[Mapping[str, np.ndarray | None], int], RequestPlan] | None:
    """How a request of the config's preprocessor is decoded and computed from its optional inputs; None for a
    preprocessor that reads none (its photos decoded by the limits and computed by :func:`request_computation`)."""
    name = kind(config)
    found = None if name == IMAGE_TO_TENSOR else PREPROCESSORS[name].planner
    return None if found is None else found(config)


def custom(config: ModelConfig) -> preprocessing.Preprocess | None:
    """The preprocess computation the config names; None for the image-to-tensor resize."""
    name = kind(config)
    return None if name == IMAGE_TO_TENSOR else PREPROCESSORS[name].make(config)


def request_computation(config: ModelConfig) -> preprocessing.Preprocess | None:
    """One request's computation in the served preprocess, for a preprocessor of its own; None for the image-to-tensor
    resize."""
    name = kind(config)
    if name == IMAGE_TO_TENSOR:
        return None
    preprocessor = PREPROCESSORS[name]
    return (preprocessor.request or preprocessor.make)(config)


def parameters(name: str) -> set[str]:
    """Every parameter a preprocess config of the preprocessor ``name`` may have."""
    own = preprocessing.SPEC_PARAMETERS if name == IMAGE_TO_TENSOR else PREPROCESSORS[name].parameters
    common = (*preprocessing.LIMIT_DEFAULTS, *preprocessing.THREAD_DEFAULTS, *cpu_sizing.PARAMETERS, *drift.PARAMETERS, "drift_features")
    gpu = gpu_pixels.PARAMETERS if name == IMAGE_TO_TENSOR else ()  # the GPU pixel path's (the image-to-tensor resize's only)
    return {"preprocessor", *own, *common, *gpu}


def check(config: ModelConfig) -> list[str]:
    """Problems of a preprocess config: a parameter no code reads (a misspelt one would fall back to its default),
    and those its preprocessor finds."""
    try:
        name = kind(config)
    except ConfigError as error:
        return [str(error)]
    problems = []
    unknown = sorted(set(config.parameters) - parameters(name))
    if unknown:
        problems.append(
            f"model '{config.name}': unknown parameter(s) {', '.join(unknown)} (its preprocessor {name} reads {', '.join(sorted(parameters(name)))})"
        )
    return problems + ([] if name == IMAGE_TO_TENSOR else PREPROCESSORS[name].check(config))


def engine_profiles(config: ModelConfig) -> tuple[EngineProfile, ...]:
    """The TensorRT profiles of the core this preprocess feeds, from the shapes it can send: () for the
    image-to-tensor resize (the core's config fixes its dims)."""
    name = kind(config)
    return () if name == IMAGE_TO_TENSOR else PREPROCESSORS[name].profiles(config)


def pixel_normalization(config: ModelConfig) -> preprocessing.PixelNormalization | None:
    """The normalization the core computes in its graph because this preprocess hands it uint8 pixels; None when
    it hands floats (normalized here)."""
    name = kind(config)
    if name != IMAGE_TO_TENSOR:
        return PREPROCESSORS[name].normalization(config)
    spec = preprocessing.PreprocessSpec.from_config(config)
    return preprocessing.PixelNormalization.of_spec(spec) if spec.pixel_dtype == "uint8" else None
