"""MediaPipe face detection (BlazeFace short range) pre- and postprocessing in numpy.

A vectorized re-implementation of what MediaPipe's face-detection graph does
around ``face_detection_short_range.tflite`` (shipped in the ``mediapipe``
0.10.14 wheel; input ``[1,128,128,3]`` float RGB in [-1, 1], outputs
``regressors [1,896,16]`` and ``classificators [1,896,1]``), so the model can be
served by Triton with the graph's arithmetic done here, batched:

1. ``letterbox`` / ``letterbox_batch`` -- ``ImageToTensorCalculator`` with
   ``keep_aspect_ratio: true``, ``border_mode: BORDER_ZERO`` and
   ``output_tensor_float_range {min: -1 max: 1}``.
2. ``ssd_anchors`` -- ``SsdAnchorsCalculator``.
3. ``decode`` -- ``TensorsToDetectionsCalculator`` (box/keypoint decoding,
   score clipping and sigmoid).
4. ``weighted_nms`` -- ``NonMaxSuppressionCalculator`` with
   ``algorithm: WEIGHTED``, ``overlap_type: INTERSECTION_OVER_UNION``.
5. ``LetterboxParams.to_pixels`` -- ``DetectionProjectionCalculator`` with the
   ``MATRIX`` output of ``ImageToTensorCalculator`` (older graphs used the
   equivalent ``DetectionLetterboxRemovalCalculator``), then a scale to pixels.

``postprocess`` chains 2-5. Sources (github.com/google-ai-edge/mediapipe, the
repository formerly google/mediapipe), cited again where each piece is used:

* graph + constants: ``mediapipe/modules/face_detection/face_detection_short_range_cpu.pbtxt``
  (ImageToTensor options, 128x128) and
  ``mediapipe/modules/face_detection/face_detection_short_range_common.pbtxt``
  (SsdAnchors, TensorsToDetections, NonMaxSuppression, DetectionProjection options);
  ``face_detection_short_range.pbtxt`` + ``face_detection.pbtxt`` carry the same
  values for the ``FaceDetection`` subgraph.
* anchors: ``mediapipe/calculators/tflite/ssd_anchors_calculator.cc`` and its
  ``.proto`` (defaults, e.g. ``interpolated_scale_aspect_ratio = 1.0``).
* letterbox: ``mediapipe/calculators/tensor/image_to_tensor_utils.cc``
  (``GetRoi``, ``PadRoi``, ``GetValueRangeTransformation``,
  ``GetRotatedSubRectToRectTransformMatrix``) and
  ``mediapipe/calculators/tensor/image_to_tensor_converter_opencv.cc``
  (``cv::warpPerspective`` with ``cv::INTER_LINEAR``, ``cv::BORDER_CONSTANT``).
* decoding: ``mediapipe/calculators/tensor/tensors_to_detections_calculator.cc``
  (``DecodeBoxes``, ``ProcessCPU``, ``ConvertToDetections``).
* NMS: ``mediapipe/calculators/util/non_max_suppression_calculator.cc``
  (``WeightedNonMaxSuppression``, ``OverlapSimilarity``) and its ``.proto``.
* projection: ``mediapipe/calculators/util/detection_projection_calculator.cc``.

Everything is vectorized over the batch and the anchors; the only Python
loops are over anchor *layers* (4), over images in ``letterbox_batch`` (one
OpenCV warp each) and over weighted-NMS *iterations* (each one retains one
detection per image, for every image at once; bounded by ``max_detections``
and by the number of candidates).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import cv2
import numpy as np
import numpy.typing as npt

from . import image_to_tensor, model_config

FloatArray = npt.NDArray[np.float32]
IntArray = npt.NDArray[np.int32]
ImageArray = npt.NDArray[np.uint8]

# MediaPipe's face-detection keypoint order (mediapipe/python/solutions/face_detection.py,
# FaceKeyPoint): the subject's right eye first.
KEYPOINT_NAMES: tuple[str, ...] = (
    "right_eye",
    "left_eye",
    "nose_tip",
    "mouth_center",
    "right_ear_tragion",
    "left_ear_tragion",
)
# face_detection_short_range_cpu.pbtxt: ImageToTensorCalculator output_tensor_width/height.
INPUT_SIZE = 128
# face_detection_short_range_common.pbtxt: NonMaxSuppressionCalculator min_suppression_threshold.
IOU_THRESHOLD = 0.3
# face_detection_short_range_common.pbtxt: TensorsToDetectionsCalculator min_score_thresh
# (the Python solution's min_detection_confidence overrides it; its default is also 0.5).
SCORE_THRESHOLD = 0.5


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


# --------------------------------------------------------------------------- letterbox


def _target_hw(target: int | tuple[int, int]) -> tuple[int, int]:
    if isinstance(target, tuple):
        height, width = target
    else:
        height = width = target
    if height <= 0 or width <= 0:
        raise ValueError(f"target size must be positive, got {target!r}")
    return int(height), int(width)


@dataclass(frozen=True)
class LetterboxParams:
    """Per-image letterbox geometry, arrays of shape ``[N]`` (pixels of the original image).

    The region of interest is MediaPipe's padded ROI (``GetRoi`` + ``PadRoi`` in
    image_to_tensor_utils.cc): centered on the image, the image's size grown
    along one axis to the tensor's aspect ratio. Tensor-normalized ``(u, v)``
    maps to original pixels ``(roi_left + u * roi_width, roi_top + v * roi_height)``,
    which is the ``MATRIX`` of ``GetRotatedSubRectToRectTransformMatrix``
    (rotation 0, no flip) times the image size.
    """

    image_height: FloatArray
    image_width: FloatArray
    roi_left: FloatArray
    roi_top: FloatArray
    roi_width: FloatArray
    roi_height: FloatArray
    target_height: int = INPUT_SIZE
    target_width: int = INPUT_SIZE

    def __len__(self) -> int:
        return int(self.image_height.shape[0])

    def select(self, index: int) -> LetterboxParams:
        """The params of one image, as a batch of one."""
        s = slice(index, index + 1)
        return LetterboxParams(
            self.image_height[s], self.image_width[s], self.roi_left[s], self.roi_top[s],
            self.roi_width[s], self.roi_height[s], self.target_height, self.target_width,
        )  # fmt: skip

    def _bcast(self, values: FloatArray, ndim: int) -> FloatArray:
        return values.reshape(values.shape + (1,) * (ndim - 2))

    def to_pixels(self, points: npt.ArrayLike) -> FloatArray:
        """Tensor-normalized points ``[N, ..., 2]`` (x, y) -> original-image pixels."""
        pts = np.asarray(points, dtype=np.float32)
        out = np.empty_like(pts)
        out[..., 0] = self._bcast(self.roi_left, pts.ndim) + pts[..., 0] * self._bcast(self.roi_width, pts.ndim)
        out[..., 1] = self._bcast(self.roi_top, pts.ndim) + pts[..., 1] * self._bcast(self.roi_height, pts.ndim)
        return out

    def to_normalized(self, pixels: npt.ArrayLike) -> FloatArray:
        """Inverse of ``to_pixels``: original-image pixels ``[N, ..., 2]`` -> tensor-normalized."""
        pts = np.asarray(pixels, dtype=np.float32)
        out = np.empty_like(pts)
        out[..., 0] = (pts[..., 0] - self._bcast(self.roi_left, pts.ndim)) / self._bcast(self.roi_width, pts.ndim)
        out[..., 1] = (pts[..., 1] - self._bcast(self.roi_top, pts.ndim)) / self._bcast(self.roi_height, pts.ndim)
        return out

    def boxes_to_pixels(self, boxes: npt.ArrayLike) -> FloatArray:
        """Tensor-normalized boxes ``[N, ..., 4]`` (x_min, y_min, x_max, y_max) -> pixels.

        DetectionProjectionCalculator projects the four corners and takes their
        bounding box; with this axis-aligned, positive-scale map that is the
        projection of (x_min, y_min) and (x_max, y_max).
        """
        b = np.asarray(boxes, dtype=np.float32)
        corners = self.to_pixels(b.reshape((*b.shape[:-1], 2, 2)))
        return corners.reshape(b.shape)

    def roi(self, index: int) -> tuple[float, float, float, float]:
        """Image ``index``'s padded ROI as (left, top, width, height) in pixels (for the warp)."""
        return (
            float(self.roi_left[index]), float(self.roi_top[index]), float(self.roi_width[index]), float(self.roi_height[index]),
        )  # fmt: skip

    def input_matrix(self, index: int) -> npt.NDArray[np.float64]:
        """3x3 perspective matrix original pixels -> tensor pixels, exactly as MediaPipe builds it.

        image_to_tensor_converter_opencv.cc: ``cv::getPerspectiveTransform`` from
        ``cv::boxPoints`` of the ROI (float32; bottom-left, top-left, top-right,
        bottom-right) to the tensor corners ``(0,H) (0,0) (W,0) (W,H)``
        (:func:`vision_serving.image_to_tensor.roi_matrix`).
        """
        return image_to_tensor.roi_matrix(*self.roi(index), self.target_width, self.target_height)


