"""Depth: ``{"depth": {"width", "height", "scale", "range", "png"[, "float32"]}}``: the depth map at the photo's size
as a 16-bit PNG (base64) whose values divided by ``scale`` are the depth, the smallest and largest depth, and, when the
request sets ``float_depth``, the float32 map (base64 of its little-endian values, row by row)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ..catalog import Option, Pipeline
from .base import JsonSchema, TaskAnswer, array, b64, number, obj
from .segmentation import png_size


class DepthAnswer(TaskAnswer):
    def option_schema(self, pipeline: Pipeline, option: Option) -> JsonSchema:
        if option.name == "float_depth":
            return {"type": "boolean", "default": False, "description": "also answer the float32 depth map"}
        return super().option_schema(pipeline, option)

    def shape(self, pipeline: Pipeline, outputs: Mapping[str, np.ndarray], choices: Mapping[str, Any]) -> dict[str, Any]:
        png = bytes(np.asarray(outputs["depth_png"]).reshape(-1)[0])
        width, height = png_size(png)
        low, high = (float(value) for value in np.asarray(outputs["depth_range"], dtype=np.float32).reshape(-1)[:2])
        found: dict[str, Any] = {
            "width": width,
            "height": height,
            "scale": float(np.asarray(outputs["depth_scale"]).reshape(-1)[0]),
            "range": [low, high],
            "png": b64(png),
        }
        raw = bytes(np.asarray(outputs["depth_float32"]).reshape(-1)[0]) if "depth_float32" in outputs else b""
        if raw:
            found["float32"] = b64(raw)
        return {"depth": found}

    def schema(self, pipeline: Pipeline) -> JsonSchema:
        size = {"type": "integer", "minimum": 1}
        depth = obj(
            {
                "width": size,
                "height": size,
                "scale": number("the PNG's values per unit of depth (1000: millimetres)", exclusiveMinimum=0),
                "range": array({"type": "number"}, "the smallest and largest depth", minItems=2, maxItems=2),
                "png": {"type": "string", "contentEncoding": "base64", "description": "16-bit grayscale PNG: depth x scale"},
                "float32": {
                    "type": "string",
                    "contentEncoding": "base64",
                    "description": "float32 depth, little-endian, row by row (only when float_depth was asked)",
                },
            },
            ["width", "height", "scale", "range", "png"],
            "the depth map at the photo's size",
        )
        return obj({"depth": depth})


ANSWER = DepthAnswer()
