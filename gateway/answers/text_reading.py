"""Text reading: ``{"lines": [{"text", "score", "corners"}]}`` in reading order, each line's four corners in the
photo's pixels (and ``box_score``, the detector's, where the pipeline gives it)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from vision_serving.tasks.text_reading.task import lines_from_outputs

from ..catalog import Pipeline
from .base import JsonSchema, TaskAnswer, array, number, obj, point, rounded


class TextReadingAnswer(TaskAnswer):
    def shape(self, pipeline: Pipeline, outputs: Mapping[str, np.ndarray], choices: Mapping[str, Any]) -> dict[str, Any]:
        (lines,) = lines_from_outputs({role: np.asarray(value)[np.newaxis] for role, value in outputs.items()})
        with_box_score = "box_scores" in pipeline.outputs
        return {
            "lines": [
                {
                    "text": line.text,
                    "score": rounded(line.score, 4),
                    "corners": [[rounded(x), rounded(y)] for x, y in np.asarray(line.box).tolist()],
                    **({"box_score": rounded(line.box_score, 4)} if with_box_score else {}),
                }
                for line in lines
            ]
        }

    def schema(self, pipeline: Pipeline) -> JsonSchema:
        line: dict[str, JsonSchema] = {
            "text": {"type": "string"},
            "score": number("the recognizer's confidence", minimum=0, maximum=1),
            "corners": array(point(), "four corners, clockwise from the top left of the text", minItems=4, maxItems=4),
        }
        if "box_scores" in pipeline.outputs:
            line["box_score"] = number("the detector's confidence in the line's box", minimum=0, maximum=1)
        return obj({"lines": array(obj(line), "in reading order")})


ANSWER = TextReadingAnswer()
