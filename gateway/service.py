"""One request through the gateway: its photo and options checked against the pipeline, the ensemble called over gRPC,
its outputs written as the task's JSON (:mod:`gateway.answers`)."""

from __future__ import annotations

import contextlib
import contextvars
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from tritonclient.grpc import aio as grpcaio
from tritonclient.utils import InferenceServerException

from vision_serving import image_codec

from . import answers, errors, fetch, uploads
from .answers.base import JsonSchema
from .answers.generic import as_json
from .catalog import Catalog, Pipeline
from .errors import ApiError, bad_request

API_VERSION = "v1"
RAW_CHOICE: JsonSchema = {"type": "boolean", "default": False, "description": "also give the ensemble's output tensors as they came"}
# Seconds the current request spent waiting on Triton (its gRPC call): the rest of its time is the gateway's own.
TRITON_SECONDS: contextvars.ContextVar[float] = contextvars.ContextVar("triton_seconds", default=0.0)
NUMPY_TYPES = {"INT32": np.int32, "INT64": np.int64, "FP32": np.float32, "FP64": np.float64, "BOOL": np.bool_, "BYTES": np.object_}


@dataclass(frozen=True)
class Form:
    """What one pipeline takes besides the photo: its request options (sent to the server) and the answer's choices."""

    options: dict[str, JsonSchema]
    choices: dict[str, JsonSchema]


_FORMS: dict[int, tuple[Pipeline, Form]] = {}


def form_of(pipeline: Pipeline) -> Form:
    """The pipeline's form (computed once per pipeline the catalogue read: the same object until it is read again)."""
    cached = _FORMS.get(id(pipeline))
    if cached is not None and cached[0] is pipeline:
        return cached[1]
    if len(_FORMS) > 256:  # pipelines of earlier refreshes
        _FORMS.clear()
    form = _form(pipeline)
    _FORMS[id(pipeline)] = (pipeline, form)
    return form


def _form(pipeline: Pipeline) -> Form:
    answer = answers.answer_for(pipeline.task)
    options = {name: answer.option_schema(pipeline, option) for name, option in pipeline.options.items()}
    return Form(options, {**answer.choices(pipeline), "raw": RAW_CHOICE})


def photo_problem(pipeline: Pipeline, photo: bytes) -> ApiError | None:
    """A photo the pipeline does not take, before it is sent: too large (413) or not one of its formats (415)."""
    if len(photo) > pipeline.max_image_bytes:
        return errors.too_large(pipeline.max_image_bytes)
    if not photo:
        return bad_request("the photo is empty")
    kind = image_codec.sniff_format(photo)
    if kind is None or kind not in pipeline.formats:
        named = kind or image_codec.unaccepted_format(photo)
        what = f"a {named.upper()} file" if named else "not an image file this gateway knows"
        return errors.unsupported(f"the photo is {what}; {pipeline.name} takes {', '.join(pipeline.formats)}")
    return None


@contextlib.contextmanager
def _reading_the_server() -> Iterator[None]:
    """The catalogue's reads of the server: a server that cannot be reached, or is not up yet, is 503 ``UNAVAILABLE``."""
    try:
        yield
    except InferenceServerException as error:
        raise errors.unavailable(f"cannot read the server's pipelines: {errors.from_triton(error).message}") from None


@dataclass
class Gateway:
    client: Any  # tritonclient.grpc.aio.InferenceServerClient
    catalog: Catalog
    fetch_policy: fetch.FetchPolicy
    timeout_s: float = 30.0

    async def pipelines(self) -> dict[str, Pipeline]:
        """Every pipeline the server serves; 503 ``UNAVAILABLE`` while the server cannot be read (never read yet)."""
        with _reading_the_server():
            return await self.catalog.current()

    async def pipeline(self, name: str) -> Pipeline:
        with _reading_the_server():
            found = await self.catalog.get(name)
        if found is None:
            known = ", ".join(sorted(self.catalog.pipelines)) or "none"
            raise ApiError(404, "NOT_FOUND", f"no pipeline {name!r} on the server (its pipelines: {known})")
        return found

    async def photo_of(self, pipeline: Pipeline, upload: uploads.Upload) -> bytes:
        if (upload.photo is None) == (upload.url is None):
            raise bad_request("send one photo: the body, a multipart file 'image', a base64 'image' or a 'url'")
        photo = (
            upload.photo if upload.photo is not None else await fetch.fetch(self.fetch_policy, upload.url or "", pipeline.max_image_bytes)
        )
        problem = photo_problem(pipeline, photo)
        if problem is not None:
            raise problem
        return photo

    async def answer(self, pipeline: Pipeline, upload: uploads.Upload) -> dict[str, Any]:
        form = form_of(pipeline)
        unknown = sorted(set(upload.fields) - set(form.options) - set(form.choices))
        if unknown:
            takes = ", ".join([*form.options, *form.choices])
            raise bad_request(f"unknown option(s) {', '.join(unknown)}; {pipeline.name} takes {takes}")
        options = {
            name: uploads.option_value(name, value, form.options[name]) for name, value in upload.fields.items() if name in form.options
        }
        choices = {
            name: uploads.option_value(name, upload.fields.get(name, schema["default"]), schema) for name, schema in form.choices.items()
        }
        photo = await self.photo_of(pipeline, upload)
        outputs = await self.infer(pipeline, photo, options)
        answer = answers.answer_for(pipeline.task).shape(pipeline, outputs, choices)
        result: dict[str, Any] = {"pipeline": pipeline.name, "model_version": pipeline.version, "task": pipeline.task, **answer}
        if choices["raw"]:
            result["tensors"] = {
                pipeline.outputs[role]: {"shape": list(np.shape(value)), "data": as_json(value)} for role, value in outputs.items()
            }
        return result

    async def infer(self, pipeline: Pipeline, photo: bytes, options: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """The ensemble's outputs for one photo, by role, without the batch dim."""
        shape = [1, 1] if pipeline.batched else [1]
        image = grpcaio.InferInput(pipeline.image_input, shape, "BYTES")
        image.set_data_from_numpy(np.array([photo], dtype=np.object_).reshape(shape))
        inputs = [image]
        for name, value in options.items():
            option = pipeline.options[name]
            tensor = grpcaio.InferInput(option.tensor, shape, option.datatype)
            element = str(value).encode("utf-8") if option.datatype == "BYTES" else value  # a BYTES input: UTF-8 text
            tensor.set_data_from_numpy(np.full(shape, element, dtype=NUMPY_TYPES[option.datatype]))
            inputs.append(tensor)
        requested = [grpcaio.InferRequestedOutput(name) for name in pipeline.outputs.values()]
        started = time.perf_counter()
        try:
            result = await self.client.infer(pipeline.name, inputs, outputs=requested, client_timeout=self.timeout_s)
        except InferenceServerException as error:
            raise errors.from_triton(error) from None
        finally:
            TRITON_SECONDS.set(TRITON_SECONDS.get() + time.perf_counter() - started)
        found = {}
        for role, name in pipeline.outputs.items():
            value = result.as_numpy(name)
            if value is None:
                raise ApiError(502, "BAD_UPSTREAM_ANSWER", f"{pipeline.name} answered without its output {name}")
            found[role] = value[0] if pipeline.batched else value
        return found
