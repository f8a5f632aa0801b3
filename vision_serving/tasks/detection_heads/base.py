"""What a detection head provides, and what heads share: detections in model-input pixels, hard NMS.

A head (:class:`Head`) reads its own config parameters, says which core outputs it reads (by
role) and turns them into :class:`TensorDetections`: per image, best first, boxes
``(x_min, y_min, x_max, y_max)`` in pixels of the model's input tensor. The detection task maps
them to the photo's pixels.

:func:`hard_nms` is greedy non-maximum suppression as ``torchvision.ops.nms`` computes it and
as Ultralytics' and the original YOLOv5's ``non_max_suppression`` apply it
(``ultralytics/utils/nms.py``, ``yolov5/utils/general.py``): candidates sorted by score, at most
``MAX_NMS`` of them, class-aware by offsetting each box by ``class x MAX_WH`` pixels (so boxes of
different classes never overlap; the offset is applied in float32 as they do), a candidate
suppressed when its IoU with a kept box is greater than the threshold, at most
``max_detections`` kept. Vectorized over the batch: each iteration keeps one box per image, for
every image at once.
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from ...model_config import ConfigError, ModelConfig
from ..base import Role

FloatArray = npt.NDArray[np.float32]
IntArray = npt.NDArray[np.int32]

# Ultralytics' and YOLOv5's non_max_suppression: the per-class coordinate offset and the candidate cap.
MAX_WH = 7680
MAX_NMS = 30000


@dataclass(frozen=True)
class TensorDetections:
    """Per image, best first, in pixels of the model input: ``boxes [N, K, 4]`` (x_min, y_min, x_max,
    y_max), ``scores [N, K]``, ``class_ids [N, K]``, ``counts [N]``, ``keypoints [N, K, P, D]`` (x, y, and a
    score where D is 3) for heads that have them; rows past an image's count are zero."""

    boxes: FloatArray
    scores: FloatArray
    class_ids: IntArray
    counts: IntArray
    keypoints: FloatArray | None = None
    # What else a head keeps per detection, by its own name: ``[N, K, ...]`` (a segmenter's mask coefficients, an
    # oriented box's angle), for its :meth:`Head.extras_to_photo`.
    extras: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)

    @classmethod
    def empty(cls, images: int, keypoints: int = 0) -> TensorDetections:
        return cls(
            np.zeros((images, 0, 4), np.float32),
            np.zeros((images, 0), np.float32),
            np.zeros((images, 0), np.int32),
            np.zeros((images,), np.int32),
            np.zeros((images, 0, keypoints, 2), np.float32) if keypoints else None,
        )


@dataclass(frozen=True)
class NmsSettings:
    """One batch's suppression settings: per-image score and IoU thresholds, the cap, class awareness."""

    score_thresholds: FloatArray  # [N]
    iou_thresholds: FloatArray  # [N]
    max_detections: int
    class_agnostic: bool = False


@dataclass(frozen=True)
class ExtraAnswer(Role):
    """An output a head adds to the detection task's, and the client drawing that shows it: ``drawing`` names
    ``devtools/clients/draw_<drawing>.py`` (its ``painter`` and ``fields``), which the detection client finds by that
    name; empty: the client draws and lists nothing of it."""

    drawing: str = ""


def boolean(text: str) -> bool:
    value = text.strip().lower()
    if value not in ("true", "false"):
        raise ValueError(f"expected true or false, got {text!r}")
    return value == "true"


def numbers(kind: type) -> Callable[[str], tuple[Any, ...]]:
    def parse(text: str) -> tuple[Any, ...]:
        return tuple(kind(item) for item in text.split(",") if item.strip())

    return parse


