"""What the anchor-free heads share: Ultralytics' outputs ``[N, 4 + C + extra, A]``, decoded as its ``non_max_suppression``.

Per anchor (a column): the box's centre x, y, width and height in model-input pixels, C class scores (already
sigmoid), then the head's ``extra`` rows (none for ``yolo``, a pose model's keypoints, a segmenter's mask
coefficients, an oriented box's angle). An anchor is a candidate when its best class score is greater than its
image's score threshold (:func:`best_class_candidates`), its class that best class, single label per box
(``ultralytics/utils/nms.py``); each candidate carries its extra rows through the suppression.

A head declares its extra rows (:meth:`AnchorFreeHead.extra_rows`), the other core outputs it reads
(``extra_inputs``) and what its candidates carry (:meth:`AnchorFreeHead.carried`); the boxes become corners and go
through class-aware (or agnostic) hard NMS (:func:`.base.hard_nms`) unless the head suppresses its own way
(:meth:`AnchorFreeHead.suppress`: the oriented boxes' rotated NMS).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ...model_config import ConfigError, ModelConfig
from ..base import Role
from .base import FloatArray, Head, IntArray, NmsSettings, TensorDetections, hard_nms, tensor_dims, xywh_to_xyxy

PREDICTIONS = Role("predictions", "FP32", (None, None), from_core=True)


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


@dataclass(frozen=True)
class Candidates:
    """A batch's candidates, image by image in anchor order (:func:`best_class_candidates`), one row each."""

    count: int  # the images in the batch
    images: IntArray  # [M]: the image each belongs to
    boxes: FloatArray  # [M, 4]: centre x, y, width, height in model-input pixels
    rows: FloatArray  # [M, extra]: the rows past the classes
    scores: FloatArray  # [M]
    class_ids: IntArray  # [M]


class AnchorFreeHead(Head):
    """``predictions [N, 4 + C + extra, A]``, and the ``extra_inputs`` a head reads beside them."""

    # The core outputs read beside the predictions (a segmenter's prototypes), by role.
    extra_inputs: ClassVar[tuple[Role, ...]] = ()
    # What the extra rows and inputs are, for the refusal of tensors too small for them (" + 1": an angle).
    extra_layout: str = ""
    extra_inputs_layout: ClassVar[str] = ""  # e.g. " and [M, H/4, W/4] prototypes"
    _classes = 0

    def extra_rows(self, dims: Mapping[str, Sequence[int]]) -> int:
        """The rows past the classes, from every input's per-image dims by role (the config's, or a batch's)."""
        return 0

    def carried(self, rows: FloatArray) -> tuple[FloatArray | None, dict[str, np.ndarray]]:
        """What each candidate carries through NMS from its extra rows ``[M, extra]``: keypoints ``[M, P, D]`` (or None)
        and extras by name (``[M, ...]``, :attr:`TensorDetections.extras`)."""
        return None, {}

    def input_roles(self) -> tuple[Role, ...]:
        return (PREDICTIONS, *self.extra_inputs)

    def bind(self, config: ModelConfig, names: Mapping[str, str | None]) -> None:
        dims = {role.role: tensor_dims(config, names[role.role]) for role in self.input_roles()}
        channels, anchors = dims["predictions"]
        extra = self.extra_rows(dims)
        empty = any(min(dims[role.role], default=1) < 1 for role in self.extra_inputs)
        if channels < 5 + extra or anchors < 1 or empty:
            found = " and ".join(f"[{', '.join(map(str, value))}]" for value in dims.values())
            raise ConfigError(
                f"model '{config.name}': head {self.name} reads [4 + classes{self.extra_layout}, anchors] predictions"
                f"{self.extra_inputs_layout}; the input{'s are' if len(dims) > 1 else ' is'} {found}"
            )
        self._classes = channels - 4 - extra

    @property
    def num_classes(self) -> int:
        return self._classes

    def detect(self, raw: Mapping[str, np.ndarray], settings: NmsSettings) -> TensorDetections:
        predictions = np.asarray(raw["predictions"], dtype=np.float32)  # [N, 4 + C + extra, A]
        last_class = predictions.shape[1] - self.extra_rows({role.role: np.shape(raw[role.role])[1:] for role in self.input_roles()})
        images, anchors, scores, class_ids = best_class_candidates(predictions, last_class, settings)
        boxes, rows = predictions[images, :4, anchors], predictions[images, last_class:, anchors]
        return self.suppress(Candidates(len(predictions), images, boxes, rows, scores, class_ids), settings)

    def suppress(self, candidates: Candidates, settings: NmsSettings) -> TensorDetections:
        """The candidates -> the kept ones: their boxes as corners through hard NMS, each carrying what :meth:`carried`
        takes of its rows."""
        c = candidates
        keypoints, extras = self.carried(c.rows)
        return hard_nms(c.count, c.images, xywh_to_xyxy(c.boxes), c.scores, c.class_ids, settings, keypoints, extras)
