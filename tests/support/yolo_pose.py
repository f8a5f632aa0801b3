"""The tests' own YOLO pose model: triangles and arrowheads whose three tips are its keypoints.

No pretrained pose model can be installed on these machines, so the tests make one, as
:mod:`tests.support.yolo` makes its detector: scenes (:func:`scene`) of filled triangles and
arrowheads, turned up to 30 degrees, on flat colours and on crops of the package photos; their
keypoints the shape's apex, left and right tips (``KEYPOINTS``), a tip outside the photo labelled
not visible. :func:`write_dataset` writes them in Ultralytics' pose layout (``class cx cy w h px py
v ...``, normalized; data.yaml with ``kpt_shape``, ``flip_idx`` and ``kpt_names``) and
:func:`trained` has Ultralytics train a YOLOv8n-pose on them (:func:`tests.support.yolo.train_task`), starting from the
detector's weights (its layers already see shapes: ``EPOCHS`` are enough): its ``static.onnx`` and ``dynamic.onnx`` exports.
"""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np

from tests.support import yolo

CLASSES = ("triangle", "arrowhead")
KEYPOINTS = ("apex", "left", "right")
FLIP = (0, 2, 1)  # a horizontal flip swaps the left and right tips
EPOCHS = 15  # from the detector's weights (yolo.trained): its layers already see shapes
TRAIN_IMAGES = 240
VAL_IMAGES = 16
OUTSIDE = 0.2  # the share of shapes moved so that one tip leaves the photo (that keypoint: not visible)


def _color(rng: np.random.Generator) -> tuple[int, int, int]:
    return tuple(int(v) for v in rng.integers(0, 256, 3))  # type: ignore[return-value]


def _outline(kind: int, side: float) -> tuple[np.ndarray, np.ndarray]:
    """The shape's polygon and its tips (apex, left, right), centred on the origin, upright."""
    half = side / 2
    tips = np.array([[0.0, -half], [-half, half], [half, half]])
    if kind == 0:
        return tips, tips
    notch = np.array([0.0, half - side * 0.4])
    return np.array([tips[0], tips[2], notch, tips[1]]), tips


def scene(rng: np.random.Generator, height: int, width: int, background: np.ndarray | None = None, count: int | None = None):
    """A BGR image of ``count`` (1..3) shapes and their labels ``(class, cx, cy, w, h, [(x, y, v)] x 3)``, normalized;
    a tip outside the photo is ``(0, 0, 0)``."""
    image = yolo.canvas(rng, height, width, background)
    labels = []
    for _ in range(int(rng.integers(1, 4)) if count is None else count):
        kind = int(rng.integers(0, len(CLASSES)))
        side = rng.uniform(0.25, 0.5) * min(height, width)
        angle = np.deg2rad(rng.uniform(-30, 30))
        rotation = np.array([[np.cos(angle), -np.sin(angle)], [np.sin(angle), np.cos(angle)]])
        polygon, tips = (points @ rotation.T for points in _outline(kind, side))
        low, high = polygon.min(axis=0), polygon.max(axis=0)
        centre = np.array([rng.uniform(-low[0], width - high[0]), rng.uniform(-low[1], height - high[1])])
        if rng.random() < OUTSIDE:  # push one tip out of the photo, past its nearest edge
            tip = tips[int(rng.integers(0, 3))] + centre
            gaps = np.array([tip[0], width - tip[0], tip[1], height - tip[1]])
            edge = int(np.argmin(gaps))
            step = gaps[edge] + side * 0.1
            centre += [(-step, 0), (step, 0), (0, -step), (0, step)][edge]
        polygon, tips = polygon + centre, tips + centre
        cv2.fillPoly(image, [np.round(polygon * 16).astype(np.int32)], _color(rng), cv2.LINE_AA, shift=4)
        x0, y0 = np.clip(polygon.min(axis=0), 0, [width, height])
        x1, y1 = np.clip(polygon.max(axis=0), 0, [width, height])
        points = [(x / width, y / height, 2) if 0 <= x < width and 0 <= y < height else (0.0, 0.0, 0) for x, y in tips.tolist()]
        labels.append((kind, (x0 + x1) / 2 / width, (y0 + y1) / 2 / height, (x1 - x0) / width, (y1 - y0) / height, points))
    return image, labels


def label_line(label) -> str:
    kind, cx, cy, w, h, points = label
    return f"{kind} {cx:.6f} {cy:.6f} {w:.6f} {h:.6f}" + "".join(f" {x:.6f} {y:.6f} {v}" for x, y, v in points) + "\n"


def write_dataset(root: Path, seed: int = 1) -> Path:
    """The training set (half on flat colours, half on photo crops) and a validation set; returns data.yaml, with the
    keypoint shape, the flip order and Ultralytics' per-class keypoint names (coco-pose.yaml's layout: its exports carry
    them as kpt_names)."""

    def draw(rng: np.random.Generator, height: int, width: int, background: np.ndarray | None) -> tuple[np.ndarray, str]:
        image, labels = scene(rng, height, width, background)
        return image, "".join(label_line(label) for label in labels)

    extra = f"kpt_shape: [{len(KEYPOINTS)}, 3]\nflip_idx: [{', '.join(map(str, FLIP))}]\nkpt_names:\n" + "".join(
        f"  {i}: [{', '.join(KEYPOINTS)}]\n" for i in range(len(CLASSES))
    )
    return yolo.write_yolo_dataset(root, draw, CLASSES, (TRAIN_IMAGES, VAL_IMAGES), lambda index: index % 2 == 1, seed, extra)


def trained(log=print) -> Path:
    """The folder holding static.onnx, dynamic.onnx and training.json (trained once, cached)."""
    return yolo.train_task("pose", write_dataset, log, epochs=EPOCHS, width=yolo.WIDTH, start_from=yolo.trained(log))


def write_scenes(folder: Path, count: int, seed: int) -> dict[str, bytes]:
    """``count`` scenes the model never saw, at many sizes and aspect ratios, PNG and JPEG: name -> file bytes."""
    return yolo.write_new_scenes(
        folder, count, seed, "pose", lambda rng, height, width, background: scene(rng, height, width, background)[0]
    )
