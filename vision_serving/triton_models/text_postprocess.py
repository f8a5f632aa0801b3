"""Text reader postprocess: the detector's maps -> lines of text, the second stages reached by BLS.

For every photo of every request in Triton's batch: DB boxes, crops, then the direction classifier and
the recognizer as BLS requests (:func:`vision_serving.tasks.text_reading.reader.read_batch`: chunks of
one width bucket and at most the model's batch, all sent at once with ``async_exec``), each batched by
that model's own scheduler with other photos' chunks; the lines go back to their photo and request.
A request whose inputs are unusable fails alone; a failed BLS request fails the batch it served.

Parameters: ``classifier_model`` / ``recognizer_model`` (the models called), their ``*_max_batch`` (at
most their ``max_batch_size``), ``*_input`` / ``*_output`` (tensor names), ``characters`` (the
recognizer's character list, a JSON list beside this config).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import triton_python_backend_utils as pb_utils

from .. import model_config
from ..tasks.text_reading import reader, recognition, steps
from ..tasks.text_reading.settings import DEFAULT
from .errors import triton_error


class BlsModel:
    """One model reached by BLS: a batch in, its one output out."""

    def __init__(self, name: str, input_name: str, output_name: str) -> None:
        self.name, self.input_name, self.output_name = name, input_name, output_name

    async def __call__(self, batch: np.ndarray) -> np.ndarray:
        request = pb_utils.InferenceRequest(
            model_name=self.name,
            inputs=[pb_utils.Tensor(self.input_name, np.ascontiguousarray(batch, dtype=np.float32))],
            requested_output_names=[self.output_name],
        )
        response = await request.async_exec()
        if response.has_error():
            raise RuntimeError(f"{self.name}: {response.error().message()}")
        return pb_utils.get_output_tensor_by_name(response, self.output_name).as_numpy()


class TritonPythonModel:
    def initialize(self, args):
        config = model_config.config_from_triton_json(args["model_config"])
        parameter = lambda key: model_config.parameter(config, key)  # noqa: E731
        self.stages = reader.Stages(
            BlsModel(parameter("classifier_model"), parameter("classifier_input"), parameter("classifier_output")),
            model_config.int_parameter(config, "classifier_max_batch"),
            BlsModel(parameter("recognizer_model"), parameter("recognizer_input"), parameter("recognizer_output")),
            model_config.int_parameter(config, "recognizer_max_batch"),
        )
        characters = Path(args["model_repository"]) / parameter("characters")
        self.classes = recognition.characters(json.loads(characters.read_text(encoding="utf-8")))
        pb_utils.Logger.log_info(
            f"{config.name}: {len(self.classes)} classes, BLS to {self.stages.classifier and parameter('classifier_model')} and {parameter('recognizer_model')}"
        )

    def _parse(self, request):
        def tensor(name: str) -> np.ndarray:
            found = pb_utils.get_input_tensor_by_name(request, name)
            if found is None:
                raise ValueError(f"missing input {name}")
            return found.as_numpy()

        maps = tensor("PROBABILITY")
        photos = steps.from_preprocess(tensor(steps.IMAGE), tensor(steps.TRANSFORM))
        if len(maps) != len(photos) or not np.isfinite(maps).all():
            raise ValueError(f"{len(maps)} detector maps (finite: {bool(np.isfinite(maps).all())}) for {len(photos)} photos")
        return photos, list(maps)

    async def execute(self, requests):
        parsed: list[tuple[list, list]] = []
        errors: list[Exception | None] = []
        for request in requests:
            try:
                parsed.append(self._parse(request))
                errors.append(None)
            except Exception as bad_request:
                errors.append(bad_request)
        photos = [photo for items, _ in parsed for photo in items]
        maps = [probability for _, request_maps in parsed for probability in request_maps]
        try:
            lines = await reader.read_batch(photos, maps, self.stages, self.classes, DEFAULT) if photos else []
        except Exception as failure:  # a second stage failed: every request of the batch fails with it
            pb_utils.Logger.log_error(f"text postprocess: {type(failure).__name__}: {failure}")
            return [pb_utils.InferenceResponse(error=triton_error(pb_utils, failure if e is None else e)) for e in errors]
        responses, start, items = [], 0, iter(parsed)
        for error in errors:
            if error is not None:
                responses.append(pb_utils.InferenceResponse(error=triton_error(pb_utils, error)))
                continue
            count = len(next(items)[0])
            outputs = reader.padded(lines[start : start + count])
            start += count
            responses.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor(name, value) for name, value in outputs.items()]))
        return responses
