"""``./scripts/detect``: each image's boxes, labels and scores (and keypoints, their scores and names in JSON); ``--score-threshold`` and
``--iou-threshold`` set the request's thresholds, ``--draw OUT`` writes the image with its detections drawn."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from . import draw_masks, draw_rotated, drawing
from .base import ClientReport, TaskClient, text

# What the heads add to the detection task's answers, each drawn over the picture and listed per detection (a module
# with painter and fields; both do nothing where a pipeline has not its outputs): masks, rotated boxes.
EXTRA_ANSWERS = (draw_masks, draw_rotated)

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


def unit_interval(value: str) -> float:
    """An argparse type: a number in [0, 1], as the task's thresholds must be."""
    number = float(value)
    if not (0.0 <= number <= 1.0 and math.isfinite(number)):
        raise argparse.ArgumentTypeError(f"must be in [0, 1], got {value}")
    return number


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
    """The keypoints' names: the ``keypoint_names`` parameter of the postprocess config of the model the options name
    (the ensemble's step with a ``task`` parameter), read from the server once per run and kept in ``args``; None
    where the config has none, or the options name no server (a report made without one)."""
    names: list[str] | None = vars(args).get("keypoint_names")
    if "keypoint_names" in vars(args):
        return names
    if getattr(args, "protocol", None) and getattr(args, "model", None):
        from devtools import client  # the program that runs this client (it imports the clients)

        connection = client.connect(args)
        try:
            for step in reversed(connection.config(args.model).ensemble_scheduling.step):
                parameters = connection.config(step.model_name).parameters
                if "task" in parameters:
                    if "keypoint_names" in parameters:
                        names = parameters["keypoint_names"].string_value.split(",")
                    break
        except client.ClientError:  # the answers were read: a config that cannot be is a report without names
            names = None
        finally:
            connection.close()
    args.keypoint_names = names
    return names


def keypoint_records(points: np.ndarray) -> list[list[float]]:
    """One detection's keypoints for JSON: ``[x, y]`` each, ``[x, y, score]`` where the model scores them."""
    return [[round(float(x), 2), round(float(y), 2), *(round(float(v), 4) for v in rest)] for x, y, *rest in points.tolist()]


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
        painter = paint(boxes, scores, labels, points)
        for extra in EXTRA_ANSWERS:
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
            for extra in EXTRA_ANSWERS:
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
