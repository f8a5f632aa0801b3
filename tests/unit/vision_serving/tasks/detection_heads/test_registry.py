"""The head registry's facts: each YOLO-export head fits its own outputs and no other head's, its synthetic
outputs carry exactly the candidates asked for, and a new head is found by the YOLO family through the registry."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pytest

from builders.families import yolo as yolo_family
from vision_serving.model_config import ModelConfig
from vision_serving.tasks.base import Role
from vision_serving.tasks.detection_heads import registry
from vision_serving.tasks.detection_heads.base import Head, NmsSettings, TensorDetections, tensor_dims

YOLO_HEADS = registry.yolo_export_heads("detect")
POSE = {"keypoint_shape": "17,3"}  # COCO's keypoints, as the pose heads' example shapes assume


def instance(head: type[Head]) -> Head:
    """The head with the parameters it requires."""
    return head.from_parameters({key: value for key, value in POSE.items() if key in head.parameters})


def settings(images: int) -> NmsSettings:
    return NmsSettings(np.full(images, 0.25, np.float32), np.full(images, 0.7, np.float32), 300)


def test_the_yolo_export_heads_state_their_facts():
    assert [head.name for head in YOLO_HEADS] == ["yolo", "yolo_v5", "end2end"]
    assert registry.yolo_tasks() == ["detect", "obb", "pose", "segment"]
    assert [head.name for head in registry.yolo_export_heads("pose")] == ["yolo_pose"]
    assert [head.name for head in registry.yolo_export_heads("obb")] == ["yolo_obb"]
    assert [head.name for head in registry.yolo_export_heads("segment")] == ["yolo_segment"]
    for head in registry.yolo_export_heads():
        assert head.layout.startswith("[") and head.exports, head.name
    assert [head.name for head in YOLO_HEADS if head.nms_in_model] == ["end2end"]
    assert not registry.head_class("mediapipe_ssd").yolo_export


@pytest.mark.parametrize("size", [(640, 640), (320, 480)])
def test_each_head_fits_its_own_outputs_and_no_other_of_its_task(size):
    expected = {
        "yolo": [(84, 8400)],
        "yolo_v5": [(25200, 85)],
        "end2end": [(300, 6)],
        "yolo_pose": [(56, 8400)],
        "yolo_segment": [(37, 8400), (32, 160, 160)],
        "yolo_obb": [(6, 8400)],
    }
    for head in registry.yolo_export_heads():
        shapes = head.example_shapes(80 if head.task == "detect" else 1, *size)
        if size == (640, 640):
            assert shapes == expected[head.name]
        classes = 80 if head.task == "detect" else 1
        assert [other.name for other in registry.yolo_export_heads(head.task) if other.fits(shapes, classes)] == [head.name]
        assert not head.fits([(*shapes[0], 1)], classes) and not head.fits([shapes[0], shapes[0]], classes)


def test_without_a_class_count_the_shape_alone_decides():
    assert registry.head_class("yolo").fits([(84, 8400)], None) and not registry.head_class("yolo").fits([(8400, 84)], None)
    assert registry.head_class("yolo_v5").fits([(8400, 85)], None) and not registry.head_class("yolo_v5").fits([(85, 8400)], None)
    # [K, 6] with no names: end2end or a one-class YOLOv5 (the family asks for --head).
    assert [head.name for head in YOLO_HEADS if head.fits([(300, 6)], None)] == ["yolo_v5", "end2end"]


@pytest.mark.parametrize("candidates", [0, 1, 10, 40])
def test_synthetic_outputs_carry_exactly_the_candidates(candidates):
    for head in registry.yolo_export_heads():
        shapes = head.example_shapes(80, 320, 320)
        outputs = head.synthetic_outputs(shapes, 3, candidates, (320, 320), np.random.default_rng(candidates))
        assert [item.shape[1:] for item in outputs] == shapes and all(item.shape[0] == 3 and item.dtype == np.float32 for item in outputs)
        decoder = instance(head)
        if head.task == "pose":  # the classes are what the keypoints leave
            decoder._classes = shapes[0][0] - 4 - 17 * 3
        found = decoder.detect({role.role: output for role, output in zip(decoder.input_roles(), outputs)}, settings(3))
        # NMS may merge overlapping candidates, never invent one; the model's own NMS keeps them all.
        assert all(0 < count <= candidates if candidates else count == 0 for count in found.counts), head.name
        if head.nms_in_model:
            assert list(found.counts) == [candidates] * 3
        assert (found.scores[found.scores > 0] > 0.25).all()


class _CornersHead(Head):
    """A throwaway head: ``[A, 4 + 1 + 1]`` (corners, score, class id), as a model with its own format would give."""

    name = "corners_score_class"
    layout = "[A, 6 + 1]"
    exports = "a test's own model"
    yolo_export = True

    @classmethod
    def fits(cls, shapes: Sequence[tuple[int, ...]], classes: int | None) -> bool:
        return len(shapes) == 1 and len(shapes[0]) == 2 and shapes[0][1] == 7

    def input_roles(self) -> tuple[Role, ...]:
        return (Role("predictions", "FP32", (None, 7), from_core=True),)

    def bind(self, config: ModelConfig, names: Mapping[str, str | None]) -> None:
        tensor_dims(config, names["predictions"])

    @property
    def num_classes(self) -> None:
        return None

    def detect(self, raw: Mapping[str, np.ndarray], settings: NmsSettings) -> TensorDetections:
        return TensorDetections.empty(len(raw["predictions"]))


def test_a_new_head_is_one_module_and_one_registry_line(monkeypatch):
    """What adding a head takes: the class, and its line in the registry; the YOLO family then recognizes its outputs."""
    with pytest.raises(yolo_family.UnsupportedModel, match="none of the supported formats"):
        yolo_family._head([(1, 900, 7)], 3, {}, None, "model.onnx: output 'output0'")
    monkeypatch.setitem(registry.HEADS, _CornersHead.name, _CornersHead)
    assert yolo_family._head([(1, 900, 7)], 3, {}, None, "model.onnx: output 'output0'") == "corners_score_class"
    assert registry.head_class("corners_score_class") is _CornersHead


def test_the_pose_head_keeps_each_box_keypoints():
    """Two anchors above the threshold, far apart: both kept, each with its own keypoints (x, y, score)."""
    head = registry.head_class("yolo_pose").from_parameters({"keypoint_shape": "2,3", "keypoint_names": "nose,tail"})
    head._classes = 1
    raw = np.zeros((1, 4 + 1 + 6, 5), np.float32)
    raw[0, :4, 1] = [20, 20, 10, 10]
    raw[0, :4, 3] = [80, 60, 10, 10]
    raw[0, 4, [1, 3]] = [0.9, 0.6]
    raw[0, 5:, 1] = [18, 19, 0.8, 22, 21, 0.3]
    raw[0, 5:, 3] = [78, 59, 0.7, 83, 61, 0.9]
    found = head.detect({"predictions": raw}, settings(1))
    assert found.counts.tolist() == [2] and found.scores[0].tolist() == pytest.approx([0.9, 0.6])
    assert found.keypoints is not None and found.keypoints.shape == (1, 2, 2, 3)
    np.testing.assert_allclose(found.keypoints[0, 0], [[18, 19, 0.8], [22, 21, 0.3]])
    np.testing.assert_allclose(found.keypoints[0, 1], [[78, 59, 0.7], [83, 61, 0.9]])
    with pytest.raises(ValueError, match="keypoint_names names 1 keypoints, keypoint_shape says 2"):
        registry.head_class("yolo_pose").from_parameters({"keypoint_shape": "2,3", "keypoint_names": "nose"})
    with pytest.raises(ValueError, match="expected keypoints,values"):
        registry.head_class("yolo_pose").from_parameters({"keypoint_shape": "17,4"})
