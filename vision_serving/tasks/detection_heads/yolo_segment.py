"""``yolo_segment``: Ultralytics' instance segmentation outputs (``task: segment``: YOLOv8/11-seg).

Two outputs: ``predictions [N, 4 + C + M, A]`` (per anchor: box centre x, y, width, height in
model-input pixels, C class scores, already sigmoid, then M mask coefficients, 32) and ``protos [N, M,
H/4, W/4]`` (the mask prototypes at a quarter of the input's resolution).

Detections are decoded as every anchor-free head's (:mod:`.anchor_free`, Ultralytics' ``non_max_suppression``:
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

from ...model_config import ModelConfig
from ..base import Role
from ..segmentation import decode_png, encode_png
from .anchor_free import AnchorFreeHead
from .base import ExtraAnswer, FloatArray, TensorDetections, tensor_dims

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


class YoloSegmentHead(AnchorFreeHead):
    name = "yolo_segment"
    extra_answers: ClassVar[tuple[ExtraAnswer, ...]] = (
        ExtraAnswer("masks", "BYTES", (-1,), name="MASKS", drawing="masks"),
        ExtraAnswer("mask_boxes", "INT32", (-1, 4), name="MASK_BOXES", drawing="masks"),
    )
    # The precision gate: a lower precision's mask of each matched detection against FP32's, by IoU.
    gate_defaults: ClassVar[dict[str, float]] = {"min_matched_mask_iou": 0.90}
    extra_inputs: ClassVar[tuple[Role, ...]] = (Role("protos", "FP32", (None, None, None), from_core=True),)
    extra_layout = " + M"
    extra_inputs_layout: ClassVar[str] = " and [M, H/4, W/4] prototypes"
    _protos: tuple[int, int, int] | None = None

    def extra_rows(self, dims: Mapping[str, Sequence[int]]) -> int:
        """As many mask coefficients as prototypes."""
        return int(dims["protos"][0])

    def bind(self, config: ModelConfig, names: Mapping[str, str | None]) -> None:
        super().bind(config, names)
        coefficients, height, width = tensor_dims(config, names["protos"])
        self._protos = (coefficients, height, width)

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

    def carried(self, rows: FloatArray) -> tuple[FloatArray | None, dict[str, np.ndarray]]:
        """Each candidate's mask coefficients ``[M, coefficients]``."""
        return None, {"coefficients": rows}

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

    def shift_extras(self, extras: Mapping[str, np.ndarray], offsets: np.ndarray) -> dict[str, np.ndarray]:
        """Each mask's box moved by its tile's origin (the mask itself is the same pixels)."""
        origins = np.asarray(offsets, np.int32).reshape(-1, 2)
        return {
            **extras,
            "mask_boxes": np.asarray(extras["mask_boxes"], np.int32).reshape(-1, 4) + np.concatenate([origins, origins], axis=1),
        }

    def merged_extras(
        self, extras: Mapping[str, np.ndarray], keepers: np.ndarray, members: Sequence[Sequence[int]]
    ) -> dict[str, np.ndarray]:
        """A merged detection's mask: the union of its members' masks (SAHI merges them so, as polygons), over the union
        of their mask boxes; a lone detection's as it is."""
        masks, boxes = np.asarray(extras["masks"], dtype=object), np.asarray(extras["mask_boxes"], np.int32).reshape(-1, 4)
        out_masks = np.full(len(members), b"", dtype=np.object_)
        out_boxes = np.zeros((len(members), 4), np.int32)
        for row, group in enumerate(members):
            placed = [index for index in group if boxes[index, 2] > boxes[index, 0] and boxes[index, 3] > boxes[index, 1]]
            if len(group) == 1 or not placed:
                out_masks[row], out_boxes[row] = masks[group[0]], boxes[group[0]]
                continue
            x0, y0 = boxes[placed, 0].min(), boxes[placed, 1].min()
            x1, y1 = boxes[placed, 2].max(), boxes[placed, 3].max()
            canvas = np.zeros((y1 - y0, x1 - x0), bool)
            for index in placed:
                if masks[index]:
                    bx0, by0, bx1, by1 = (int(v) for v in boxes[index])
                    canvas[by0 - y0 : by1 - y0, bx0 - x0 : bx1 - x0] |= decode_png(bytes(masks[index])) > 0
            out_boxes[row] = (x0, y0, x1, y1)
            out_masks[row] = encode_png(canvas.astype(np.uint8) * 255, binary=True)
        return {"masks": out_masks, "mask_boxes": out_boxes}


HEAD = YoloSegmentHead


def _placed(extras: Mapping[str, np.ndarray], row: int) -> tuple[np.ndarray, tuple[int, int, int, int]]:
    """Detection ``row``'s mask (``[h, w]``, empty where it covers no pixel) and its box (x0, y0, x1, y1)."""
    x0, y0, x1, y1 = (int(v) for v in np.asarray(extras["mask_boxes"])[row])
    data = bytes(np.asarray(extras["masks"], dtype=object)[row])
    return (decode_png(data) if data else np.zeros((0, 0), np.uint8)), (x0, y0, x1, y1)
