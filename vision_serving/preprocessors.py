"""Preprocess computations other than the image-to-tensor resize, by the preprocess config's ``preprocessor`` parameter.

Every pipeline's preprocess decodes uploads with the same limits (:mod:`vision_serving.image_codec`).
Most then resize each photo to the core's fixed input (:class:`vision_serving.preprocessing.PreprocessSpec`:
``preprocessor`` absent or ``"image_to_tensor"``). A preprocessor listed here computes its outputs
otherwise, and they may differ in shape from photo to photo:

- ``text_detection``: the text detector's input sized per photo as RapidOCR sizes it, the resized,
  padded photo the crops are cut from, and the map back to the photo
  (:mod:`vision_serving.tasks.text_reading.steps`).

In process (:class:`vision_serving.served.ServedInputs`) a batch of photos whose outputs differ in shape
holds them as a **ragged** array: a 1-D object array of each photo's array (no batch dim).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from . import image_codec, model_config, preprocessing
from .model_config import ConfigError, ModelConfig
from .tasks.base import EngineProfile
from .tasks.text_reading import steps as text_steps
from .tasks.text_reading.settings import DEFAULT as TEXT_DEFAULTS

IMAGE_TO_TENSOR = "image_to_tensor"
Preprocess = Callable[[Sequence[image_codec.Decoded]], dict[str, np.ndarray]]


def ragged(arrays: Sequence[np.ndarray]) -> np.ndarray:
    """Per-photo arrays as one batch: stacked when they share a shape, else a 1-D object array of them."""
    if len({array.shape for array in arrays}) <= 1 and arrays:
        return np.stack(arrays)
    out = np.empty(len(arrays), dtype=object)
    for index, array in enumerate(arrays):
        out[index] = array
    return out


def is_ragged(array: np.ndarray) -> bool:
    return array.dtype == object and array.ndim == 1 and all(isinstance(item, np.ndarray) for item in array)


def max_detector_side(config: ModelConfig) -> int:
    """The text detection preprocessor's ``max_detector_side``: photos whose detector input is longer are refused."""
    return model_config.int_parameter(config, "max_detector_side", text_steps.MAX_DETECTOR_SIDE)


def text_detection(config: ModelConfig) -> Preprocess:
    max_side = max_detector_side(config)

    def preprocess(decoded: Sequence[image_codec.Decoded]) -> dict[str, np.ndarray]:
        prepared = [
            text_steps.prepare_photo(item, index, len(decoded), TEXT_DEFAULTS.detection, max_side) for index, item in enumerate(decoded)
        ]
        outputs = [text_steps.preprocess_outputs([item]) for item in prepared]
        return {name: ragged([output[name][0] for output in outputs]) for name in outputs[0]} if outputs else {}

    return preprocess


def check_text_detection(config: ModelConfig) -> list[str]:
    """The outputs the text detection preprocessor writes, by name, type and dims."""
    expected = {
        text_steps.DETECTOR_INPUT: ("TYPE_UINT8", [3, -1, -1]),
        text_steps.IMAGE: ("TYPE_UINT8", [-1, -1, 3]),
        text_steps.TRANSFORM: ("TYPE_FP32", [5]),
    }
    declared = {t.name: (model_config.model_config_pb2.DataType.Name(t.data_type), [int(d) for d in t.dims]) for t in config.output}
    if declared != expected:
        return [f"model '{config.name}': the text_detection preprocessor writes {expected}, the config declares {declared}"]
    return []


def text_detection_normalization(config: ModelConfig) -> preprocessing.PixelNormalization:
    """The detector's normalization of the uint8 BGR pixels this preprocess sends (folded into its graph by the builders)."""
    mean, std = text_steps.detection.pixel_normalization(TEXT_DEFAULTS.detection)
    return preprocessing.PixelNormalization(mean, std, "NCHW")


def text_detection_profiles(config: ModelConfig) -> tuple[EngineProfile, ...]:
    """The detector's TensorRT profiles: the inputs this preprocess can send (:func:`text_steps.detector_profiles`)."""
    return text_steps.detector_profiles(TEXT_DEFAULTS.detection, max_detector_side(config))


PREPROCESSORS: dict[str, Callable[[ModelConfig], Preprocess]] = {"text_detection": text_detection}
CHECKS: dict[str, Callable[[ModelConfig], list[str]]] = {"text_detection": check_text_detection}
PROFILES: dict[str, Callable[[ModelConfig], tuple[EngineProfile, ...]]] = {"text_detection": text_detection_profiles}
NORMALIZATIONS: dict[str, Callable[[ModelConfig], preprocessing.PixelNormalization]] = {"text_detection": text_detection_normalization}


def kind(config: ModelConfig) -> str:
    """The preprocess config's ``preprocessor`` (``ConfigError`` for an unknown one)."""
    name = model_config.parameter(config, "preprocessor", IMAGE_TO_TENSOR)
    if name != IMAGE_TO_TENSOR and name not in PREPROCESSORS:
        known = ", ".join([IMAGE_TO_TENSOR, *sorted(PREPROCESSORS)])
        raise ConfigError(f"model '{config.name}': preprocessor {name!r} is not one of {known}")
    return name


def custom(config: ModelConfig) -> Preprocess | None:
    """The preprocess computation the config names; None for the image-to-tensor resize."""
    name = kind(config)
    return None if name == IMAGE_TO_TENSOR else PREPROCESSORS[name](config)


def check(config: ModelConfig) -> list[str]:
    """Problems of a preprocess config whose preprocessor is one of this module's."""
    try:
        name = kind(config)
    except ConfigError as error:
        return [str(error)]
    return [] if name == IMAGE_TO_TENSOR else CHECKS[name](config)


def engine_profiles(config: ModelConfig) -> tuple[EngineProfile, ...]:
    """The TensorRT profiles of the core this preprocess feeds, from the shapes it can send: () for the
    image-to-tensor resize (the core's config fixes its dims)."""
    name = kind(config)
    return () if name == IMAGE_TO_TENSOR else PROFILES[name](config)


def pixel_normalization(config: ModelConfig) -> preprocessing.PixelNormalization | None:
    """The normalization the core computes in its graph because this preprocess hands it uint8 pixels; None when
    it hands floats (normalized here)."""
    name = kind(config)
    if name != IMAGE_TO_TENSOR:
        return NORMALIZATIONS[name](config)
    spec = preprocessing.PreprocessSpec.from_config(config)
    return preprocessing.PixelNormalization.of_spec(spec) if spec.pixel_dtype == "uint8" else None
