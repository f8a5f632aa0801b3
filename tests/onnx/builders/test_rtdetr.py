"""An Ultralytics RT-DETR export brought with ``new-pipeline --from yolo`` answers as ``RTDETR(file).predict``.

RT-DETR's ONNX is ``[N, 300, 6]``, as the end-to-end YOLO rows, but its boxes are the centre and size **normalized** to
the input and its predictor stretches the photo onto the input (``LetterBox(scale_fill=True)``) and clips nothing: the
family knows it by its metadata's ``head: RTDETRDecoder`` and writes the ``rtdetr`` head, the ``yolo_stretch`` resize
and ``clip_to_image: false``. The model is the tests' own RT-DETR at a quarter of ``rtdetr-l``'s width, **untrained**
(``tests/support/ultralytics_rtdetr.py``: one epoch takes about ten minutes on these CPUs): its decoder's real
outputs, its scores' odds lowered in the graph (``yolo_exports.surer``) so that the predictor's 0.25 splits its rows. Its
static and dynamic exports are brought, built, checked and served in process against the predictor on the same file:
per photo the same count, each detection matched by class with box IoU at least ``MIN_BOX_IOU`` (an untrained decoder
gives queries of equal scores, whose order a batch may swap), scores within ``MAX_SCORE_DIFF``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from builders import photos
from builders.families import yolo as yolo_family
from tests.support import yolo, yolo_exports
from vision_serving import layout, model_config
from vision_serving.pipeline_configs import PipelineConfigs
from vision_serving.served import ServedPipeline
from vision_serving.tasks import detection

PIPELINES = {"shapes_rtdetr": "static", "shapes_rtdetr_dynamic": "dynamic"}  # pipeline -> the export it serves
# An untrained decoder scores every query about 0.49: its odds x0.35 put them about the predictor's 0.25 (0.48 -> 0.245,
# 0.54 -> 0.29), so that the threshold keeps some and drops the rest.
ODDS = 0.35
MIN_BOX_IOU = 0.99
MAX_SCORE_DIFF = 1e-3
MIN_DETECTIONS = 10


@pytest.fixture(scope="module")
def model_files(tmp_path_factory) -> dict[str, Path]:
    exports, folder = yolo_exports.rtdetr_exports(), tmp_path_factory.mktemp("rtdetr_exports")
    return {name: yolo_exports.surer(exports / f"{kind}.onnx", folder / f"{name}.onnx", ODDS) for name, kind in PIPELINES.items()}


@pytest.fixture(scope="module")
def brought(model_files, tmp_path_factory) -> tuple[Path, dict[str, str]]:
    repository = tmp_path_factory.mktemp("rtdetr") / "model_repository"
    repository.mkdir()
    said = yolo_exports.bring(model_files, repository)
    assert "ok: " in yolo_exports.run_python("-m", "vision_serving.consistency", "--repository", str(repository))
    return repository, said


def test_the_family_knows_rt_detr_by_its_metadata(brought, model_files):
    repository, said = brought
    for name in PIPELINES:
        assert f"{name}.onnx: rtdetr head, 3 classes (circle, square, triangle), input 128x128, Ultralytics metadata" in said[name]
        pipeline = layout.pipeline(name, repository)
        post = model_config.load_config(pipeline.model_dir("postprocess"))
        assert model_config.parameter(post, "head") == "rtdetr" and model_config.parameter(post, "input_size") == "128,128"
        assert model_config.parameter(post, "clip_to_image") == "false"
        assert model_config.parameter(model_config.load_config(pipeline.model_dir("preprocess")), "resize") == "yolo_stretch"
    # The same rows without RT-DETR's head in the metadata are end2end's (corners in pixels): never mistaken for each other.
    found = yolo_family.inspect(model_files["shapes_rtdetr"])
    assert (found.head, found.head_parameters) == ("rtdetr", (("input_size", "128,128"),))


@pytest.fixture(scope="module")
def pictures(tmp_path_factory) -> dict[str, bytes]:
    scenes = yolo.write_new_scenes(tmp_path_factory.mktemp("scenes"), 10, 51, "rtdetr", lambda rng, h, w, bg: yolo.scene(rng, h, w, bg)[0])
    return {**scenes, **{f"{name}.png": photos.photo_bytes(name) for name in ("astronaut", "coffee")}}


@pytest.fixture(scope="module")
def predicted(model_files, pictures) -> dict[str, dict[str, dict[str, np.ndarray]]]:
    return yolo_exports.references(model_files, pictures, script=yolo_exports.RTDETR_SCRIPT)


@pytest.mark.parametrize("pipeline", sorted(PIPELINES))
def test_the_pipeline_answers_as_rtdetr_predict(pipeline, brought, predicted, pictures):
    repository, _ = brought
    names = sorted(pictures)
    result = ServedPipeline.load(PipelineConfigs.at(repository / pipeline), "cpu").run([pictures[name] for name in names])
    outputs = result.outputs()
    ious, score_errors = [], []
    for index, name in enumerate(names):
        expected = predicted[pipeline][name]
        count = int(outputs["COUNT"][index, 0])
        assert count == len(expected["boxes"]), f"{pipeline} {name}: {count} detections, the predictor {len(expected['boxes'])}"
        # An untrained decoder gives queries of equal scores, whose order a batched run may swap: matched by class and box.
        boxes, classes, scores = outputs["BOXES"][index, :count], outputs["CLASS_IDS"][index, :count], outputs["SCORES"][index, :count]
        matches = detection.match_by_class((boxes, classes), (expected["boxes"], expected["classes"]), MIN_BOX_IOU)
        assert len(matches) == count, f"{pipeline} {name}: {count - len(matches)} of {count} detections unmatched"
        ious += [iou for _, _, iou in matches]
        score_errors += [abs(float(scores[i] - expected["scores"][j])) for i, j, _ in matches]
        np.testing.assert_allclose(np.sort(scores), np.sort(expected["scores"]), atol=MAX_SCORE_DIFF)
    print(
        f"\n{pipeline}: {len(names)} photos, {len(ious)} detections as RTDETR.predict's (count, classes, boxes); "
        f"box IoU min {min(ious, default=1.0):.6f}, score |Δ| max {max(score_errors, default=0.0):.2e}"
    )
    assert len(ious) >= MIN_DETECTIONS, f"{len(ious)} detections in {len(names)} photos: too few to compare"
    assert min(ious) >= MIN_BOX_IOU and max(score_errors) <= MAX_SCORE_DIFF
