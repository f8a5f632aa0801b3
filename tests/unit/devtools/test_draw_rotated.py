"""The detection client's oriented boxes (devtools/clients/draw_rotated.py): drawn along their corners, given in JSON,
and nothing at all for a pipeline without them."""

from __future__ import annotations

import numpy as np

from devtools.clients import draw_rotated


def outputs() -> dict[str, np.ndarray]:
    """One image's answers with two detections: a 20 x 6 box turned a quarter at (15, 12), and one past the picture."""
    return {
        "count": np.array([2], np.int32),
        "rotated_boxes": np.array([[15, 12, 20, 6, np.pi / 2], [200, 200, 10, 10, 0]], np.float32),
        "corners": np.array([[[12, 22], [18, 22], [18, 2], [12, 2]], [[195, 195], [205, 195], [205, 205], [195, 205]]], np.float32),
    }


def test_an_oriented_box_is_drawn_along_its_corners():
    picture = np.zeros((30, 40, 3), np.uint8)
    draw_rotated.draw(picture, outputs(), 0)
    painted = picture.any(axis=-1)
    assert painted[12, 12] and painted[12, 18] and painted[2, 15] and painted[22, 15]  # its four sides
    # Hollow; nothing outside it but its first corner's dot.
    assert not painted[12, 15] and not painted[:, 21:].any() and not painted[26:].any()
    before = picture.copy()
    draw_rotated.draw(picture, outputs(), 1)  # past the picture: OpenCV clips it away
    draw_rotated.draw(picture, {"count": np.array([1])}, 0)  # a pipeline without oriented boxes
    np.testing.assert_array_equal(picture, before)


def test_the_painter_draws_the_boxes_then_the_oriented_ones():
    calls = []
    picture = np.zeros((30, 40, 3), np.uint8)
    draw_rotated.painter(outputs(), 1, lambda image, width: calls.append(image.any()))(picture, 1)
    assert calls == [False] and picture.any()


def test_json_fields():
    assert draw_rotated.fields(outputs(), 0) == {
        "rotated_box": [15.0, 12.0, 20.0, 6.0, 1.5708],
        "corners": [[12.0, 22.0], [18.0, 22.0], [18.0, 2.0], [12.0, 2.0]],
    }
    assert draw_rotated.fields({"count": np.array([1])}, 0) == {}
