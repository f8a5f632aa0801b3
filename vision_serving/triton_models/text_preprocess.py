"""Text reader preprocess (``preprocessor: "text_detection"``): encoded image bytes -> the text detector's input,
sized per photo as RapidOCR sizes it (:mod:`vision_serving.tasks.text_reading.steps`), the resized, padded
photo the crops are cut from, and the map back to the photo. A request's photos must share one detector size
(one photo per request always does); Triton's dynamic batcher merges requests of equal shapes only, so each
request is answered on its own. Drift: the same image features as every preprocess."""

from __future__ import annotations

import triton_python_backend_utils as pb_utils

from .. import drift, model_config, preprocessing
from ..tasks.text_reading import preprocessor as text_preprocessor
from ..tasks.text_reading import steps
from ..tasks.text_reading.settings import DEFAULT
from .base import BatchedModel
from .drift_metrics import DriftMetrics


class TritonPythonModel(BatchedModel):
    def initialize(self, args):
        config = model_config.config_from_triton_json(args["model_config"])
        preprocessing.set_threads(model_config.int_parameter(config, "opencv_threads", 0))
        self.limits = preprocessing.limits_from_config(config)
        self.input_name = model_config.only_tensor(config, "input").name
        self.max_side = text_preprocessor.max_detector_side(config)
        self.drift = DriftMetrics(pb_utils, args, config, drift.IMAGE_FEATURES)
        pb_utils.Logger.log_info(
            f"{config.name}: text detection input, shorter side {DEFAULT.detection.limit_side_len}, longest {self.max_side}"
        )

    def finalize(self):
        self.drift.close()

    def _parse(self, request):
        payloads = pb_utils.get_input_tensor_by_name(request, self.input_name).as_numpy()
        decoded = preprocessing.decode_payloads(payloads, self.limits)
        prepared = steps.prepare_decoded(decoded, DEFAULT.detection, self.max_side)
        return decoded, steps.preprocess_outputs(prepared), *drift.payload_facts(payloads.reshape(-1))

    def _compute(self, parsed):
        items = [item for decoded, _, _, _ in parsed for item in decoded]
        self.drift.observe(
            lambda: drift.image_features(
                [item.image for item in items],
                preprocessing.original_sizes(items),
                [n for _, _, sizes, _ in parsed for n in sizes],
                [f for _, _, _, formats in parsed for f in formats],
            )
        )
        return [outputs for _, outputs, _, _ in parsed]

    def _respond(self, outputs):
        return pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor(name, value) for name, value in outputs.items()])
