"""``end2end_segment``: an instance segmenter's end-to-end outputs ``[N, K, 6 + M]`` and prototypes ``[N, M, H/4, W/4]``.

YOLO26-seg's NMS-free head (``export(nms=False)``) and a YOLOv8/11-seg exported with ``nms=True``: rows of x_min,
y_min, x_max, y_max, score, class and M mask coefficients (:mod:`.end2end`: kept above the score threshold in the
model's order, no NMS), then each kept row's mask from the prototypes exactly as :mod:`.yolo_segment` computes it
(Ultralytics' ``process_mask_native``): the same answers, MASKS and MASK_BOXES, and the same tiling and gate.
"""

from __future__ import annotations

from .end2end import EndToEnd
from .yolo_segment import YoloSegmentHead


class EndToEndSegmentHead(YoloSegmentHead, EndToEnd):
    name = "end2end_segment"


HEAD = EndToEndSegmentHead
