"""The head registry, and what a new head takes: its module (here a throwaway one), its line in the registry and, for
a head a YOLO export carries, its export's facts; the YOLO family, the benchmark and the detection client then pick it
up with no other edit."""

from __future__ import annotations

import argparse
import sys
import types
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

import cv2
import numpy as np
import pytest

from benchmarks import detection as detection_benchmark
from builders.families import yolo as yolo_family
from builders.families import yolo_exports
from devtools.clients import detection as detection_client
from vision_serving.tasks import detection
from vision_serving.tasks.detection_heads import registry
from vision_serving.tasks.detection_heads.anchor_free import AnchorFreeHead
from vision_serving.tasks.detection_heads.base import ExtraAnswer, FloatArray, NmsSettings, TensorDetections


def settings(images: int) -> NmsSettings:
    return NmsSettings(np.full(images, 0.25, np.float32), np.full(images, 0.7, np.float32), 300)


# --------------------------------------------------------------------------- a throwaway head


class _DepthHead(AnchorFreeHead):
    """A throwaway head: ``[4 + C + 1, A]``, each anchor's row past the classes its distance from the camera (a model
    of its own), answered per detection as DEPTHS."""

    name = "yolo_depth"
    extra_layout = " + 1"
    extra_answers: ClassVar[tuple[ExtraAnswer, ...]] = (ExtraAnswer("depths", "FP32", (-1,), name="DEPTHS", drawing="depths"),)

    def extra_rows(self, dims: Mapping[str, Sequence[int]]) -> int:
        return 1

    def carried(self, rows: FloatArray) -> tuple[FloatArray | None, dict[str, np.ndarray]]:
        return None, {"depth": rows[:, 0]}

    def extras_to_photo(
        self, found: TensorDetections, raw: Mapping[str, np.ndarray], transforms: np.ndarray, sizes: np.ndarray, boxes: np.ndarray
    ) -> dict[str, np.ndarray]:
        return {"depths": found.extras["depth"]}


# Its export: what an Ultralytics "depth" task (there is none) would give.
_DEPTH_EXPORT = yolo_exports.AnchorFree("[4+C+1, A]", "a test's own model", task="depth", extra_rows=1)


def _depth_drawing() -> types.ModuleType:
    """What devtools/clients/draw_depths.py would hold: each detection's depth written under its box, and listed."""
    module = types.ModuleType("devtools.clients.draw_depths")
    painted: list[int] = []  # the detections each picture got written

    def painter(outputs: Mapping[str, Any], count: int, paint: Callable[[np.ndarray, int], None]) -> Callable[[np.ndarray, int], None]:
        def on(picture: np.ndarray, width: int) -> None:
            paint(picture, width)
            painted.append(count)
            for box, depth in zip(np.asarray(outputs["boxes"]).reshape(-1, 4)[:count], np.asarray(outputs["depths"]).reshape(-1)):
                cv2.putText(picture, f"{depth:.1f} m", (int(box[0]), int(box[3])), cv2.FONT_HERSHEY_SIMPLEX, 0.4, (255, 0, 0), width)

        return on

    def fields(outputs: Mapping[str, Any], index: int) -> dict[str, Any]:
        return {"depth_m": round(float(np.asarray(outputs["depths"]).reshape(-1)[index]), 3)}

    module.painter, module.fields, module.painted = painter, fields, painted  # type: ignore[attr-defined]
    return module


@pytest.fixture
def depth_head(monkeypatch):
    """The throwaway head's registry line, its export's facts and its drawing's module, for the test."""
    monkeypatch.setitem(registry.HEADS, _DepthHead.name, _DepthHead)
    monkeypatch.setitem(yolo_exports.EXPORTS, _DepthHead.name, _DEPTH_EXPORT)
    monkeypatch.setitem(sys.modules, "devtools.clients.draw_depths", _depth_drawing())


def test_without_its_lines_the_family_knows_no_such_head():
    assert "depth" not in yolo_exports.tasks()
    with pytest.raises(ValueError, match="head 'yolo_depth' is not one of"):
        registry.head_class("yolo_depth")


