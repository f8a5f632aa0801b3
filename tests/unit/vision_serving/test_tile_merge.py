"""vision_serving.tile_merge: SAHI's NMS and greedy NMM on one photo's detections (the served tiled
pipeline is compared with SAHI itself in tests/integration/test_tiling.py)."""

from __future__ import annotations

import numpy as np
import pytest

from vision_serving import tile_merge


def boxes(*rows: tuple[float, float, float, float]) -> np.ndarray:
    return np.array(rows, np.float32)


def test_the_match_is_iou_or_intersection_over_the_smaller_box():
    pair = boxes((0, 0, 10, 10), (5, 0, 10, 10))
    assert tile_merge.match_matrix(pair, "iou")[0, 1] == pytest.approx(0.5)
    assert tile_merge.match_matrix(pair, "ios")[0, 1] == pytest.approx(1.0)
    assert tile_merge.match_matrix(boxes((0, 0, 0, 5), (0, 0, 0, 5)), "ios")[0, 1] == 0  # no area: no match
    assert tile_merge.match_matrix(pair, "ios").dtype == np.float32


def test_ties_are_broken_by_the_box_as_sahi_breaks_them():
    order = tile_merge.sahi_order(boxes((5, 0, 9, 9), (1, 0, 9, 9), (1, 0, 8, 9), (0, 0, 1, 1)), np.array([0.5, 0.5, 0.5, 0.9], np.float32))
    assert order.tolist() == [3, 2, 1, 0]


def test_nms_keeps_the_best_and_drops_what_matches_it_at_the_threshold_or_more():
    found = boxes((0, 0, 10, 10), (5, 0, 10, 10), (20, 20, 30, 30))
    merged = tile_merge.merge(found, np.array([0.9, 0.8, 0.7]), np.array([0, 0, 0]), "nms", "iou", 0.5, False)
    assert merged.keepers.tolist() == [0, 2] and merged.members == [[0], [2]]  # IoU 0.5 >= 0.5: dropped
    merged = tile_merge.merge(found, np.array([0.9, 0.8, 0.7]), np.array([0, 0, 0]), "nms", "iou", 0.51, False)
    assert merged.keepers.tolist() == [0, 1, 2]
    np.testing.assert_array_equal(merged.boxes, found)  # NMS keeps boxes as they are


def test_greedy_nmm_merges_into_the_best_the_union_and_the_larger_score():
    found = boxes((0, 0, 10, 10), (8, 0, 14, 10), (100, 0, 110, 10))
    merged = tile_merge.merge(found, np.array([0.6, 0.9, 0.5]), np.array([1, 1, 1]), "greedy_nmm", "ios", 0.3, False)
    assert merged.keepers.tolist() == [1, 2] and merged.members == [[1, 0], [2]]
    np.testing.assert_array_equal(merged.boxes, boxes((0, 0, 14, 10), (100, 0, 110, 10)))
    np.testing.assert_allclose(merged.scores, [0.9, 0.5])


def test_classes_merge_apart_unless_class_agnostic_and_then_the_better_score_s_class():
    found = boxes((0, 0, 10, 10), (1, 1, 10, 10))
    scores, classes = np.array([0.9, 0.8]), np.array([2, 0])
    assert tile_merge.merge(found, scores, classes, "greedy_nmm", "ios", 0.5, False).members == [[0], [1]]
    merged = tile_merge.merge(found, scores, classes, "greedy_nmm", "ios", 0.5, True)
    assert merged.members == [[0, 1]] and merged.class_ids.tolist() == [2]
    # Equal scores: SAHI gives the merged detection the class of the one merged in.
    merged = tile_merge.merge(found, np.array([0.8, 0.8]), classes, "greedy_nmm", "ios", 0.5, True)
    assert merged.keepers.tolist() == [0] and merged.class_ids.tolist() == [0]


def test_one_taken_that_no_longer_matches_the_grown_box_is_dropped():
    """IoU: A takes B and C (each matches A); once A has grown by B, C no longer matches it: C is dropped, as SAHI does."""
    found = boxes((0, 0, 10, 10), (0, 0, 10, 16), (0, -6, 10, 10))
    merged = tile_merge.merge(found, np.array([0.9, 0.8, 0.7]), np.zeros(3, int), "greedy_nmm", "iou", 0.6, False)
    assert merged.members == [[0, 1]] and len(merged.scores) == 1
    np.testing.assert_array_equal(merged.boxes, boxes((0, 0, 10, 16)))


def test_an_empty_photo_merges_to_nothing():
    merged = tile_merge.merge(np.zeros((0, 4), np.float32), np.zeros(0), np.zeros(0, int), "greedy_nmm", "ios", 0.5, False)
    assert merged.boxes.shape == (0, 4) and merged.members == [] and merged.keepers.shape == (0,)
