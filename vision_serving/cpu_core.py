"""The CPU core a Python-backend core config names: its runtime (:mod:`vision_serving.cpu_runtimes`), compiled and probed.

The runtimes (:mod:`vision_serving.onnx_core`, :mod:`vision_serving.openvino_core`) build on the
config helpers of :mod:`vision_serving.core_model`; each is imported only when a config names it.
"""

from __future__ import annotations

from pathlib import Path

from . import core_model, cpu_runtimes, model_config


def load(config: model_config.ModelConfig, version_dir: Path) -> core_model.Core:
    """The core the config names (``runtime``, ``precision`` or ``onnx_file``), from ``version_dir``."""
    return cpu_runtimes.of_config(config).load(config, version_dir)
