"""One batch of the GPU preprocess, in plain Python (the Triton adapter, :mod:`vision_serving.triton_models.gpu_preprocess`,
only moves tensors): each request parsed alone, the GPU runs of the batch, each request's outputs.

Per request (:meth:`GpuPreprocess.parse`, where a bad upload fails its request alone, as in the CPU mode): every
upload is checked by the served checks (:func:`vision_serving.image_codec.check`); a request whose uploads the GPU
decoder all take (:func:`vision_serving.gpu_pixels.plan.cpu_reason`) is planned for the GPU, any other is decoded
and resized here by the served CPU code, at once.

Per batch (:meth:`GpuPreprocess.compute`): the one-upload requests in one DALI run (of at most the pipeline's batch
size), each request of several uploads in
a run of its own (its outputs one ``[n, ...]`` tensor). A run DALI refuses (an upload whose coded data its decoder
rejects: the checks read the structure, not the entropy-coded data) sends its requests to the served CPU path, which
decodes each strictly: the bad upload gets its own INVALID_ARG naming the problem, the others their pixels; DALI's
pipeline is built again, since DALI leaves it unusable after an error. A sample whose decoded shape is not the
planned one (an EXIF orientation DALI read otherwise) takes the CPU path too: the pixels always match the size and
transform the request reports.

Each request's outputs are the preprocess config's, by name: the pixels (a DALI tensor in GPU memory, or numpy for
the CPU path and DALI's CPU operators), and where declared the photos' sizes and tensor transforms (numpy); and what
the drift features need (:meth:`RequestPixels.drift_images`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import image_codec, model_config, preprocessing, preprocessors
from ..image_codec import ImageError
from . import dali_pipeline, plan
from .settings import GpuSettings


@dataclass
class ParsedRequest:
    """One request: its uploads' plans for the GPU, or (any upload the GPU decoder does not take) its outputs from the
    served CPU path already; ``formats`` and ``byte_sizes`` for the drift features."""

    plans: list[plan.SamplePlan] | None
    cpu: list[image_codec.Decoded] | None
    byte_sizes: list[int] = field(default_factory=list)
    formats: list[str] = field(default_factory=list)


@dataclass
class RequestPixels:
    """One request's outputs by name (``pixels``: a DALI tensor on the GPU, else numpy) and its drift inputs."""

    outputs: dict[str, Any]
    on_gpu: bool
    images: list[np.ndarray]  # decoded images (CPU path) or the DALI thumbnails (GPU path), RGB
    sizes: np.ndarray
    byte_sizes: list[int]
    formats: list[str]


Outcome = RequestPixels | ImageError


