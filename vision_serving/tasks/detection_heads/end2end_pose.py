"""``end2end_pose``: a pose model's end-to-end outputs ``[N, K, 6 + P x D]``.

YOLO26-pose's NMS-free head (``export(nms=False)``) and a YOLOv8/11-pose exported with ``nms=True``: rows of x_min,
y_min, x_max, y_max, score, class and P keypoints of D values (x, y in model-input pixels and, where D is 3, the
visibility score), kept above the score threshold in the model's order with no NMS (:mod:`.end2end`). The keypoint
shape and names are the config's, as :mod:`.yolo_pose` reads them; the answers (KEYPOINTS) are the same.
"""

from __future__ import annotations

from .end2end import EndToEnd
from .yolo_pose import YoloPoseHead


class EndToEndPoseHead(YoloPoseHead, EndToEnd):
    name = "end2end_pose"


HEAD = EndToEndPoseHead
