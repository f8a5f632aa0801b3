"""builders drift-reference on the real classifier: where it writes, what it holds, idempotence, the CLI."""

from __future__ import annotations

import json

import numpy as np

from builders import cli, drift_reference, provenance
from tests.support.pipelines import built_classifier
from vision_serving import drift, layout


def test_reference_of_the_classifier_is_written_beside_the_served_version():
    pipeline = built_classifier()
    path = drift_reference.build(pipeline.repository, log=lambda message: None)
    assert path == layout.drift_reference_path(pipeline.core_version_dir) == pipeline.drift_reference
    record = json.loads(path.read_text())
    assert record["core_version"] == "1" and record["onnx"] == layout.FP32_ONNX and record["images"] >= 100
    assert set(record["models"]) == {"image_classifier_preprocess", "image_classifier_postprocess"}
    images = drift.load_reference(path, "image_classifier_preprocess")
    assert set(images.numeric) == set(drift.IMAGE_NUMERIC) and set(images.categorical) == {"format"}
    assert all(len(values) == record["images"] for values in images.numeric.values())
    assert 0.1 < images.means["brightness"] < 0.9 and images.means["saturation"] > 0.05
    outputs = drift.load_reference(path, "image_classifier_postprocess")
    assert set(outputs.numeric) == {"confidence", "entropy"} and set(outputs.categorical) == {"predicted_class"}
    assert np.all((outputs.numeric["confidence"] > 0) & (outputs.numeric["confidence"] <= 1))
    # Provenance: the ONNX it was computed with; a second build is a no-op.
    record_of = provenance.read_for(path)
    assert record_of is not None and record_of.step == drift_reference.STEP
    assert record_of.input_hashes["onnx"] == layout.file_sha256(pipeline.onnx("fp32"))
    before = path.stat().st_mtime_ns
    drift_reference.build(pipeline.repository, log=lambda message: None)
    assert path.stat().st_mtime_ns == before


def test_cli_step_reports_up_to_date(capsys):
    built_classifier()
    assert cli.main(["drift-reference", "--pipeline", "image_classifier"]) == 0
    assert "is up to date" in capsys.readouterr().err


def test_cli_unknown_pipeline_is_one_line_exit_2(capsys):
    assert cli.main(["drift-reference", "--pipeline", "no_such_pipeline"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:")
