"""Triton entry point; the model lives in vision_serving.triton_models.detection (shared by every SSD detector)."""

from vision_serving.triton_models.detection import TritonPythonModel  # noqa: F401
