"""One photo's detections from all its views, merged as SAHI 0.12.8 merges a sliced prediction's (its numpy backend,
``sahi/postprocess/_numpy_backend.py`` and ``combine.py``, ``utils.py``).

Each detection is a box ``(x0, y0, x1, y1)`` in the photo's pixels (float32, as SAHI holds them), a score and a class.
Within each class (every class at once when ``class_agnostic``), in SAHI's order: score descending, ties by the box's
x0, y0, x1, y1 ascending (``np.lexsort``), with the pairwise match (IoU, or IoS: the intersection over the smaller
box) computed once in float32 on the boxes as found:

- ``nms``: each detection not yet suppressed is kept and suppresses every detection (after it or not) whose match with
  it is at least the threshold (SAHI's ``nms_from_matrix``);
- ``greedy_nmm``: each detection not yet taken is a keeper and takes every later detection not yet taken whose match
  with it is at least the threshold (``greedy_nmm_from_matrix``); then each keeper merges what it took, in order, each
  one only while the match of the merged box so far (float64, ``has_match``) with it is still at least the threshold:
  the union of the boxes, the larger score, the class of the larger score (of the one taken when the two are equal);
  one taken but no longer matching is dropped, as SAHI drops it.

What a detection carries besides its box (keypoints, a mask, a rotated box) merges with it: :class:`Merged` says, for
each merged detection, its keeper and every detection merged into it, and the detection task asks its head how to
merge those (:meth:`vision_serving.tasks.detection_heads.base.Head.merged_extras`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Merged:
    """The merged detections, best first (score descending, stable in SAHI's order): ``boxes [G, 4]`` float32,
    ``scores [G]``, ``class_ids [G]``, and for each its ``keepers [G]`` (the detection it started from) and ``members``
    (the indices merged into it, the keeper first)."""

    boxes: np.ndarray
    scores: np.ndarray
    class_ids: np.ndarray
    keepers: np.ndarray
    members: list[list[int]]


def sahi_order(boxes: np.ndarray, scores: np.ndarray) -> np.ndarray:
    """Indices by score descending, ties by x0, y0, x1, y1 ascending (SAHI's ``_score_tiebreak_order``)."""
    return np.lexsort((boxes[:, 3], boxes[:, 2], boxes[:, 1], boxes[:, 0], -scores))


def match_matrix(boxes: np.ndarray, match: str) -> np.ndarray:
    """``[n, n]`` float32 pairwise IoU or IoS (``ios``: intersection over the smaller area; 0 where that is 0), as SAHI's
    ``_compute_metric_matrix_full`` computes it on float32 boxes."""
    boxes = np.asarray(boxes, np.float32)
    areas = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
    width = np.maximum(0, np.minimum(boxes[:, None, 2], boxes[None, :, 2]) - np.maximum(boxes[:, None, 0], boxes[None, :, 0]))
    height = np.maximum(0, np.minimum(boxes[:, None, 3], boxes[None, :, 3]) - np.maximum(boxes[:, None, 1], boxes[None, :, 1]))
    inter = width * height
    denominator = areas[:, None] + areas[None, :] - inter if match == "iou" else np.minimum(areas[:, None], areas[None, :])
    out = np.zeros(inter.shape, np.result_type(inter, denominator))
    np.divide(inter, denominator, out=out, where=denominator > 0)
    return out.astype(np.float32)


def nms(boxes: np.ndarray, scores: np.ndarray, match: str, threshold: float) -> list[int]:
    """The kept indices, best first (``nms_from_matrix``)."""
    matrix = match_matrix(boxes, match)
    suppressed = np.zeros(len(boxes), bool)
    keep = []
    for index in sahi_order(boxes, scores).tolist():
        if suppressed[index]:
            continue
        keep.append(index)
        suppressed |= matrix[index] >= threshold
    return keep


def greedy_nmm(boxes: np.ndarray, scores: np.ndarray, match: str, threshold: float) -> dict[int, list[int]]:
    """Each keeper -> the indices it takes, in order (``greedy_nmm_from_matrix``)."""
    matrix = match_matrix(boxes, match)
    order = sahi_order(boxes, scores)
    taken = np.zeros(len(boxes), bool)
    groups: dict[int, list[int]] = {}
    for position, index in enumerate(order.tolist()):
        if taken[index]:
            continue
        later = order[position + 1 :]
        candidates = later[~taken[later]]
        chosen = candidates[matrix[index, candidates] >= threshold]
        taken[chosen] = True
        groups[index] = chosen.tolist()
    return groups


def _matches(first: np.ndarray, second: np.ndarray, match: str, threshold: float) -> bool:
    """SAHI's ``has_match`` of two boxes, in float64."""
    area_first = (first[2] - first[0]) * (first[3] - first[1])
    area_second = (second[2] - second[0]) * (second[3] - second[1])
    width = max(min(first[2], second[2]) - max(first[0], second[0]), 0.0)
    height = max(min(first[3], second[3]) - max(first[1], second[1]), 0.0)
    inter = width * height
    denominator = area_first + area_second - inter if match == "iou" else min(area_first, area_second)
    with np.errstate(invalid="ignore", divide="ignore"):
        return bool(np.float64(inter) / np.float64(denominator) >= threshold)


def _by_class(class_ids: np.ndarray, class_agnostic: bool) -> list[np.ndarray]:
    """The index sets merged on their own: every class's, ascending (``np.unique``), or all of them."""
    if class_agnostic:
        return [np.arange(len(class_ids))]
    return [np.flatnonzero(class_ids == class_id) for class_id in np.unique(class_ids)]


def merge(
    boxes: np.ndarray, scores: np.ndarray, class_ids: np.ndarray, method: str, match: str, threshold: float, class_agnostic: bool
) -> Merged:
    """One photo's detections (``boxes [n, 4]``, ``scores [n]``, ``class_ids [n]``) merged (the module docstring)."""
    boxes = np.asarray(boxes, np.float32).reshape(-1, 4)
    scores = np.asarray(scores, np.float32).reshape(-1)
    class_ids = np.asarray(class_ids).reshape(-1)
    groups: list[tuple[int, list[int]]] = []
    for indices in _by_class(class_ids, class_agnostic):
        if method == "nms":
            groups += [(int(indices[keep]), []) for keep in nms(boxes[indices], scores[indices], match, threshold)]
        else:
            taken = greedy_nmm(boxes[indices], scores[indices], match, threshold)
            groups += [(int(indices[keep]), [int(indices[i]) for i in chosen]) for keep, chosen in taken.items()]
    out_boxes, out_scores, out_classes, members = [], [], [], []
    for keeper, chosen in groups:
        box, score, class_id, merged = boxes[keeper].astype(np.float64), float(scores[keeper]), int(class_ids[keeper]), [keeper]
        for other in chosen:
            if _matches(box, boxes[other].astype(np.float64), match, threshold):
                box = np.concatenate([np.minimum(box[:2], boxes[other, :2]), np.maximum(box[2:], boxes[other, 2:])])
                class_id = class_id if score > float(scores[other]) else int(class_ids[other])
                score = max(score, float(scores[other]))
                merged.append(other)
        out_boxes.append(box)
        out_scores.append(score)
        out_classes.append(class_id)
        members.append(merged)
    ranked = np.argsort(-np.asarray(out_scores, np.float64), kind="stable")
    return Merged(
        np.asarray(out_boxes, np.float32).reshape(-1, 4)[ranked],
        np.asarray(out_scores, np.float32)[ranked],
        np.asarray(out_classes, np.int32)[ranked],
        np.asarray([groups[i][0] for i in ranked.tolist()], np.int64),
        [members[i] for i in ranked.tolist()],
    )
