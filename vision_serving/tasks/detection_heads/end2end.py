"""End-to-end outputs ``[N, K, 6 + extra]``: rows of kept detections, best first, no NMS left to do.

Per row: x_min, y_min, x_max, y_max in model-input pixels (an oriented box's centre x, y, width and
height), its score, its class id, then the task's ``extra`` columns (a segmenter's mask coefficients,
a pose model's keypoints, an oriented box's angle), as Ultralytics exports them in two ways:

- YOLO26's (and YOLOv10's) NMS-free head, ``export(nms=False)``: the one-to-one branch's top K
  (anchor, class) pairs by score (``Detect.postprocess``); the metadata says ``end2end: True``;
- NMS in the graph, ``export(nms=True)`` of a one-to-many head (``NMSModel``): the kept rows, zero-padded.

Kept as Ultralytics' ``non_max_suppression`` keeps end-to-end rows (``ultralytics/utils/nms.py``): the rows
whose score is greater than the image's score threshold, in the model's order, at most ``max_detections``.
**No NMS is run on them**, and the IoU threshold and class-agnostic setting do not apply: the one-to-one
head was trained to give one row per object (suppressing its rows would drop true neighbours the model
kept apart, and Ultralytics' predictor runs none), and an in-graph NMS already ran at the export's ``iou``.
The class count is not in the rows: the labels file gives it.

:class:`EndToEnd` reads such rows for any anchor-free head's task: a head of the ``[4 + C + extra, A]``
layout (:mod:`.anchor_free`) becomes its end-to-end twin by subclassing both (``class X(YoloSegmentHead,
EndToEnd)``): the task's hooks (its extra rows and inputs, what each row carries, its answers in the photo's
terms, its tiling and gate) are the same; only the reading of the core's output differs.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ...model_config import ConfigError, ModelConfig
from ..base import Role
from .anchor_free import AnchorFreeHead
from .base import FloatArray, IntArray, NmsSettings, TensorDetections, tensor_dims

COLUMNS = 6  # x_min, y_min, x_max, y_max, score, class: what every row has before the task's extra columns

DETECTIONS = Role("detections", "FP32", (None, None), from_core=True)


def kept_rows(rows: FloatArray, settings: NmsSettings) -> tuple[FloatArray, IntArray]:
    """Each image's rows ``[N, K, 6 + extra]`` whose score is above its threshold, in the model's order, at most
    ``max_detections``: ``[N, k, 6 + extra]`` (zeros past a count) and the counts ``[N]``."""
    valid = rows[..., 4] > settings.score_thresholds[:, None]
    counts = np.minimum(valid.sum(axis=1), settings.max_detections).astype(np.int32)
    k = int(counts.max()) if len(counts) else 0
    order = np.argsort(~valid, axis=1, kind="stable")[:, :k]  # the valid rows first, each image's in the model's order
    chosen = np.take_along_axis(rows, order[..., None], axis=1)
    chosen[np.arange(k)[None, :] >= counts[:, None]] = 0
    return chosen, counts


class EndToEnd(AnchorFreeHead):
    """``detections [N, K, 6 + extra]`` and the ``extra_inputs`` the task reads beside them (see the module)."""

    def input_roles(self) -> tuple[Role, ...]:
        return (DETECTIONS, *self.extra_inputs)

    def bind(self, config: ModelConfig, names: Mapping[str, str | None]) -> None:
        dims = {role.role: tensor_dims(config, names[role.role]) for role in self.input_roles()}
        rows, columns = dims["detections"]
        empty = any(min(dims[role.role], default=1) < 1 for role in self.extra_inputs)
        if rows < 1 or columns != COLUMNS + self.extra_rows(dims) or empty:
            found = " and ".join(f"[{', '.join(map(str, value))}]" for value in dims.values())
            raise ConfigError(
                f"model '{config.name}': head {self.name} reads [K, 6{self.extra_layout}] detections"
                f"{self.extra_inputs_layout}; the input{'s are' if len(dims) > 1 else ' is'} {found}"
            )

    @property
    def num_classes(self) -> None:  # type: ignore[override]
        return None

    def detect(self, raw: Mapping[str, np.ndarray], settings: NmsSettings) -> TensorDetections:
        chosen, counts = kept_rows(np.asarray(raw["detections"], dtype=np.float32), settings)
        return self.detections_of_rows(chosen, counts)

    def detections_of_rows(self, chosen: FloatArray, counts: IntArray) -> TensorDetections:
        """The kept rows ``[N, k, 6 + extra]`` (zeros past each count) -> detections: the corners, scores and classes as
        they are, and what :meth:`carried` takes of each row's extra columns."""
        images, k = chosen.shape[:2]
        keypoints, extras = self.carried(chosen[..., COLUMNS:].reshape(images * k, chosen.shape[2] - COLUMNS))
        return TensorDetections(
            np.ascontiguousarray(chosen[..., :4]),
            np.ascontiguousarray(chosen[..., 4]),
            np.rint(chosen[..., 5]).astype(np.int32),
            counts,
            None if keypoints is None else keypoints.reshape(images, k, *keypoints.shape[1:]),
            {name: values.reshape(images, k, *values.shape[1:]) for name, values in extras.items()},
        )


class End2EndHead(EndToEnd):
    """Boxes alone: ``[N, K, 6]`` (Ultralytics' ``nms=True`` detectors, YOLOv10's and YOLO26's NMS-free detect head)."""

    name = "end2end"


HEAD = End2EndHead