def letterbox_params(heights: npt.ArrayLike, widths: npt.ArrayLike, target: int | tuple[int, int] = INPUT_SIZE) -> LetterboxParams:
    """Letterbox geometry for a batch of image sizes (``PadRoi`` with keep_aspect_ratio, float32).

    ``target`` is the tensor size, an int (square) or ``(height, width)``.
    """
    t_h, t_w = _target_hw(target)
    h = np.atleast_1d(np.asarray(heights, dtype=np.float32))
    w = np.atleast_1d(np.asarray(widths, dtype=np.float32))
    if h.shape != w.shape or h.ndim != 1:
        raise ValueError("heights and widths must be 1-D and the same length")
    if np.any(h <= 0) or np.any(w <= 0):
        raise ValueError("image sizes must be positive")
    tensor_aspect = np.float32(t_h) / np.float32(t_w)
    roi_aspect = h / w
    taller_tensor = tensor_aspect > roi_aspect  # pad vertically
    roi_w = np.where(taller_tensor, w, h / tensor_aspect).astype(np.float32)
    roi_h = np.where(taller_tensor, w * tensor_aspect, h).astype(np.float32)
    # GetRoi centers the ROI on the image: center = size / 2.
    roi_left = (np.float32(0.5) * w - np.float32(0.5) * roi_w).astype(np.float32)
    roi_top = (np.float32(0.5) * h - np.float32(0.5) * roi_h).astype(np.float32)
    return LetterboxParams(h, w, roi_left, roi_top, roi_w, roi_h, t_h, t_w)


