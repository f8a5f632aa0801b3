"""The tests' own YOLO classifier: one shape per photo (circle, square, triangle, ring or cross), classified by it.

No pretrained classifier can be installed on these machines, so the tests make one, as
:mod:`tests.support.yolo` makes its detector: photos of one shape (:func:`photo`) on flat colours
and on crops of the package photos, at many sizes and aspect ratios; :func:`write_dataset` writes
them in Ultralytics' classify layout (``train/<class>/*.png``, ``val/<class>/*.png``) and
:func:`trained` has Ultralytics train a YOLOv8n-cls on them in about a minute
(:func:`tests.support.yolo.train_task`): its ``static.onnx`` and ``dynamic.onnx`` exports at
128x128. The tests need its real outputs, not its accuracy: a few epochs on few photos (five
classes, so that a top-5 holds every rank).
"""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np

from tests.support import yolo

CLASSES = ("circle", "square", "triangle", "ring", "cross")  # in the order photo() draws them
NAMES = tuple(sorted(CLASSES))  # the model's class ids: Ultralytics numbers the class folders in sorted order
EPOCHS = 6
TRAIN_PER_CLASS = 20
VAL_PER_CLASS = 4


def _color(rng: np.random.Generator) -> tuple[int, int, int]:
    return tuple(int(v) for v in rng.integers(0, 256, 3))  # type: ignore[return-value]


def photo(rng: np.random.Generator, pictures: list[np.ndarray], index: int, low: int = 96, high: int = 200) -> tuple[np.ndarray, int]:
    """A BGR photo of one shape of class ``index % 5`` (on a flat colour, or on a crop of a package photo every other
    time round) and that class."""
    kind = index % len(CLASSES)
    height, width = int(rng.integers(low, high)), int(rng.integers(low, high))
    if (index // len(CLASSES)) % 2:
        picture = pictures[int(rng.integers(0, len(pictures)))]
        top, left = int(rng.integers(0, picture.shape[0] // 2)), int(rng.integers(0, picture.shape[1] // 2))
        crop = picture[top : top + picture.shape[0] // 2, left : left + picture.shape[1] // 2]
        image = cv2.resize(crop, (width, height), interpolation=cv2.INTER_AREA)
    else:
        image = np.full((height, width, 3), _color(rng), np.uint8)
        image = np.clip(image + rng.normal(0, 8, image.shape), 0, 255).astype(np.uint8)
    side = rng.uniform(0.35, 0.7) * min(height, width)
    cx, cy = rng.uniform(side / 2, width - side / 2), rng.uniform(side / 2, height - side / 2)
    color, half = _color(rng), side / 2
    if kind in (0, 3):  # a disc, or a ring of it
        cv2.circle(image, (int(cx), int(cy)), int(half), color, -1 if kind == 0 else max(2, int(side / 8)), cv2.LINE_AA)
    elif kind == 1:
        cv2.rectangle(image, (int(cx - half * 0.8), int(cy - half * 0.8)), (int(cx + half * 0.8), int(cy + half * 0.8)), color, -1)
    elif kind == 2:
        corners = np.array([[cx, cy - half], [cx - half, cy + half], [cx + half, cy + half]], np.int32)
        cv2.fillPoly(image, [corners], color, cv2.LINE_AA)
    else:
        thickness = max(2, int(side / 6))
        cv2.line(image, (int(cx - half), int(cy)), (int(cx + half), int(cy)), color, thickness, cv2.LINE_AA)
        cv2.line(image, (int(cx), int(cy - half)), (int(cx), int(cy + half)), color, thickness, cv2.LINE_AA)
    return image, kind


def write_dataset(root: Path, seed: int = 1) -> Path:
    """The training and validation photos, balanced over the classes; returns the dataset folder (Ultralytics' ``data``)."""
    pictures = yolo.backgrounds()
    for split, per_class, offset in (("train", TRAIN_PER_CLASS, 0), ("val", VAL_PER_CLASS, 1)):
        rng = np.random.default_rng([seed, offset])
        for name in CLASSES:
            (root / split / name).mkdir(parents=True, exist_ok=True)
        for index in range(per_class * len(CLASSES)):
            image, kind = photo(rng, pictures, index)
            cv2.imwrite(str(root / split / CLASSES[kind] / f"{index:04d}.png"), image)
    return root


def trained(log=print) -> Path:
    """The folder holding static.onnx, dynamic.onnx and training.json (trained once, cached)."""
    return yolo.train_task("classify", write_dataset, log, epochs=EPOCHS)


def write_photos(count: int, seed: int) -> dict[str, bytes]:
    """``count`` photos the model never saw, at many sizes and aspect ratios (portrait, landscape, elongated),
    PNG and JPEG: name -> file bytes."""
    rng = np.random.default_rng([seed, 7])
    pictures = yolo.backgrounds()
    written = {}
    for index in range(count):
        image, kind = photo(rng, pictures, index, 60, 420)
        suffix = ".png" if index % 3 else ".jpg"
        ok, data = cv2.imencode(suffix, image, [cv2.IMWRITE_JPEG_QUALITY, 92])
        assert ok
        written[f"{CLASSES[kind]}_{index:02d}{suffix}"] = data.tobytes()
    return written
