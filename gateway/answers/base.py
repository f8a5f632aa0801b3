"""What a task's answer module provides (:class:`TaskAnswer`), and the JSON helpers the modules share."""

from __future__ import annotations

import base64
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..catalog import Option, Pipeline

JsonSchema = dict[str, Any]
# The JSON schema of an option by its tensor's datatype, before a task narrows it.
DATATYPE_SCHEMAS: dict[str, JsonSchema] = {
    "INT32": {"type": "integer", "minimum": -(2**31), "maximum": 2**31 - 1},
    "INT64": {"type": "integer"},
    "FP32": {"type": "number"},
    "FP64": {"type": "number"},
    "BOOL": {"type": "boolean"},
}


class TaskAnswer:
    """One task's JSON answer. Every method reads the pipeline (its roles, its task step's config), never a task name."""

    def option_schema(self, pipeline: Pipeline, option: Option) -> JsonSchema:
        """The JSON schema of one request option (a value the gateway checks before it sends it)."""
        return dict(DATATYPE_SCHEMAS.get(option.datatype, {"type": "string"}))

    def choices(self, pipeline: Pipeline) -> dict[str, JsonSchema]:
        """The answer's own options (not sent to the server: how the answer is written), each with its default."""
        return {}

    def shape(self, pipeline: Pipeline, outputs: Mapping[str, np.ndarray], choices: Mapping[str, Any]) -> dict[str, Any]:
        """One photo's outputs by role (no batch dim) -> the task's fields of the answer."""
        raise NotImplementedError

    def schema(self, pipeline: Pipeline) -> JsonSchema:
        """The JSON schema of :meth:`shape`'s fields (an object schema), from the roles this pipeline has."""
        raise NotImplementedError


def rounded(value: Any, digits: int = 2) -> float:
    """A finite float rounded for JSON (NaN and infinities become 0: JSON has no such numbers)."""
    number = float(value)
    return round(number, digits) if math.isfinite(number) else 0.0


def text(value: Any) -> str:
    return value.decode("utf-8", errors="replace") if isinstance(value, bytes) else str(value)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def count_of(outputs: Mapping[str, np.ndarray]) -> int:
    return int(np.asarray(outputs["count"]).reshape(-1)[0])


def number(description: str, **extra: Any) -> JsonSchema:
    return {"type": "number", "description": description, **extra}


def array(items: JsonSchema, description: str = "", **extra: Any) -> JsonSchema:
    return {"type": "array", "items": items, **({"description": description} if description else {}), **extra}


def point(description: str = "x, y in the photo's pixels") -> JsonSchema:
    return array({"type": "number"}, description, minItems=2, maxItems=2)


def obj(properties: Mapping[str, JsonSchema], required: list[str] | None = None, description: str = "") -> JsonSchema:
    schema: JsonSchema = {"type": "object", "properties": dict(properties), "required": list(required or properties)}
    if description:
        schema["description"] = description
    schema["additionalProperties"] = False
    return schema
