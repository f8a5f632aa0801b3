"""The text reader's preprocessor (``preprocessor: "text_detection"`` in its preprocess config): the detector's
input sized per photo as RapidOCR sizes it, the resized, padded photo the crops are cut from, and the map back to
the photo (:mod:`.steps`); what it writes, the TensorRT profiles of the shapes it can send, and the normalization
the detector computes in its graph from the uint8 pixels it is handed.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ... import image_codec, model_config, preprocessing
from ...model_config import ModelConfig
from ..base import EngineProfile, Preprocessor
from . import steps as text_steps
from .settings import DEFAULT as TEXT_DEFAULTS


def max_detector_side(config: ModelConfig) -> int:
    """The text detection preprocessor's ``max_detector_side``: photos whose detector input is longer are refused."""
    return model_config.int_parameter(config, "max_detector_side", text_steps.MAX_DETECTOR_SIDE)


def text_detection(config: ModelConfig) -> preprocessing.Preprocess:
    max_side = max_detector_side(config)

    def preprocess(decoded: Sequence[image_codec.Decoded]) -> dict[str, np.ndarray]:
        prepared = [
            text_steps.prepare_photo(item, index, len(decoded), TEXT_DEFAULTS.detection, max_side) for index, item in enumerate(decoded)
        ]
        outputs = [text_steps.preprocess_outputs([item]) for item in prepared]
        return {name: preprocessing.ragged([output[name][0] for output in outputs]) for name in outputs[0]} if outputs else {}

    return preprocess


def text_detection_request(config: ModelConfig) -> preprocessing.Preprocess:
    """One request's detector input (the served preprocess): its photos must share one detector size (one photo per
    request always does), since Triton batches requests of equal shapes only."""
    max_side = max_detector_side(config)

    def preprocess(decoded: Sequence[image_codec.Decoded]) -> dict[str, np.ndarray]:
        return text_steps.preprocess_outputs(text_steps.prepare_decoded(decoded, TEXT_DEFAULTS.detection, max_side))

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


PREPROCESSOR = Preprocessor(
    name="text_detection",
    make=text_detection,
    check=check_text_detection,
    profiles=text_detection_profiles,
    normalization=text_detection_normalization,
    pixels=text_steps.DETECTOR_INPUT,
    parameters=("max_detector_side",),
    request=text_detection_request,
)
