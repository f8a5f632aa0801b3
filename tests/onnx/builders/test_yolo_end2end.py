"""End-to-end YOLO exports of every box task (YOLO26's NMS-free head, ``nms=True``) answer as Ultralytics' predictor.

Segment, pose and oriented-box models are brought with ``new-pipeline --from yolo`` in each ``nms`` option Ultralytics
8.4 exports them with: YOLO26's NMS-free head (``nms=False``, static and, for the segmenter, ``dynamic=True``), YOLO26's
one-to-many head (``nms`` unset), and a YOLOv8 model with NMS in the graph (``nms=True``). The models are the tests'
own (:mod:`tests.support.yolo26`, :mod:`tests.support.yolo_segment`, ...), trained here on drawn shapes. Each pipeline
is built (``builders export``), checked (``builders check``: what blocks a TensorRT build) and run in process as served
(decode, letterbox, the CPU core, the postprocess) on scenes the models never saw and package photos, against
``YOLO(file).predict`` on the same file: per photo the same count and classes in the same order, box IoU at least
``MIN_BOX_IOU``, scores within ``MAX_SCORE_DIFF``, and the task's own answers: masks' IoU at least ``MIN_MASK_IOU``,
keypoints within ``MAX_KEYPOINT_PIXELS``, rotated boxes' IoU at least ``MIN_ROTATED_IOU``. An end-to-end pipeline
answers with the tensors of its task's one-to-many pipeline. The figures are printed (``pytest -s``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from builders import photos
from tests.support import yolo26, yolo_exports, yolo_obb, yolo_pose, yolo_segment
from vision_serving import layout, model_config
from vision_serving.pipeline_configs import PipelineConfigs
from vision_serving.served import ServedPipeline
from vision_serving.tasks.detection import box_iou
from vision_serving.tasks.segmentation import iou

# pipeline -> (task, family, export file, the head new-pipeline must choose)
PIPELINES = {
    "segment26_e2e": ("segment", "yolo26", "end2end", "end2end_segment"),
    "segment26_e2e_dynamic": ("segment", "yolo26", "end2end_dynamic", "end2end_segment"),
    "segment26": ("segment", "yolo26", "static", "yolo_segment"),
    "segment_nms": ("segment", "yolov8", "nms", "end2end_segment"),
    "pose26_e2e": ("pose", "yolo26", "end2end", "end2end_pose"),
    "pose_nms": ("pose", "yolov8", "nms", "end2end_pose"),
    "obb26_e2e": ("obb", "yolo26", "end2end", "end2end_obb"),
    "obb_nms": ("obb", "yolov8", "nms", "end2end_obb"),
}
# An end-to-end pipeline and the one-to-many pipeline of its task whose tensors it answers with.
SAME_TENSORS = {"segment26_e2e": "segment26", "segment_nms": "segment26", "segment26_e2e_dynamic": "segment26"}
PACKAGE_PHOTOS = ("astronaut", "coffee")
SCENES = 14
MIN_DETECTIONS = 8  # found in the photos by both: enough to compare
MIN_BOX_IOU = 0.99
MAX_SCORE_DIFF = 1e-3
MIN_MASK_IOU = 0.95
MAX_KEYPOINT_PIXELS = 1.0
MIN_ROTATED_IOU = 0.98
ODDS = 8.0  # yolo_exports.surer: a score of 0.04 becomes 0.25


def trained(task: str, family: str) -> Path:
    if family == "yolo26":
        return yolo26.trained_task(task)
    return {"segment": yolo_segment.trained, "pose": yolo_pose.trained, "obb": yolo_obb.trained}[task]()


@pytest.fixture(scope="module")
def model_files(tmp_path_factory) -> dict[str, Path]:
    """Each pipeline's model file as a user has it, its scores' odds raised (``yolo_exports.surer``: models trained for
    a minute or two score low)."""
    folder = tmp_path_factory.mktemp("end2end_exports")
    files = {}
    for name, (task, family, export, _) in PIPELINES.items():
        source = trained(task, family) / f"{export}.onnx"
        target = folder / f"{name}.onnx"
        files[name] = yolo_exports.surer(source, target, ODDS)
    return files


@pytest.fixture(scope="module")
def brought(model_files, tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """The test's model repository, each pipeline brought, built and checked; what the commands said."""
    repository = tmp_path_factory.mktemp("end2end") / "model_repository"
    repository.mkdir()
    said = yolo_exports.bring(model_files, repository)
    return repository, said


