"""Segmentation: ``{"coverage", "mask": {"width", "height", "png" | "rle"}}``: the person mask at the photo's size, as
a PNG (base64) or COCO RLE (``mask_format``), and the fraction of the photo it covers."""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..catalog import Pipeline
from . import masks
from .base import JsonSchema, TaskAnswer, number, obj


def png_size(png: bytes) -> tuple[int, int]:
    """(width, height) from a PNG's IHDR."""
    if len(png) < 24 or png[12:16] != b"IHDR":
        raise ValueError("the mask is not a PNG")
    width, height = struct.unpack(">II", png[16:24])
    return int(width), int(height)


class SegmentationAnswer(TaskAnswer):
    def choices(self, pipeline: Pipeline) -> dict[str, JsonSchema]:
        return {"mask_format": masks.CHOICE}

    def shape(self, pipeline: Pipeline, outputs: Mapping[str, np.ndarray], choices: Mapping[str, Any]) -> dict[str, Any]:
        png = bytes(np.asarray(outputs["mask"]).reshape(-1)[0])
        width, height = png_size(png)
        coverage = float(np.asarray(outputs["coverage"]).reshape(-1)[0])
        return {"coverage": round(coverage, 6), "mask": {"width": width, "height": height, **masks.encoded(png, choices["mask_format"])}}

    def schema(self, pipeline: Pipeline) -> JsonSchema:
        form = masks.schema("the mask at the photo's size")
        size = {"width": {"type": "integer", "minimum": 1}, "height": {"type": "integer", "minimum": 1}}
        mask = {"description": form["description"], "oneOf": masks.with_fields(form, size)}
        return obj({"coverage": number("the fraction of the photo's pixels in the mask", minimum=0, maximum=1), "mask": mask})


ANSWER = SegmentationAnswer()
