"""The image_classifier pipeline with its FP32 ONNX built, for tests that need only that pipeline.

``conftest.built_repository`` builds every pipeline (person_segmenter's export
downloads a wheel and runs tf2onnx); tests of the classifier's build steps
only need this one, and build it the same idempotent way.
"""

from __future__ import annotations

from vision_serving import layout
from vision_serving.layout import Pipeline

CLASSIFIER = "image_classifier"


def built_classifier() -> Pipeline:
    """layout.pipeline("image_classifier"), its FP32 ONNX exported (skipped when up to date)."""
    from builders import export

    pipeline = layout.pipeline(CLASSIFIER)
    export.export(pipeline.repository, log=lambda message: None)
    return pipeline
