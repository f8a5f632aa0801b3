"""Triton entry point; the model lives in vision_serving.triton_models.segmentation (shared by every segmenter)."""

from vision_serving.triton_models.segmentation import TritonPythonModel  # noqa: F401