_RANGE_SCALE = np.float32(2.0 / 255.0)  # GetValueRangeTransformation(0, 255, -1, 1).scale
_RANGE_OFFSET = np.float32(-1.0)  # ... .offset = -1 - 0 * scale


def _check_image(image: ImageArray) -> ImageArray:
    if image.dtype != np.uint8 or image.ndim != 3 or image.shape[2] not in (3, 4):
        raise ValueError(f"expected an HxWx3 (RGB) or HxWx4 (RGBA) uint8 image, got {image.dtype} {image.shape}")
    return image


def _warp_into(image: ImageArray, params: LetterboxParams, index: int, out: FloatArray) -> None:
    warped = image_to_tensor.warp_roi(image, params.roi(index), params.target_width, params.target_height, cv2.INTER_LINEAR)
    if warped.shape[2] == 4:
        warped = warped[..., :3]  # MediaPipe: cvtColor(RGBA2RGB) after the warp
    # cv::Mat::convertTo(CV_32F, scale, offset) rounds ``v * scale + offset`` once (fused):
    # float64 holds the exact value (8-bit x 24-bit product), so one cast to float32 matches.
    out[...] = warped * np.float64(_RANGE_SCALE) + np.float64(_RANGE_OFFSET)


def letterbox(image: ImageArray, target: int | tuple[int, int] = INPUT_SIZE) -> tuple[FloatArray, LetterboxParams]:
    """One RGB uint8 image -> ``([1, H, W, 3] float32 in [-1, 1], params)`` like ImageToTensorCalculator's CPU path.

    image_to_tensor_converter_opencv.cc: ``cv::warpPerspective`` of the padded
    ROI onto the tensor with ``cv::INTER_LINEAR`` (bilinear, no antialiasing,
    corner-aligned: tensor pixel ``x`` samples source ``roi_left + x *
    roi_width / W``, not cv2.resize's half-pixel centers) and
    ``cv::BORDER_CONSTANT`` (zero pixels, i.e. -1.0 after scaling), on the
    uint8 image, then ``convertTo(CV_32F, 2/255, -1)``.
    """
    return letterbox_batch([image], target)


