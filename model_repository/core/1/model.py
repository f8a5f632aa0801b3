"""Triton adapter for the CPU core (configs/cpu.pbtxt): onnxruntime in the Python backend.

With config.pbtxt (platform tensorrt_plan) Triton serves 1/model.plan instead
and ignores this file.
"""

from pathlib import Path

import numpy as np
import triton_python_backend_utils as pb_utils

from vision_serving import model_config
from vision_serving.onnx_core import OnnxCore


class TritonPythonModel:
    def initialize(self, args):
        config = model_config.config_from_triton_json(args["model_config"])
        version_dir = Path(args["model_repository"]) / args["model_version"]
        self.core = OnnxCore(config, version_dir)

    def execute(self, requests):
        inputs = [pb_utils.get_input_tensor_by_name(r, self.core.input.name).as_numpy() for r in requests]
        logits = self.core.run(np.concatenate(inputs) if len(inputs) > 1 else inputs[0])
        responses, start = [], 0
        for batch in inputs:
            output = pb_utils.Tensor(self.core.output.name, logits[start : start + len(batch)])
            responses.append(pb_utils.InferenceResponse(output_tensors=[output]))
            start += len(batch)
        return responses
