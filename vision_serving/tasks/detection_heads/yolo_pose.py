"""``yolo_pose``: Ultralytics' pose outputs ``[N, 4 + C + P x D, A]`` (``task: pose``: YOLOv8/11/26-pose).

Per anchor: box centre x, y, width, height in model-input pixels, C class scores (already sigmoid),
then P keypoints of D values: x, y in model-input pixels and, where D is 3, the keypoint's visibility
score (already sigmoid: the export decodes them, ``Pose.kpts_decode``). The keypoint shape comes from
the config's ``keypoint_shape`` (Ultralytics' ``kpt_shape`` metadata, e.g. ``17,3``).

Decoded as Ultralytics' ``non_max_suppression`` then ``PosePredictor.construct_result`` do it: the
detection part as every anchor-free head's (:mod:`.anchor_free`: best class above the score threshold,
class-aware hard NMS), each kept box carrying its anchor's keypoints. The detection task maps x and y to the photo's
pixels and clips them to it (``scale_coords``); the scores pass through.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

from .anchor_free import AnchorFreeHead
from .base import FloatArray, numbers


def _keypoint_shape(text: str) -> tuple[int, int]:
    values = numbers(int)(text)
    if len(values) != 2 or values[0] < 1 or values[1] not in (2, 3):
        raise ValueError(f"expected keypoints,values with values 2 (x, y) or 3 (x, y, visibility), got {text!r}")
    return int(values[0]), int(values[1])


class YoloPoseHead(AnchorFreeHead):
    name = "yolo_pose"
    parameters: ClassVar[dict[str, tuple[Callable[[str], Any], bool]]] = {
        "keypoint_shape": (_keypoint_shape, True),
        "keypoint_names": (lambda text: tuple(text.split(",")), False),
    }

    def __init__(self, values: Mapping[str, Any]) -> None:
        super().__init__(values)
        self.num_keypoints, self.keypoint_values = self.values["keypoint_shape"]
        self.extra_layout = f" + {self.num_keypoints} x {self.keypoint_values}"
        names = self.values.get("keypoint_names")
        if names is not None and len(names) != self.num_keypoints:
            raise ValueError(f"head yolo_pose: keypoint_names names {len(names)} keypoints, keypoint_shape says {self.num_keypoints}")

    def extra_rows(self, dims: Mapping[str, Sequence[int]]) -> int:
        return self.num_keypoints * self.keypoint_values

    def carried(self, rows: FloatArray) -> tuple[FloatArray | None, dict[str, np.ndarray]]:
        """Each candidate's keypoints ``[M, P, D]``."""
        return rows.reshape(len(rows), self.num_keypoints, self.keypoint_values), {}


HEAD = YoloPoseHead
