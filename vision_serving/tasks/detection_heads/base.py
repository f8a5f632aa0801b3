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
    required) and ``num_keypoints``, and implement ``input_roles``, ``bind`` and ``detect``.

    A head whose output a YOLO export can carry (``yolo_export``) also states its facts, which
    ``new-pipeline --from yolo`` and the benchmarks read from the registry instead of repeating them:
    its ``layout`` and who ``exports`` it (the messages and the configs' comments), whether the model
    did the NMS (``nms_in_model``), :meth:`fits` (which output shapes it reads), :meth:`example_shapes`
    (the outputs of a model of some input size) and :meth:`synthetic_outputs` (raw outputs with a
    known number of candidates, for benchmarks and tests)."""

    name: ClassVar[str]
    parameters: ClassVar[dict[str, tuple[Callable[[str], Any], bool]]] = {}
    num_keypoints: int = 0
    keypoint_values: int = 2  # per keypoint: x, y (2) or x, y, score (3)
    task: ClassVar[str] = "detect"  # the Ultralytics task whose exports carry this head's output (yolo_export heads)
    layout: ClassVar[str] = ""  # the per-image output dims it reads, e.g. "[4 + C, A]"
    exports: ClassVar[str] = ""  # the models that export that layout
    yolo_export: ClassVar[bool] = False  # new-pipeline --from yolo considers it
    nms_in_model: ClassVar[bool] = False  # the model suppressed the boxes already (no IoU test here)
    # Outputs this head adds to the detection task's (boxes, scores, class ids, labels, count, keypoints), filled by
    # :meth:`extras_to_photo`.
    extra_answers: ClassVar[tuple[Role, ...]] = ()

    @classmethod
    def fits(cls, shapes: Sequence[tuple[int, ...]], classes: int | None) -> bool:
        """Whether the model's outputs (per-image dims, batch dim left out) are this head's, for ``classes``
        classes (None: unknown, then the shape alone decides)."""
        return False

    # The config parameters of the model :meth:`example_shapes` describes (a pose model's keypoint shape).
    example_parameters: ClassVar[dict[str, str]] = {}

    @classmethod
    def example_shapes(cls, classes: int, height: int, width: int) -> list[tuple[int, ...]]:
        """The per-image output dims a model of this head gives for ``classes`` classes at that input size."""
        raise NotImplementedError(f"head {cls.name} states no example shapes")

    @classmethod
    def synthetic_outputs(
        cls, shapes: Sequence[tuple[int, ...]], batch: int, candidates: int, size: tuple[int, int], rng: np.random.Generator
    ) -> list[np.ndarray]:
        """Raw outputs ``[batch, *shape]`` in which every image has exactly ``candidates`` anchors (rows) above a
        score threshold of 0.25 and every other one below it, boxes spread over a ``size`` (height, width) input."""
        raise NotImplementedError(f"head {cls.name} makes no synthetic outputs")

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


def synthetic_boxes(anchors: int, size: tuple[int, int], rng: np.random.Generator) -> FloatArray:
    """``[anchors, 4]`` boxes (centre x, y, width, height) of 8 to 60 pixels spread over a ``size`` input."""
    height, width = size
    centres = [rng.uniform(20, width - 20, anchors), rng.uniform(20, height - 20, anchors)]
    return np.stack([*centres, rng.uniform(8, 60, anchors), rng.uniform(8, 60, anchors)], axis=-1).astype(np.float32)


def synthetic_scores(anchors: int, classes: int, candidates: int, rng: np.random.Generator) -> tuple[FloatArray, IntArray]:
    """``[anchors, classes]`` scores below 0.2 but for ``candidates`` anchors with one class in 0.3 .. 0.99, and those anchors."""
    scores = rng.uniform(0.0, 0.2, size=(anchors, classes)).astype(np.float32)
    chosen = rng.choice(anchors, size=candidates, replace=False)
    scores[chosen, rng.integers(0, classes, candidates)] = rng.uniform(0.3, 0.99, candidates)
    return scores, chosen.astype(np.int32)


def anchor_free_anchors(height: int, width: int, strides: Sequence[int] = (8, 16, 32)) -> int:
    """Anchors of an anchor-free YOLO head at that input size: one per cell of each stride's grid."""
    return sum((height // stride) * (width // stride) for stride in strides)


def best_class_candidates(
    predictions: FloatArray, last_class: int, settings: NmsSettings
) -> tuple[IntArray, IntArray, FloatArray, IntArray]:
    """Ultralytics' candidates of anchor-free outputs ``[N, 4 + C + extra, A]`` (class scores in rows 4 to
    ``last_class``): each anchor whose best class score is above its image's threshold, as (image, anchor, score, class),
    image by image in anchor order. The max over the strided class axis is cheap, its argmax is not: the argmax is
    taken only where an anchor can be kept."""
    best = predictions[:, 4:last_class, :].max(axis=1)  # [N, A]
    images, anchors = np.nonzero(best > settings.score_thresholds[:, None])
    class_ids = predictions[images, 4:last_class, anchors].argmax(axis=-1).astype(np.int32)
    return images, anchors, best[images, anchors], class_ids


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
    m = min(width, MAX_NMS)
    if m < width:  # the m best of each image, then sorted (stable: ties keep anchor order)
        part = np.argpartition(-masked, m - 1, axis=1)[:, :m]
        part.sort(axis=1)
        order = np.take_along_axis(part, np.argsort(-np.take_along_axis(masked, part, axis=1), axis=1, kind="stable"), axis=1)
    else:
        order = np.argsort(-masked, axis=1, kind="stable")
    alive = np.take_along_axis(masked, order, axis=1) > -np.inf
    n = count
    c_scores = np.take_along_axis(masked, order, axis=1)
    c_scores[~alive] = 0
    c_classes = np.take_along_axis(_side_by_side(np.asarray(class_ids, np.int32), images, slot, (n, width)), order, axis=1)
    c_boxes = np.take_along_axis(_side_by_side(np.asarray(boxes, np.float32), images, slot, (n, width)), order[..., None], axis=1)
    offset = np.float32(0) if settings.class_agnostic else c_classes.astype(np.float32) * np.float32(MAX_WH)
    nms_boxes = (c_boxes + np.asarray(offset, dtype=np.float32)[..., None]).astype(np.float32)
    areas = np.asarray((nms_boxes[..., 2] - nms_boxes[..., 0]) * (nms_boxes[..., 3] - nms_boxes[..., 1]), dtype=np.float32)
    limit = min(settings.max_detections, m)
    kept = np.zeros((n, limit), np.int64)
    counts = np.zeros((n,), np.int32)
    rows = np.arange(n)
    thresholds = np.asarray(settings.iou_thresholds, dtype=np.float32)[:, None]
    for _ in range(limit):
        has = alive.any(axis=1)
        if not has.any():
            break
        top = np.argmax(alive, axis=1)  # the first alive candidate: the best one left
        kept[rows[has], counts[has]] = top[has]
        counts += has
        alive &= ~(_iou_one_to_many(nms_boxes[rows, top], nms_boxes, areas) > thresholds)
        alive[rows, top] = False
    k = int(counts.max())
    kept = kept[:, :k]
    padding = np.arange(k)[None, :] >= counts[:, None]
    out_boxes = np.take_along_axis(c_boxes, kept[..., None], axis=1)
    out_scores = np.take_along_axis(c_scores, kept, axis=1)
    out_classes = np.take_along_axis(c_classes, kept, axis=1)
    out_boxes[padding] = 0
    out_scores[padding] = 0
    out_classes[padding] = 0

    def kept_values(values: np.ndarray) -> np.ndarray:
        """Per-candidate values gathered as the boxes are: side by side, sorted, the kept ones; zero past a count."""
        side = _side_by_side(np.asarray(values), images, slot, (n, width))
        trailing = [1] * (side.ndim - 2)
        chosen = np.take_along_axis(
            np.take_along_axis(side, order.reshape(*order.shape, *trailing), axis=1), kept.reshape(*kept.shape, *trailing), axis=1
        )
        chosen[padding] = 0
        return chosen

    return TensorDetections(
        out_boxes.astype(np.float32),
        out_scores.astype(np.float32),
        out_classes.astype(np.int32),
        counts,
        None if keypoints is None else kept_values(np.asarray(keypoints, np.float32)),
        {name: kept_values(values) for name, values in extras.items()},
    )
