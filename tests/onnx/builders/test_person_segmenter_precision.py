"""person_segmenter at FP32 and at the precision the ladder chose, against MediaPipe's own runtime.

In process (decode, the served preprocessing, onnxruntime, the served postprocessing): the
integration test checks the same through the real server at the precision the CPU serves.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from builders import export, precision, references
from vision_serving import image_codec, layout, model_config, preprocessing, segmentation
from vision_serving.onnx_core import create_session

PERSON_PHOTOS = ("astronaut", "grace_hopper", "camera")


@pytest.fixture(scope="module")
def segmenter() -> layout.Pipeline:
    pipeline = layout.pipeline("person_segmenter")
    export.export(pipeline.repository, log=lambda _: None)
    return pipeline


def masks_of(pipeline: layout.Pipeline, onnx_file, optimization: str, photo_bytes: dict[str, bytes]) -> list[np.ndarray]:
    config = model_config.load_config(pipeline.model_dir("preprocess"))
    spec, limits = preprocessing.PreprocessSpec.from_config(config), preprocessing.limits_from_config(config)
    images = [image_codec.decode_rgb(photo_bytes[name], limits) for name in PERSON_PHOTOS]
    probabilities = create_session(onnx_file, optimization).run(None, {"images": preprocessing.preprocess_batch(images, spec)})[0]
    spec_mask = precision.mask_spec(pipeline)
    return [segmentation.decode_png(m.png) for m in segmentation.masks(probabilities, preprocessing.image_sizes(images), spec_mask)]


@pytest.fixture(scope="module")
def mediapipe(photo_bytes) -> list[np.ndarray]:
    out = references.mediapipe_outputs("selfie_segmentation", {n: photo_bytes[n] for n in PERSON_PHOTOS}, log=lambda _: None)
    return [out[name] >= 0.5 for name in PERSON_PHOTOS]


def test_fp32_matches_mediapipe(segmenter, mediapipe, photo_bytes):
    for mask, reference in zip(masks_of(segmenter, segmenter.onnx("fp32"), "all", photo_bytes), mediapipe):
        assert segmentation.iou(mask, reference) >= 0.98


def test_the_served_precision_matches_mediapipe(segmenter, mediapipe, photo_bytes):
    record = precision.select_precision(segmenter.repository, log=lambda _: None)
    rungs = {rung["precision"]: rung for rung in record["rungs"]}
    assert record["precision"] in ("int8", "fp16", "fp32") and rungs[record["precision"]]["pass"]
    assert all(not rung["pass"] for name, rung in rungs.items() if name != record["precision"])  # the first passing rung
    served = precision.served_onnx(segmenter)
    assert served is not None and json.loads(segmenter.served_precision.read_text())["onnx"] == served.name
    optimization = "disable_all" if record["precision"] == "int8" else "all"
    for mask, reference in zip(masks_of(segmenter, served, optimization, photo_bytes), mediapipe):
        assert segmentation.iou(mask, reference) >= 0.95
