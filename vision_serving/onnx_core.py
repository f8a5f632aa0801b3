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
    # emulation of TensorRT's INT8 numerics (fused CPU int8 kernels differ; docs/design.md, "INT8 on CPU").
    "disable_all": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
}


def create_session(onnx_path: Path, graph_optimization: str = "all", intra_op_threads: int = 0) -> ort.InferenceSession:
    if graph_optimization not in GRAPH_OPTIMIZATION_LEVELS:
        raise model_config.ConfigError(f"graph_optimization {graph_optimization!r} is not one of {sorted(GRAPH_OPTIMIZATION_LEVELS)}")
    if not onnx_path.is_file():
        raise FileNotFoundError(f"{onnx_path} does not exist; build it with `python -m builders all`")
    options = ort.SessionOptions()
    options.graph_optimization_level = GRAPH_OPTIMIZATION_LEVELS[graph_optimization]
    options.intra_op_num_threads = intra_op_threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    return ort.InferenceSession(str(onnx_path), sess_options=options, providers=["CPUExecutionProvider"])


class OnnxCore:
    """The core model's inputs -> outputs, named and shaped as in its Triton config."""

    def __init__(self, config: model_config.ModelConfig, version_dir: Path) -> None:
        self.inputs = list(config.input)
        self.outputs = list(config.output)
        self.input_names = [item.name for item in self.inputs]
        self.output_names = [item.name for item in self.outputs]
        self.session = create_session(
            version_dir / model_config.parameter(config, "onnx_file"),
            model_config.parameter(config, "graph_optimization", "all"),
            model_config.int_parameter(config, "intra_op_threads", 0),
        )
        onnx_inputs = sorted(item.name for item in self.session.get_inputs())
        onnx_outputs = sorted(item.name for item in self.session.get_outputs())
        if onnx_inputs != sorted(self.input_names) or onnx_outputs != sorted(self.output_names):
            raise model_config.ConfigError(
                f"ONNX I/O {onnx_inputs} -> {onnx_outputs} does not match config {self.input_names} -> {self.output_names}"
            )
        self._check_output_shapes()

    def _check_output_shapes(self) -> None:
        """Run one zero input: a model whose outputs do not match its config fails to load, never serves."""
        probe = {item.name: np.zeros((1, *item.dims), dtype=model_config.numpy_dtype(item.data_type)) for item in self.inputs}
        for item, value in zip(self.outputs, self.run(probe)):
            shape = list(value.shape[1:])
            if shape != list(item.dims):
                raise model_config.ConfigError(
                    f"ONNX output '{item.name}' has shape {shape} per image; the config declares {list(item.dims)}"
                )

    def run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        """The outputs, in config order."""
        return self.session.run(self.output_names, feeds)
