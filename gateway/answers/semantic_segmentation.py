"""Semantic segmentation: ``{"class_map": {"width", "height", "png"}, "classes": [{"class_id", "label", "share"}]}``:
the class of every pixel at the photo's size as an 8-bit PNG of class ids (base64), and the classes present, largest
share of the photo first."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ..catalog import Pipeline
from .base import JsonSchema, TaskAnswer, array, b64, count_of, number, obj, text
from .segmentation import png_size


class SemanticSegmentationAnswer(TaskAnswer):
    def shape(self, pipeline: Pipeline, outputs: Mapping[str, np.ndarray], choices: Mapping[str, Any]) -> dict[str, Any]:
        png = bytes(np.asarray(outputs["class_map"]).reshape(-1)[0])
        width, height = png_size(png)
        count = count_of(outputs)
        ids = np.asarray(outputs["class_ids"]).reshape(-1)[:count]
        labels = np.asarray(outputs["labels"]).reshape(-1)[:count]
        shares = np.asarray(outputs["shares"], dtype=np.float32).reshape(-1)[:count]
        classes = [
            {"class_id": int(c), "label": text(label), "share": round(float(share), 6)} for c, label, share in zip(ids, labels, shares)
        ]
        return {"class_map": {"width": width, "height": height, "png": b64(png)}, "classes": classes}

    def schema(self, pipeline: Pipeline) -> JsonSchema:
        size = {"type": "integer", "minimum": 1}
        png = {"type": "string", "contentEncoding": "base64", "description": "8-bit grayscale PNG: each pixel its class id"}
        item = obj(
            {
                "class_id": {"type": "integer", "minimum": 0, "maximum": 255},
                "label": {"type": "string"},
                "share": number("the fraction of the photo's pixels of this class", minimum=0, maximum=1),
            }
        )
        return obj(
            {
                "class_map": obj({"width": size, "height": size, "png": png}, description="the class map at the photo's size"),
                "classes": array(item, "the classes present, largest share first"),
            }
        )


ANSWER = SemanticSegmentationAnswer()
