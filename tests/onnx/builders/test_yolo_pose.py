"""Ultralytics' pose exports brought with ``new-pipeline --from yolo``, built, run in process, against Ultralytics' predictor.

The model is the tests' own YOLOv8n-pose (tests/support/yolo_pose.py: triangles and arrowheads, their apex, left and
right tips the keypoints), trained by Ultralytics and exported twice: ``static.onnx`` (batch 1, made dynamic by
new-pipeline) and ``dynamic.onnx`` (``dynamic=True``: every dim symbolic). Each is brought into a temporary model
repository as a user would (``python -m builders new-pipeline NAME --from yolo --model FILE``), exported and checked
(``builders export``, ``builders check``, ``vision_serving.consistency``), then served in process on the CPU core
(:class:`vision_serving.served.ServedPipeline`) on scenes it never saw and package photos: the same count and classes
per photo as ``YOLO(file).predict`` (tests/support/ultralytics_yolo.py), each box matched with IoU >= 0.98, its score
and its keypoints' scores within 1e-3, its keypoints within 1 pixel (x and y) in the photo.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

from builders import photos
from builders.families import yolo as yolo_family
from tests.support import yolo_exports, yolo_pose
from vision_serving import layout, model_config
from vision_serving.pipeline_configs import PipelineConfigs
from vision_serving.served import ServedPipeline
from vision_serving.tasks import detection

EXPORTS = {"shapes_pose": "static", "shapes_pose_dynamic": "dynamic"}  # pipeline -> the export it serves
MIN_IOU = 0.98
MAX_KEYPOINT_PIXELS = 1.0
MAX_SCORE_DIFF = 1e-3
PACKAGE_PHOTOS = ("astronaut", "coffee", "rocket")


def run(*args: str) -> str:
    """``python ARGS`` from the project's root (as the docs type it): its stdout and stderr."""
    result = subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=layout.REPOSITORY_ROOT, timeout=900)
    assert result.returncode == 0, f"{' '.join(args)} exited {result.returncode}:\n{result.stdout[-3000:]}\n{result.stderr[-4000:]}"
    return result.stdout + result.stderr


@pytest.fixture(scope="module")
def trained() -> Path:
    return yolo_pose.trained()


@pytest.fixture(scope="module")
def model_files(trained, tmp_path_factory) -> dict[str, Path]:
    """Each pipeline's model file, as a user would have it (outside the repository)."""
    folder = tmp_path_factory.mktemp("downloads")
    return {name: Path(shutil.copy(trained / f"{kind}.onnx", folder / f"{name}.onnx")) for name, kind in EXPORTS.items()}


