"""``yolo_v5``: anchor-based YOLO outputs ``[N, A, 5 + C]``, as the original YOLOv5 exports them.

Per anchor: box centre x, y, width, height in model-input pixels, the objectness, then C class
scores (all already sigmoid). Decoded as YOLOv5's ``non_max_suppression`` does it
(``yolov5/utils/general.py``, single label per box): an anchor is a candidate only when its
objectness is greater than the score threshold; its score is objectness x its best class score,
which must be greater than the threshold too; boxes become corners; then class-aware (or
agnostic) hard NMS (:func:`.base.hard_nms`).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ...model_config import ConfigError, ModelConfig
from ..base import Role
from .base import Head, NmsSettings, TensorDetections, hard_nms, tensor_dims, xywh_to_xyxy


class YoloV5Head(Head):
    name = "yolo_v5"
    _classes = 0

    def input_roles(self) -> tuple[Role, ...]:
        return (Role("predictions", "FP32", (None, None), from_core=True),)

    def bind(self, config: ModelConfig, names: Mapping[str, str | None]) -> None:
        anchors, channels = tensor_dims(config, names["predictions"])
        if channels < 6 or anchors < 1:
            raise ConfigError(
                f"model '{config.name}': head yolo_v5 reads [anchors, 5 + classes] predictions; the input is [{anchors}, {channels}]"
            )
        self._classes = channels - 5

    @property
    def num_classes(self) -> int:
        return self._classes

    def detect(self, raw: Mapping[str, np.ndarray], settings: NmsSettings) -> TensorDetections:
        predictions = np.asarray(raw["predictions"], dtype=np.float32)  # [N, A, 5 + C]
        objectness = predictions[..., 4]
        thresholds = settings.score_thresholds
        # YOLOv5 filters by objectness first: class scores are read only there.
        images, anchors = np.nonzero(objectness > thresholds[:, None])
        classes = predictions[images, anchors, 5:]  # [M, C]
        class_ids = classes.argmax(axis=-1)
        # max over classes of objectness x class score: the objectness is >= 0, so it is objectness x the best class.
        scores = (objectness[images, anchors] * classes[np.arange(len(class_ids)), class_ids]).astype(np.float32)
        keep = scores > thresholds[images]
        images, anchors = images[keep], anchors[keep]
        boxes = xywh_to_xyxy(predictions[images, anchors, :4])
        return hard_nms(len(predictions), images, boxes, scores[keep], class_ids[keep], settings)


HEAD = YoloV5Head
