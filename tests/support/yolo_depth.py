"""The tests' own depth model: scenes with a known depth, a YOLO26n-depth trained on them by Ultralytics.

No pretrained depth model can be installed here, so the tests make one. A scene is a ground plane receding from the
bottom of the picture (``NEAR`` metres) to its horizon (``FAR``), a package photo or a flat colour as its texture, darker
with distance, and one to three shapes standing on it, each at the depth of the ground where it stands and drawn
smaller the farther it is. Its depth map is Ultralytics' format: a 16-bit PNG of millimetres (``depth_scale`` 1000) in
``depth/<split>`` beside ``images/<split>``. The model only has to give real, varied outputs: :func:`trained` trains it
for ``EPOCHS`` (about a minute of CPU), cached as every test model is (:func:`tests.support.yolo.train_task`), and its
exports are ``static.onnx`` (square), ``wide.onnx`` (landscape) and ``dynamic.onnx``.
This module imports no onnx.
"""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np

from tests.support import yolo

FAMILY = "yolo26"
EPOCHS = 20
NEAR, FAR = 1.0, 8.0  # metres: the ground at the bottom row and at the horizon
SCALE = 1000  # the depth PNGs' values per metre (Ultralytics' default depth_scale)
TRAIN_IMAGES = 160
VAL_IMAGES = 16


def scene(rng: np.random.Generator, height: int, width: int, background: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """A BGR image and its depth in metres (float32 [H, W]): the ground below a horizon, shapes standing on it."""
    horizon = int(rng.uniform(0.15, 0.45) * height)
    rows = np.arange(height, dtype=np.float32)
    # Depth along the ground: inversely proportional to the distance below the horizon (a pinhole camera over a plane).
    below = np.maximum(rows - horizon, 1.0)
    ground = np.minimum(NEAR * (height - horizon) / below, FAR).astype(np.float32)
    depth = np.repeat(ground[:, None], width, axis=1)
    image = yolo.canvas(rng, height, width, background).astype(np.float32)
    shade = (1.0 - 0.6 * (depth - NEAR) / (FAR - NEAR))[..., None]  # farther is darker
    image = image * shade
    image[:horizon] = np.array(yolo._color(rng), np.float32) * 0.5 + 64  # the sky: far, flat
    for _ in range(int(rng.integers(1, 4))):
        foot = int(rng.uniform(horizon + 0.2 * (height - horizon), height - 1))
        distance = float(ground[foot])
        side = max(4, int(0.35 * min(height, width) * NEAR / distance))
        left = int(rng.integers(0, max(1, width - side)))
        top = max(0, foot - side)
        color = np.array(yolo._color(rng), np.float32) * float(1.0 - 0.5 * (distance - NEAR) / (FAR - NEAR))
        image[top:foot, left : left + side] = color
        depth[top:foot, left : left + side] = distance
    return np.clip(image, 0, 255).astype(np.uint8), depth


def write_dataset(root: Path, seed: int = 3) -> Path:
    """Ultralytics' depth layout (``images/<split>``, ``depth/<split>`` 16-bit PNG millimetres); returns data.yaml."""
    pictures = yolo.backgrounds()
    for split, count, offset in (("train", TRAIN_IMAGES, 0), ("val", VAL_IMAGES, 1)):
        rng = np.random.default_rng([seed, offset])
        (root / "images" / split).mkdir(parents=True, exist_ok=True)
        (root / "depth" / split).mkdir(parents=True, exist_ok=True)
        for index in range(count):
            height, width = int(rng.integers(96, 200)), int(rng.integers(96, 200))
            background = pictures[int(rng.integers(0, len(pictures)))] if index % 2 else None
            image, depth = scene(rng, height, width, background)
            cv2.imwrite(str(root / "images" / split / f"{index:04d}.png"), image)
            cv2.imwrite(str(root / "depth" / split / f"{index:04d}.png"), np.rint(depth * SCALE).astype(np.uint16))
    data = root / "data.yaml"
    data.write_text(f"train: images/train\nval: images/val\ndepth_scale: {SCALE}\nnames:\n  0: depth\n")
    return data


def new_scenes(folder: Path, count: int, seed: int = 11) -> dict[str, bytes]:
    """``count`` scenes the model never saw (90 to 420 px, PNG and JPEG), written to ``folder``: file name -> bytes."""
    return yolo.write_new_scenes(folder, count, seed, "depth", lambda rng, h, w, background: scene(rng, h, w, background)[0])


def trained(log=print) -> Path:
    """The folder of the depth model's exports, weights and training.json."""
    return yolo.train_task("depth", write_dataset, log, epochs=EPOCHS, width=yolo.WIDTH, family=FAMILY)
