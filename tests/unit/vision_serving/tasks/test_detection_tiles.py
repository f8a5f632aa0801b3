"""vision_serving.tasks.detection_tiles: each photo's answer from its views' answers (the served pipeline against SAHI:
tests/integration/test_tiling.py)."""

from __future__ import annotations

import numpy as np

from vision_serving import tiling
from vision_serving.tasks import detection_tiles
from vision_serving.tasks.detection_heads.yolo import YoloHead
from vision_serving.tasks.detection_heads.yolo_obb import YoloObbHead


def answers(rows: list[list[tuple[float, float, float, float, float, int]]], extras: bool = False) -> detection_tiles.Answers:
    """Per view, its detections (x0, y0, x1, y1, score, class) in the view's pixels, padded; an oriented box's
    rotated box and corners (its axis-aligned box's) where ``extras``."""
    k = max(len(view) for view in rows)
    boxes, scores, classes = (
        np.zeros((len(rows), k, 4), np.float32),
        np.zeros((len(rows), k), np.float32),
        np.zeros((len(rows), k), np.int32),
    )
    rotated, corners = np.zeros((len(rows), k, 5), np.float32), np.zeros((len(rows), k, 4, 2), np.float32)
    for v, view in enumerate(rows):
        for d, (x0, y0, x1, y1, score, kind) in enumerate(view):
            boxes[v, d], scores[v, d], classes[v, d] = (x0, y0, x1, y1), score, kind
            rotated[v, d] = ((x0 + x1) / 2, (y0 + y1) / 2, x1 - x0, y1 - y0, 0)
            corners[v, d] = ((x1, y0), (x1, y1), (x0, y1), (x0, y0))
    counts = np.array([len(view) for view in rows], np.int32)
    return detection_tiles.Answers(boxes, scores, classes, counts, None, {"rotated_boxes": rotated, "corners": corners} if extras else {})


def batch(views: list[list[tuple[int, int, int, int]]], sizes: list[tuple[int, int]], settings: list[tiling.Tiling]) -> dict:
    tilings = np.empty(len(settings), dtype=object)
    tilings[:] = settings
    return {
        "tile_counts": np.array([len(photo) for photo in views]),
        "tile_boxes": np.array([box for photo in views for box in photo], np.int32),
        "image_size": np.array(sizes, np.int32),
        "tilings": tilings,
    }


def test_views_move_into_the_photo_and_merge_and_an_untiled_photo_is_its_one_view():
    # Photo 0 (300 x 200, tiled): tiles at x 0 and x 100 and the full view; one object seen by both tiles, one by the
    # second alone, near the photo's right edge. Photo 1 (untiled): its one view's detections as they are.
    views = [[(0, 0, 200, 200), (100, 0, 300, 200), (0, 0, 300, 200)], [(0, 0, 50, 40)]]
    found = answers(
        [
            [(120, 10, 160, 50, 0.9, 1)],
            [(20, 10, 60, 50, 0.8, 1), (150, 100, 205, 140, 0.7, 2)],
            [],
            [(1, 2, 30, 20, 0.6, 0), (5, 5, 9, 9, 0.5, 0)],
        ]
    )
    settings = [tiling.Tiling(), tiling.Tiling(enabled=False)]
    out = detection_tiles.merge_photos(found, batch(views, [(200, 300), (40, 50)], settings), YoloHead({}), 300, clip=True)
    assert out.counts.tolist() == [2, 2] and out.boxes.shape == (2, 2, 4)
    # Greedy NMM by IoS: the same object from both tiles merges (the union, the best score); the other is clipped to
    # the photo's width (250 + 55 > 300).
    np.testing.assert_allclose(out.boxes[0], [[120, 10, 160, 50], [250, 100, 300, 140]])
    np.testing.assert_allclose(out.scores[0], [0.9, 0.7])
    assert out.class_ids[0].tolist() == [1, 2]
    np.testing.assert_allclose(out.boxes[1], [[1, 2, 30, 20], [5, 5, 9, 9]])
    # At most max_detections a photo, the best first.
    capped = detection_tiles.merge_photos(found, batch(views, [(200, 300), (40, 50)], settings), YoloHead({}), 1, clip=True)
    assert capped.counts.tolist() == [1, 1] and capped.scores[:, 0].tolist() == [np.float32(0.9), np.float32(0.6)]


def test_oriented_boxes_move_with_their_tiles_merge_by_nms_and_keep_their_corners_whole():
    views = [[(0, 0, 100, 100), (80, 0, 180, 100), (0, 0, 180, 100)]]
    found = answers([[(85, 10, 99, 30, 0.9, 0)], [(5, 10, 19, 30, 0.6, 0), (60, 60, 110, 90, 0.8, 1)], []], extras=True)
    settings = [tiling.Tiling(merge="nms")]
    out = detection_tiles.merge_photos(found, batch(views, [(100, 180)], settings), YoloObbHead({}), 300, clip=True)
    assert out.counts.tolist() == [2]
    np.testing.assert_allclose(out.boxes[0], [[85, 10, 99, 30], [140, 60, 180, 90]])  # NMS keeps the best as it is
    np.testing.assert_allclose(out.extras["rotated_boxes"][0, :, :2], [[92, 20], [165, 75]])  # centres in the photo
    assert out.extras["corners"][0, 1, :, 0].max() == 190  # a rotated box is kept whole past the photo's edge


def test_boxes_merge_as_clipped_to_the_photo_as_sahi_merges_them():
    """An oriented box's bounds follow its corners past the photo's edge; SAHI merges the shifted predictions' boxes,
    which are clipped to the photo. Two bars at the photo's left edge: clipped, the smaller's intersection over it is
    above 0.5 and NMS by IoS keeps one; unclipped (reaching x = -40) it would be below and both would stay."""
    views = [[(0, 0, 100, 150), (0, 0, 100, 150)]]
    found = answers([[(-40, 75, 51, 134, 0.51, 0)], [(-10, 37, 50, 110, 0.43, 0)]], extras=True)
    settings = [tiling.Tiling(merge="nms", match="ios", merge_threshold=0.5)]
    out = detection_tiles.merge_photos(found, batch(views, [(150, 100)], settings), YoloObbHead({}), 300, clip=True)
    assert out.counts.tolist() == [1] and out.scores[0].tolist() == [np.float32(0.51)]
    np.testing.assert_allclose(out.boxes[0], [[0, 75, 51, 134]])
