"""Preprocess model: encoded image bytes -> one model-input batch (and each image's size and tensor transform).

Inputs and outputs are read from the model's config by role
(:class:`vision_serving.preprocessing.PreprocessOutputs`): one BYTES input, the image output
(FP32, or UINT8 when the core's graph normalizes) and, when the config declares them, an INT32 ``[2]`` output with each photo's
(height, width) and an FP32 ``[4]`` output with its tensor transform, for postprocessing that
maps results back to the photo.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import triton_python_backend_utils as pb_utils

from .. import cpu_sizing, drift, model_config, preprocessing
from .base import BatchedModel
from .drift_metrics import DriftMetrics
from .errors import triton_error


class TritonPythonModel(BatchedModel):
    def initialize(self, args):
        config = model_config.config_from_triton_json(args["model_config"])
        self.spec = preprocessing.PreprocessSpec.from_config(config)
        preprocessing.set_threads(model_config.int_parameter(config, "opencv_threads", 0))
        self.limits = preprocessing.limits_from_config(config)
        # JPEGs are decoded at the smallest DCT scale the resize still downscales from.
        self.minimum = preprocessing.decode_minimum(self.spec)
        self.input_name = model_config.only_tensor(config, "input").name
        self.outputs = preprocessing.PreprocessOutputs.from_config(config)
        self.logger = pb_utils.Logger
        self.drift = DriftMetrics(pb_utils, args, config, drift.IMAGE_FEATURES)
        # decode_threads (written by vision_serving.cpu_sizing from the pod's CPUs): the requests of a
        # batch are decoded and resized in a pool of that many threads (OpenCV releases the GIL).
        threads = model_config.int_parameter(config, cpu_sizing.THREADS_PARAMETER, 1)
        self.pool = ThreadPoolExecutor(threads, thread_name_prefix="decode") if threads > 1 else None
        if self.pool is not None:
            self.map_requests = self.pool.map

    def _parse(self, request):
        payloads = pb_utils.get_input_tensor_by_name(request, self.input_name).as_numpy()
        decoded = preprocessing.decode_payloads(payloads, self.limits, self.minimum)
        return decoded, preprocessing.preprocess_outputs(decoded, self.spec, self.outputs), *drift.payload_facts(payloads.reshape(-1))

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

    def finalize(self):
        self.drift.close()
        if self.pool is not None:
            self.pool.shutdown()

    def _fail(self, error):
        if not isinstance(error, ValueError):
            self.logger.log_error(f"preprocess: unexpected decoder failure: {type(error).__name__}: {error}")
        return pb_utils.InferenceResponse(error=triton_error(pb_utils, error))
