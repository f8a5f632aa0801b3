"""Segmentation postprocess model: probabilities + original sizes -> PNG mask and coverage.

Tensors are found in the config by role: the FP32 input holds the model's
probability map, the INT32 input each image's (height, width); the BYTES
output receives the PNG, the FP32 output the coverage. ``mask_mode`` and
``threshold`` are config parameters.
"""

from __future__ import annotations

import numpy as np
import triton_python_backend_utils as pb_utils

from .. import drift, model_config, segmentation
from .base import BatchedModel
from .drift_metrics import DriftMetrics


class TritonPythonModel(BatchedModel):
    def initialize(self, args):
        config = model_config.config_from_triton_json(args["model_config"])
        roles = model_config.tensors_by_role(config)
        self.probabilities_name, self.sizes_name = roles.required_input("FP32"), roles.required_input("INT32")
        self.mask_name, self.coverage_name = roles.output("BYTES"), roles.output("FP32")
        self.spec = segmentation.MaskSpec(
            mode=model_config.parameter(config, "mask_mode"),
            threshold=float(model_config.parameter(config, "threshold")),
        )
        self.drift = DriftMetrics(pb_utils, args, config, counts_nonfinite=True)

    def finalize(self):
        self.drift.close()

    def _parse(self, request):
        probabilities = pb_utils.get_input_tensor_by_name(request, self.probabilities_name).as_numpy()
        self.drift.check_finite(probabilities, self.probabilities_name)
        sizes = pb_utils.get_input_tensor_by_name(request, self.sizes_name).as_numpy()
        return probabilities, sizes

    def _compute(self, parsed):
        results = [segmentation.masks(probabilities, sizes, self.spec) for probabilities, sizes in parsed]
        self.drift.observe(
            lambda: drift.segmentation_features(
                np.concatenate([probabilities for probabilities, _ in parsed]), [mask.coverage for masks in results for mask in masks]
            )
        )
        return results

    def _respond(self, masks):
        png = np.array([[mask.png] for mask in masks], dtype=np.object_)
        coverage = np.array([[mask.coverage] for mask in masks], dtype=np.float32)
        return pb_utils.InferenceResponse(
            output_tensors=[
                pb_utils.Tensor(self.mask_name, png),
                pb_utils.Tensor(self.coverage_name, coverage),
            ]
        )
