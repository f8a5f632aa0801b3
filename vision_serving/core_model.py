"""Which ONNX a CPU core serves and which runtime runs it: the Python-backend core config's parameters.

``configs/cpu*.pbtxt`` of every ``<pipeline>_core`` name

- ``runtime``: one of :data:`vision_serving.cpu_runtimes.RUNTIMES` (``"onnxruntime"``, the default when the
  parameter is absent, or ``"openvino"``);
- the model, either ``precision``: ``"served"`` (what the precision ladder chose and measured,
  ``served_precision.json``, resolved at load time; FP32 when the ladder has not run),
  ``"fp32"``, ``"fp16"`` or ``"int8"``, or ``onnx_file``: a file name in the version folder.

Every runtime exposes the same interface (``input_names``, ``output_names``, ``run(feeds) ->
list`` in config order) and refuse at load time a model whose outputs do not match the config;
:func:`vision_serving.cpu_core.load` builds the one a config names.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Protocol

import numpy as np

from . import layout, model_config

SERVED = "served"
PRECISIONS = (SERVED, *sorted(layout.PRECISION_ONNX))


class Core(Protocol):
    input_names: list[str]
    output_names: list[str]
    onnx_path: Path

    def run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]: ...


def model_parameter(config: model_config.ModelConfig) -> tuple[str, str]:
    """("onnx_file", file name) or ("precision", one of ``PRECISIONS``): exactly one must be given."""
    has_file, has_precision = "onnx_file" in config.parameters, "precision" in config.parameters
    if has_file == has_precision:
        raise model_config.ConfigError(f"model '{config.name}': give exactly one of the parameters 'onnx_file' and 'precision'")
    if has_file:
        return "onnx_file", model_config.parameter(config, "onnx_file")
    precision = model_config.parameter(config, "precision")
    if precision not in PRECISIONS:
        raise model_config.ConfigError(f"model '{config.name}': precision {precision!r} is not one of {PRECISIONS}")
    return "precision", precision


def onnx_filename(config: model_config.ModelConfig, version_dir: Path | None = None) -> str:
    """The ONNX file (in the version folder) the config serves.

    ``precision: "served"`` needs ``version_dir`` (it reads ``served_precision.json`` there);
    a record whose file changed since the ladder measured it is refused, never served ungated.
    """
    key, precision = model_parameter(config)
    if key == "onnx_file":
        return precision
    if precision != SERVED:
        return layout.PRECISION_ONNX[precision]
    if version_dir is None:
        raise model_config.ConfigError(f"model '{config.name}': precision 'served' is resolved in a version folder")
    record = layout.read_served_precision(version_dir)
    if record is None:
        return layout.FP32_ONNX  # the ladder has not run: the exact reference
    if layout.served_onnx(version_dir) is None:
        raise model_config.ConfigError(
            f"model '{config.name}': {version_dir / layout.SERVED_PRECISION} names {record['onnx']}, which is missing or "
            "not the file the precision ladder measured; rerun `python -m builders select-precision`"
        )
    return str(record["onnx"])


def onnx_path(config: model_config.ModelConfig, version_dir: Path) -> Path:
    path = version_dir / onnx_filename(config, version_dir)
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist; build it with `python -m builders all`")
    return path


def check_io(config: model_config.ModelConfig, inputs: list[str], outputs: list[str], what: str) -> None:
    """The model's tensor names are the config's."""
    declared_inputs, declared_outputs = [t.name for t in config.input], [t.name for t in config.output]
    if sorted(inputs) != sorted(declared_inputs) or sorted(outputs) != sorted(declared_outputs):
        raise model_config.ConfigError(
            f"{what} I/O {sorted(inputs)} -> {sorted(outputs)} does not match config {declared_inputs} -> {declared_outputs}"
        )


# A dynamic input dim (-1 in the config) takes this size in the load-time probe: a multiple of 32 (a
# detector's stride), wide enough for a recognizer's shortest line.
PROBE_SIZE = 64


def check_output_shapes(config: model_config.ModelConfig, run: Callable[[dict[str, np.ndarray]], list[np.ndarray]], what: str) -> None:
    """Run one zero input (dynamic dims at PROBE_SIZE): a model whose outputs do not match its config
    (-1 matching any size) fails to load, never serves."""
    probe = {
        item.name: np.zeros((1, *(PROBE_SIZE if d < 0 else d for d in item.dims)), dtype=model_config.numpy_dtype(item.data_type))
        for item in config.input
    }
    for item, value in zip(config.output, run(probe)):
        shape = list(value.shape[1:])
        declared = list(item.dims)
        if len(shape) != len(declared) or any(d >= 0 and d != s for d, s in zip(declared, shape)):
            raise model_config.ConfigError(f"{what} output '{item.name}' has shape {shape} per image; the config declares {declared}")
