"""Classification: ``{"classes": [{"label", "score", "class_id"}]}``, best first; ``top_k`` from 1 to the model's classes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from vision_serving import model_config
from vision_serving.tasks import classification
from vision_serving.tasks.base import resolve_roles

from ..catalog import Option, Pipeline
from .base import JsonSchema, TaskAnswer, array, number, obj, text


def class_count(pipeline: Pipeline) -> int:
    """The model's classes: the last dim of the task step's logits input."""
    logits = resolve_roles(pipeline.postprocess, "input", classification.INPUTS)["logits"]
    return int(model_config.tensor(pipeline.postprocess, logits or "").dims[-1])


class ClassificationAnswer(TaskAnswer):
    def option_schema(self, pipeline: Pipeline, option: Option) -> JsonSchema:
        if option.name != "top_k":
            return super().option_schema(pipeline, option)
        default = int(pipeline.parameter("top_k", "5"))
        return {"type": "integer", "minimum": 1, "maximum": class_count(pipeline), "default": default, "description": "how many classes"}

    def shape(self, pipeline: Pipeline, outputs: Mapping[str, np.ndarray], choices: Mapping[str, Any]) -> dict[str, Any]:
        labels = np.asarray(outputs["labels"]).reshape(-1)
        scores = np.asarray(outputs["scores"], dtype=np.float64).reshape(-1)
        ids = np.asarray(outputs["class_ids"]).reshape(-1)
        return {
            "classes": [
                {"label": text(label), "score": round(float(score), 6), "class_id": int(class_id)}
                for label, score, class_id in zip(labels, scores, ids)
            ]
        }

    def schema(self, pipeline: Pipeline) -> JsonSchema:
        item = obj(
            {
                "label": {"type": "string"},
                "score": number("probability", minimum=0, maximum=1),
                "class_id": {"type": "integer", "minimum": 0},
            }
        )
        return obj({"classes": array(item, "best first")})


ANSWER = ClassificationAnswer()
