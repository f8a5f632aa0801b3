"""``yolo_obb``: Ultralytics' oriented-box outputs ``[N, 4 + C + 1, A]`` (``task: obb``: YOLOv8/11/26-obb).

Per anchor: the box's centre x, y, width and height in model-input pixels, C class scores (already
sigmoid), then its rotation in radians (``[-pi/4, 3pi/4)`` as the export decodes it).

Decoded as Ultralytics' ``non_max_suppression(..., rotated=True)`` (``ultralytics/utils/nms.py``)
does it: an anchor is a candidate when its best class score is greater than the score threshold,
its class that best class (:mod:`.anchor_free`); at most ``MAX_NMS`` candidates, the best; each one's centre offset by
``class x MAX_WH`` pixels (none when class-agnostic); then fast NMS (``TorchNMS.fast_nms``):
candidates sorted by score, a candidate dropped when its probabilistic IoU (:func:`probiou`,
``batch_probiou``) with ANY better candidate is greater than the IoU threshold, whether that one
was kept or not (the upper triangle of the IoU matrix, not greedy suppression); the first
``max_detections`` of the rest.

Answers: besides the task's, ``ROTATED_BOXES [K, 5]`` (centre x, y, width, height in the photo's
pixels, and the rotation in radians as the model gave it) and ``CORNERS [K, 4, 2]`` (x, y in the
photo's pixels), as Ultralytics' ``OBBPredictor.construct_result`` gives ``result.obb.xywhr`` and
``.xyxyxyxy``: the centre and size mapped through the letterbox per axis (``scale_boxes(...,
xywh=True)``), never clipped, the corners those of the mapped box. ``regularize_angles: true``
gives the canonical form instead (:func:`regularize`: the rotation in ``[0, pi/2)``, width and
height swapped where it turned by a quarter). ``BOXES``: each oriented box's axis-aligned bounds,
clipped to the photo where ``clip_to_image`` says so: the task maps the bounds in model-input pixels
to the photo; Ultralytics' ``result.obb.xyxy`` are the bounds of the mapped box's corners
(:meth:`YoloObbHead.boxes_to_photo`): the same where the letterbox's two gains are equal, and within
half the box's longer side (model-input pixels) x ``|1 / gain_x - 1 / gain_y|`` where the rounding of
its resize makes them differ (the gains by at most 0.5 / the resized photo's shorter side, relatively:
0.67 pixel at most on the parity test's photos).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

from .anchor_free import AnchorFreeHead, Candidates
from .base import (
    MAX_NMS,
    MAX_WH,
    ExtraAnswer,
    FloatArray,
    IntArray,
    NmsSettings,
    TensorDetections,
    boolean,
)

EPS = np.float32(1e-7)  # batch_probiou's
# Pairs of the IoU matrix computed at once (rows of it per block): bounds fast NMS's memory where Ultralytics holds all of it.
PAIRS_PER_BLOCK = 1 << 20


def covariance(rboxes: FloatArray) -> tuple[FloatArray, FloatArray, FloatArray]:
    """``[M, 5]`` (x, y, w, h, angle) -> each box's Gaussian covariance ``[[a, c], [c, b]]`` as ``(a, b, c)``, each ``[M]``:
    Ultralytics' ``_get_covariance_matrix`` in float32."""
    boxes = np.asarray(rboxes, dtype=np.float32)
    a, b = boxes[:, 2] * boxes[:, 2] / np.float32(12), boxes[:, 3] * boxes[:, 3] / np.float32(12)
    cos, sin = np.cos(boxes[:, 4]), np.sin(boxes[:, 4])
    cos2, sin2 = cos * cos, sin * sin
    return a * cos2 + b * sin2, a * sin2 + b * cos2, (a - b) * cos * sin


