"""``mediapipe_ssd``: MediaPipe's SSD detectors (BlazeFace face detection): anchors, box decoding, weighted NMS.

A vectorized re-implementation of what MediaPipe's face-detection graph does after its model
(``face_detection_short_range.tflite`` in the ``mediapipe`` 0.10.14 wheel: outputs
``regressors [896, 16]`` and ``classificators [896, 1]``), with MediaPipe's calculator options as
config parameters (their field names):

1. :func:`ssd_anchors` -- ``SsdAnchorsCalculator``;
2. :func:`decode` -- ``TensorsToDetectionsCalculator`` (box/keypoint decoding, score clipping
   and sigmoid);
3. :func:`weighted_nms` -- ``NonMaxSuppressionCalculator`` with ``algorithm: WEIGHTED``,
   ``overlap_type: INTERSECTION_OVER_UNION``.

The boxes and keypoints come out normalized to the model input and are scaled to its pixels
(``input_size_width/height``); the detection task maps them to the photo through the preprocess
model's letterbox transform, which is ``DetectionProjectionCalculator`` with the ``MATRIX`` of
``ImageToTensorCalculator``. Sources (github.com/google-ai-edge/mediapipe), cited where used:

* constants: ``mediapipe/modules/face_detection/face_detection_short_range_common.pbtxt``
  (SsdAnchors, TensorsToDetections, NonMaxSuppression options);
* anchors: ``mediapipe/calculators/tflite/ssd_anchors_calculator.cc`` and its ``.proto``;
* decoding: ``mediapipe/calculators/tensor/tensors_to_detections_calculator.cc``
  (``DecodeBoxes``, ``ProcessCPU``, ``ConvertToDetections``);
* NMS: ``mediapipe/calculators/util/non_max_suppression_calculator.cc``
  (``WeightedNonMaxSuppression``, ``OverlapSimilarity``) and its ``.proto``.

Everything is vectorized over the batch and the anchors; the only Python loops are over
anchor *layers* and over weighted-NMS *iterations* (each one keeps one detection per image,
for every image at once; bounded by ``max_detections`` and by the number of candidates).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from ...model_config import ModelConfig
from ..base import Role
from .base import FloatArray, Head, IntArray, NmsSettings, TensorDetections, boolean, numbers, tensor_dims

BoolArray = npt.NDArray[np.bool_]

INPUT_SIZE = 128  # face_detection_short_range_cpu.pbtxt: ImageToTensorCalculator output_tensor_width/height.
IOU_THRESHOLD = 0.3  # face_detection_short_range_common.pbtxt: NonMaxSuppressionCalculator min_suppression_threshold.
SCORE_THRESHOLD = 0.5  # face_detection_short_range_common.pbtxt: TensorsToDetectionsCalculator min_score_thresh.


# --------------------------------------------------------------------------- anchors


@dataclass(frozen=True)
class AnchorOptions:
    """``SsdAnchorsCalculatorOptions``; defaults are the short-range face detector's.

    Values: ``face_detection_short_range_common.pbtxt`` (num_layers 4, min_scale
    0.1484375, max_scale 0.75, input 128x128, anchor_offset 0.5, strides
    [8, 16, 16, 16], aspect_ratios [1.0], fixed_anchor_size true); the two
    fields it leaves unset take the defaults of ``ssd_anchors_calculator.proto``
    (reduce_boxes_in_lowest_layer false, interpolated_scale_aspect_ratio 1.0).
    ``multiscale_anchor_generation`` is not supported.
    """

    num_layers: int = 4
    min_scale: float = 0.1484375
    max_scale: float = 0.75
    input_size_height: int = INPUT_SIZE
    input_size_width: int = INPUT_SIZE
    anchor_offset_x: float = 0.5
    anchor_offset_y: float = 0.5
    strides: tuple[int, ...] = (8, 16, 16, 16)
    aspect_ratios: tuple[float, ...] = (1.0,)
    reduce_boxes_in_lowest_layer: bool = False
    interpolated_scale_aspect_ratio: float = 1.0
    fixed_anchor_size: bool = True
    # Explicit feature-map sizes (take precedence over strides when given).
    feature_map_height: tuple[int, ...] = ()
    feature_map_width: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.feature_map_height:
            if len(self.feature_map_height) != self.num_layers or len(self.feature_map_width) != self.num_layers:
                raise ValueError("feature_map_height/width must have num_layers entries")
        elif len(self.strides) != self.num_layers:
            raise ValueError(f"strides has {len(self.strides)} entries, num_layers is {self.num_layers}")


def _calculate_scale(min_scale: float, max_scale: float, stride_index: int, num_strides: int) -> float:
    """``CalculateScale`` in ssd_anchors_calculator.cc."""
    if num_strides == 1:
        return float(np.float32((min_scale + max_scale) * 0.5))
    return float(np.float32(min_scale + (max_scale - min_scale) * 1.0 * stride_index / (num_strides - 1.0)))


# One function, as SsdAnchorsCalculator::GenerateAnchors is: its quirks are kept in its order, to be read beside it.
def ssd_anchors(options: AnchorOptions | None = None) -> FloatArray:
    """Anchors ``[A, 4]`` as ``(x_center, y_center, w, h)``, normalized to [0, 1].

    ``SsdAnchorsCalculator::GenerateAnchors`` (ssd_anchors_calculator.cc), quirks
    included: consecutive layers with the same stride are merged into one grid
    whose per-cell anchors are the layers' anchors in order; every layer adds
    one extra anchor of aspect ``interpolated_scale_aspect_ratio`` and scale
    ``sqrt(scale * next_scale)`` (next scale 1.0 for the last layer) unless that
    ratio is 0; ``reduce_boxes_in_lowest_layer`` replaces layer 0's anchors by
    the fixed (1.0, scale 0.1), (2.0, scale), (0.5, scale) triple; and with
    ``fixed_anchor_size`` every w and h is 1.0 (the model regresses pixels).
    Grid centers are ``(x + anchor_offset_x) / feature_map_width`` in float32.
    For the defaults: 16x16x2 + 8x8x6 = 896 anchors.
    """
    opts = options or AnchorOptions()
    num_strides = len(opts.strides)
    grids: list[FloatArray] = []
    layer_id = 0
    while layer_id < opts.num_layers:
        aspect_ratios: list[float] = []
        scales: list[float] = []
        last = layer_id
        while last < num_strides and opts.strides[last] == opts.strides[layer_id]:
            scale = _calculate_scale(opts.min_scale, opts.max_scale, last, num_strides)
            if last == 0 and opts.reduce_boxes_in_lowest_layer:
                aspect_ratios += [1.0, 2.0, 0.5]
                scales += [0.1, scale, scale]
            else:
                for ratio in opts.aspect_ratios:
                    aspect_ratios.append(ratio)
                    scales.append(scale)
                if opts.interpolated_scale_aspect_ratio > 0.0:
                    scale_next = 1.0 if last == num_strides - 1 else _calculate_scale(opts.min_scale, opts.max_scale, last + 1, num_strides)
                    scales.append(float(np.sqrt(np.float32(scale) * np.float32(scale_next))))  # float math, as in C++
                    aspect_ratios.append(opts.interpolated_scale_aspect_ratio)
            last += 1
        if last == layer_id:  # no stride matched (num_layers > len(strides) with feature maps)
            last = layer_id + 1
        ratio_sqrt = np.sqrt(np.asarray(aspect_ratios, dtype=np.float32))
        scale_arr = np.asarray(scales, dtype=np.float32)
        anchor_h = scale_arr / ratio_sqrt
        anchor_w = scale_arr * ratio_sqrt

        if opts.feature_map_height:
            fm_h, fm_w = opts.feature_map_height[layer_id], opts.feature_map_width[layer_id]
        else:
            stride = opts.strides[layer_id]
            fm_h = math.ceil(opts.input_size_height / stride)
            fm_w = math.ceil(opts.input_size_width / stride)

        per_cell = len(aspect_ratios)
        ys, xs = np.meshgrid(np.arange(fm_h, dtype=np.float32), np.arange(fm_w, dtype=np.float32), indexing="ij")
        x_center = (xs + np.float32(opts.anchor_offset_x)) / np.float32(fm_w)
        y_center = (ys + np.float32(opts.anchor_offset_y)) / np.float32(fm_h)
        grid = np.empty((fm_h, fm_w, per_cell, 4), dtype=np.float32)
        grid[..., 0] = x_center[..., None]
        grid[..., 1] = y_center[..., None]
        if opts.fixed_anchor_size:
            grid[..., 2:] = 1.0
        else:
            grid[..., 2] = anchor_w
            grid[..., 3] = anchor_h
        grids.append(grid.reshape(-1, 4))
        layer_id = last
    return np.concatenate(grids, axis=0)


# --------------------------------------------------------------------------- decoding


@dataclass(frozen=True)
class DecodeOptions:
    """``TensorsToDetectionsCalculatorOptions``; defaults are face_detection_short_range_common.pbtxt's.

    num_classes 1, num_boxes 896, num_coords 16, box_coord_offset 0,
    keypoint_coord_offset 4, num_keypoints 6, num_values_per_keypoint 2,
    sigmoid_score true, score_clipping_thresh 100.0, reverse_output_order true
    (box format XYWH: ``GetBoxFormat`` in tensors_to_detections_calculator.cc),
    x/y/w/h_scale 128.0; apply_exponential_on_box_size keeps its proto
    default, false. (``min_score_thresh`` is the detection task's
    ``score_threshold``.)
    """

    num_boxes: int = 896
    num_coords: int = 16
    box_coord_offset: int = 0
    keypoint_coord_offset: int = 4
    num_keypoints: int = 6
    num_values_per_keypoint: int = 2
    sigmoid_score: bool = True
    score_clipping_thresh: float | None = 100.0
    reverse_output_order: bool = True
    x_scale: float = 128.0
    y_scale: float = 128.0
    w_scale: float = 128.0
    h_scale: float = 128.0
    apply_exponential_on_box_size: bool = False
    anchors: AnchorOptions = field(default_factory=AnchorOptions)

    def __post_init__(self) -> None:
        if self.num_values_per_keypoint != 2:
            raise ValueError("only 2-D keypoints are supported (as in MediaPipe)")
        if self.num_keypoints * self.num_values_per_keypoint + 4 != self.num_coords:
            raise ValueError("num_coords must be 4 + num_keypoints * 2")


def _as_batch(raw_boxes: npt.ArrayLike, raw_scores: npt.ArrayLike, options: DecodeOptions) -> tuple[FloatArray, FloatArray]:
    boxes = np.asarray(raw_boxes, dtype=np.float32)
    scores = np.asarray(raw_scores, dtype=np.float32)
    if boxes.ndim == 4 and boxes.shape[1] == 1:  # GPU-style [N, 1, A, C]
        boxes = boxes[:, 0]
    if scores.ndim == 4 and scores.shape[1] == 1:
        scores = scores[:, 0]
    if scores.ndim == 2:
        scores = scores[..., None]
    if boxes.ndim != 3 or boxes.shape[2] != options.num_coords:
        raise ValueError(f"raw_boxes must be [N, A, {options.num_coords}], got {boxes.shape}")
    if scores.ndim != 3 or scores.shape[:2] != boxes.shape[:2]:
        raise ValueError(f"raw_scores must be [N, A, C] matching raw_boxes, got {scores.shape}")
    return boxes, scores


def decode(
    raw_boxes: npt.ArrayLike,
    raw_scores: npt.ArrayLike,
    anchors: npt.ArrayLike | None = None,
    options: DecodeOptions | None = None,
) -> tuple[FloatArray, FloatArray, FloatArray, IntArray]:
    """Model outputs -> ``(boxes [N,A,4], keypoints [N,A,K,2], scores [N,A], class ids [N,A])``,
    normalized to the tensor.

    ``DecodeBoxes`` + the score loop of ``ProcessCPU`` in
    tensors_to_detections_calculator.cc: with box format XYWH,
    ``x_center = raw[0] / x_scale * anchor.w + anchor.x_center`` (y likewise),
    ``w = raw[2] / w_scale * anchor.w`` (or ``exp(...)`` with
    apply_exponential_on_box_size), keypoints ``raw[off + 2k] / x_scale *
    anchor.w + anchor.x_center``; boxes are returned as (x_min, y_min, x_max,
    y_max). Scores: the logit clipped to ``[-score_clipping_thresh,
    score_clipping_thresh]`` then a sigmoid; with several classes the best one
    (and its index). No threshold is applied here (see ``weighted_nms``).
    """
    opts = options or DecodeOptions()
    raw, logits = _as_batch(raw_boxes, raw_scores, opts)
    anc = ssd_anchors(opts.anchors) if anchors is None else np.asarray(anchors, dtype=np.float32)
    if anc.shape != (raw.shape[1], 4):
        raise ValueError(f"anchors must be [{raw.shape[1]}, 4], got {anc.shape}")
    a_xc, a_yc, a_w, a_h = anc[:, 0], anc[:, 1], anc[:, 2], anc[:, 3]

    o = opts.box_coord_offset
    if opts.reverse_output_order:  # XYWH
        x_c, y_c, w, h = raw[..., o], raw[..., o + 1], raw[..., o + 2], raw[..., o + 3]
    else:  # YXHW
        y_c, x_c, h, w = raw[..., o], raw[..., o + 1], raw[..., o + 2], raw[..., o + 3]
    x_c = x_c / np.float32(opts.x_scale) * a_w + a_xc
    y_c = y_c / np.float32(opts.y_scale) * a_h + a_yc
    if opts.apply_exponential_on_box_size:
        h = np.exp(h / np.float32(opts.h_scale)) * a_h
        w = np.exp(w / np.float32(opts.w_scale)) * a_w
    else:
        h = h / np.float32(opts.h_scale) * a_h
        w = w / np.float32(opts.w_scale) * a_w
    half_w, half_h = w / np.float32(2), h / np.float32(2)
    boxes = np.stack([x_c - half_w, y_c - half_h, x_c + half_w, y_c + half_h], axis=-1).astype(np.float32)

    k0 = opts.keypoint_coord_offset
    # [N, A, K, 2]: (x, y) with reverse_output_order (XYWH), (y, x) without (YXHW)
    kp_raw = raw[..., k0 : k0 + 2 * opts.num_keypoints].reshape((*raw.shape[:2], opts.num_keypoints, 2))
    if not opts.reverse_output_order:
        kp_raw = kp_raw[..., ::-1]
    keypoints = np.empty(kp_raw.shape, dtype=np.float32)
    keypoints[..., 0] = kp_raw[..., 0] / np.float32(opts.x_scale) * a_w[:, None] + a_xc[:, None]
    keypoints[..., 1] = kp_raw[..., 1] / np.float32(opts.y_scale) * a_h[:, None] + a_yc[:, None]

    scores = logits
    if opts.sigmoid_score:
        if opts.score_clipping_thresh is not None:
            c = np.float32(opts.score_clipping_thresh)
            scores = np.clip(scores, -c, c)
        with np.errstate(over="ignore"):  # exp(100) overflows float32 to inf -> score 0, as in C++
            scores = (np.float32(1) / (np.float32(1) + np.exp(-scores))).astype(np.float32)
    return boxes, keypoints, scores.max(axis=-1).astype(np.float32), scores.argmax(axis=-1).astype(np.int32)


# --------------------------------------------------------------------------- weighted NMS


def _iou_one_to_many(top: FloatArray, boxes: FloatArray) -> FloatArray:
    """IoU of ``top [N,4]`` against ``boxes [N,M,4]`` -> ``[N,M]``.

    ``OverlapSimilarity`` with INTERSECTION_OVER_UNION (non_max_suppression_calculator.cc):
    0 without intersection, ``inter / (area1 + area2 - inter)``, 0 when that
    normalization is not positive (degenerate boxes).
    """
    t = top[:, None, :]
    iw = np.minimum(t[..., 2], boxes[..., 2]) - np.maximum(t[..., 0], boxes[..., 0])
    ih = np.minimum(t[..., 3], boxes[..., 3]) - np.maximum(t[..., 1], boxes[..., 1])
    inter = np.maximum(iw, np.float32(0)) * np.maximum(ih, np.float32(0))
    area_t = (t[..., 2] - t[..., 0]) * (t[..., 3] - t[..., 1])
    area_b = (boxes[..., 2] - boxes[..., 0]) * (boxes[..., 3] - boxes[..., 1])
    union = area_t + area_b - inter
    safe = np.where(union > 0, union, np.float32(1))
    return np.where((union > 0) & (inter > 0), inter / safe, np.float32(0)).astype(np.float32)


# One function, as NonMaxSuppressionCalculator's WeightedNonMaxSuppression is: read beside it, in its order.
def weighted_nms(
    boxes: npt.ArrayLike,
    keypoints: npt.ArrayLike,
    scores: npt.ArrayLike,
    class_ids: npt.ArrayLike | None = None,
    score_threshold: npt.ArrayLike = SCORE_THRESHOLD,
    iou_threshold: npt.ArrayLike = IOU_THRESHOLD,
    max_detections: int | None = None,
) -> TensorDetections:
    """MediaPipe's weighted non-maximum suppression, batched.

    Inputs: ``boxes [N,A,4]`` (x_min, y_min, x_max, y_max), ``keypoints
    [N,A,K,2]``, ``scores [N,A]``, ``class_ids [N,A]`` (default 0),
    ``score_threshold`` and ``iou_threshold`` scalars or ``[N]``. Returns
    ``TensorDetections`` (boxes and keypoints in the units given), best first,
    ``D = counts.max()`` rows; rows past an image's count are 0. A detection's
    class is its cluster's best candidate's.

    Candidates are the anchors kept by TensorsToDetectionsCalculator
    (tensors_to_detections_calculator.cc, ``ConvertToDetection``: dropped if
    ``score < min_score_thresh``; ``ConvertToDetections``: dropped if the width
    or height is negative or NaN). ``WeightedNonMaxSuppression``
    (non_max_suppression_calculator.cc) then, over candidates sorted by
    descending score, repeats: take the best remaining one; its cluster is
    every remaining candidate (itself included) whose IoU with it is strictly
    greater than ``iou_threshold``; emit a detection with the cluster's
    score-weighted mean (x_min, y_min, x_max, y_max) and keypoints and the
    best one's *own* score; remove the cluster. If the cluster is empty (a
    degenerate zero-area best box) MediaPipe emits that box unchanged and stops.

    Here each iteration does that step for every image of the batch at once
    (the IoU row of the current best box and the weighted sums are array ops
    over ``[N, M]``, the weighted sums sequential in score order as in MediaPipe);
    the loop runs at most ``min(max_detections, M)`` times,
    M being the largest candidate count in the batch. MediaPipe's graph sets
    no ``max_num_detections`` (proto default -1, and ``WeightedNonMaxSuppression``
    ignores it anyway); ``max_detections`` is this module's addition (None: no cap).
    Ties in score keep anchor order (MediaPipe's ``std::sort`` is unstable).
    """
    b = np.asarray(boxes, dtype=np.float32)
    kp = np.asarray(keypoints, dtype=np.float32)
    s = np.asarray(scores, dtype=np.float32)
    n, a = s.shape
    if b.shape != (n, a, 4) or kp.shape[:2] != (n, a) or kp.shape[-1] != 2:
        raise ValueError(f"shape mismatch: boxes {b.shape}, keypoints {kp.shape}, scores {s.shape}")
    k = kp.shape[2]
    thr = np.broadcast_to(np.asarray(score_threshold, dtype=np.float32), (n,))
    iou_thr = np.broadcast_to(np.asarray(iou_threshold, dtype=np.float32), (n,))[:, None]
    ids = np.zeros((n, a), np.int32) if class_ids is None else np.asarray(class_ids, dtype=np.int32)
    if max_detections is not None and max_detections < 1:
        raise ValueError("max_detections must be positive or None")

    b, valid = _mediapipe_boxes(b, s, thr)
    m = int(valid.sum(axis=1).max()) if n else 0
    if m == 0:
        return TensorDetections.empty(n, k)
    iterations = min(m, max_detections) if max_detections is not None else m
    values, out_scores, out_ids, counts = _suppress(_best_first(b, kp, s, ids, valid, m), iou_thr, iterations)
    d = int(counts.max())
    return TensorDetections(
        np.ascontiguousarray(values[:, :d, :4]),
        np.ascontiguousarray(out_scores[:, :d]),
        np.ascontiguousarray(out_ids[:, :d]),
        counts,
        np.ascontiguousarray(values[:, :d, 4:].reshape(n, d, k, 2)),
    )


def _mediapipe_boxes(boxes: FloatArray, scores: FloatArray, score_threshold: FloatArray) -> tuple[FloatArray, BoolArray]:
    """The boxes ``[N,A,4]`` as MediaPipe computes with them, and which anchors are candidates ``[N,A]``.

    MediaPipe stores a box as (xmin, ymin, width, height) in float and rebuilds
    xmax = xmin + width (Rectangle_f in OverlapSimilarity, and the weighted sums). A candidate
    scores at least the threshold and has no negative (or NaN: it compares False) width or height.
    """
    width = boxes[..., 2] - boxes[..., 0]
    height = boxes[..., 3] - boxes[..., 1]
    rebuilt = np.stack([boxes[..., 0], boxes[..., 1], boxes[..., 0] + width, boxes[..., 1] + height], axis=-1)
    valid = (scores >= score_threshold[:, None]) & (width >= 0) & (height >= 0)
    return rebuilt, valid


@dataclass(frozen=True)
class _Candidates:
    """Each image's top-M candidates, best first; the rows past an image's count are not valid and score 0."""

    valid: BoolArray  # [N, M]
    scores: FloatArray  # [N, M]
    boxes: FloatArray  # [N, M, 4]
    class_ids: IntArray  # [N, M]
    values: FloatArray  # [N, M, 4 + 2K]: box and flattened keypoints, what the weighted mean averages


def _best_first(boxes: FloatArray, keypoints: FloatArray, scores: FloatArray, class_ids: IntArray, valid: BoolArray, m: int) -> _Candidates:
    """Top-``m`` candidates per image, by descending score (stable: anchor order on ties)."""
    n, k = scores.shape[0], keypoints.shape[2]
    masked = np.where(valid, scores, -np.inf)
    order = np.argsort(-masked, axis=1, kind="stable")[:, :m]
    c_valid = np.take_along_axis(valid, order, axis=1)
    c_boxes = np.take_along_axis(boxes, order[..., None], axis=1)
    c_kps = np.take_along_axis(keypoints, order[..., None, None], axis=1).reshape(n, m, 2 * k)
    return _Candidates(
        valid=c_valid,
        scores=np.where(c_valid, np.take_along_axis(scores, order, axis=1), np.float32(0)),
        boxes=c_boxes,
        class_ids=np.take_along_axis(class_ids, order, axis=1),
        # The weighted mean of boxes and keypoints in one sum: [N, M, 4 + 2K].
        values=np.concatenate([c_boxes, c_kps], axis=-1),
    )


def _suppress(candidates: _Candidates, iou_threshold: FloatArray, iterations: int) -> tuple[FloatArray, FloatArray, IntArray, IntArray]:
    """``WeightedNonMaxSuppression``'s loop, every image at once: per iteration, each image's best
    remaining candidate and its cluster make one detection. Returns the detections' values
    ``[N, iterations, 4 + 2K]``, scores and class ids ``[N, iterations]`` (0 past an image's
    count) and the counts ``[N]``."""
    c = candidates
    n, _, width = c.values.shape
    out_values = np.zeros((n, iterations, width), np.float32)
    out_scores = np.zeros((n, iterations), np.float32)
    out_ids = np.zeros((n, iterations), np.int32)
    counts = np.zeros((n,), np.int32)
    remaining = c.valid.copy()
    active = np.ones((n,), bool)
    rows = np.arange(n)
    for step in range(iterations):
        emit = active & remaining.any(axis=1)
        if not emit.any():
            break
        top = np.argmax(remaining, axis=1)  # first remaining = best score
        top_box = c.boxes[rows, top]
        cluster = remaining & (_iou_one_to_many(top_box, c.boxes) > iou_threshold) & emit[:, None]
        weights = np.where(cluster, c.scores, np.float32(0))
        in_cluster = cluster.any(axis=1)
        # Sequential float32 sums in score order, like MediaPipe's loop (cumsum is a
        # sequential accumulate, so the zero weights of other candidates and of the
        # batch padding leave the sums bit-identical: batch independence).
        total = np.cumsum(weights, axis=1)[:, -1]
        sums = np.cumsum(weights[..., None] * c.values, axis=1)[:, -1]
        weighted = sums / np.where(in_cluster, total, np.float32(1))[:, None]
        value = np.where(in_cluster[:, None], weighted, c.values[rows, top])
        out_values[:, step] = np.where(emit[:, None], value, np.float32(0))
        out_scores[:, step] = np.where(emit, c.scores[rows, top], np.float32(0))
        out_ids[:, step] = np.where(emit, c.class_ids[rows, top], 0)
        counts += emit
        remaining &= ~cluster
        # MediaPipe stops when an iteration removes nothing (empty cluster).
        active &= ~(emit & ~in_cluster)
    return out_values, out_scores, out_ids, counts


# --------------------------------------------------------------------------- the head

# Config parameter -> (parser, required). Anchor and decoding parameters carry the names of
# MediaPipe's SsdAnchorsCalculatorOptions / TensorsToDetectionsCalculatorOptions fields.
_ANCHOR_PARAMETERS: dict[str, tuple[Callable[[str], Any], bool]] = {
    "num_layers": (int, True),
    "min_scale": (float, True),
    "max_scale": (float, True),
    "input_size_height": (int, True),
    "input_size_width": (int, True),
    "anchor_offset_x": (float, True),
    "anchor_offset_y": (float, True),
    "strides": (numbers(int), True),
    "aspect_ratios": (numbers(float), True),
    "reduce_boxes_in_lowest_layer": (boolean, True),
    "interpolated_scale_aspect_ratio": (float, True),
    "fixed_anchor_size": (boolean, True),
    "feature_map_height": (numbers(int), False),
    "feature_map_width": (numbers(int), False),
}
_DECODE_PARAMETERS: dict[str, tuple[Callable[[str], Any], bool]] = {
    "num_boxes": (int, True),
    "num_coords": (int, True),
    "box_coord_offset": (int, True),
    "keypoint_coord_offset": (int, True),
    "num_keypoints": (int, True),
    "num_values_per_keypoint": (int, True),
    "sigmoid_score": (boolean, True),
    "score_clipping_thresh": (float, True),
    "reverse_output_order": (boolean, True),
    "x_scale": (float, True),
    "y_scale": (float, True),
    "w_scale": (float, True),
    "h_scale": (float, True),
    "apply_exponential_on_box_size": (boolean, True),
}
NMS_ALGORITHMS = ("WEIGHTED",)
OVERLAP_TYPES = ("INTERSECTION_OVER_UNION",)


class MediaPipeSsdHead(Head):
    """MediaPipe's SSD decoding and weighted NMS; the raw outputs are the box regressors
    ``[num_boxes, num_coords]`` and the class logits ``[num_boxes, num_classes]``."""

    name = "mediapipe_ssd"
    parameters: ClassVar[dict[str, tuple[Callable[[str], Any], bool]]] = {
        **_ANCHOR_PARAMETERS,
        **_DECODE_PARAMETERS,
        "num_classes": (int, True),
        "nms_algorithm": (str, True),
        "overlap_type": (str, True),
    }

    def __init__(self, values: Mapping[str, Any]) -> None:
        super().__init__(values)
        if values["nms_algorithm"] not in NMS_ALGORITHMS:
            raise ValueError(f"nms_algorithm {values['nms_algorithm']!r} is not one of {NMS_ALGORITHMS}")
        if values["overlap_type"] not in OVERLAP_TYPES:
            raise ValueError(f"overlap_type {values['overlap_type']!r} is not one of {OVERLAP_TYPES}")
        if values["num_classes"] < 1:
            raise ValueError(f"num_classes must be positive, got {values['num_classes']}")
        anchors = AnchorOptions(**{key: values[key] for key in _ANCHOR_PARAMETERS if key in values})
        self.decode_options = DecodeOptions(anchors=anchors, **{key: values[key] for key in _DECODE_PARAMETERS})
        self.anchors = ssd_anchors(anchors)
        if len(self.anchors) != self.decode_options.num_boxes:
            raise ValueError(f"the anchor options give {len(self.anchors)} anchors, num_boxes is {self.decode_options.num_boxes}")
        if self.decode_options.num_coords == values["num_classes"]:
            raise ValueError("num_coords equals num_classes: the two FP32 inputs cannot be told apart")
        self.num_keypoints = self.decode_options.num_keypoints
        self._classes = int(values["num_classes"])

    @property
    def num_classes(self) -> int:
        return self._classes

    def input_roles(self) -> tuple[Role, ...]:
        d = self.decode_options
        return (
            Role("regressors", "FP32", (d.num_boxes, d.num_coords), from_core=True),
            Role("classificators", "FP32", (d.num_boxes, self._classes), from_core=True),
        )

    def bind(self, config: ModelConfig, names: Mapping[str, str | None]) -> None:
        for role in ("regressors", "classificators"):
            tensor_dims(config, names[role])  # resolved by exact dims already

    @property
    def tensor_size(self) -> tuple[int, int]:
        """(height, width) of the model input the anchors are laid on."""
        return self.decode_options.anchors.input_size_height, self.decode_options.anchors.input_size_width

    def detect(self, raw: Mapping[str, np.ndarray], settings: NmsSettings) -> TensorDetections:
        boxes, keypoints, scores, class_ids = decode(raw["regressors"], raw["classificators"], self.anchors, self.decode_options)
        found = weighted_nms(
            boxes, keypoints, scores, class_ids, settings.score_thresholds, settings.iou_thresholds, settings.max_detections
        )
        height, width = self.tensor_size
        pixels = np.array([width, height, width, height], dtype=np.float32)
        assert found.keypoints is not None
        return TensorDetections(
            (found.boxes * pixels).astype(np.float32),
            found.scores,
            found.class_ids,
            found.counts,
            (found.keypoints * pixels[:2]).astype(np.float32),
        )

    def check(self, tensor_height: int, tensor_width: int) -> list[str]:
        if self.tensor_size != (tensor_height, tensor_width):
            height, width = self.tensor_size
            return [
                f"head mediapipe_ssd lays its anchors on a {height}x{width} input, but the preprocess model makes {tensor_height}x{tensor_width}"
            ]
        return []


HEAD = MediaPipeSsdHead
