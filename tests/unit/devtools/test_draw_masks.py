"""The detection client's masks (devtools/clients/draw_masks.py): drawn where their PNGs say, given in JSON, and
nothing at all for a pipeline without masks."""

from __future__ import annotations

import base64

import numpy as np

from devtools.clients import draw_masks
from vision_serving.tasks.segmentation import decode_png, encode_png


def outputs() -> dict[str, np.ndarray]:
    """One image's answers with two detections: a 4x6 mask at (10, 5) whose left half is set, and none (b"")."""
    pixels = np.zeros((4, 6), np.uint8)
    pixels[:, :3] = 255
    return {
        "count": np.array([2], np.int32),
        "masks": np.array([encode_png(pixels, binary=True), b""], dtype=np.object_),
        "mask_boxes": np.array([[10, 5, 16, 9], [0, 0, 0, 0]], np.int32),
    }


def test_a_mask_is_drawn_on_its_pixels_only():
    picture = np.zeros((20, 30, 3), np.uint8)
    draw_masks.draw(picture, outputs(), 0)
    painted = picture.any(axis=-1)
    assert painted[5:9, 10:13].all() and not painted[:5].any() and not painted[9:].any()  # tinted, outlined
    assert not painted[:, :10].any() and not painted[:, 16:].any()  # nothing outside its box
    before = picture.copy()
    draw_masks.draw(picture, outputs(), 1)  # no mask
    draw_masks.draw(picture, {"count": np.array([1])}, 0)  # a pipeline without masks
    np.testing.assert_array_equal(picture, before)


def test_a_mask_past_the_picture_is_cut():
    picture = np.zeros((7, 11, 3), np.uint8)
    draw_masks.draw(picture, outputs(), 0)
    assert picture[5:7, 10:11].any(axis=-1).all()


def test_the_painter_draws_the_masks_then_the_boxes():
    calls: list[int] = []
    picture = np.zeros((20, 30, 3), np.uint8)

    def paint(canvas: np.ndarray, width: int) -> None:
        calls.append(width)
        assert canvas[5:9, 10:13].any()  # the mask is already there

    draw_masks.painter(outputs(), 2, paint)(picture, 3)
    assert calls == [3]


def test_the_json_gives_every_mask_output():
    first = draw_masks.fields(outputs(), 0)
    assert first["mask_box"] == [10, 5, 16, 9] and first["mask_pixels"] == 12
    assert (decode_png(base64.b64decode(first["mask_png"]))[:, :3] == 255).all()
    assert draw_masks.fields(outputs(), 1) == {"mask_box": [0, 0, 0, 0], "mask_png": "", "mask_pixels": 0}
    assert draw_masks.fields({"count": np.array([1])}, 0) == {}
