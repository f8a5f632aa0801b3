"""Text detection around the DB model: its input from a photo, and text boxes from its probability map.

Computed as RapidOCR 3.10.0 computes it (paths inside its wheel), step by step:

* :func:`resize_within_bounds`: ``utils/process_img.py`` ``resize_image_within_bounds`` (sides
  within ``min_side_len`` .. ``max_side_len``, then multiples of 32; the ratios of the last resize);
* :func:`vertical_padding`: ``utils/process_img.py`` ``apply_vertical_padding`` / ``get_padding_h``
  (black rows above and below a short or very wide photo);
* :func:`detection_size` and :func:`normalize`: ``ch_ppocr_det/utils.py`` ``DetPreProcess``
  (``limit_type`` "min": the shorter side up to ``limit_side_len``, sides to multiples of 32 with
  Python's ``round``; ``(pixel x 1/255 - mean) / std``, float32 pixels against float64 constants);
* :func:`boxes_from_map`: ``ch_ppocr_det/utils.py`` ``DBPostProcess`` (threshold, 2x2 dilation,
  ``cv2.findContours``, ``get_mini_boxes``, ``box_score_fast``, ``unclip``: the round offset of
  :mod:`.offset` by ``area x unclip_ratio / perimeter`` with the area and perimeter as GEOS
  computes them for shapely, then ``filter_det_res``), and ``ch_ppocr_det/main.py``
  ``TextDetector.sorted_boxes`` (reading order);
* :func:`to_photo`: ``utils/process_img.py`` ``map_boxes_to_original`` (padding removed, resize
  ratios applied, clipped to the photo).

Array types and rounding follow the reference's numpy expressions (float32 where it computes in
float32, numpy's half-to-even ``round`` where it uses it), since a box corner one pixel off
changes the crop the recognizer reads.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import cv2
import numpy as np
import numpy.typing as npt

from .offset import offset
from .settings import DetectionSettings

FloatArray = npt.NDArray[np.float32]


# --------------------------------------------------------------------------- the model input


def multiple_of_32(value: int) -> int:
    return int(round(value / 32) * 32)


def _scaled(height: int, width: int, ratio: float) -> tuple[int, int]:
    return multiple_of_32(int(height * ratio)), multiple_of_32(int(width * ratio))


def resize_within_bounds(image: np.ndarray, min_side_len: int, max_side_len: int) -> tuple[np.ndarray, float, float]:
    """The photo with its longer side at most ``max_side_len`` and its shorter at least ``min_side_len``
    (each resize to multiples of 32, ``cv2.resize`` linear), and ``(ratio_h, ratio_w)``: photo pixels per
    pixel of the result, of the last resize (1.0 when none)."""
    ratio_h = ratio_w = 1.0
    height, width = image.shape[:2]
    if max(height, width) > max_side_len:
        ratio = float(max_side_len) / (height if height > width else width)
        image, ratio_h, ratio_w = _resize(image, *_scaled(height, width, ratio))
    height, width = image.shape[:2]
    if min(height, width) < min_side_len:
        ratio = float(min_side_len) / (height if height < width else width)
        image, ratio_h, ratio_w = _resize(image, *_scaled(height, width, ratio))
    return image, ratio_h, ratio_w


def _resize(image: np.ndarray, height: int, width: int) -> tuple[np.ndarray, float, float]:
    if height <= 0 or width <= 0:
        raise ValueError(f"a {image.shape[1]}x{image.shape[0]} photo cannot be resized for text detection (to {width}x{height})")
    source_height, source_width = image.shape[:2]
    return cv2.resize(image, (width, height)), source_height / height, source_width / width


def vertical_padding(image: np.ndarray, width_height_ratio: float, min_height: int) -> tuple[np.ndarray, int]:
    """The image with black rows added above and below when it is at most ``min_height`` tall or
    wider than ``width_height_ratio`` x its height, and the rows added at the top."""
    height, width = image.shape[:2]
    too_wide = width_height_ratio != -1 and width / height > width_height_ratio
    if not (height <= min_height or too_wide):
        return image, 0
    padding = int(abs(max(int(width / width_height_ratio), min_height) * 2 - height) / 2)
    return cv2.copyMakeBorder(image, padding, padding, 0, 0, cv2.BORDER_CONSTANT, value=(0, 0, 0)), padding


def detection_size(height: int, width: int, limit_side_len: int, limit_type: str = "min") -> tuple[int, int] | None:
    """The model input's (height, width) for an image, multiples of 32; None when one would be 0."""
    if limit_type == "max":
        ratio = float(limit_side_len) / (height if height > width else width) if max(height, width) > limit_side_len else 1.0
    else:
        ratio = float(limit_side_len) / (height if height < width else width) if min(height, width) < limit_side_len else 1.0
    size = _scaled(height, width, ratio)
    return None if size[0] <= 0 or size[1] <= 0 else size


