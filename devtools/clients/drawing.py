"""The clients' pictures (``--draw OUT``): a copy of an upload with its answers drawn, written with OpenCV."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import cv2
import numpy as np

# OUT with one of these endings is the picture itself when one image is sent; otherwise OUT is a folder.
PICTURE_SUFFIXES = (".jpg", ".jpeg", ".png", ".webp")


def decode(image: bytes) -> np.ndarray | None:
    """The upload as OpenCV reads it (BGR), or None when OpenCV cannot (the server's decoder reads more)."""
    return cv2.imdecode(np.frombuffer(image, np.uint8), cv2.IMREAD_COLOR)


def thickness(picture: np.ndarray) -> int:
    """Line width in pixels for a picture of this size (1 up to 400 px on the long side)."""
    return max(1, round(max(picture.shape[:2]) / 400))


def output_path(name: str, out: Path, single: bool, suffix: str) -> Path:
    """``out`` itself for one image when it ends like a picture, else ``out/<name's stem><suffix>``."""
    return out if single and out.suffix.lower() in PICTURE_SUFFIXES else out / f"{Path(name).stem}{suffix}"


def draw(name: str, image: bytes, out: Path | None, single: bool, suffix: str, paint: Callable[[np.ndarray, int], None]) -> str | None:
    """The upload with ``paint(picture, thickness)`` drawn on it, written under ``out`` (:func:`output_path`); its
    path, or None when ``out`` is None. ``ValueError`` when OpenCV cannot read the upload or write the picture."""
    if out is None:
        return None
    picture = decode(image)
    if picture is None:
        raise ValueError("the server decoded this file but OpenCV cannot, nothing drawn")
    paint(picture, thickness(picture))
    path = output_path(name, out, single, suffix)
    path.parent.mkdir(parents=True, exist_ok=True)
    if not cv2.imwrite(str(path), picture):
        raise ValueError(f"cannot write {path}")
    return str(path)


def caption(picture: np.ndarray, text: str, x: int, y: int, color: tuple[int, int, int], width: int) -> None:
    """``text`` just above the point (x, y), as wide strokes as the boxes."""
    cv2.putText(picture, text, (x, max(0, y - 4)), cv2.FONT_HERSHEY_SIMPLEX, 0.4 * width, color, width, cv2.LINE_AA)
