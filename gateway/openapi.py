"""The OpenAPI 3.1 document of the pipelines a server has, generated from the same roles the answers are built from:
one path per pipeline (``POST /v1/pipelines/{name}``), each request form (raw body, multipart, JSON with base64 or a
URL), the pipeline's options with their ranges, and the schema of its answer (:func:`answer_schema`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from . import answers
from .answers.base import JsonSchema, obj
from .catalog import Pipeline
from .service import API_VERSION, form_of

OPENAPI_VERSION = "3.1.0"
ERROR_STATUSES = {
    "400": "INVALID_ARG: a malformed request, a bad option, a photo the pipeline refuses, a refused URL",
    "401": "no API key (when the gateway has keys)",
    "403": "an unknown API key",
    "404": "no such pipeline",
    "413": "the photo or the body is larger than the pipeline takes",
    "415": "a Content-Type or a photo format the pipeline does not take",
    "429": "the key is over its rate or its concurrency (Retry-After)",
    "503": "the server is overloaded or unavailable (Retry-After)",
    "504": "the server did not answer in time",
}
ERROR_SCHEMA = obj({"error": obj({"code": {"type": "string"}, "message": {"type": "string"}})})
BINARY: JsonSchema = {"type": "string", "format": "binary"}


def answer_schema(pipeline: Pipeline) -> JsonSchema:
    """The JSON schema of a pipeline's 200 answer: which pipeline answered, then the task's fields."""
    task = answers.answer_for(pipeline.task).schema(pipeline)
    envelope = {
        "pipeline": {"const": pipeline.name},
        "model_version": {"type": "string"},
        "task": {"const": pipeline.task},
    }
    tensors = {
        "type": "object",
        "description": "the ensemble's outputs by tensor name (with raw=true): shape and nested data",
        "additionalProperties": obj({"shape": {"type": "array", "items": {"type": "integer"}}, "data": {}}),
    }
    schema = obj({**envelope, **task["properties"], "tensors": tensors}, required=[*envelope, *task["required"]])
    return schema


def _operation(pipeline: Pipeline, keys: bool) -> dict[str, Any]:
    form = form_of(pipeline)
    fields = {**form.options, **form.choices}
    parameters = [
        {"name": name, "in": "query", "required": False, "schema": schema, "description": schema.get("description", "")}
        for name, schema in fields.items()
    ]
    photo_fields = {"image": BINARY, "url": {"type": "string", "format": "uri", "description": "a photo to fetch (when URL input is on)"}}
    json_fields = {
        "image": {"type": "string", "contentEncoding": "base64", "description": "the photo's bytes, base64"},
        "url": photo_fields["url"],
    }
    multipart = {"type": "object", "properties": {**photo_fields, **fields}, "additionalProperties": False}
    json_body = {
        "type": "object",
        "properties": {**json_fields, **fields},
        "additionalProperties": False,
        "oneOf": [{"required": ["image"]}, {"required": ["url"]}],
    }
    name = pipeline.name
    responses: dict[str, Any] = {
        "200": {
            "description": f"the {pipeline.task} answer",
            "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{name}.answer"}}},
        }
    }
    for status, meaning in ERROR_STATUSES.items():
        if status in ("401", "403") and not keys:
            continue
        responses[status] = {"description": meaning, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}
    operation: dict[str, Any] = {
        "operationId": f"infer_{name}",
        "summary": f"{name}: {pipeline.task} of one photo",
        "description": f"Formats {', '.join(pipeline.formats)}, at most {pipeline.max_image_bytes} bytes. Model version {pipeline.version}.",
        "tags": ["pipelines"],
        "parameters": parameters,
        "requestBody": {
            "required": True,
            "content": {
                "image/*": {"schema": BINARY},
                "application/octet-stream": {"schema": BINARY},
                "multipart/form-data": {"schema": multipart, "encoding": {"image": {"contentType": "image/*"}}},
                "application/json": {"schema": json_body},
            },
        },
        "responses": responses,
    }
    if keys:
        operation["security"] = [{"ApiKey": []}]
    return operation


def document(pipelines: Mapping[str, Pipeline], keys: bool = False, title: str = "Vision pipelines") -> dict[str, Any]:
    listing = obj(
        {
            "pipelines": {
                "type": "array",
                "items": obj(
                    {
                        "name": {"type": "string"},
                        "task": {"type": "string"},
                        "model_version": {"type": "string"},
                        "path": {"type": "string"},
                        "formats": {"type": "array", "items": {"type": "string"}},
                        "max_image_bytes": {"type": "integer"},
                        "options": {"type": "object"},
                        "choices": {"type": "object"},
                    }
                ),
            }
        }
    )
    paths: dict[str, Any] = {
        f"/{API_VERSION}/pipelines": {
            "get": {
                "operationId": "list_pipelines",
                "summary": "the pipelines of the server, their options and limits",
                "tags": ["pipelines"],
                "responses": {"200": {"description": "the pipelines", "content": {"application/json": {"schema": listing}}}},
            }
        }
    }
    schemas: dict[str, Any] = {"Error": ERROR_SCHEMA}
    for name in sorted(pipelines):
        paths[f"/{API_VERSION}/pipelines/{name}"] = {"post": _operation(pipelines[name], keys)}
        schemas[f"{name}.answer"] = answer_schema(pipelines[name])
    components: dict[str, Any] = {"schemas": schemas}
    if keys:
        components["securitySchemes"] = {"ApiKey": {"type": "apiKey", "in": "header", "name": "X-API-Key"}}
    return {
        "openapi": OPENAPI_VERSION,
        "info": {
            "title": title,
            "version": API_VERSION,
            "description": "Post a photo to a pipeline, get the task's answer as JSON. Errors are "
            '{"error": {"code", "message"}} with the HTTP status their code means.',
        },
        "paths": paths,
        "components": components,
    }


def listing(pipelines: Mapping[str, Pipeline]) -> dict[str, Any]:
    """``GET /v1/pipelines``: each pipeline, its task, limits, options and choices (the page reads it)."""
    found = []
    for name in sorted(pipelines):
        pipeline, form = pipelines[name], form_of(pipelines[name])
        found.append(
            {
                "name": name,
                "task": pipeline.task,
                "model_version": pipeline.version,
                "path": f"/{API_VERSION}/pipelines/{name}",
                "formats": list(pipeline.formats),
                "max_image_bytes": pipeline.max_image_bytes,
                "options": form.options,
                "choices": form.choices,
            }
        )
    return {"pipelines": found}