class Head(ABC):
    """One output format. Subclasses set ``name``, ``parameters`` (their own config keys: parser,
    required) and ``num_keypoints``, and implement ``input_roles``, ``bind`` and ``detect``; a head that
    answers more than boxes declares its ``extra_answers`` and fills them in :meth:`extras_to_photo`.

    What a model's export of a head looks like (which output shapes are its, the Ultralytics task) is no
    part of serving: :mod:`builders.families.yolo_exports` states it, by the head's name."""

    name: ClassVar[str]
    parameters: ClassVar[dict[str, tuple[Callable[[str], Any], bool]]] = {}
    num_keypoints: int = 0
    keypoint_values: int = 2  # per keypoint: x, y (2) or x, y, score (3)
    # Outputs this head adds to the detection task's (boxes, scores, class ids, labels, count, keypoints), filled by
    # :meth:`extras_to_photo`, each with the client drawing that shows it.
    extra_answers: ClassVar[tuple[ExtraAnswer, ...]] = ()

    def __init__(self, values: Mapping[str, Any]) -> None:
        """``values``: this head's parameters, parsed."""
        self.values = dict(values)

    @classmethod
    def from_parameters(cls, parameters: Mapping[str, str]) -> Head:
        """From the config's string parameters that are this head's (every required one present)."""
        missing = sorted(key for key, (_, required) in cls.parameters.items() if required and key not in parameters)
        if missing:
            raise ValueError(f"head {cls.name}: missing parameter(s) {', '.join(missing)}")
        values: dict[str, Any] = {}
        for key, text in parameters.items():
            try:
                values[key] = cls.parameters[key][0](text)
            except ValueError as error:
                raise ValueError(f"head {cls.name}: parameter {key}: {error}") from None
        return cls(values)

    @abstractmethod
    def input_roles(self) -> tuple[Role, ...]:
        """The core outputs this head reads (``from_core`` roles)."""

    @abstractmethod
    def bind(self, config: ModelConfig, names: Mapping[str, str | None]) -> None:
        """Check the resolved tensors' dims (``ConfigError``) and learn what they say (class count...)."""

    @property
    @abstractmethod
    def num_classes(self) -> int | None:
        """Classes the outputs carry; None when they do not say (then the labels file does)."""

    @abstractmethod
    def detect(self, raw: Mapping[str, np.ndarray], settings: NmsSettings) -> TensorDetections:
        """A batch of raw outputs (by role) -> detections in model-input pixels."""

    def check(self, tensor_height: int, tensor_width: int) -> list[str]:
        """Problems of this head with a model input of that size (the consistency check)."""
        return []

    # The head's own precision-gate checks (``min_<metric>`` -> default), judged on the matched detections' extras.
    gate_defaults: ClassVar[dict[str, float]] = {}

    def gate_similarities(
        self, reference: Mapping[str, np.ndarray], candidate: Mapping[str, np.ndarray], i: int, j: int
    ) -> dict[str, float]:
        """For a pair of matched detections (row ``i`` of one image's extra answers by role in the reference, row ``j`` in
        the candidate): each of the head's gate metrics (its ``gate_defaults`` keys without ``min_``), in [0, 1]."""
        return {}

    def boxes_to_photo(self, found: TensorDetections, transforms: np.ndarray) -> np.ndarray | None:
        """The head's own boxes ``[N, K, 4]`` in the photo's pixels (an oriented box's bounds, mapped as its reference
        maps it); None: the task maps ``found.boxes`` through each image's transform."""
        return None

    def extras_to_photo(
        self, found: TensorDetections, raw: Mapping[str, np.ndarray], transforms: np.ndarray, sizes: np.ndarray, boxes: np.ndarray
    ) -> dict[str, np.ndarray]:
        """The extra answers by role, ``[N, K, ...]`` per image and detection (rows past a count empty), in the photo's
        terms: ``found`` as :meth:`detect` gave it, the batch's ``raw`` outputs by role, each image's ``transforms [N, 4]``
        (``tensor = image * scale + offset``), ``sizes [N, 2]`` (height, width) and ``boxes [N, K, 4]`` in its pixels."""
        return {}

    # Tiled inference (:mod:`vision_serving.tiling`): each tile's answers are those of a photo of the tile, its boxes
    # clipped to it where ``clips_to_tile`` (as a photo's are to the photo); ``tile_merges``: how its detections may
    # merge across tiles (:mod:`vision_serving.tile_merge`).
    clips_to_tile: ClassVar[bool] = True
    tile_merges: ClassVar[tuple[str, ...]] = ("greedy_nmm", "nms")

    def shift_extras(self, extras: Mapping[str, np.ndarray], offsets: np.ndarray) -> dict[str, np.ndarray]:
        """The extra answers of detections found in tiles (by role, ``[n, ...]``, in each tile's pixels) moved into the
        photo's pixels by each one's tile origin ``offsets [n, 2]`` (x, y); the head's answers that are not positions
        stay as they are."""
        return dict(extras)

    def merged_extras(
        self, extras: Mapping[str, np.ndarray], keepers: np.ndarray, members: Sequence[Sequence[int]]
    ) -> dict[str, np.ndarray]:
        """The extra answers (by role, ``[n, ...]`` in the photo's pixels) of the merged detections: for each, its
        ``keepers`` entry (the best of those merged, :class:`vision_serving.tile_merge.Merged`) and its ``members`` (every
        detection merged into it, the keeper first). By default each one's keeper's."""
        return {role: np.asarray(values)[np.asarray(keepers, np.int64)] for role, values in extras.items()}


