"""The ``yolo_pose`` head in the detection task: each kept box's keypoints mapped to the photo as Ultralytics' pose
predictor maps them (``scale_coords``: minus the letterbox's pad, over its gain; ``clip_coords``: x in [0, width], y in
[0, height]), their scores passed through.

Parity with Ultralytics' predictor on a trained pose model is tests/onnx/builders/test_yolo_pose.py's.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from vision_serving import model_config
from vision_serving.tasks import detection

ANCHORS = 6


def pose_post(folder: Path, **parameters: str) -> detection.DetectionPostprocessor:
    """One class (``triangle``), 2 keypoints of (x, y, score): predictions ``[4 + 1 + 2 x 3, 6]``."""
    values = {
        "task": "detection", "head": "yolo_pose", "keypoint_shape": "2,3", "keypoint_names": "apex,base", "labels_file": "labels.txt",
        "score_threshold": "0.25", "iou_threshold": "0.7", "max_detections": "300", **parameters,
    }  # fmt: skip
    rows = ",\n".join(f'  {{ key: "{k}", value: {{ string_value: "{v}" }} }}' for k, v in values.items())
    config = model_config.parse_config_text(
        f"""name: "poses_postprocess" backend: "python" max_batch_size: 8
input [ {{ name: "PREDICTIONS" data_type: TYPE_FP32 dims: [ 11, {ANCHORS} ] }},
        {{ name: "IMAGE_SIZE" data_type: TYPE_INT32 dims: [ 2 ] }},
        {{ name: "IMAGE_TRANSFORM" data_type: TYPE_FP32 dims: [ 4 ] }},
        {{ name: "SCORE_THRESHOLD" data_type: TYPE_FP32 dims: [ 1 ] optional: true }},
        {{ name: "IOU_THRESHOLD" data_type: TYPE_FP32 dims: [ 1 ] optional: true }} ]
output [ {{ name: "BOXES" data_type: TYPE_FP32 dims: [ -1, 4 ] }}, {{ name: "SCORES" data_type: TYPE_FP32 dims: [ -1 ] }},
         {{ name: "CLASS_IDS" data_type: TYPE_INT32 dims: [ -1 ] }}, {{ name: "LABELS" data_type: TYPE_STRING dims: [ -1 ] }},
         {{ name: "COUNT" data_type: TYPE_INT32 dims: [ 1 ] }}, {{ name: "KEYPOINTS" data_type: TYPE_FP32 dims: [ -1, 2, 3 ] }} ]
parameters [
{rows}
]"""
    )
    (folder / "labels.txt").write_text("triangle\n")
    return detection.DetectionPostprocessor(config, folder)


def raw(poses: list[tuple[tuple[float, float, float, float], float, list[tuple[float, float, float]]]]) -> np.ndarray:
    """``[1, 11, 6]``: each (box cx, cy, w, h; score; keypoints) on its own anchor, the rest score 0."""
    out = np.zeros((1, 11, ANCHORS), np.float32)
    for anchor, (box, score, keypoints) in enumerate(poses):
        out[0, :4, anchor] = box
        out[0, 4, anchor] = score
        out[0, 5:, anchor] = np.asarray(keypoints, np.float32).reshape(-1)
    return out


def run(processor: detection.DetectionPostprocessor, predictions: np.ndarray, sizes, transforms) -> detection.DetectionResult:
    count = len(predictions)
    named = {
        "PREDICTIONS": predictions,
        "IMAGE_SIZE": np.asarray(sizes, np.int32).reshape(count, 2),
        "IMAGE_TRANSFORM": np.asarray(transforms, np.float32).reshape(count, 4),
        "SCORE_THRESHOLD": None,
        "IOU_THRESHOLD": None,
    }
    return processor.run(processor.parse(named))


def test_keypoints_map_through_the_letterbox_and_are_clipped_to_the_photo(tmp_path):
    """A 100 high, 200 wide photo letterboxed onto 128x128: gain 0.64, 32 px of pad above (tensor = image * 0.64 + (0, 32)).
    A keypoint the model puts in the pad, or past the photo's right edge, lands on the edge itself (Ultralytics clips
    to [0, width], not width - 1); the scores are the model's."""
    keypoints = [(64.0, 48.0, 0.9), (140.0, 20.0, 0.3)]  # the second: right of the image and in the top pad
    predictions = raw([((64, 64, 40, 40), 0.8, keypoints)])
    transform = [0.64, 0.64, 0.0, 32.0]
    found = run(pose_post(tmp_path), predictions, [(100, 200)], [transform])
    boxes, scores, _, points = found.image(0)
    assert points is not None and points.shape == (1, 2, 3)
    np.testing.assert_allclose(boxes, [[68.75, 18.75, 131.25, 81.25]], atol=1e-4)
    np.testing.assert_allclose(points[0], [[100.0, 25.0, 0.9], [200.0, 0.0, 0.3]], atol=1e-4)
    assert scores.tolist() == pytest.approx([0.8])
    unclipped = run(pose_post(tmp_path, clip_to_image="false"), predictions, [(100, 200)], [transform])
    np.testing.assert_allclose(unclipped.image(0)[3][0], [[100.0, 25.0, 0.9], [218.75, -18.75, 0.3]], atol=1e-4)


def test_each_kept_box_keeps_its_own_keypoints_and_padding_rows_are_zero(tmp_path):
    """Two images in one batch: the first's two poses (the better one first), the second's none; the answer's
    ``KEYPOINTS`` is ``[2, 2, 2, 3]``, the second image's rows zero."""
    first = raw([((20, 20, 10, 10), 0.5, [(18, 17, 0.6), (22, 23, 0.4)]), ((80, 80, 10, 10), 0.9, [(79, 76, 0.8), (81, 84, 0.7)])])
    identity = [1.0, 1.0, 0.0, 0.0]
    found = run(pose_post(tmp_path), np.concatenate([first, raw([])]), [(100, 100)] * 2, [identity] * 2)
    outputs = found.outputs()
    assert outputs["KEYPOINTS"].shape == (2, 2, 2, 3) and outputs["COUNT"].tolist() == [[2], [0]]
    np.testing.assert_allclose(outputs["KEYPOINTS"][0, 0], [[79, 76, 0.8], [81, 84, 0.7]], atol=1e-6)
    np.testing.assert_allclose(outputs["KEYPOINTS"][0, 1], [[18, 17, 0.6], [22, 23, 0.4]], atol=1e-6)
    assert not outputs["KEYPOINTS"][1].any()
