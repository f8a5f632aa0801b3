"""An Ultralytics oriented-box model brought with ``new-pipeline --from yolo`` answers as Ultralytics' predictor does.

A YOLOv8n-obb trained here on drawn bars and ellipses (tests/support/yolo_obb.py; cached under
``.build/test-yolo/``), its static and dynamic exports (their class scores' odds raised in the graph,
``yolo_exports.surer``: a model trained for minutes scores under the predictor's 0.25) each brought into
a model repository of the test's own (``python -m builders new-pipeline NAME --from yolo --model
FILE``), built (``python -m builders export``) and checked (``python -m builders check``, ``python -m
vision_serving.consistency``), then run in process as served (decode, letterbox, the CPU core, the postprocess), against
Ultralytics' predictor on the same export file, on scenes the model never saw and package photos:
per photo the same count and classes, in the same order, the scores within ``SCORE_TOLERANCE``; each
oriented box's IoU with the reference's (the polygons of their CORNERS) at least ``MIN_ROTATED_IOU``,
its ROTATED_BOXES the reference's ``xywhr`` (the same angle within ``ANGLE_TOLERANCE`` radians), its
BOXES the reference's ``xyxy`` clipped to the photo (``clip_to_image``): the same but for the
letterbox's two gains, which differ by the rounding of its resize (the task maps the box's bounds per
axis, Ultralytics the box's centre and size, then takes the bounds): at most half the box's longer
side (model-input pixels) x ``|1 / gain_x - 1 / gain_y|``, plus ``BOX_TOLERANCE`` pixels. The figures
are printed (``pytest -s``).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from builders import photos
from tests.support import yolo_exports, yolo_obb
from vision_serving import layout
from vision_serving.pipeline_configs import PipelineConfigs
from vision_serving.preprocessing import YoloLetterbox
from vision_serving.served import ServedPipeline

PIPELINES = {"bars_obb": "static", "bars_obb_dynamic": "dynamic"}  # pipeline -> the export it serves
PACKAGE_PHOTOS = ("astronaut", "coffee")
SCENES = 12
MIN_ROTATED_IOU = 0.98
ANGLE_TOLERANCE = 1e-3
SCORE_TOLERANCE = 1e-3
BOX_TOLERANCE = 0.01
IMGSZ = 128  # the exports' square input


def run(*args: str) -> str:
    """``python ARGS`` in the project's root; its stdout and stderr."""
    result = subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=layout.REPOSITORY_ROOT, timeout=1800)
    assert result.returncode == 0, f"{' '.join(args)} exited {result.returncode}:\n{result.stdout[-3000:]}\n{result.stderr[-5000:]}"
    return result.stdout + result.stderr


@pytest.fixture(scope="module")
def exports(tmp_path_factory) -> dict[str, Path]:
    """Each export, its scores' odds raised (``yolo_exports.surer``), by its name."""
    trained, folder = yolo_obb.trained(), tmp_path_factory.mktemp("obb_exports")
    return {
        name: yolo_exports.surer(trained / f"{name}.onnx", folder / f"bars_{name}.onnx", yolo_obb.ODDS) for name in set(PIPELINES.values())
    }


@pytest.fixture(scope="module")
def repository(tmp_path_factory, exports) -> Path:
    """The test's model repository: each export brought and built."""
    folder = tmp_path_factory.mktemp("obb") / "model_repository"
    folder.mkdir()
    for name, export in PIPELINES.items():
        where = ["--model-repository", str(folder)]
        log = run("-m", "builders", "new-pipeline", name, "--from", "yolo", "--model", str(exports[export]), *where)
        assert f"bars_{export}.onnx: yolo_obb head, 2 classes (bar, ellipse), input 128x128, Ultralytics metadata" in log
        run("-m", "builders", "export", "--pipeline", name, *where)
        assert "nothing blocks a TensorRT build" in run("-m", "builders", "check", "--pipeline", name, *where)
    return folder


def test_the_repository_is_consistent(repository):
    assert "ok: 2 pipelines" in run("-m", "vision_serving.consistency", "--repository", str(repository))


