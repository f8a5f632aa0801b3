"""Preprocess model of a pipeline whose spec puts the pixels on the GPU (``pixel_device = "gpu"``): the served checks
per request on the CPU, the decode, resize and layout in DALI on the instance's GPU (:mod:`vision_serving.gpu_pixels`),
the pixels handed to the core in GPU memory: ``pb_utils.Tensor.from_dlpack`` takes DALI's GPU tensor (it implements
``__dlpack__`` and ``__dlpack_device__``, dense and C-ordered, as the Python backend's README asks), and the ensemble
hands that output to the TensorRT core without a host copy of the pixels.

The same ``1/model.py`` serves the CPU variants (``configs/<variant>.pbtxt``, ``--model-config-name``): a config
without ``pixel_device`` ``gpu`` runs the CPU preprocess (:mod:`vision_serving.triton_models.preprocess`) unchanged.
"""

from __future__ import annotations

import numpy as np
import triton_python_backend_utils as pb_utils

from .. import drift, model_config
from ..gpu_pixels import settings
from ..image_codec import ImageError
from .preprocess import TritonPythonModel as CpuPreprocess


class TritonPythonModel(CpuPreprocess):
    def initialize(self, args):
        super().initialize(args)
        config = model_config.config_from_triton_json(args["model_config"])
        self.gpu = None
        if settings.device(config) != "gpu":
            return
        from ..gpu_pixels.step import GpuPreprocess  # DALI: imported where a GPU config runs it

        device_id = int(args.get("model_instance_device_id") or 0)
        self.gpu = GpuPreprocess(config, "gpu", device_id)
        self.logger.log_info(f"{config.name}: pixels on GPU {device_id} (DALI, {self.gpu.settings.kind} resize)")

    def _parse(self, request):
        if self.gpu is None:
            return super()._parse(request)
        return self.gpu.parse(pb_utils.get_input_tensor_by_name(request, self.input_name).as_numpy())

    def _compute(self, parsed):
        if self.gpu is None:
            return super()._compute(parsed)
        outcomes = self.gpu.compute(parsed)
        done = [outcome for outcome in outcomes if not isinstance(outcome, ImageError)]
        self.drift.observe(
            lambda: drift.image_features(
                [image for outcome in done for image in outcome.images],
                np.concatenate([outcome.sizes for outcome in done]) if done else np.empty((0, 2)),
                [n for outcome in done for n in outcome.byte_sizes],
                [f for outcome in done for f in outcome.formats],
            )
        )
        return outcomes

    def _respond(self, outputs):
        if self.gpu is None:
            return super()._respond(outputs)
        if isinstance(outputs, ImageError):
            return self._fail(outputs)
        tensors = [
            pb_utils.Tensor.from_dlpack(name, value) if outputs.on_gpu and name == self.gpu.outputs.pixels else pb_utils.Tensor(name, value)
            for name, value in outputs.outputs.items()
        ]
        return pb_utils.InferenceResponse(output_tensors=tensors)
