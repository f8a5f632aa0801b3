# Generated from pipeline.toml by `python -m builders configs --pipeline image_classifier`: edit pipeline.toml, then run it.
"""Triton entry point: the postprocess model every pipeline shares (vision_serving.triton_models.postprocess)."""

from vision_serving.triton_models.postprocess import TritonPythonModel  # noqa: F401
