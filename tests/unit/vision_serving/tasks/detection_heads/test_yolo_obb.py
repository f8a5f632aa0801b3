"""The yolo_obb detection head: probabilistic IoU, fast NMS, the regularized form, the map to the photo.

The expected numbers were computed with Ultralytics' own functions (8.4.190: ``batch_probiou``,
``TorchNMS.fast_nms``, ``non_max_suppression(..., rotated=True)``, ``regularize_rboxes``,
``xywhr2xyxyxyxy``, ``scale_boxes(..., xywh=True)``) on the same values and pasted here. Parity with
Ultralytics' predictor on a trained model is tests/onnx/builders/test_yolo_obb.py's.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from vision_serving import model_config
from vision_serving.tasks import detection
from vision_serving.tasks.detection_heads import registry
from vision_serving.tasks.detection_heads import yolo_obb as obb
from vision_serving.tasks.detection_heads.base import NmsSettings

BOXES = np.array(
    [[10, 10, 20, 8, 0], [12, 11, 20, 8, 0.3], [10, 10, 8, 20, math.pi / 2], [100, 100, 10, 10, 0], [10, 10, 20, 8, 1.2]], np.float32
)
# batch_probiou(BOXES, BOXES): a box with itself is 1 - sqrt(1e-7 + 1 - exp(-1e-7)), box 2 is box 0 turned a quarter.
PROBIOU = [
    [0.9995318055152893, 0.7342562675476074, 0.9995318055152893, 0.0, 0.4658634066581726],
    [0.7342562675476074, 0.9995318055152893, 0.7342562675476074, 0.0, 0.503109335899353],
    [0.9995318055152893, 0.7342562675476074, 0.9995318055152893, 0.0, 0.4658634066581726],
    [0.0, 0.0, 0.0, 0.9995318055152893, 0.0],
    [0.4658634066581726, 0.503109335899353, 0.4658634066581726, 0.0, 0.9995318055152893],
]
# Three boxes in a row, 6 pixels apart: neighbours overlap by 0.645, the two ends by 0.354.
CHAIN = np.array([[50, 50, 20, 10, 0], [56, 50, 20, 10, 0], [62, 50, 20, 10, 0]], np.float32)
CHAIN_IOU = [
    [0.9995318055152893, 0.6446350812911987, 0.3540496230125427],
    [0.6446350812911987, 0.9995318055152893, 0.6446350812911987],
    [0.3540496230125427, 0.6446350812911987, 0.9995318055152893],
]
ROTATED = np.array(
    [[10, 20, 30, 8, -0.5], [10, 20, 30, 8, 0.2], [10, 20, 30, 8, 1.7], [10, 20, 30, 8, 2.3], [10, 20, 30, 8, 3.5]], np.float32
)
REGULARIZED = [
    [10.0, 20.0, 8.0, 30.0, 1.0707963705062866],
    [10.0, 20.0, 30.0, 8.0, 0.20000000298023224],
    [10.0, 20.0, 8.0, 30.0, 0.1292036771774292],
    [10.0, 20.0, 8.0, 30.0, 0.7292035818099976],
    [10.0, 20.0, 30.0, 8.0, 0.35840725898742676],
]
CORNERS = [[46.37869644165039, 39.182167053222656], [51.17295455932617, 30.406341552734375],
           [33.62130355834961, 20.817832946777344], [28.82704734802246, 29.593658447265625]]  # fmt: skip
LABELS = ("bar", "ellipse")


def settings(images: int = 1, iou: float = 0.7, max_detections: int = 300, agnostic: bool = False) -> NmsSettings:
    return NmsSettings(np.full(images, 0.25, np.float32), np.full(images, iou, np.float32), max_detections, agnostic)


def test_probiou_is_ultralytics_batch_probiou():
    """Within float32's rounding; a box with the same rectangle (1 - the square root of about 2e-7: itself, and box 0
    with box 2) only to 1e-3: there the square root magnifies the last bit of the sines and cosines, which numpy and
    torch round differently."""
    for boxes, expected in ((BOXES, np.array(PROBIOU)), (CHAIN, np.array(CHAIN_IOU))):
        same = expected > 0.999
        np.testing.assert_allclose(obb.probiou(boxes, boxes)[~same], expected[~same], atol=2e-6)
        np.testing.assert_allclose(obb.probiou(boxes, boxes)[same], expected[same], atol=1e-3)
    assert obb.probiou(BOXES[:2], BOXES).shape == (2, 5) and obb.probiou(BOXES, BOXES).dtype == np.float32


def test_fast_nms_drops_a_box_that_a_dropped_box_overlaps():
    """0 drops 1 (0.645 > 0.5); 1, though dropped, still drops 2 (0.645): fast NMS keeps [0] where greedy keeps [0, 2]."""
    assert obb.fast_nms(CHAIN, np.array([0.9, 0.8, 0.7], np.float32), 0.5).tolist() == [0]  # TorchNMS.fast_nms: [0]
    assert obb.fast_nms(CHAIN, np.array([0.7, 0.9, 0.8], np.float32), 0.5).tolist() == [1]
    assert obb.fast_nms(CHAIN, np.array([0.9, 0.8, 0.7], np.float32), 0.65).tolist() == [0, 1, 2]
    assert obb.fast_nms(CHAIN[:0], np.zeros(0, np.float32), 0.5).tolist() == []


def test_fast_nms_in_blocks_is_the_whole_matrix(monkeypatch):
    rng = np.random.default_rng(0)
    boxes = np.stack([*rng.uniform(20, 60, (2, 300)), *rng.uniform(5, 40, (2, 300)), rng.uniform(-0.7, 2.3, 300)], 1).astype(np.float32)
    scores = rng.uniform(0.3, 1, 300).astype(np.float32)
    whole = obb.fast_nms(boxes, scores, 0.5)
    order = np.argsort(-scores, kind="stable")
    iou = np.triu(obb.probiou(boxes[order], boxes[order]), 1)
    assert whole.tolist() == order[~(iou > 0.5).any(axis=0)].tolist()
    monkeypatch.setattr(obb, "PAIRS_PER_BLOCK", 7 * 300)
    assert obb.fast_nms(boxes, scores, 0.5).tolist() == whole.tolist()


def test_regularize_is_ultralytics_regularize_rboxes():
    np.testing.assert_allclose(obb.regularize(ROTATED), REGULARIZED, atol=1e-6)
    # The same rectangles: the corners agree up to their order.
    for given, regular in zip(obb.corners(ROTATED), obb.corners(obb.regularize(ROTATED))):
        assert np.abs(given[:, None, :] - regular[None, :, :]).max(axis=-1).min(axis=1).max() < 1e-4


def test_corners_and_bounds_are_ultralytics_xyxyxyxy_and_xyxy():
    corners = obb.corners(np.array([[40, 30, 20, 10, 0.5]], np.float32))
    np.testing.assert_allclose(corners[0], CORNERS, atol=1e-4)
    np.testing.assert_allclose(
        obb.bounds(corners)[0], [28.82704734802246, 20.817832946777344, 51.17295455932617, 39.182167053222656], atol=1e-4
    )


def raw(anchors: list[tuple[float, float, float, float, int, float, float]], classes: int = 2, total: int = 5) -> np.ndarray:
    """``[1, 4 + classes + 1, total]``: each (cx, cy, w, h, class, score, angle) on its own anchor, the rest score 0."""
    out = np.zeros((1, 4 + classes + 1, total), np.float32)
    for index, (cx, cy, w, h, cls, score, angle) in enumerate(anchors):
        out[0, :4, index] = [cx, cy, w, h]
        out[0, 4 + cls, index] = score
        out[0, -1, index] = angle
    return out


# non_max_suppression(pred, 0.25, 0.7, nc=2, rotated=True) on these anchors: [[50, 50, 20, 10, 0.9, 0, 0.1],
# [50, 50, 20, 10, 0.8, 1, 0.1]]; agnostic: the first only (anchor 2 overlaps anchor 0, anchor 3 is under 0.25).
ANCHORS = [(50, 50, 20, 10, 0, 0.9, 0.1), (50, 50, 20, 10, 1, 0.8, 0.1), (51, 50, 20, 10, 0, 0.7, 0.12), (20, 20, 6, 6, 0, 0.2, 0.0)]


def test_detect_is_ultralytics_rotated_non_max_suppression():
    head = registry.head_class("yolo_obb").from_parameters({})
    found = head.detect({"predictions": raw(ANCHORS)}, settings())
    assert found.counts.tolist() == [2] and found.class_ids[0].tolist() == [0, 1]
    np.testing.assert_allclose(found.scores[0], [0.9, 0.8])
    np.testing.assert_allclose(found.extras["xywhr"][0], [[50, 50, 20, 10, 0.1], [50, 50, 20, 10, 0.1]])
    np.testing.assert_allclose(found.boxes[0], obb.bounds(obb.corners(found.extras["xywhr"][0])))
    agnostic = head.detect({"predictions": raw(ANCHORS)}, settings(agnostic=True))
    assert agnostic.counts.tolist() == [1] and agnostic.class_ids[0].tolist() == [0]
    assert head.detect({"predictions": raw(ANCHORS)}, settings(max_detections=1)).counts.tolist() == [1]


def test_the_candidate_cap_keeps_the_best(monkeypatch):
    """More candidates than MAX_NMS: only the best MAX_NMS reach the NMS (here the far box of score 0.3 is cut)."""
    anchors = [(20, 20, 6, 6, 0, 0.3, 0.0), (60, 60, 10, 6, 0, 0.9, 0.0), (90, 20, 10, 6, 1, 0.5, 0.0)]
    head = registry.head_class("yolo_obb").from_parameters({})
    assert head.detect({"predictions": raw(anchors)}, settings()).counts.tolist() == [3]
    monkeypatch.setattr(obb, "MAX_NMS", 2)
    found = head.detect({"predictions": raw(anchors)}, settings())
    assert found.counts.tolist() == [2] and found.scores[0].tolist() == pytest.approx([0.9, 0.5])


def test_a_batch_answers_each_image_as_alone():
    head = registry.head_class("yolo_obb").from_parameters({})
    one = raw(ANCHORS)
    two = raw([(30, 30, 12, 6, 1, 0.6, 0.4)])
    both = head.detect({"predictions": np.concatenate([one, two, np.zeros_like(one)])}, settings(3))
    assert both.counts.tolist() == [2, 1, 0]
    np.testing.assert_allclose(both.extras["xywhr"][1], [[30, 30, 12, 6, 0.4], [0, 0, 0, 0, 0]])
    assert (both.boxes[1, 1] == 0).all() and (both.boxes[2] == 0).all()


def config(**parameters: str) -> model_config.ModelConfig:
    values = {
        "task": "detection", "head": "yolo_obb", "labels_file": "labels.txt", "score_threshold": "0.25", "iou_threshold": "0.7",
        "max_detections": "300", **parameters,
    }  # fmt: skip
    rows = ",\n".join(f'  {{ key: "{k}", value: {{ string_value: "{v}" }} }}' for k, v in values.items())
    return model_config.parse_config_text(
        f"""name: "bars_postprocess" backend: "python" max_batch_size: 8
