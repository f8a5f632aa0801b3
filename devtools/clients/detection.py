"""``./scripts/detect``: each image's boxes, labels and scores (and keypoints in JSON); ``--score-threshold`` and
``--iou-threshold`` set the request's thresholds, ``--draw OUT`` writes the image with its detections drawn."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from . import drawing
from .base import ClientReport, TaskClient, text

DRAWN_SUFFIX = ".detections.jpg"
BOX_COLOR = (0, 220, 0)  # BGR
KEYPOINT_COLORS = ((255, 64, 64), (64, 64, 255), (0, 200, 255), (255, 0, 200), (255, 255, 0), (0, 255, 255))
# The options that set the task's per-image request inputs (its request roles, each in [0, 1]): role -> help.
THRESHOLDS = {"score_threshold": "minimum score", "iou_threshold": "NMS IoU threshold"}


def unit_interval(value: str) -> float:
    """An argparse type: a number in [0, 1], as the task's thresholds must be."""
    number = float(value)
    if not (0.0 <= number <= 1.0 and math.isfinite(number)):
        raise argparse.ArgumentTypeError(f"must be in [0, 1], got {value}")
    return number


def paint(boxes: np.ndarray, scores: np.ndarray, labels: list[str], keypoints: np.ndarray | None) -> Callable[[np.ndarray, int], None]:
    """What :func:`drawing.draw` paints: each detection's box, label and score, and its keypoints."""

    def on(picture: np.ndarray, width: int) -> None:
        for index, (box, score, label) in enumerate(zip(boxes, scores, labels)):
            x0, y0, x1, y1 = (round(float(v)) for v in box)
            cv2.rectangle(picture, (x0, y0), (x1, y1), BOX_COLOR, width, cv2.LINE_AA)
            drawing.caption(picture, f"{label} {score:.2f}", x0, y0, BOX_COLOR, width)
            if keypoints is not None:
                for point, (x, y) in enumerate(keypoints[index]):
                    color = KEYPOINT_COLORS[point % len(KEYPOINT_COLORS)]
                    cv2.circle(picture, (round(float(x)), round(float(y))), 2 * width, color, -1, cv2.LINE_AA)

    return on


class DetectionClient(TaskClient):
    script = "detect"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        for role, meaning in THRESHOLDS.items():
            option = "--" + role.replace("_", "-")
            parser.add_argument(option, type=unit_interval, metavar="X", help=f"{meaning} in [0, 1] (default: the model's)")
        parser.add_argument(
            "--draw",
            type=Path,
            metavar="OUT",
            help=f"write images with the detections drawn: OUT.jpg/.png for one image, else <name>{DRAWN_SUFFIX} in folder OUT",
        )

    def output_suffixes(self) -> tuple[str, ...]:
        return (DRAWN_SUFFIX,)

    def request_inputs(self, args: argparse.Namespace, count: int) -> dict[str, np.ndarray]:
        inputs = {}
        for role in THRESHOLDS:
            value = getattr(args, role, None)
            if value is not None:
                inputs[role] = np.full((count, 1), value, dtype=np.float32)
        return inputs

    def report(self, name: str, outputs: Mapping[str, np.ndarray], image: bytes, args: argparse.Namespace) -> ClientReport:
        count = int(np.asarray(outputs["count"]).reshape(-1)[0])
        boxes = np.asarray(outputs["boxes"]).reshape(-1, 4)[:count]
        scores = np.asarray(outputs["scores"]).reshape(-1)[:count]
        labels = [text(label) for label in np.asarray(outputs["labels"]).reshape(-1)[:count]]
        class_ids = np.asarray(outputs["class_ids"]).reshape(-1)[:count]
        keypoints = outputs.get("keypoints")
        points = None if keypoints is None else np.asarray(keypoints).reshape(-1, *np.asarray(keypoints).shape[-2:])[:count]
        out, single = getattr(args, "draw", None), getattr(args, "single_image", True)
        drawn = drawing.draw(name, image, out, single, DRAWN_SUFFIX, paint(boxes, scores, labels, points))
        tally: dict[str, int] = {}
        for label in labels:
            tally[label] = tally.get(label, 0) + 1
        summary = f"{count} detection{'' if count == 1 else 's'}" + (
            " (" + ", ".join(f"{label}: {n}" for label, n in tally.items()) + ")" if tally else ""  # no plurals of label names
        )
        lines = [f"{name}: {summary}" + (f" -> {drawn}" if drawn else "")]
        if count:
            width = max([len("label"), *(len(label) for label in labels)])
            lines.append(f"  {'#':>3}  {'label':<{width}}  {'score':>6}  {'x_min':>7}  {'y_min':>7}  {'x_max':>7}  {'y_max':>7}")
            for index, (label, score, (x0, y0, x1, y1)) in enumerate(zip(labels, scores, boxes), start=1):
                lines.append(f"  {index:>3}  {label:<{width}}  {score:>6.3f}  {x0:>7.1f}  {y0:>7.1f}  {x1:>7.1f}  {y1:>7.1f}")
        detections = []
        for index in range(count):
            item: dict[str, Any] = {
                "label": labels[index],
                "class_id": int(class_ids[index]),
                "score": round(float(scores[index]), 4),
                "box": [round(float(v), 2) for v in boxes[index]],
            }
            if points is not None:
                item["keypoints"] = [[round(float(x), 2), round(float(y), 2)] for x, y in points[index]]
            detections.append(item)
        record = {"file": name, "detections": detections, **({"drawn": drawn} if drawn else {})}
        return ClientReport(lines, record, [drawn] if drawn else [])


CLIENT = DetectionClient()
