"""Postprocess model of every pipeline: the core's outputs -> the task's answers.

The task is the config's ``task`` parameter (:mod:`vision_serving.tasks.registry`); its
postprocessor reads every input and writes every output by role. Each request is parsed on its
own (a bad option or a non-finite core output fails only that request), then every image of
every request in Triton's batch is postprocessed as one array, and each response holds its own
request's images (padded to its own largest count, where the task pads).

A postprocess whose task calls second stages (the text reader's classifier and recognizer: its
``stage_models``) reaches them by BLS (:class:`vision_serving.triton_models.bls.StageModel`): its
``execute`` is then a coroutine function (the Python backend looks at the instance's ``execute`` after
``initialize``, and runs a coroutine function's batches concurrently), so every chunk of every photo of the
batch is sent at once, each stage batches them with other requests' chunks, and a batch awaiting its
stages does not hold the next. A failed BLS request
fails the batch it served (INTERNAL).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import triton_python_backend_utils as pb_utils

from .. import model_config, step_heartbeat
from ..tasks import registry
from ..tasks.base import Postprocessor, rows
from . import bls
from .base import BatchedModel
from .batching import run_requests_async
from .drift_metrics import DriftMetrics
from .errors import triton_error


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
        self.start_heartbeat(args)
        self.post = self.task.postprocessor(config, Path(args["model_repository"]))
        stages = {
            role: bls.StageModel(pb_utils, name, *self.post.stage_tensors[role], self.post.stage_dtypes.get(role, np.float32))
            for role, name in self.post.stage_models.items()
        }
        if stages:
            self.post.use_stages(stages)
            self.execute = self._execute_async  # type: ignore[assignment,method-assign]  # the backend reads it after initialize
        self.drift = DriftMetrics(pb_utils, args, config, self.task.drift_features, counts_nonfinite=True)
        called = f", BLS to {', '.join(self.post.stage_models.values())}" if stages else ""
        pb_utils.Logger.log_info(f"{config.name}: task {self.task.name}, inputs {self.post.inputs}, outputs {self.post.outputs}{called}")

    def finalize(self):
        self.drift.close()

    def _parse(self, request):
        return parse_request(request, self.post, self.drift)

    def _split(self, result, parsed):
        self.drift.observe(result.features)
        return result.split([rows(next(iter(item.values()))) for item in parsed])

    def _compute(self, parsed):
        return self._split(self.post.run(self.post.concatenate(parsed)), parsed)

    async def _read(self, parsed):
        try:
            result = await self.post.read(self.post.concatenate(parsed))
        except Exception as failure:  # a second stage failed: every request of the batch fails with it
            pb_utils.Logger.log_error(f"{self.task.name} postprocess: {type(failure).__name__}: {failure}")
            raise RuntimeError(str(failure)) from None
        return self._split(result, parsed)

    async def _execute_async(self, requests):
        """``execute`` of a postprocess that calls second stages (set in ``initialize``): a coroutine function, which
        the Python backend runs concurrently with the instance's other batches, so one batch awaiting its stages does
        not hold the next (a plain ``execute`` returning a coroutine would run one batch at a time)."""
        with step_heartbeat.busy(self.heartbeat):
            return await run_requests_async(requests, self._parse, self._read, self._respond, self._fail)

    def _respond(self, outputs):
        return pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor(name, value) for name, value in outputs.items()])

    def _fail(self, error):
        return pb_utils.InferenceResponse(error=triton_error(pb_utils, error))
