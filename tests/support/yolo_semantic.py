"""The tests' own semantic segmenter: every pixel a background, a disc, a square or a triangle.

No pretrained semantic model can be installed here, so the tests make one from the instance segmenter's scenes
(:func:`tests.support.yolo_segment.scene`: shapes that never overlap, in colours that stand out): each shape's polygon
filled with its class (1 disc, 2 square, 3 triangle) on a background of 0, written in Ultralytics' semantic layout
(``images/<split>``, ``masks/<split>`` 8-bit PNG class ids, ``masks_dir`` in data.yaml). :func:`trained` has
Ultralytics train a YOLO26n-sem on them for ``EPOCHS`` (a minute or two of CPU), cached as every test model is
(:func:`tests.support.yolo.train_task`); its exports are ``static.onnx`` (square), ``wide.onnx`` (landscape) and
``dynamic.onnx``. The model only has to give real, varied maps. This module imports no onnx.
"""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np

from tests.support import yolo, yolo_segment

FAMILY = "yolo26"
NAMES = ("background", *yolo_segment.CLASSES)
EPOCHS = 20
TRAIN_IMAGES = 120
VAL_IMAGES = 8


def scene(rng: np.random.Generator, height: int, width: int, background: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """A BGR image of one to three shapes and its class map (uint8 [H, W]: 0 background, 1 + the shape's class)."""
    image, labels = yolo_segment.scene(rng, height, width, background)
    classes = np.zeros((height, width), np.uint8)
    for kind, polygon in labels:
        cv2.fillPoly(classes, [np.round(polygon * 16).astype(np.int32)], kind + 1, cv2.LINE_8, shift=4)
    return image, classes


def write_dataset(root: Path, seed: int = 5) -> Path:
    """Ultralytics' semantic layout (``images/<split>``, ``masks/<split>``); returns data.yaml."""
    pictures = yolo.backgrounds()
    for split, count, offset in (("train", TRAIN_IMAGES, 0), ("val", VAL_IMAGES, 1)):
        rng = np.random.default_rng([seed, offset])
        (root / "images" / split).mkdir(parents=True, exist_ok=True)
        (root / "masks" / split).mkdir(parents=True, exist_ok=True)
        for index in range(count):
            height, width = int(rng.integers(96, 200)), int(rng.integers(96, 200))
            background = pictures[int(rng.integers(0, len(pictures)))] if index % yolo_segment.PHOTOS == 0 else None
            image, classes = scene(rng, height, width, background)
            cv2.imwrite(str(root / "images" / split / f"{index:04d}.png"), image)
            cv2.imwrite(str(root / "masks" / split / f"{index:04d}.png"), classes)
    data = root / "data.yaml"
    data.write_text(
        "train: images/train\nval: images/val\nmasks_dir: masks\nnames:\n" + "".join(f"  {i}: {n}\n" for i, n in enumerate(NAMES))
    )
    return data


def new_scenes(folder: Path, count: int, seed: int = 13) -> dict[str, bytes]:
    """``count`` scenes the model never saw (90 to 420 px, PNG and JPEG), written to ``folder``: file name -> bytes."""
    return yolo.write_new_scenes(folder, count, seed, "semantic", lambda rng, h, w, background: scene(rng, h, w, background)[0])


def trained(log=print) -> Path:
    """The folder of the semantic model's exports, weights and training.json."""
    return yolo.train_task("semantic", write_dataset, log, epochs=EPOCHS, width=yolo.WIDTH, family=FAMILY)
