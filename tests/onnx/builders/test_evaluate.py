"""The accuracy gate: metrics, reports, exit codes, and the INT8 ensemble served with --model-config-name=cpu_int8."""

from __future__ import annotations

import json

import numpy as np
import pytest

from builders import calibration, cli, evaluate
from builders import quantize as q
from devtools.loadgen import free_port
from tests.support.pipelines import REDUCED_GATE, built_classifier, int8_test_repository
from vision_serving import classification, layout, model_config, preprocessing
from vision_serving.image_codec import decode_rgb
from vision_serving.onnx_core import OnnxCore

CLASSIFIER = layout.pipeline("image_classifier")
GOLDEN = {
    "chelsea": {"tiger cat", "Egyptian cat", "tabby"},
    "coffee": {"espresso"},
    "camera": {"tripod"},
}


def test_top_k_and_metrics():
    reference = np.array([[0.0, 5.0, 4.0, 3.0, 2.0, 1.0, -1.0], [9.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0]], dtype=np.float32)
    assert evaluate.top_k(reference).tolist() == [[1, 2, 3, 4, 5], [0, 6, 5, 4, 3]]
    same = evaluate.compare_logits(reference, reference)
    assert same["top1_agreement"] == same["top5_overlap"] == 1.0 and same["cosine_mean"] == pytest.approx(1.0)
    swapped = reference.copy()
    swapped[0, [1, 2]] = swapped[0, [2, 1]]  # top-1 changes, same top-5 set
    swapped[1, 6] = -9.0  # second row: class 6 leaves the top-5
    metrics = evaluate.compare_logits(reference, swapped)
    assert metrics["top1_agreement"] == 0.5
    assert metrics["top5_overlap"] == pytest.approx((5 / 5 + 4 / 5) / 2)
    assert metrics["top1_in_reference_top5"] == 1.0


def test_gate_checks_each_threshold():
    metrics = {"top1_agreement": 0.96, "top5_overlap": 0.89, "cosine_mean": 0.99}
    result = evaluate.gate(metrics, evaluate.Thresholds())
    assert not result["pass"]
    assert [name for name, check in result["checks"].items() if not check["pass"]] == ["top5_overlap"]
    assert "cosine_mean" not in evaluate.gate(metrics, evaluate.Thresholds(), with_cosine=False)["checks"]


def test_golden_labels_are_the_recipes():
    from builders import recipe

    assert {name: set(labels) for name, labels in recipe.load(CLASSIFIER).golden.items()} == GOLDEN


def test_evaluation_set_is_held_out_and_deterministic():
    repository = CLASSIFIER.repository
    calibration_photos, evaluation_photos = calibration.photo_split(repository)
    first = evaluate.evaluation_set(repository, augmented_per_photo=2)
    again = evaluate.evaluation_set(repository, augmented_per_photo=2)
    assert [s.data for s in first.all] == [s.data for s in again.all]
    assert {s.source for s in first.all} <= set(evaluation_photos)
    assert not {s.source for s in first.all} & set(calibration_photos)
    assert len(first.raw) == len(calibration.evaluation_sources(repository)) and len(first.augmented) == 2 * len(first.raw)
    assert all(s.transform.get("original") for s in first.raw) and not any(s.transform.get("original") for s in first.augmented)
    # Different transforms and seed from calibration: no augmented evaluation image equals a calibration one.
    _, limits = calibration.served_preprocessing(repository)
    calibration_bytes = {
        s.data
        for s in calibration.make_samples(
            calibration.calibration_sources(repository), 48, calibration.CALIBRATION_SEED, calibration.CALIBRATION_PROFILE, limits
        )
    }
    assert not calibration_bytes & {s.data for s in first.all}


@pytest.fixture(scope="module")
def classifier() -> layout.Pipeline:
    return built_classifier()


def test_fp32_against_itself_passes_and_reports(classifier, tmp_path):
    fp32 = q.fp32_path(classifier.repository)
    assert fp32 == classifier.onnx("fp32")
    report = evaluate.evaluate(classifier.repository, int8=fp32, augmented_per_photo=1, reports_dir=tmp_path, log=lambda _: None)
    assert report["gate"]["pass"]
    assert report["metrics"]["all"]["top1_agreement"] == 1.0
    assert set(report["metrics"]) == {"raw", "augmented", "all"}
    saved = json.loads((tmp_path / "int8_evaluation.json").read_text())
    assert saved["gate"] == report["gate"] and saved["evaluation_set"]["photos"] == [p["photo"] for p in report["photos"]]
    assert saved["evaluation_set"]["calibration_photos_excluded"] == list(calibration.photo_split(classifier.repository)[0])
    assert "| chelsea | tiger cat |" in (tmp_path / "int8_evaluation.md").read_text()


def test_failed_gate_exits_1_with_a_report(classifier, tmp_path, capsys):
    fp32 = str(q.fp32_path(classifier.repository))
    argv = [
        "evaluate",
        "--pipeline",
        classifier.name,
        "--int8",
        fp32,
        "--augmented-per-photo",
        "0",
        "--min-top1",
        "1.01",
        "--reports-dir",
        str(tmp_path),
    ]
    assert cli.main(argv) == 1
    assert "error: INT8 accuracy gate failed on 11 held-out images: top1_agreement 1.0000 < 1.01" in capsys.readouterr().err
    assert (tmp_path / "int8_evaluation.md").read_text().startswith("# INT8 accuracy gate: FAIL")


