# Generated from pipeline.toml by `python -m builders configs --pipeline face_detector`: edit pipeline.toml, then run it.
"""Triton entry point: the core model every pipeline shares (vision_serving.triton_models.core)."""

from vision_serving.triton_models.core import TritonPythonModel  # noqa: F401
