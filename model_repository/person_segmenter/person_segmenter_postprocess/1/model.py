"""Triton entry point; the model lives in vision_serving.triton_models.postprocess (shared by every pipeline)."""

from vision_serving.triton_models.postprocess import TritonPythonModel  # noqa: F401
