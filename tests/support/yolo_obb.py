"""The tests' own YOLO oriented-box model: bars and ellipses turned to any angle.

No pretrained OBB model can be installed on these machines, so the tests make one, as
:mod:`tests.support.yolo` makes its detector: scenes (:func:`scene`) of filled bars (rectangles two
to four times as long as wide) and ellipses, turned to any angle, on flat colours and on crops of
the package photos; each object's oriented box is its rectangle (an ellipse's: the one its axes
span). :func:`write_dataset` writes them in Ultralytics' OBB layout (``class x1 y1 x2 y2 x3 y3 x4
y4``: the four corners, normalized) and :func:`trained` has Ultralytics train a YOLOv8n-obb on
them (:func:`tests.support.yolo.train_task`), starting from the detector's weights: its ``static.onnx`` and
``dynamic.onnx`` exports. The model only has to give real outputs, not good ones: so few epochs
leave its scores low (an oriented box's score follows how well it fits), and ``yolo_exports.surer`` rewrites
an export so that its class scores' odds are ``ODDS`` times the network's (the boxes and angles
untouched, the scores' order kept) and Ultralytics' predictor at its default 0.25 finds objects.
"""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np

from tests.support import yolo

CLASSES = ("bar", "ellipse")
EPOCHS = 10  # from the detector's weights (yolo.trained): its layers already see shapes
TRAIN_IMAGES = 200
VAL_IMAGES = 8
ODDS = 8.0  # surer(): a score of 0.04 becomes 0.25, 0.1 becomes 0.47


def _color(rng: np.random.Generator) -> tuple[int, int, int]:
    return tuple(int(v) for v in rng.integers(0, 256, 3))  # type: ignore[return-value]


def corners(cx: float, cy: float, width: float, height: float, angle: float) -> np.ndarray:
    """``[4, 2]`` corners of the rectangle of that centre and size turned by ``angle`` (radians, clockwise on screen:
    x right, y down), as Ultralytics' ``xywhr2xyxyxyxy`` orders them."""
    cos, sin = np.cos(angle), np.sin(angle)
    along, across = np.array([width / 2 * cos, width / 2 * sin]), np.array([-height / 2 * sin, height / 2 * cos])
    centre = np.array([cx, cy])
    return np.stack([centre + along + across, centre + along - across, centre - along - across, centre - along + across])


def scene(rng: np.random.Generator, height: int, width: int, background: np.ndarray | None = None, count: int | None = None):
    """A BGR image of ``count`` (1..3) objects and their labels ``(class, corners [4, 2])`` in pixels."""
    image = yolo.canvas(rng, height, width, background)
    labels = []
    for _ in range(int(rng.integers(1, 4)) if count is None else count):
        kind = int(rng.integers(0, len(CLASSES)))
        long = rng.uniform(0.4, 0.75) * min(height, width)
        short = long / rng.uniform(2.0, 4.0)
        angle = rng.uniform(0, np.pi)
        points = corners(0.0, 0.0, long, short, angle)
        low, high = points.min(axis=0), points.max(axis=0)
        cx, cy = rng.uniform(-low[0], width - high[0]), rng.uniform(-low[1], height - high[1])
        points = points + np.array([cx, cy])
        color = _color(rng)
        if kind == 0:
            cv2.fillPoly(image, [np.round(points * 16).astype(np.int32)], color, cv2.LINE_AA, shift=4)
        else:
            axes = (round(long / 2 * 16), round(short / 2 * 16))
            centre = (round(cx * 16), round(cy * 16))
            cv2.ellipse(image, centre, axes, float(np.degrees(angle)), 0, 360, color, -1, cv2.LINE_AA, shift=4)
        labels.append((kind, points))
    return image, labels


def label_line(label, height: int, width: int) -> str:
    kind, points = label
    normalized = np.clip(points / [width, height], 0, 1)
    return f"{kind}" + "".join(f" {x:.6f} {y:.6f}" for x, y in normalized.tolist()) + "\n"


def write_dataset(root: Path, seed: int = 1) -> Path:
    """The training set (two thirds on flat colours, a third on photo crops) and a validation set; returns data.yaml."""

    def draw(rng: np.random.Generator, height: int, width: int, background: np.ndarray | None) -> tuple[np.ndarray, str]:
        image, labels = scene(rng, height, width, background)
        return image, "".join(label_line(label, height, width) for label in labels)

    return yolo.write_yolo_dataset(root, draw, CLASSES, (TRAIN_IMAGES, VAL_IMAGES), lambda index: index % 3 == 2, seed)


def trained(log=print) -> Path:
    """The folder holding static.onnx, dynamic.onnx and training.json (trained once, cached)."""
    return yolo.train_task("obb", write_dataset, log, epochs=EPOCHS, width=yolo.WIDTH, start_from=yolo.trained(log))


def write_scenes(folder: Path, count: int, seed: int) -> dict[str, bytes]:
    """``count`` scenes the model never saw, at many sizes and aspect ratios, PNG and JPEG: name -> file bytes."""
    return yolo.write_new_scenes(
        folder, count, seed, "obb", lambda rng, height, width, background: scene(rng, height, width, background)[0]
    )


def _area(polygon: np.ndarray) -> float:
    """The signed area of a polygon ``[P, 2]`` (positive counter-clockwise, x right, y up)."""
    x, y = polygon[:, 0], polygon[:, 1]
    return float(np.dot(x, np.roll(y, -1)) - np.dot(y, np.roll(x, -1))) / 2 if len(polygon) > 2 else 0.0


def polygon_iou(first: np.ndarray, second: np.ndarray) -> float:
    """IoU of two convex quadrilaterals ``[4, 2]`` (either winding), in float64: the first clipped by each edge of the
    second (Sutherland-Hodgman). Not cv2.intersectConvexConvex, which fails on two nearly identical polygons."""
    a, b = (np.asarray(points, np.float64) for points in (first, second))
    a, b = (p if _area(p) >= 0 else p[::-1] for p in (a, b))
    clipped = a
    for start, end in zip(b, np.roll(b, -1, axis=0)):
        if not len(clipped):
            break
        edge = end - start
        side = edge[0] * (clipped[:, 1] - start[1]) - edge[1] * (clipped[:, 0] - start[0])  # >= 0: inside (left of the edge)
        kept = []
        for i in range(len(clipped)):
            j = (i + 1) % len(clipped)
            if side[i] >= 0:
                kept.append(clipped[i])
            if (side[i] >= 0) != (side[j] >= 0):
                kept.append(clipped[i] + (clipped[j] - clipped[i]) * side[i] / (side[i] - side[j]))
        clipped = np.array(kept).reshape(-1, 2)
    inter = abs(_area(clipped))
    union = abs(_area(a)) + abs(_area(b)) - inter
    return inter / union if union > 0 else 0.0
