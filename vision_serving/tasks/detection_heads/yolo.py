"""``yolo``: anchor-free YOLO outputs ``[N, 4 + C, A]``, as Ultralytics exports YOLOv5u, v8, 11 and 26.

Per anchor: box centre x, y, width, height in model-input pixels, then C class scores (already
sigmoid), no extra rows: decoded as :mod:`.anchor_free` decodes every such output (Ultralytics'
``non_max_suppression``, single label per box, class-aware or agnostic hard NMS).
"""

from __future__ import annotations

from .anchor_free import AnchorFreeHead


class YoloHead(AnchorFreeHead):
    name = "yolo"


HEAD = YoloHead
