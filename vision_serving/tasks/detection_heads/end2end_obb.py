"""``end2end_obb``: an oriented-box model's end-to-end outputs ``[N, K, 7]``.

YOLO26-obb's NMS-free head (``export(nms=False)``) and a YOLOv8/11-obb exported with ``nms=True``: rows of the box's
centre x, y, width and height in model-input pixels (an OBB head decodes centre and size, not corners), score, class
and rotation in radians (YOLO26's raw angle, any real number; ``[-pi/4, 3pi/4)`` from older heads), kept above the score
threshold in the model's order with no rotated NMS (:mod:`.end2end`), as Ultralytics' ``OBBPredictor`` reads them. The
answers (ROTATED_BOXES, CORNERS, and BOXES their bounds) are :mod:`.yolo_obb`'s.
"""

from __future__ import annotations

import numpy as np

from .base import FloatArray, IntArray, TensorDetections
from .end2end import COLUMNS, EndToEnd
from .yolo_obb import YoloObbHead, oriented_detections


class EndToEndObbHead(YoloObbHead, EndToEnd):
    name = "end2end_obb"

    def detections_of_rows(self, chosen: FloatArray, counts: IntArray) -> TensorDetections:
        """The rows' ``xywhr`` (the box, then the angle after score and class) as :meth:`YoloObbHead.suppress` keeps them."""
        rboxes = np.concatenate([chosen[..., :4], chosen[..., COLUMNS : COLUMNS + 1]], axis=-1).astype(np.float32)
        classes = np.rint(chosen[..., 5]).astype(np.int32)
        return oriented_detections(rboxes, np.ascontiguousarray(chosen[..., 4], dtype=np.float32), classes, counts)


HEAD = EndToEndObbHead