input [ {{ name: "PREDICTIONS" data_type: TYPE_FP32 dims: [ 7, 5 ] }},
        {{ name: "IMAGE_SIZE" data_type: TYPE_INT32 dims: [ 2 ] }},
        {{ name: "IMAGE_TRANSFORM" data_type: TYPE_FP32 dims: [ 4 ] }},
        {{ name: "SCORE_THRESHOLD" data_type: TYPE_FP32 dims: [ 1 ] optional: true }},
        {{ name: "IOU_THRESHOLD" data_type: TYPE_FP32 dims: [ 1 ] optional: true }} ]
output [ {{ name: "BOXES" data_type: TYPE_FP32 dims: [ -1, 4 ] }}, {{ name: "SCORES" data_type: TYPE_FP32 dims: [ -1 ] }},
         {{ name: "CLASS_IDS" data_type: TYPE_INT32 dims: [ -1 ] }}, {{ name: "LABELS" data_type: TYPE_STRING dims: [ -1 ] }},
         {{ name: "COUNT" data_type: TYPE_INT32 dims: [ 1 ] }},
         {{ name: "ROTATED_BOXES" data_type: TYPE_FP32 dims: [ -1, 5 ] }},
         {{ name: "CORNERS" data_type: TYPE_FP32 dims: [ -1, 4, 2 ] }} ]
