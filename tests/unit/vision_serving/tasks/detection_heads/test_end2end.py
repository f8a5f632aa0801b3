"""End-to-end heads (``end2end``, ``end2end_segment``, ``end2end_pose``, ``end2end_obb``): rows ``[N, K, 6 + extra]``.

Each answers exactly as the one-to-many head of its task when its rows are that head's kept detections: the whole
postprocess ``new-pipeline --from yolo`` writes (boxes, scores, classes, labels, counts and the task's extra answers:
masks, keypoints, rotated boxes), on the benchmarks' synthetic raw outputs (80 classes at 640 x 640, 0 to 40 candidates
per image). The rows are kept as Ultralytics' predictor keeps end-to-end rows: above the threshold, in order, no NMS.
"""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks import detection as bench
from vision_serving import model_config
from vision_serving.model_config import ConfigError
from vision_serving.tasks.detection_heads import registry
from vision_serving.tasks.detection_heads.base import NmsSettings, TensorDetections
from vision_serving.tasks.detection_heads.end2end import COLUMNS, End2EndHead, EndToEnd, kept_rows

PAIRS = {"yolo": "end2end", "yolo_segment": "end2end_segment", "yolo_pose": "end2end_pose", "yolo_obb": "end2end_obb"}
ROWS = 300  # Ultralytics' max_det: the rows of its end-to-end exports
BATCH = 3


def rows_of(found: TensorDetections, head: str) -> np.ndarray:
    """The kept detections of a one-to-many head as an end-to-end export's rows ``[N, ROWS, 6 + extra]``: corners (an
    oriented box's centre and size), score, class, the task's columns; zero rows after them."""
    images, k = found.scores.shape
    if head == "yolo_obb":
        xywhr = found.extras["xywhr"]
        boxes, extra = xywhr[..., :4], xywhr[..., 4:]
    else:
        boxes = found.boxes
        extra = (
            found.keypoints.reshape(images, k, int(np.prod(found.keypoints.shape[2:])))
            if found.keypoints is not None
            else found.extras.get("coefficients", np.zeros((images, k, 0), np.float32))
        )
    kept = np.concatenate([boxes, found.scores[..., None], found.class_ids[..., None].astype(np.float32), extra], axis=-1)
    rows = np.zeros((images, ROWS, kept.shape[-1]), np.float32)
    rows[:, :k] = kept
    return rows


@pytest.mark.parametrize("candidates", [0, 1, 10, 40])
@pytest.mark.parametrize("one_to_many", sorted(PAIRS))
def test_an_end_to_end_head_answers_as_its_tasks_one_to_many_head(one_to_many, candidates, tmp_path):
    end_to_end = PAIRS[one_to_many]
    assert issubclass(registry.head_class(end_to_end), EndToEnd)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    many, one = bench.postprocessor(one_to_many, tmp_path / "a"), bench.postprocessor(end_to_end, tmp_path / "b")
    raw = bench.synthetic_outputs(
        one_to_many, bench.heads()[one_to_many], bench.CLASSES, BATCH, candidates, (640, 640), np.random.default_rng(7)
    )
    settings = NmsSettings(np.full(BATCH, 0.25, np.float32), np.full(BATCH, 0.7, np.float32), 300)
    found = many.settings.head.detect(dict(zip([role.role for role in many.settings.head.input_roles()], raw)), settings)
    tensors = {
        "IMAGE_SIZE": np.tile(np.array([[480, 640]], np.int32), (BATCH, 1)),
        "IMAGE_TRANSFORM": np.tile(np.array([[1.0, 1.0, 0.0, 80.0]], np.float32), (BATCH, 1)),
    }
    many_in = dict(tensors, **{role.role.upper(): value for role, value in zip(many.settings.head.input_roles(), raw)})
    one_in = dict(tensors, DETECTIONS=rows_of(found, one_to_many), **{name: value for name, value in many_in.items() if name == "PROTOS"})
    expected = many.run(many.parse(many_in)).outputs()
    answered = one.run(one.parse(one_in)).outputs()
    assert sorted(answered) == sorted(expected)
    assert expected["COUNT"].sum() >= (BATCH if candidates else 0)
    for name, values in expected.items():
        if values.dtype == object:
            assert answered[name].tolist() == values.tolist(), name
        else:
            np.testing.assert_allclose(answered[name], values, rtol=1e-6, atol=1e-4, err_msg=name)