def letterbox_batch(
    images: Sequence[ImageArray], target: int | tuple[int, int] = INPUT_SIZE, out: FloatArray | None = None
) -> tuple[FloatArray, LetterboxParams]:
    """A batch of RGB uint8 images of any sizes -> ``([N, H, W, 3] float32, params)``."""
    for image in images:
        _check_image(image)
    t_h, t_w = _target_hw(target)
    params = letterbox_params([im.shape[0] for im in images], [im.shape[1] for im in images], (t_h, t_w))
    shape = (len(images), t_h, t_w, 3)
    if out is None:
        out = np.empty(shape, dtype=np.float32)
    elif out.shape != shape or out.dtype != np.float32:
        raise ValueError(f"out must be float32 {shape}, got {out.dtype} {out.shape}")
    for i, image in enumerate(images):
        _warp_into(image, params, i, out[i])
    return out, params


# --------------------------------------------------------------------------- decoding


@dataclass(frozen=True)
class DecodeOptions:
    """``TensorsToDetectionsCalculatorOptions``; defaults are face_detection_short_range_common.pbtxt's.

    num_classes 1, num_boxes 896, num_coords 16, box_coord_offset 0,
    keypoint_coord_offset 4, num_keypoints 6, num_values_per_keypoint 2,
    sigmoid_score true, score_clipping_thresh 100.0, reverse_output_order true
    (box format XYWH: ``GetBoxFormat`` in tensors_to_detections_calculator.cc),
    x/y/w/h_scale 128.0, min_score_thresh 0.5; apply_exponential_on_box_size
    keeps its proto default, false.
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
    min_score_thresh: float = SCORE_THRESHOLD
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
) -> tuple[FloatArray, FloatArray, FloatArray]:
    """Model outputs -> ``(boxes [N,A,4], keypoints [N,A,K,2], scores [N,A])``, normalized to the tensor.

    ``DecodeBoxes`` + the score loop of ``ProcessCPU`` in
    tensors_to_detections_calculator.cc: with box format XYWH,
    ``x_center = raw[0] / x_scale * anchor.w + anchor.x_center`` (y likewise),
    ``w = raw[2] / w_scale * anchor.w`` (or ``exp(...)`` with
    apply_exponential_on_box_size), keypoints ``raw[off + 2k] / x_scale *
    anchor.w + anchor.x_center``; boxes are returned as (x_min, y_min, x_max,
    y_max). Scores: the logit clipped to ``[-score_clipping_thresh,
    score_clipping_thresh]`` then a sigmoid; with several classes the best one.
    No threshold is applied here (see ``weighted_nms``).
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
    return boxes, keypoints, scores.max(axis=-1).astype(np.float32)


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


