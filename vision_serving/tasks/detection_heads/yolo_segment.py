"""``yolo_segment``: Ultralytics' instance segmentation outputs (``task: segment``: YOLOv8/11-seg).

Two outputs: ``predictions [N, 4 + C + M, A]`` (per anchor: box centre x, y, width, height in
model-input pixels, C class scores, already sigmoid, then M mask coefficients, 32) and ``protos [N, M,
H/4, W/4]`` (the mask prototypes at a quarter of the input's resolution).

Detections are decoded as the ``yolo`` head decodes them (Ultralytics' ``non_max_suppression``:
the best class above the score threshold, class-aware hard NMS), each kept box carrying its anchor's
mask coefficients. Its mask is then computed in the photo's pixels exactly as Ultralytics' predictor
computes it with ``retina_masks=True`` (``ultralytics/utils/ops.py``: ``process_mask_native``,
``scale_masks``, ``crop_mask``): the logits ``coefficients @ protos`` upsampled (bilinear, as torch's
``F.interpolate`` with ``align_corners=False``) by the smallest factor f of 1, 2 or 4 that puts the
letterbox's padding on whole pixels, the padding cut off, resized (bilinear) to the photo, cropped to
the box (pixel columns ``x_min <= x < x_max``, rows alike) and thresholded at 0 (``sigmoid > 0.5``).
Both bilinear steps, and the crop between them, are one linear map per axis (:func:`axis_map`),
applied only to the box's pixels. As in Ultralytics, the letterboxed input is taken to be 4 x the
prototypes (:meth:`YoloSegmentHead.check` holds the preprocess to it).

The head's answers, per detection: ``MASK_BOXES`` INT32 ``[K, 4]`` (x_min, y_min, x_max, y_max, the
end exclusive, in the photo's pixels: the box rounded out to the pixels the crop keeps) and ``MASKS``
BYTES ``[K]``: the binary mask of those pixels as a 1-bit PNG (0 and 255 as OpenCV reads it), b""
where the box holds no pixel. Rows past an image's count are b"" and zeros. One difference with
Ultralytics' predictor: it drops a detection whose mask holds no pixel; here it stays, with an empty
mask.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import ClassVar

import numpy as np
import numpy.typing as npt

from ...model_config import ConfigError, ModelConfig
from ..base import Role
from ..segmentation import decode_png, encode_png
from .base import (
    Head,
    NmsSettings,
    TensorDetections,
    anchor_free_anchors,
    best_class_candidates,
    hard_nms,
    synthetic_boxes,
    synthetic_scores,
    tensor_dims,
    xywh_to_xyxy,
)

MASK_COEFFICIENTS = 32  # Ultralytics' Segment head: nm, the prototypes and each detection's coefficients
PROTO_STRIDE = 4  # the prototypes' resolution: a quarter of the input's (what process_mask_native assumes)


def interpolation(source: int, target: int) -> np.ndarray:
    """``[target, source]``: 1-D linear interpolation as torch's ``F.interpolate(mode="bilinear", align_corners=False)``
    (and ``cv2.resize`` ``INTER_LINEAR``) samples it, without antialiasing: target pixel i reads the source at
    ``(i + 0.5) x source / target - 0.5``, clamped to the first pixel on the left and the last on the right."""
    position = np.maximum((np.arange(target) + 0.5) * (source / target) - 0.5, 0.0)
    low = np.minimum(np.floor(position).astype(np.int64), source - 1)
    high = np.minimum(low + 1, source - 1)
    weight = position - low
    out = np.zeros((target, source), np.float64)
    rows = np.arange(target)
    np.add.at(out, (rows, low), 1.0 - weight)
    np.add.at(out, (rows, high), weight)
    return out


def native_crop(proto_height: int, proto_width: int, height: int, width: int) -> tuple[int, tuple[int, int, int, int]]:
    """Ultralytics' ``process_mask_native`` geometry for a ``height`` x ``width`` photo: the upsampling factor f (1, 2
    or 4) and the region ``(top, bottom, left, right)`` of the f-times upsampled prototypes that ``scale_masks`` keeps
    (the letterbox's content, its padding cut off) and resizes to the photo."""
    gain = min(PROTO_STRIDE * proto_height / height, PROTO_STRIDE * proto_width / width)
    pad = (PROTO_STRIDE * proto_height - max(round(height * gain), 1)) | (PROTO_STRIDE * proto_width - max(round(width * gain), 1))
    factor = PROTO_STRIDE // math.gcd(PROTO_STRIDE, pad | pad // 2)
    up_height, up_width = factor * proto_height, factor * proto_width
    if (up_height, up_width) == (height, width):  # scale_masks returns them as they are
        return factor, (0, up_height, 0, up_width)
    gain = min(up_height / height, up_width / width)
    pad_w, pad_h = (up_width - max(round(width * gain), 1)) / 2, (up_height - max(round(height * gain), 1)) / 2
    top, left = round(pad_h - 0.1), round(pad_w - 0.1)
    return factor, (top, top + max(round(height * gain), 1), left, left + max(round(width * gain), 1))


def axis_map(protos: int, factor: int, start: int, stop: int, photo: int) -> np.ndarray:
    """``[photo, protos]``: along one axis, the prototypes upsampled ``factor`` times, ``start:stop`` of them kept and
    resized to ``photo`` pixels, as one linear map (float64)."""
    upsampled = interpolation(protos, factor * protos) if factor > 1 else np.eye(protos)
    return interpolation(stop - start, photo) @ upsampled[start:stop]


def crop_box(box: npt.ArrayLike, height: int, width: int) -> tuple[int, int, int, int]:
    """The pixels Ultralytics' ``crop_mask`` keeps of a box ``(x_min, y_min, x_max, y_max)``: columns ``x_min <= x <
    x_max`` and rows alike, as ``(x0, y0, x1, y1)`` with the end exclusive, within the photo."""
    x_min, y_min, x_max, y_max = (float(v) for v in np.asarray(box, np.float64).reshape(4))
    x0, x1 = (min(max(math.ceil(v), 0), width) for v in (x_min, x_max))
    y0, y1 = (min(max(math.ceil(v), 0), height) for v in (y_min, y_max))
    return x0, y0, max(x1, x0), max(y1, y0)


class PhotoMasks:
    """One photo's masks from its prototypes ``[M, h, w]``: each detection's, over the pixels its box keeps."""

    def __init__(self, protos: np.ndarray, height: int, width: int) -> None:
        self.protos = np.asarray(protos, np.float32)
        _, proto_height, proto_width = self.protos.shape
        factor, (top, bottom, left, right) = native_crop(proto_height, proto_width, height, width)
        self.rows = axis_map(proto_height, factor, top, bottom, height).astype(np.float32)  # [height, h]
        self.columns = axis_map(proto_width, factor, left, right, width).astype(np.float32)  # [width, w]

    def mask(self, coefficients: np.ndarray, crop: tuple[int, int, int, int]) -> np.ndarray:
        """The binary mask (bool) of the pixels ``crop`` (x0, y0, x1, y1) keeps, for one detection's coefficients
        ``[M]``: the logits only where the box's pixels read the prototypes."""
        x0, y0, x1, y1 = crop
        rows, columns = self.rows[y0:y1], self.columns[x0:x1]
        r0, r1 = _support(rows)
        c0, c1 = _support(columns)
        logits = np.tensordot(np.asarray(coefficients, np.float32), self.protos[:, r0:r1, c0:c1], axes=1)
        return (rows[:, r0:r1] @ logits @ columns[:, c0:c1].T) > 0


def _support(weights: np.ndarray) -> tuple[int, int]:
    """The columns ``[first, last + 1)`` some row of ``weights`` reads (all of them when none does)."""
    used = np.flatnonzero(weights.any(axis=0))
    return (int(used[0]), int(used[-1]) + 1) if len(used) else (0, weights.shape[1])


class YoloSegmentHead(Head):
    name = "yolo_segment"
    layout = "[4+C+M, A], [M, H/4, W/4]"
    exports = "YOLOv8, 11 segment"
    yolo_export = True
    task = "segment"
    extra_answers: ClassVar[tuple[Role, ...]] = (
        Role("masks", "BYTES", (-1,), name="MASKS"),
        Role("mask_boxes", "INT32", (-1, 4), name="MASK_BOXES"),
    )
    # The precision gate: a lower precision's mask of each matched detection against FP32's, by IoU.
    gate_defaults: ClassVar[dict[str, float]] = {"min_matched_mask_iou": 0.90}
    _classes = 0
    _protos: tuple[int, int, int] | None = None

    @classmethod
    def fits(cls, shapes: Sequence[tuple[int, ...]], classes: int | None) -> bool:
        """Predictions then prototypes, the rows past the boxes and classes as many as the prototypes."""
        if len(shapes) != 2 or len(shapes[0]) != 2 or len(shapes[1]) != 3:
            return False
        (channels, anchors), (coefficients, height, width) = shapes
        rest = channels - 4 - coefficients
        if min(coefficients, height, width, rest) < 1:
            return False
        return rest == classes if classes else channels < anchors

    @classmethod
    def example_shapes(cls, classes: int, height: int, width: int) -> list[tuple[int, ...]]:
        return [
            (4 + classes + MASK_COEFFICIENTS, anchor_free_anchors(height, width)),
            (MASK_COEFFICIENTS, height // PROTO_STRIDE, width // PROTO_STRIDE),
        ]

    @classmethod
    def synthetic_outputs(
        cls, shapes: Sequence[tuple[int, ...]], batch: int, candidates: int, size: tuple[int, int], rng: np.random.Generator
    ) -> list[np.ndarray]:
        """Coefficients and prototypes of a standard normal: the classes are what the coefficients leave."""
        (channels, anchors), (coefficients, height, width) = shapes
        classes = channels - 4 - coefficients
        images = []
        for _ in range(batch):
            boxes = synthetic_boxes(anchors, size, rng)
            scores = synthetic_scores(anchors, classes, candidates, rng)[0]
            images.append(np.concatenate([boxes, scores, rng.standard_normal((anchors, coefficients))], axis=1).T)
        protos = rng.standard_normal((batch, coefficients, height, width))
        return [np.stack(images).astype(np.float32), protos.astype(np.float32)]

    def input_roles(self) -> tuple[Role, ...]:
        return (
            Role("predictions", "FP32", (None, None), from_core=True),
            Role("protos", "FP32", (None, None, None), from_core=True),
        )

    def bind(self, config: ModelConfig, names: Mapping[str, str | None]) -> None:
        channels, anchors = tensor_dims(config, names["predictions"])
        coefficients, height, width = tensor_dims(config, names["protos"])
        if min(coefficients, height, width, anchors) < 1 or channels < 5 + coefficients:
            raise ConfigError(
                f"model '{config.name}': head yolo_segment reads [4 + classes + M, anchors] predictions and [M, H/4, W/4] "
                f"prototypes; the inputs are [{channels}, {anchors}] and [{coefficients}, {height}, {width}]"
            )
        self._classes = channels - 4 - coefficients
        self._protos = (coefficients, height, width)

    @property
    def num_classes(self) -> int:
        return self._classes

    def check(self, tensor_height: int, tensor_width: int) -> list[str]:
        if self._protos is None:
            return []
        _, height, width = self._protos
        if (tensor_height, tensor_width) != (PROTO_STRIDE * height, PROTO_STRIDE * width):
            return [
                f"head yolo_segment: the mask prototypes are {height}x{width}, a quarter of a "
                f"{PROTO_STRIDE * height}x{PROTO_STRIDE * width} input, but the preprocess gives {tensor_height}x{tensor_width}"
            ]
        return []

    def detect(self, raw: Mapping[str, np.ndarray], settings: NmsSettings) -> TensorDetections:
        predictions = np.asarray(raw["predictions"], dtype=np.float32)  # [N, 4 + C + M, A]
        last_class = predictions.shape[1] - np.asarray(raw["protos"]).shape[1]
        images, anchors, scores, class_ids = best_class_candidates(predictions, last_class, settings)
        boxes = xywh_to_xyxy(predictions[images, :4, anchors])
        coefficients = predictions[images, last_class:, anchors]
        return hard_nms(len(predictions), images, boxes, scores, class_ids, settings, extras={"coefficients": coefficients})

    def gate_similarities(
        self, reference: Mapping[str, np.ndarray], candidate: Mapping[str, np.ndarray], i: int, j: int
    ) -> dict[str, float]:
        """The IoU of the two masks, each placed at its MASK_BOXES (two empty masks agree)."""
        first = _placed(reference, i)
        second = _placed(candidate, j)
        x0, y0 = min(first[1][0], second[1][0]), min(first[1][1], second[1][1])
        x1, y1 = max(first[1][2], second[1][2]), max(first[1][3], second[1][3])
        canvases = []
        for mask, (bx0, by0, bx1, by1) in (first, second):
            canvas = np.zeros((max(y1 - y0, 0), max(x1 - x0, 0)), bool)
            if mask.size:
                canvas[by0 - y0 : by1 - y0, bx0 - x0 : bx1 - x0] = mask > 0
            canvases.append(canvas)
        union = np.logical_or(*canvases).sum()
        return {"matched_mask_iou": float(np.logical_and(*canvases).sum() / union) if union else 1.0}

    def extras_to_photo(
        self, found: TensorDetections, raw: Mapping[str, np.ndarray], transforms: np.ndarray, sizes: np.ndarray, boxes: np.ndarray
    ) -> dict[str, np.ndarray]:
        images, width = found.scores.shape
        masks = np.full((images, width), b"", dtype=np.object_)
        mask_boxes = np.zeros((images, width, 4), np.int32)
        protos = raw["protos"]
        coefficients = found.extras["coefficients"]
        for image in range(images):
            count = int(found.counts[image])
            if not count:
                continue
            height, photo_width = (int(v) for v in sizes[image])
            photo = PhotoMasks(protos[image], height, photo_width)
            for index in range(count):
                crop = crop_box(boxes[image, index], height, photo_width)
                mask_boxes[image, index] = crop
                if crop[2] > crop[0] and crop[3] > crop[1]:
                    masks[image, index] = encode_png(photo.mask(coefficients[image, index], crop).astype(np.uint8) * 255, binary=True)
        return {"masks": masks, "mask_boxes": mask_boxes}


HEAD = YoloSegmentHead


def _placed(extras: Mapping[str, np.ndarray], row: int) -> tuple[np.ndarray, tuple[int, int, int, int]]:
    """Detection ``row``'s mask (``[h, w]``, empty where it covers no pixel) and its box (x0, y0, x1, y1)."""
    x0, y0, x1, y1 = (int(v) for v in np.asarray(extras["mask_boxes"])[row])
    data = bytes(np.asarray(extras["masks"], dtype=object)[row])
    return (decode_png(data) if data else np.zeros((0, 0), np.uint8)), (x0, y0, x1, y1)
