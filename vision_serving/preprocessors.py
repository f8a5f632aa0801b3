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

from . import preprocessing
from .model_config import ConfigError, ModelConfig, parameter
from .tasks import registry
from .tasks.base import EngineProfile, Preprocessor

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


def custom(config: ModelConfig) -> preprocessing.Preprocess | None:
    """The preprocess computation the config names; None for the image-to-tensor resize."""
    name = kind(config)
    return None if name == IMAGE_TO_TENSOR else PREPROCESSORS[name].make(config)


def check(config: ModelConfig) -> list[str]:
    """Problems of a preprocess config whose preprocessor is one of this module's."""
    try:
        name = kind(config)
    except ConfigError as error:
        return [str(error)]
    return [] if name == IMAGE_TO_TENSOR else PREPROCESSORS[name].check(config)


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
