"""The CPU core a Python-backend core config names: onnxruntime or OpenVINO, compiled and probed.

The runtimes (:mod:`vision_serving.onnx_core`, :mod:`vision_serving.openvino_core`) build on the
config helpers of :mod:`vision_serving.core_model`; OpenVINO is imported only when a config asks
for it (a large import).
"""

from __future__ import annotations

from pathlib import Path

from . import core_model, model_config, onnx_core


def load(config: model_config.ModelConfig, version_dir: Path) -> core_model.Core:
    """The core the config names (``runtime``, ``precision`` or ``onnx_file``), from ``version_dir``."""
    if core_model.runtime(config) == "openvino":
        from . import openvino_core

        return openvino_core.OpenVinoCore(config, version_dir)
    return onnx_core.OnnxCore(config, version_dir)
