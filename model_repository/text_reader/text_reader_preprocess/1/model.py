# Generated from pipeline.toml by `python -m builders configs --pipeline text_reader`: edit pipeline.toml, then run it.
"""Triton entry point: the preprocess model every pipeline shares (vision_serving.triton_models.preprocess)."""

from vision_serving.triton_models.preprocess import TritonPythonModel  # noqa: F401
