"""Detection: ``{"detections": [{"label", "class_id", "score", "box", "keypoints"?, "mask"?, "rotated_box"?}]}``, best
first, in the photo's pixels. What a detection carries beyond its box follows the pipeline's outputs: keypoints
(``[x, y]``, or ``[x, y, score]`` where the model scores them; their names in ``keypoint_names`` where the config
gives them), an instance mask over its ``mask_box`` (PNG or COCO RLE, ``mask_format``), an oriented box."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from vision_serving import tiling
from vision_serving.tasks.detection_tiles import TILING_OPTION

from ..catalog import Option, Pipeline
from . import masks
from .base import JsonSchema, TaskAnswer, array, count_of, number, obj, point, rounded, text

# The request options in [0, 1] and what they mean (the task's thresholds, each defaulted by the config's parameter).
THRESHOLDS = {"score_threshold": "the minimum score of a detection", "iou_threshold": "the overlap above which NMS drops a box"}


def keypoint_names(pipeline: Pipeline) -> list[str] | None:
    names = pipeline.parameter("keypoint_names")
    return names.split(",") if names else None


class DetectionAnswer(TaskAnswer):
    def option_schema(self, pipeline: Pipeline, option: Option) -> JsonSchema:
        if option.name == TILING_OPTION.role:  # a tiled pipeline's: JSON text, as the ensemble's TILING input takes it
            return {
                "type": "string",
                "contentMediaType": "application/json",
                "description": f"JSON: true, false or an object of {', '.join(tiling.REQUEST_KEYS)} (a JSON body may send it as such)",
            }
        if option.name not in THRESHOLDS:
            return super().option_schema(pipeline, option)
        default = pipeline.parameter(option.name)
        return {
            "type": "number",
            "minimum": 0,
            "maximum": 1,
            **({"default": float(default)} if default else {}),
            "description": THRESHOLDS[option.name],
        }

    def choices(self, pipeline: Pipeline) -> dict[str, JsonSchema]:
        return {"mask_format": masks.CHOICE} if "masks" in pipeline.outputs else {}

    def shape(self, pipeline: Pipeline, outputs: Mapping[str, np.ndarray], choices: Mapping[str, Any]) -> dict[str, Any]:
        count = count_of(outputs)
        boxes = np.asarray(outputs["boxes"], dtype=np.float64).reshape(-1, 4)[:count]
        scores = np.asarray(outputs["scores"], dtype=np.float64).reshape(-1)[:count]
        labels = np.asarray(outputs["labels"]).reshape(-1)[:count]
        ids = np.asarray(outputs["class_ids"]).reshape(-1)[:count]
        keypoints = outputs.get("keypoints")
        points = None if keypoints is None else np.asarray(keypoints, dtype=np.float64)[:count]
        detections = []
        for index in range(count):
            item: dict[str, Any] = {
                "label": text(labels[index]),
                "class_id": int(ids[index]),
                "score": rounded(scores[index], 4),
                "box": [rounded(v) for v in boxes[index]],
            }
            if points is not None:
                item["keypoints"] = [[rounded(x), rounded(y), *(rounded(v, 4) for v in rest)] for x, y, *rest in points[index].tolist()]
            if "masks" in outputs and "mask_boxes" in outputs:
                png = bytes(np.asarray(outputs["masks"]).reshape(-1)[index])
                box = [int(v) for v in np.asarray(outputs["mask_boxes"]).reshape(-1, 4)[index]]
                item["mask"] = {"box": box, **masks.encoded(png, choices["mask_format"])} if png else None
            if "rotated_boxes" in outputs and "corners" in outputs:
                cx, cy, width, height, angle = np.asarray(outputs["rotated_boxes"], dtype=np.float64).reshape(-1, 5)[index].tolist()
                corners = np.asarray(outputs["corners"], dtype=np.float64).reshape(-1, 4, 2)[index].tolist()
                item["rotated_box"] = {
                    "cx": rounded(cx),
                    "cy": rounded(cy),
                    "width": rounded(width),
                    "height": rounded(height),
                    "angle": rounded(angle, 5),
                    "corners": [[rounded(x), rounded(y)] for x, y in corners],
                }
            detections.append(item)
        answer: dict[str, Any] = {"detections": detections}
        names = keypoint_names(pipeline) if points is not None else None
        if names is not None:
            answer["keypoint_names"] = names
        return answer

    def schema(self, pipeline: Pipeline) -> JsonSchema:
        fields: dict[str, JsonSchema] = {
            "label": {"type": "string"},
            "class_id": {"type": "integer", "minimum": 0},
            "score": number("the detection's score", minimum=0, maximum=1),
            "box": array({"type": "number"}, "x_min, y_min, x_max, y_max in the photo's pixels", minItems=4, maxItems=4),
        }
        if "keypoints" in pipeline.outputs:
            fields["keypoints"] = array(
                array({"type": "number"}, "x, y in the photo's pixels (and the keypoint's score)", minItems=2, maxItems=3),
                "in the model's order",
            )
        if "masks" in pipeline.outputs:
            form = masks.schema("the instance's mask over its box")
            box = array({"type": "integer"}, "x0, y0, x1, y1 (ends exclusive) in the photo's pixels", minItems=4, maxItems=4)
            fields["mask"] = {
                "description": form["description"] + " (null: the instance has no mask pixels)",
                "oneOf": [*masks.with_fields(form, {"box": box}), {"type": "null"}],
            }
        if "rotated_boxes" in pipeline.outputs:
            fields["rotated_box"] = obj(
                {
                    "cx": number("centre x"),
                    "cy": number("centre y"),
                    "width": number("width"),
                    "height": number("height"),
                    "angle": number("rotation in radians"),
                    "corners": array(point(), "the four corners", minItems=4, maxItems=4),
                }
            )
        properties: dict[str, JsonSchema] = {"detections": array(obj(fields), "best first")}
        if "keypoints" in pipeline.outputs and keypoint_names(pipeline):
            properties["keypoint_names"] = array({"type": "string"})
        return obj(properties, required=["detections"])


ANSWER = DetectionAnswer()
