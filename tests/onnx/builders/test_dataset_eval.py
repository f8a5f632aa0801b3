"""builders.dataset_eval: a user's labelled folder, FP32 against the served precision (onnxruntime)."""

from __future__ import annotations

import json
import shutil

import cv2
import numpy as np
import pytest

from builders import cli, dataset_eval, loaded, photos
from builders.artifacts import sha256_file
from tests.support.pipelines import built_classifier
from vision_serving import layout
from vision_serving.pipeline_configs import PipelineConfigs
from vision_serving.tasks import segmentation


@pytest.fixture(scope="module")
def classifier_with_served_fp32(tmp_path_factory) -> layout.Pipeline:
    """A copy of the classifier whose ladder chose FP32 (no quantization needed for the plumbing)."""
    source = built_classifier()
    root = tmp_path_factory.mktemp("dataset") / "model_repository"
    shutil.copytree(source.repository, root / source.name, ignore=shutil.ignore_patterns("*int8*", "served_precision.json"))
    pipeline = layout.pipeline(source.name, root)
    record = {"precision": "fp32", "onnx": layout.FP32_ONNX, "onnx_sha256": sha256_file(pipeline.onnx("fp32"))}
    pipeline.served_precision.write_text(json.dumps(record))
    return pipeline


def write_class_folders(directory, assignments: dict[str, list[str]]) -> None:
    for label, names in assignments.items():
        (directory / label).mkdir(parents=True)
        for name in names:
            shutil.copy(photos.photo_path(name), directory / label / photos.photo_path(name).name)


def test_classification_accuracy_on_class_folders(classifier_with_served_fp32, tmp_path):
    write_class_folders(tmp_path, {"espresso": ["coffee"], "tiger cat": ["chelsea"], "282": [], "tripod": ["camera", "rocket"]})
    report = dataset_eval.evaluate_dataset(loaded.load(classifier_with_served_fp32), tmp_path, log=lambda _: None)
    assert report["images"] == 4 and report["served_precision"] == "fp32"
    # coffee, chelsea and camera are right; the rocket is not a tripod.
    assert report["metrics"]["fp32"]["top1_accuracy"] == pytest.approx(0.75)
    assert (classifier_with_served_fp32.reports_dir / "dataset.md").read_text().startswith("# image_classifier on")


def test_unknown_class_folder_is_one_clear_error(classifier_with_served_fp32, tmp_path, capsys):
    write_class_folders(tmp_path, {"no such label": ["coffee"]})
    code = cli.main(["evaluate", "--model-repository", str(classifier_with_served_fp32.repository.parent), "--dataset", str(tmp_path)])
    assert code == 2
    assert (
        capsys.readouterr().err.strip()
        == f"error: {tmp_path / 'no such label'}: the folder name is neither a label of the model nor a class id"
    )


def test_segmentation_pairs_are_read_and_checked(tmp_path):
    image = tmp_path / "a.png"
    shutil.copy(photos.photo_path("astronaut"), image)
    mask = np.zeros((512, 512), dtype=np.uint8)
    mask[100:300, 100:300] = 255
    cv2.imwrite(str(tmp_path / "a.mask.png"), mask)
    postprocessor = PipelineConfigs.load(layout.pipeline("person_segmenter")).postprocessor()
    (sample,) = segmentation.TASK.dataset(tmp_path, postprocessor)
    assert sample.path == image and sample.target.dtype == bool and sample.target.sum() == 200 * 200
    shutil.copy(photos.photo_path("coffee"), tmp_path / "b.png")
    with pytest.raises(ValueError, match=r"no mask b\.mask\.png"):
        segmentation.TASK.dataset(tmp_path, postprocessor)