def test_new_pipeline_picks_the_head_of_each_nms_option(brought):
    repository, said = brought
    for name, (_, _, _, head) in PIPELINES.items():
        assert f"{name}.onnx: {head} head" in said[name], said[name]
        assert "nothing blocks a TensorRT build" in said[name], said[name]
        assert model_config.parameter(model_config.load_config(layout.pipeline(name, repository).model_dir("postprocess")), "head") == head
    # A static batch-1 NMS-free export is made dynamic (its top K per image batches); nms=True serves its batch of 1.
    assert "the static batch of 1 becomes dynamic" in said["segment26_e2e"]
    assert "max_batch_size 1" in said["segment_nms"]
    assert "ok: " in yolo_exports.run_python("-m", "vision_serving.consistency", "--repository", str(repository))


def test_an_end_to_end_pipeline_answers_with_its_tasks_tensors(brought):
    repository, _ = brought

    def answers(name: str) -> dict[str, tuple[str, list[int]]]:
        ensemble = model_config.load_config(layout.pipeline(name, repository).ensemble_dir)
        return {output.name: (model_config.dtype_name(output.data_type), list(output.dims)) for output in ensemble.output}

    for end_to_end, one_to_many in SAME_TENSORS.items():
        assert answers(end_to_end) == answers(one_to_many), end_to_end
    assert {"KEYPOINTS"} <= set(answers("pose26_e2e")) and {"ROTATED_BOXES", "CORNERS"} <= set(answers("obb26_e2e"))


@pytest.fixture(scope="module")
def pictures(tmp_path_factory) -> dict[str, dict[str, bytes]]:
    """Per task: scenes its models never saw (many sizes, PNG and JPEG) and package photos."""
    package = {f"{name}.png": photos.photo_bytes(name) for name in PACKAGE_PHOTOS}
    return {
        "segment": {**yolo_segment.write_scenes(SCENES, seed=41), **package},
        "pose": {**yolo_pose.write_scenes(tmp_path_factory.mktemp("pose_scenes"), SCENES, seed=41), **package},
        "obb": {**yolo_obb.write_scenes(tmp_path_factory.mktemp("obb_scenes"), SCENES, seed=41), **package},
    }


@pytest.fixture(scope="module")
def predicted(model_files, pictures) -> dict[str, dict[str, dict[str, np.ndarray]]]:
    """Ultralytics' predictor on each pipeline's file (one process per task)."""
    found: dict[str, dict[str, dict[str, np.ndarray]]] = {}
    for task in ("segment", "pose", "obb"):
        files = {name: model_files[name] for name, spec in PIPELINES.items() if spec[0] == task}
        found |= yolo_exports.references(files, pictures[task], task=task)
    return found


def compare_segment(
    outputs: dict[str, np.ndarray], index: int, expected: dict[str, np.ndarray], size: tuple[int, int]
) -> dict[str, list[float]]:
    """Ultralytics drops a detection whose mask holds no pixel; the pipeline keeps it with an empty mask: left out."""
    height, width = size
    count = int(outputs["COUNT"][index, 0])
    masks = [yolo_segment.placed(outputs["MASKS"][index, k], outputs["MASK_BOXES"][index, k], height, width) for k in range(count)]
    kept = [k for k in range(count) if masks[k].any()]
    assert len(kept) == len(expected["boxes"]), f"{len(kept)} detections, Ultralytics {len(expected['boxes'])}"
    assert outputs["CLASS_IDS"][index, kept].tolist() == expected["classes"].tolist()
    return {
        "box_iou": [float(box_iou(outputs["BOXES"][index, k], expected["boxes"][row])[0, 0]) for row, k in enumerate(kept)],
        "score": [abs(float(outputs["SCORES"][index, k] - expected["scores"][row])) for row, k in enumerate(kept)],
        "mask_iou": [iou(masks[k], expected["masks"][row]) for row, k in enumerate(kept)],
    }


