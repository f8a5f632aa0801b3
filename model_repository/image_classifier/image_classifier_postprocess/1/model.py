"""Triton entry point; the model lives in vision_serving.triton_models.classification (shared by every classifier)."""

from vision_serving.triton_models.classification import TritonPythonModel  # noqa: F401
