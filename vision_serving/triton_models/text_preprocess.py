"""Text reader preprocess: encoded image bytes -> the text detector's input, sized per photo as RapidOCR sizes it
(:mod:`vision_serving.tasks.text_reading.steps`). A request's photos must share one detector size (one photo
per request always does); Triton's dynamic batcher merges requests of equal shapes only."""

from __future__ import annotations

import triton_python_backend_utils as pb_utils

from .. import model_config, preprocessing
from ..tasks.text_reading import steps
from ..tasks.text_reading.settings import DEFAULT
from .base import BatchedModel


class TritonPythonModel(BatchedModel):
    def initialize(self, args):
        config = model_config.config_from_triton_json(args["model_config"])
        self.limits = preprocessing.limits_from_config(config)
        self.input_name = model_config.only_tensor(config, "input").name
        pb_utils.Logger.log_info(f"{config.name}: text detection input, shorter side {DEFAULT.detection.limit_side_len}")

    def _parse(self, request):
        payloads = pb_utils.get_input_tensor_by_name(request, self.input_name).as_numpy()
        return steps.preprocess_outputs(steps.prepare_request(payloads, self.limits, DEFAULT.detection))

    def _compute(self, parsed):
        return parsed

    def _respond(self, result):
        return pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor(name, value) for name, value in result.items()])