def tensor_dims(config: ModelConfig, name: str | None) -> list[int]:
    for item in config.input:
        if item.name == name:
            return [int(d) for d in item.dims]
    raise ConfigError(f"model '{config.name}': no input named '{name}'")


def xywh_to_xyxy(boxes: FloatArray) -> FloatArray:
    """Centre, width, height -> corners, in float32 as Ultralytics' ``xywh2xyxy`` (``xy -/+ wh / 2``)."""
    xy, half = boxes[..., :2], boxes[..., 2:] / np.float32(2)
    return np.concatenate([xy - half, xy + half], axis=-1).astype(np.float32)


def _side_by_side(values: np.ndarray, images: IntArray, slot: IntArray, shape: tuple[int, int]) -> np.ndarray:
    """Per-candidate ``values [M, ...]`` -> ``[count, width, ...]``: candidate i at ``(images[i], slot[i])``, zeros elsewhere."""
    out = np.zeros((*shape, *values.shape[1:]), values.dtype)
    out[images, slot] = values
    return out


def _iou_one_to_many(top: FloatArray, boxes: FloatArray, areas: FloatArray) -> FloatArray:
    """IoU ``[N, M]`` of ``top [N, 4]`` with ``boxes [N, M, 4]``, in float32 as torchvision's ``nms`` (a
    zero-area pair gives NaN, which suppresses nothing)."""
    t = top[:, None, :]
    width = np.clip(np.minimum(t[..., 2], boxes[..., 2]) - np.maximum(t[..., 0], boxes[..., 0]), 0, None)
    height = np.clip(np.minimum(t[..., 3], boxes[..., 3]) - np.maximum(t[..., 1], boxes[..., 1]), 0, None)
    inter = width * height
    area_top = (t[..., 2] - t[..., 0]) * (t[..., 3] - t[..., 1])
    with np.errstate(invalid="ignore", divide="ignore"):
        return (inter / (area_top + areas - inter)).astype(np.float32)


def _best_first(masked: FloatArray) -> np.ndarray:
    """Each image's candidate slots ``[N, m]`` by descending score (``masked [N, W]``, -inf past its candidates), the
    ``m = min(W, MAX_NMS)`` best of them (stable: ties keep anchor order)."""
    width = masked.shape[1]
    m = min(width, MAX_NMS)
    if m == width:
        return np.argsort(-masked, axis=1, kind="stable")
    part = np.argpartition(-masked, m - 1, axis=1)[:, :m]  # the m best of each image, then sorted
    part.sort(axis=1)
    return np.take_along_axis(part, np.argsort(-np.take_along_axis(masked, part, axis=1), axis=1, kind="stable"), axis=1)


def _greedy_keep(nms_boxes: FloatArray, alive: np.ndarray, iou_thresholds: FloatArray, limit: int) -> tuple[np.ndarray, IntArray]:
    """Greedy suppression of each image's candidates ``nms_boxes [N, m, 4]``, best first (``alive [N, m]``: the real
    ones), every image at once: each iteration keeps each image's best candidate left and drops those whose IoU with
    it is greater than the image's threshold. The kept slots ``[N, limit]`` and the counts ``[N]``."""
    n = len(nms_boxes)
    alive = alive.copy()
    areas = np.asarray((nms_boxes[..., 2] - nms_boxes[..., 0]) * (nms_boxes[..., 3] - nms_boxes[..., 1]), dtype=np.float32)
    kept = np.zeros((n, limit), np.int64)
    counts = np.zeros((n,), np.int32)
    rows = np.arange(n)
    thresholds = np.asarray(iou_thresholds, dtype=np.float32)[:, None]
    for _ in range(limit):
        has = alive.any(axis=1)
        if not has.any():
            break
        top = np.argmax(alive, axis=1)  # the first alive candidate: the best one left
        kept[rows[has], counts[has]] = top[has]
        counts += has
        alive &= ~(_iou_one_to_many(nms_boxes[rows, top], nms_boxes, areas) > thresholds)
        alive[rows, top] = False
    return kept, counts


