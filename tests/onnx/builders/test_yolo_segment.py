"""An Ultralytics instance segmenter brought with ``new-pipeline --from yolo`` answers as Ultralytics' predictor does.

A YOLOv8n-seg trained here on drawn shapes (tests/support/yolo_segment.py; cached under
``.build/test-yolo/``), its static and dynamic exports each brought into a model repository of the
test's own (``python -m builders new-pipeline NAME --from yolo --model FILE``), built (``python -m
builders export``) and checked (``python -m vision_serving.consistency``), then run in process as
served (decode, letterbox, the CPU core, the postprocess), against Ultralytics' predictor on the
same export file (``retina_masks=True``: masks at the photo's size) on scenes the model never saw and
package photos: per photo the same count and classes, in the same order, each box's IoU with the
reference's at least ``MIN_BOX_IOU`` and each mask's (its PNG placed at its MASK_BOXES in a canvas of
the photo's size) at least ``MIN_MASK_IOU``. Ultralytics drops a detection whose mask holds no
pixel; the pipeline keeps it with an empty mask, so those are left out of the comparison (and
counted). The figures are printed (``pytest -s``).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from builders import photos
from tests.support import yolo_exports, yolo_segment
from vision_serving import layout
from vision_serving.pipeline_configs import PipelineConfigs
from vision_serving.served import ServedPipeline
from vision_serving.tasks.detection import DetectionResult, box_iou
from vision_serving.tasks.segmentation import iou

PIPELINES = {"shapes_segment": "static", "shapes_segment_dynamic": "dynamic"}  # pipeline -> the export it serves
PACKAGE_PHOTOS = ("chelsea", "coffee")
SCENES = 24
MIN_DETECTIONS = 10  # found in the photos by both: enough to compare
MIN_BOX_IOU = 0.98
MIN_MASK_IOU = 0.95


def run(*args: str) -> str:
    """``python ARGS`` in the project's root; its stdout and stderr."""
    result = subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=layout.REPOSITORY_ROOT, timeout=1800)
    assert result.returncode == 0, f"{' '.join(args)} exited {result.returncode}:\n{result.stdout[-3000:]}\n{result.stderr[-5000:]}"
    return result.stdout + result.stderr


@pytest.fixture(scope="module")
def trained() -> Path:
    return yolo_segment.trained()


@pytest.fixture(scope="module")
def repository(tmp_path_factory, trained) -> Path:
    """The test's model repository: each export brought and built."""
    folder = tmp_path_factory.mktemp("segment") / "model_repository"
    folder.mkdir()
    for name, export in PIPELINES.items():
        model = str(trained / f"{export}.onnx")
        log = run("-m", "builders", "new-pipeline", name, "--from", "yolo", "--model", model, "--model-repository", str(folder))
        assert f"{export}.onnx: yolo_segment head, 3 classes (disc, square, triangle), input 128x128" in log
        run("-m", "builders", "export", "--pipeline", name, "--model-repository", str(folder))
    return folder


def test_the_repository_is_consistent(repository):
    run("-m", "vision_serving.consistency", "--repository", str(repository))


@pytest.fixture(scope="module")
def images() -> dict[str, bytes]:
    return {
        **yolo_segment.write_scenes(SCENES, seed=11),
        **{photos.photo_path(name).name: photos.photo_bytes(name) for name in PACKAGE_PHOTOS},
    }


@pytest.fixture(scope="module")
def predicted(trained, images) -> dict[str, dict[str, dict[str, np.ndarray]]]:
    """Ultralytics' predictor on the export each pipeline serves (one run for both)."""
    return yolo_exports.references({name: trained / f"{export}.onnx" for name, export in PIPELINES.items()}, images, task="segment")


@pytest.mark.parametrize("pipeline", sorted(PIPELINES))
def test_the_pipeline_answers_as_ultralytics_predictor(pipeline, repository, predicted, images):
    names = sorted(images)
    served = ServedPipeline.load(PipelineConfigs.at(repository / pipeline), "cpu")
    result = served.run([images[name] for name in names])
    assert isinstance(result, DetectionResult)
    outputs = result.outputs()
    reference = predicted[pipeline]
    box_ious: list[float] = []
    mask_ious: list[float] = []
    empty = 0
    for index, name in enumerate(names):
        expected = reference[name]
        height, width = (int(v) for v in result.sizes[index])
        count = int(outputs["COUNT"][index, 0])
        masks = [yolo_segment.placed(outputs["MASKS"][index, k], outputs["MASK_BOXES"][index, k], height, width) for k in range(count)]
        kept = [k for k in range(count) if masks[k].any()]  # Ultralytics drops a detection without mask pixels
        empty += count - len(kept)
        assert len(kept) == len(expected["boxes"]), f"{pipeline} {name}: {len(kept)} detections, Ultralytics {len(expected['boxes'])}"
        assert outputs["CLASS_IDS"][index, kept].tolist() == expected["classes"].tolist(), name
        assert expected["masks"].shape == (len(kept), height, width), name
        for row, k in enumerate(kept):
            box_ious.append(float(box_iou(outputs["BOXES"][index, k], expected["boxes"][row])[0, 0]))
            mask_ious.append(iou(masks[k], expected["masks"][row]))
    detections = len(box_ious)
    print(
        f"\n{pipeline}: {len(names)} photos, {detections} detections as Ultralytics' ({empty} without mask pixels left out), "
        f"box IoU min {min(box_ious, default=1.0):.4f} mean {np.mean(box_ious) if box_ious else 1.0:.4f}, "
        f"mask IoU min {min(mask_ious, default=1.0):.4f} mean {np.mean(mask_ious) if mask_ious else 1.0:.4f}"
    )
    assert detections >= MIN_DETECTIONS, f"the model found {detections} objects in {len(names)} photos: too few to compare"
    assert min(box_ious) >= MIN_BOX_IOU and min(mask_ious) >= MIN_MASK_IOU
