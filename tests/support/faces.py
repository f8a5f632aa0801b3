"""Photos with zero, one and several faces, for the face_detector tests and measurements.

The package photos (``builders.photos``) show at most one face each
(astronaut, camera, grace_hopper). Photos with several faces are composites:
square crops around those faces (a margin of about 1.2 face widths on each
side, so each crop looks like a portrait to the short-range detector), with
mirrored copies for variety, tiled on a grid and encoded as PNG, as a client
would upload them.
"""

from __future__ import annotations

from collections.abc import Sequence

import cv2
import numpy as np

from builders import photos
from vision_serving import image_codec

ONE_FACE = ("astronaut", "camera", "grace_hopper")
NO_FACE = ("coffee", "chelsea", "rocket", "motorcycle_left", "brick")
LIMITS = image_codec.ImageLimits(max_bytes=1 << 26, max_pixels=1 << 28)
# photo -> (x_centre, y_centre, side) of the face box MediaPipe finds in it (pixels, rounded).
FACES: dict[str, tuple[float, float, float]] = {
    "astronaut": (225.5, 130.5, 95.0),
    "camera": (222.5, 164.5, 85.0),
    "grace_hopper": (268.5, 244.0, 195.0),
}
PORTRAIT = 0.45  # the face's share of a crop's side: a portrait
BACKGROUND = 96  # mid-gray cells around and between the faces


def decoded(name: str) -> np.ndarray:
    """A package photo as RGB uint8, decoded by the served decoder."""
    return image_codec.decode_rgb(photos.photo_bytes(name), LIMITS)


def face_crop(name: str, side: int, mirror: bool = False, share: float = PORTRAIT) -> np.ndarray:
    """A square centred on ``name``'s face, the face ``share`` of its side, resized to ``side`` x ``side``
    (RGB uint8)."""
    x, y, face = FACES[name]
    size = round(face / share)
    left, top = round(x - size / 2), round(y - size / 2)
    photo = decoded(name)
    if left < 0 or top < 0 or left + size > photo.shape[1] or top + size > photo.shape[0]:
        raise ValueError(f"a crop with the face at {share:.0%} of its side does not fit in {name}")
    crop = photo[top : top + size, left : left + size]
    crop = cv2.resize(crop, (side, side), interpolation=cv2.INTER_AREA if side < size else cv2.INTER_LINEAR)
    return np.ascontiguousarray(crop[:, ::-1]) if mirror else crop


def grid(cells: Sequence[np.ndarray | None], columns: int, side: int, gap: int = 0) -> np.ndarray:
    """Cells (``side`` x ``side`` RGB, or None for an empty cell) on a grid, row by row."""
    rows = -(-len(cells) // columns)
    image = np.full((rows * side + (rows - 1) * gap, columns * side + (columns - 1) * gap, 3), BACKGROUND, np.uint8)
    for index, cell in enumerate(cells):
        if cell is not None:
            row, column = divmod(index, columns)
            y, x = row * (side + gap), column * (side + gap)
            image[y : y + side, x : x + side] = cell
    return image


def faces_grid(count: int, columns: int, side: int, share: float = PORTRAIT, names: Sequence[str] = ONE_FACE) -> np.ndarray:
    """``count`` faces, cycling through ``names`` and then their mirror images, on a grid."""
    cells = [face_crop(names[i % len(names)], side, bool((i // len(names)) % 2), share) for i in range(count)]
    return grid(cells, columns, side)


def encode_png(image: np.ndarray) -> bytes:
    ok, buffer = cv2.imencode(".png", cv2.cvtColor(image, cv2.COLOR_RGB2BGR))
    if not ok:
        raise RuntimeError("PNG encoding failed")
    return buffer.tobytes()


def several_faces() -> dict[str, bytes]:
    """Composites with several faces, by name -> PNG bytes. MediaPipe finds every face in them, each
    with a score of at least 0.77 (no face near the 0.5 threshold)."""
    return {
        "faces_2x2": encode_png(faces_grid(4, 2, 256)),
        "faces_row_3": encode_png(faces_grid(3, 3, 200, share=0.7)),
        "faces_ten": ten_faces(),
    }


def ten_faces() -> bytes:
    """Ten faces on a 4 x 3 grid (two empty cells), tight crops of the two larger faces: in the
    detector's 128 x 128 input each face is about 25 px, near the short-range model's smallest."""
    return encode_png(faces_grid(10, 4, 200, share=0.8, names=("astronaut", "grace_hopper")))


def photo_set() -> dict[str, bytes]:
    """Zero, one and several faces: the package photos and the composites, by name -> bytes."""
    return {
        **{name: photos.photo_bytes(name) for name in (*NO_FACE, *ONE_FACE)},
        **several_faces(),
    }
