"""Triton entry point; the model lives in vision_serving.triton_models.text_preprocess (the text_detection preprocessor)."""

from vision_serving.triton_models.text_preprocess import TritonPythonModel  # noqa: F401