def compare_pose(
    outputs: dict[str, np.ndarray], index: int, expected: dict[str, np.ndarray], size: tuple[int, int]
) -> dict[str, list[float]]:
    count = int(outputs["COUNT"][index, 0])
    assert count == len(expected["boxes"]), f"{count} detections, Ultralytics {len(expected['boxes'])}"
    assert outputs["CLASS_IDS"][index, :count].tolist() == expected["classes"].tolist()
    difference = np.abs(outputs["KEYPOINTS"][index, :count] - expected["keypoints"])  # x, y in pixels; the keypoint's score
    return {
        "box_iou": [float(box_iou(outputs["BOXES"][index, k], expected["boxes"][k])[0, 0]) for k in range(count)],
        "score": [*np.abs(outputs["SCORES"][index, :count] - expected["scores"]).tolist(), *difference[..., 2].ravel().tolist()],
        "keypoint_px": difference[..., :2].ravel().tolist(),
    }


def compare_obb(
    outputs: dict[str, np.ndarray], index: int, expected: dict[str, np.ndarray], size: tuple[int, int]
) -> dict[str, list[float]]:
    count = int(outputs["COUNT"][index, 0])
    assert count == len(expected["boxes"]), f"{count} detections, Ultralytics {len(expected['boxes'])}"
    assert outputs["CLASS_IDS"][index, :count].tolist() == expected["classes"].tolist()
    rotated = outputs["ROTATED_BOXES"][index, :count]
    np.testing.assert_allclose(rotated, expected["rotated"], rtol=1e-3, atol=0.05)  # the same xywhr, the angle as the model gave it
    return {
        "rotated_iou": [yolo_obb.polygon_iou(mine, theirs) for mine, theirs in zip(outputs["CORNERS"][index, :count], expected["corners"])],
        "score": np.abs(outputs["SCORES"][index, :count] - expected["scores"]).tolist(),
    }


COMPARE: dict[str, Callable[..., dict[str, list[float]]]] = {"segment": compare_segment, "pose": compare_pose, "obb": compare_obb}
BOUNDS = {  # figure -> (at least, at most)
    "box_iou": (MIN_BOX_IOU, 1.0),
    "score": (0.0, MAX_SCORE_DIFF),
    "mask_iou": (MIN_MASK_IOU, 1.0),
    "keypoint_px": (0.0, MAX_KEYPOINT_PIXELS),
    "rotated_iou": (MIN_ROTATED_IOU, 1.0 + 1e-9),
}


@pytest.mark.parametrize("pipeline", sorted(PIPELINES))
def test_the_pipeline_answers_as_ultralytics_predictor(pipeline, brought, predicted, pictures):
    repository, _ = brought
    task = PIPELINES[pipeline][0]
    images = pictures[task]
    names = sorted(images)
    served = ServedPipeline.load(PipelineConfigs.at(repository / pipeline), "cpu")
    result = served.run([images[name] for name in names])
    outputs = result.outputs()
    figures: dict[str, list[float]] = {}
    for index, name in enumerate(names):
        size = (int(result.sizes[index][0]), int(result.sizes[index][1]))
        try:
            found = COMPARE[task](outputs, index, predicted[pipeline][name], size)
        except AssertionError as error:
            raise AssertionError(f"{pipeline} {name}: {error}") from None
        for figure, values in found.items():
            figures.setdefault(figure, []).extend(values)
    detections = len(figures["score"]) if task != "pose" else len(figures["box_iou"])
    worst = {figure: min(values) if BOUNDS[figure][0] > 0 else max(values) for figure, values in figures.items()}
    print(
        f"\n{pipeline} ({PIPELINES[pipeline][1]} {PIPELINES[pipeline][2]}.onnx): {len(names)} photos, {detections} detections as "
        f"Ultralytics' (count, classes, order); worst: " + ", ".join(f"{figure} {value:.6g}" for figure, value in worst.items())
    )
    assert detections >= MIN_DETECTIONS, f"the model found {detections} objects in {len(names)} photos: too few to compare"
    for figure, values in figures.items():
        low, high = BOUNDS[figure]
        assert low <= min(values) and max(values) <= high, f"{pipeline}: {figure} in [{min(values)}, {max(values)}], not in [{low}, {high}]"
