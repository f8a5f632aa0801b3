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

YOLO_HEADS = registry.yolo_export_heads()


def settings(images: int) -> NmsSettings:
    return NmsSettings(np.full(images, 0.25, np.float32), np.full(images, 0.7, np.float32), 300)


def test_the_yolo_export_heads_state_their_facts():
    assert [head.name for head in YOLO_HEADS] == ["yolo", "yolo_v5", "end2end"]
    for head in YOLO_HEADS:
        assert head.layout.startswith("[") and head.exports, head.name
    assert [head.name for head in YOLO_HEADS if head.nms_in_model] == ["end2end"]
    assert not registry.head_class("mediapipe_ssd").yolo_export


@pytest.mark.parametrize("size", [(640, 640), (320, 480)])
def test_each_head_fits_its_own_outputs_and_no_other(size):
    expected = {"yolo": [(84, 8400)], "yolo_v5": [(25200, 85)], "end2end": [(300, 6)]}
    for head in YOLO_HEADS:
        shapes = head.example_shapes(80, *size)
        if size == (640, 640):
            assert shapes == expected[head.name]
        assert [other.name for other in YOLO_HEADS if other.fits(shapes, 80)] == [head.name]
        assert not head.fits([(*shapes[0], 1)], 80) and not head.fits([shapes[0], shapes[0]], 80)


def test_without_a_class_count_the_shape_alone_decides():
    assert registry.head_class("yolo").fits([(84, 8400)], None) and not registry.head_class("yolo").fits([(8400, 84)], None)
    assert registry.head_class("yolo_v5").fits([(8400, 85)], None) and not registry.head_class("yolo_v5").fits([(85, 8400)], None)
    # [K, 6] with no names: end2end or a one-class YOLOv5 (the family asks for --head).
    assert [head.name for head in YOLO_HEADS if head.fits([(300, 6)], None)] == ["yolo_v5", "end2end"]


@pytest.mark.parametrize("candidates", [0, 1, 10, 40])
def test_synthetic_outputs_carry_exactly_the_candidates(candidates):
    for head in YOLO_HEADS:
        shapes = head.example_shapes(80, 320, 320)
        outputs = head.synthetic_outputs(shapes, 3, candidates, (320, 320), np.random.default_rng(candidates))
        assert [item.shape[1:] for item in outputs] == shapes and all(item.shape[0] == 3 and item.dtype == np.float32 for item in outputs)
        (role,) = head({}).input_roles()
        found = head({}).detect({role.role: outputs[0]}, settings(3))
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
        yolo_family._head((1, 900, 7), 3, {}, None, "model.onnx: output 'output0'")
    monkeypatch.setitem(registry.HEADS, _CornersHead.name, _CornersHead)
    assert yolo_family._head((1, 900, 7), 3, {}, None, "model.onnx: output 'output0'") == "corners_score_class"
    assert registry.head_class("corners_score_class") is _CornersHead