def normalize(image: np.ndarray, mean: tuple[float, ...], std: tuple[float, ...]) -> FloatArray:
    """An HWC uint8 image -> CHW float32, ``(pixel x (1/255) - mean) / std`` (float32 pixels, float64 constants):
    RapidOCR's own normalization, the reference for the one in the served detector's graph (:func:`pixel_normalization`)."""
    scaled = image.astype(np.float32) * (1 / 255.0)
    return np.ascontiguousarray(((scaled - np.array(mean)) / np.array(std)).transpose(2, 0, 1), dtype=np.float32)


def pixel_normalization(settings: DetectionSettings) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """The detector's normalization on 0..255 pixels, ``(pixel - mean') / std'``: RapidOCR's ``(pixel / 255 - mean) /
    std`` with ``mean' = 255 mean`` and ``std' = 255 std``. The served detector takes the uint8 pixels and computes
    this in its graph (the builders fold it in): a quarter of the bytes cross shared memory and reach the GPU."""
    return tuple(255.0 * value for value in settings.mean), tuple(255.0 * value for value in settings.std)


@dataclass(frozen=True)
class DetectionInput:
    """One photo prepared for the detector: ``tensor`` ``[3, H, W]`` uint8, the resized pixels in the detector's
    layout and channel order (BGR; the detector normalizes them, :func:`pixel_normalization`); ``image``: the
    resized and padded BGR image the boxes are found in (and the crops are cut from); how to map its pixels back
    to the photo's."""

    tensor: npt.NDArray[np.uint8]
    image: np.ndarray
    ratio_h: float
    ratio_w: float
    pad_top: int
    photo_shape: tuple[int, int]


def prepare(photo: np.ndarray, settings: DetectionSettings) -> DetectionInput | None:
    """A BGR photo ``[h, w, 3]`` uint8 -> the detector's input; None when it is too small to resize."""
    image, ratio_h, ratio_w = resize_within_bounds(photo, settings.min_side_len, settings.max_side_len)
    pad_top = 0
    if settings.use_vertical_padding:
        image, pad_top = vertical_padding(image, settings.width_height_ratio, settings.min_height)
    size = detection_size(image.shape[0], image.shape[1], settings.limit_side_len, settings.limit_type)
    if size is None:
        return None
    resized = cv2.resize(image, (size[1], size[0]))
    return DetectionInput(
        np.ascontiguousarray(resized.transpose(2, 0, 1)), image, ratio_h, ratio_w, pad_top, (photo.shape[0], photo.shape[1])
    )


# --------------------------------------------------------------------------- boxes from the probability map


def binarize(probability: FloatArray, settings: DetectionSettings) -> npt.NDArray[np.uint8]:
    """``probability > thresh``, dilated by a 2x2 kernel when ``use_dilation``: uint8 0/1 ``[H, W]``."""
    mask = (probability > settings.thresh).astype(np.uint8)
    if settings.use_dilation:
        return np.asarray(cv2.dilate(mask, np.array([[1, 1], [1, 1]])), np.uint8)
    return mask


