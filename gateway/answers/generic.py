"""The answer of a task without a module of its own: every output of the photo by role, as nested lists (a BYTES
element as its UTF-8 text, or ``{"base64": ...}`` where it is not text)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ..catalog import Pipeline
from .base import JsonSchema, TaskAnswer, b64, obj


def element(value: Any) -> Any:
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            return {"base64": b64(value)}
    return value.item() if isinstance(value, np.generic) else value


def as_json(value: np.ndarray) -> Any:
    """An array as nested lists, its shape kept; BYTES elements as :func:`element` gives them."""
    array = np.asarray(value)
    if array.dtype.kind in "OSU":
        return element(array.item()) if array.ndim == 0 else [as_json(item) for item in array]
    if array.dtype.kind == "f":
        array = np.nan_to_num(array, nan=0.0, posinf=0.0, neginf=0.0)
    return array.tolist()


class GenericAnswer(TaskAnswer):
    def shape(self, pipeline: Pipeline, outputs: Mapping[str, np.ndarray], choices: Mapping[str, Any]) -> dict[str, Any]:
        return {"outputs": {role: as_json(value) for role, value in outputs.items()}}

    def schema(self, pipeline: Pipeline) -> JsonSchema:
        return obj({"outputs": obj({role: {"description": f"output {name}, nested lists"} for role, name in pipeline.outputs.items()})})


ANSWER = GenericAnswer()
