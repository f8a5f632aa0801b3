"""Read Triton ``config.pbtxt`` files with Triton's own protobuf schema (vendored in ``vision_serving.protos``).

The model repository's configs are the single source of truth for tensor
names, dtypes, dims and the preprocessing/postprocessing parameters. Code
reads them through this module instead of repeating literals.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

import numpy as np
from google.protobuf import json_format, text_format

from .protos import model_config_pb2
from .protos.model_config_pb2 import ModelConfig

# Triton config dtype -> numpy dtype. TYPE_STRING tensors are numpy object arrays of bytes.
_NUMPY_DTYPES: Mapping[int, np.dtype] = {
    model_config_pb2.TYPE_BOOL: np.dtype(np.bool_),
    model_config_pb2.TYPE_UINT8: np.dtype(np.uint8),
    model_config_pb2.TYPE_INT8: np.dtype(np.int8),
    model_config_pb2.TYPE_INT32: np.dtype(np.int32),
    model_config_pb2.TYPE_INT64: np.dtype(np.int64),
    model_config_pb2.TYPE_FP16: np.dtype(np.float16),
    model_config_pb2.TYPE_FP32: np.dtype(np.float32),
    model_config_pb2.TYPE_FP64: np.dtype(np.float64),
    model_config_pb2.TYPE_STRING: np.dtype(np.object_),
}


class ConfigError(ValueError):
    """A model configuration is missing, unparsable or inconsistent."""


def parse_config_text(text: str, source: str = "<string>") -> ModelConfig:
    """Parse protobuf text format into a ``ModelConfig``; errors name the source."""
    config = ModelConfig()
    try:
        text_format.Parse(text, config)
    except text_format.ParseError as error:
        raise ConfigError(f"{source}: {error}") from None
    return config


def config_path(model_dir: Path, config_name: str | None = None) -> Path:
    """The file Triton loads for a model: ``configs/<name>.pbtxt`` if it exists, else ``config.pbtxt``.

    This mirrors ``tritonserver --model-config-name``.
    """
    if config_name:
        candidate = model_dir / "configs" / f"{config_name}.pbtxt"
        if candidate.is_file():
            return candidate
    return model_dir / "config.pbtxt"


def load_config(model_dir: Path | str, config_name: str | None = None) -> ModelConfig:
    path = config_path(Path(model_dir), config_name)
    if not path.is_file():
        raise ConfigError(f"{path}: no such model configuration")
    return parse_config_text(path.read_text(), str(path))


def config_from_triton_json(model_config_json: str) -> ModelConfig:
    """The ``args['model_config']`` JSON that Triton passes to ``initialize``."""
    config = ModelConfig()
    json_format.Parse(model_config_json, config, ignore_unknown_fields=True)
    return config


def parameter(config: ModelConfig, key: str, default: str | None = None) -> str:
    """A string parameter; raises ``ConfigError`` naming the model if it is absent."""
    if key in config.parameters:
        return config.parameters[key].string_value
    if default is not None:
        return default
    raise ConfigError(f"model '{config.name}': missing parameter '{key}'")


def int_parameter(config: ModelConfig, key: str, default: int | None = None) -> int:
    raw = parameter(config, key, None if default is None else str(default))
    try:
        return int(raw)
    except ValueError:
        raise ConfigError(f"model '{config.name}': parameter '{key}' must be an integer, got {raw!r}") from None


def float_parameter(config: ModelConfig, key: str, default: float | None = None) -> float:
    raw = parameter(config, key, None if default is None else str(default))
    try:
        return float(raw)
    except ValueError:
        raise ConfigError(f"model '{config.name}': parameter '{key}' must be a number, got {raw!r}") from None


def float_list_parameter(config: ModelConfig, key: str) -> list[float]:
    raw = parameter(config, key)
    try:
        return [float(item) for item in raw.split(",")]
    except ValueError:
        raise ConfigError(f"model '{config.name}': parameter '{key}' must be comma-separated numbers, got {raw!r}") from None


def tensor(config: ModelConfig, name: str, kind: str = "input"):
    """The ``ModelInput`` or ``ModelOutput`` called ``name``."""
    tensors = config.input if kind == "input" else config.output
    for item in tensors:
        if item.name == name:
            return item
    raise ConfigError(f"model '{config.name}': no {kind} named '{name}'")


def only_tensor(config: ModelConfig, kind: str):
    """The single input (or output) of a model that has exactly one."""
    tensors = config.input if kind == "input" else config.output
    if len(tensors) != 1:
        raise ConfigError(f"model '{config.name}': expected exactly one {kind}, found {len(tensors)}")
    return tensors[0]


class TensorRoles:
    """A model's tensors found by what they are (required/optional, datatype), not by literal names.

    Used on an ensemble's config (its image input, :func:`image_input_name`, for the builders'
    and benchmarks' requests; the load generator's labels output) so that renaming a tensor is
    a config change only. The task models find theirs by role (:mod:`vision_serving.tasks.base`).
    """

    def __init__(self, config: ModelConfig) -> None:
        self.config = config

    def _pick(self, tensors, datatype: str, optional: bool | None, kind: str) -> list[str]:
        return [
            item.name
            for item in tensors
            if dtype_name(item.data_type) == datatype and (optional is None or bool(getattr(item, "optional", False)) == optional)
        ]

    def _one(self, names: list[str], what: str) -> str:
        if len(names) != 1:
            raise ConfigError(f"model '{self.config.name}': expected exactly one {what}, found {names or 'none'}")
        return names[0]

    def required_input(self, datatype: str) -> str:
        return self._one(self._pick(self.config.input, datatype, False, "input"), f"required {datatype} input")

    def output(self, datatype: str) -> str:
        return self._one(self._pick(self.config.output, datatype, None, "output"), f"{datatype} output")


def tensors_by_role(config: ModelConfig) -> TensorRoles:
    return TensorRoles(config)


def image_input_name(config: ModelConfig) -> str:
    """The encoded-image input every pipeline's ensemble (and preprocess model) takes: its one required BYTES input."""
    return TensorRoles(config).required_input("BYTES")


def numpy_dtype(data_type: int) -> np.dtype:
    try:
        return _NUMPY_DTYPES[data_type]
    except KeyError:
        raise ConfigError(f"unsupported data type {model_config_pb2.DataType.Name(data_type)}") from None


def dtype_name(data_type: int) -> str:
    """``TYPE_FP32`` -> ``FP32`` (the KServe/tritonclient spelling; STRING is ``BYTES``)."""
    name = model_config_pb2.DataType.Name(data_type).removeprefix("TYPE_")
    return "BYTES" if name == "STRING" else name


def to_json(config: ModelConfig) -> str:
    return json.dumps(json_format.MessageToDict(config), indent=2)