def probiou(first: FloatArray, second: FloatArray) -> FloatArray:
    """Probabilistic IoU ``[P, Q]`` of oriented boxes ``[P, 5]`` and ``[Q, 5]`` (x, y, w, h, angle in radians):
    1 - the Hellinger distance of their Gaussians, as Ultralytics' ``batch_probiou`` computes it in float32."""
    one, two = np.asarray(first, dtype=np.float32), np.asarray(second, dtype=np.float32)
    a1, b1, c1 = (value[:, None] for value in covariance(one))
    a2, b2, c2 = (value[None, :] for value in covariance(two))
    x1, y1 = one[:, 0:1], one[:, 1:2]
    x2, y2 = two[None, :, 0], two[None, :, 1]
    a, b, c = a1 + a2, b1 + b2, c1 + c2
    dx, dy = x1 - x2, y1 - y2
    determinant: FloatArray = a * b - c * c
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        t1 = ((a * (dy * dy) + b * (dx * dx)) / (determinant + EPS)) * np.float32(0.25)
        t2 = ((c * (x2 - x1) * dy) / (determinant + EPS)) * np.float32(0.5)
        own = np.clip(a1 * b1 - c1 * c1, 0, None) * np.clip(a2 * b2 - c2 * c2, 0, None)
        t3 = np.log(determinant / (np.float32(4) * np.sqrt(own) + EPS) + EPS) * np.float32(0.5)
        distance = np.clip(t1 + t2 + t3, EPS, np.float32(100))
        hellinger = np.sqrt(np.float32(1) - np.exp(-distance) + EPS)
    return (np.float32(1) - hellinger).astype(np.float32)


