"""Text reader postprocess: the detector's maps -> lines of text, the second stages reached by BLS.

The computation is the ``text_reading`` task's (:class:`vision_serving.tasks.text_reading.task.TextReadingPostprocessor`,
the config's parameters name the second-stage models). For every photo of every request in Triton's batch:
DB boxes, crops, then the direction classifier and the recognizer as BLS requests (chunks of one width
bucket and at most the model's batch, all sent at once with ``async_exec``), each batched by that model's
own scheduler with other photos' chunks; the lines go back to their photo and request. A request whose
inputs are unusable fails alone (INVALID_ARG); a failed BLS request fails the batch it served (INTERNAL).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import triton_python_backend_utils as pb_utils

from .. import model_config
from ..tasks.base import rows
from ..tasks.text_reading.task import TASK, TextReadingPostprocessor
from . import bls
from .batching import run_requests_async
from .drift_metrics import DriftMetrics
from .errors import triton_error
from .postprocess import parse_request


class BlsModel:
    """One model reached by BLS: a batch in, the outputs the postprocess reads out (in its order)."""

    def __init__(self, name: str, input_name: str, output_names: tuple[str, ...]) -> None:
        self.name, self.input_name, self.output_names = name, input_name, output_names

    async def __call__(self, batch: np.ndarray) -> tuple[np.ndarray, ...]:
        request = bls.cpu_request(  # outputs in CPU memory: a TensorRT stage's would be on the GPU
            pb_utils,
            model_name=self.name,
            inputs=[pb_utils.Tensor(self.input_name, np.ascontiguousarray(batch, dtype=np.float32))],
            requested_output_names=list(self.output_names),
        )
        response = await request.async_exec()
        if response.has_error():
            raise RuntimeError(f"{self.name}: {response.error().message()}")
        return tuple(pb_utils.get_output_tensor_by_name(response, name).as_numpy() for name in self.output_names)


class TritonPythonModel:
    def initialize(self, args):
        config = model_config.config_from_triton_json(args["model_config"])
        self.post = TextReadingPostprocessor(config, Path(args["model_repository"]))
        self.post.use_stages({role: BlsModel(name, *self.post.stage_tensors[role]) for role, name in self.post.stage_models.items()})
        self.drift = DriftMetrics(pb_utils, args, config, TASK.drift_features, counts_nonfinite=True)
        pb_utils.Logger.log_info(
            f"{config.name}: task {TASK.name}, {len(self.post.classes)} classes, BLS to {', '.join(self.post.stage_models.values())}"
        )

    def finalize(self):
        self.drift.close()

    def _parse(self, request):
        return parse_request(request, self.post, self.drift)

    async def _read(self, parsed: list[dict[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
        try:
            result = await self.post.read(self.post.concatenate(parsed))
        except Exception as failure:  # a second stage failed: every request of the batch fails with it
            pb_utils.Logger.log_error(f"text postprocess: {type(failure).__name__}: {failure}")
            raise RuntimeError(str(failure)) from None
        self.drift.observe(result.features)
        return result.split([rows(item["photos"]) for item in parsed])

    async def execute(self, requests):
        return await run_requests_async(
            requests,
            self._parse,
            self._read,
            lambda outputs: pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor(n, v) for n, v in outputs.items()]),
            lambda error: pb_utils.InferenceResponse(error=triton_error(pb_utils, error)),
        )