def weighted_nms(
    boxes: npt.ArrayLike,
    keypoints: npt.ArrayLike,
    scores: npt.ArrayLike,
    score_threshold: npt.ArrayLike = SCORE_THRESHOLD,
    iou_threshold: float = IOU_THRESHOLD,
    max_detections: int | None = None,
) -> tuple[FloatArray, FloatArray, FloatArray, IntArray]:
    """MediaPipe's weighted non-maximum suppression, batched.

    Inputs: ``boxes [N,A,4]`` (x_min, y_min, x_max, y_max), ``keypoints
    [N,A,K,2]``, ``scores [N,A]``, ``score_threshold`` scalar or ``[N]``.
    Returns ``(boxes [N,D,4], keypoints [N,D,K,2], scores [N,D], counts [N])``,
    best first, where ``D = counts.max()``; rows past an image's count are 0.

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
    if max_detections is not None and max_detections < 1:
        raise ValueError("max_detections must be positive or None")

    # MediaPipe stores a box as (xmin, ymin, width, height) in float and rebuilds
    # xmax = xmin + width (Rectangle_f in OverlapSimilarity, and the weighted sums).
    width = b[..., 2] - b[..., 0]
    height = b[..., 3] - b[..., 1]
    b = np.stack([b[..., 0], b[..., 1], b[..., 0] + width, b[..., 1] + height], axis=-1)
    valid = (s >= thr[:, None]) & (width >= 0) & (height >= 0)  # NaN compares False
    m = int(valid.sum(axis=1).max()) if n else 0
    iterations = min(m, max_detections) if max_detections is not None else m
    if m == 0:
        return (
            np.zeros((n, 0, 4), np.float32),
            np.zeros((n, 0, k, 2), np.float32),
            np.zeros((n, 0), np.float32),
            np.zeros((n,), np.int32),
        )

    # Top-M candidates per image, by descending score (stable: anchor order on ties).
    masked = np.where(valid, s, -np.inf)
    order = np.argsort(-masked, axis=1, kind="stable")[:, :m]
    c_valid = np.take_along_axis(valid, order, axis=1)
    c_scores = np.where(c_valid, np.take_along_axis(s, order, axis=1), np.float32(0))
    c_boxes = np.take_along_axis(b, order[..., None], axis=1)
    c_kps = np.take_along_axis(kp, order[..., None, None], axis=1).reshape(n, m, 2 * k)
    # The weighted mean of boxes and keypoints in one matmul: [N, M, 4 + 2K].
    c_values = np.concatenate([c_boxes, c_kps], axis=-1)

    out_values = np.zeros((n, iterations, 4 + 2 * k), np.float32)
    out_scores = np.zeros((n, iterations), np.float32)
    counts = np.zeros((n,), np.int32)
    remaining = c_valid.copy()
    active = np.ones((n,), bool)
    rows = np.arange(n)
    for step in range(iterations):
        emit = active & remaining.any(axis=1)
        if not emit.any():
            break
        top = np.argmax(remaining, axis=1)  # first remaining = best score
        top_box = c_boxes[rows, top]
        cluster = remaining & (_iou_one_to_many(top_box, c_boxes) > np.float32(iou_threshold)) & emit[:, None]
        weights = np.where(cluster, c_scores, np.float32(0))
        in_cluster = cluster.any(axis=1)
        # Sequential float32 sums in score order, like MediaPipe's loop (cumsum is a
        # sequential accumulate, so the zero weights of other candidates and of the
        # batch padding leave the sums bit-identical: batch independence).
        total = np.cumsum(weights, axis=1)[:, -1]
        sums = np.cumsum(weights[..., None] * c_values, axis=1)[:, -1]
        weighted = sums / np.where(in_cluster, total, np.float32(1))[:, None]
        value = np.where(in_cluster[:, None], weighted, c_values[rows, top])
        out_values[:, step] = np.where(emit[:, None], value, np.float32(0))
        out_scores[:, step] = np.where(emit, c_scores[rows, top], np.float32(0))
        counts += emit
        remaining &= ~cluster
        # MediaPipe stops when an iteration removes nothing (empty cluster).
        active &= ~(emit & ~in_cluster)

    d = int(counts.max())
    out_values = out_values[:, :d]
    return (
        np.ascontiguousarray(out_values[..., :4]),
        np.ascontiguousarray(out_values[..., 4:].reshape(n, d, k, 2)),
        np.ascontiguousarray(out_scores[:, :d]),
        counts,
    )


# --------------------------------------------------------------------------- end to end


@dataclass(frozen=True)
class Detections:
    """Faces per image, best first, in pixels of the original images.

    ``boxes [N,D,4]`` (x_min, y_min, x_max, y_max), ``keypoints [N,D,K,2]``
    (x, y; order ``KEYPOINT_NAMES``), ``scores [N,D]``, ``counts [N]``; rows
    ``>= counts[i]`` are zero.
    """

    boxes: FloatArray
    keypoints: FloatArray
    scores: FloatArray
    counts: IntArray

    def image(self, index: int) -> tuple[FloatArray, FloatArray, FloatArray]:
        """The (boxes, keypoints, scores) of one image, without padding."""
        c = int(self.counts[index])
        return self.boxes[index, :c], self.keypoints[index, :c], self.scores[index, :c]

    def __len__(self) -> int:
        return int(self.counts.shape[0])

    def take(self, start: int, stop: int) -> Detections:
        """Images ``start:stop``, padded to *their* largest count only (one request of a batch)."""
        counts = self.counts[start:stop]
        d = int(counts.max()) if len(counts) else 0
        return Detections(
            np.ascontiguousarray(self.boxes[start:stop, :d]),
            np.ascontiguousarray(self.keypoints[start:stop, :d]),
            np.ascontiguousarray(self.scores[start:stop, :d]),
            counts,
        )


def postprocess(
    raw_boxes: npt.ArrayLike,
    raw_scores: npt.ArrayLike,
    params: LetterboxParams,
    score_threshold: npt.ArrayLike | None = None,
    iou_threshold: float = IOU_THRESHOLD,
    max_detections: int | None = None,
    options: DecodeOptions | None = None,
    anchors: npt.ArrayLike | None = None,
    clip: bool = True,
) -> Detections:
    """Model outputs for a batch -> ``Detections`` in original-image pixels.

    ``decode`` -> ``weighted_nms`` -> projection through the letterbox
    (DetectionProjectionCalculator, detection_projection_calculator.cc) ->
    scaling to pixels; the original sizes come from ``params`` (built by
    ``letterbox_params`` / ``letterbox_batch`` from them). ``score_threshold``
    (scalar or ``[N]``) defaults to ``options.min_score_thresh``. With ``clip``
    boxes and keypoints are clipped to ``[0, width] x [0, height]`` (MediaPipe
    itself does not clip; a face at the border may extend past it).
    """
    opts = options or DecodeOptions()
    boxes, keypoints, scores = decode(raw_boxes, raw_scores, anchors, opts)
    if len(params) != boxes.shape[0]:
        raise ValueError(f"{len(params)} letterbox params for a batch of {boxes.shape[0]}")
    threshold = opts.min_score_thresh if score_threshold is None else score_threshold
    nb, nk, ns, counts = weighted_nms(boxes, keypoints, scores, threshold, iou_threshold, max_detections)
    px_boxes = params.boxes_to_pixels(nb)
    px_kps = params.to_pixels(nk)
    if clip:
        w = params.image_width[:, None]
        h = params.image_height[:, None]
        px_boxes[..., 0::2] = np.clip(px_boxes[..., 0::2], 0, w[..., None])
        px_boxes[..., 1::2] = np.clip(px_boxes[..., 1::2], 0, h[..., None])
        px_kps[..., 0] = np.clip(px_kps[..., 0], 0, w[..., None])
        px_kps[..., 1] = np.clip(px_kps[..., 1], 0, h[..., None])
    pad = np.arange(ns.shape[1])[None, :] >= counts[:, None]
    px_boxes[pad] = 0
    px_kps[pad] = 0
    return Detections(px_boxes, px_kps, ns, counts)


# --------------------------------------------------------------------------- matching (gates, tests)


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


def match_boxes(first: npt.ArrayLike, second: npt.ArrayLike, min_iou: float = 0.5) -> list[tuple[int, int, float]]:
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


# --------------------------------------------------------------------------- the served configuration

NMS_ALGORITHMS = ("WEIGHTED",)
OVERLAP_TYPES = ("INTERSECTION_OVER_UNION",)


def _boolean(text: str) -> bool:
    value = text.strip().lower()
    if value not in ("true", "false"):
        raise ValueError(f"expected true or false, got {text!r}")
    return value == "true"


def _numbers(kind: type) -> Callable[[str], tuple[Any, ...]]:
    def parse(text: str) -> tuple[Any, ...]:
        return tuple(kind(item) for item in text.split(",") if item.strip())

    return parse


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
    "strides": (_numbers(int), True),
    "aspect_ratios": (_numbers(float), True),
    "reduce_boxes_in_lowest_layer": (_boolean, True),
    "interpolated_scale_aspect_ratio": (float, True),
    "fixed_anchor_size": (_boolean, True),
    "feature_map_height": (_numbers(int), False),
    "feature_map_width": (_numbers(int), False),
}
_DECODE_PARAMETERS: dict[str, tuple[Callable[[str], Any], bool]] = {
    "num_boxes": (int, True),
    "num_coords": (int, True),
    "box_coord_offset": (int, True),
    "keypoint_coord_offset": (int, True),
    "num_keypoints": (int, True),
    "num_values_per_keypoint": (int, True),
    "sigmoid_score": (_boolean, True),
    "score_clipping_thresh": (float, True),
    "reverse_output_order": (_boolean, True),
    "x_scale": (float, True),
    "y_scale": (float, True),
    "w_scale": (float, True),
    "h_scale": (float, True),
    "apply_exponential_on_box_size": (_boolean, True),
    "min_score_thresh": (float, True),
}
_OTHER_PARAMETERS: dict[str, tuple[Callable[[str], Any], bool]] = {
    "num_classes": (int, True),
    "nms_algorithm": (str, True),
    "overlap_type": (str, True),
    "min_suppression_threshold": (float, True),
    "max_detections": (int, True),
    "clip_to_image": (_boolean, True),
}
PARAMETERS = {**_ANCHOR_PARAMETERS, **_DECODE_PARAMETERS, **_OTHER_PARAMETERS}


@dataclass(frozen=True)
class DetectorSpec:
    """What a detection postprocess model computes, from its config's parameters.

    ``decode`` (with its ``anchors``) are MediaPipe's calculator options;
    ``iou_threshold`` is NonMaxSuppressionCalculator's ``min_suppression_threshold``
    (weighted NMS, IoU); ``max_detections`` caps the faces per image (this
    server's bound on the response, not MediaPipe's); ``clip`` clips boxes and
    keypoints to the image. The letterbox tensor is ``input_size_height x
    input_size_width`` of the anchors, which is the model input's size.
    """

    decode: DecodeOptions
    num_classes: int = 1
    iou_threshold: float = IOU_THRESHOLD
    max_detections: int = 100
    clip: bool = True

    def __post_init__(self) -> None:
        if self.num_classes < 1:
            raise ValueError(f"num_classes must be positive, got {self.num_classes}")
        if not 0.0 <= self.iou_threshold < 1.0:
            raise ValueError(f"min_suppression_threshold must be in [0, 1), got {self.iou_threshold}")
        if self.max_detections < 1:
            raise ValueError(f"max_detections must be positive, got {self.max_detections}")
        if not 0.0 <= self.decode.min_score_thresh <= 1.0:
            raise ValueError(f"min_score_thresh must be in [0, 1], got {self.decode.min_score_thresh}")
        anchors = len(ssd_anchors(self.decode.anchors))
        if anchors != self.decode.num_boxes:
            raise ValueError(f"the anchor options give {anchors} anchors, num_boxes is {self.decode.num_boxes}")

    @property
    def tensor_size(self) -> tuple[int, int]:
        """(height, width) of the letterboxed model input."""
        return self.decode.anchors.input_size_height, self.decode.anchors.input_size_width

    @classmethod
    def from_parameters(cls, parameters: Mapping[str, str]) -> DetectorSpec:
        """From string parameters (a config's); every MediaPipe option is required, unknown keys are errors."""
        unknown = sorted(set(parameters) - set(PARAMETERS))
        if unknown:
            raise ValueError(f"unknown detection parameter(s) {', '.join(unknown)}")
        missing = sorted(key for key, (_, required) in PARAMETERS.items() if required and key not in parameters)
        if missing:
            raise ValueError(f"missing detection parameter(s) {', '.join(missing)}")
        values: dict[str, Any] = {}
        for key, text in parameters.items():
            try:
                values[key] = PARAMETERS[key][0](text)
            except ValueError as error:
                raise ValueError(f"detection parameter {key}: {error}") from None
        if values["nms_algorithm"] not in NMS_ALGORITHMS:
            raise ValueError(f"nms_algorithm {values['nms_algorithm']!r} is not one of {NMS_ALGORITHMS}")
        if values["overlap_type"] not in OVERLAP_TYPES:
            raise ValueError(f"overlap_type {values['overlap_type']!r} is not one of {OVERLAP_TYPES}")
        anchors = AnchorOptions(**{key: values[key] for key in _ANCHOR_PARAMETERS if key in values})
        decode = DecodeOptions(anchors=anchors, **{key: values[key] for key in _DECODE_PARAMETERS})
        return cls(
            decode=decode,
            num_classes=values["num_classes"],
            iou_threshold=values["min_suppression_threshold"],
            max_detections=values["max_detections"],
            clip=values["clip_to_image"],
        )

    @classmethod
    def from_config(cls, config: model_config.ModelConfig) -> DetectorSpec:
        """The config's parameters but the drift monitor's (``drift_*``: vision_serving.drift)."""
        parameters = config.parameters.items()
        return cls.from_parameters({key: value.string_value for key, value in parameters if not key.startswith("drift_")})


def detect(
    raw_boxes: npt.ArrayLike,
    raw_scores: npt.ArrayLike,
    image_sizes: npt.ArrayLike,
    spec: DetectorSpec,
    score_threshold: npt.ArrayLike | None = None,
    anchors: npt.ArrayLike | None = None,
) -> Detections:
    """A batch of model outputs and each image's (height, width) -> ``Detections`` in pixels.

    The letterbox is recomputed from the sizes (``letterbox_params``, the same
    geometry the preprocess model warped with); ``anchors`` (``ssd_anchors`` of
    the spec) can be passed precomputed.
    """
    sizes = np.asarray(image_sizes).reshape(-1, 2)
    params = letterbox_params(sizes[:, 0], sizes[:, 1], spec.tensor_size)
    return postprocess(
        raw_boxes, raw_scores, params, score_threshold, spec.iou_threshold, spec.max_detections, spec.decode, anchors, spec.clip
    )


@dataclass(frozen=True)
class DetectorTensors:
    """A detection postprocess model's tensors, found by role in its config.

    Inputs: the required FP32 ``[num_boxes, num_coords]`` (box regressors) and
    ``[num_boxes, num_classes]`` (logits), the required INT32 ``[2]`` (each
    image's height, width), an optional FP32 ``[1]`` (per-image score
    threshold). Outputs: FP32 ``[-1, 4]`` boxes, ``[-1]`` scores, ``[-1,
    num_keypoints, 2]`` keypoints, INT32 ``[1]`` count.
    """

    raw_boxes: str
    raw_scores: str
    image_size: str
    score_threshold: str | None
    boxes: str
    scores: str
    keypoints: str
    count: str

    @classmethod
    def from_config(cls, config: model_config.ModelConfig, spec: DetectorSpec) -> DetectorTensors:
        def fail(message: str) -> model_config.ConfigError:
            return model_config.ConfigError(f"model '{config.name}': {message}")

        def named(tensors: Any, datatype: str, dims: list[int], optional: bool | None = None) -> list[str]:
            return [
                item.name
                for item in tensors
                if model_config.dtype_name(item.data_type) == datatype
                and [int(d) for d in item.dims] == dims
                and (optional is None or bool(item.optional) == optional)
            ]

        def one(names: list[str], what: str) -> str:
            if len(names) != 1:
                raise fail(f"expected exactly one {what}, found {names or 'none'}")
            return names[0]

        d = spec.decode
        if d.num_coords == spec.num_classes:
            raise fail("num_coords equals num_classes: the two FP32 inputs cannot be told apart")
        raw_boxes = one(
            named(config.input, "FP32", [d.num_boxes, d.num_coords], False), f"required FP32 input [{d.num_boxes}, {d.num_coords}]"
        )
        raw_scores = one(
            named(config.input, "FP32", [d.num_boxes, spec.num_classes], False), f"required FP32 input [{d.num_boxes}, {spec.num_classes}]"
        )
        image_size = one(named(config.input, "INT32", [2], False), "required INT32 input [2] (height, width)")
        thresholds = named(config.input, "FP32", [1], True)
        if len(thresholds) > 1 or len(config.input) != 3 + len(thresholds):
            raise fail("expected the FP32 regressors and logits, the INT32 [2] image size and at most one optional FP32 [1] threshold")
        outputs = {
            "boxes": one(named(config.output, "FP32", [-1, 4]), "FP32 output [-1, 4] (boxes)"),
            "scores": one(named(config.output, "FP32", [-1]), "FP32 output [-1] (scores)"),
            "keypoints": one(named(config.output, "FP32", [-1, d.num_keypoints, 2]), f"FP32 output [-1, {d.num_keypoints}, 2] (keypoints)"),
            "count": one(named(config.output, "INT32", [1]), "INT32 output [1] (count)"),
        }
        if len(config.output) != 4:
            raise fail(f"expected 4 outputs (boxes, scores, keypoints, count), found {len(config.output)}")
        return cls(raw_boxes, raw_scores, image_size, thresholds[0] if thresholds else None, **outputs)


def parse_score_threshold(values: npt.ArrayLike | None, count: int, default: float, name: str = "SCORE_THRESHOLD") -> FloatArray:
    """A request's optional per-image score threshold ``[count, 1]`` -> ``[count]``; the default when absent.

    Raises ``ValueError`` (the client's mistake) unless every value is in [0, 1].
    """
    if values is None:
        return np.full((count,), default, dtype=np.float32)
    thresholds = np.asarray(values, dtype=np.float32).reshape(-1)
    if thresholds.shape != (count,):
        raise ValueError(f"{name} must have one value per image ({count}), got {thresholds.size}")
    bad = thresholds[~((thresholds >= 0) & (thresholds <= 1))]  # NaN is bad too
    if bad.size:
        raise ValueError(f"{name} must be in [0, 1], got {bad[0]}")
    return thresholds
