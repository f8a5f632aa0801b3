"""The detection task: heads (yolo, yolo_v5, end2end, mediapipe_ssd), hard NMS, the map back to the photo, outputs, gate, dataset.

Raw outputs are synthetic and small, so each test states the arithmetic it expects. Parity with
Ultralytics' predictor on a trained model is tests/integration/test_bring_your_own_model.py's, with
MediaPipe's runtime tests/integration/test_face_detector.py's.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from vision_serving import layout, model_config
from vision_serving.model_config import ConfigError
from vision_serving.tasks import detection, registry
from vision_serving.tasks.base import LabelledSample
from vision_serving.tasks.detection_heads.base import MAX_WH, NmsSettings, hard_nms

LABELS = ["circle", "square", "triangle"]


def yolo_config(head: str = "yolo", dims: tuple[int, int] = (7, 6), **parameters: str) -> model_config.ModelConfig:
    values = {
        "task": "detection", "head": head, "labels_file": "labels.txt", "score_threshold": "0.25", "iou_threshold": "0.7",
        "max_detections": "300", **parameters,
    }  # fmt: skip
    rows = ",\n".join(f'  {{ key: "{k}", value: {{ string_value: "{v}" }} }}' for k, v in values.items())
    return model_config.parse_config_text(
        f"""name: "shapes_postprocess" backend: "python" max_batch_size: 8
input [ {{ name: "PREDICTIONS" data_type: TYPE_FP32 dims: [ {dims[0]}, {dims[1]} ] }},
        {{ name: "IMAGE_SIZE" data_type: TYPE_INT32 dims: [ 2 ] }},
        {{ name: "IMAGE_TRANSFORM" data_type: TYPE_FP32 dims: [ 4 ] }},
        {{ name: "SCORE_THRESHOLD" data_type: TYPE_FP32 dims: [ 1 ] optional: true }},
        {{ name: "IOU_THRESHOLD" data_type: TYPE_FP32 dims: [ 1 ] optional: true }} ]
output [ {{ name: "BOXES" data_type: TYPE_FP32 dims: [ -1, 4 ] }}, {{ name: "SCORES" data_type: TYPE_FP32 dims: [ -1 ] }},
         {{ name: "CLASS_IDS" data_type: TYPE_INT32 dims: [ -1 ] }}, {{ name: "LABELS" data_type: TYPE_STRING dims: [ -1 ] }},
         {{ name: "COUNT" data_type: TYPE_INT32 dims: [ 1 ] }} ]