def test_missing_int8_model_is_a_usage_error(tmp_path, capsys):
    argv = ["evaluate", "--pipeline", CLASSIFIER.name, "--int8", str(tmp_path / "missing.onnx"), "--reports-dir", str(tmp_path)]
    assert cli.main(argv) == 2
    assert "run `python -m builders quantize` first" in capsys.readouterr().err


# --------------------------------------------------------------------------- served INT8 (integration)


@pytest.fixture(scope="module")
def int8_server(built_repository, tmp_path_factory):
    """tritonserver with --model-config-name=cpu_int8: core from configs/cpu_int8.pbtxt, the rest from config.pbtxt.

    Yields the server and the served copy of the image_classifier pipeline (a layout.Pipeline)."""
    from devtools.triton_server import LocalTritonServer

    pipeline = int8_test_repository(built_repository)
    log_file = tmp_path_factory.mktemp("triton-int8") / "tritonserver.log"
    server = LocalTritonServer(
        http_port=free_port(),
        grpc_port=free_port(),
        metrics_port=free_port(),
        config_name="cpu_int8",
        model_repository=pipeline.repository.parent,
        log_file=log_file,
    )
    server.start()
    try:
        server.wait_ready(timeout_s=240)
        yield server, pipeline
    finally:
        server.stop()


def _infer(server, images: list[bytes]):
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(server.grpc_url)
    image_input = grpcclient.InferInput("IMAGE", [len(images), 1], "BYTES")
    image_input.set_data_from_numpy(np.array(images, dtype=np.object_).reshape(-1, 1))
    result = client.infer(CLASSIFIER.name, [image_input])
    return result.as_numpy("LABELS"), result.as_numpy("SCORES"), result.as_numpy("CLASS_IDS")


@pytest.mark.integration
def test_config_name_selects_int8_core_and_falls_back_for_the_rest(int8_server):
    import tritonclient.grpc as grpcclient

    server, pipeline = int8_server
    client = grpcclient.InferenceServerClient(server.grpc_url)
    core = client.get_model_config(pipeline.model_name("core"), as_json=True)["config"]
    assert core["parameters"]["onnx_file"]["string_value"] == q.INT8_FILENAME
    assert core["parameters"]["graph_optimization"]["string_value"] == "disable_all"
    # No configs/cpu_int8.pbtxt in these models: Triton 2.51 loaded their config.pbtxt.
    for folder in (pipeline.model_dir("preprocess"), pipeline.model_dir("postprocess"), pipeline.ensemble_dir):
        name = folder.name
        assert not (folder / "configs" / "cpu_int8.pbtxt").exists()
        assert client.is_model_ready(name)
        served = client.get_model_config(name, as_json=True)["config"]
        expected = model_config.load_config(folder)
        assert served["name"] == expected.name and int(served.get("max_batch_size", 0)) == expected.max_batch_size
    preprocess = client.get_model_config(pipeline.model_name("preprocess"), as_json=True)["config"]
    assert preprocess["parameters"]["resize_shorter_side"]["string_value"] == "256"


@pytest.mark.integration
@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_int8_ensemble_keeps_the_golden_labels(int8_server, photo_bytes, name):
    labels, scores, _ = _infer(int8_server[0], [photo_bytes[name]])
    assert labels[0, 0].decode() in GOLDEN[name], labels[0].tolist()
    assert np.all(np.diff(scores[0]) <= 0)


@pytest.mark.integration
def test_served_scores_are_the_int8_models(int8_server, photo_bytes):
    """What the server answers is the INT8 model's output (Q/DQ emulation), not the FP32 model's."""
    server, pipeline = int8_server
    names = ["chelsea", "coffee", "camera", "astronaut"]
    _, scores, class_ids = _infer(server, [photo_bytes[n] for n in names])
    config = model_config.load_config(pipeline.model_dir("preprocess"))
    limits = preprocessing.limits_from_config(config)
    batch = preprocessing.preprocess_batch(
        [decode_rgb(photo_bytes[n], limits) for n in names], preprocessing.PreprocessSpec.from_config(config)
    )
    labels = classification.load_labels(pipeline.model_dir("postprocess") / "labels.txt", 1000)
    expected = {}
    for variant in ("cpu_int8", "cpu"):
        core = OnnxCore(model_config.load_config(pipeline.core_dir, variant), pipeline.core_version_dir)
        (logits,) = core.run({core.input_names[0]: batch})
        expected[variant] = classification.top_k(logits, [5] * len(names), labels)
    for row in range(len(names)):
        assert class_ids[row].tolist() == expected["cpu_int8"][row].class_ids.tolist()
        np.testing.assert_allclose(scores[row], expected["cpu_int8"][row].scores, atol=1e-4)
    differences = [np.abs(scores[row] - expected["cpu"][row].scores).max() for row in range(len(names))]
    assert max(differences) > 1e-3  # the FP32 core would have answered differently


@pytest.mark.integration
def test_gate_through_the_served_ensemble(int8_server, tmp_path):
    server, pipeline = int8_server
    thresholds = evaluate.Thresholds(**REDUCED_GATE)  # the reduced calibration's model, as in test_quantize
    report = evaluate.evaluate(
        pipeline.repository,
        server_url=server.grpc_url,
        augmented_per_photo=4,
        thresholds=thresholds,
        reports_dir=tmp_path,
        log=lambda _: None,
    )
    assert report["mode"] == "server" and report["gate"]["pass"], report["gate"]
    assert "cosine_mean" not in report["gate"]["checks"]
    assert (tmp_path / "int8_evaluation_server.md").is_file()
