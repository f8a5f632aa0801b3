"""Oriented boxes in the detection client: an oriented-box head's ``corners`` (each detection's four corners in the
photo's pixels) drawn on ``--draw``'s picture, and its ``rotated_boxes`` and ``corners`` given in ``--json``'s records.

The oriented-box head's answers name this drawing (``drawing="rotated"``), and the detection client finds it by that
name. Every function takes one image's outputs by role (the client's ``report``) and does nothing (or gives nothing)
where the pipeline has no oriented boxes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import cv2
import numpy as np

from . import drawing

ROTATED_COLOR = (0, 140, 255)  # BGR: orange, beside the axis-aligned boxes' green


def corners(outputs_by_role: Mapping[str, Any], index: int) -> np.ndarray | None:
    """Detection ``index``'s corners ``[4, 2]`` (x, y in the photo's pixels); None where the outputs have none."""
    found = outputs_by_role.get("corners")
    if found is None:
        return None
    points = np.asarray(found, dtype=np.float64).reshape(-1, 4, 2)
    return points[index] if index < len(points) else None


def draw(picture: np.ndarray, outputs_by_role: Mapping[str, Any], index: int) -> None:
    """Detection ``index``'s oriented box as a closed outline on ``picture`` (BGR), its first corner marked (it says which
    way the box turned); nothing without one. OpenCV clips what lies past the picture."""
    points = corners(outputs_by_role, index)
    if points is None or not np.isfinite(points).all():
        return
    width = drawing.thickness(picture)
    polygon = np.round(points * 16).astype(np.int32)  # 4 fractional bits: OpenCV's shift
    cv2.polylines(picture, [polygon], True, ROTATED_COLOR, width, cv2.LINE_AA, shift=4)
    cv2.circle(picture, tuple(int(v) for v in polygon[0]), 2 * width * 16, ROTATED_COLOR, -1, cv2.LINE_AA, shift=4)


def painter(outputs_by_role: Mapping[str, Any], count: int, paint: Callable[[np.ndarray, int], None]) -> Callable[[np.ndarray, int], None]:
    """A painter for :func:`devtools.clients.drawing.draw`: ``paint`` (the boxes and labels), then the ``count``
    detections' oriented boxes (:func:`draw`) over them."""

    def on(picture: np.ndarray, width: int) -> None:
        paint(picture, width)
        for index in range(count):
            draw(picture, outputs_by_role, index)

    return on


def fields(outputs_by_role: Mapping[str, Any], index: int) -> dict[str, Any]:
    """Detection ``index``'s oriented box for its JSON record: ``rotated_box`` (centre x, y, width, height in the photo's
    pixels, the angle in radians) and ``corners`` ([x, y] x 4); {} without oriented boxes."""
    rotated, points = outputs_by_role.get("rotated_boxes"), corners(outputs_by_role, index)
    if rotated is None or points is None:
        return {}
    box = np.asarray(rotated, dtype=np.float64).reshape(-1, 5)[index]
    return {
        "rotated_box": [*(round(float(v), 2) for v in box[:4]), round(float(box[4]), 5)],
        "corners": [[round(float(x), 2), round(float(y), 2)] for x, y in points.tolist()],
    }
