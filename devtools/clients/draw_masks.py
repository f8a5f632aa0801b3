"""Instance masks in the detection client: a segmenting head's ``masks`` (one PNG per detection: its binary mask over
the pixels of its ``mask_boxes``) drawn on ``--draw``'s picture and given in ``--json``'s records.

The segment head's answers name this drawing (``drawing="masks"``), and the detection client finds it by that name.
Every function takes one image's outputs by role (the client's ``report``) and does nothing (or gives nothing) where
the pipeline has no masks.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Mapping
from typing import Any

import cv2
import numpy as np

from vision_serving.tasks.segmentation import decode_png

# BGR tints, one per detection in turn; the mask is tinted this much and outlined in the same colour.
MASK_COLORS = ((255, 128, 0), (0, 128, 255), (200, 0, 200), (0, 200, 200), (128, 255, 0), (255, 0, 128))
MASK_OPACITY = 0.45


def mask(outputs_by_role: Mapping[str, Any], index: int) -> tuple[np.ndarray, tuple[int, int, int, int]] | None:
    """Detection ``index``'s mask (bool, the size of its box) and its box ``(x0, y0, x1, y1)`` (the end exclusive, in the
    photo's pixels); None where the outputs have no mask for it."""
    masks, boxes = outputs_by_role.get("masks"), outputs_by_role.get("mask_boxes")
    if masks is None or boxes is None:
        return None
    png = bytes(np.asarray(masks).reshape(-1)[index])
    if not png:
        return None
    x0, y0, x1, y1 = (int(v) for v in np.asarray(boxes).reshape(-1, 4)[index])
    return decode_png(png) > 0, (x0, y0, x1, y1)


def draw(picture: np.ndarray, outputs_by_role: Mapping[str, Any], index: int) -> None:
    """Detection ``index``'s mask tinted over ``picture`` (BGR) and outlined, in its colour; nothing without one. The
    part of the mask outside the picture (a picture OpenCV decodes at another size than the server) is left out."""
    found = mask(outputs_by_role, index)
    if found is None:
        return
    pixels, (x0, y0, _, _) = found
    height, width = picture.shape[:2]
    pixels = pixels[: max(0, height - y0), : max(0, width - x0)]
    if not pixels.any():
        return
    region = picture[y0 : y0 + pixels.shape[0], x0 : x0 + pixels.shape[1]]
    color = np.array(MASK_COLORS[index % len(MASK_COLORS)], np.float32)
    region[pixels] = np.clip(region[pixels] * (1 - MASK_OPACITY) + color * MASK_OPACITY, 0, 255).astype(np.uint8)
    contours, _ = cv2.findContours(pixels.astype(np.uint8), cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_SIMPLE)
    cv2.drawContours(region, contours, -1, tuple(int(v) for v in color), 1, cv2.LINE_AA)


def painter(outputs_by_role: Mapping[str, Any], count: int, paint: Callable[[np.ndarray, int], None]) -> Callable[[np.ndarray, int], None]:
    """A painter for :func:`devtools.clients.drawing.draw`: the ``count`` detections' masks (:func:`draw`), then
    ``paint`` (the boxes and labels) over them."""

    def on(picture: np.ndarray, width: int) -> None:
        for index in range(count):
            draw(picture, outputs_by_role, index)
        paint(picture, width)

    return on


def fields(outputs_by_role: Mapping[str, Any], index: int) -> dict[str, Any]:
    """Detection ``index``'s mask outputs for its JSON record: ``mask_box`` (x0, y0, x1, y1, the end exclusive, in the
    photo's pixels), ``mask_png`` (the MASKS PNG, base64) and ``mask_pixels`` (the mask's area); {} without masks."""
    masks, boxes = outputs_by_role.get("masks"), outputs_by_role.get("mask_boxes")
    if masks is None or boxes is None:
        return {}
    png = bytes(np.asarray(masks).reshape(-1)[index])
    found = mask(outputs_by_role, index)
    return {
        "mask_box": [int(v) for v in np.asarray(boxes).reshape(-1, 4)[index]],
        "mask_png": base64.b64encode(png).decode("ascii"),
        "mask_pixels": int(found[0].sum()) if found is not None else 0,
    }