parameters [
{rows}
]"""
    )


def postprocess(tmp_path: Path, predictions: np.ndarray, size: tuple[int, int], transform: list[float], **parameters: str) -> dict:
    (tmp_path / "labels.txt").write_text("\n".join(LABELS) + "\n")
    post = detection.DetectionPostprocessor(config(**parameters), tmp_path)
    named = {
        "PREDICTIONS": predictions,
        "IMAGE_SIZE": np.array([size], np.int32),
        "IMAGE_TRANSFORM": np.array([transform], np.float32),
        "SCORE_THRESHOLD": None,
        "IOU_THRESHOLD": None,
    }
    return post.run(post.parse(named)).outputs()


# A 300 x 200 (height x width) photo on a 128 x 128 input: Ultralytics' letterbox resizes it to 85 x 128 (gains 0.425 in x,
# 128 / 300 in y) and pads 21 pixels on the left. scale_boxes((128, 128), [64, 60, 40, 12], (300, 200), xywh=True) with the
# angle 0.7: [101.17646789550781, 140.625, 94.11764526367188, 28.125, 0.7]; xywhr2xyxyxyxy of that:
PHOTO_RBOX = [101.17646789550781, 140.625, 94.11764526367188, 28.125, 0.699999988079071]
PHOTO_CORNERS = [[128.10972595214844, 181.6967315673828], [146.2283477783203, 160.18553161621094],
                 [74.24320983886719, 99.55328369140625], [56.12458801269531, 121.06446838378906]]  # fmt: skip
LETTERBOX = [85 / 200, 128 / 300, 21.0, 0.0]


def test_the_answers_in_the_photos_pixels_as_the_predictor_gives_them(tmp_path):
    out = postprocess(tmp_path, raw([(64, 60, 40, 12, 1, 0.8, 0.7)]), (300, 200), LETTERBOX)
    assert out["COUNT"].tolist() == [[1]] and out["LABELS"].tolist() == [[b"ellipse"]]
    np.testing.assert_allclose(out["ROTATED_BOXES"][0], [PHOTO_RBOX], rtol=1e-5)
    np.testing.assert_allclose(out["CORNERS"][0], [PHOTO_CORNERS], rtol=1e-5)
    # BOXES: the bounds of the box's corners mapped through the letterbox per axis. Ultralytics' xyxy are the bounds of
    # the mapped box's corners: the same where the letterbox's gains are; they differ by the rounding of the resize (here
    # 0.425 against 0.4267), which moves a bound by at most half the box's longer side x |1 / gain_x - 1 / gain_y|
    # (20 x 0.0092 = 0.18 pixel here; 0.118 found).
    ultralytics_xyxy = obb.bounds(np.array(PHOTO_CORNERS))
    bound = 40 / 2 * abs(1 / LETTERBOX[0] - 1 / LETTERBOX[1])
    assert np.abs(out["BOXES"][0, 0] - ultralytics_xyxy).max() <= bound
    square = postprocess(tmp_path, raw([(64, 60, 40, 12, 1, 0.8, 0.7)]), (200, 200), [128 / 200, 128 / 200, 0, 0])
    np.testing.assert_allclose(square["BOXES"][0], obb.bounds(square["CORNERS"][0]), rtol=1e-6)  # equal gains: the same


def test_boxes_to_photo_are_ultralytics_xyxy_whatever_the_gains():
    head = registry.head_class("yolo_obb").from_parameters({})
    found = head.detect({"predictions": raw([(64, 60, 40, 12, 1, 0.8, 0.7)])}, settings())
    np.testing.assert_allclose(head.rotated_to_photo(found, np.array([LETTERBOX]))[0], [PHOTO_RBOX], rtol=1e-6)
    np.testing.assert_allclose(head.boxes_to_photo(found, np.array([LETTERBOX]))[0], [obb.bounds(np.array(PHOTO_CORNERS))], rtol=1e-6)


def test_rotated_boxes_are_never_clipped_boxes_are_where_the_config_says(tmp_path):
    """A box across the photo's left edge: ROTATED_BOXES and CORNERS keep it whole (as Ultralytics does); BOXES are
    clipped to the photo unless clip_to_image is false."""
    predictions = raw([(4, 50, 30, 10, 0, 0.9, 0.3)])
    clipped = postprocess(tmp_path, predictions, (100, 100), [1, 1, 0, 0])
    whole = postprocess(tmp_path, predictions, (100, 100), [1, 1, 0, 0], clip_to_image="false")
    bounds = obb.bounds(obb.corners(np.array([4, 50, 30, 10, 0.3], np.float32)))
    assert bounds[0] < 0 and clipped["BOXES"][0, 0, 0] == 0
    np.testing.assert_allclose(whole["BOXES"][0, 0], bounds, rtol=1e-6)
    np.testing.assert_allclose(clipped["ROTATED_BOXES"][0, 0], [4, 50, 30, 10, 0.3], rtol=1e-6)
    np.testing.assert_allclose(clipped["CORNERS"], whole["CORNERS"])


def test_regularize_angles_gives_the_canonical_form(tmp_path):
    predictions = raw([(50, 50, 30, 10, 0, 0.9, 2.0)])
    out = postprocess(tmp_path, predictions, (100, 100), [1, 1, 0, 0], regularize_angles="true")
    np.testing.assert_allclose(out["ROTATED_BOXES"][0, 0], [50, 50, 10, 30, 2.0 - math.pi / 2], rtol=1e-6)
    plain = postprocess(tmp_path, predictions, (100, 100), [1, 1, 0, 0])
    np.testing.assert_allclose(plain["ROTATED_BOXES"][0, 0], [50, 50, 30, 10, 2.0], rtol=1e-6)
    np.testing.assert_allclose(out["CORNERS"], plain["CORNERS"])


def test_the_head_refuses_a_parameter_it_cannot_read():
    head = registry.head_class("yolo_obb")
    with pytest.raises(ValueError, match="regularize_angles: expected true or false"):
        head.from_parameters({"regularize_angles": "yes"})


def test_the_gate_compares_matched_rotated_boxes_by_probabilistic_iou():
    from vision_serving.tasks.detection_heads import registry

    head = registry.head_class("yolo_obb")({})
    boxes = {"rotated_boxes": np.array([[50, 50, 40, 20, 0.3], [50, 50, 20, 40, 0.3 + np.pi / 2], [300, 300, 40, 20, 0.3]], np.float32)}
    assert head.gate_similarities(boxes, boxes, 0, 0)["matched_rotated_iou"] == pytest.approx(1.0, abs=1e-3)
    assert head.gate_similarities(boxes, boxes, 0, 1)["matched_rotated_iou"] == pytest.approx(1.0, abs=1e-3)  # the same box, turned
    assert head.gate_similarities(boxes, boxes, 0, 2)["matched_rotated_iou"] < 0.01
