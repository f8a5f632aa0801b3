"""The tests' own YOLO instance segmenter: filled discs, squares and triangles, each its own polygon.

No pretrained segmentation model can be installed on these machines, so the tests make one, as
:mod:`tests.support.yolo` makes its detector: scenes (:func:`scene`) of filled shapes (a disc, a
square turned up to 45 degrees, a triangle) that never overlap, on flat colours and on crops of the
package photos (one in three), in colours that stand out; each shape's outline is its label. :func:`write_dataset` writes them in Ultralytics'
segment layout (``class x1 y1 x2 y2 ...``: the polygon, normalized) and :func:`trained` has
Ultralytics train a YOLOv8n-seg on them (:func:`tests.support.yolo.train_task`), starting from the detector's weights:
its ``static.onnx`` and ``dynamic.onnx`` exports. The model only has to give real outputs (boxes and
masks above the predictor's thresholds), not good ones.
"""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np

from tests.support import yolo
from vision_serving.tasks.segmentation import decode_png

CLASSES = ("disc", "square", "triangle")
EPOCHS = 15  # from the detector's weights (yolo.trained): its layers already see shapes
TRAIN_IMAGES = 120
VAL_IMAGES = 8
DISC_POINTS = 48  # a disc's polygon: this many points on its circle
CONTRAST = 60  # a shape's colour differs from what it covers by this much (0..255, mean over the channels)
PHOTOS = 3  # one image in this many is on a crop of a package photo, the others on flat colours


def outline(kind: int, side: float, angle: float) -> np.ndarray:
    """The shape's polygon ``[P, 2]`` centred on the origin: a disc of diameter ``side``, a square of side 0.75 x
    ``side`` or a triangle of that base and height, turned by ``angle`` (radians)."""
    if kind == 0:
        turns = np.linspace(0, 2 * np.pi, DISC_POINTS, endpoint=False)
        return np.stack([np.cos(turns), np.sin(turns)], axis=-1) * side / 2
    half = side / 2
    square = np.array([[-1, -1], [1, -1], [1, 1], [-1, 1]]) * half * 0.75
    points = square if kind == 1 else np.array([[0.0, -half], [half, half], [-half, half]])
    rotation = np.array([[np.cos(angle), -np.sin(angle)], [np.sin(angle), np.cos(angle)]])
    return points @ rotation.T


def scene(rng: np.random.Generator, height: int, width: int, background: np.ndarray | None = None, count: int | None = None):
    """A BGR image of ``count`` (1..3) shapes that do not overlap, and their labels ``(class, polygon [P, 2])`` in
    pixels (a shape that finds no free place after a few tries is left out)."""
    image = yolo.canvas(rng, height, width, background)
    taken = np.zeros((height, width), np.uint8)
    labels = []
    for _ in range(int(rng.integers(1, 4)) if count is None else count):
        kind = int(rng.integers(0, len(CLASSES)))
        side = rng.uniform(0.3, 0.55) * min(height, width)
        shape = outline(kind, side, rng.uniform(0, np.pi / 4))
        low, high = shape.min(axis=0), shape.max(axis=0)
        for _attempt in range(8):
            centre = np.array([rng.uniform(-low[0], width - high[0]), rng.uniform(-low[1], height - high[1])])
            polygon = shape + centre
            fixed = np.round(polygon * 16).astype(np.int32)
            alone = np.zeros_like(taken)
            cv2.fillPoly(alone, [fixed], 1, cv2.LINE_8, shift=4)
            if not (alone & taken).any():
                break
        else:
            continue
        cv2.dilate(alone, np.ones((5, 5), np.uint8), dst=alone)  # a gap between shapes
        taken |= alone
        cv2.fillPoly(image, [fixed], contrasting(rng, image[alone > 0].mean(axis=0)), cv2.LINE_AA, shift=4)
        labels.append((kind, polygon))
    return image, labels


def contrasting(rng: np.random.Generator, background: np.ndarray) -> tuple[int, int, int]:
    """A random colour at least ``CONTRAST`` away from ``background`` (BGR) on average over the channels."""
    while True:
        color = yolo._color(rng)
        if np.abs(np.array(color) - background).mean() >= CONTRAST:
            return color


def label_line(label, height: int, width: int) -> str:
    kind, polygon = label
    normalized = np.clip(polygon / [width, height], 0, 1)
    return f"{kind}" + "".join(f" {x:.6f} {y:.6f}" for x, y in normalized.tolist()) + "\n"


def write_dataset(root: Path, seed: int = 1) -> Path:
    """The training set (a third on photo crops) and a validation set; returns data.yaml."""

    def draw(rng: np.random.Generator, height: int, width: int, background: np.ndarray | None) -> tuple[np.ndarray, str]:
        image, labels = scene(rng, height, width, background)
        return image, "".join(label_line(label, height, width) for label in labels)

    return yolo.write_yolo_dataset(root, draw, CLASSES, (TRAIN_IMAGES, VAL_IMAGES), lambda index: index % PHOTOS == 1, seed)


def trained(log=print) -> Path:
    """The folder holding static.onnx, dynamic.onnx and training.json (trained once, cached)."""
    return yolo.train_task("segment", write_dataset, log, epochs=EPOCHS, width=yolo.WIDTH, start_from=yolo.trained(log))


def write_scenes(count: int, seed: int) -> dict[str, bytes]:
    """``count`` scenes the model never saw, at many sizes and aspect ratios (wider, taller, smaller and larger than the
    model's input), PNG and JPEG: name -> file bytes."""
    rng = np.random.default_rng([seed, 7])
    pictures = yolo.backgrounds()
    written = {}
    for index in range(count):
        height, width = int(rng.integers(90, 420)), int(rng.integers(90, 420))
        background = pictures[index % len(pictures)] if index % PHOTOS == 1 else None
        image, _ = scene(rng, height, width, background)
        suffix = ".png" if index % 3 else ".jpg"
        ok, data = cv2.imencode(suffix, image, [cv2.IMWRITE_JPEG_QUALITY, 92])
        assert ok
        written[f"segment_{index:03d}{suffix}"] = data.tobytes()
    return written


def placed(png: bytes, mask_box: np.ndarray, height: int, width: int) -> np.ndarray:
    """A MASKS PNG at its MASK_BOXES in a canvas of the photo's size (bool)."""
    canvas = np.zeros((height, width), bool)
    x0, y0, x1, y1 = (int(v) for v in mask_box)
    if png:
        canvas[y0:y1, x0:x1] = decode_png(bytes(png)) > 0
    return canvas