def fast_nms(rboxes: FloatArray, scores: FloatArray, iou_threshold: float) -> IntArray:
    """Ultralytics' ``TorchNMS.fast_nms`` with ``batch_probiou``: the indices kept of ``rboxes [M, 5]``, best first. Sorted
    by score (stable: ties keep their order), a box is dropped when its IoU with any box before it is greater than the
    threshold. The IoU matrix is computed a block of rows at a time."""
    order = np.argsort(-np.asarray(scores, dtype=np.float32), kind="stable")
    boxes = np.asarray(rboxes, dtype=np.float32)[order]
    count = len(boxes)
    dropped = np.zeros(count, bool)
    threshold = np.float32(iou_threshold)
    block = max(1, PAIRS_PER_BLOCK // max(count, 1))
    for start in range(0, count - 1, block):
        stop = min(start + block, count - 1)
        iou = probiou(boxes[start:stop], boxes[start + 1 :])  # rows i in [start, stop), columns j in (start, count)
        later = np.arange(start + 1, count)[None, :] > np.arange(start, stop)[:, None]
        dropped[start + 1 :] |= ((iou > threshold) & later).any(axis=0)
    return order[~dropped].astype(np.int32)


def rotated_nms(
    rboxes: FloatArray, scores: FloatArray, class_ids: IntArray, iou_threshold: float, max_detections: int, class_agnostic: bool = False
) -> IntArray:
    """One image's candidates (in anchor order) -> the indices kept, best first, as Ultralytics' ``non_max_suppression``
    with ``rotated=True`` keeps them: the ``MAX_NMS`` best, centres offset per class, :func:`fast_nms`, the first
    ``max_detections``."""
    chosen = np.arange(len(scores))
    if len(chosen) > MAX_NMS:
        chosen = np.argsort(-scores, kind="stable")[:MAX_NMS]
    boxes = np.array(rboxes[chosen], dtype=np.float32)
    if not class_agnostic:
        boxes[:, :2] += (class_ids[chosen].astype(np.float32) * np.float32(MAX_WH))[:, None]
    return chosen[fast_nms(boxes, scores[chosen], iou_threshold)][:max_detections].astype(np.int32)


def regularize(rboxes: np.ndarray) -> np.ndarray:
    """Ultralytics' ``regularize_rboxes``: ``[..., 5]`` (x, y, w, h, angle) with the angle in ``[0, pi/2)`` and, where
    ``angle mod pi`` was ``pi/2`` or more, width and height swapped: the same rectangle."""
    boxes = np.array(rboxes, dtype=np.float32)
    angle = boxes[..., 4]
    swap = np.mod(angle, np.float32(np.pi)) >= np.float32(np.pi / 2)
    width, height = boxes[..., 2].copy(), boxes[..., 3].copy()
    boxes[..., 2] = np.where(swap, height, width)
    boxes[..., 3] = np.where(swap, width, height)
    boxes[..., 4] = np.mod(angle, np.float32(np.pi / 2))
    return boxes


def corners(rboxes: np.ndarray) -> np.ndarray:
    """``[..., 5]`` (x, y, w, h, angle) -> ``[..., 4, 2]`` corners in Ultralytics' ``xywhr2xyxyxyxy`` order (the
    corner at +w/2, +h/2 in the box's frame first)."""
    boxes = np.asarray(rboxes)
    centre, width, height, angle = boxes[..., :2], boxes[..., 2:3], boxes[..., 3:4], boxes[..., 4:5]
    cos, sin = np.cos(angle), np.sin(angle)
    along = np.concatenate([width / 2 * cos, width / 2 * sin], axis=-1)
    across = np.concatenate([-height / 2 * sin, height / 2 * cos], axis=-1)
    return np.stack([centre + along + across, centre + along - across, centre - along - across, centre - along + across], axis=-2)


def bounds(points: np.ndarray) -> np.ndarray:
    """``[..., 4, 2]`` corners -> ``[..., 4]`` axis-aligned (x_min, y_min, x_max, y_max): Ultralytics' ``OBB.xyxy``."""
    return np.concatenate([points.min(axis=-2), points.max(axis=-2)], axis=-1)


def oriented_detections(rboxes: FloatArray, scores: FloatArray, class_ids: IntArray, counts: IntArray) -> TensorDetections:
    """The kept oriented boxes ``xywhr [N, K, 5]`` (zeros past each count), their scores and classes -> detections: each
    box's axis-aligned bounds in model-input pixels, and its ``xywhr`` (extras)."""
    boxes = bounds(corners(rboxes)).astype(np.float32)
    boxes[np.arange(rboxes.shape[1])[None, :] >= counts[:, None]] = 0
    return TensorDetections(boxes, scores.astype(np.float32), class_ids.astype(np.int32), counts, extras={"xywhr": rboxes})


class YoloObbHead(AnchorFreeHead):
    name = "yolo_obb"
    parameters: ClassVar[dict[str, tuple[Callable[[str], Any], bool]]] = {"regularize_angles": (boolean, False)}
    extra_answers = (
        ExtraAnswer("rotated_boxes", "FP32", (-1, 5), name="ROTATED_BOXES", drawing="rotated"),
        ExtraAnswer("corners", "FP32", (-1, 4, 2), name="CORNERS", drawing="rotated"),
    )
    # The precision gate: a lower precision's rotated box of each matched detection against FP32's, by probabilistic IoU.
    gate_defaults: ClassVar[dict[str, float]] = {"min_matched_rotated_iou": 0.90}
    extra_layout = " + 1"

    def extra_rows(self, dims: Mapping[str, Sequence[int]]) -> int:
        return 1  # the angle

    def suppress(self, candidates: Candidates, settings: NmsSettings) -> TensorDetections:
        """Per image, :func:`rotated_nms` of its candidates' ``xywhr``: the kept boxes' axis-aligned bounds in
        model-input pixels, and each one's ``xywhr`` (extras)."""
        count, images, scores, class_ids = candidates.count, candidates.images, candidates.scores, candidates.class_ids
        rboxes = np.concatenate([candidates.boxes, candidates.rows], axis=1)  # [M, 5]
        starts = np.searchsorted(images, np.arange(count + 1))
        kept = [
            starts[i]
            + rotated_nms(
                rboxes[starts[i] : starts[i + 1]],
                scores[starts[i] : starts[i + 1]],
                class_ids[starts[i] : starts[i + 1]],
                float(settings.iou_thresholds[i]),
                settings.max_detections,
                settings.class_agnostic,
            )
            for i in range(count)
        ]
        counts = np.array([len(chosen) for chosen in kept], np.int32)
        width = int(counts.max()) if count else 0
        out_rboxes = np.zeros((count, width, 5), np.float32)
        out_scores = np.zeros((count, width), np.float32)
        out_classes = np.zeros((count, width), np.int32)
        for i, chosen in enumerate(kept):
            out_rboxes[i, : len(chosen)] = rboxes[chosen]
            out_scores[i, : len(chosen)] = scores[chosen]
            out_classes[i, : len(chosen)] = class_ids[chosen]
        return oriented_detections(out_rboxes, out_scores, out_classes, counts)

    @staticmethod
    def rotated_to_photo(found: TensorDetections, transforms: np.ndarray) -> np.ndarray:
        """The kept boxes' ``xywhr [N, K, 5]`` in the photo's pixels (float64), as ``scale_boxes(..., xywh=True)`` maps
        them: centre ``(x - offset) / scale`` and size ``w / scale`` per axis, the angle kept; never clipped."""
        rboxes = found.extras["xywhr"].astype(np.float64)
        t = np.asarray(transforms, dtype=np.float64).reshape(-1, 1, 4)
        rboxes[..., 0] = (rboxes[..., 0] - t[..., 2]) / t[..., 0]
        rboxes[..., 1] = (rboxes[..., 1] - t[..., 3]) / t[..., 1]
        rboxes[..., 2] /= t[..., 0]
        rboxes[..., 3] /= t[..., 1]
        rboxes[np.arange(rboxes.shape[1])[None, :] >= found.counts[:, None]] = 0
        return rboxes

    def boxes_to_photo(self, found: TensorDetections, transforms: np.ndarray) -> np.ndarray:
        """``[N, K, 4]``: the bounds of the corners of the boxes mapped to the photo (:meth:`rotated_to_photo`), which is
        Ultralytics' ``result.obb.xyxy``. The task's own map of the bounds in model-input pixels gives the same where the
        letterbox's two gains are equal; they differ by the rounding of its resize, which moves a bound by up to half the
        box's longer side x ``|1 / gain_x - 1 / gain_y|``."""
        boxes = bounds(corners(self.rotated_to_photo(found, transforms)))
        boxes[np.arange(boxes.shape[1])[None, :] >= found.counts[:, None]] = 0
        return boxes

    def gate_similarities(
        self, reference: Mapping[str, np.ndarray], candidate: Mapping[str, np.ndarray], i: int, j: int
    ) -> dict[str, float]:
        """The probabilistic IoU of the two rotated boxes (Ultralytics' rotated-box overlap)."""
        first = np.asarray(reference["rotated_boxes"], np.float32)[i : i + 1]
        second = np.asarray(candidate["rotated_boxes"], np.float32)[j : j + 1]
        return {"matched_rotated_iou": float(probiou(first, second)[0, 0])}

    def extras_to_photo(
        self, found: TensorDetections, raw: Mapping[str, np.ndarray], transforms: np.ndarray, sizes: np.ndarray, boxes: np.ndarray
    ) -> dict[str, np.ndarray]:
        """ROTATED_BOXES (:meth:`rotated_to_photo`; regularized where ``regularize_angles`` says) and CORNERS, those of the
        mapped box (``xywhr2xyxyxyxy``). Never clipped: Ultralytics clips neither."""
        rboxes = self.rotated_to_photo(found, transforms)
        points = corners(rboxes)
        points[np.arange(rboxes.shape[1])[None, :] >= found.counts[:, None]] = 0
        answered = regularize(rboxes) if self.values.get("regularize_angles") else rboxes
        return {"rotated_boxes": answered.astype(np.float32), "corners": points.astype(np.float32)}

    # Tiled: SAHI merges oriented boxes by NMS only (a union of two rotated boxes is none), on their bounds, which follow
    # the corners past a tile's edge (Ultralytics clips neither) and are clipped to the photo once merged.
    clips_to_tile = False
    tile_merges = ("nms",)

    def shift_extras(self, extras: Mapping[str, np.ndarray], offsets: np.ndarray) -> dict[str, np.ndarray]:
        """Each rotated box's centre and corners moved by its tile's origin."""
        origins = np.asarray(offsets, np.float32).reshape(-1, 2)
        rotated = np.array(extras["rotated_boxes"], np.float32).reshape(-1, 5)
        rotated[:, :2] += origins
        points = np.asarray(extras["corners"], np.float32).reshape(-1, 4, 2) + origins[:, None, :]
        return {**extras, "rotated_boxes": rotated, "corners": points.astype(np.float32)}


HEAD = YoloObbHead
