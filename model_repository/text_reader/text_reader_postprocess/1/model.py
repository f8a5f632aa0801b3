"""Triton entry point; the model lives in vision_serving.triton_models.text_postprocess (the text_reading task, BLS)."""

from vision_serving.triton_models.text_postprocess import TritonPythonModel  # noqa: F401