parameters [
{rows}
]"""
    )


@pytest.fixture
def labels_dir(tmp_path: Path) -> Path:
    (tmp_path / "labels.txt").write_text("\n".join(LABELS) + "\n")
    return tmp_path


def post(labels_dir: Path, head: str = "yolo", dims: tuple[int, int] = (7, 6), **parameters: str) -> detection.DetectionPostprocessor:
    return detection.DetectionPostprocessor(yolo_config(head, dims, **parameters), labels_dir)


IDENTITY = np.array([[1.0, 1.0, 0.0, 0.0]], np.float32)  # tensor = image


def batch(predictions: np.ndarray, sizes=((100, 100),), transforms=None, scores=None, ious=None) -> dict[str, np.ndarray | None]:
    count = len(predictions)
    return {
        "PREDICTIONS": predictions.astype(np.float32),
        "IMAGE_SIZE": np.array(sizes, np.int32).reshape(count, 2),
        "IMAGE_TRANSFORM": np.repeat(IDENTITY, count, 0) if transforms is None else np.asarray(transforms, np.float32),
        "SCORE_THRESHOLD": None if scores is None else np.asarray(scores, np.float32).reshape(count, 1),
        "IOU_THRESHOLD": None if ious is None else np.asarray(ious, np.float32).reshape(count, 1),
    }


def yolo_raw(anchors: list[tuple[float, float, float, float, int, float]], total: int = 6) -> np.ndarray:
    """``[1, 4 + 3, total]``: each (cx, cy, w, h, class, score) on its own anchor, the rest score 0."""
    raw = np.zeros((1, 4 + len(LABELS), total), np.float32)
    for index, (cx, cy, w, h, cls, score) in enumerate(anchors):
        raw[0, :4, index] = [cx, cy, w, h]
        raw[0, 4 + cls, index] = score
    return raw


def run(processor: detection.DetectionPostprocessor, named: dict) -> detection.DetectionResult:
    return processor.run(processor.parse(named))


# --------------------------------------------------------------------------- the yolo head, NMS


def test_yolo_decodes_centres_to_corners_best_class_first():
    raw = yolo_raw([(50, 40, 20, 10, 1, 0.9), (20, 20, 10, 10, 2, 0.5), (80, 80, 10, 10, 0, 0.2)])
    found = run(post(_labels()), batch(raw))
    boxes, scores, classes, keypoints = found.image(0)
    np.testing.assert_allclose(boxes, [[40, 35, 60, 45], [15, 15, 25, 25]])
    np.testing.assert_allclose(scores, [0.9, 0.5])  # 0.2 < the 0.25 default threshold
    assert classes.tolist() == [1, 2] and keypoints is None


def test_class_aware_nms_keeps_overlapping_boxes_of_other_classes():
    raw = yolo_raw([(50, 50, 40, 40, 0, 0.9), (52, 50, 40, 40, 0, 0.8), (51, 50, 40, 40, 1, 0.7)])
    aware = run(post(_labels()), batch(raw))
    assert aware.image(0)[2].tolist() == [0, 1]  # the second circle is suppressed, the square overlapping it is not
    agnostic = run(post(_labels(), class_agnostic="true"), batch(raw))
    assert agnostic.image(0)[2].tolist() == [0]


def test_per_request_score_and_iou_thresholds():
    raw = yolo_raw([(50, 50, 40, 40, 0, 0.9), (60, 50, 40, 40, 0, 0.8)])  # IoU 0.6
    processor = post(_labels())
    assert run(processor, batch(raw)).counts.tolist() == [2]  # 0.6 <= the 0.7 default
    assert run(processor, batch(raw, ious=[0.5])).counts.tolist() == [1]
    assert run(processor, batch(raw, scores=[0.85])).counts.tolist() == [1]
    with pytest.raises(ValueError, match=r"IOU_THRESHOLD must be in \[0, 1\]"):
        processor.parse(batch(raw, ious=[1.5]))
    with pytest.raises(ValueError, match="SCORE_THRESHOLD must have one value per image"):
        processor.parse({**batch(raw), "SCORE_THRESHOLD": np.zeros((2, 1), np.float32)})


def reference_nms(boxes, scores, classes, threshold, iou_threshold, agnostic=False):
    """Greedy NMS as torchvision.ops.nms on class-offset boxes (one image): indices kept, best first."""
    order = [i for i in sorted(range(len(scores)), key=lambda i: -scores[i]) if scores[i] > threshold]
    kept: list[int] = []
    offset = np.zeros(len(classes)) if agnostic else np.asarray(classes, np.float32) * np.float32(MAX_WH)
    shifted = (np.asarray(boxes, np.float32) + offset[:, None].astype(np.float32)).astype(np.float32)

    def iou(a, b):
        w = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
        h = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
        inter = w * h
        return inter / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter)

    for i in order:
        if all(iou(shifted[i], shifted[j]) <= iou_threshold for j in kept):
            kept.append(i)
    return kept


@pytest.mark.parametrize("agnostic", [False, True])
def test_hard_nms_matches_a_direct_greedy_transcription(agnostic):
    rng = np.random.default_rng(3)
    n, a = 4, 80
    centres = rng.uniform(20, 300, (n, a, 2))
    sizes = rng.uniform(10, 80, (n, a, 2))
    boxes = np.concatenate([centres - sizes / 2, centres + sizes / 2], axis=-1).astype(np.float32)
    scores = rng.uniform(0, 1, (n, a)).astype(np.float32)
    classes = rng.integers(0, 3, (n, a)).astype(np.int32)
    thresholds = np.array([0.3, 0.5, 0.1, 0.99], np.float32)
    settings = NmsSettings(thresholds, np.array([0.5, 0.3, 0.7, 0.5], np.float32), max_detections=25, class_agnostic=agnostic)
    images, anchors = np.nonzero(scores > thresholds[:, None])
    found = hard_nms(n, images, boxes[images, anchors], scores[images, anchors], classes[images, anchors], settings)
    for i in range(n):
        expected = reference_nms(boxes[i], scores[i], classes[i], thresholds[i], settings.iou_thresholds[i], agnostic)[:25]
        assert found.counts[i] == len(expected)
        np.testing.assert_array_equal(found.boxes[i, : len(expected)], boxes[i, expected])
        np.testing.assert_array_equal(found.class_ids[i, : len(expected)], classes[i, expected])
        assert np.all(found.boxes[i, len(expected) :] == 0) and np.all(found.scores[i, len(expected) :] == 0)


def test_max_detections_keeps_the_best():
    raw = yolo_raw([(10 + 20 * i, 50, 10, 10, 0, 0.3 + 0.1 * i) for i in range(5)], total=8)
    found = run(post(_labels(), max_detections="2"), batch(raw))
    np.testing.assert_allclose(found.image(0)[1], [0.7, 0.6])


def test_boxes_map_back_through_each_images_transform_and_are_clipped():
    # A 200x100 photo letterboxed onto 100x100 (scale 0.5, 25 px pad on top): tensor = image * 0.5 + (0, 25).
    raw = np.concatenate([yolo_raw([(50, 50, 20, 20, 0, 0.9)]), yolo_raw([(95, 50, 20, 20, 1, 0.8)])])
    transforms = np.array([[0.5, 0.5, 0.0, 25.0], [1.0, 1.0, 0.0, 0.0]], np.float32)
    found = run(post(_labels()), batch(raw, sizes=[(100, 200), (100, 100)], transforms=transforms))
    np.testing.assert_allclose(found.image(0)[0], [[80, 30, 120, 70]], atol=1e-4)
    np.testing.assert_allclose(found.image(1)[0], [[85, 40, 100, 60]])  # x_max 105 clipped to the photo's 100
    unclipped = run(post(_labels(), clip_to_image="false"), batch(raw[1:], sizes=[(100, 100)]))
    np.testing.assert_allclose(unclipped.image(0)[0], [[85, 40, 105, 60]])


def test_each_response_is_padded_to_its_own_largest_count_with_labels():
    raw = np.concatenate(
        [yolo_raw([(20, 20, 10, 10, 0, 0.9), (70, 70, 10, 10, 2, 0.8)]), yolo_raw([]), yolo_raw([(50, 50, 10, 10, 1, 0.6)])]
    )
    found = run(post(_labels()), batch(raw, sizes=[(100, 100)] * 3, transforms=np.repeat(IDENTITY, 3, 0)))
    first, rest = found.split([1, 2])
    assert first["BOXES"].shape == (1, 2, 4) and first["LABELS"].tolist() == [[b"circle", b"triangle"]]
    assert rest["BOXES"].shape == (2, 1, 4) and rest["COUNT"].tolist() == [[0], [1]]
    assert rest["LABELS"].tolist() == [[b""], [b"square"]] and rest["CLASS_IDS"].tolist() == [[0], [1]]
    assert np.all(rest["BOXES"][0] == 0) and rest["SCORES"][0, 0] == 0
    assert all(value.flags.c_contiguous for value in rest.values())


def test_a_batch_answers_each_image_as_alone():
    raws = [yolo_raw([(20, 20, 30, 30, 0, 0.9), (25, 20, 30, 30, 0, 0.8)]), yolo_raw([(60, 60, 30, 30, 1, 0.7)]), yolo_raw([])]
    processor = post(_labels())
    together = run(processor, batch(np.concatenate(raws), sizes=[(100, 100)] * 3, transforms=np.repeat(IDENTITY, 3, 0)))
    for index, raw in enumerate(raws):
        alone = run(processor, batch(raw))
        for got, want in zip(together.image(index), alone.image(0)):
            np.testing.assert_array_equal(got, want)


# --------------------------------------------------------------------------- yolo_v5, end2end


def test_yolo_v5_filters_by_objectness_then_multiplies_the_class_score():
    raw = np.zeros((1, 4, 5 + 3), np.float32)
    raw[0, 0] = [50, 50, 20, 20, 0.9, 0.1, 0.8, 0.1]  # score 0.72, class 1
    raw[0, 1] = [20, 20, 10, 10, 0.2, 0.0, 0.0, 1.0]  # objectness 0.2 < 0.25: never a candidate
    raw[0, 2] = [80, 80, 10, 10, 0.5, 0.4, 0.0, 0.0]  # 0.5 x 0.4 = 0.2 < 0.25
    found = run(post(_labels(), "yolo_v5", (4, 8)), batch(raw))
    boxes, scores, classes, _ = found.image(0)
    np.testing.assert_allclose(boxes, [[40, 40, 60, 60]])
    np.testing.assert_allclose(scores, [0.72], rtol=1e-6)
    assert classes.tolist() == [1]


def test_end2end_keeps_the_models_rows_above_the_threshold_in_order():
    raw = np.zeros((1, 5, 6), np.float32)
    raw[0, :4] = [[10, 10, 20, 20, 0.9, 2], [30, 30, 40, 40, 0.2, 0], [50, 50, 60, 60, 0.8, 1], [10, 10, 20, 20, 0.7, 2]]
    found = run(post(_labels(), "end2end", (5, 6)), batch(raw))
    boxes, scores, classes, _ = found.image(0)
    np.testing.assert_allclose(scores, [0.9, 0.8, 0.7])  # no IoU test: the model did it
    assert classes.tolist() == [2, 1, 2] and boxes[1].tolist() == [50, 50, 60, 60]
    assert run(post(_labels(), "end2end", (5, 6), max_detections="1"), batch(raw)).counts.tolist() == [1]


# --------------------------------------------------------------------------- the config


def test_the_face_detectors_config_is_the_mediapipe_head():
    pipeline = layout.pipeline("face_detector")
    config = model_config.load_config(pipeline.model_dir("postprocess"))
    assert registry.for_config(config) is detection.TASK
    processor = detection.DetectionPostprocessor(config, pipeline.model_dir("postprocess"))
    assert processor.settings.head.name == "mediapipe_ssd" and processor.settings.max_detections == 100
    assert processor.inputs == {
        "regressors": "REGRESSORS", "classificators": "CLASSIFICATORS", "image_size": "IMAGE_SIZE", "transform": "IMAGE_TRANSFORM",
        "score_threshold": "SCORE_THRESHOLD", "iou_threshold": "IOU_THRESHOLD",
    }  # fmt: skip
    assert processor.outputs["keypoints"] == "KEYPOINTS" and processor.labels().tolist() == [b"face"]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"head": "ssd_v9"},
            "head 'ssd_v9' is not one of end2end, end2end_obb, end2end_pose, end2end_segment, mediapipe_ssd, rtdetr, yolo, "
            "yolo_obb, yolo_pose, yolo_segment, yolo_v5",
        ),
        ({"score_threshold": "1.5"}, r"score_threshold must be in \[0, 1\]"),
        ({"max_detections": "0"}, "max_detections must be positive"),
        ({"class_agnostic": "maybe"}, "class_agnostic: expected true or false"),
        ({"anchor_offset_x": "0.5"}, "unknown parameter.*anchor_offset_x for head yolo"),
    ],
)
def test_bad_parameters_are_one_line_naming_the_model(labels_dir, change, message):
    with pytest.raises(ConfigError, match=f"model 'shapes_postprocess': .*{message}"):
        post(labels_dir, **change)


def test_the_class_count_must_be_the_labels(tmp_path):
    (tmp_path / "labels.txt").write_text("a\nb\n")
    with pytest.raises(ValueError, match="has 2 labels, the model outputs 3 classes"):
        detection.DetectionPostprocessor(yolo_config(), tmp_path)
    assert detection.DetectionPostprocessor(yolo_config("end2end", (5, 6)), tmp_path).num_classes == 2  # end2end: the labels say


def test_a_head_refuses_an_output_of_another_shape(labels_dir):
    with pytest.raises(ConfigError, match=r"head yolo_v5 reads \[anchors, 5 \+ classes\]"):
        post(labels_dir, "yolo_v5", (4, 5))


# --------------------------------------------------------------------------- gate, dataset


def _result(boxes_by_image, scores_by_image, classes_by_image) -> detection.DetectionResult:
    k = max(len(b) for b in boxes_by_image)
    n = len(boxes_by_image)
    boxes, scores, classes = np.zeros((n, k, 4), np.float32), np.zeros((n, k), np.float32), np.zeros((n, k), np.int32)
    for i, (b, s, c) in enumerate(zip(boxes_by_image, scores_by_image, classes_by_image)):
        boxes[i, : len(b)] = np.reshape(b, (-1, 4))
        scores[i, : len(s)], classes[i, : len(c)] = s, c
    counts = np.array([len(b) for b in boxes_by_image], np.int32)
    return detection.DetectionResult(post(_labels()), boxes, scores, classes, counts, None, np.full((n, 2), 100, np.int32))


def test_the_gate_matches_within_each_class():
    box = [10, 10, 50, 50]
    reference = _result([[box, [60, 60, 90, 90]]], [[0.9, 0.8]], [[0, 1]])
    same = detection.TASK.gate(reference, reference, detection.TASK.gate_defaults)
    assert same["metrics"]["detection_agreement"] == 1.0 and all(check["pass"] for check in same["checks"].values())
    flipped = _result([[box, [60, 60, 90, 90]]], [[0.9, 0.8]], [[2, 1]])  # the same box, another class: not a match
    report = detection.TASK.gate(reference, flipped, detection.TASK.gate_defaults)
    assert report["metrics"]["detection_agreement"] == pytest.approx(0.5)
    assert report["metrics"]["agreement_by_class"] == {"circle": 0.0, "square": 1.0, "triangle": 0.0}
    assert not report["checks"]["detection_agreement"]["pass"]


def test_the_gate_judges_keypoints_within_a_tenth_of_the_box_diagonal():
    """A box of diagonal 40 * sqrt(2) ~ 56.6 px: a keypoint 5 px off agrees, one 10 px off does not."""
    reference = _result([[[10, 10, 50, 50]]], [[0.9]], [[0]])
    reference.keypoints = np.array([[[[20, 20], [30, 30], [40, 40], [45, 45]]]], np.float32)
    candidate = _result([[[10, 10, 50, 50]]], [[0.9]], [[0]])
    candidate.keypoints = reference.keypoints + np.array([0, 5, 0, 10], np.float32)[None, None, :, None] * [1, 0]
    report = detection.TASK.gate(reference, candidate, detection.TASK.gate_defaults)
    assert report["metrics"]["keypoint_agreement_mean"] == pytest.approx(0.75)
    assert report["checks"]["keypoint_agreement"] == {"value": 0.75, "min": 0.9, "pass": False}
    assert (
        "keypoint_agreement"
        not in detection.TASK.gate(_result([[[10, 10, 50, 50]]], [[0.9]], [[0]]), candidate, detection.TASK.gate_defaults)["checks"]
    )


def test_the_dataset_metric_counts_hits_per_class():
    result = _result([[[10, 10, 50, 50], [60, 60, 90, 90]]], [[0.9, 0.8]], [[0, 1]])
    # labels: one circle where it was found, one triangle where a square was found
    target = np.array([[0, 0.3, 0.3, 0.4, 0.4], [2, 0.75, 0.75, 0.3, 0.3]])
    metrics = detection.TASK.dataset_metrics([(result, [LabelledSample(Path("a.jpg"), target)])])
    assert metrics["precision"] == 0.5 and metrics["recall"] == 0.5
    assert metrics["map50"] == pytest.approx(0.995 / 2)  # circle AP 0.995 (101-point), triangle AP 0; no square labelled


def test_dataset_labels_beside_the_images_or_in_labels(labels_dir, tmp_path):
    data = tmp_path / "data"
    (data / "images").mkdir(parents=True)
    (data / "labels").mkdir()
    for name in ("a.jpg", "b.png", "c.jpg"):
        (data / "images" / name).write_bytes(b"x")
    (data / "labels" / "a.txt").write_text("1 0.5 0.5 0.2 0.2\n")
    (data / "images" / "b.txt").write_text("0 0.1 0.1 0.1 0.1\n2 0.9 0.9 0.1 0.1\n")
    samples = detection.TASK.dataset(data, post(labels_dir))
    assert [(s.path.name, len(s.target)) for s in samples] == [("a.jpg", 1), ("b.png", 2), ("c.jpg", 0)]
    (data / "labels" / "a.txt").write_text("7 0.5 0.5 0.2 0.2\n")
    with pytest.raises(ValueError, match=r"class ids must be integers in 0\.\.2"):
        detection.TASK.dataset(data, post(labels_dir))


def test_average_precision_is_cocos_101_point_interpolation():
    assert detection.average_precision(np.array([1.0]), np.array([1.0])) == pytest.approx(0.995)  # as Ultralytics reports it
    # precision 1 up to recall 0.5, then a line down to 0 at recall 1: 0.5 + 0.125, less the last point's half step
    assert detection.average_precision(np.array([0.5, 0.5]), np.array([1.0, 0.5])) == pytest.approx(0.6225)


def test_match_boxes_one_to_one_by_iou():
    a = np.array([[0, 0, 10, 10], [20, 0, 30, 10], [50, 50, 60, 60]], np.float32)
    b = np.array([[21, 0, 31, 10], [0, 0, 10, 11], [0, 0, 9, 9]], np.float32)
    matches = detection.match_boxes(a, b)
    assert [(i, j) for i, j, _ in matches] == [(0, 1), (1, 0)]
    assert matches[0][2] == pytest.approx(100 / 110)
    assert detection.match_boxes(a, np.zeros((0, 4))) == [] and detection.match_boxes(a, b, min_iou=0.95) == []


def test_features_count_detections_and_average_their_scores():
    features = _result([[[0, 0, 1, 1], [2, 2, 3, 3]], []], [[0.9, 0.5], []], [[0, 1], []]).features()
    assert features.numeric["detections"].tolist() == [2, 0]
    assert features.numeric["confidence"][0] == pytest.approx(0.7) and math.isnan(features.numeric["confidence"][1])


_LABELS_DIR: list[Path] = []


def _labels() -> Path:
    """A folder with the three-class labels file (module-wide, made once)."""
    if not _LABELS_DIR:
        import tempfile

        folder = Path(tempfile.mkdtemp(prefix="labels-"))
        (folder / "labels.txt").write_text("\n".join(LABELS) + "\n")
        _LABELS_DIR.append(folder)
    return _LABELS_DIR[0]


def test_every_head_is_registered():
    from vision_serving.tasks.detection_heads.registry import HEADS

    assert sorted(HEADS) == [
        "end2end", "end2end_obb", "end2end_pose", "end2end_segment", "mediapipe_ssd", "rtdetr", "yolo", "yolo_obb", "yolo_pose",
        "yolo_segment", "yolo_v5",
    ]  # fmt: skip