def hard_nms(
    count: int,
    images: IntArray,
    boxes: FloatArray,
    scores: FloatArray,
    class_ids: IntArray,
    settings: NmsSettings,
    keypoints: FloatArray | None = None,
    extras: Mapping[str, np.ndarray] | None = None,
) -> TensorDetections:
    """The candidates of ``count`` images, those that passed the score filter, one row each: the image it
    belongs to (``images [M]``, non-decreasing, candidates of one image in anchor order, as ``np.nonzero``
    gives them), ``boxes [M, 4]`` (corners), ``scores [M]``, ``class_ids [M]``, and ``keypoints [M, P, D]`` and
    ``extras`` (name -> ``[M, ...]``) for heads that have them -> the kept ones, best first (see the module)."""
    extras = dict(extras or {})
    if not len(images):
        return dataclasses.replace(
            TensorDetections.empty(count),
            keypoints=None if keypoints is None else np.zeros((count, 0, *keypoints.shape[1:]), np.float32),
            extras={name: np.zeros((count, 0, *values.shape[1:]), values.dtype) for name, values in extras.items()},
        )
    # Each image's candidates side by side ([count, width], padded): the sort and NMS never see the other anchors.
    per_image = np.bincount(images, minlength=count)
    width = int(per_image.max())
    slot = np.arange(len(images)) - np.concatenate([[0], np.cumsum(per_image)[:-1]])[images]
    masked = np.full((count, width), -np.inf, np.float32)  # scores; -inf where an image has fewer candidates
    masked[images, slot] = scores
    order = _best_first(masked)
    alive = np.take_along_axis(masked, order, axis=1) > -np.inf
    c_scores = np.take_along_axis(masked, order, axis=1)
    c_scores[~alive] = 0
    c_classes = np.take_along_axis(_side_by_side(np.asarray(class_ids, np.int32), images, slot, (count, width)), order, axis=1)
    c_boxes = np.take_along_axis(_side_by_side(np.asarray(boxes, np.float32), images, slot, (count, width)), order[..., None], axis=1)
    offset = np.float32(0) if settings.class_agnostic else c_classes.astype(np.float32) * np.float32(MAX_WH)
    nms_boxes = (c_boxes + np.asarray(offset, dtype=np.float32)[..., None]).astype(np.float32)
    kept, counts = _greedy_keep(nms_boxes, alive, settings.iou_thresholds, min(settings.max_detections, order.shape[1]))
    k = int(counts.max())
    kept = kept[:, :k]
    padding = np.arange(k)[None, :] >= counts[:, None]

    def kept_of(ordered: np.ndarray) -> np.ndarray:
        """The kept ones of per-slot values in score order ``[N, m, ...]``; zero past a count."""
        chosen = np.take_along_axis(ordered, kept.reshape(*kept.shape, *[1] * (ordered.ndim - 2)), axis=1)
        chosen[padding] = 0
        return chosen

    def kept_values(values: np.ndarray) -> np.ndarray:
        """Per-candidate values gathered as the boxes are: side by side, sorted, the kept ones."""
        side = _side_by_side(np.asarray(values), images, slot, (count, width))
        return kept_of(np.take_along_axis(side, order.reshape(*order.shape, *[1] * (side.ndim - 2)), axis=1))

    out_boxes, out_scores, out_classes = kept_of(c_boxes), kept_of(c_scores), kept_of(c_classes)
    return TensorDetections(
        out_boxes.astype(np.float32),
        out_scores.astype(np.float32),
        out_classes.astype(np.int32),
        counts,
        None if keypoints is None else kept_values(np.asarray(keypoints, np.float32)),
        {name: kept_values(values) for name, values in extras.items()},
    )
