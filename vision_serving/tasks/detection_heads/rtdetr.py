"""``rtdetr``: RT-DETR's decoder output ``[N, K, 6]`` as Ultralytics exports it (``head: RTDETRDecoder`` in its metadata).

Per row, one of the decoder's K queries (already its top K): the box's centre x, y, width and height **normalized** to
the model input (0 to 1), its score (sigmoid) and its class. Kept as Ultralytics' ``RTDETRPredictor.postprocess``
keeps them: the rows whose score is above the threshold, in the model's order, at most ``max_detections``; no NMS (a
DETR's queries are matched one to one in training). The boxes become corners in model-input pixels (``input_size``,
the model's H,W, which the preprocess must give: its ``yolo_stretch``, Ultralytics' ``LetterBox(scale_fill=True)``);
the detection task maps them to the photo. The predictor does not clip them (``clip_to_image: false``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np

from .base import FloatArray, IntArray, TensorDetections, numbers, xywh_to_xyxy
from .end2end import EndToEnd


def _size(text: str) -> tuple[int, int]:
    values = numbers(int)(text)
    if len(values) != 2 or min(values) < 1:
        raise ValueError(f"expected the model input's height,width, got {text!r}")
    return int(values[0]), int(values[1])


class RtDetrHead(EndToEnd):
    name = "rtdetr"
    parameters: ClassVar[dict[str, tuple[Callable[[str], Any], bool]]] = {"input_size": (_size, True)}
    extra_layout = ""

    def detections_of_rows(self, chosen: FloatArray, counts: IntArray) -> TensorDetections:
        """The kept rows' normalized centre and size as corners in model-input pixels."""
        height, width = self.values["input_size"]
        boxes = xywh_to_xyxy(chosen[..., :4]) * np.array([width, height, width, height], np.float32)
        boxes[np.arange(chosen.shape[1])[None, :] >= counts[:, None]] = 0
        return TensorDetections(
            boxes.astype(np.float32),
            np.ascontiguousarray(chosen[..., 4]),
            np.rint(chosen[..., 5]).astype(np.int32),
            counts,
        )

    def check(self, tensor_height: int, tensor_width: int) -> list[str]:
        height, width = self.values["input_size"]
        if (tensor_height, tensor_width) != (height, width):
            return [f"head rtdetr: input_size is {height},{width}, but the preprocess gives {tensor_height}x{tensor_width}"]
        return []


HEAD = RtDetrHead
