"""Preprocess model of every pipeline: encoded image bytes -> what the core and the postprocess read.

Every upload is decoded with the config's limits (:mod:`vision_serving.image_codec`). Then either the
image-to-tensor resize (:class:`vision_serving.preprocessing.PreprocessSpec`; outputs found by role,
:class:`vision_serving.preprocessing.PreprocessOutputs`: the image output, FP32 or UINT8 when the core's graph
normalizes, and, where the config declares them, an INT32 ``[2]`` output with each photo's (height, width) and an
FP32 ``[4]`` output with its tensor transform), or the preprocessor of its own the config names
(:mod:`vision_serving.preprocessors`: the text reader's ``text_detection``, a tiled pipeline's ``tiles``, which reads the
request's ``TILING`` too and decodes each photo at the size its settings need). A bad upload fails its own request.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import triton_python_backend_utils as pb_utils

from .. import cpu_sizing, drift, model_config, preprocessing, preprocessors
from .base import BatchedModel
from .drift_metrics import DriftMetrics
from .errors import triton_error


class TritonPythonModel(BatchedModel):
    def initialize(self, args):
        config = model_config.config_from_triton_json(args["model_config"])
        self.start_heartbeat(args)
        preprocessing.set_threads(preprocessing.configured_threads(config))
        self.limits = preprocessing.limits_from_config(config)
        self.custom = preprocessors.request_computation(config)
        self.planner = preprocessors.planner(config)  # a preprocessor that reads the request's options
        self.options = {role.role: role.name for role in preprocessors.options(preprocessors.kind(config))}
        if self.custom is None:
            self.spec = preprocessing.PreprocessSpec.from_config(config)
            # JPEGs are decoded at the smallest DCT scale the resize still downscales from.
            self.minimum = preprocessing.decode_minimum(self.spec)
            self.outputs = preprocessing.PreprocessOutputs.from_config(config)
        else:
            self.minimum = None  # a preprocessor of its own sizes from the whole photo
        self.input_name = model_config.image_input_name(config)
        self.logger = pb_utils.Logger
        self.logger.log_info(f"{config.name}: preprocessor {preprocessors.kind(config)}")
        self.drift = DriftMetrics(pb_utils, args, config, drift.IMAGE_FEATURES)
        # decode_threads (written by vision_serving.cpu_sizing from the pod's CPUs): the requests of a
        # batch are decoded and resized in a pool of that many threads (OpenCV releases the GIL).
        threads = model_config.int_parameter(config, cpu_sizing.THREADS_PARAMETER, 1)
        self.pool = ThreadPoolExecutor(threads, thread_name_prefix="decode") if threads > 1 else None
        if self.pool is not None:
            self.map_requests = self.pool.map

    def _parse(self, request):
        payloads = pb_utils.get_input_tensor_by_name(request, self.input_name).as_numpy()
        if self.planner is not None:
            plan = self.planner({role: _optional(request, name) for role, name in self.options.items()}, payloads.size)
            decoded = preprocessing.decode_each(payloads, self.limits, plan.minimums)
            outputs = plan.compute(decoded)
        else:
            decoded = preprocessing.decode_payloads(payloads, self.limits, self.minimum)
            outputs = (
                self.custom(decoded) if self.custom is not None else preprocessing.preprocess_outputs(decoded, self.spec, self.outputs)
            )
        return decoded, outputs, *drift.payload_facts(payloads.reshape(-1))

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


def _optional(request, name):
    """An optional input of the request as numpy, None when it was not sent."""
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    return None if tensor is None else tensor.as_numpy()
