"""Large photos of small objects for the tiled pipelines: the tests' YOLO shapes (tests/support/yolo.py), each drawn as
the detector was trained to see it, in a cell of a photo many times its input.

Each shape is a one-shape scene of :func:`tests.support.yolo.scene` drawn on the photo's own pixels at a cell of
``cell`` px (its side 20 to 45 % of the cell, as in training), the cells on a jittered grid so no two shapes touch.
Shrunk whole into the detector's input, a 4000 px photo's 40 px shape is 2 px: the untiled pipeline misses it, a tile at
the model's input sees it at its own size.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import cv2
import numpy as np

from tests.support import yolo

# A one-object scene: (rng, height, width, background, count=1) -> the image and its labels.
Scene = Callable[..., tuple[np.ndarray, list[Any]]]


@dataclass(frozen=True)
class LargePhoto:
    """A drawn photo: its BGR pixels, and the labelled shapes, boxes ``[K, 4]`` (x0, y0, x1, y1 px) and classes ``[K]``."""

    image: np.ndarray
    boxes: np.ndarray
    classes: np.ndarray

    def png(self) -> bytes:
        ok, data = cv2.imencode(".png", self.image, [cv2.IMWRITE_PNG_COMPRESSION, 1])
        assert ok
        return data.tobytes()

    def jpeg(self, quality: int = 92) -> bytes:
        ok, data = cv2.imencode(".jpg", self.image, [cv2.IMWRITE_JPEG_QUALITY, quality])
        assert ok
        return data.tobytes()


def large_photo(
    seed: int, height: int, width: int, count: int, cell: int = 128, on_photo: bool = True, scene: Scene = yolo.scene
) -> LargePhoto:
    """A ``height`` x ``width`` photo (a package photo resized, or a flat colour) with ``count`` small shapes, one per
    ``cell`` x ``cell`` cell of a grid (``count`` at most the grid's cells), each a one-object ``scene`` (the detector's,
    or another task's: tests/support/yolo_obb.py's bars and ellipses, labelled by their corners)."""
    rng = np.random.default_rng([seed, 23])
    pictures = yolo.backgrounds()
    image = yolo.canvas(rng, height, width, pictures[seed % len(pictures)] if on_photo else None)
    rows, columns = height // cell, width // cell
    if count > rows * columns:
        raise ValueError(f"{count} shapes do not fit a {width}x{height} photo's {rows * columns} cells of {cell} px")
    boxes, classes = [], []
    for place in rng.choice(rows * columns, size=count, replace=False):
        top, left = int(place // columns) * cell, int(place % columns) * cell
        patch, ((kind, *label),) = scene(rng, cell, cell, image[top : top + cell, left : left + cell], count=1)
        image[top : top + cell, left : left + cell] = patch
        if len(label) == 1:  # corners [4, 2] in the patch's pixels
            (x0, y0), (x1, y1) = np.asarray(label[0]).min(axis=0), np.asarray(label[0]).max(axis=0)
        else:  # YOLO's normalized centre and size
            cx, cy, w, h = label
            x0, y0, x1, y1 = (cx - w / 2) * cell, (cy - h / 2) * cell, (cx + w / 2) * cell, (cy + h / 2) * cell
        boxes.append((left + x0, top + y0, left + x1, top + y1))
        classes.append(kind)
    return LargePhoto(image, np.array(boxes, np.float32).reshape(-1, 4), np.array(classes, np.int64))