def test_the_rows_above_the_threshold_are_kept_in_the_models_order_and_never_suppressed():
    """Two rows of one box (an NMS would keep one) both kept; a row under its image's threshold dropped, the order kept;
    the cap; the class the rounded float."""
    rows = np.zeros((2, 5, 6), np.float32)
    rows[0, :4] = [[0, 0, 10, 10, 0.5, 1.0], [0, 0, 10, 10, 0.9, 0.99999], [5, 5, 9, 9, 0.2, 2], [1, 1, 2, 2, 0.3, 0]]
    settings = NmsSettings(np.array([0.25, 0.1], np.float32), np.array([0.1, 0.1], np.float32), 300)
    chosen, counts = kept_rows(rows, settings)
    assert counts.tolist() == [3, 0] and chosen[0, :, 4].tolist() == pytest.approx([0.5, 0.9, 0.3])
    found = End2EndHead({}).detect({"detections": rows}, settings)
    assert found.class_ids[0].tolist() == [1, 1, 0] and not found.boxes[1].any()
    capped = NmsSettings(settings.score_thresholds, settings.iou_thresholds, 2)
    assert End2EndHead({}).detect({"detections": rows}, capped).counts.tolist() == [2, 0]


def rows_config(*inputs: tuple[str, tuple[int, ...]]) -> model_config.ModelConfig:
    tensors = ", ".join(f'{{ name: "{name}" data_type: TYPE_FP32 dims: [ {", ".join(map(str, dims))} ] }}' for name, dims in inputs)
    return model_config.parse_config_text(f'name: "mine_postprocess" backend: "python" max_batch_size: 8 input [ {tensors} ]')


def test_each_end_to_end_head_refuses_rows_of_another_task():
    """The columns must be 6 + the task's: a segmenter's as many coefficients as prototypes, a pose model's its keypoints."""
    with pytest.raises(ConfigError, match=r"model 'mine_postprocess': head end2end reads \[K, 6\] detections; the input is \[300, 7\]"):
        End2EndHead({}).bind(rows_config(("RAW", (300, 7))), {"detections": "RAW"})
    pose = registry.head_class("end2end_pose").from_parameters({"keypoint_shape": "17,3"})
    with pytest.raises(ConfigError, match=r"head end2end_pose reads \[K, 6 \+ 17 x 3\] detections; the input is \[300, 56\]"):
        pose.bind(rows_config(("RAW", (300, 56))), {"detections": "RAW"})
    segment = registry.head_class("end2end_segment")({})
    with pytest.raises(
        ConfigError, match=r"reads \[K, 6 \+ M\] detections and \[M, H/4, W/4\] prototypes; the inputs are \[300, 38\] and \[16, 8, 8\]"
    ):
        segment.bind(rows_config(("RAW", (300, 38)), ("P", (16, 8, 8))), {"detections": "RAW", "protos": "P"})
    segment.bind(rows_config(("RAW", (300, 22)), ("P", (16, 8, 8))), {"detections": "RAW", "protos": "P"})
    assert segment.num_classes is None and segment.check(32, 32) == [] and segment.check(64, 64)
    assert COLUMNS == 6 and registry.head_class("end2end_obb")({}).extra_rows({}) == 1


def test_rtdetr_rows_are_normalized_centres_and_sizes_of_the_input():
    """RT-DETR's rows: cx, cy, w, h normalized to the model input, then score and class; kept as end2end keeps rows, the
    boxes in model-input pixels; the preprocess must give the input size the config names."""
    head = registry.head_class("rtdetr").from_parameters({"input_size": "128,256"})
    rows = np.zeros((1, 4, 6), np.float32)
    rows[0, :3] = [[0.5, 0.5, 0.5, 0.25, 0.9, 2], [0.25, 0.75, 0.1, 0.1, 0.2, 1], [0.1, 0.2, 0.2, 0.2, 0.6, 0]]
    found = head.detect({"detections": rows}, NmsSettings(np.array([0.25], np.float32), np.array([0.7], np.float32), 300))
    assert found.counts.tolist() == [2] and found.class_ids[0].tolist() == [2, 0]
    np.testing.assert_allclose(found.boxes[0], [[64, 48, 192, 80], [0, 12.8, 51.2, 38.4]], rtol=1e-6)
    assert head.check(128, 256) == [] and head.check(256, 256) == ["head rtdetr: input_size is 128,256, but the preprocess gives 256x256"]
    with pytest.raises(ValueError, match="head rtdetr: missing parameter"):
        registry.head_class("rtdetr").from_parameters({})
