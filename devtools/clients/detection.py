"""``./scripts/detect``: each image's boxes, labels and scores (and keypoints, their scores and names in JSON); ``--score-threshold`` and
``--iou-threshold`` set the request's thresholds, ``--tiling JSON`` a tiled pipeline's ``TILING`` (docs/tiling.md), ``--draw OUT``
writes the image with its detections drawn."""

from __future__ import annotations

import argparse
import importlib
import json
import math
from collections.abc import Callable, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

import cv2
import numpy as np

from vision_serving.tasks import detection
from vision_serving.tasks.detection_heads.base import ExtraAnswer

from . import drawing
from .base import ClientReport, TaskClient, text

DRAWN_SUFFIX = ".detections.jpg"
BOX_COLOR = (0, 220, 0)  # BGR
KEYPOINT_COLORS = ((255, 64, 64), (64, 64, 255), (0, 200, 255), (255, 0, 200), (255, 255, 0), (0, 255, 255))
# A keypoint with a score (a pose model's [K, P, 3]) is drawn when the score is at least this.
KEYPOINT_MIN_SCORE = 0.5
# COCO's 17 person keypoints (Ultralytics' pose models) and the limbs Ultralytics' plotting draws between them.
COCO_KEYPOINTS = 17
COCO_SKELETON = ((15, 13), (13, 11), (16, 14), (14, 12), (11, 12), (5, 11), (6, 12), (5, 6), (5, 7), (6, 8), (7, 9), (8, 10),
                 (1, 2), (0, 1), (0, 2), (1, 3), (2, 4), (3, 5), (4, 6))  # fmt: skip
# The options that set the task's per-image request inputs (its request roles, each in [0, 1]): role -> help.
THRESHOLDS = {"score_threshold": "minimum score", "iou_threshold": "NMS IoU threshold"}
# The option that sets a tiled pipeline's per-image TILING (BYTES, JSON: vision_serving.tiling), and every request role.
TILING_ROLE = "tiling"
REQUEST_ROLES = (*THRESHOLDS, TILING_ROLE)


def extra_drawing(name: str) -> ModuleType:
    """The drawing an extra answer names (:class:`~vision_serving.tasks.detection_heads.base.ExtraAnswer`):
    ``devtools.clients.draw_<name>``, whose ``painter`` draws the answers over the picture and ``fields`` lists them
    per detection."""
    module_name = f"{__package__}.draw_{name}"
    if not name.isidentifier():
        raise ValueError(f"drawing {name!r} is not a module name")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        if error.name != module_name:
            raise
        raise ValueError(f"an extra answer names drawing {name!r}, but there is no {module_name} (its painter and fields)") from None
    if not (callable(getattr(module, "painter", None)) and callable(getattr(module, "fields", None))):
        raise TypeError(f"{module_name} is not a drawing: it needs painter(outputs, count, paint) and fields(outputs, index)")
    return module


def extra_drawings(outputs_by_role: Mapping[str, Any]) -> list[ModuleType]:
    """The drawings the heads' extra answers among ``outputs_by_role`` name, each once, in the detection task's order."""
    roles = detection.TASK.output_roles()
    names = [role.drawing for role in roles if isinstance(role, ExtraAnswer) and role.drawing and role.role in outputs_by_role]
    return [extra_drawing(name) for name in dict.fromkeys(names)]


def unit_interval(value: str) -> float:
    """An argparse type: a number in [0, 1], as the task's thresholds must be."""
    number = float(value)
    if not (0.0 <= number <= 1.0 and math.isfinite(number)):
        raise argparse.ArgumentTypeError(f"must be in [0, 1], got {value}")
    return number


def json_text(value: str) -> str:
    """An argparse type: JSON text (a tiled pipeline's ``TILING``: ``true``, ``false`` or an object of its settings)."""
    try:
        json.loads(value)
    except json.JSONDecodeError as error:
        raise argparse.ArgumentTypeError(f"must be JSON (true, false or an object such as '{{\"tile_size\": 512}}'): {error}") from None
    return value


