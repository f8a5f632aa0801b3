"""``end2end``: NMS-free detector outputs ``[N, K, 6]``: x_min, y_min, x_max, y_max, score, class.

What Ultralytics exports with NMS inside the graph (``nms=True``) or from an NMS-free head
(YOLOv10, YOLO26), boxes in model-input pixels, rows best first. Kept as Ultralytics'
``non_max_suppression`` keeps end-to-end rows (``ultralytics/utils/nms.py``): the rows whose score
is greater than the score threshold, in the model's order, at most ``max_detections``; no IoU
test (the model did it). The class count is not in the output: the labels file gives it.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ...model_config import ConfigError, ModelConfig
from ..base import Role
from .base import Head, NmsSettings, TensorDetections, tensor_dims

COLUMNS = 6


class End2EndHead(Head):
    name = "end2end"

    def input_roles(self) -> tuple[Role, ...]:
        return (Role("detections", "FP32", (None, COLUMNS), from_core=True),)

    def bind(self, config: ModelConfig, names: Mapping[str, str | None]) -> None:
        rows, columns = tensor_dims(config, names["detections"])
        if rows < 1 or columns != COLUMNS:
            raise ConfigError(f"model '{config.name}': head end2end reads [K, 6] detections; the input is [{rows}, {columns}]")

    @property
    def num_classes(self) -> None:
        return None

    def detect(self, raw: Mapping[str, np.ndarray], settings: NmsSettings) -> TensorDetections:
        detections = np.asarray(raw["detections"], dtype=np.float32)  # [N, K, 6]
        valid = detections[..., 4] > settings.score_thresholds[:, None]
        counts = np.minimum(valid.sum(axis=1), settings.max_detections).astype(np.int32)
        k = int(counts.max()) if len(counts) else 0
        # The valid rows first, each image's in the model's order (a stable sort of "not valid").
        order = np.argsort(~valid, axis=1, kind="stable")[:, :k]
        chosen = np.take_along_axis(detections, order[..., None], axis=1)
        chosen[np.arange(k)[None, :] >= counts[:, None]] = 0
        return TensorDetections(
            np.ascontiguousarray(chosen[..., :4]),
            np.ascontiguousarray(chosen[..., 4]),
            np.rint(chosen[..., 5]).astype(np.int32),
            counts,
        )


HEAD = End2EndHead
