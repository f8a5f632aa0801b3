"""The accuracy gate: metrics, reports and exit codes (the INT8 ensemble served: tests/integration/test_int8_served.py)."""

from __future__ import annotations

import json

import pytest

from builders import BuildError, calibration, cli, evaluate, loaded
from tests.support.pipelines import built_classifier
from vision_serving import layout

CLASSIFIER = layout.pipeline("image_classifier")
GOLDEN = {
    "chelsea": {"tiger cat", "Egyptian cat", "tabby"},
    "coffee": {"espresso"},
    "camera": {"tripod"},
}


def test_golden_labels_are_the_recipes():
    assert {name: set(labels) for name, labels in loaded.load(CLASSIFIER).recipe.golden.items()} == GOLDEN


def test_evaluation_set_is_held_out_and_deterministic():
    pipeline = loaded.load(CLASSIFIER)
    calibration_photos, evaluation_photos = calibration.photo_split(pipeline)
    first = evaluate.evaluation_set(pipeline, augmented_per_photo=2)
    again = evaluate.evaluation_set(pipeline, augmented_per_photo=2)
    assert [s.data for s in first.all] == [s.data for s in again.all]
    assert {s.source for s in first.all} <= set(evaluation_photos)
    assert not {s.source for s in first.all} & set(calibration_photos)
    assert len(first.raw) == len(calibration.evaluation_sources(pipeline)) and len(first.augmented) == 2 * len(first.raw)
    assert all(s.transform.get("original") for s in first.raw) and not any(s.transform.get("original") for s in first.augmented)
    # Different transforms and seed from calibration: no augmented evaluation image equals a calibration one.
    calibration_bytes = {
        s.data
        for s in calibration.make_samples(
            calibration.calibration_sources(pipeline),
            48,
            calibration.CALIBRATION_SEED,
            calibration.CALIBRATION_PROFILE,
            pipeline.configs.limits,
        )
    }
    assert not calibration_bytes & {s.data for s in first.all}


def test_gate_overrides_are_key_value_numbers():
    assert evaluate.gate_overrides(["min_top1=0.9", "min_cosine=0.5"]) == {"min_top1": 0.9, "min_cosine": 0.5}
    with pytest.raises(BuildError, match="expected KEY=NUMBER"):
        evaluate.gate_overrides(["min_top1"])


@pytest.fixture(scope="module")
def classifier() -> layout.Pipeline:
    return built_classifier()


def test_fp32_against_itself_passes_and_reports(classifier, tmp_path):
    pipeline = loaded.load(classifier)
    fp32 = classifier.onnx("fp32")
    report = evaluate.evaluate(pipeline, candidate=fp32, augmented_per_photo=1, reports_dir=tmp_path, log=lambda _: None)
    assert report["gate"]["pass"] and report["task"] == "classification"
    assert report["sets"]["all"]["metrics"]["top1_agreement"] == 1.0
    assert set(report["sets"]) == {"raw", "all"} and set(report["gate"]["checks"]) == {"top1_agreement", "top5_overlap", "cosine_mean"}
    saved = json.loads((tmp_path / "evaluation.json").read_text())
    assert saved["gate"] == report["gate"] and len(saved["evaluation_set"]["photos"]) == len(calibration.evaluation_sources(pipeline))
    assert saved["evaluation_set"]["calibration_photos_excluded"] == list(calibration.photo_split(pipeline)[0])
    assert "| all | top1_agreement | 1.0000 |" in (tmp_path / "evaluation.md").read_text()


def test_failed_gate_exits_1_with_a_report(classifier, tmp_path, capsys):
    fp32 = str(classifier.onnx("fp32"))
    argv = ["evaluate", "--pipeline", classifier.name, "--candidate", fp32, "--augmented-per-photo", "0", "--gate", "min_top1=1.01"]
    assert cli.main([*argv, "--reports-dir", str(tmp_path)]) == 1
    assert "error: the precision gate failed on 11 held-out images: top1_agreement 1.0000 < 1.01" in capsys.readouterr().err
    assert (tmp_path / "evaluation.md").read_text().startswith("# Precision gate of image_classifier (classification): FAIL")
    assert cli.main([*argv[:-1], "min_iou=1", "--reports-dir", str(tmp_path)]) == 2
    assert "--gate: unknown key(s) min_iou; this task's gate has min_cosine, min_top1, min_top5" in capsys.readouterr().err


def test_missing_int8_model_is_a_usage_error(tmp_path, capsys):
    argv = ["evaluate", "--pipeline", CLASSIFIER.name, "--candidate", str(tmp_path / "missing.onnx"), "--reports-dir", str(tmp_path)]
    assert cli.main(argv) == 2
    assert "run `python -m builders quantize` first" in capsys.readouterr().err


# --------------------------------------------------------------------------- served INT8 (integration)
