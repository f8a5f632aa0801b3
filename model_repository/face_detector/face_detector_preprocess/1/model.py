"""Triton entry point; the model lives in vision_serving.triton_models.preprocess (shared by every pipeline)."""

from vision_serving.triton_models.preprocess import TritonPythonModel  # noqa: F401