def test_the_family_reads_a_new_head_export_and_writes_its_pipeline(depth_head):
    """new-pipeline --from yolo: the task accepted, the outputs recognized as the head's, its answer in the configs."""
    assert "depth" in yolo_exports.tasks()
    assert yolo_family._head([(1, 4 + 80 + 1, 8400)], 80, {}, None, "depth.onnx: output 'output0'", "depth") == "yolo_depth"
    with pytest.raises(
        yolo_family.UnsupportedModel, match=r"supported formats for its 80 classes: yolo_depth \[N, 4\+C\+1, A\] \(a test's own model\)"
    ):
        yolo_family._head([(1, 4 + 80, 8400)], 80, {}, None, "depth.onnx: output 'output0'", "depth")
    model = yolo_family.YoloModel("images", 64, 64, ("output0",), ((1, 7, 84),), "yolo_depth", ("a", "b"), False, True, task="depth")
    files = yolo_family.files("depth", model, "depth.onnx", "0" * 64, ["stable_io_names"], 4)
    for config in ("depth/config.pbtxt", "depth_postprocess/config.pbtxt"):
        assert 'name: "DEPTHS"' in files[config], config
    assert "The raw [4+C+1, A] outputs" in files["pipeline.toml"]  # the spec says what the core gives


def test_the_benchmark_measures_a_new_head(depth_head, tmp_path):
    """benchmarks.steps --parts detection: the head among those measured, on synthetic outputs the anchor-free way."""
    assert detection_benchmark.heads()["yolo_depth"] == [(4 + 80 + 1, 8400)]
    measured = detection_benchmark.measure("yolo_depth", 10, 2, 1, tmp_path)
    assert 0 < measured["kept_per_image"] <= 10 and measured["ms_per_image"] >= 0


def test_the_client_draws_and_lists_a_new_head_answer(depth_head, tmp_path):
    """./scripts/detect: the served answers of the head (the postprocess the family writes, on the benchmark's outputs)
    drawn and listed by the drawing its answer names."""
    post = detection_benchmark.postprocessor("yolo_depth", tmp_path)
    raw = detection_benchmark.synthetic_outputs("yolo_depth", [(4 + 80 + 1, 8400)], 80, 1, 3, (640, 640), np.random.default_rng(1))
    tensors = {
        "PREDICTIONS": raw[0],
        "IMAGE_SIZE": np.array([[480, 640]], np.int32),
        "IMAGE_TRANSFORM": np.array([[1, 1, 0, 80]], np.float32),
    }
    served = post.run(post.parse(tensors)).outputs()
    assert "DEPTHS" in served and "depths" in {role.role for role in detection.TASK.output_roles()}
    outputs = {role: served[name][0] for role, name in post.outputs.items() if name is not None}  # one image's, by role
    _, image = cv2.imencode(".png", np.full((480, 640, 3), 255, np.uint8))
    drawn = tmp_path / "drawn.png"
    report = detection_client.CLIENT.report("photo.png", outputs, image.tobytes(), argparse.Namespace(draw=drawn, single_image=True))
    count = int(outputs["count"][0])
    assert count and [item["depth_m"] for item in report.record["detections"]] == [round(float(d), 3) for d in outputs["depths"][:count]]
    assert sys.modules["devtools.clients.draw_depths"].painted == [count] and report.record["drawn"] == str(drawn) and drawn.is_file()


def test_every_drawing_the_heads_name_is_a_module_of_the_client(monkeypatch):
    named = {answer.drawing for head in registry.HEADS.values() for answer in head.extra_answers}
    assert named == {"masks", "rotated"}
    for name in named:
        assert detection_client.extra_drawing(name).__name__ == f"devtools.clients.draw_{name}"
    with pytest.raises(ValueError, match=r"names drawing 'sketch', but there is no devtools\.clients\.draw_sketch"):
        detection_client.extra_drawing("sketch")
    monkeypatch.setitem(sys.modules, "devtools.clients.draw_nothing", types.ModuleType("devtools.clients.draw_nothing"))
    with pytest.raises(TypeError, match=r"devtools\.clients\.draw_nothing is not a drawing"):
        detection_client.extra_drawing("nothing")


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
