"""Triton entry point; the model lives in vision_serving.triton_models.core (shared by every pipeline)."""

from vision_serving.triton_models.core import TritonPythonModel  # noqa: F401
