"""CPU core (configs/cpu*.pbtxt): the core ONNX on OpenVINO or onnxruntime in the Python backend.

The config's ``runtime`` parameter picks the runtime and ``precision`` (or ``onnx_file``) the
model (:mod:`vision_serving.core_model`). With config.pbtxt (platform tensorrt_plan) Triton
serves 1/model.plan instead and never loads this; with configs/cpu_openvino_backend.pbtxt,
Triton's own openvino backend. Every input and output is read from the config.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import triton_python_backend_utils as pb_utils

from .. import cpu_core, cpu_runtimes, model_config
from .base import BatchedModel
from .batching import split_rows


class TritonPythonModel(BatchedModel):
    def initialize(self, args):
        config = model_config.config_from_triton_json(args["model_config"])
        self.core = cpu_core.load(config, Path(args["model_repository"]) / args["model_version"])
        self.start_heartbeat(args)
        pb_utils.Logger.log_info(f"{config.name}: {cpu_runtimes.of_config(config).name} serving {self.core.onnx_path.name}")

    def _parse(self, request):
        return [pb_utils.get_input_tensor_by_name(request, name).as_numpy() for name in self.core.input_names]

    def _compute(self, per_request):
        counts = [len(inputs[0]) for inputs in per_request]
        feeds = {
            name: np.concatenate([inputs[index] for inputs in per_request]) if len(per_request) > 1 else per_request[0][index]
            for index, name in enumerate(self.core.input_names)
        }
        outputs = [split_rows(output, counts) for output in self.core.run(feeds)]
        return list(zip(*outputs))

    def _respond(self, outputs):
        tensors = [pb_utils.Tensor(name, value) for name, value in zip(self.core.output_names, outputs)]
        return pb_utils.InferenceResponse(output_tensors=tensors)
