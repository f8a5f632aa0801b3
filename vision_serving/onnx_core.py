"""Run the core ONNX model with onnxruntime on CPU (the no-GPU stand-in for TensorRT)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort

from . import core_model, model_config

GRAPH_OPTIMIZATION_LEVELS = {
    "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
    "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    # Q/DQ models: keep QuantizeLinear -> DequantizeLinear -> float ops, an
    # emulation of TensorRT's INT8 numerics (fused CPU int8 kernels differ; docs/design.md, "INT8 on CPU is judged by emulation").
    "disable_all": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
}


def create_session(
    onnx_path: Path, graph_optimization: str = "all", intra_op_threads: int = 0, allow_spinning: bool = True, memory_pattern: bool = True
) -> ort.InferenceSession:
    """``allow_spinning=False``: idle intra-op threads sleep instead of spinning (matters with > 1 thread).
    ``memory_pattern=False``: no memory plan cached per input shape (:func:`has_dynamic_dims`)."""
    if graph_optimization not in GRAPH_OPTIMIZATION_LEVELS:
        raise model_config.ConfigError(f"graph_optimization {graph_optimization!r} is not one of {sorted(GRAPH_OPTIMIZATION_LEVELS)}")
    if not onnx_path.is_file():
        raise FileNotFoundError(f"{onnx_path} does not exist; build it with `python -m builders all`")
    options = ort.SessionOptions()
    options.graph_optimization_level = GRAPH_OPTIMIZATION_LEVELS[graph_optimization]
    options.intra_op_num_threads = intra_op_threads
    options.inter_op_num_threads = 1
    options.enable_mem_pattern = memory_pattern
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.add_session_config_entry("session.intra_op.allow_spinning", "1" if allow_spinning else "0")
    return ort.InferenceSession(str(onnx_path), sess_options=options, providers=["CPUExecutionProvider"])


def has_dynamic_dims(config: model_config.ModelConfig) -> bool:
    """Whether an input takes images of several sizes (a -1 past the batch dim): a text detector fed each photo at
    its own size, a recognizer fed crops of several widths.

    onnxruntime caches a memory plan per input shape it has seen (its memory patterns): with inputs of many
    shapes its arena kept growing past the largest one (the text detector, 50 photo sizes: 870 -> 1095 MiB and
    rising). Without the plans it grows to what the largest input needs and stays there (810 MiB), no slower
    (827 against 862 CPU ms per photo). So such a core runs without them, and its warm-up includes its
    largest inputs: its memory is then reached at load and flat after it (docs/design.md, "Memory stays flat")."""
    return any(dim < 0 for tensor in config.input for dim in tensor.dims)


def _allow_spinning(config: model_config.ModelConfig) -> bool:
    """The ``allow_spinning`` parameter: "1" (onnxruntime's default) or "0"."""
    value = model_config.parameter(config, "allow_spinning", "1")
    if value not in ("0", "1"):
        raise model_config.ConfigError(f"model '{config.name}': allow_spinning {value!r} is not 0 or 1")
    return value == "1"


class OnnxCore:
    """The core model's inputs -> outputs, named and shaped as in its Triton config (``runtime: "onnxruntime"``)."""

    def __init__(self, config: model_config.ModelConfig, version_dir: Path) -> None:
        self.inputs = list(config.input)
        self.outputs = list(config.output)
        self.input_names = [item.name for item in self.inputs]
        self.output_names = [item.name for item in self.outputs]
        self.onnx_path = core_model.onnx_path(config, version_dir)
        self.session = create_session(
            self.onnx_path,
            model_config.parameter(config, "graph_optimization", "all"),
            model_config.int_parameter(config, "intra_op_threads", 0),
            _allow_spinning(config),
            memory_pattern=not has_dynamic_dims(config),
        )
        core_model.check_io(
            config, [item.name for item in self.session.get_inputs()], [item.name for item in self.session.get_outputs()], "ONNX"
        )
        core_model.check_output_shapes(config, self.run, "ONNX")

    def run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        """The outputs, in config order."""
        return self.session.run(self.output_names, feeds)
