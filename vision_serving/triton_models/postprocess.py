"""Postprocess model of every pipeline: the core's outputs -> the task's answers.

The task is the config's ``task`` parameter (:mod:`vision_serving.tasks.registry`); its
postprocessor reads every input and writes every output by role. Each request is parsed on its
own (a bad option or a non-finite core output fails only that request), then every image of
every request in Triton's batch is postprocessed as one array, and each response holds its own
request's images (padded to its own largest count, where the task pads).
"""

from __future__ import annotations

from pathlib import Path

import triton_python_backend_utils as pb_utils

from .. import model_config
from ..tasks import registry
from ..tasks.base import Postprocessor, rows
from .base import BatchedModel
from .drift_metrics import DriftMetrics


def parse_request(request, post: Postprocessor, drift: DriftMetrics):
    """One request's inputs by the postprocessor's roles, a non-finite core output refused (and counted), parsed."""
    named = {}
    for name in post.input_names:
        tensor = pb_utils.get_input_tensor_by_name(request, name)
        named[name] = None if tensor is None else tensor.as_numpy()
    for name in post.core_input_names:
        value = named[name]
        if value is not None:
            drift.check_finite(value, name)
    return post.parse(named)


class TritonPythonModel(BatchedModel):
    def initialize(self, args):
        config = model_config.config_from_triton_json(args["model_config"])
        self.task = registry.for_config(config)
        self.post = self.task.postprocessor(config, Path(args["model_repository"]))
        self.drift = DriftMetrics(pb_utils, args, config, self.task.drift_features, counts_nonfinite=True)
        pb_utils.Logger.log_info(f"{config.name}: task {self.task.name}, inputs {self.post.inputs}, outputs {self.post.outputs}")

    def finalize(self):
        self.drift.close()

    def _parse(self, request):
        return parse_request(request, self.post, self.drift)

    def _compute(self, parsed):
        result = self.post.run(self.post.concatenate(parsed))
        self.drift.observe(result.features)
        return result.split([rows(next(iter(item.values()))) for item in parsed])

    def _respond(self, outputs):
        return pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor(name, value) for name, value in outputs.items()])
