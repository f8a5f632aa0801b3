"""Run the core ONNX model with onnxruntime on CPU (the no-GPU stand-in for TensorRT)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort

from . import model_config

GRAPH_OPTIMIZATION_LEVELS = {
    "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
    "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    # Q/DQ models: keep QuantizeLinear -> DequantizeLinear -> float ops, an
    # emulation of TensorRT's INT8 numerics (fused CPU int8 kernels differ; DESIGN.md §3).
    "disable_all": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
}


def create_session(onnx_path: Path, graph_optimization: str = "all", intra_op_threads: int = 0) -> ort.InferenceSession:
    if graph_optimization not in GRAPH_OPTIMIZATION_LEVELS:
        raise model_config.ConfigError(
            f"graph_optimization {graph_optimization!r} is not one of {sorted(GRAPH_OPTIMIZATION_LEVELS)}"
        )
    if not onnx_path.is_file():
        raise FileNotFoundError(f"{onnx_path} does not exist; build it with `python -m builders export`")
    options = ort.SessionOptions()
    options.graph_optimization_level = GRAPH_OPTIMIZATION_LEVELS[graph_optimization]
    options.intra_op_num_threads = intra_op_threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    return ort.InferenceSession(str(onnx_path), sess_options=options, providers=["CPUExecutionProvider"])


class OnnxCore:
    """The core model's single input -> single output, as named in its Triton config."""

    def __init__(self, config: model_config.ModelConfig, version_dir: Path) -> None:
        self.input = model_config.only_tensor(config, "input")
        self.output = model_config.only_tensor(config, "output")
        self.session = create_session(
            version_dir / model_config.parameter(config, "onnx_file"),
            model_config.parameter(config, "graph_optimization", "all"),
            model_config.int_parameter(config, "intra_op_threads", 0),
        )
        onnx_inputs = [item.name for item in self.session.get_inputs()]
        onnx_outputs = [item.name for item in self.session.get_outputs()]
        if onnx_inputs != [self.input.name] or onnx_outputs != [self.output.name]:
            raise model_config.ConfigError(
                f"ONNX I/O {onnx_inputs} -> {onnx_outputs} does not match config "
                f"{self.input.name} -> {self.output.name}"
            )
        self._check_output_shape()

    def _check_output_shape(self) -> None:
        """Run one zero image: a model whose output does not match its config fails to load, never serves."""
        probe = np.zeros((1, *self.input.dims), dtype=model_config.numpy_dtype(self.input.data_type))
        shape = list(self.run(probe).shape[1:])
        if shape != list(self.output.dims):
            raise model_config.ConfigError(
                f"ONNX output '{self.output.name}' has shape {shape} per image; the config declares {list(self.output.dims)}"
            )

    def run(self, batch: np.ndarray) -> np.ndarray:
        (logits,) = self.session.run([self.output.name], {self.input.name: batch})
        return logits