@pytest.fixture(scope="module")
def brought(model_files, tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """The temporary model repository with both pipelines brought, exported and checked (TensorRT's support); what each
    command said."""
    repository = tmp_path_factory.mktemp("pose") / "model_repository"
    repository.mkdir()
    said = yolo_exports.bring(model_files, repository)
    return repository, said


@pytest.fixture(scope="module")
def pictures(tmp_path_factory) -> dict[str, bytes]:
    """Scenes the model never saw (many sizes, PNG and JPEG) and package photos without its shapes."""
    scenes = yolo_pose.write_scenes(tmp_path_factory.mktemp("scenes"), 12, seed=31)
    return {**scenes, **{f"{name}.png": photos.photo_bytes(name) for name in PACKAGE_PHOTOS}}


def test_new_pipeline_reads_the_pose_exports(brought):
    """The head, the classes, the keypoints' shape and names from Ultralytics' metadata; the answers' keypoints."""
    repository, said = brought
    assert "shapes_pose.onnx: yolo_pose head, 2 classes (triangle, arrowhead), input 128x128, Ultralytics metadata" in said["shapes_pose"]
    assert "becomes dynamic" in said["shapes_pose"]
    assert "shapes_pose_dynamic.onnx: yolo_pose head, 2 classes (triangle, arrowhead), input 128x128" in said["shapes_pose_dynamic"]
    for name in EXPORTS:
        assert "nothing blocks a TensorRT build" in said[name]
        pipeline = layout.pipeline(name, repository)
        post = model_config.load_config(pipeline.model_dir("postprocess"))
        assert model_config.parameter(post, "head") == "yolo_pose"
        assert model_config.parameter(post, "keypoint_shape") == "3,3"
        assert model_config.parameter(post, "keypoint_names") == ",".join(yolo_pose.KEYPOINTS)
        ensemble = {output.name: list(output.dims) for output in model_config.load_config(pipeline.ensemble_dir).output}
        assert ensemble["KEYPOINTS"] == [-1, 3, 3]


def test_the_repository_is_consistent(brought):
    repository, _ = brought
    assert "ok: " in run("-m", "vision_serving.consistency", "--repository", str(repository))


def test_an_export_without_keypoint_names_serves_them_unnamed(trained, tmp_path):
    """Ultralytics before ``kpt_names`` (its metadata gives the shape only): the keypoints are served without names."""
    model = onnx.load(str(trained / "static.onnx"))
    kept = {prop.key: prop.value for prop in model.metadata_props if prop.key != "kpt_names"}
    assert "kpt_names" in {prop.key for prop in model.metadata_props} and kept["kpt_shape"] == "[3, 3]"
    del model.metadata_props[:]
    onnx.helper.set_model_props(model, kept)
    onnx.save(model, tmp_path / "older.onnx")
    found = yolo_family.inspect(tmp_path / "older.onnx")
    assert (found.head, found.head_parameters) == ("yolo_pose", (("keypoint_shape", "3,3"),))


@pytest.fixture(scope="module")
def predicted(model_files, pictures) -> dict[str, dict[str, dict[str, np.ndarray]]]:
    """Ultralytics' predictor on each pipeline's model file (one run for both)."""
    return yolo_exports.references(model_files, pictures, task="pose")


@pytest.mark.parametrize("name", EXPORTS)
def test_poses_equal_ultralytics_predictor(brought, predicted, pictures, name):
    repository, _ = brought
    names = sorted(pictures)
    expected = predicted[name]
    served = ServedPipeline.load(PipelineConfigs.load(layout.pipeline(name, repository)), "cpu")
    result = served.run([pictures[n] for n in names])
    found = sum(len(expected[n]["scores"]) for n in names)
    assert found >= len(names) - len(PACKAGE_PHOTOS)  # the model finds shapes: a real comparison
    ious, keypoint_errors, score_errors = [], [], []
    for index, photo in enumerate(names):
        boxes, scores, class_ids, keypoints = result.image(index)
        reference = expected[photo]
        assert len(boxes) == len(reference["boxes"]), photo
        assert sorted(class_ids.tolist()) == sorted(reference["classes"].tolist()), photo
        assert keypoints is not None and keypoints.shape == (len(boxes), len(yolo_pose.KEYPOINTS), 3), photo
        matches = detection.match_by_class((boxes, class_ids), (reference["boxes"], reference["classes"]), MIN_IOU)
        assert len(matches) == len(boxes), f"{photo}: {detection.box_iou(boxes, reference['boxes'])}"
        for i, j, iou in matches:
            ious.append(iou)
            difference = np.abs(keypoints[i] - reference["keypoints"][j])  # x, y in pixels; the keypoint's score
            keypoint_errors.append(float(difference[:, :2].max()))
            score_errors.append(max(abs(float(scores[i] - reference["scores"][j])), float(difference[:, 2].max())))
    print(
        f"\n{name} ({EXPORTS[name]}.onnx) vs Ultralytics' predictor: {len(names)} photos, {found} poses; "
        f"min box IoU {min(ious):.6f}, max keypoint error {max(keypoint_errors):.4f} px, max score difference {max(score_errors):.2e}"
    )
    assert max(keypoint_errors) <= MAX_KEYPOINT_PIXELS and max(score_errors) <= MAX_SCORE_DIFF
