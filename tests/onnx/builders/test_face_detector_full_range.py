"""MediaPipe's full-range face detector brought as a user would: a copy of face_detector, edited, exported, and its
faces compared with MediaPipe's own ``FaceDetection(model_selection=1)``.

The copy lives in a temporary model repository (the project's keeps its four pipelines): ``new-pipeline
face_detector_full_range --from face_detector``; the recipe's ``member`` and ``sha256`` (the
``face_detection_full_range_sparse.tflite`` of the same pinned mediapipe wheel); the core's tensors in the spec,
192x192 in and 2304 anchors (48 x 48, stride 4) out, and the postprocess's anchor and decoding options of MediaPipe's
full-range graph
(the mediapipe 0.10.14 wheel's ``face_detection_full_range_cpu.binarypb`` as MediaPipe expands it:
SsdAnchorsCalculator num_layers 1, strides [4], input 192x192, interpolated_scale_aspect_ratio 0;
TensorsToDetectionsCalculator num_boxes 2304, x/y/w/h_scale 192, min_score_thresh 0.6), all in pipeline.toml; then
``python -m builders configs``, which writes every config holding them (the core's and its six configs/ variants, the
preprocess's pixels, the postprocess's inputs and parameters, the warm-up samples). ``python -m builders
export`` densifies the model's sparse float16 weights on the way to tf2onnx (builders/tflite_densify/).

``FaceDetection(min_detection_confidence=...)`` does not reach the calculators in mediapipe 0.10.14 (0.05 and 0.9
find the same faces): the full-range graph's own min_score_thresh, 0.6, is what MediaPipe applies, so it is the
copy's score_threshold, and with it every box, score and keypoint is MediaPipe's.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from builders import loaded, scaffold
from tests.support import faces, references
from vision_serving import consistency, image_codec, layout
from vision_serving.tasks import detection

NAME = "face_detector_full_range"
TEMPLATE = "face_detector"
MEMBER = "mediapipe/modules/face_detection/face_detection_full_range_sparse.tflite"
SHA256 = "2c3728e6da56f21e21a320433396fb06d40d9088f2247c05e5635a688d45dfe1"
# The core's dims: 192x192 pixels in, 2304 anchors (48 x 48, stride 4) out; `builders configs` carries them to the rest.
DIMS = {(128, 128, 3): (192, 192, 3), (896, 16): (2304, 16), (896, 1): (2304, 1)}
POSTPROCESS = {
    "num_layers": "1",
    "strides": "[4]",
    "input_size_height": "192",
    "input_size_width": "192",
    "interpolated_scale_aspect_ratio": "0.0",
    "num_boxes": "2304",
    "x_scale": "192.0",
    "y_scale": "192.0",
    "w_scale": "192.0",
    "h_scale": "192.0",
    "score_threshold": "0.6",
}
MIN_IOU = 0.98
MAX_SCORE_DIFF = 1e-3
MAX_KEYPOINT_ERROR = 0.01  # of the face's width


@dataclass(frozen=True)
class FullRange:
    pipeline: layout.Pipeline
    edited: list[str]
    export_log: str


def dims_pattern(dims: tuple[int, ...], key: str = "dims: ") -> str:
    return re.escape(key) + r"\[\s*" + r",\s*".join(str(d) for d in dims) + r"\s*\]"


def edit_for_full_range(pipeline: layout.Pipeline, repository: Path) -> None:
    """The edits a user makes to the copy, and the command that carries the core's dims to the other configs."""
    recipe = pipeline.recipe
    text = recipe.read_text()
    for key, value in (("member", MEMBER), ("sha256", SHA256)):
        text, count = re.subn(rf'^{key} = ".*"$', f'{key} = "{value}"', text, flags=re.M)
        assert count == 1, key
    text = re.sub(
        r"^description = .*$",
        'description = "MediaPipe face detection, full range: face boxes and 6 keypoints in pixels"',
        text,
        flags=re.M,
    )
    for old, new in DIMS.items():
        text, count = re.subn(dims_pattern(old, "dims = "), f"dims = [{', '.join(map(str, new))}]", text)
        assert count == 1, old
    for key, value in POSTPROCESS.items():
        text, count = re.subn(rf"^{key} = .*$", f"{key} = {value}", text, flags=re.M)
        assert count == 1, key
    recipe.write_text(text)
    command = [sys.executable, "-m", "builders", "configs", "--pipeline", NAME, "--model-repository", str(repository)]
    configs = subprocess.run(command, cwd=layout.REPOSITORY_ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert configs.returncode == 0, configs.stderr[-3000:]


def snapshot(folder: Path) -> dict[str, str]:
    return {path.relative_to(folder).as_posix(): path.read_text() for path in sorted(folder.rglob("*")) if path.is_file()}


@pytest.fixture(scope="module")
def full_range(tmp_path_factory) -> FullRange:
    repository = tmp_path_factory.mktemp("full_range") / "model_repository"
    template = layout.pipeline(TEMPLATE)
    shutil.copytree(template.repository, repository / TEMPLATE, ignore=shutil.ignore_patterns("*.onnx", "*.json", "__pycache__"))
    scaffold.new_pipeline(NAME, TEMPLATE, repository, log=lambda _: None)
    shutil.rmtree(repository / TEMPLATE)  # the repository holds the copy alone
    pipeline = layout.pipeline(NAME, repository)
    before = snapshot(pipeline.repository)
    edit_for_full_range(pipeline, repository)
    after = snapshot(pipeline.repository)
    edited = sorted(name for name in after if before.get(name) != after[name])
    command = [sys.executable, "-m", "builders", "export", "--pipeline", NAME, "--model-repository", str(repository)]
    export = subprocess.run(command, cwd=layout.REPOSITORY_ROOT, capture_output=True, text=True, timeout=900, check=False)
    assert export.returncode == 0, export.stderr[-4000:]
    return FullRange(pipeline, edited, export.stderr)


@pytest.fixture(scope="module")
def photos() -> dict[str, bytes]:
    return faces.photo_set()


@pytest.fixture(scope="module")
def mediapipe(photos) -> dict[str, dict[str, np.ndarray]]:
    return references.mediapipe_outputs("face_detection", photos, model_selection=1)


def test_the_copy_changes_its_spec_and_the_command_the_nine_configs_that_hold_dims(full_range):
    core, pre, post = (full_range.pipeline.model_name(role) for role in ("core", "preprocess", "postprocess"))
    variants = ["cpu", "cpu_int8", "cpu_onnxruntime", "cpu_openvino", "cpu_openvino_backend", "cpu_openvino_fp32"]
    holding_dims = [
        f"{core}/config.pbtxt",
        *(f"{core}/configs/{variant}.pbtxt" for variant in variants),
        f"{post}/config.pbtxt",
        f"{pre}/config.pbtxt",
    ]
    # The one hand edit (the labels came with the copy), the configs holding dims, and the ensemble's config, whose
    # first comment is the spec's description (edited too: "full range").
    ensemble = f"{full_range.pipeline.name}/config.pbtxt"
    assert full_range.edited == sorted(["pipeline.toml", ensemble, *holding_dims])
    assert "full range" in (full_range.pipeline.repository / ensemble).read_text().splitlines()[1]
    for name in holding_dims:
        text = (full_range.pipeline.repository / name).read_text()
        assert not any(re.search(dims_pattern(old), text) for old in DIMS), name
        assert re.search(dims_pattern((192, 192, 3)) if name.startswith((core, pre)) else dims_pattern((2304, 16)), text), name
    assert consistency.check_repository(full_range.pipeline.repository.parent) == []


def test_export_densifies_the_sparse_weights_and_checks_them(full_range):
    log = full_range.export_log
    assert "face_detection_full_range_sparse.tflite stores 46 constant tensor(s) sparse, which tf2onnx cannot read" in log
    assert "densified 46 sparse tensor(s) (FLOAT16) and removed 46 DENSIFY operator(s): source.dense.tflite" in log
    report = json.loads((full_range.pipeline.build_dir / "source.dense.json").read_text())
    assert report["source"] == Path(MEMBER).name and report["densify_ops_removed"] == 46
    assert {tuple(t["formats"]) for t in report["tensors"]} == {("DENSE", "DENSE", "DENSE", "SPARSE_CSR")}
    check = report["verification"]
    assert check["densify_outputs_equal"] == 46 and check["max_abs_diff"] <= 1e-5  # TFLite's own DENSIFY, bit for bit


def test_the_core_takes_192_pixels_and_answers_2304_anchors(full_range):
    import onnx

    model = onnx.load(str(full_range.pipeline.onnx("fp32")))

    def dims(value) -> list[int | str]:
        return [d.dim_param or d.dim_value for d in value.type.tensor_type.shape.dim]

    assert [(value.name, dims(value)) for value in model.graph.input] == [("images", ["batch", 192, 192, 3])]
    assert sorted((value.name, dims(value)) for value in model.graph.output) == [
        ("classificators", ["batch", 2304, 1]),
        ("regressors", ["batch", 2304, 16]),
    ]


def agreement(full_range: FullRange, photos: dict[str, bytes], mediapipe: dict[str, dict[str, np.ndarray]]) -> dict[str, dict[str, float]]:
    """Per photo: faces served and MediaPipe's, matched (IoU >= 0.5), the smallest matched IoU, the largest score
    and keypoint differences (keypoints as a share of the face's width). MediaPipe's boxes are clipped to the image,
    as the served ones are (``clip_to_image``)."""
    names = sorted(photos)
    result = loaded.load(full_range.pipeline).served().run([photos[name] for name in names])
    assert isinstance(result, detection.DetectionResult)
    figures = {}
    for index, name in enumerate(names):
        boxes, scores, _, keypoints = result.image(index)
        assert keypoints is not None
        height, width = image_codec.decode_rgb(photos[name], faces.LIMITS).shape[:2]
        size = np.array([width, height], np.float32)
        reference = mediapipe[name]
        reference_boxes = np.clip(reference["boxes"].reshape(-1, 2, 2), 0, size).reshape(-1, 4)
        reference_keypoints = np.clip(reference["keypoints"], 0, size)
        matches = detection.match_boxes(boxes, reference_boxes, 0.5)
        figures[name] = {
            "served": len(boxes),
            "mediapipe": len(reference_boxes),
            "matched": len(matches),
            "min_iou": min((float(iou) for _, _, iou in matches), default=1.0),
            "max_score_diff": max((abs(float(scores[i] - reference["scores"][j])) for i, j, _ in matches), default=0.0),
            "max_keypoint_error": max(
                (
                    float(
                        np.linalg.norm(keypoints[i] - reference_keypoints[j], axis=-1).max()
                        / (reference_boxes[j, 2] - reference_boxes[j, 0])
                    )
                    for i, j, _ in matches
                ),
                default=0.0,
            ),
        }
    return figures


def test_faces_match_mediapipe_full_range(full_range, photos, mediapipe):
    """The same faces as MediaPipe's FaceDetection(model_selection=1) in every photo (none, one, several): each box
    with IoU >= 0.98, its score within 0.001, its keypoints within 1 % of the face's width."""
    figures = agreement(full_range, photos, mediapipe)
    for name, found in figures.items():
        print(f"{name}: {found}")
    assert sum(found["mediapipe"] for found in figures.values()) >= 15  # a real comparison: the composites' faces
    for name, found in figures.items():
        assert found["served"] == found["mediapipe"] == found["matched"], (name, found)
        assert found["min_iou"] >= MIN_IOU and found["max_score_diff"] <= MAX_SCORE_DIFF, (name, found)
        assert found["max_keypoint_error"] <= MAX_KEYPOINT_ERROR, (name, found)
