"""Preprocess model: encoded image bytes -> one model-input batch (and each image's original size).

Inputs and outputs are read from the model's config: one BYTES input, the
FP32 pixel output, and, when the config declares it, an INT32 ``[2]`` output
with each image's (height, width) for postprocessing that maps results back
to the original image.
"""

from __future__ import annotations

import numpy as np
import triton_python_backend_utils as pb_utils

from .. import drift, model_config, preprocessing
from .base import BatchedModel
from .batching import split_rows
from .drift_metrics import DriftMetrics
from .errors import triton_error


def _outputs(config: model_config.ModelConfig) -> tuple[str, str | None]:
    pixels = [item.name for item in config.output if item.data_type == model_config.model_config_pb2.TYPE_FP32]
    sizes = [item.name for item in config.output if item.data_type == model_config.model_config_pb2.TYPE_INT32]
    if len(pixels) != 1 or len(sizes) > 1 or len(config.output) != len(pixels) + len(sizes):
        raise model_config.ConfigError(f"model '{config.name}': expected one FP32 pixel output and at most one INT32 [2] size output")
    return pixels[0], (sizes[0] if sizes else None)


class TritonPythonModel(BatchedModel):
    def initialize(self, args):
        config = model_config.config_from_triton_json(args["model_config"])
        self.spec = preprocessing.PreprocessSpec.from_config(config)
        preprocessing.set_threads(model_config.int_parameter(config, "opencv_threads", 0))
        self.limits = preprocessing.limits_from_config(config)
        # JPEGs are decoded at the smallest DCT scale the resize still downscales from.
        self.minimum = preprocessing.decode_minimum(self.spec)
        self.input_name = model_config.only_tensor(config, "input").name
        self.pixels_name, self.sizes_name = _outputs(config)
        self.logger = pb_utils.Logger
        self.drift = DriftMetrics(pb_utils, args, config)

    def _parse(self, request):
        payloads = pb_utils.get_input_tensor_by_name(request, self.input_name).as_numpy()
        decoded = preprocessing.decode_payloads_reduced(payloads, self.limits, self.minimum)
        return (decoded, *drift.payload_facts(payloads.reshape(-1)))

    def _compute(self, parsed):
        items = [item for decoded, _, _ in parsed for item in decoded]
        counts = [len(decoded) for decoded, _, _ in parsed]
        images = [item.image for item in items]
        # The photos' own sizes (postprocessing maps results back to them), not the reduced decode's.
        original = preprocessing.original_sizes(items)
        pixels = split_rows(preprocessing.preprocess_batch(images, self.spec), counts)
        self.drift.observe(
            lambda: drift.image_features(
                images, original, [n for _, sizes, _ in parsed for n in sizes], [f for _, _, formats in parsed for f in formats]
            )
        )
        return list(zip(pixels, split_rows(original, counts)))

    def _respond(self, result):
        pixels, sizes = result
        outputs = [pb_utils.Tensor(self.pixels_name, pixels)]
        if self.sizes_name is not None:
            outputs.append(pb_utils.Tensor(self.sizes_name, np.ascontiguousarray(sizes)))
        return pb_utils.InferenceResponse(output_tensors=outputs)

    def finalize(self):
        self.drift.close()

    def _fail(self, error):
        if not isinstance(error, ValueError):
            self.logger.log_error(f"preprocess: unexpected decoder failure: {type(error).__name__}: {error}")
        return pb_utils.InferenceResponse(error=triton_error(pb_utils, error))
