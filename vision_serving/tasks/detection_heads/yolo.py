"""``yolo``: anchor-free YOLO outputs ``[N, 4 + C, A]``, as Ultralytics exports YOLOv5u, v8, 11 and 26.

Per anchor: box centre x, y, width, height in model-input pixels, then C class scores (already
sigmoid). Decoded as Ultralytics' ``non_max_suppression`` does it (``ultralytics/utils/nms.py``,
single label per box): an anchor is a candidate when its best class score is greater than the
score threshold; its class is that best class; boxes become corners; then class-aware (or
agnostic) hard NMS (:func:`.base.hard_nms`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from ...model_config import ConfigError, ModelConfig
from ..base import Role
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


class YoloHead(Head):
    name = "yolo"
    layout = "[4+C, A]"
    exports = "YOLOv5u, v8, 11, 26"
    yolo_export = True
    _classes = 0

    @classmethod
    def fits(cls, shapes: Sequence[tuple[int, ...]], classes: int | None) -> bool:
        if len(shapes) != 1 or len(shapes[0]) != 2:
            return False
        channels, anchors = shapes[0]
        return channels > 4 and (channels == 4 + classes if classes else channels < anchors)

    @classmethod
    def example_shapes(cls, classes: int, height: int, width: int) -> list[tuple[int, ...]]:
        return [(4 + classes, anchor_free_anchors(height, width))]

    @classmethod
    def synthetic_outputs(
        cls, shapes: Sequence[tuple[int, ...]], batch: int, candidates: int, size: tuple[int, int], rng: np.random.Generator
    ) -> list[np.ndarray]:
        ((channels, anchors),) = shapes
        boxes = synthetic_boxes(anchors, size, rng)
        images = [np.concatenate([boxes, synthetic_scores(anchors, channels - 4, candidates, rng)[0]], axis=1).T for _ in range(batch)]
        return [np.stack(images).astype(np.float32)]

    def input_roles(self) -> tuple[Role, ...]:
        return (Role("predictions", "FP32", (None, None), from_core=True),)

    def bind(self, config: ModelConfig, names: Mapping[str, str | None]) -> None:
        channels, anchors = tensor_dims(config, names["predictions"])
        if channels < 5 or anchors < 1:
            raise ConfigError(
                f"model '{config.name}': head yolo reads [4 + classes, anchors] predictions; the input is [{channels}, {anchors}]"
            )
        self._classes = channels - 4

    @property
    def num_classes(self) -> int:
        return self._classes

    def detect(self, raw: Mapping[str, np.ndarray], settings: NmsSettings) -> TensorDetections:
        predictions = np.asarray(raw["predictions"], dtype=np.float32)  # [N, 4 + C, A]
        images, anchors, scores, class_ids = best_class_candidates(predictions, predictions.shape[1], settings)
        boxes = xywh_to_xyxy(predictions[images, :4, anchors])
        return hard_nms(len(predictions), images, boxes, scores, class_ids, settings)


HEAD = YoloHead