def paint(boxes: np.ndarray, scores: np.ndarray, labels: list[str], keypoints: np.ndarray | None) -> Callable[[np.ndarray, int], None]:
    """What :func:`drawing.draw` paints: each detection's box, label and score, and its keypoints (:func:`paint_keypoints`)."""

    def on(picture: np.ndarray, width: int) -> None:
        for index, (box, score, label) in enumerate(zip(boxes, scores, labels)):
            x0, y0, x1, y1 = (round(float(v)) for v in box)
            cv2.rectangle(picture, (x0, y0), (x1, y1), BOX_COLOR, width, cv2.LINE_AA)
            drawing.caption(picture, f"{label} {score:.2f}", x0, y0, BOX_COLOR, width)
            if keypoints is not None:
                paint_keypoints(picture, keypoints[index], width)

    return on


def drawn_keypoints(points: np.ndarray) -> np.ndarray:
    """Which of one detection's keypoints ``[P, 2]`` (x, y) or ``[P, 3]`` (x, y, score) are drawn: those whose score is
    at least ``KEYPOINT_MIN_SCORE``; without a score, all."""
    if points.shape[-1] < 3:
        return np.ones(len(points), bool)
    return np.asarray(points[:, 2] >= KEYPOINT_MIN_SCORE)


def paint_keypoints(picture: np.ndarray, points: np.ndarray, width: int) -> None:
    """One detection's keypoints as dots, each keypoint its own colour (the same one in every detection); COCO's 17
    person keypoints joined by their limbs (Ultralytics' skeleton) where both ends are drawn."""
    shown = drawn_keypoints(points)
    if len(points) == COCO_KEYPOINTS:
        for a, b in COCO_SKELETON:
            if shown[a] and shown[b]:
                ends = [(round(float(points[i, 0])), round(float(points[i, 1]))) for i in (a, b)]
                cv2.line(picture, ends[0], ends[1], KEYPOINT_COLORS[a % len(KEYPOINT_COLORS)], width, cv2.LINE_AA)
    for point, (x, y) in enumerate(points[:, :2]):
        if shown[point]:
            color = KEYPOINT_COLORS[point % len(KEYPOINT_COLORS)]
            cv2.circle(picture, (round(float(x)), round(float(y))), 2 * width, color, -1, cv2.LINE_AA)


def keypoint_names(args: argparse.Namespace) -> list[str] | None:
    """The keypoints' names: the ``keypoint_names`` parameter of the pipeline's postprocess config, which the program
    hands every client as ``args.task_parameters`` (:class:`~devtools.clients.base.TaskClient`); None where the config
    has none, or where there is no server (a report made without one)."""
    names = getattr(args, "task_parameters", {}).get("keypoint_names")
    return names.split(",") if names else None


def keypoint_records(points: np.ndarray) -> list[list[float]]:
    """One detection's keypoints for JSON: ``[x, y]`` each, ``[x, y, score]`` where the model scores them."""
    return [[round(float(x), 2), round(float(y), 2), *(round(float(v), 4) for v in rest)] for x, y, *rest in points.tolist()]


class DetectionClient(TaskClient):
    script = "detect"
    pipeline = "face_detector"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        for role, meaning in THRESHOLDS.items():
            option = "--" + role.replace("_", "-")
            parser.add_argument(option, type=unit_interval, metavar="X", help=f"{meaning} in [0, 1] (default: the model's)")
        parser.add_argument(
            "--tiling",
            type=json_text,
            metavar="JSON",
            help="a tiled pipeline's TILING for every image: true, false or its settings, e.g. '{\"tile_size\": 512}' (docs/tiling.md)",
        )
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
        tiling = getattr(args, TILING_ROLE, None)
        if tiling is not None:
            inputs[TILING_ROLE] = np.full((count, 1), tiling.encode(), dtype=np.object_)
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
        painter = paint(boxes, scores, labels, points)
        extras = extra_drawings(outputs)
        for extra in extras:
            painter = extra.painter(outputs, count, painter)
        drawn = drawing.draw(name, image, out, single, DRAWN_SUFFIX, painter)
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
                item["keypoints"] = keypoint_records(points[index])
            for extra in extras:
                item.update(extra.fields(outputs, index))
            detections.append(item)
        record: dict[str, Any] = {"file": name, "detections": detections}
        names = keypoint_names(args) if points is not None else None
        if names is not None:
            record["keypoint_names"] = names
        if drawn:
            record["drawn"] = drawn
        return ClientReport(lines, record, [drawn] if drawn else [])


CLIENT = DetectionClient()