def mini_box(contour: np.ndarray) -> tuple[FloatArray, float]:
    """``get_mini_boxes``: the least-area rectangle around ``contour`` as float32 ``[4, 2]`` corners
    (top-left, top-right, bottom-right, bottom-left by its rule), and its shorter side."""
    rectangle = cv2.minAreaRect(contour)
    points = sorted(cv2.boxPoints(rectangle), key=lambda point: point[0])
    first, fourth = (0, 1) if points[1][1] > points[0][1] else (1, 0)
    second, third = (2, 3) if points[3][1] > points[2][1] else (3, 2)
    return np.array([points[first], points[second], points[third], points[fourth]]), min(rectangle[1])


def box_score(probability: FloatArray, box: FloatArray) -> float:
    """``box_score_fast``: the mean probability inside the quadrilateral (corners truncated to pixels)."""
    height, width = probability.shape[:2]
    box = box.copy()
    x_min = np.clip(np.floor(box[:, 0].min()).astype(np.int32), 0, width - 1)
    x_max = np.clip(np.ceil(box[:, 0].max()).astype(np.int32), 0, width - 1)
    y_min = np.clip(np.floor(box[:, 1].min()).astype(np.int32), 0, height - 1)
    y_max = np.clip(np.ceil(box[:, 1].max()).astype(np.int32), 0, height - 1)
    mask = np.zeros((y_max - y_min + 1, x_max - x_min + 1), dtype=np.uint8)
    box[:, 0] = box[:, 0] - x_min
    box[:, 1] = box[:, 1] - y_min
    cv2.fillPoly(mask, [box.reshape(-1, 2).astype(np.int32)], (1,))
    return float(cv2.mean(probability[y_min : y_max + 1, x_min : x_max + 1], mask)[0])


def polygon_area(points: np.ndarray) -> float:
    """GEOS's ``Area::ofRing`` (shapely's ``Polygon.area``): the shoelace sum with x taken relative to the first point."""
    ring = [(float(x), float(y)) for x, y in points] + [(float(points[0][0]), float(points[0][1]))]
    x0 = ring[0][0]
    total = 0.0
    for i in range(1, len(ring) - 1):
        total += (ring[i][0] - x0) * (ring[i - 1][1] - ring[i + 1][1])
    return abs(total / 2.0)


def polygon_perimeter(points: np.ndarray) -> float:
    """GEOS's ``Length::ofLine`` of the closed ring (shapely's ``Polygon.length``)."""
    ring = [(float(x), float(y)) for x, y in points]
    total = 0.0
    for (x0, y0), (x1, y1) in zip(ring, ring[1:] + ring[:1]):
        dx, dy = x1 - x0, y1 - y0
        total += math.sqrt(dx * dx + dy * dy)
    return total


def unclip(box: FloatArray, unclip_ratio: float) -> npt.NDArray[np.int32]:
    """``DBPostProcess.unclip``: the box grown by ``area x unclip_ratio / perimeter`` with round joins
    (points ``[M, 1, 2]`` int32 in pyclipper's order; :func:`.offset.offset`)."""
    distance = polygon_area(box) * unclip_ratio / polygon_perimeter(box)
    return offset(box, distance).reshape(-1, 1, 2)


def order_clockwise(points: np.ndarray) -> FloatArray:
    """``order_points_clockwise``: top-left, top-right, bottom-right, bottom-left (the two left-most by
    x, each pair ordered by y), float32."""
    by_x = points[np.argsort(points[:, 0]), :]
    left, right = by_x[:2, :], by_x[2:, :]
    top_left, bottom_left = left[np.argsort(left[:, 1]), :]
    top_right, bottom_right = right[np.argsort(right[:, 1]), :]
    return np.array([top_left, top_right, bottom_right, bottom_left], dtype="float32")


def clip_box(points: FloatArray, height: int, width: int) -> FloatArray:
    """``clip_det_res``: each corner clipped to the image and truncated to whole pixels."""
    for index in range(points.shape[0]):
        points[index, 0] = int(min(max(points[index, 0], 0), width - 1))
        points[index, 1] = int(min(max(points[index, 1], 0), height - 1))
    return points


