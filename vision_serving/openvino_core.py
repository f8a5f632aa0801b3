"""Run the core ONNX model with OpenVINO's CPU plugin (``runtime: "openvino"``: configs/cpu_openvino*.pbtxt).

Not the CPU default: measured on the development CPUs (AVX2, no VNNI; ``python -m benchmarks.steps
--parts runtimes``), onnxruntime FP32 was as fast or faster for every pipeline, and exact (docs/design.md,
"The CPU core is onnxruntime FP32"); OpenVINO's INT8 misses FP32 there (the classifier's: cosine 0.934,
top-1 agreement 0.66 through the ensemble; docs/design.md, "INT8 on CPU is judged by emulation"),
so the classifier's configs/cpu_openvino.pbtxt serves FP32, not the ladder's INT8.

Config parameters (all optional but the model: ``precision`` or ``onnx_file``, see
:mod:`vision_serving.core_model`):

- ``performance_hint``: ``LATENCY`` (default) or ``THROUGHPUT`` (OpenVINO's ``PERFORMANCE_HINT``);
- ``num_streams``: a number, ``AUTO`` or ``NUMA`` (default 1: one request at a time per
  instance; Triton's ``instance_group`` count is the parallelism);
- ``inference_threads``: OpenVINO's ``INFERENCE_NUM_THREADS`` (default 1: several
  single-threaded instances keep every thread busy instead of waking idle ones per layer);
- ``cpu_pinning``: ``true``/``false`` (default false: Triton runs several instances, each
  with its own OpenVINO core, and pinning would put their threads on the same first cores);
- ``inference_precision``: ``f32`` (default), ``bf16`` or ``f16`` (OpenVINO's
  ``INFERENCE_PRECISION_HINT``). The CPU plugin's own default is bf16 wherever the CPU computes it
  natively (AVX-512 BF16, AMX): there a config named FP32 would compute in bf16 and its answers would
  change with the node a pod lands on (the classifier's logits moved by up to 0.48 of 6.65 on an
  AVX-512 BF16 EPYC). The model file says the precision (FP32, FP16 tensors, Q/DQ); this says how the
  CPU computes it, f32 unless a config chooses otherwise.

OpenVINO's CPU threads block between inferences (TBB arenas, condition waits); the inference
call blocks the Python model instance's thread until its outputs are ready.
"""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import openvino as ov

from . import core_model, model_config
from .openvino_settings import compile_properties


class OpenVinoCore:
    """The core model's inputs -> outputs, named and shaped as in its Triton config, on OpenVINO's CPU plugin."""

    def __init__(self, config: model_config.ModelConfig, version_dir: Path, core: ov.Core | None = None) -> None:
        self.inputs = list(config.input)
        self.outputs = list(config.output)
        self.input_names = [item.name for item in self.inputs]
        self.output_names = [item.name for item in self.outputs]
        self.onnx_path = core_model.onnx_path(config, version_dir)
        self.properties = compile_properties(config)
        core = core or ov.Core()
        model = core.read_model(str(self.onnx_path))
        core_model.check_io(
            config,
            [port.get_any_name() for port in model.inputs],
            [port.get_any_name() for port in model.outputs],
            "ONNX",
        )
        self.compiled = core.compile_model(model, "CPU", self.properties)
        self._ports = [self.compiled.output(name) for name in self.output_names]
        self._local = threading.local()  # one infer request per calling thread (a request is not thread-safe)
        core_model.check_output_shapes(config, self.run, "ONNX")

    def run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        """The outputs, in config order (copies: the request's buffers are reused). Callable from several threads."""
        request = getattr(self._local, "request", None)
        if request is None:
            request = self._local.request = self.compiled.create_infer_request()
        results = request.infer(feeds, share_inputs=True, share_outputs=False)
        return [np.asarray(results[port]) for port in self._ports]
