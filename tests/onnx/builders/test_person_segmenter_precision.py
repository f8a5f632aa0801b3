"""person_segmenter at FP32 and at the precision the ladder chose, against MediaPipe's own runtime.

The pipeline is the laddered copy the model image is staged from (tests/support/deployment.py:
`python -m builders all` with the INT8 calibration cut to 64 samples), so the ladder that chose its
precision is the one the shared server's image carries. In process (decode, the served preprocessing,
onnxruntime, the served postprocessing): the integration test checks the same through the real server
at the precision the CPU serves.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from builders import loaded, precision
from builders.loaded import LoadedPipeline
from tests.support import references
from vision_serving import layout
from vision_serving.tasks import segmentation

PERSON_PHOTOS = ("astronaut", "grace_hopper", "camera")


@pytest.fixture(scope="module")
def segmenter(laddered_repository) -> LoadedPipeline:
    return loaded.load(layout.pipeline("person_segmenter", laddered_repository))


def masks_of(pipeline: LoadedPipeline, onnx_file, optimization: str, photo_bytes: dict[str, bytes]) -> list[np.ndarray]:
    """The served pipeline in process (decode, preprocessing, this ONNX, postprocessing): thresholded masks."""
    served = pipeline.served(parameters=precision.rung_parameters(onnx_file, optimization))
    result = served.run([photo_bytes[name] for name in PERSON_PHOTOS])
    assert isinstance(result, segmentation.MaskResult)
    return result.thresholded()


@pytest.fixture(scope="module")
def mediapipe(photo_bytes) -> list[np.ndarray]:
    out = references.mediapipe_outputs("selfie_segmentation", {n: photo_bytes[n] for n in PERSON_PHOTOS}, log=lambda _: None)
    return [out[name] >= 0.5 for name in PERSON_PHOTOS]


def test_fp32_matches_mediapipe(segmenter, mediapipe, photo_bytes):
    for mask, reference in zip(masks_of(segmenter, segmenter.layout.onnx("fp32"), "all", photo_bytes), mediapipe):
        assert segmentation.iou(mask, reference) >= 0.98


def test_the_served_precision_matches_mediapipe(segmenter, mediapipe, photo_bytes):
    record = json.loads(segmenter.layout.served_precision.read_text())  # what select-precision wrote
    rungs = {rung["precision"]: rung for rung in record["rungs"]}
    assert record["precision"] in ("int8", "fp16", "fp32") and rungs[record["precision"]]["pass"]
    assert all(not rung["pass"] for name, rung in rungs.items() if name != record["precision"])  # the first passing rung
    served = segmenter.layout.served_onnx()
    assert served is not None and record["onnx"] == served.name
    optimization = "disable_all" if record["precision"] == "int8" else "all"
    for mask, reference in zip(masks_of(segmenter, served, optimization, photo_bytes), mediapipe):
        assert segmentation.iou(mask, reference) >= 0.95
