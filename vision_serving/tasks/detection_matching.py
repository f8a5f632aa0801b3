"""Detections matched to each other or to labels (the detection task's precision gate and dataset metric): box IoU,
one-to-one matches, AP."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

MATCH_IOU = 0.5  # detections are the same object when their boxes overlap this much (gate, dataset metric)


def box_iou(first: npt.ArrayLike, second: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """IoU matrix ``[P, Q]`` of boxes ``[P, 4]`` and ``[Q, 4]`` (x_min, y_min, x_max, y_max)."""
    a = np.asarray(first, dtype=np.float64).reshape(-1, 4)
    b = np.asarray(second, dtype=np.float64).reshape(-1, 4)
    iw = np.minimum(a[:, None, 2], b[None, :, 2]) - np.maximum(a[:, None, 0], b[None, :, 0])
    ih = np.minimum(a[:, None, 3], b[None, :, 3]) - np.maximum(a[:, None, 1], b[None, :, 1])
    inter = np.clip(iw, 0, None) * np.clip(ih, 0, None)
    area_a = (a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1])
    area_b = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    union = area_a[:, None] + area_b[None, :] - inter
    return np.where(union > 0, inter / np.where(union > 0, union, 1.0), 0.0)


def match_boxes(first: npt.ArrayLike, second: npt.ArrayLike, min_iou: float = MATCH_IOU) -> list[tuple[int, int, float]]:
    """One-to-one matches ``(i, j, iou)`` between two sets of boxes, greedily by descending IoU,
    each pair with IoU >= ``min_iou``."""
    iou = box_iou(first, second)
    matches: list[tuple[int, int, float]] = []
    if iou.size == 0:
        return matches
    order = np.argsort(-iou, axis=None, kind="stable")
    used_i: set[int] = set()
    used_j: set[int] = set()
    for flat in order:
        i, j = divmod(int(flat), iou.shape[1])
        if iou[i, j] < min_iou:
            break
        if i in used_i or j in used_j:
            continue
        used_i.add(i)
        used_j.add(j)
        matches.append((i, j, float(iou[i, j])))
    return matches


def match_by_class(
    first: tuple[np.ndarray, np.ndarray], second: tuple[np.ndarray, np.ndarray], min_iou: float = MATCH_IOU
) -> list[tuple[int, int, float]]:
    """``match_boxes`` within each class: ``(boxes, class_ids)`` pairs -> matches (i, j, iou) across them."""
    (boxes_a, classes_a), (boxes_b, classes_b) = first, second
    matches: list[tuple[int, int, float]] = []
    for class_id in np.union1d(classes_a, classes_b):
        index_a, index_b = np.flatnonzero(classes_a == class_id), np.flatnonzero(classes_b == class_id)
        matches += [(int(index_a[i]), int(index_b[j]), iou) for i, j, iou in match_boxes(boxes_a[index_a], boxes_b[index_b], min_iou)]
    return matches


def average_precision(recall: np.ndarray, precision: np.ndarray) -> float:
    """AP from a precision-recall curve, COCO's 101-point interpolation as Ultralytics' ``compute_ap`` computes it
    (a perfect detector scores 0.995 there too: the curve's last point is interpolated to 0)."""
    recall = np.concatenate(([0.0], recall, [1.0]))
    precision = np.concatenate(([1.0], precision, [0.0]))
    envelope = np.flip(np.maximum.accumulate(np.flip(precision)))
    points = np.linspace(0, 1, 101)
    values = np.interp(points, recall, envelope)
    return float(np.sum((points[1:] - points[:-1]) * (values[1:] + values[:-1]) / 2))
