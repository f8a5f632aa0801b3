"""``yolo_pose``: Ultralytics' pose outputs ``[N, 4 + C + P x D, A]`` (``task: pose``: YOLOv8/11/26-pose).

Per anchor: box centre x, y, width, height in model-input pixels, C class scores (already sigmoid),
then P keypoints of D values: x, y in model-input pixels and, where D is 3, the keypoint's visibility
score (already sigmoid: the export decodes them, ``Pose.kpts_decode``). The keypoint shape comes from
the config's ``keypoint_shape`` (Ultralytics' ``kpt_shape`` metadata, e.g. ``17,3``).

Decoded as Ultralytics' ``non_max_suppression`` then ``PosePredictor.construct_result`` do it: the
detection part exactly as the ``yolo`` head (best class above the score threshold, class-aware hard
NMS), each kept box carrying its anchor's keypoints. The detection task maps x and y to the photo's
pixels and clips them to it (``scale_coords``); the scores pass through.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

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
    numbers,
    synthetic_boxes,
    synthetic_scores,
    tensor_dims,
    xywh_to_xyxy,
)

COCO_KEYPOINTS = (17, 3)  # Ultralytics' person pose models: 17 COCO keypoints, x, y, visibility


def _keypoint_shape(text: str) -> tuple[int, int]:
    values = numbers(int)(text)
    if len(values) != 2 or values[0] < 1 or values[1] not in (2, 3):
        raise ValueError(f"expected keypoints,values with values 2 (x, y) or 3 (x, y, visibility), got {text!r}")
    return int(values[0]), int(values[1])


class YoloPoseHead(Head):
    name = "yolo_pose"
    parameters: ClassVar[dict[str, tuple[Callable[[str], Any], bool]]] = {
        "keypoint_shape": (_keypoint_shape, True),
        "keypoint_names": (lambda text: tuple(text.split(",")), False),
    }
    layout = "[4+C+PxD, A]"
    exports = "YOLOv8, 11, 26 pose"
    yolo_export = True
    task = "pose"
    example_parameters: ClassVar[dict[str, str]] = {"keypoint_shape": f"{COCO_KEYPOINTS[0]},{COCO_KEYPOINTS[1]}"}
    _classes = 0

    def __init__(self, values: Mapping[str, Any]) -> None:
        super().__init__(values)
        self.num_keypoints, self.keypoint_values = self.values["keypoint_shape"]
        names = self.values.get("keypoint_names")
        if names is not None and len(names) != self.num_keypoints:
            raise ValueError(f"head yolo_pose: keypoint_names names {len(names)} keypoints, keypoint_shape says {self.num_keypoints}")

    @classmethod
    def fits(cls, shapes: Sequence[tuple[int, ...]], classes: int | None) -> bool:
        """Rows past the boxes and classes hold whole keypoints of 3 values (2 where 3 cannot divide them)."""
        if len(shapes) != 1 or len(shapes[0]) != 2:
            return False
        channels, _ = shapes[0]
        if classes is None:  # a pose export's metadata names its classes
            return False
        rest = channels - 4 - classes
        return rest > 0 and (rest % 3 == 0 or rest % 2 == 0)

    @classmethod
    def example_shapes(cls, classes: int, height: int, width: int) -> list[tuple[int, ...]]:
        keypoints, values = COCO_KEYPOINTS
        return [(4 + classes + keypoints * values, anchor_free_anchors(height, width))]

    @classmethod
    def synthetic_outputs(
        cls, shapes: Sequence[tuple[int, ...]], batch: int, candidates: int, size: tuple[int, int], rng: np.random.Generator
    ) -> list[np.ndarray]:
        """COCO's 17 keypoints of 3 values: the classes are what the rows leave."""
        ((channels, anchors),) = shapes
        keypoints, values = COCO_KEYPOINTS
        classes = channels - 4 - keypoints * values
        height, width = size
        boxes = synthetic_boxes(anchors, size, rng)
        points = np.stack(
            [
                rng.uniform(0, width, (anchors, keypoints)),
                rng.uniform(0, height, (anchors, keypoints)),
                rng.uniform(0, 1, (anchors, keypoints)),
            ],
            axis=-1,
        ).reshape(anchors, keypoints * values)
        images = [np.concatenate([boxes, synthetic_scores(anchors, classes, candidates, rng)[0], points], axis=1).T for _ in range(batch)]
        return [np.stack(images).astype(np.float32)]

    def input_roles(self) -> tuple[Role, ...]:
        return (Role("predictions", "FP32", (None, None), from_core=True),)

    def bind(self, config: ModelConfig, names: Mapping[str, str | None]) -> None:
        channels, anchors = tensor_dims(config, names["predictions"])
        keypoint_rows = self.num_keypoints * self.keypoint_values
        if channels < 5 + keypoint_rows or anchors < 1:
            raise ConfigError(
                f"model '{config.name}': head yolo_pose reads [4 + classes + {self.num_keypoints} x {self.keypoint_values}, anchors] "
                f"predictions; the input is [{channels}, {anchors}]"
            )
        self._classes = channels - 4 - keypoint_rows

    @property
    def num_classes(self) -> int:
        return self._classes

    def detect(self, raw: Mapping[str, np.ndarray], settings: NmsSettings) -> TensorDetections:
        predictions = np.asarray(raw["predictions"], dtype=np.float32)  # [N, 4 + C + P x D, A]
        last_class = 4 + self._classes
        images, anchors, scores, class_ids = best_class_candidates(predictions, last_class, settings)
        boxes = xywh_to_xyxy(predictions[images, :4, anchors])
        keypoints = predictions[images, last_class:, anchors].reshape(len(images), self.num_keypoints, self.keypoint_values)
        return hard_nms(len(predictions), images, boxes, scores, class_ids, settings, keypoints)


HEAD = YoloPoseHead