class GpuPreprocess:
    """The GPU preprocess of one model instance: its spec and limits, and its DALI pipeline (``device`` cpu: the same
    pipeline on DALI's CPU operators, without a GPU)."""

    def __init__(self, config: model_config.ModelConfig, device: str = "gpu", device_id: int | None = 0) -> None:
        if preprocessors.kind(config) != preprocessors.IMAGE_TO_TENSOR:
            raise model_config.ConfigError(
                f"model '{config.name}': the GPU pixel path takes the image-to-tensor resize, not preprocessor {preprocessors.kind(config)!r}"
            )
        self.spec = preprocessing.PreprocessSpec.from_config(config)
        self.outputs = preprocessing.PreprocessOutputs.from_config(config)
        self.limits = preprocessing.limits_from_config(config)
        self.minimum = preprocessing.decode_minimum(self.spec)
        self.settings = plan.pipeline_settings(self.spec, GpuSettings.from_config(config), config.max_batch_size or 1, device, device_id)
        self.pipeline = dali_pipeline.build(self.settings)
        self.rebuilds = 0  # DALI runs that failed (the pipeline built again each time)
        self.on_gpu = device == "gpu"

    # ---- per request

    def parse(self, payloads: np.ndarray) -> ParsedRequest:
        """One request's BYTES tensor -> its plans or its CPU decodes (``ImageError`` naming the first bad upload)."""
        items = [bytes(item) for item in payloads.reshape(-1)]
        checked = [self._checked(data, index, len(items)) for index, data in enumerate(items)]
        sizes = [len(data) for data in items]
        formats = [item.format for item in checked]
        if any(plan.cpu_reason(data, item) is not None for data, item in zip(items, checked)):
            return ParsedRequest(None, preprocessing.decode_payloads(payloads, self.limits, self.minimum), sizes, formats)
        plans = [plan.sample_plan(data, item, self.spec, self.minimum) for data, item in zip(items, checked)]
        return ParsedRequest(plans, None, sizes, formats)

    def _checked(self, data: bytes, index: int, count: int) -> image_codec.Checked:
        try:
            return image_codec.check(data, self.limits)
        except ImageError as error:
            where = f"image {index} of {count}: " if count > 1 else ""
            raise ImageError(f"{where}{error}") from None

    # ---- per batch

    def compute(self, parsed: Sequence[ParsedRequest]) -> list[Outcome]:
        """Every parsed request's outcome, in order: its outputs, or the ``ImageError`` of its CPU decode."""
        outcomes: list[Outcome | None] = [None] * len(parsed)
        singles = [index for index, request in enumerate(parsed) if request.plans is not None and len(request.plans) == 1]
        several = [index for index, request in enumerate(parsed) if request.plans is not None and len(request.plans) > 1]
        size = self.settings.max_batch_size  # DALI's batch size (Triton's batches never exceed it; a caller's might)
        chunks = [singles[start : start + size] for start in range(0, len(singles), size)]
        for group in chunks + [[index] for index in several]:
            for index, outcome in zip(group, self._gpu_run([parsed[index] for index in group])):
                outcomes[index] = outcome
        for index, request in enumerate(parsed):
            if request.cpu is not None:
                outcomes[index] = self._from_cpu(request, request.cpu)
        assert all(outcome is not None for outcome in outcomes)  # every request is planned or decoded
        return [outcome for outcome in outcomes if outcome is not None]

    def _gpu_run(self, requests: list[ParsedRequest]) -> list[Outcome]:
        plans = [sample for request in requests for sample in request.plans or []]
        try:
            ran = dali_pipeline.run(self.pipeline, plan.feeds(plans, self.settings.inputs))
        except RuntimeError:
            self.rebuilds += 1
            self.pipeline = dali_pipeline.build(self.settings)
            return [self._cpu_fallback(request) for request in requests]
        outcomes: list[Outcome] = []
        start = 0
        for request in requests:
            count = len(request.plans or [])
            shapes = [tuple(int(side) for side in ran.shapes[start + offset][:2]) for offset in range(count)]
            pixels = ran.sample(start) if count == 1 else ran.samples(count)
            if shapes != [sample.decoded for sample in request.plans or []] or pixels is None:
                outcomes.append(self._cpu_fallback(request))
            else:
                outcomes.append(self._from_gpu(request, pixels, ran.thumbnails[start : start + count]))
            start += count
        return outcomes

    def _cpu_fallback(self, request: ParsedRequest) -> Outcome:
        try:
            decoded = [image_codec.decode(bytes(sample.encoded), self.limits, self.minimum) for sample in request.plans or []]
        except ImageError as error:
            return error
        return self._from_cpu(request, decoded)

    def _sides(self, sizes: np.ndarray) -> dict[str, np.ndarray]:
        tensors = {}
        if self.outputs.image_size is not None:
            tensors[self.outputs.image_size] = sizes
        if self.outputs.transform is not None:
            tensors[self.outputs.transform] = preprocessing.tensor_transforms(sizes, self.spec)
        return tensors

    def _from_cpu(self, request: ParsedRequest, decoded: list[image_codec.Decoded]) -> RequestPixels:
        tensors = preprocessing.preprocess_outputs(decoded, self.spec, self.outputs)
        sizes = preprocessing.original_sizes(decoded)
        return RequestPixels(tensors, False, [item.image for item in decoded], sizes, request.byte_sizes, request.formats)

    def _from_gpu(self, request: ParsedRequest, pixels: Any, thumbnails: np.ndarray) -> RequestPixels:
        samples = request.plans or []
        sizes = np.array([sample.decoded for sample in samples], dtype=np.int32).reshape(len(samples), 2)
        if self.spec.color_order == "BGR":  # the pipeline decodes in the model's order; the drift features read RGB
            thumbnails = thumbnails[..., ::-1]
        values = pixels if self.on_gpu else np.array(pixels)
        images = list(np.ascontiguousarray(thumbnails))
        return RequestPixels(
            {self.outputs.pixels: values, **self._sides(sizes)}, self.on_gpu, images, sizes, request.byte_sizes, request.formats
        )