@pytest.fixture(scope="module")
def images(tmp_path_factory) -> dict[str, bytes]:
    scenes = yolo_obb.write_scenes(tmp_path_factory.mktemp("obb_scenes"), SCENES, seed=11)
    return {**scenes, **{f"{name}{photos.photo_path(name).suffix}": photos.photo_bytes(name) for name in PACKAGE_PHOTOS}}


@pytest.fixture(scope="module")
def predicted(exports, images) -> dict[str, dict[str, dict[str, np.ndarray]]]:
    """Ultralytics' predictor on each export, its scores' odds raised (one run for both), by its name."""
    return yolo_exports.references(exports, images, task="obb")


@pytest.mark.parametrize("pipeline", sorted(PIPELINES))
def test_the_pipeline_answers_as_ultralytics_predictor(pipeline, repository, predicted, images):
    names = sorted(images)
    served = ServedPipeline.load(PipelineConfigs.at(repository / pipeline), "cpu")
    result = served.run([images[name] for name in names])
    outputs = result.outputs()
    reference = predicted[PIPELINES[pipeline]]
    rotated_ious: list[float] = []
    angle_errors: list[float] = []
    box_errors: list[float] = []
    box_excess: list[float] = []  # past the bound the letterbox's two gains allow
    score_errors: list[float] = []
    for index, name in enumerate(names):
        expected = reference[name]
        height, width = (int(v) for v in result.sizes[index])
        count = int(outputs["COUNT"][index, 0])
        assert count == len(expected["boxes"]), f"{pipeline} {name}: {count} detections, Ultralytics {len(expected['boxes'])}"
        assert outputs["CLASS_IDS"][index, :count].tolist() == expected["classes"].tolist(), name
        assert outputs["LABELS"][index, :count].tolist() == [yolo_obb.CLASSES[c].encode() for c in expected["classes"]]
        rotated, corners = outputs["ROTATED_BOXES"][index, :count], outputs["CORNERS"][index, :count]
        rotated_ious += [yolo_obb.polygon_iou(mine, theirs) for mine, theirs in zip(corners, expected["corners"])]
        angle_errors += np.abs(rotated[:, 4] - expected["rotated"][:, 4]).tolist()
        clipped = np.clip(expected["boxes"], 0, [width, height, width, height])
        errors = np.abs(outputs["BOXES"][index, :count] - clipped).max(axis=1, initial=0)
        letterbox = YoloLetterbox.of(height, width, IMGSZ, IMGSZ)
        gain_x, gain_y = letterbox.new_width / width, letterbox.new_height / height
        longer = np.maximum(expected["rotated"][:, 2] * gain_x, expected["rotated"][:, 3] * gain_y)  # model-input pixels
        box_errors += errors.tolist()
        box_excess += (errors - longer / 2 * abs(1 / gain_x - 1 / gain_y)).tolist()
        score_errors += np.abs(outputs["SCORES"][index, :count] - expected["scores"]).tolist()
        np.testing.assert_allclose(rotated[:, :4], expected["rotated"][:, :4], rtol=1e-3, atol=0.05, err_msg=name)
    detections = len(rotated_ious)
    print(
        f"\n{pipeline}: {len(names)} photos, {detections} detections as Ultralytics' (count, classes, order), rotated IoU "
        f"min {min(rotated_ious, default=1.0):.7f} mean {np.mean(rotated_ious) if rotated_ious else 1.0:.7f}, angle |Δ| max "
        f"{max(angle_errors, default=0.0):.2e} rad, BOXES |Δ| max {max(box_errors, default=0.0):.3f} px "
        f"(past the gains' bound {max(box_excess, default=0.0):+.4f}), "
        f"score |Δ| max {max(score_errors, default=0.0):.2e}"
    )
    assert detections >= SCENES, f"the model found {detections} objects in {len(names)} photos: too few to compare"
    assert min(rotated_ious) >= MIN_ROTATED_IOU and max(angle_errors) <= ANGLE_TOLERANCE
    assert max(box_excess) <= BOX_TOLERANCE and max(score_errors) <= SCORE_TOLERANCE