@dataclass(frozen=True)
class TextBoxes:
    """Detected text, in reading order: ``boxes`` float32 ``[K, 4, 2]`` (x, y corners clockwise from
    the top-left, pixels of the frame they were found for), ``scores`` float64 ``[K]``."""

    boxes: FloatArray
    scores: npt.NDArray[np.float64]

    def __len__(self) -> int:
        return len(self.boxes)


def boxes_from_map(probability: np.ndarray, height: int, width: int, settings: DetectionSettings) -> TextBoxes:
    """The detector's map (``[H, W]``, or ``[1, H, W]`` / ``[1, 1, H, W]`` for one image) -> text boxes
    in the pixels of an image ``height`` x ``width`` (the one the input was resized from)."""
    probability = np.asarray(probability, dtype=np.float32).reshape(np.shape(probability)[-2:])
    mask = binarize(probability, settings)
    map_height, map_width = mask.shape
    contours, _ = cv2.findContours((mask * 255).astype(np.uint8), cv2.RETR_LIST, cv2.CHAIN_APPROX_SIMPLE)
    boxes: list[FloatArray] = []
    scores: list[float] = []
    for contour in contours[: settings.max_candidates]:
        points, short_side = mini_box(contour)
        if short_side < settings.min_size:
            continue
        score = box_score(probability, points.reshape(-1, 2))
        if settings.box_thresh > score:
            continue
        grown = unclip(points, settings.unclip_ratio)
        if len(grown) == 0:
            continue
        box, short_side = mini_box(grown)
        if short_side < settings.min_size + 2:
            continue
        box[:, 0] = np.clip(np.round(box[:, 0] / map_width * width), 0, width)
        box[:, 1] = np.clip(np.round(box[:, 1] / map_height * height), 0, height)
        box = clip_box(order_clockwise(box.astype(np.int32)), height, width)
        if int(np.linalg.norm(box[0] - box[1])) <= settings.min_box_side or int(np.linalg.norm(box[0] - box[3])) <= settings.min_box_side:
            continue
        boxes.append(box)
        scores.append(score)
    if not boxes:
        return TextBoxes(np.zeros((0, 4, 2), np.float32), np.zeros((0,), np.float64))
    order = reading_order(np.stack(boxes), settings.line_y_threshold)
    return TextBoxes(np.stack(boxes)[order], np.asarray(scores, np.float64)[order])


def reading_order(boxes: FloatArray, line_y_threshold: float) -> npt.NDArray[np.intp]:
    """``TextDetector.sorted_boxes``: top-left corners by y (stable); a gap of at least ``line_y_threshold``
    starts a new line; left to right within a line. The permutation of ``boxes``."""
    if len(boxes) == 0:
        return np.zeros((0,), np.intp)
    by_y = np.argsort(boxes[:, 0, 1], kind="stable")
    lines = np.concatenate([[0], np.cumsum(np.diff(boxes[by_y, 0, 1]) >= line_y_threshold)])
    return by_y[np.lexsort((boxes[by_y, 0, 0], lines))]


def to_photo(boxes: FloatArray, prepared: DetectionInput) -> FloatArray:
    """Boxes in the padded, resized image's pixels -> the photo's (``map_boxes_to_original``), float32."""
    mapped = np.array(boxes, dtype=np.float32, copy=True).reshape(-1, 4, 2)
    mapped[:, :, 1] -= prepared.pad_top
    mapped[:, :, 0] *= prepared.ratio_w
    mapped[:, :, 1] *= prepared.ratio_h
    mapped = np.where(mapped < 0, 0, mapped)
    height, width = prepared.photo_shape
    mapped[..., 0] = np.where(mapped[..., 0] > width, width, mapped[..., 0])
    mapped[..., 1] = np.where(mapped[..., 1] > height, height, mapped[..., 1])
    return mapped.astype(np.float32)
